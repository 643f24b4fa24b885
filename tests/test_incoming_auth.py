"""Boundary 1 with a real identity provider: ``oidc-provider`` as the issuer, vmcp validating.

The issuer is ``oidc-provider`` (``tests/fixtures/idp.py``): JWT access tokens come from its
resource indicators (``aud`` = the resource), opaque tokens (no resource) are checked by RFC 7662
introspection. Clients are vmcp's raw test client (to see statuses and headers exactly) and the
official SDK client. Tokens that no provider would issue (``alg: none``, HS256 keyed with the
public key, a stranger's signature under a known kid, wrong times) are minted here with the
provider's own private key or a foreign one, so that each case differs from a valid token in
exactly one way.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import hmac
import http.server
import json
import secrets
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from vmcp_trio.auth.headers import parse_challenges
from vmcp_trio.auth.incoming.authenticator import AuthFailure
from vmcp_trio.auth.incoming.build import AuthSettings, build_authenticator
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import OIDCIncoming

from .fixtures.idp import Idp, running_idp
from .gateway_helpers import RawClient, Running, quickstart_docs, running_gateway
from .helpers import free_port, private_ca
from .jwt_helpers import generate, jwk_of, mint, mint_raw

AUDIENCE = "https://vmcp.test/mcp"
"""The resource indicator clients ask the provider for, and vmcp's configured audience."""
OTHER_RESOURCE = "https://other.test/mcp"
SECRET_NAME = "idp-client"
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def oidc_docs(idp: Idp, *, audience: str = AUDIENCE, introspection: bool = True,
              resource_url: str | None = None) -> list[dict[str, Any]]:
    """The quickstart (two stdio backends) behind ``oidc`` + ``inline`` incoming auth."""
    docs = copy.deepcopy(quickstart_docs())
    inline: dict[str, Any] = {"issuer": idp.issuer, "audience": audience,
                              "insecureAllowHTTP": True, "jwksAllowPrivateIP": True,
                              "scopes": ["mcp:tools"],
                              "clientId": idp.clients["confidential"].client_id}
    if introspection:
        client = idp.clients["confidential"]
        inline["clientSecretRef"] = {"name": SECRET_NAME, "key": "secret"}
        docs.insert(0, {"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": SECRET_NAME},
                        "stringData": {"secret": client.client_secret}})
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfig": {"type": "inline",
                                                                   "inline": inline}}
    if resource_url is not None:
        vmcp["spec"]["incomingAuth"]["oidcConfig"]["resourceUrl"] = resource_url
    return docs


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}, OTHER_RESOURCE: {}}) as provider:
        yield provider


@pytest.fixture
async def gateway(idp: Idp) -> AsyncIterator[Running]:
    async with running_gateway(oidc_docs(idp)) as running:
        yield running


async def token_for(idp: Idp, client: str = "confidential", *, resource: str | None = AUDIENCE,
                    scope: str | None = None) -> str:
    response = await trio.to_thread.run_sync(
        lambda: idp.client_credentials_token(client, resource=resource, scope=scope))
    return str(response["access_token"])


def private_key(idp: Idp) -> rsa.RSAPrivateKey:
    """The provider's current signing key, from its private JWK."""
    jwk = idp.jwks_private["keys"][0]

    def number(name: str) -> int:
        return int.from_bytes(base64.urlsafe_b64decode(jwk[name] + "=" * (-len(jwk[name]) % 4)),
                              "big")

    public = rsa.RSAPublicNumbers(number("e"), number("n"))
    return rsa.RSAPrivateNumbers(number("p"), number("q"), number("d"), number("dp"),
                                 number("dq"), number("qi"), public).private_key()


def claims(idp: Idp, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": idp.issuer, "sub": "mallory", "aud": AUDIENCE, "iat": now, "exp": now + 300,
            "scope": "mcp:tools", "client_id": "confidential", "jti": secrets.token_hex(8)}
    return {**base, **overrides}


def challenge_of(headers: dict[str, str]) -> dict[str, str]:
    [(scheme, params)] = parse_challenges(headers["www-authenticate"])
    assert scheme == "bearer"
    return params


async def refused(url: str, token: str | None) -> tuple[int, dict[str, str], Any]:
    client = RawClient(url)
    client.token = token
    try:
        reply = await client.initialize()
        return reply.status, reply.headers, reply.body
    finally:
        await client.aclose()


