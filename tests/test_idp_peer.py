"""The real OpenID provider (oidc-provider, tests/peers/idp.mjs) and tests/fixtures/idp.py.

What the gateway's token-validation tests rely on: discovery at both well-known paths, JWT access
tokens for a resource (``typ: at+jwt``, ``aud`` = the resource, signed by a key the tests know),
opaque tokens that RFC 7662 introspection describes, headless logins for distinct users, key
rotation on the same issuer, the issuer going down and coming back, and a headless browser for the
MCP SDK's ``OAuthClientProvider``. And RFC 8693 token exchange, a stand-in grant we added to the
provider (no installable program offers RFC 8693): which subject tokens it accepts (its own, a
trusted external issuer's), what it refuses, its counters and its test-only fail/slow modes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import httpx2
import hypercorn.trio
import pytest
import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
)
from hypercorn.config import Config
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientMetadata

from .fixtures.idp import (
    ACCESS_TOKEN_TYPE,
    DEFAULT_RESOURCE,
    ID_TOKEN_TYPE,
    HeadlessBrowser,
    Idp,
    IdpError,
    MemoryTokenStorage,
    b64decode,
    browse,
    decode,
    running_idp,
    served_jwks,
    verify,
)
from .helpers import free_port

OTHER_RESOURCE = "http://127.0.0.1:9/other"
RESOURCES: dict[str, dict[str, Any]] = {
    DEFAULT_RESOURCE: {},
    OTHER_RESOURCE: {"audience": "urn:other", "scope": "mcp:admin", "accessTokenTTL": 60},
}


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    """One provider for the tests that neither restart it nor change its keys."""
    with running_idp(resources=RESOURCES) as running:
        yield running


@pytest.fixture
def own_idp() -> Iterator[Idp]:
    """A provider of the test's own, for restarts and key rotation."""
    with running_idp() as running:
        yield running


def test_discovery_documents_at_both_well_known_paths(idp: Idp) -> None:
    oidc = httpx2.get(f"{idp.issuer}/.well-known/openid-configuration", timeout=10)
    rfc8414 = httpx2.get(f"{idp.issuer}/.well-known/oauth-authorization-server", timeout=10)
    assert oidc.status_code == rfc8414.status_code == 200
    assert oidc.json() == rfc8414.json()
    meta = rfc8414.json()
    assert meta["issuer"] == idp.issuer == f"http://127.0.0.1:{idp.port}"
    assert meta["jwks_uri"] == idp.jwks_uri
    assert meta["introspection_endpoint"] == idp.introspection_endpoint
    assert meta["token_endpoint"] == idp.token_endpoint
    assert meta["authorization_endpoint"] == idp.authorization_endpoint
    assert meta["registration_endpoint"] == idp.registration_endpoint
    assert meta["revocation_endpoint"] == idp.revocation_endpoint
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert {"openid", "offline_access", "mcp:tools", "mcp:admin"} <= set(meta["scopes_supported"])
    assert {"authorization_code", "refresh_token", "client_credentials"} <= set(
        meta["grant_types_supported"])
    assert meta["authorization_response_iss_parameter_supported"] is True
    # The provider serves exactly the public half of the keys the tests generated.
    assert served_jwks(idp) == idp.public_jwks()
    assert all("d" not in key for key in idp.public_jwks()["keys"])


def test_client_credentials_with_a_resource_is_a_jwt_for_that_audience(idp: Idp) -> None:
    response = idp.client_credentials_token(resource=DEFAULT_RESOURCE)
    token = response["access_token"]
    assert token.count(".") == 2
    header, _ = decode(token)
    assert header["typ"] == "at+jwt" and header["alg"] == "RS256"
    assert header["kid"] == idp.kid
    assert header["kid"] in {key["kid"] for key in idp.public_jwks()["keys"]}
    claims = verify(token, served_jwks(idp))
    assert claims["aud"] == DEFAULT_RESOURCE
    assert claims["iss"] == idp.issuer
    assert claims["sub"] == claims["client_id"] == "confidential"
    assert claims["scope"] == "mcp:tools mcp:admin" == response["scope"]
    assert claims["exp"] - claims["iat"] == 600 == response["expires_in"]

    # Another resource: its own audience, scopes (the requested ones it offers) and lifetime.
    other = idp.client_credentials_token("other", resource=OTHER_RESOURCE,
                                         scope="mcp:tools mcp:admin")
    claims = verify(other["access_token"], served_jwks(idp))
    assert claims["aud"] == "urn:other"
    assert claims["client_id"] == "other" and claims["scope"] == "mcp:admin"
    assert claims["exp"] - claims["iat"] == 60

    with pytest.raises(IdpError, match="invalid_target"):
        idp.client_credentials_token(resource="http://127.0.0.1:9/unknown")


