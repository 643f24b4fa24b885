"""The embedded authorization server, end to end, with real upstream identity providers.

Two ``oidc-provider`` instances are the upstreams of the chained login: ``corp`` as an ``oidc``
provider (discovery, ID token) and ``hub`` as an ``oauth2`` provider with explicit endpoints and
``userInfo`` (its ``/me``). vmcp serves ``/mcp`` and the authorization server on the same port
(the issuer), with the quickstart's stdio backends. Clients: the official SDK's
``OAuthClientProvider`` (discovery from ``/mcp``, registration, PKCE, resource, the chained
headless login), and a raw flow for the security cases, each its own test.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from vmcp_trio.authserver.keygen import generate_signing_key
from vmcp_trio.authserver.keys import SigningKeys
from vmcp_trio.authserver.registration import CLIENT_LIFETIME, UNUSED_CLIENT_LIFETIME
from vmcp_trio.authserver.storage import PendingAuthorization, StorageFull
from vmcp_trio.authserver.storage.memory import MemoryStorage

from .authserver_helpers import (
    CLIENT_REDIRECT,
    Stack,
    as_docs,
    authorize_url,
    call,
    claims_of,
    login,
    mcp_status,
    pkce,
    register,
    tokens,
)
from .fixtures.idp import HeadlessBrowser, Idp, MemoryTokenStorage
from .gateway_helpers import running_gateway

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


# --- discovery -----------------------------------------------------------------------------------

@pytest.fixture
def stack(authserver_stack: Stack) -> Stack:
    return authserver_stack


async def test_discovery_and_keys(stack: Stack) -> None:
    for path in ("/.well-known/oauth-authorization-server",
                 "/.well-known/openid-configuration"):
        status, headers, document = await call(stack, "GET", path)
        assert status == 200 and headers["cache-control"] == "public, max-age=3600"
        assert document["issuer"] == stack.issuer
        assert document["authorization_endpoint"] == stack.issuer + "/oauth/authorize"
        assert document["token_endpoint"] == stack.issuer + "/oauth/token"
        assert document["code_challenge_methods_supported"] == ["S256"]
        assert "id_token_signing_alg_values_supported" not in document  # not an OP
    _, _, jwks = await call(stack, "GET", "/.well-known/jwks.json")
    [key] = jwks["keys"]
    assert key["alg"] == "ES256" and "d" not in key
    _, _, prm = await call(stack, "GET", "/.well-known/oauth-protected-resource/mcp")
    assert prm["authorization_servers"] == [stack.issuer]


# --- the whole flow with the SDK client ----------------------------------------------------------

async def test_the_sdk_client_logs_in_through_the_chain_and_calls_tools(stack: Stack) -> None:
    browser = HeadlessBrowser("alice")
    auth = OAuthClientProvider(stack.mcp, OAuthClientMetadata(
        redirect_uris=["http://127.0.0.1:1/callback"], client_name="sdk", scope="mcp:tools",
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        token_endpoint_auth_method="none"), MemoryTokenStorage(),
        redirect_handler=browser.redirect_handler, callback_handler=browser.callback_handler)
    with trio.fail_after(60):
        async with httpx2.AsyncClient(auth=auth) as http, \
                Client(streamable_http_client(stack.mcp, http_client=http),
                       mode="legacy") as client:
            result = await client.call_tool("clock_add", {"a": 20, "b": 22})
            assert result.structured_content == {"sum": 42}
    assert browser.visits == 1
    storage = stack.gateway.authserver.storage  # type: ignore[union-attr]
    stored = {key.split(":")[1] for key in storage.upstream.rows}  # type: ignore[attr-defined]
    assert stored == {"corp", "hub"}


async def test_issued_tokens_and_refresh_rotation(stack: Stack) -> None:
    client_id, answer, _ = await tokens(stack)
    claims = claims_of(answer["access_token"])
    assert claims["iss"] == stack.issuer and claims["aud"] == [stack.mcp]
    assert claims["client_id"] == client_id and claims["scp"] == ["mcp:tools"]
    assert {"sub", "exp", "iat", "jti", "tsid"} <= set(claims)
    assert await mcp_status(stack, answer["access_token"]) == 200
    _, again, _ = await tokens(stack)
    assert claims_of(again["access_token"])["sub"] == claims["sub"]  # stable per user
    _, other, _ = await tokens(stack, "bob")
    assert claims_of(other["access_token"])["sub"] != claims["sub"]

    status, _, first = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
        "client_id": client_id})
    assert status == 200 and first["refresh_token"] != answer["refresh_token"]
    # A retry with the replaced token, while its successor is unused (a lost answer), is
    # not reuse: it rotates again.
    status, _, retried = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
        "client_id": client_id})
    assert status == 200
    status, _, rotated = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": retried["refresh_token"],
        "client_id": client_id})
    assert status == 200
    assert await mcp_status(stack, rotated["access_token"]) == 200
    # Reuse after rotation (the successor was used): refused, and the whole family (and its
    # session) is revoked.
    status, _, reused = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
        "client_id": client_id})
    assert status == 400 and reused["error"] == "invalid_grant"
    status, _, _ = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": rotated["refresh_token"],
        "client_id": client_id})
    assert status == 400
    assert await mcp_status(stack, rotated["access_token"]) == 401


# --- security cases ------------------------------------------------------------------------------

async def test_a_replayed_code_fails_and_revokes_what_it_issued(stack: Stack) -> None:
    client_id = await register(stack)
    verifier, challenge = pkce()
    redirect = await login(stack, client_id, challenge)
    form = {"grant_type": "authorization_code", "code": redirect["code"], "client_id": client_id,
            "redirect_uri": CLIENT_REDIRECT, "code_verifier": verifier}
    status, _, first = await call(stack, "POST", "/oauth/token", form=form)
    assert status == 200
    status, _, replay = await call(stack, "POST", "/oauth/token", form=form)
    assert status == 400 and replay["error"] == "invalid_grant"
    assert "already used" in replay["error_description"]
    assert await mcp_status(stack, first["access_token"]) == 401
    status, _, _ = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": first["refresh_token"],
        "client_id": client_id})
    assert status == 400


@pytest.mark.parametrize("verifier", [None, "plain", "wrong"])
async def test_pkce_verifier_must_match(stack: Stack, verifier: str | None) -> None:
    client_id = await register(stack)
    good, challenge = pkce()
    redirect = await login(stack, client_id, challenge)
    assert good not in json.dumps(redirect)
    form = {"grant_type": "authorization_code", "code": redirect["code"],
            "client_id": client_id, "redirect_uri": CLIENT_REDIRECT}
    if verifier == "plain":
        form["code_verifier"] = challenge  # the challenge itself, as "plain" would
    elif verifier == "wrong":
        form["code_verifier"] = pkce()[0]
    status, _, answer = await call(stack, "POST", "/oauth/token", form=form)
    assert status == 400 and answer["error"] == "invalid_grant"
    assert "code_verifier" in answer["error_description"]
    assert good not in answer["error_description"]


async def test_plain_pkce_is_refused_at_authorize(stack: Stack) -> None:
    client_id = await register(stack)
    url = authorize_url(stack, client_id, "x" * 43, code_challenge_method="plain")
    status, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 302
    location = urlsplit(headers["location"])
    params = dict(parse_qsl(location.query))
    assert location.netloc == "127.0.0.1:9" and params["error"] == "invalid_request"
    assert params["state"] == "client-state" and params["iss"] == stack.issuer


@pytest.mark.parametrize("redirect", [
    "http://127.0.0.1:9/other", "http://127.0.0.1:9/Callback", "http://127.0.0.1:9/callback?x=1",
    "http://127.0.0.1:9/callback/", "https://evil.example/callback",
    "http://localhost:9/callback"])
async def test_near_miss_redirect_uris_are_shown_not_redirected(stack: Stack,
                                                               redirect: str) -> None:
    client_id = await register(stack)
    url = authorize_url(stack, client_id, pkce()[1], redirect_uri=redirect)
    status, headers, body = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 400 and "location" not in headers
    assert "redirect_uri" in body


async def test_a_loopback_redirect_may_use_any_port(stack: Stack) -> None:
    """RFC 8252 section 7.3: a native app's loopback redirect matches on any port."""
    client_id = await register(stack)
    url = authorize_url(stack, client_id, pkce()[1], redirect_uri="http://127.0.0.1:4711/callback")
    status, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 302 and headers["location"].startswith(stack.corp.issuer)