async def assert_invalid(url: str, token: str, fragment: str) -> None:
    """401 with ``error="invalid_token"`` and a description containing ``fragment``, which never
    echoes the token."""
    status, headers, body = await refused(url, token)
    assert status == 401, body
    params = challenge_of(headers)
    assert params["error"] == "invalid_token"
    assert fragment in params["error_description"], params["error_description"]
    assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
    assert body["error"] == "invalid_token"
    assert token[-20:] not in json.dumps(body) + headers["www-authenticate"]


# --- discovery and challenges --------------------------------------------------------------------

async def test_protected_resource_metadata_tells_clients_where_to_log_in(
        gateway: Running, idp: Idp) -> None:
    url, _ = gateway
    base = url.removesuffix("/mcp")
    client = RawClient(url)
    try:
        for path in ("/.well-known/oauth-protected-resource/mcp",
                     "/.well-known/oauth-protected-resource"):
            status, headers, body = await client.http.request(
                "GET", base + path, headers=[("origin", "https://app.example")])
            assert status == 200
            document = json.loads(body)
            assert document == {"resource": url, "authorization_servers": [idp.issuer],
                                 "bearer_methods_supported": ["header"],
                                 "scopes_supported": ["mcp:tools"]}
            assert (b"access-control-allow-origin", b"*") in headers
        status, headers, _ = await client.http.request(
            "OPTIONS", base + "/.well-known/oauth-protected-resource/mcp",
            headers=[("origin", "https://app.example"),
                     ("access-control-request-method", "GET")])
        assert status == 204 and (b"access-control-allow-methods", b"GET, OPTIONS") in headers
    finally:
        await client.aclose()


async def metrics_text(url: str) -> str:
    client = RawClient(url)
    try:
        _, _, body = await client.http.request("GET", url.removesuffix("/mcp") + "/metrics")
        return body.decode()
    finally:
        await client.aclose()


async def test_the_anonymous_mode_gauge(gateway: Running) -> None:
    """``vmcp_anonymous_mode`` is 0 with oidc and 1 with anonymous incoming auth."""
    assert "vmcp_anonymous_mode 0.0" in await metrics_text(gateway[0])
    async with running_gateway() as (anonymous, _):
        assert "vmcp_anonymous_mode 1.0" in await metrics_text(anonymous)


async def test_no_token_gets_a_challenge_without_an_error(gateway: Running) -> None:
    """RFC 6750 section 3.1: without a token the challenge names the metadata and scope but no
    ``error``."""
    url, _ = gateway
    status, headers, _ = await refused(url, None)
    assert status == 401
    params = challenge_of(headers)
    assert params == {"resource_metadata": url.removesuffix("/mcp")
                      + "/.well-known/oauth-protected-resource/mcp", "scope": "mcp:tools"}


async def test_a_valid_jwt_opens_a_session_that_calls_tools(gateway: Running,
                                                            idp: Idp) -> None:
    url, _ = gateway
    client = RawClient(url)
    client.token = await token_for(idp)
    try:
        reply = await client.initialize()
        assert reply.status == 200 and client.session_id
        called = await client.request("tools/call", {"name": "clock_add",
                                                     "arguments": {"a": 1, "b": 2}})
        assert called.status == 200
        assert called.messages[-1]["result"]["structuredContent"] == {"sum": 3}
    finally:
        await client.aclose()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_with_a_bearer_header(gateway: Running, idp: Idp,
                                                   mode: str) -> None:
    url, _ = gateway
    token = await token_for(idp)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"clock_add", "notes_add_note"} <= names
        result = await client.call_tool("clock_add", {"a": 2, "b": 2})
        assert result.structured_content == {"sum": 4}


# --- one refusal per way a token can be wrong ----------------------------------------------------

async def test_wrong_audience(gateway: Running, idp: Idp) -> None:
    await assert_invalid(gateway[0], await token_for(idp, resource=OTHER_RESOURCE), "aud")


async def test_wrong_issuer(gateway: Running, idp: Idp) -> None:
    token = mint(private_key(idp), claims(idp, iss="https://evil.example"), alg="RS256",
                 kid=idp.kid)
    await assert_invalid(gateway[0], token, "iss")