def test_without_a_resource_the_token_is_opaque_and_introspectable(idp: Idp) -> None:
    token = idp.client_credentials_token(scope="mcp:tools")["access_token"]
    assert "." not in token
    info = idp.introspect(token)
    assert info["active"] is True
    assert info["client_id"] == "confidential"
    assert info["iss"] == idp.issuer
    assert info["token_type"] == "Bearer"
    assert info["exp"] > info["iat"]
    # Another client may introspect it too; a revoked or unknown token is inactive.
    assert idp.introspect(token, client="other")["active"] is True
    idp.revoke(token)
    assert idp.introspect(token) == {"active": False}
    assert idp.introspect("not-a-token") == {"active": False}
    # oidc-provider refuses to introspect its own JWT access tokens.
    jwt = idp.client_credentials_token(resource=DEFAULT_RESOURCE)["access_token"]
    with pytest.raises(IdpError, match="unsupported_token_type"):
        idp.introspect(jwt)


def test_login_gives_a_jwt_whose_subject_is_the_user(idp: Idp) -> None:
    alice = idp.login_token("alice", resource=DEFAULT_RESOURCE)
    claims = verify(alice["access_token"], served_jwks(idp))
    assert claims["sub"] == "alice"
    assert claims["aud"] == DEFAULT_RESOURCE and claims["iss"] == idp.issuer
    assert claims["client_id"] == "confidential"
    assert claims["scope"] == "mcp:tools"  # only the resource's scopes reach the access token
    assert decode(alice["id_token"])[1]["sub"] == "alice"
    assert alice["refresh_token"]

    # A refresh keeps the granted resource: a JWT for the same user and audience.
    refreshed = idp.refresh(alice["refresh_token"])
    claims = verify(refreshed["access_token"], served_jwks(idp))
    assert (claims["sub"], claims["aud"]) == ("alice", DEFAULT_RESOURCE)

    # Another user through the public client (PKCE, no secret).
    carol = idp.login_token("carol", client="public", resource=DEFAULT_RESOURCE)
    claims = verify(carol["access_token"], served_jwks(idp))
    assert (claims["sub"], claims["client_id"]) == ("carol", "public")

    # Without a resource: opaque, and introspection names the user.
    bob = idp.login_token("bob")
    assert "." not in bob["access_token"] and bob["refresh_token"]
    info = idp.introspect(bob["access_token"])
    assert info["active"] is True and info["sub"] == "bob"
    assert info["scope"] == "openid offline_access mcp:tools"


def test_public_clients_must_use_pkce(idp: Idp) -> None:
    state = secrets.token_urlsafe(8)
    result = browse(idp.authorization_url(client="public", state=state), "eve")
    assert result["error"] == "invalid_request"
    assert "PKCE" in result["error_description"]
    assert result["state"] == state


