"""The authorization server on Redis Sentinel: restarts, failover, and what Redis holds.

Redis here is real: one master, one replica and three sentinels (``tests/fixtures/
redis_cluster.py``, Debian's redis-server and redis-sentinel), fresh per test. The upstreams are
the two ``oidc-provider`` instances of the other authorization server tests.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key

from .authserver_helpers import (
    CLIENT_REDIRECT,
    Stack,
    as_docs,
    call,
    document_server,
    login_as_document_client,
    mcp_status,
    stack_of,
    tokens,
)
from .fixtures.idp import Idp
from .fixtures.redis_cluster import (
    RedisCluster,
    redis_command,
    running_cluster_mode,
    running_redis,
    running_redis_cluster,
)
from .gateway_helpers import running_gateway
from .helpers import free_port, private_ca


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with running_redis_cluster(tmp_path, password="s3cret-redis") as redis:
        yield redis


def redis_storage(cluster: RedisCluster) -> dict[str, Any]:
    return {"type": "redis", "redis": {
        "sentinelConfig": {"masterName": cluster.master_name,
                           "sentinelAddrs": cluster.sentinel_addrs()},
        "aclUserConfig": {"passwordSecretRef": {"name": "redis", "key": "password"}},
        "dialTimeout": "1s", "readTimeout": "1s", "writeTimeout": "1s"}}


def docs_for(upstreams: tuple[int, Idp, Idp], cluster: RedisCluster,
             keys: tuple[str, str]) -> list[dict[str, Any]]:
    port, corp, hub = upstreams
    docs = as_docs(f"http://127.0.0.1:{port}", corp, hub, storage=redis_storage(cluster),
                   keys=keys)
    docs.insert(0, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis"},
                    "stringData": {"password": str(cluster.password)}})
    return docs


def redis_keys(cluster: RedisCluster) -> list[str]:
    host, port = cluster.current_master()
    out = subprocess.run(["redis-cli", "-h", host, "-p", str(port), "--no-auth-warning", "-a",
                          str(cluster.password), "--scan"], capture_output=True, text=True,
                         timeout=10, check=True)
    return out.stdout.split()


def redis_get(cluster: RedisCluster, key: str) -> str:
    host, port = cluster.current_master()
    out = subprocess.run(["redis-cli", "-h", host, "-p", str(port), "--no-auth-warning", "-a",
                          str(cluster.password), "GET", key], capture_output=True, text=True,
                         timeout=10, check=True)
    return out.stdout


async def refresh(stack: Stack, client_id: str, token: str) -> tuple[int, dict[str, Any]]:
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": token, "client_id": client_id})
    return status, answer


async def test_a_restart_keeps_tokens_with_persistent_keys(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster) -> None:
    """Same keys and HMAC secrets, Redis storage: after a restart the access token still works
    and the refresh token still refreshes. What Redis holds is prefixed per VirtualMCPServer and
    the upstream tokens in it are sealed (no token in clear)."""
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    port = upstreams[0]
    docs = docs_for(upstreams, cluster, keys)
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = stack_of(upstreams, url, gateway)
        client_id, answer, _ = await tokens(stack)
        assert await mcp_status(stack, answer["access_token"]) == 200
    stored = await trio.to_thread.run_sync(redis_keys, cluster)
    assert stored and all(k.startswith("vmcp:auth:{default:quickstart}:") for k in stored)
    upstream_rows = [k for k in stored if ":upstream:" in k]
    assert {k.rsplit(":", 1)[1] for k in upstream_rows} == {"corp", "hub"}
    sealed = await trio.to_thread.run_sync(redis_get, cluster, upstream_rows[0])
    assert "access_token" not in sealed and "eyJ" not in sealed

    async with running_gateway(docs, port=port) as (url, gateway):
        stack = stack_of(upstreams, url, gateway)
        assert await mcp_status(stack, answer["access_token"]) == 200
        status, rotated = await refresh(stack, client_id, answer["refresh_token"])
        assert status == 200, rotated
        assert await mcp_status(stack, rotated["access_token"]) == 200


async def test_a_restart_with_ephemeral_keys_means_a_clean_relogin(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster) -> None:
    port = upstreams[0]
    docs = docs_for(upstreams, cluster, ("", ""))
    async with running_gateway(docs, port=port) as (url, gateway):
        client_id, answer, _ = await tokens(stack_of(upstreams, url, gateway))
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = stack_of(upstreams, url, gateway)
        assert await mcp_status(stack, answer["access_token"]) == 401
        status, refused = await refresh(stack, client_id, answer["refresh_token"])
        assert status == 400 and refused["error"] == "invalid_grant"
        _, again, _ = await tokens(stack)
        assert await mcp_status(stack, again["access_token"]) == 200


async def test_a_sentinel_failover_during_logins_and_refreshes_loses_nothing(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster) -> None:
    """kill -9 of the Redis master while refresh tokens rotate: requests during the failover
    may get 503 (and are retried, as a client would), but every rotation that was answered
    survives: the newest refresh token of each family still refreshes afterwards, and logins
    work again on the new master."""
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    port = upstreams[0]
    async with running_gateway(docs_for(upstreams, cluster, keys), port=port) as (url, gateway):
        stack = stack_of(upstreams, url, gateway)
        families = []
        for _ in range(3):
            client_id, answer, _ = await tokens(stack)
            families.append([client_id, answer["refresh_token"]])
        unavailable = 0
        killed = False

        async def rotate_all(rounds: int) -> None:
            nonlocal unavailable
            for _ in range(rounds):
                for family in families:
                    status, answer = await refresh(stack, family[0], family[1])
                    if status == 503:
                        unavailable += 1
                        await trio.sleep(0.2)
                        continue
                    assert status == 200, answer
                    family[1] = answer["refresh_token"]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(rotate_all, 12)
            await trio.sleep(0.5)
            old = await trio.to_thread.run_sync(cluster.kill_master)
            killed = True
            await trio.to_thread.run_sync(cluster.wait_for_failover, old)
        assert killed
        storage = gateway.authserver.storage  # type: ignore[union-attr]
        with trio.fail_after(10):
            while storage.failovers == 0:  # type: ignore[attr-defined]
                await trio.sleep(0.1)
        for client_id, token in families:
            status, answer = await refresh(stack, client_id, token)
            assert status == 200, answer
        _, fresh, _ = await tokens(stack)
        assert await mcp_status(stack, fresh["access_token"]) == 200


async def test_redis_away_gives_a_clear_503(upstreams: tuple[int, Idp, Idp],
                                            tmp_path: Path) -> None:
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    port = upstreams[0]
    with running_redis_cluster(tmp_path, password="pw-of-redis") as cluster:
        docs = docs_for(upstreams, cluster, keys)
        async with running_gateway(docs, port=port) as (url, gateway):
            stack = stack_of(upstreams, url, gateway)
            with trio.fail_after(15):  # ready once the backends' first checks passed
                while (await call(stack, "GET", "/readyz"))[0] != 200:
                    await trio.sleep(0.1)
            await trio.to_thread.run_sync(cluster.stop)
            with trio.fail_after(15):
                status, headers, answer = await call(stack, "POST", "/oauth/register", body={
                    "redirect_uris": ["http://127.0.0.1:9/callback"]})
            assert status == 503 and headers["retry-after"] == "5"
            assert answer["error"] == "temporarily_unavailable"
            assert "Redis" in answer["error_description"]
            assert "pw-of-redis" not in answer["error_description"]
            # Readiness tells the truth, and keeps the replica in the balancer: every replica
            # shares that Redis, and access tokens already issued still work.
            with trio.fail_after(15):
                status, _, ready = await call(stack, "GET", "/readyz")
            assert status == 200 and ready["status"] == "degraded"
            assert ready["degraded"]["storage"].startswith("the token storage is unreachable: "
                                                           "Redis")
            assert "pw-of-redis" not in str(ready)


async def test_a_revocation_reaches_every_replica(upstreams: tuple[int, Idp, Idp],
                                                  cluster: RedisCluster) -> None:
    """Two vmcp replicas share one issuer, keys and Redis (behind a load balancer in real
    life). A token works at both; revoked at one, it stops working at the other at once (the
    revocations channel), even where it was already cached, and a replica started after the
    revocation refuses it too (the shared record)."""
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    port = upstreams[0]
    docs = docs_for(upstreams, cluster, keys)
    async with running_gateway(docs, port=port) as (url_a, gateway_a), \
            running_gateway(docs, port=free_port()) as (url_b, gateway_b):
        a, b = stack_of(upstreams, url_a, gateway_a), stack_of(upstreams, url_b, gateway_b)
        client_id, answer, _ = await tokens(a)
        other_client, unseen, _ = await tokens(a)
        assert await mcp_status(b, answer["access_token"]) == 200  # now cached at b
        for client, token in ((client_id, answer), (other_client, unseen)):
            status, _, _ = await call(a, "POST", "/oauth/revoke", form={
                "token": token["refresh_token"], "client_id": client})
            assert status == 200
        with trio.fail_after(5):
            while await mcp_status(b, answer["access_token"]) != 401:
                await trio.sleep(0.1)
        assert await mcp_status(b, unseen["access_token"]) == 401
        # a replica started after the revocations heard none of them: the shared record
        async with running_gateway(docs, port=free_port()) as (url_c, gateway_c):
            c = stack_of(upstreams, url_c, gateway_c)
            assert await mcp_status(c, unseen["access_token"]) == 401
            _, fresh, _ = await tokens(a)
            assert await mcp_status(c, fresh["access_token"]) == 200


async def test_a_metadata_document_client_across_three_replicas_a_restart_and_a_failover(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster) -> None:
    """A client known by its metadata document (as Claude Code, Claude Desktop and ChatGPT are)
    against three replicas on Redis Sentinel, as a load balancer would spread it: consent at
    one replica, the login at another, the code redeemed at the third (which has never seen
    the client), refreshed at the first; a replica restarted (its caches empty) refreshes; a
    Sentinel failover loses no grant; two replicas refreshing the same token at once both
    answer, and whichever answer the client keeps refreshes next. No step is answered
    invalid_client or invalid_grant."""
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    port, corp, hub = upstreams
    docs = docs_for(upstreams, cluster, keys)
    port_c = free_port()

    def at(url: str, gateway: Any) -> Stack:  # requests to this replica, the issuer's resource
        return Stack(url.removesuffix("/mcp"), f"http://127.0.0.1:{port}/mcp", corp, hub,
                     gateway)

    async def refresh_at(stack: Stack, token: str) -> dict[str, Any]:
        status, answer = await refresh(stack, client_id, token)
        assert status == 200, answer
        return answer

    with document_server() as documents:
        client_id = documents.publish("/agent.json")
        async with running_gateway(docs, port=port) as (url_a, a), \
                running_gateway(docs, port=free_port()) as (url_b, b):
            redirect, verifier = await login_as_document_client(at(url_b, b), client_id)
            async with running_gateway(docs, port=port_c) as (url_c, c):
                status, _, answer = await call(at(url_c, c), "POST", "/oauth/token", form={
                    "grant_type": "authorization_code", "code": redirect["code"],
                    "client_id": client_id, "redirect_uri": CLIENT_REDIRECT,
                    "code_verifier": verifier, "resource": f"http://127.0.0.1:{port}/mcp"})
                assert status == 200, answer
                assert await mcp_status(Stack(url_c, url_c, corp, hub),
                                        answer["access_token"]) == 200
            answer = await refresh_at(at(url_a, a), answer["refresh_token"])
            async with running_gateway(docs, port=port_c) as (url_c, c):  # restarted
                answer = await refresh_at(at(url_c, c), answer["refresh_token"])

                old = await trio.to_thread.run_sync(cluster.kill_master)
                await trio.to_thread.run_sync(cluster.wait_for_failover, old)
                with trio.fail_after(15):  # 503 while the replicas find the new master
                    while (await refresh(at(url_b, b), client_id, answer["refresh_token"]))[0] \
                            == 503:
                        await trio.sleep(0.2)
                status, answer = await refresh(at(url_b, b), client_id, answer["refresh_token"])
                assert status == 200, answer  # the probe above rotated it within the grace

                answers: list[dict[str, Any]] = []

                async def one(stack: Stack, token: str) -> None:
                    answers.append(await refresh_at(stack, token))
                async with trio.open_nursery() as nursery:
                    for stack in (at(url_a, a), at(url_c, c)):
                        nursery.start_soon(one, stack, answer["refresh_token"])
                kept = await refresh_at(at(url_b, b), answers[0]["refresh_token"])
                assert await mcp_status(at(url_a, a), kept["access_token"]) == 200


async def test_the_token_storage_over_tls(upstreams: tuple[int, Idp, Idp],
                                          tmp_path: Path) -> None:
    """``storage.redis.tls`` with the CA that signed the Redis's certificate: logins and
    refreshes work over TLS. With another CA the storage is refused (the certificate does not
    verify): 503 with the reason, never a plaintext fallback."""
    port, corp, hub = upstreams
    ca, cert, key = private_ca(tmp_path, "redis")
    (tmp_path / "other").mkdir()
    other_ca = private_ca(tmp_path / "other", "else")[0]
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with running_redis(tmp_path, tls=(ca, cert, key)) as (host, redis_port):
        for trusted, works in ((ca, True), (other_ca, False)):
            docs = as_docs(f"http://127.0.0.1:{port}", corp, hub, keys=keys, storage={
                "type": "redis", "redis": {
                    "addr": f"{host}:{redis_port}", "dialTimeout": "1s", "readTimeout": "1s",
                    "tls": {"caCertSecretRef": {"name": "redis-ca", "key": "ca.crt"}}}})
            docs.insert(0, {"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "redis-ca"},
                            "stringData": {"ca.crt": trusted.read_text()}})
            async with running_gateway(docs, port=port) as (url, gateway):
                stack = stack_of(upstreams, url, gateway)
                if works:
                    client_id, answer, _ = await tokens(stack)
                    status, rotated = await refresh(stack, client_id, answer["refresh_token"])
                    assert status == 200, rotated
                    stored = redis_command(redis_port, "KEYS", "*:upstream:*",
                                           tls=ssl.create_default_context(cafile=str(ca)))
                    assert len(stored) == 2  # corp's and hub's tokens, sealed
                else:
                    with trio.fail_after(15):
                        status, _, answer = await call(stack, "POST", "/oauth/register", body={
                            "redirect_uris": [CLIENT_REDIRECT]})
                    assert status == 503 and answer["error"] == "temporarily_unavailable"


async def test_sentinels_and_redis_over_tls_through_a_failover(
        upstreams: tuple[int, Idp, Idp], tmp_path: Path) -> None:
    """``tls`` and ``sentinelTls`` against a Sentinel group that speaks TLS only: a login,
    then ``kill -9`` of the master, and the refresh token still refreshes on the new one."""
    port, corp, hub = upstreams
    ca, cert, key = private_ca(tmp_path, "redis")
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with running_redis_cluster(tmp_path, tls=(ca, cert, key)) as cluster:
        tls = {"caCertSecretRef": {"name": "redis-ca", "key": "ca.crt"}}
        docs = as_docs(f"http://127.0.0.1:{port}", corp, hub, keys=keys, storage={
            "type": "redis", "redis": {
                "sentinelConfig": {"masterName": cluster.master_name,
                                   "sentinelAddrs": cluster.sentinel_addrs()},
                "dialTimeout": "1s", "readTimeout": "1s", "tls": tls, "sentinelTls": tls}})
        docs.insert(0, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-ca"},
                        "stringData": {"ca.crt": ca.read_text()}})
        async with running_gateway(docs, port=port) as (url, gateway):
            stack = stack_of(upstreams, url, gateway)
            client_id, answer, _ = await tokens(stack)
            old = await trio.to_thread.run_sync(cluster.kill_master)
            await trio.to_thread.run_sync(cluster.wait_for_failover, old)
            with trio.fail_after(20):
                while (result := await refresh(stack, client_id,
                                               answer["refresh_token"]))[0] == 503:
                    await trio.sleep(0.2)
            assert result[0] == 200, result


async def test_the_token_storage_on_a_redis_cluster(upstreams: tuple[int, Idp, Idp],
                                                   tmp_path: Path) -> None:
    """``clusterMode`` (managed cluster-mode Redis): logins, refresh rotation and a revocation
    heard by another replica, through a cluster of three masters. The rotation is one script
    over five keys: a cluster runs it only because they share a slot (the prefix's hash tag)."""
    port, corp, hub = upstreams
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with running_cluster_mode(tmp_path) as (host, redis_port):
        docs = as_docs(f"http://127.0.0.1:{port}", corp, hub, keys=keys, storage={
            "type": "redis", "redis": {"addr": f"{host}:{redis_port}", "clusterMode": True,
                                       "dialTimeout": "1s", "readTimeout": "1s"}})
        async with running_gateway(docs, port=port) as (url_a, a), \
                running_gateway(docs, port=free_port()) as (url_b, b):
            stack = stack_of(upstreams, url_a, a)
            client_id, answer, _ = await tokens(stack)
            status, rotated = await refresh(stack, client_id, answer["refresh_token"])
            assert status == 200, rotated
            other = stack_of(upstreams, url_b, b)
            assert await mcp_status(other, rotated["access_token"]) == 200  # cached at b now
            status, _, _ = await call(stack, "POST", "/oauth/revoke", form={
                "token": rotated["refresh_token"], "client_id": client_id})
            assert status == 200
            with trio.fail_after(5):
                while await mcp_status(other, rotated["access_token"]) != 401:
                    await trio.sleep(0.1)