async def test_unknown_client_is_shown_not_redirected(stack: Stack) -> None:
    url = authorize_url(stack, "no-such-client", pkce()[1])
    status, headers, body = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 400 and "location" not in headers and "client_id" in body


async def test_a_callback_state_of_no_flow_or_another_flow(stack: Stack) -> None:
    status, _, body = await call(stack, "GET", "/oauth/callback?state=forged&code=x")
    assert status == 400 and "state" in body
    # a state used once (the leg finished) cannot be used again
    client_id = await register(stack)
    url = authorize_url(stack, client_id, pkce()[1])
    _, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    leg_state = dict(parse_qsl(urlsplit(headers["location"]).query))["state"]
    status, headers, _ = await call(stack, "GET", f"/oauth/callback?state={leg_state}"
                                                  "&error=access_denied")
    assert status == 302  # back to the client with the error
    params = dict(parse_qsl(urlsplit(headers["location"]).query))
    assert params["error"] == "access_denied" and params["state"] == "client-state"
    status, _, _ = await call(stack, "GET", f"/oauth/callback?state={leg_state}&code=x")
    assert status == 400


async def test_an_abandoned_chain_leaves_no_upstream_tokens(stack: Stack) -> None:
    """The user logs in at corp, then refuses at hub: nothing of corp's is kept."""
    storage = stack.gateway.authserver.storage  # type: ignore[union-attr]
    before = set(storage.upstream.rows)  # type: ignore[attr-defined]
    client_id = await register(stack)
    url = authorize_url(stack, client_id, pkce()[1])

    def corp_only() -> str:
        with httpx2.Client(follow_redirects=False, timeout=10) as http:
            response = http.get(url)
            for _ in range(20):
                location = response.headers.get("location", "")
                if location.startswith(stack.hub.issuer):
                    return dict(parse_qsl(urlsplit(location).query))["state"]
                if response.is_redirect:
                    response = http.get(location if location.startswith("http")
                                        else str(response.url.join(location)))
                    continue
                from .fixtures.idp import _next_step  # the provider's login form
                action, next_url, data = _next_step(response, "carol", CLIENT_REDIRECT)
                response = http.post(next_url, data=data) if action == "post" else \
                    http.get(next_url)
        raise AssertionError("never reached the second provider")

    hub_state = await trio.to_thread.run_sync(corp_only)
    status, headers, _ = await call(stack, "GET", f"/oauth/callback?state={hub_state}"
                                                  "&error=access_denied")
    assert status == 302 and "error=access_denied" in headers["location"]
    assert set(storage.upstream.rows) == before  # type: ignore[attr-defined]


