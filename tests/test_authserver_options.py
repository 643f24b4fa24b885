"""The authorization server's ToolHive options that change what it does: ``cimd`` (clients
known by their metadata document turned off), ``baselineClientScopes``,
``forceConfidentialRedirectUris`` and ``disableUpstreamTokenInjection``. The upstreams are the
two ``oidc-provider`` instances of the other authorization server tests."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from vmcp_trio.authserver.upstream import UpstreamProvider
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import OAuth2Provider

from .authserver_helpers import (
    Stack,
    as_docs,
    authorize_url,
    call,
    claims_of,
    document_server,
    issuer_of,
    mcp_status,
    pkce,
    running_stack,
    tokens,
)
from .fixtures.idp import Idp, running_idp
from .gateway_helpers import running_gateway
from .helpers import free_port


def with_options(upstreams: tuple[int, Idp, Idp], **options: Any) -> list[dict[str, Any]]:
    _, corp, hub = upstreams
    docs = as_docs(issuer_of(upstreams), corp, hub)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["authServerConfig"].update(options)
    return docs


async def test_metadata_document_clients_can_be_turned_off(
        upstreams: tuple[int, Idp, Idp]) -> None:
    docs = with_options(upstreams, cimd={"enabled": False})
    with document_server() as documents:
        client_id = documents.publish("/agent.json")
        async with running_stack(upstreams, docs) as stack:
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
    docs = with_options(upstreams, allowConfidentialClientRegistration=True,
                        insecureAllowConfidentialOverLoopbackHTTP=True,
                        forceConfidentialRedirectUris=["https://app.example/cb"],
                        baselineClientScopes=["mcp:tools"])
    async with running_stack(upstreams, docs) as stack:
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
    docs = with_options(upstreams, disableUpstreamTokenInjection=True)
    async with running_stack(upstreams, docs) as stack:
        _, answer, _ = await tokens(stack)
        assert await mcp_status(stack, answer["access_token"]) == 200
        session = claims_of(answer["access_token"])["tsid"]
        assert stack.gateway is not None and stack.gateway.authserver is not None
        for provider in ("corp", "hub"):
            assert await stack.gateway.authserver.storage.get_upstream(session, provider) is None


# --- who the user is at an upstream --------------------------------------------------------------

def subject_for(provider: str, upstream_subject: str) -> str:
    """The ``sub`` of our access tokens: derived from the first provider's user."""
    return "u-" + hashlib.sha256(f"{provider}\0{upstream_subject}".encode()).hexdigest()[:32]


def hub_first(docs: list[dict[str, Any]], **hub_config: Any) -> dict[str, Any]:
    """hub (oauth2) becomes the first provider, whose user is ours; its config is updated."""
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    providers = vmcp["spec"]["authServerConfig"]["upstreamProviders"]
    providers.reverse()
    providers[0]["oauth2Config"].update(hub_config)
    return providers[0]["oauth2Config"]  # type: ignore[no-any-return]


async def test_the_user_from_the_token_response_or_from_the_access_token_alone() -> None:
    """identityFromToken reads the user from the token response (Slack's ``authed_user.id``;
    no userInfo call). With neither it nor userInfo the login still works: the user is known
    by the access token alone, a new one at each login."""
    port = free_port()
    callback = (f"http://127.0.0.1:{port}/oauth/callback",)
    with running_idp(redirect_uris=callback) as corp, \
            running_idp(redirect_uris=callback, token_response_user=True) as hub:
        issuer = f"http://127.0.0.1:{port}"
        docs = as_docs(issuer, corp, hub)
        hub_config = hub_first(docs, identityFromToken={"subjectPath": "authed_user.id"})
        del hub_config["userInfo"]
        async with running_gateway(docs, port=port) as (url, gateway):
            _, answer, _ = await tokens(Stack(issuer, url, corp, hub, gateway), user="erin")
            assert claims_of(answer["access_token"])["sub"] == subject_for("hub", "erin")

        del hub_config["identityFromToken"]
        async with running_gateway(docs, port=port) as (url, gateway):
            stack = Stack(issuer, url, corp, hub, gateway)
            subjects = set()
            for _ in range(2):
                _, answer, _ = await tokens(stack, user="erin")
                assert await mcp_status(stack, answer["access_token"]) == 200
                subjects.add(claims_of(answer["access_token"])["sub"])
            assert len(subjects) == 2 and subject_for("hub", "erin") not in subjects


async def test_an_oidc_providers_profile_from_its_user_info_override(
        upstreams: tuple[int, Idp, Idp]) -> None:
    """userInfoOverride: the name comes from the userInfo endpoint (mapped: here the account
    id, which oidc-provider's /me gives as ``sub``); the user is still the ID token's."""
    corp = upstreams[1]
    docs = with_options(upstreams)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["authServerConfig"]["upstreamProviders"][0]["oidcConfig"]["userInfoOverride"] = {
        "endpointUrl": f"{corp.issuer}/me", "fieldMapping": {"nameFields": ["sub"]}}
    async with running_stack(upstreams, docs) as stack:
        _, answer, _ = await tokens(stack, user="frank")
        claims = claims_of(answer["access_token"])
        assert claims["name"] == "frank" and claims["sub"] == subject_for("corp", "frank")


async def test_additional_authorization_params_reach_the_authorization_url() -> None:
    provider = UpstreamProvider(OAuth2Provider(
        name="google", authorization_endpoint="https://accounts.example/o/oauth2/auth",
        token_endpoint="https://oauth2.example/token", client_id="vmcp",
        scopes=("openid", "email"),
        authorization_params=(("access_type", "offline"), ("prompt", "consent"))),
        HttpClient())
    leg = await provider.start(state="s", redirect_uri="https://vmcp.example/oauth/callback")
    query = dict(parse_qsl(urlsplit(leg.url).query))
    assert query["access_type"] == "offline" and query["prompt"] == "consent"
    assert query["client_id"] == "vmcp" and query["scope"] == "openid email"
