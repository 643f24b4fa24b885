"""Stored upstream tokens are refreshed ahead of expiry, once per token across replicas.

The upstream ``oidc-provider`` instances here issue access tokens that live 4 seconds, so
that scheduled refreshes really happen during a test; the refresh margin is a third of the
lifetime (jittered), so each token is refreshed about 2.7 seconds after it was issued (and
again 2.7 seconds after that: longer than a login takes, so a test sees one round at a time).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import yaml

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key
from vmcp_trio.authserver.storage import StoredUpstream

from .authserver_helpers import Stack, as_docs, chained_upstreams, claims_of, mcp_status, tokens
from .fixtures.idp import Idp
from .fixtures.redis_cluster import running_redis_cluster
from .gateway_helpers import RawClient, running_gateway
from .helpers import ROOT, free_port, stop_process

TTL = 4


@pytest.fixture(scope="module")
def short_lived() -> Iterator[tuple[int, Idp, Idp]]:
    with chained_upstreams(access_token_ttl=TTL) as started:
        yield started


async def stored(gateway: GatewayProcess, session: str, provider: str) -> StoredUpstream | None:
    assert gateway.authserver is not None
    return await gateway.authserver.storage.get_upstream(session, provider)


async def test_tokens_are_refreshed_before_they_expire(short_lived: tuple[int, Idp, Idp]) -> None:
    port, corp, hub = short_lived
    issuer = f"http://127.0.0.1:{port}"
    async with running_gateway(as_docs(issuer, corp, hub), port=port) as (url, gateway):
        _, answer, _ = await tokens(Stack(issuer, url, corp, hub, gateway))
        session = claims_of(answer["access_token"])["tsid"]
        first = await stored(gateway, session, "corp")
        assert first is not None and first.expires_at is not None
        with trio.fail_after(TTL + 4):
            while True:
                now = await stored(gateway, session, "corp")
                assert now is not None
                if now.access_token != first.access_token:
                    break
                await trio.sleep(0.1)
        assert now.expires_at is not None and now.expires_at > first.expires_at
        assert now.refresh_token  # kept (or rotated) for the next round
        assert gateway.authserver is not None and gateway.authserver.refresher.refreshes >= 1


async def test_two_replicas_refresh_each_token_once(short_lived: tuple[int, Idp, Idp],
                                                    tmp_path: Path) -> None:
    """Two vmcp processes (this test's and a ``vmcp serve`` subprocess) on one Redis: the lock
    and the re-read after it make exactly one refresh per token per round, counted by
    ``vmcp_upstream_refreshes_total`` of both."""
    port, corp, hub = short_lived
    issuer = f"http://127.0.0.1:{port}"
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with running_redis_cluster(tmp_path) as cluster:
        storage = {"type": "redis", "redis": {"sentinelConfig": {
            "masterName": cluster.master_name, "sentinelAddrs": cluster.sentinel_addrs()}}}
        docs = as_docs(issuer, corp, hub, storage=storage, keys=keys)
        config = tmp_path / "replica.yaml"
        config.write_text(yaml.safe_dump_all(docs))
        other_port = free_port()
        replica = subprocess.Popen(
            [sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
             "--config", str(config), "--port",
             str(other_port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=ROOT)
        try:
            assert replica.stdout is not None
            with trio.fail_after(30):
                while "MCP endpoint" not in await trio.to_thread.run_sync(
                        replica.stdout.readline):
                    pass
            async with running_gateway(docs, port=port) as (url, a):
                _, answer, _ = await tokens(Stack(issuer, url, corp, hub, a))
                session = claims_of(answer["access_token"])["tsid"]
                firsts = {p: await stored(a, session, p) for p in ("corp", "hub")}
                with trio.fail_after(TTL + 4):
                    while True:
                        current = {p: await stored(a, session, p) for p in ("corp", "hub")}
                        if all(current[p].access_token != firsts[p].access_token  # type: ignore[union-attr]
                               for p in current):
                            break
                        await trio.sleep(0.05)
                here = await refreshes_counted(url)
                there = await refreshes_counted(f"http://127.0.0.1:{other_port}/mcp")
                assert here + there == 2, (here, there)
        finally:
            stop_process(replica)


async def refreshes_counted(url: str) -> float:
    client = RawClient(url)
    try:
        _, _, body = await client.http.request("GET", url.removesuffix("/mcp") + "/metrics")
    finally:
        await client.aclose()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("vmcp_upstream_refreshes_total{") and 'outcome="ok"' in line)


async def test_a_refused_refresh_token_makes_the_client_log_in_again(
        short_lived: tuple[int, Idp, Idp]) -> None:
    """The user's corp refresh token is revoked at corp: at the next scheduled refresh vmcp
    ends the session, and the client's next request is 401 with a challenge."""
    port, corp, hub = short_lived
    issuer = f"http://127.0.0.1:{port}"
    async with running_gateway(as_docs(issuer, corp, hub), port=port) as (url, gateway):
        _, answer, _ = await tokens(Stack(issuer, url, corp, hub, gateway))
        session = claims_of(answer["access_token"])["tsid"]
        corp_tokens = await stored(gateway, session, "corp")
        assert corp_tokens is not None and corp_tokens.refresh_token
        await trio.to_thread.run_sync(corp.revoke, corp_tokens.refresh_token)
        with trio.fail_after(TTL + 4):
            while await mcp_status(Stack(issuer, url, corp, hub, gateway),
                                   answer["access_token"]) != 401:
                await trio.sleep(0.2)
        client = RawClient(url)
        client.token = answer["access_token"]
        try:
            reply = await client.initialize()
        finally:
            await client.aclose()
        assert reply.status == 401
        assert 'error="invalid_token"' in reply.headers["www-authenticate"]
        assert await stored(gateway, session, "corp") is None