async def test_expired(gateway: Running, idp: Idp) -> None:
    now = int(time.time())
    token = mint(private_key(idp), claims(idp, iat=now - 900, exp=now - 300), alg="RS256",
                 kid=idp.kid)
    await assert_invalid(gateway[0], token, "expired")


async def test_not_yet_valid(gateway: Running, idp: Idp) -> None:
    token = mint(private_key(idp), claims(idp, nbf=int(time.time()) + 600), alg="RS256",
                 kid=idp.kid)
    await assert_invalid(gateway[0], token, "nbf")


async def test_unknown_kid(gateway: Running, idp: Idp) -> None:
    token = mint(generate("RS256"), claims(idp), alg="RS256", kid="not-a-known-kid")
    await assert_invalid(gateway[0], token, "kid")


async def test_alg_none(gateway: Running, idp: Idp) -> None:
    token = mint_raw({"alg": "none", "typ": "at+jwt", "kid": idp.kid}, claims(idp), b"")
    await assert_invalid(gateway[0], token, "none")


async def test_hs256_keyed_with_the_public_key(gateway: Running, idp: Idp) -> None:
    """The classic key-confusion forgery: HMAC with the RSA public key as the secret."""
    public_pem = private_key(idp).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "typ": "at+jwt", "kid": idp.kid}
    unsigned = mint_raw(header, claims(idp), b"").rsplit(".", 1)[0]
    signature = hmac.new(public_pem, unsigned.encode(), hashlib.sha256).digest()
    await assert_invalid(gateway[0], mint_raw(header, claims(idp), signature), "HS256")


async def test_a_stranger_signing_under_a_known_kid(gateway: Running,
                                                    idp: Idp) -> None:
    token = mint(generate("RS256"), claims(idp), alg="RS256", kid=idp.kid)
    await assert_invalid(gateway[0], token, "signature")


async def test_garbage(gateway: Running) -> None:
    await assert_invalid(gateway[0], "not.a.jwt", "")
    status, headers, _ = await refused(gateway[0], "garbage-that-is-no-token")
    assert status == 401 and challenge_of(headers)["error"] == "invalid_token"


async def test_a_100_kb_token_is_refused_before_any_work(gateway: Running) -> None:
    """Bounded headers: 431 from the HTTP layer, never a parse."""
    status, _, body = await refused(gateway[0], "a" * 100_000)
    assert status == 431
    assert "header" in body["error_description"].lower()


async def test_a_token_in_the_query_string_is_refused(gateway: Running,
                                                      idp: Idp) -> None:
    token = await token_for(idp)
    client = RawClient(gateway[0] + f"?access_token={token}")
    try:
        reply = await client.initialize()
    finally:
        await client.aclose()
    assert reply.status == 400
    params = challenge_of(reply.headers)
    assert params["error"] == "invalid_request" and "query" in params["error_description"]


async def test_a_token_without_the_required_scope_is_forbidden(idp: Idp) -> None:
    async with running_gateway(oidc_docs(idp), auth=_settings(required=("mcp:admin",))) as (
            url, _):
        status, headers, body = await refused(url, await token_for(idp, scope="mcp:tools"))
        assert status == 403, body
        params = challenge_of(headers)
        assert params["error"] == "insufficient_scope" and params["scope"] == "mcp:admin"
        status, _, _ = await refused(url, await token_for(idp, scope="mcp:tools mcp:admin"))
        assert status == 200


def _settings(*, required: tuple[str, ...] = ()) -> Any:
    from vmcp_trio.auth.incoming.build import AuthSettings
    return AuthSettings(required_scopes=required)


# --- caches ---------------------------------------------------------------------------------------

async def test_a_flood_of_random_kids_costs_one_fetch(gateway: Running,
                                                      idp: Idp) -> None:
    url, running = gateway
    jwks = running.authenticator.keys  # type: ignore[attr-defined]
    before = jwks.fetches
    stranger = generate("RS256")
    for _ in range(30):
        token = mint(stranger, claims(idp), alg="RS256", kid=secrets.token_hex(8))
        status, _, _ = await refused(url, token)
        assert status == 401
    assert jwks.fetches - before <= 1


