"""The OAuth client core (vmcp_trio/auth/oauth) and the project's base64url, on their own.

The network cases run against a small scripted server written here (stdlib ``http.server`` in a
thread, as tests/test_token_exchanger.py has it): each case says what every path answers, and
the server records what the client asked, in order. The login flows through these modules against
a real provider are in tests/test_authserver_upstream.py and tests/test_token_exchanger.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.auth.oauth.authorize import authorization_url
from vmcp_trio.auth.oauth.discovery import (
    DiscoveryError,
    authorization_server_metadata,
    authorization_server_metadata_urls,
    discover,
    protected_resource_metadata,
)
from vmcp_trio.auth.oauth.pkce import pkce_pair, supports_s256
from vmcp_trio.auth.oauth.registration import RegistrationError, register_client
from vmcp_trio.auth.oauth.tokens import (
    ClientCredentials,
    TokenEndpointError,
    parse_token_response,
    token_request,
)
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol import base64url
from vmcp_trio.resources.plan import TokenResponseMappingPlan

LOCAL = {"allow_http": True, "allow_private": True}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Scripted:
    """``answers[path] = (status, JSON document)``; any other path is 404. ``seen`` is every
    request, in order."""

    url: str = ""
    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [request.path for request in self.seen]


@pytest.fixture
def server() -> Iterator[Scripted]:
    state = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            state.seen.append(Seen(self.command, self.path,
                                   {k.lower(): v for k, v in self.headers.items()},
                                   self.rfile.read(length)))
            status, document = state.answers.get(self.path, (404, {"error": "not_found"}))
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    try:
        yield client
    finally:
        await client.aclose()


def as_metadata(issuer: str, **changes: Any) -> dict[str, Any]:
    return {"issuer": issuer, "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token", "registration_endpoint": f"{issuer}/register",
            "code_challenge_methods_supported": ["S256"], "scopes_supported": ["mcp", 7],
            **changes}


# --- where metadata lives ----------------------------------------------------------------------

def test_metadata_url_order_for_an_issuer_with_a_path() -> None:
    assert authorization_server_metadata_urls("https://auth.example/tenant/a/") == [
        "https://auth.example/.well-known/oauth-authorization-server/tenant/a",
        "https://auth.example/.well-known/openid-configuration/tenant/a",
        "https://auth.example/tenant/a/.well-known/openid-configuration"]


def test_metadata_url_order_for_an_issuer_without_a_path() -> None:
    for issuer in ("https://auth.example", "https://auth.example/"):
        assert authorization_server_metadata_urls(issuer) == [
            "https://auth.example/.well-known/oauth-authorization-server",
            "https://auth.example/.well-known/openid-configuration"]


# --- RFC 9728 ----------------------------------------------------------------------------------

async def test_protected_resource_path_insert_first(server: Scripted, http: HttpClient) -> None:
    resource = f"{server.url}/mcp"
    server.answers["/.well-known/oauth-protected-resource/mcp"] = (200, {
        "resource": resource, "authorization_servers": [f"{server.url}/as", None],
        "scopes_supported": ["mcp:tools"]})
    found = await protected_resource_metadata(http, resource, metadata_url=None, **LOCAL)
    assert found.resource == resource
    assert found.authorization_servers == (f"{server.url}/as",)
    assert found.scopes_supported == ("mcp:tools",)
    assert server.paths() == ["/.well-known/oauth-protected-resource/mcp"]


async def test_protected_resource_falls_back_to_the_root(server: Scripted,
                                                          http: HttpClient) -> None:
    resource = f"{server.url}/mcp"
    server.answers["/.well-known/oauth-protected-resource"] = (200, {
        "resource": resource, "authorization_servers": [server.url]})
    found = await protected_resource_metadata(http, resource, metadata_url=None, **LOCAL)
    assert found.authorization_servers == (server.url,) and found.scopes_supported == ()
    assert server.paths() == ["/.well-known/oauth-protected-resource/mcp",
                              "/.well-known/oauth-protected-resource"]


async def test_protected_resource_of_another_resource_is_refused(server: Scripted,
                                                                 http: HttpClient) -> None:
    resource = f"{server.url}/mcp"
    server.answers["/.well-known/oauth-protected-resource/mcp"] = (200, {
        "resource": "https://elsewhere.example/mcp", "authorization_servers": [server.url]})
    server.answers["/.well-known/oauth-protected-resource"] = (200, {
        "resource": resource, "authorization_servers": [server.url]})
    with pytest.raises(DiscoveryError) as caught:
        await protected_resource_metadata(http, resource, metadata_url=None, **LOCAL)
    assert "https://elsewhere.example/mcp" in str(caught.value)
    assert resource in str(caught.value)
    assert len(server.seen) == 1  # a mismatch is not a reason to look further


async def test_protected_resource_is_compared_as_a_url(server: Scripted,
                                                       http: HttpClient) -> None:
    port = urlsplit(server.url).port
    server.answers["/prm"] = (200, {"resource": f"HTTP://127.0.0.1:{port}/mcp/",
                                    "authorization_servers": [server.url]})
    found = await protected_resource_metadata(http, f"http://127.0.0.1:{port}/mcp",
                                              metadata_url=f"{server.url}/prm", **LOCAL)
    assert found.authorization_servers == (server.url,)
    assert server.paths() == ["/prm"]  # the challenge's URL only, no well-known guessing
    server.answers["/prm"] = (200, {"resource": "https://MCP.example:443/mcp/",
                                    "authorization_servers": [server.url]})
    found = await protected_resource_metadata(http, "https://mcp.example/mcp",
                                              metadata_url=f"{server.url}/prm", **LOCAL)
    assert found.resource == "https://MCP.example:443/mcp/"  # as the document names it
    server.answers["/prm"] = (200, {"resource": f"http://127.0.0.1:{port}/mcp/other"})
    with pytest.raises(DiscoveryError, match="/mcp/other"):
        await protected_resource_metadata(http, f"http://127.0.0.1:{port}/mcp",
                                          metadata_url=f"{server.url}/prm", **LOCAL)


async def test_protected_resource_may_name_a_parent_of_the_server(server: Scripted,
                                                                 http: HttpClient) -> None:
    """As the MCP SDKs allow: the origin, or a base path at a segment boundary; not a sibling
    path, another origin, or a parent with a query."""
    port = urlsplit(server.url).port
    base = f"http://127.0.0.1:{port}"
    for named in (base, f"{base}/", f"{base}/api"):
        server.answers["/prm"] = (200, {"resource": named, "authorization_servers": []})
        found = await protected_resource_metadata(http, f"{base}/api/mcp",
                                                  metadata_url=f"{server.url}/prm", **LOCAL)
        assert found.resource == named
    for named in (f"{base}/ap", f"http://localhost:{port}", f"{base}/?tenant=a",
                  f"{base}/api/mcp/deeper"):
        server.answers["/prm"] = (200, {"resource": named, "authorization_servers": []})
        with pytest.raises(DiscoveryError):
            await protected_resource_metadata(http, f"{base}/api/mcp",
                                              metadata_url=f"{server.url}/prm", **LOCAL)


async def test_protected_resource_urls_pass_the_ssrf_guard(server: Scripted,
                                                           http: HttpClient) -> None:
    with pytest.raises(DiscoveryError, match="plain http"):
        await protected_resource_metadata(http, f"{server.url}/mcp", metadata_url=None,
                                          allow_http=False, allow_private=True)
    with pytest.raises(DiscoveryError, match="non-public"):
        await protected_resource_metadata(http, f"{server.url}/mcp",
                                          metadata_url=f"{server.url}/prm", allow_http=True,
                                          allow_private=False)
    assert server.seen == []


async def test_no_protected_resource_metadata_names_what_was_tried(server: Scripted,
                                                                   http: HttpClient) -> None:
    with pytest.raises(DiscoveryError, match=r"HTTP 404.*HTTP 404"):
        await protected_resource_metadata(http, f"{server.url}/mcp", metadata_url=None, **LOCAL)


# --- RFC 8414 ----------------------------------------------------------------------------------

async def test_authorization_server_metadata_in_the_mcp_order(server: Scripted,
                                                              http: HttpClient) -> None:
    issuer = f"{server.url}/tenant"
    server.answers["/.well-known/openid-configuration/tenant"] = (200, as_metadata(issuer))
    metadata = await authorization_server_metadata(http, issuer, **LOCAL)
    assert server.paths() == ["/.well-known/oauth-authorization-server/tenant",
                              "/.well-known/openid-configuration/tenant"]
    assert (metadata.issuer, metadata.authorization_endpoint, metadata.token_endpoint,
            metadata.registration_endpoint) == (issuer, f"{issuer}/authorize", f"{issuer}/token",
                                                f"{issuer}/register")
    assert metadata.code_challenge_methods_supported == ("S256",)
    assert metadata.scopes_supported == ("mcp",)
    assert metadata.document["issuer"] == issuer
    assert supports_s256(metadata)


async def test_authorization_server_metadata_of_another_issuer_is_refused(
        server: Scripted, http: HttpClient) -> None:
    server.answers["/.well-known/oauth-authorization-server"] = (
        200, as_metadata("https://evil.example"))
    with pytest.raises(DiscoveryError) as caught:
        await authorization_server_metadata(http, server.url, **LOCAL)
    assert "https://evil.example" in str(caught.value) and server.url in str(caught.value)
    assert len(server.seen) == 1


async def test_authorization_server_metadata_is_checked(server: Scripted,
                                                        http: HttpClient) -> None:
    path = "/.well-known/oauth-authorization-server"
    server.answers[path] = (200, as_metadata(server.url, token_endpoint=None))
    with pytest.raises(DiscoveryError, match="has no token_endpoint"):
        await authorization_server_metadata(http, server.url, **LOCAL)
    server.answers[path] = (200, as_metadata(server.url,
                                             authorization_endpoint="javascript:alert(1)"))
    with pytest.raises(DiscoveryError, match="authorization_endpoint that is not"):
        await authorization_server_metadata(http, server.url, **LOCAL)
    server.answers[path] = (200, as_metadata(server.url,
                                             code_challenge_methods_supported=None,
                                             registration_endpoint=None))
    metadata = await authorization_server_metadata(http, server.url, **LOCAL)
    assert not supports_s256(metadata) and metadata.registration_endpoint is None


async def test_a_configured_issuer_is_discovered_oidc_first(server: Scripted,
                                                            http: HttpClient) -> None:
    issuer = f"{server.url}/realm"
    server.answers["/.well-known/oauth-authorization-server/realm"] = (200, as_metadata(issuer))
    assert (await discover(http, issuer, **LOCAL))["issuer"] == issuer
    assert server.paths() == ["/realm/.well-known/openid-configuration",
                              "/.well-known/oauth-authorization-server/realm"]


# --- RFC 7591 ----------------------------------------------------------------------------------

async def test_registration_sends_the_client_metadata(server: Scripted,
                                                      http: HttpClient) -> None:
    server.answers["/register"] = (201, {"client_id": "c-123", "client_secret": "s",
                                         "token_endpoint_auth_method": "client_secret_post",
                                         "client_id_issued_at": 1})
    registered = await register_client(
        http, f"{server.url}/register", redirect_uris=["http://127.0.0.1:9/callback"],
        client_name="vmcp proxy", scope="mcp offline_access", **LOCAL)
    assert (registered.client_id, registered.client_secret,
            registered.token_endpoint_auth_method) == ("c-123", "s", "client_secret_post")
    assert registered.document["client_id_issued_at"] == 1
    assert "'s'" not in repr(registered)
    [request] = server.seen
    assert request.method == "POST" and request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == {
        "redirect_uris": ["http://127.0.0.1:9/callback"], "client_name": "vmcp proxy",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none", "application_type": "native",
        "scope": "mcp offline_access"}


async def test_registration_accepts_200_and_defaults_the_method(server: Scripted,
                                                                http: HttpClient) -> None:
    server.answers["/register"] = (200, {"client_id": "public-1"})
    registered = await register_client(http, f"{server.url}/register",
                                       redirect_uris=["http://127.0.0.1:9/cb"],
                                       client_name="vmcp", **LOCAL)
    assert (registered.client_id, registered.client_secret,
            registered.token_endpoint_auth_method) == ("public-1", None, "none")
    assert "scope" not in json.loads(server.seen[0].body)


@pytest.mark.parametrize(("status", "answer", "problem"), [
    (400, {"error": "invalid_redirect_uri", "error_description": "not https"},
     r"HTTP 400\): invalid_redirect_uri: not https"),
    (201, {"client_secret": "s"}, "without a client_id"),
    (201, ["client_id"], "without a client_id"),
    (201, {"client_id": "c", "token_endpoint_auth_method": "client_secret_basic"},
     "client_secret_basic but gave no client_secret"),
    (500, {}, r"HTTP 500\)$"),
])
async def test_registration_failures_are_clear(server: Scripted, http: HttpClient, status: int,
                                               answer: Any, problem: str) -> None:
    server.answers["/register"] = (status, answer)
    with pytest.raises(RegistrationError, match=problem):
        await register_client(http, f"{server.url}/register",
                              redirect_uris=["http://127.0.0.1:9/cb"], client_name="vmcp",
                              **LOCAL)


async def test_registration_endpoint_passes_the_ssrf_guard(server: Scripted,
                                                           http: HttpClient) -> None:
    with pytest.raises(RegistrationError, match=r"refused.*plain http"):
        await register_client(http, f"{server.url}/register", redirect_uris=["x"],
                              client_name="vmcp", allow_http=False, allow_private=True)
    assert server.seen == []


# --- the token endpoint ------------------------------------------------------------------------

def form_of(request: Seen) -> dict[str, str]:
    return dict(parse_qsl(request.body.decode()))


async def test_client_authentication_methods(server: Scripted, http: HttpClient) -> None:
    server.answers["/token"] = (200, {"access_token": "at", "token_type": "Bearer"})
    grant = {"grant_type": "refresh_token", "refresh_token": "rt"}
    cases = [
        (ClientCredentials("my client", "s3cret:x", "client_secret_basic"),
         "Basic " + base64.b64encode(b"my+client:s3cret%3Ax").decode(), grant),
        (ClientCredentials("my client", "s3cret:x", "client_secret_post"), None,
         {**grant, "client_id": "my client", "client_secret": "s3cret:x"}),
        (ClientCredentials("my client", None, "none"), None, {**grant, "client_id": "my client"}),
        (None, None, grant),
    ]
    for credentials, authorization, form in cases:
        document = await token_request(http, f"{server.url}/token", grant, credentials,
                                       timeout=5)
        assert document == {"access_token": "at", "token_type": "Bearer"}
        request = server.seen[-1]
        assert request.headers.get("authorization") == authorization
        assert request.headers["content-type"] == "application/x-www-form-urlencoded"
        assert request.headers["accept"] == "application/json"
        assert form_of(request) == form


def test_client_credentials_need_a_secret_exactly_when_the_method_does() -> None:
    with pytest.raises(ValueError, match="needs a secret"):
        ClientCredentials("c", None, "client_secret_basic")
    with pytest.raises(ValueError, match="takes no secret"):
        ClientCredentials("c", "s", "none")
    assert "s3cret" not in repr(ClientCredentials("c", "s3cret", "client_secret_post"))


async def test_token_errors_are_parsed_and_never_echo_secrets(server: Scripted,
                                                              http: HttpClient) -> None:
    server.answers["/token"] = (400, {
        "error": "invalid_grant",
        "error_description": "code the-code for s3cret:x (s3cret%3Ax) is\nunknown"})
    with pytest.raises(TokenEndpointError) as caught:
        await token_request(http, f"{server.url}/token",
                            {"grant_type": "authorization_code", "code": "the-code",
                             "redirect_uri": "http://127.0.0.1:9/cb"},
                            ClientCredentials("c", "s3cret:x", "client_secret_basic"),
                            timeout=5, what="authorization code")
    error = caught.value
    assert (error.oauth_error, error.status) == ("invalid_grant", 400)
    message = str(error)
    assert message.startswith("the token endpoint refused the authorization code (HTTP 400): "
                              "invalid_grant: code [redacted] for [redacted] ([redacted]) is "
                              "unknown")
    assert "s3cret" not in message and "the-code" not in message


@pytest.mark.parametrize(("status", "answer", "problem", "code"), [
    (200, {"error": "bad_verification_code"}, r"\(HTTP 200\): bad_verification_code$",
     "bad_verification_code"),
    (503, {"message": "down"}, "answered HTTP 503 to the token request", None),
    (200, ["access_token"], "not a JSON object", None),
])
async def test_token_endpoint_failures(server: Scripted, http: HttpClient, status: int,
                                       answer: Any, problem: str, code: str | None) -> None:
    server.answers["/token"] = (status, answer)
    with pytest.raises(TokenEndpointError, match=problem) as caught:
        await token_request(http, f"{server.url}/token", {"grant_type": "x"}, None, timeout=5)
    assert caught.value.oauth_error == code


def test_token_response_mapping() -> None:
    mapping = TokenResponseMappingPlan(access_token_path="data.auth.0.token",
                                       scope_path="data.granted",
                                       refresh_token_path="data.auth.0.refresh",
                                       expires_in_path="data.ttl")
    document = {"data": {"auth": [{"token": "AT-1", "refresh": "RT-1"}],
                         "granted": ["a", "b"], "ttl": " 3600 "},
                "token_type": "bearer", "id_token": "IDT-1"}
    tokens = parse_token_response(document, mapping, now=1000.0)
    assert (tokens.access_token, tokens.refresh_token, tokens.expires_at, tokens.scope,
            tokens.token_type, tokens.id_token) == ("AT-1", "RT-1", 4600.0, "a b", "bearer",
                                                    "IDT-1")
    assert "-1" not in repr(tokens)

    standard = parse_token_response({"access_token": "x", "expires_in": 0, "scope": "s",
                                     "refresh_token": ""}, now=1000.0)
    assert (standard.expires_at, standard.refresh_token, standard.scope) == (None, None, "s")

    with pytest.raises(TokenEndpointError, match=r"no access token at 'data\.auth\.0\.token'"):
        parse_token_response({"access_token": "x"}, mapping, now=0)
    for bad in (-1, "soon", True, 1e12):
        with pytest.raises(TokenEndpointError, match="'expires_in' is not a number of seconds"):
            parse_token_response({"access_token": "x", "expires_in": bad}, now=0)
    # An index of thousands of digits (the configuration allows the path) names nothing; it
    # does not reach int()'s 4,300-digit refusal.
    deep = TokenResponseMappingPlan(access_token_path="data." + "9" * 5000)
    with pytest.raises(TokenEndpointError, match="no access token at"):
        parse_token_response({"data": ["x"]}, deep, now=0)
    # Leading zeros name the same index, however many (what fuzz_token_response found).
    zeros = TokenResponseMappingPlan(access_token_path="data." + "0" * 47 + ".value")
    assert parse_token_response({"data": [{"value": "2"}]}, zeros, now=0).access_token == "2"


# --- the authorization request and PKCE --------------------------------------------------------

def test_authorization_url_keeps_the_endpoints_query() -> None:
    url = authorization_url("https://as.example/oauth/authorize?tenant=a%20b&x=1",
                            client_id="c 1", redirect_uri="http://127.0.0.1:9/cb?x=y",
                            state="st", code_challenge="ch", scopes=("read", "write:all"),
                            resource="https://mcp.example/mcp?v=1", scope_param_name="user_scope",
                            extra=(("prompt", "consent"),))
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "as.example", "/oauth/authorize")
    assert parts.query.startswith("tenant=a%20b&x=1&response_type=code&")
    assert "user_scope=read%20write%3Aall" in parts.query and "+" not in parts.query
    assert "resource=https%3A%2F%2Fmcp.example%2Fmcp%3Fv%3D1" in parts.query
    assert parse_qsl(parts.query) == [
        ("tenant", "a b"), ("x", "1"), ("response_type", "code"), ("client_id", "c 1"),
        ("redirect_uri", "http://127.0.0.1:9/cb?x=y"), ("user_scope", "read write:all"),
        ("state", "st"), ("code_challenge", "ch"), ("code_challenge_method", "S256"),
        ("resource", "https://mcp.example/mcp?v=1"), ("prompt", "consent")]


def test_authorization_url_without_scopes_or_resource() -> None:
    url = authorization_url("https://as.example/authorize?", client_id="c", redirect_uri="r",
                            state="s", code_challenge="ch", scopes=())
    assert url == ("https://as.example/authorize?response_type=code&client_id=c&redirect_uri=r"
                   "&state=s&code_challenge=ch&code_challenge_method=S256")
    with pytest.raises(ValueError, match="'state'"):
        authorization_url("https://as.example/authorize", client_id="c", redirect_uri="r",
                          state="s", code_challenge="ch", scopes=(), extra=(("state", "x"),))


def test_pkce_pair_is_s256() -> None:
    verifier, challenge = pkce_pair()
    assert 43 <= len(verifier) <= 128
    expected = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    assert challenge == expected.rstrip(b"=").decode()
    assert pkce_pair()[0] != verifier


# --- base64url ---------------------------------------------------------------------------------

@given(st.binary(max_size=200))
def test_base64url_round_trip(data: bytes) -> None:
    text = base64url.encode(data)
    assert "=" not in text and "+" not in text and "/" not in text
    assert text == base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    assert base64url.decode(text) == data
    assert base64url.decode(text, strict=True) == data
    padded = base64.urlsafe_b64encode(data).decode()
    assert base64url.decode(padded) == data  # lenient: padding optional


@pytest.mark.parametrize("text", ["a", "abcde", "ab+c", "ab/c", "ab c", "ab.c", "é", "ab=",
                                  "a===", "ab=c", "===="])
def test_base64url_refuses_what_is_not_base64url(text: str) -> None:
    with pytest.raises(ValueError, match="base64url"):
        base64url.decode(text)


def test_base64url_strict_is_canonical() -> None:
    assert base64url.encode(b"i") == "aQ"
    assert base64url.decode("aR") == b"i"  # lenient: the unused bits are ignored
    for text in ("aR", "aQ==", "aQ="):
        with pytest.raises(ValueError):
            base64url.decode(text, strict=True)
    assert base64url.decode("") == b"" == base64url.decode("", strict=True)
