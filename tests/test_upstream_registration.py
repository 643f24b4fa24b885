"""vmcp registers itself at an upstream provider (``dcrConfig``): once for every replica, anew
when the scopes change, and each user's tokens are refreshed as the client that obtained them.

``hub`` (oidc-provider, open dynamic client registration, RFC 8414 metadata) is the upstream
with no client id configured; its access tokens live 4 seconds so that the refresher really
refreshes during the test. oidc-provider binds a refresh token to its client: refreshed as
another client it answers ``invalid_grant``, as the providers in the field do.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key
from vmcp_trio.authserver.storage import StoredUpstream

from .authserver_helpers import Stack, as_docs, chained_upstreams, claims_of, mcp_status, tokens
from .fixtures.idp import Idp
from .fixtures.redis_cluster import redis_command, running_redis
from .gateway_helpers import running_gateway
from .helpers import free_port

TTL = 4


def registering_docs(issuer: str, corp: Idp, hub: Idp, redis_port: int, keys: tuple[str, str],
                     scopes: list[str]) -> list[dict[str, Any]]:
    docs = as_docs(issuer, corp, hub, keys=keys, storage={
        "type": "redis", "redis": {"addr": f"127.0.0.1:{redis_port}"}})
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    hub_config = vmcp["spec"]["authServerConfig"]["upstreamProviders"][1]["oauth2Config"]
    del hub_config["clientId"], hub_config["clientSecretRef"]
    hub_config["dcrConfig"] = {
        "discoveryUrl": f"{hub.issuer}/.well-known/oauth-authorization-server"}
    hub_config["scopes"] = scopes
    return docs


async def hub_tokens(gateway: GatewayProcess, session: str) -> StoredUpstream:
    assert gateway.authserver is not None
    stored = await gateway.authserver.storage.get_upstream(session, "hub")
    assert stored is not None
    return stored


def registrations(redis_port: int) -> list[str]:
    return sorted(redis_command(redis_port, "KEYS", "*:upstream-client:hub:*"))


async def test_replicas_share_one_registration_and_a_scope_change_keeps_old_logins(
        tmp_path: Path) -> None:
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with chained_upstreams(access_token_ttl=TTL) as (port, corp, hub), \
            running_redis(tmp_path) as (_, redis_port):
        issuer = f"http://127.0.0.1:{port}"
        docs = registering_docs(issuer, corp, hub, redis_port, keys, ["openid"])
        async with running_gateway(docs, port=port) as (url, a), \
                running_gateway(docs, port=free_port()) as (url_b, b):
            _, first, _ = await tokens(Stack(issuer, url, corp, hub, a))
            # the second login starts at the other replica (its /oauth/authorize)
            _, second, _ = await tokens(Stack(url_b.removesuffix("/mcp"), url, corp, hub, b))
            old_session = claims_of(first["access_token"])["tsid"]
            one = await hub_tokens(a, old_session)
            two = await hub_tokens(a, claims_of(second["access_token"])["tsid"])
            assert one.client_id and one.client_id == two.client_id
            assert len(registrations(redis_port)) == 1  # one for both replicas

        # The scopes change (a rolling restart with the new configuration): new logins get a
        # new registration; the old login's tokens go on refreshing as the old client.
        docs = registering_docs(issuer, corp, hub, redis_port, keys, ["openid", "mcp:tools"])
        async with running_gateway(docs, port=port) as (url, a):
            before = await hub_tokens(a, old_session)
            with trio.fail_after(TTL + 6):
                while (now := await hub_tokens(a, old_session)).access_token == \
                        before.access_token:
                    await trio.sleep(0.1)
            assert now.client_id == one.client_id
            assert now.expires_at is not None and now.expires_at > time.time()
            assert await mcp_status(Stack(issuer, url, corp, hub, a), first["access_token"]) == 200
            _, third, _ = await tokens(Stack(issuer, url, corp, hub, a))
            fresh = await hub_tokens(a, claims_of(third["access_token"])["tsid"])
            assert fresh.client_id not in (None, one.client_id)
            assert len(registrations(redis_port)) == 2