def test_dynamic_client_registration_is_open(idp: Idp) -> None:
    response = httpx2.post(idp.registration_endpoint, timeout=10, json={
        "redirect_uris": ["http://127.0.0.1:33333/callback"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "scope": "openid offline_access mcp:tools",
    })
    assert response.status_code == 201, response.text
    assert response.json()["client_id"]
    refused = httpx2.post(idp.registration_endpoint, timeout=10, json={
        "redirect_uris": ["http://127.0.0.1:33333/callback"], "scope": "openid nope"})
    assert refused.status_code == 400


def test_rotate_keys_serves_a_new_key_on_the_same_issuer(own_idp: Idp) -> None:
    port, issuer, old_kid = own_idp.port, own_idp.issuer, own_idp.kid
    old_token = own_idp.client_credentials_token(resource=DEFAULT_RESOURCE)["access_token"]
    assert decode(old_token)[0]["kid"] == old_kid

    own_idp.rotate_keys()
    assert (own_idp.port, own_idp.issuer) == (port, issuer)
    assert own_idp.kid != old_kid
    assert [key["kid"] for key in served_jwks(own_idp)["keys"]] == [own_idp.kid]
    token = own_idp.client_credentials_token(resource=DEFAULT_RESOURCE)["access_token"]
    assert decode(token)[0]["kid"] == own_idp.kid
    assert verify(token, served_jwks(own_idp))["iss"] == issuer
    with pytest.raises(ValueError):  # the old key is gone
        verify(old_token, served_jwks(own_idp))

    # Another key type: the tokens follow its alg.
    own_idp.rotate_keys("ES256")
    login = own_idp.login_token("alice", resource=DEFAULT_RESOURCE)
    header, _ = decode(login["access_token"])
    assert (header["alg"], header["kid"]) == ("ES256", own_idp.kid)
    assert verify(login["access_token"], served_jwks(own_idp))["sub"] == "alice"


def test_stop_closes_the_port_and_start_brings_the_issuer_back(own_idp: Idp) -> None:
    kid = own_idp.kid
    own_idp.stop()
    assert not own_idp.running and not own_idp.port_open()
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(own_idp.jwks_uri, timeout=5)

    own_idp.start()
    assert own_idp.running and own_idp.port_open()
    meta = httpx2.get(f"{own_idp.issuer}/.well-known/openid-configuration", timeout=10).json()
    assert meta["issuer"] == own_idp.issuer
    token = own_idp.client_credentials_token(resource=DEFAULT_RESOURCE)["access_token"]
    assert decode(token)[0]["kid"] == kid  # same config, same keys


@pytest.mark.parametrize("client", ["confidential", "public"])
async def test_headless_browser_drives_the_authorization_code_flow(idp: Idp, client: str) -> None:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(
        hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    url = idp.authorization_url(client=client, scope="openid offline_access mcp:tools",
                                resource=DEFAULT_RESOURCE, state=state, code_challenge=challenge)
    browser = HeadlessBrowser("dave")
    with trio.fail_after(20):
        await browser.redirect_handler(url)
        result = await browser.callback_handler()
    assert result.state == state and result.iss == idp.issuer and result.code

    tokens = await trio.to_thread.run_sync(functools.partial(
        idp.exchange_code, result.code, client=client, code_verifier=verifier,
        resource=DEFAULT_RESOURCE))
    claims = verify(tokens["access_token"], served_jwks(idp))
    assert (claims["sub"], claims["aud"], claims["client_id"]) == ("dave", DEFAULT_RESOURCE,
                                                                   client)
    assert tokens["refresh_token"]
    # A code is single use.
    with pytest.raises(IdpError, match="invalid_grant"):
        await trio.to_thread.run_sync(functools.partial(
            idp.exchange_code, result.code, client=client, code_verifier=verifier))


async def test_the_sdk_oauth_client_logs_in_through_the_headless_browser() -> None:
    """The MCP SDK's OAuthClientProvider against an SDK resource server that trusts the provider:
    PRM and RFC 8414 discovery, open DCR, PKCE + resource, and HeadlessBrowser as the user agent."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with running_idp(resources={url: {}}) as idp:
        jwks = served_jwks(idp)
        seen: list[dict[str, Any]] = []

        class Verifier:
            async def verify_token(self, token: str) -> AccessToken | None:
                try:
                    claims = verify(token, jwks)
                except (ValueError, InvalidSignature):
                    return None
                seen.append(claims)
                return AccessToken(token=token, client_id=claims["client_id"],
                                   scopes=claims.get("scope", "").split(),
                                   expires_at=claims["exp"], resource=claims["aud"],
                                   subject=claims["sub"])

        server = MCPServer("protected", token_verifier=Verifier(), auth=AuthSettings(
            issuer_url=idp.issuer, resource_server_url=url, required_scopes=["mcp:tools"],
            validate_token_resource=True))

        @server.tool()
        def hello() -> str:
            return "hi"

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = config.errorlog = None
        browser = HeadlessBrowser("zed")
        auth = OAuthClientProvider(url, OAuthClientMetadata(
            redirect_uris=["http://127.0.0.1:1/callback"], client_name="sdk", scope="mcp:tools",
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none"), MemoryTokenStorage(),
            redirect_handler=browser.redirect_handler, callback_handler=browser.callback_handler)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(
                    hypercorn.trio.serve, server.streamable_http_app(streamable_http_path="/mcp"),
                    config, shutdown_trigger=trio.sleep_forever))
                async with (httpx2.AsyncClient(auth=auth, timeout=20) as http,
                            Client(streamable_http_client(url, http_client=http)) as client):
                    tools = await client.list_tools()
                nursery.cancel_scope.cancel()
    assert [tool.name for tool in tools.tools] == ["hello"]
    assert browser.visits == 1
    assert seen and {(c["sub"], c["aud"], c["iss"]) for c in seen} == {("zed", url, idp.issuer)}


# --- RFC 8693 token exchange (our stand-in grant in tests/peers/idp.mjs) -----------------------

class ExternalIssuer:
    """A tiny external issuer: an ES256 key whose JWKS a stdlib HTTP server serves on 127.0.0.1,
    and JWTs minted for it with ``cryptography``."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        numbers = self.key.public_key().public_numbers()
        self.kid = "external-1"
        jwks = {"keys": [{"kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256",
                          "use": "sig", "x": _b64(numbers.x.to_bytes(32, "big")),
                          "y": _b64(numbers.y.to_bytes(32, "big"))}]}
        body = json.dumps(jwks).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.jwks_uri = f"{self.issuer}/jwks"
        self.thread = threading.Thread(target=self.server.serve_forever,  # shutdown(): one poll
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ExternalIssuer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def mint(self, sub: str, *, key: ec.EllipticCurvePrivateKey | None = None,
             ttl: int = 300, **claims: Any) -> str:
        """An ES256 JWT (``iss`` = this issuer unless ``claims`` say otherwise), signed with
        ``key`` (default: the key the JWKS serves) under this issuer's kid."""
        now = int(time.time())
        payload = {"iss": self.issuer, "sub": sub, "aud": "vmcp", "iat": now, "exp": now + ttl,
                   **claims}
        header = {"alg": "ES256", "typ": "JWT", "kid": self.kid}
        signing_input = (_b64(json.dumps(header).encode()) + "."
                         + _b64(json.dumps(payload).encode())).encode()
        der = (key or self.key).sign(signing_input, ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input.decode()}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@pytest.fixture(scope="module")
def external() -> Iterator[ExternalIssuer]:
    with ExternalIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="module")
def xidp(external: ExternalIssuer) -> Iterator[Idp]:
    """A provider with token exchange: audiences backend-a (defaults) and backend-b, trusting
    ``external``."""
    with running_idp(resources=RESOURCES, token_exchange={
        "trustedIssuers": [{"issuer": external.issuer, "jwksUri": external.jwks_uri}],
        "audiences": {"backend-a": {}, "backend-b": {"scope": "mcp:tools", "accessTokenTTL": 60}},
    }) as running:
        yield running


@pytest.fixture
def exchange_mode(xidp: Idp) -> Iterator[Idp]:
    """``xidp``, put back in mode "ok" after the test."""
    try:
        yield xidp
    finally:
        xidp.set_exchange_mode("ok")


def test_exchange_of_an_own_access_token_gives_a_jwt_for_the_audience(xidp: Idp) -> None:
    subject = xidp.client_credentials_token(resource=DEFAULT_RESOURCE)["access_token"]
    original = verify(subject, served_jwks(xidp))
    response = xidp.exchange(subject, audience="backend-a")
    assert response["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert response["token_type"] == "Bearer"
    assert response["scope"] == "mcp:tools mcp:admin"
    assert response["expires_in"] == 600
    header, _ = decode(response["access_token"])
    assert (header["typ"], header["kid"]) == ("at+jwt", xidp.kid)
    claims = verify(response["access_token"], served_jwks(xidp))
    assert claims["aud"] == "backend-a"
    assert claims["sub"] == original["sub"] == "confidential"
    assert claims["iss"] == xidp.issuer
    assert claims["client_id"] == "confidential"
    assert claims["scope"] == "mcp:tools mcp:admin"
    assert claims["exp"] - claims["iat"] == 600
    assert "act" not in claims  # the client exchanged its own token: no delegation
    meta = httpx2.get(f"{xidp.issuer}/.well-known/openid-configuration", timeout=10).json()
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in meta["grant_types_supported"]


def test_exchange_of_a_users_tokens_keeps_the_user_as_subject(xidp: Idp) -> None:
    alice = xidp.login_token("alice", resource=DEFAULT_RESOURCE)
    claims = verify(xidp.exchange(alice["access_token"], audience="backend-b")["access_token"],
                    served_jwks(xidp))
    assert (claims["sub"], claims["aud"], claims["scope"]) == ("alice", "backend-b", "mcp:tools")
    assert claims["exp"] - claims["iat"] == 60
    assert claims["act"] == {"sub": "confidential"}
    # Its ID token (subject_token_type id_token), and an opaque access token of this provider.
    by_id = xidp.exchange(alice["id_token"], audience="backend-a",
                          subject_token_type=ID_TOKEN_TYPE)
    assert verify(by_id["access_token"], served_jwks(xidp))["sub"] == "alice"
    opaque = xidp.login_token("bob")["access_token"]
    assert "." not in opaque
    by_opaque = xidp.exchange(opaque, client="other", audience="backend-a")
    claims = verify(by_opaque["access_token"], served_jwks(xidp))
    assert (claims["sub"], claims["client_id"]) == ("bob", "other")


def test_exchange_accepts_a_jwt_of_a_trusted_external_issuer(xidp: Idp,
                                                             external: ExternalIssuer) -> None:
    subject = external.mint("ext-user", act={"sub": "upstream-agent"})
    response = xidp.exchange(subject, audience="backend-a", scope="mcp:tools")
    assert response["issued_token_type"] == ACCESS_TOKEN_TYPE
    claims = verify(response["access_token"], served_jwks(xidp))
    assert claims["iss"] == xidp.issuer  # re-issued by this provider
    assert (claims["sub"], claims["aud"], claims["scope"]) == ("ext-user", "backend-a",
                                                               "mcp:tools")
    # The caller acts for the subject; the subject token's own actor nests inside.
    assert claims["act"] == {"sub": "confidential", "act": {"sub": "upstream-agent"}}


def _forged(external: ExternalIssuer, idp: Idp) -> str:
    return external.mint("mallory", key=ec.generate_private_key(ec.SECP256R1()))


def _untrusted(external: ExternalIssuer, idp: Idp) -> str:
    return external.mint("mallory", iss="http://127.0.0.1:9/untrusted")


def _expired(external: ExternalIssuer, idp: Idp) -> str:
    return external.mint("late", iat=int(time.time()) - 600, ttl=-300)


def _tampered_own(external: ExternalIssuer, idp: Idp) -> str:
    header, payload, signature = idp.client_credentials_token(
        resource=DEFAULT_RESOURCE)["access_token"].split(".")
    claims = json.loads(b64decode(payload)) | {"sub": "admin"}
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


def _garbage(external: ExternalIssuer, idp: Idp) -> str:
    return "not-a-token-of-anyone"


@pytest.mark.parametrize("subject", [_forged, _untrusted, _expired, _tampered_own, _garbage],
                         ids=lambda f: f.__name__.strip("_"))
def test_exchange_refuses_an_untrusted_or_forged_subject(xidp: Idp, external: ExternalIssuer,
                                                         subject: Any) -> None:
    before = xidp.exchange_stats()["total"]
    with pytest.raises(IdpError) as refused:
        xidp.exchange(subject(external, xidp), audience="backend-a")
    assert refused.value.status == 400
    assert refused.value.body["error"] == "invalid_grant"
    assert refused.value.body["error_description"]
    assert xidp.exchange_stats()["total"] == before


def test_exchange_refuses_an_unknown_audience(xidp: Idp, external: ExternalIssuer) -> None:
    with pytest.raises(IdpError) as refused:
        xidp.exchange(external.mint("u"), audience="backend-unknown")
    assert refused.value.status == 400
    assert refused.value.body["error"] == "invalid_target"


def test_exchange_accepts_client_secret_post_as_well_as_basic(xidp: Idp,
                                                             external: ExternalIssuer) -> None:
    auths: tuple[Literal["basic", "post"], ...] = ("basic", "post")
    for auth in auths:
        response = xidp.exchange(external.mint(f"via-{auth}"), client="other",
                                 audience="backend-a", auth=auth)
        claims = verify(response["access_token"], served_jwks(xidp))
        assert (claims["sub"], claims["client_id"]) == (f"via-{auth}", "other")
    # A wrong secret is still refused, in the form as in the header.
    secret = xidp.clients["other"].client_secret
    xidp.clients["other"].client_secret = "wrong"
    try:
        for auth in auths:
            with pytest.raises(IdpError) as refused:
                xidp.exchange(external.mint("x"), client="other", audience="backend-a", auth=auth)
            assert (refused.value.status, refused.value.body["error"]) == (401, "invalid_client")
    finally:
        xidp.clients["other"].client_secret = secret


def test_exchange_stats_count_per_audience(xidp: Idp, external: ExternalIssuer) -> None:
    xidp.reset_exchange_stats()
    assert xidp.exchange_stats() == {"total": 0, "attempts": 0, "failed": 0, "byAudience": {},
                                     "byClient": {}, "subjects": []}
    for sub, audience, client in [("s1", "backend-a", "confidential"),
                                  ("s2", "backend-a", "other"),
                                  ("s3", "backend-b", "confidential")]:
        xidp.exchange(external.mint(sub), client=client, audience=audience)
    with pytest.raises(IdpError):
        xidp.exchange(external.mint("s4"), audience="backend-unknown")
    stats = xidp.exchange_stats()
    assert stats["total"] == 3 and stats["attempts"] == 4
    assert stats["byAudience"] == {"backend-a": 2, "backend-b": 1}
    assert stats["byClient"] == {"confidential": {"backend-a": 1, "backend-b": 1},
                                 "other": {"backend-a": 1}}
    assert stats["subjects"] == ["s1", "s2", "s3"]


def test_exchange_mode_fail_answers_500(exchange_mode: Idp, external: ExternalIssuer) -> None:
    exchange_mode.set_exchange_mode("fail")
    failed = exchange_mode.exchange_stats()["failed"]
    with pytest.raises(IdpError) as refused:
        exchange_mode.exchange(external.mint("u"), audience="backend-a")
    assert refused.value.status == 500
    assert refused.value.body["error"] == "server_error"
    assert exchange_mode.exchange_stats()["failed"] == failed + 1


def test_exchange_mode_slow_delays_the_answer(exchange_mode: Idp,
                                              external: ExternalIssuer) -> None:
    exchange_mode.set_exchange_mode("slow", delay_seconds=1.0)
    started = time.monotonic()
    response = exchange_mode.exchange(external.mint("patient"), audience="backend-a")
    assert time.monotonic() - started >= 0.9
    assert verify(response["access_token"], served_jwks(exchange_mode))["sub"] == "patient"


def test_exchange_mode_ok_restores_the_grant(exchange_mode: Idp, external: ExternalIssuer) -> None:
    exchange_mode.set_exchange_mode("fail")
    with pytest.raises(IdpError):
        exchange_mode.exchange(external.mint("u"), audience="backend-a")
    exchange_mode.set_exchange_mode("ok")
    response = exchange_mode.exchange(external.mint("back"), audience="backend-a")
    assert verify(response["access_token"], served_jwks(exchange_mode))["sub"] == "back"
    with pytest.raises(IdpError) as refused:  # and the mode route checks its input
        exchange_mode.set_exchange_mode("sideways")  # type: ignore[arg-type]
    assert refused.value.status == 400