async def test_a_known_token_is_served_from_the_cache(gateway: Running,
                                                      idp: Idp) -> None:
    url, running = gateway
    token = await token_for(idp)
    cache = running.authenticator.cache  # type: ignore[attr-defined]
    assert (await refused(url, token))[0] == 200
    assert len(cache) >= 1
    jwks = running.authenticator.keys  # type: ignore[attr-defined]
    before = jwks.fetches
    for _ in range(5):
        assert (await refused(url, token))[0] == 200
    assert jwks.fetches == before


async def test_opaque_tokens_are_introspected(gateway: Running, idp: Idp) -> None:
    """A token that is not a JWT goes to introspection: active -> in; revoked -> 401."""
    url, running = gateway
    opaque = await token_for(idp, resource=None)
    assert opaque.count(".") != 2
    assert (await refused(url, opaque))[0] == 200
    revoked = await token_for(idp, resource=None)
    await trio.to_thread.run_sync(idp.revoke, revoked)
    await assert_invalid(url, revoked, "not active")
    introspector = running.authenticator.introspector  # type: ignore[attr-defined]
    calls = introspector.calls
    await assert_invalid(url, revoked, "not active")  # the negative answer is cached
    assert introspector.calls == calls


async def test_a_session_belongs_to_its_identity(gateway: Running, idp: Idp) -> None:
    """The same session id with another identity's (valid) token is unknown: 404."""
    url, _ = gateway
    owner = RawClient(url)
    owner.token = await token_for(idp, "confidential")
    thief = RawClient(url)
    thief.token = await token_for(idp, "other")
    try:
        assert (await owner.initialize()).status == 200
        thief.session_id = owner.session_id
        stolen = await thief.request("tools/list")
        assert stolen.status == 404
        assert (await owner.request("tools/list")).status == 200
    finally:
        await owner.aclose()
        await thief.aclose()


# --- the issuer changes or goes away ------------------------------------------------------------

async def test_a_rotated_key_is_picked_up_without_restart() -> None:
    with running_idp(resources={AUDIENCE: {}}) as idp:
        async with running_gateway(oidc_docs(idp, introspection=False)) as (url, _):
            old_token = await token_for(idp)
            assert (await refused(url, old_token))[0] == 200
            old_kid = idp.kid
            await trio.to_thread.run_sync(idp.rotate_keys)
            assert idp.kid != old_kid
            assert (await refused(url, await token_for(idp)))[0] == 200
            # The old key left the JWKS: the token it signed is no longer served from the
            # cache, and no longer verifies.
            await assert_invalid(url, old_token, "kid")


async def test_the_issuer_down_with_a_warm_and_a_cold_cache() -> None:
    """Warm: tokens seen before, and new tokens signed by a key already held, still pass.
    Cold: a gateway that never got the keys answers 503 with Retry-After at once, never
    hangs."""
    with running_idp(resources={AUDIENCE: {}}) as idp:
        async with running_gateway(oidc_docs(idp, introspection=False)) as (url, _):
            seen = await token_for(idp)
            fresh = await token_for(idp)
            assert (await refused(url, seen))[0] == 200
            await trio.to_thread.run_sync(idp.stop)
            assert (await refused(url, seen))[0] == 200
            assert (await refused(url, fresh))[0] == 200
        with trio.fail_after(15):
            async with running_gateway(oidc_docs(idp, introspection=False)) as (url, _):
                status, headers, body = await refused(url, seen)
        assert status == 503, body
        assert headers["retry-after"] == "5"
        assert body["error"] == "temporarily_unavailable"


# --- an MCP client that knows only the URL ----------------------------------------------------

