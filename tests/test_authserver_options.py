"""The authorization server's ToolHive options that change what it does: ``cimd`` (clients
known by their metadata document turned off), ``baselineClientScopes``,
``forceConfidentialRedirectUris`` and ``disableUpstreamTokenInjection``. The upstreams are the
two ``oidc-provider`` instances of the other authorization server tests."""

from __future__ import annotations

from typing import Any

from .authserver_helpers import (
    Stack,
    as_docs,
    authorize_url,
    call,
    claims_of,
    document_server,
    mcp_status,
    pkce,
    tokens,
)
from .fixtures.idp import Idp
from .gateway_helpers import running_gateway


def with_options(upstreams: tuple[int, Idp, Idp], **options: Any) -> list[dict[str, Any]]:
    port, corp, hub = upstreams
    docs = as_docs(f"http://127.0.0.1:{port}", corp, hub)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["authServerConfig"].update(options)
    return docs


async def test_metadata_document_clients_can_be_turned_off(
        upstreams: tuple[int, Idp, Idp]) -> None:
    port, corp, hub = upstreams
    docs = with_options(upstreams, cimd={"enabled": False})
    with document_server() as documents:
        client_id = documents.publish("/agent.json")
        async with running_gateway(docs, port=port) as (url, gateway):
            stack = Stack(f"http://127.0.0.1:{port}", url, corp, hub, gateway)
            _, _, metadata = await call(stack, "GET", "/.well-known/oauth-authorization-server")
            assert metadata["client_id_metadata_document_supported"] is False
            status, _, page = await call(stack, "GET", authorize_url(
                stack, client_id, pkce()[1]).removeprefix(stack.issuer))
            assert status == 400 and "unknown client_id" in page
            assert documents.hits == {}  # never fetched


async def test_registrations_get_the_baseline_scopes_and_forced_secrets(
        upstreams: tuple[int, Idp, Idp]) -> None:
    """A client that registers as public with a redirect URI the configuration forces gets a
    secret (client_secret_post), which the token endpoint then requires; every registration's
    scope includes the baseline."""
    port, corp, hub = upstreams
    docs = with_options(upstreams, allowConfidentialClientRegistration=True,
                        insecureAllowConfidentialOverLoopbackHTTP=True,
                        forceConfidentialRedirectUris=["https://app.example/cb"],
                        baselineClientScopes=["mcp:tools"])
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = Stack(f"http://127.0.0.1:{port}", url, corp, hub, gateway)
        status, _, forced = await call(stack, "POST", "/oauth/register", body={
            "redirect_uris": ["https://app.example/cb"], "token_endpoint_auth_method": "none",
            "scope": "openid"})
        assert status == 201, forced
        assert forced["token_endpoint_auth_method"] == "client_secret_post"
        assert forced["client_secret"] and forced["scope"] == "openid mcp:tools"
        status, _, answer = await call(stack, "POST", "/oauth/token", form={
            "grant_type": "refresh_token", "refresh_token": "x~y",
            "client_id": forced["client_id"]})
        assert (status, answer["error"]) == (401, "invalid_client")  # its secret is required
        status, _, public = await call(stack, "POST", "/oauth/register", body={
            "redirect_uris": ["https://other.example/cb"]})
        assert status == 201, public
        assert public["token_endpoint_auth_method"] == "none" and "client_secret" not in public
        assert public["scope"] == "mcp:tools"


async def test_without_upstream_token_injection_no_upstream_token_is_kept(
        upstreams: tuple[int, Idp, Idp]) -> None:
    port, corp, hub = upstreams
    docs = with_options(upstreams, disableUpstreamTokenInjection=True)
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = Stack(f"http://127.0.0.1:{port}", url, corp, hub, gateway)
        _, answer, _ = await tokens(stack)
        assert await mcp_status(stack, answer["access_token"]) == 200
        session = claims_of(answer["access_token"])["tsid"]
        assert gateway.authserver is not None
        for provider in ("corp", "hub"):
            assert await gateway.authserver.storage.get_upstream(session, provider) is None