async def test_resource_must_not_change_between_authorize_and_token(stack: Stack) -> None:
    client_id = await register(stack)
    verifier, challenge = pkce()
    redirect = await login(stack, client_id, challenge)
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "authorization_code", "code": redirect["code"], "client_id": client_id,
        "redirect_uri": CLIENT_REDIRECT, "code_verifier": verifier,
        "resource": "https://elsewhere.example/mcp"})
    assert status == 400 and answer["error"] == "invalid_target"


async def test_an_unknown_resource_is_refused_at_authorize(stack: Stack) -> None:
    client_id = await register(stack)
    url = authorize_url(stack, client_id, pkce()[1], resource="https://elsewhere.example/mcp")
    _, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert dict(parse_qsl(urlsplit(headers["location"]).query))["error"] == "invalid_target"


@pytest.mark.parametrize(("metadata", "error"), [
    ({"redirect_uris": ["http://app.example/callback"]}, "invalid_redirect_uri"),
    ({"redirect_uris": [f"http://127.0.0.1/{i}" for i in range(11)]}, "invalid_redirect_uri"),
    ({"redirect_uris": []}, "invalid_redirect_uri"),
    ({"redirect_uris": ["https://app.example/cb#frag"]}, "invalid_redirect_uri"),
])
async def test_registration_abuse(stack: Stack, metadata: dict[str, Any], error: str) -> None:
    status, _, answer = await call(stack, "POST", "/oauth/register", body=metadata)
    assert status == 400 and answer["error"] == error


async def test_a_huge_registration_is_refused(stack: Stack) -> None:
    status, _, answer = await call(stack, "POST", "/oauth/register",
                                   raw=b'{"redirect_uris": ["' + b"a" * 100_000 + b'"]}')
    assert status in (400, 413) and answer["error"] == "invalid_client_metadata"


async def test_registration_is_rate_limited(stack: Stack) -> None:
    seen = []
    for _ in range(25):
        status, headers, _ = await call(stack, "POST", "/oauth/register", body={
            "redirect_uris": [CLIENT_REDIRECT]})
        seen.append(status)
        if status == 429:
            assert int(headers["retry-after"]) >= 1
            break
    assert seen[-1] == 429 and seen[0] == 201