async def test_the_sdk_oauth_client_discovers_the_issuer_through_vmcp() -> None:
    """The SDK's OAuth client provider reads vmcp's 401 and metadata, finds the provider,
    registers itself dynamically, logs the user in (headless) with the resource indicator of
    vmcp's metadata, and calls tools with the JWT it got."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    from .fixtures.idp import HeadlessBrowser, MemoryTokenStorage

    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    with running_idp(resources={resource: {}}) as idp:
        docs = oidc_docs(idp, audience=resource, introspection=False, resource_url=resource)
        async with running_gateway(docs, port=port) as (url, _):
            browser = HeadlessBrowser("alice")
            auth = OAuthClientProvider(
                server_url=url, client_metadata=OAuthClientMetadata(
                    client_name="sdk-test", redirect_uris=["http://127.0.0.1/callback"],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"], scope="mcp:tools",
                    token_endpoint_auth_method="none"),
                storage=MemoryTokenStorage(), redirect_handler=browser.redirect_handler,
                callback_handler=browser.callback_handler)
            async with httpx2.AsyncClient(auth=auth) as http, \
                    Client(streamable_http_client(url, http_client=http),
                           mode="legacy") as client:
                result = await client.call_tool("clock_add", {"a": 40, "b": 2})
                assert result.structured_content == {"sum": 42}
            assert browser.visits == 1


async def test_a_private_issuer_needs_jwks_allow_private_ip(idp: Idp) -> None:
    """The SSRF guard: without ``jwksAllowPrivateIP`` vmcp will not fetch documents from an
    issuer that resolves to a private or loopback address; requests get 503 naming the setting,
    and readiness and metrics show why."""
    docs = oidc_docs(idp, introspection=False)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    del vmcp["spec"]["incomingAuth"]["oidcConfig"]["inline"]["jwksAllowPrivateIP"]
    async with running_gateway(docs) as (url, _):
        status, _, body = await refused(url, await token_for(idp))
        assert status == 503 and "jwksAllowPrivateIP" in body["error_description"]
        client = RawClient(url)
        try:
            ready_status, _, ready = await client.http.request(
                "GET", url.removesuffix("/mcp") + "/readyz")
        finally:
            await client.aclose()
        answer = json.loads(ready)
        assert ready_status == 503 and answer["status"] == "not ready"
        assert answer["auth"]["keys"] == "unknown"
        assert "jwksAllowPrivateIP" in answer["auth"]["lastError"]
        assert answer["notReady"]["auth"].startswith("the issuer's signing keys were never "
                                                     "fetched")
        assert "vmcp_auth_keys_healthy 0.0" in await metrics_text(url)


async def test_readiness_says_no_while_the_issuer_is_down(idp: Idp) -> None:
    """An issuer whose keys could never be fetched: every request with a token would get 503,
    so /readyz is 503 and says why; /health stays 200 (the process lives)."""
    docs = oidc_docs(idp, introspection=False)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"]["oidcConfig"]["inline"]["issuer"] = \
        f"http://127.0.0.1:{free_port()}"
    async with running_gateway(docs) as (url, _):
        client = RawClient(url)
        try:
            base = url.removesuffix("/mcp")
            ready_status, _, ready = await client.http.request("GET", base + "/readyz")
            health_status, _, _ = await client.http.request("GET", base + "/health")
        finally:
            await client.aclose()
    answer = json.loads(ready)
    assert ready_status == 503 and health_status == 200
    assert "never fetched" in answer["notReady"]["auth"]
    assert "storage" not in answer["notReady"]


@contextlib.contextmanager
def https_jwks(tls: tuple[Path, Path], jwks: dict[str, Any]) -> Iterator[str]:
    """A JWKS document served over https with the given certificate, on 127.0.0.1."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(jwks).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls[0]), str(tls[1]))
    # The handshake in each request's thread: one a client gives up on must not stall accept.
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)  # shutdown() waits up to one poll
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_issuer_behind_a_private_ca_is_trusted_through_its_ca_bundle(
        tmp_path: Path) -> None:
    """An MCPOIDCConfig's caBundleRef: the issuer's JWKS is fetched over TLS that chains to
    the bundle's CA; without the bundle the same issuer's keys cannot be had (503)."""
    ca, cert, key = private_ca(tmp_path, "issuer")
    signing = generate("RS256")
    with https_jwks((cert, key), {"keys": [jwk_of(signing.public_key(), "k1", "RS256")]}) \
            as issuer:
        now = int(time.time())
        token = mint(signing, {"iss": issuer, "aud": "gw", "sub": "alice", "iat": now,
                               "exp": now + 300}, alg="RS256", kid="k1")
        for bundle in (ca.read_text(), None):
            plan = OIDCIncoming(issuer=issuer, audience="gw", jwks_url=f"{issuer}/jwks",
                                jwks_allow_private_ip=True, ca_bundle=bundle)
            client = HttpClient()
            authenticator = build_authenticator(plan, AuthSettings(), client)
            try:
                if bundle is not None:
                    assert (await authenticator.authenticate(token)).subject == "alice"
                else:
                    with pytest.raises(AuthFailure) as refused:
                        await authenticator.authenticate(token)
                    assert refused.value.status == 503
            finally:
                await client.aclose()
