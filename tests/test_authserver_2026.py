"""The embedded authorization server's rules of MCP 2026-07-28 ("Authorization"), each against
the spec text:

* RFC 9207 both ways: every redirect to the client (code or error) carries ``iss`` and the
  metadata says so; as a client of the upstream providers, vmcp checks the ``iss`` of their
  authorization responses before it acts on them (a mix-up is refused, a missing ``iss`` too
  when the provider's metadata promises one);
* dynamic client registration with ``application_type`` (OpenID Connect Registration 1.0);
* credentials keyed by issuer: stored upstream tokens carry their issuer and are neither used
  nor refreshed under a provider name that now points at another issuer;
* Client ID Metadata Documents: a client whose ``client_id`` is the URL of its metadata
  document, shown to the user before the login (the client's host, the redirect host, a warning
  for a loopback redirect), with the document's rules and its cache.

The upstreams are two ``oidc-provider`` instances (``corp``: oidc, ``hub``: oauth2), as in
``tests/test_authserver.py``; client metadata documents come from a small HTTP server of the
test on 127.0.0.1 (the stack runs with ``insecureAllowHTTP``, which also allows loopback
fetches, as the draft allows for development).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx2
import pytest
import trio

from vmcp_trio.authserver.cimd import (
    DEFAULT_CACHE,
    MAX_CACHE,
    MIN_CACHE,
    ClientDocumentError,
    ClientDocuments,
    cache_lifetime,
    is_client_id_url,
)
from vmcp_trio.authserver.refresher import UpstreamRefresher
from vmcp_trio.authserver.server import AuthorizationServer
from vmcp_trio.authserver.storage import StoredUpstream
from vmcp_trio.authserver.storage.memory import MemoryStorage
from vmcp_trio.authserver.upstream import RegistrationGone, UpstreamError, UpstreamProvider
from vmcp_trio.authserver.validation import (
    OAuthError,
    check_client_id_url,
    validate_client_document,
    validate_client_metadata,
)
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import OAuth2Provider, OIDCProvider

from .authserver_helpers import (
    CLIENT_REDIRECT,
    DocumentServer,
    Stack,
    authorize_url,
    call,
    document_server,
    form_of,
    login,
    login_as_document_client,
    mcp_status,
    pkce,
    register,
    tokens,
)


@pytest.fixture
def stack(authserver_stack: Stack) -> Stack:
    return authserver_stack


def _authserver(stack: Stack) -> AuthorizationServer:
    server = stack.gateway.authserver  # type: ignore[union-attr]
    assert isinstance(server, AuthorizationServer)
    return server


def _query(location: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(location).query))


async def _first_leg(stack: Stack, client_id: str | None = None) -> str:
    """Start a login; the internal state of its first (corp) leg."""
    client_id = client_id or await register(stack)
    url = authorize_url(stack, client_id, pkce()[1])
    status, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 302 and headers["location"].startswith(stack.corp.issuer)
    return _query(headers["location"])["state"]


# --- RFC 9207: iss in our authorization responses ------------------------------------------------

async def test_the_metadata_advertises_iss_and_client_id_metadata_documents(stack: Stack) -> None:
    for path in ("/.well-known/oauth-authorization-server",
                 "/.well-known/openid-configuration"):
        status, _, document = await call(stack, "GET", path)
        assert status == 200
        assert document["authorization_response_iss_parameter_supported"] is True
        assert document["client_id_metadata_document_supported"] is True


async def test_every_redirect_to_the_client_carries_iss(stack: Stack) -> None:
    """RFC 9207 section 2: the code, an error found at /oauth/authorize, and an upstream's
    failure relayed at the end of the chain."""
    client_id = await register(stack)
    redirect = await login(stack, client_id, pkce()[1])
    assert redirect["iss"] == stack.issuer and redirect["code"]
    assert redirect["state"] == "client-state"

    url = authorize_url(stack, client_id, pkce()[1], response_type="token")
    _, headers, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    params = _query(headers["location"])
    assert params["error"] == "unsupported_response_type" and params["iss"] == stack.issuer

    leg = await _first_leg(stack, client_id)
    _, headers, _ = await call(stack, "GET", "/oauth/callback?" + urlencode({
        "state": leg, "error": "access_denied", "iss": stack.corp.issuer}))
    params = _query(headers["location"])
    assert params["error"] == "access_denied" and params["state"] == "client-state"
    assert params["iss"] == stack.issuer


# --- RFC 9207: vmcp checks the upstream's iss -----------------------------------------------------

@pytest.mark.parametrize("case", ["missing", "other issuer", "twice", "normalised"])
async def test_an_upstream_response_of_another_issuer_is_refused(stack: Stack,
                                                                 case: str) -> None:
    """MCP 2026-07-28 "Authorization Response Validation" (RFC 9207 section 2.4): corp's
    metadata says it sends iss, so a response without it, with another issuer's (hub's: a
    mix-up), with it twice, or with a normalised form (a trailing slash) is refused before its
    code goes to any token endpoint; nothing is stored."""
    storage = _authserver(stack).storage
    before = set(storage.upstream.rows)  # type: ignore[attr-defined]
    leg = await _first_leg(stack)
    iss = {"missing": [], "other issuer": [stack.hub.issuer],
           "twice": [stack.corp.issuer, stack.corp.issuer],
           "normalised": [stack.corp.issuer + "/"]}[case]
    query = urlencode([("state", leg), ("code", "stolen-code"), *(("iss", i) for i in iss)])
    status, headers, _ = await call(stack, "GET", f"/oauth/callback?{query}")
    assert status == 302
    params = _query(headers["location"])
    assert params["error"] == "access_denied" and "iss" in params["error_description"]
    assert "corp" in params["error_description"] and params["iss"] == stack.issuer
    assert set(storage.upstream.rows) == before  # type: ignore[attr-defined]


async def test_an_error_of_another_issuer_is_not_shown(stack: Stack) -> None:
    """On a mismatch the client MUST NOT act on or display the response's error: what reaches
    our client is our own description, not the forged one."""
    leg = await _first_leg(stack)
    _, headers, _ = await call(stack, "GET", "/oauth/callback?" + urlencode({
        "state": leg, "error": "access_denied", "error_description": "call 555-0100 now",
        "iss": "https://attacker.example"}))
    params = _query(headers["location"])
    assert params["error"] == "access_denied" and "555-0100" not in params["error_description"]
    assert "another issuer" in params["error_description"]


# --- application_type (OpenID Connect Registration 1.0; MCP 2026-07-28) --------------------------

@pytest.mark.parametrize(("sent", "kept"), [("native", "native"), ("web", "web"),
                                            (None, "web")])
async def test_registration_keeps_and_echoes_application_type(stack: Stack, sent: str | None,
                                                              kept: str) -> None:
    body: dict[str, Any] = {"redirect_uris": ["http://127.0.0.1:8/cb", "com.example.app:/cb"],
                            "client_name": "app"}
    if sent is not None:
        body["application_type"] = sent
    status, _, answer = await call(stack, "POST", "/oauth/register", body=body)
    assert status == 201 and answer["application_type"] == kept
    stored = await _authserver(stack).storage.get_client(answer["client_id"])
    assert stored is not None and stored.application_type == kept


@pytest.mark.parametrize("value", ["desktop", "Native", "", 5, None, ["native"]])
async def test_a_bad_application_type_is_refused_by_name(stack: Stack, value: Any) -> None:
    status, _, answer = await call(stack, "POST", "/oauth/register", body={
        "redirect_uris": [CLIENT_REDIRECT], "application_type": value})
    assert status == 400 and answer["error"] == "invalid_client_metadata"
    assert "application_type" in answer["error_description"]


def test_application_type_places_no_redirect_constraint() -> None:
    """Not an OpenID provider: a "web" client may keep a private-use scheme, a "native" one an
    https redirect (RFC 8252 7.2); the rules for every client still hold."""
    web = validate_client_metadata({"redirect_uris": ["com.example.app:/cb"],
                                    "application_type": "web"}, allow_confidential=False)
    native = validate_client_metadata({"redirect_uris": ["https://app.example/cb"],
                                       "application_type": "native"}, allow_confidential=False)
    assert (web.application_type, native.application_type) == ("web", "native")
    with pytest.raises(OAuthError, match="redirect_uris"):
        validate_client_metadata({"redirect_uris": ["http://app.example/cb"],
                                  "application_type": "native"}, allow_confidential=False)


# --- credentials keyed by issuer -----------------------------------------------------------------

async def test_stored_upstream_tokens_carry_their_issuer(stack: Stack) -> None:
    _, answer, _ = await tokens(stack)
    storage = _authserver(stack).storage
    rows = {row.provider: row for _, row in storage.upstream.rows.values()}  # type: ignore[attr-defined]
    assert rows["corp"].issuer == stack.corp.issuer
    assert rows["hub"].issuer == stack.hub.token_endpoint  # oauth2: no issuer identifier
    assert await mcp_status(stack, answer["access_token"]) == 200


async def test_a_provider_name_pointed_at_another_issuer_gets_no_old_tokens(
        stack: Stack) -> None:
    """A reload that points ``corp`` at another issuer: the tokens corp's old issuer issued
    are not handed out under the name (and the login session ends, so the client logs in
    again)."""
    _, answer, _ = await tokens(stack)
    server = _authserver(stack)
    session = next(row.session_id for _, row in server.storage.upstream.rows.values())  # type: ignore[attr-defined]
    assert await server.upstream_access_token(session, "corp") is not None
    corp = server.providers["corp"]
    assert isinstance(corp.plan, OIDCProvider)
    server.providers["corp"] = UpstreamProvider(
        OIDCProvider(name="corp", issuer_url=stack.hub.issuer, client_id="confidential"),
        corp.client, allow_http=True, allow_private=True)
    assert await server.upstream_access_token(session, "corp") is None
    assert await mcp_status(stack, answer["access_token"]) == 401
    assert await server.storage.get_upstream(session, "hub") is None  # the session ended


@dataclass
class _Provider:
    """A stand-in provider for the refresher: its issuer, and the refresh tokens it got."""

    issuer: str
    received: list[str] = field(default_factory=list)

    async def refresh(self, refresh_token: str, **_: Any) -> Any:
        self.received.append(refresh_token)
        raise AssertionError("a refresh token went to another issuer")


@pytest.mark.parametrize(("stored_issuer", "sent"), [
    ("https://old.example", False), ("https://idp.example", True), (None, True)])
async def test_a_refresh_token_goes_only_to_its_issuer(stored_issuer: str | None,
                                                       sent: bool) -> None:
    """Records from before issuers were kept (None) are refreshed as before."""
    storage = MemoryStorage()
    now = time.time()
    await storage.put_upstream(StoredUpstream(
        session_id="s1", provider="corp", access_token="at", refresh_token="rt-old-issuer",
        expires_at=now + 30, scope=None, subject="u", issued_at=now - 600,
        issuer=stored_issuer), now + 3600)
    provider = _Provider("https://idp.example")
    ended: list[str] = []

    async def end_session(session: str) -> None:
        ended.append(session)

    refresher = UpstreamRefresher(storage, {"corp": provider},  # type: ignore[dict-item]
                                  end_session=end_session)
    if sent:
        with pytest.raises(AssertionError, match="another issuer"):
            await refresher.refresh_due()
        assert provider.received == ["rt-old-issuer"] and not ended
    else:
        await refresher.refresh_due()
        assert provider.received == [] and ended == ["s1"]


async def test_tokens_of_a_client_id_no_longer_configured_end_their_session() -> None:
    """A reload changed the provider's clientId: a stored refresh token belongs to the old
    client, so it is never sent as the new one (the provider would refuse it as another
    client's): the session ends and the user logs in again. Tokens of the client configured
    now are refreshed as before."""
    storage = MemoryStorage()
    now = time.time()
    for session, client_id in (("s-old", "old-client"), ("s-now", "new-client")):
        await storage.put_upstream(StoredUpstream(
            session_id=session, provider="hub", access_token="at", refresh_token="rt",
            expires_at=now + 30, scope="read", subject="u", issued_at=now - 600,
            issuer="https://idp.example/token", client_id=client_id), now + 3600)
    provider = UpstreamProvider(OAuth2Provider(
        name="hub", authorization_endpoint="https://idp.example/authorize",
        token_endpoint="https://idp.example/token", client_id="new-client"), HttpClient())
    with pytest.raises(RegistrationGone, match="no longer vmcp's"):
        await provider.credentials_of("old-client")
    assert (await provider.credentials_of("new-client")).client_id == "new-client"
    ended: list[str] = []

    async def end_session(session: str) -> None:
        ended.append(session)

    sent: list[tuple[str | None, str | None]] = []

    async def refresh(refresh_token: str, *, client_id: str | None = None,
                      scope: str | None = None) -> Any:
        await provider.credentials_of(client_id)
        sent.append((client_id, scope))
        raise UpstreamError("stop here")

    provider.refresh = refresh  # type: ignore[method-assign]
    await UpstreamRefresher(storage, {"hub": provider}, end_session=end_session).refresh_due()
    assert ended == ["s-old"] and sent == [("new-client", "read")]


# --- Client ID Metadata Documents ----------------------------------------------------------------

@pytest.fixture
def documents() -> Iterator[DocumentServer]:
    with document_server() as docs:
        yield docs


async def test_a_client_known_by_its_metadata_document_logs_in(stack: Stack,
                                                               documents: DocumentServer) -> None:
    client_id = documents.publish("/agent.json",
                                  headers={"cache-control": "public, max-age=600"})
    redirect, verifier = await login_as_document_client(stack, client_id)
    assert redirect["iss"] == stack.issuer and redirect["state"] == "client-state"
    status, headers, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "authorization_code", "code": redirect["code"], "client_id": client_id,
        "redirect_uri": CLIENT_REDIRECT, "code_verifier": verifier, "resource": stack.mcp})
    assert status == 200 and headers["cache-control"] == "no-store", answer
    assert await mcp_status(stack, answer["access_token"]) == 200
    status, _, refreshed = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
        "client_id": client_id})
    assert status == 200, refreshed
    assert documents.hits["/agent.json"] == 1  # cached as Cache-Control says
    # once the cached copy is stale, a refresh fetches it again: its host failing is worth a
    # retry (the refresh token stays valid), the document gone ends the refreshing
    _authserver(stack).documents._cache.clear()
    documents.routes["/agent.json"] = (503, {}, b"")
    status, headers, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": refreshed["refresh_token"],
        "client_id": client_id})
    assert status == 503 and answer["error"] == "temporarily_unavailable"
    assert headers["retry-after"] == "5"
    del documents.routes["/agent.json"]
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": refreshed["refresh_token"],
        "client_id": client_id})
    assert status == 401 and answer["error"] == "invalid_client"


async def test_the_consent_page_names_the_client_and_where_the_code_goes(
        stack: Stack, documents: DocumentServer) -> None:
    client_id = documents.publish("/agent.json", {
        "client_name": "<b>Claude</b>", "redirect_uris": [CLIENT_REDIRECT]})
    url = authorize_url(stack, client_id, pkce()[1])
    async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
        page = await http.get(url)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "&lt;b&gt;Claude&lt;/b&gt;" in page.text and "<b>Claude" not in page.text
    host = urlsplit(documents.base).netloc
    assert f"published at <strong>{host}</strong>" in page.text
    assert "sent back to <strong>127.0.0.1:9</strong>" in page.text
    assert "on your own computer" in page.text  # a loopback redirect: the warning
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


async def test_the_user_may_deny(stack: Stack, documents: DocumentServer) -> None:
    client_id = documents.publish("/agent.json")
    redirect, _ = await login_as_document_client(stack, client_id, decision="deny")
    assert redirect["error"] == "access_denied" and redirect["state"] == "client-state"
    assert redirect["iss"] == stack.issuer


@pytest.mark.parametrize("tamper", ["no cookie", "changed redirect", "changed scope",
                                    "expired", "forged mac"])
async def test_a_consent_form_works_only_as_shown_to_this_browser(
        stack: Stack, documents: DocumentServer, tamper: str) -> None:
    client_id = documents.publish("/agent.json", {
        "client_name": "agent", "redirect_uris": [CLIENT_REDIRECT, "http://127.0.0.1:9/other"]})
    async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
        page = await http.get(authorize_url(stack, client_id, pkce()[1]))
        action, form = form_of(page.text)
        expires, cookie_id, mac = form["consent"].split(".")
        if tamper == "no cookie":
            http.cookies.clear()
        elif tamper == "changed redirect":
            form["redirect_uri"] = "http://127.0.0.1:9/other"
        elif tamper == "changed scope":
            form["scope"] = "mcp:tools mcp:admin"
        elif tamper == "expired":
            form["consent"] = f"{int(expires) - 700}.{cookie_id}.{mac}"
        else:
            form["consent"] = f"{expires}.{cookie_id}.{'A' * 43}"
        response = await http.post(action, data={**form, "decision": "allow"})
    assert response.status_code == 400 and "location" not in response.headers
    assert "consent form" in response.text


@pytest.mark.parametrize(("document", "served", "expected"), [
    ({"client_id": "https://other.example/agent.json"}, {}, "client_id"),
    ({"client_secret": "s3cret"}, {}, "client_secret"),
    ({"token_endpoint_auth_method": "client_secret_basic"}, {}, "shared-secret"),
    ({"token_endpoint_auth_method": "private_key_jwt"}, {}, "private_key_jwt"),
    ({"client_name": None}, {}, "client_name"),
    ({"redirect_uris": ["http://app.example/cb"]}, {}, "redirect_uris[0]"),
    ({}, {"status": 404}, "HTTP 404"),
    ({}, {"status": 302, "headers": {"location": "/elsewhere"}}, "redirects"),
    ({}, {"headers": {"content-type": "text/html"}}, "JSON"),
    ({}, {"raw": b"{" + b" " * 6000 + b"}"}, "larger than 5 KB"),
    ({}, {"raw": b"{not json"}, "not valid JSON"),
])
async def test_a_bad_document_is_shown_not_redirected(
        stack: Stack, documents: DocumentServer, document: dict[str, Any],
        served: dict[str, Any], expected: str) -> None:
    good = {"client_name": "agent", "redirect_uris": [CLIENT_REDIRECT]}
    merged = {k: v for k, v in {**good, **document}.items() if v is not None}
    client_id = documents.publish("/agent.json", merged, **served)
    url = authorize_url(stack, client_id, pkce()[1])
    status, headers, body = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 400 and "location" not in headers
    assert "metadata document" in body and expected in body
    # never cached: once fixed, it works
    documents.publish("/agent.json")
    status, _, _ = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 200


async def test_a_redirect_uri_the_document_does_not_list_is_shown(
        stack: Stack, documents: DocumentServer) -> None:
    client_id = documents.publish("/agent.json")
    url = authorize_url(stack, client_id, pkce()[1], redirect_uri="https://evil.example/cb")
    status, headers, body = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 400 and "location" not in headers and "redirect_uri" in body


async def test_no_store_documents_are_fetched_each_time(stack: Stack,
                                                        documents: DocumentServer) -> None:
    client_id = documents.publish("/agent.json", headers={"cache-control": "no-store"})
    url = authorize_url(stack, client_id, pkce()[1]).removeprefix(stack.issuer)
    for _ in range(2):
        assert (await call(stack, "GET", url))[0] == 200
    assert documents.hits["/agent.json"] == 2


async def test_the_token_endpoint_fetches_nothing_for_an_unknown_url_client(
        stack: Stack, documents: DocumentServer) -> None:
    """No grant of it, no fetch: the token endpoint cannot be made to fetch URLs."""
    client_id = documents.publish("/agent.json")
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": "x~rt_forged", "client_id": client_id})
    assert status == 400 and answer["error"] == "invalid_grant"
    assert documents.hits == {}


@pytest.mark.parametrize(("url", "problem"), [
    ("https://app.example", "no path"),
    ("https://app.example/a/../b.json", ". or .."),
    ("https://app.example/a/%2E%2E/b.json", ". or .."),
    ("https://app.example/./b.json", ". or .."),
    ("https://user@app.example/c.json", "user information"),
    ("https://app.example/c.json#x", "fragment"),
    ("http://app.example/c.json", "not an https URL"),
    ("https:///c.json", "no host"),
])
def test_client_id_url_rules(url: str, problem: str) -> None:
    """draft-ietf-oauth-client-id-metadata-document section 3."""
    with pytest.raises(OAuthError, match=re.escape(problem)):
        check_client_id_url(url)


def test_client_id_url_rules_accept() -> None:
    check_client_id_url("https://app.example/client.json")
    # The scheme is case-insensitive, and a client_id the rules accept is taken as a URL.
    check_client_id_url("HTTPS://app.example/client.json")
    assert is_client_id_url("HTTPS://app.example/client.json", allow_http=False)
    assert is_client_id_url("Http://127.0.0.1:8/c.json", allow_http=True)
    assert not is_client_id_url("Http://127.0.0.1:8/c.json", allow_http=False)
    check_client_id_url("https://app.example:8443/c?v=1")  # a query: SHOULD NOT, not MUST NOT
    check_client_id_url("http://127.0.0.1:8/c.json", allow_http=True)


def test_a_document_without_a_method_is_a_public_client() -> None:
    url = "https://app.example/c.json"
    metadata = validate_client_document({"client_id": url, "client_name": "c",
                                         "redirect_uris": ["https://app.example/cb"]}, url)
    assert metadata.token_endpoint_auth_method == "none"


@pytest.mark.parametrize(("header", "seconds"), [
    (None, DEFAULT_CACHE), ("public", DEFAULT_CACHE), ("max-age=600", 600.0),
    ("public, max-age=5", MIN_CACHE), ("max-age=99999999", MAX_CACHE), ("max-age=0", 0.0),
    ("no-store", 0.0), ("private, no-cache", 0.0), ("s-maxage=9, max-age=120", 120.0)])
def test_cache_lifetime(header: str | None, seconds: float) -> None:
    assert cache_lifetime(header) == seconds


async def test_documents_on_private_addresses_are_refused_outside_development(
        documents: DocumentServer) -> None:
    """draft section 8.6: no fetch of a special-use address (nor of http) unless the server
    runs for development (insecureAllowHTTP)."""
    client_id = documents.publish("/agent.json")
    strict = ClientDocuments(allow_http=True, allow_private=False)
    with pytest.raises(ClientDocumentError, match=r"non-public address \(set authServerConfig"
                                                  r"\.insecureAllowHTTP to allow it\)"):
        await strict.resolve(client_id)
    https_only = ClientDocuments(allow_http=False, allow_private=False)
    assert not https_only.is_document_client(client_id)
    with pytest.raises(ClientDocumentError, match="https"):
        await https_only.resolve(client_id)
    relaxed = ClientDocuments(allow_http=True, allow_private=True)
    with trio.fail_after(10):
        assert (await relaxed.resolve(client_id)).client_name == "Example Agent"
    assert not relaxed.client._idle  # no connection kept to a host a caller chose
    assert documents.hits == {"/agent.json": 1}