async def test_tokens_of_another_issuer_are_refused(stack: Stack) -> None:
    """A token signed by another VirtualMCPServer's authorization server (another key and
    issuer), even with this server's claims otherwise, is refused."""
    _, answer, _ = await tokens(stack)
    claims = claims_of(answer["access_token"])
    stranger = SigningKeys([generate_signing_key("ec")])
    assert await mcp_status(stack, stranger.sign({**claims, "iss": "https://other.example"})) \
        == 401
    assert await mcp_status(stack, stranger.sign(claims)) == 401


async def test_revocation_ends_the_refresh_family_and_the_session(stack: Stack) -> None:
    client_id, answer, _ = await tokens(stack)
    other = await register(stack)
    status, _, _ = await call(stack, "POST", "/oauth/revoke", form={
        "token": answer["refresh_token"], "client_id": other})
    assert status == 200  # RFC 7009: no error, but another client's token stays valid
    assert await mcp_status(stack, answer["access_token"]) == 200
    status, _, _ = await call(stack, "POST", "/oauth/revoke", form={
        "token": answer["refresh_token"], "client_id": client_id})
    assert status == 200
    assert await mcp_status(stack, answer["access_token"]) == 401
    status, _, refused = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
        "client_id": client_id})
    assert status == 400 and refused["error"] == "invalid_grant"


async def test_an_issuer_with_a_path(upstreams: tuple[int, Idp, Idp]) -> None:
    """RFC 8414 section 3: an issuer with a path has its metadata at the well-known prefix with
    the path appended (and vmcp also serves the OIDC form under the path); its endpoints live
    under the path."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}/tenant-a"
    docs = as_docs(issuer, corp, hub)
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = Stack(issuer, url, corp, hub, gateway)
        root = f"http://127.0.0.1:{port}"
        for path in ("/.well-known/oauth-authorization-server/tenant-a",
                     "/.well-known/openid-configuration/tenant-a",
                     "/tenant-a/.well-known/openid-configuration"):
            status, _, document = await call(Stack(root, url, corp, hub, gateway), "GET", path)
            assert status == 200, path
            assert document["issuer"] == issuer
            assert document["token_endpoint"] == issuer + "/oauth/token"
            assert document["jwks_uri"] == issuer + "/.well-known/jwks.json"
        status, _, jwks = await call(stack, "GET", "/.well-known/jwks.json")
        assert status == 200 and jwks["keys"]
        status, _, registered = await call(stack, "POST", "/oauth/register",
                                           body={"redirect_uris": [CLIENT_REDIRECT]})
        assert status == 201 and registered["client_id"]


async def test_a_public_client_lives_a_day_until_its_first_login(stack: Stack) -> None:
    """A registration flood fades: a public client that never logged in is kept a day; its
    first login keeps it for CLIENT_LIFETIME."""
    assert stack.gateway is not None and stack.gateway.authserver is not None
    storage = stack.gateway.authserver.storage
    unused = await storage.get_client(await register(stack))
    assert unused is not None
    assert abs(unused.expires_at - time.time() - UNUSED_CLIENT_LIFETIME) < 60
    client_id, _, _ = await tokens(stack)
    used = await storage.get_client(client_id)
    assert used is not None and abs(used.expires_at - time.time() - CLIENT_LIFETIME) < 60


async def test_full_tables_refuse_new_records_rather_than_push_out_live_ones() -> None:
    storage = MemoryStorage(limit=2, pending_limit=2)
    for n in range(2):
        await storage.put_pending(pending(f"s{n}"))
    with pytest.raises(StorageFull, match="2 logins are in progress"):
        await storage.put_pending(pending("s2"))
    assert await storage.take_pending("s0") is not None  # the live ones are all still there
    await storage.put_pending(pending("s2"))  # room again
    _, live = storage.pending.rows["s1"]
    storage.pending.rows["s1"] = (time.time() - 1, live)  # s1 expired: it makes room
    await storage.put_pending(pending("s3"))
    assert await storage.take_pending("s3") is not None
    assert await storage.take_pending("s1") is None


def pending(state: str) -> PendingAuthorization:
    return PendingAuthorization(
        state=state, client_id="c", redirect_uri=CLIENT_REDIRECT, client_state=None,
        code_challenge="x" * 43, scopes=(), resource=None, session_id="s", providers=("p",),
        leg=0, verifier="v", nonce=None, expires_at=time.time() + 600)
