"""Fuzz the request decoding of the embedded authorization server: the query of /oauth/authorize,
the forms of /oauth/token (its grants: authorization_code, refresh_token; token exchange and
the JWT-bearer grant are off here, with no delegate client and no trusted issuer; it has no
client_credentials or introspection) and /oauth/revoke, the JSON of
/oauth/register. No endpoint has a pure decoder (each ``serve`` reads its request inline, then
applies validation.py, fuzzed by fuzz_oauth_validation.py), so each ``serve`` is driven on ASGI
messages after ``http_request``, on memory storage with a canned upstream and metadata document:
nothing waits, so each coroutine runs to its end in one step.

Nothing escapes; errors are JSON 400/401 with an RFC code (401 exactly for invalid_client), or at
/oauth/authorize a page until the redirect URI is trusted, then a redirect there with ``error``,
``iss`` and the client's exact ``state``. A login starts only for a known client, a registered
redirect URI, response_type code, an S256 challenge, known scopes, an allowed resource and a
bounded state kept as given; a metadata document's client first gets a consent form carrying the
request exactly; tokens go only for the code with its verifier or the refresh token, to their
client, within the granted scopes; registrations answer what the rules accept; a revocation ends
a session only for the token's own client, and always for it.

The input: a byte of flags (bits 0-1: authorize, token, register, revoke; bit 2: confidential
clients may register; bit 3: an Authorization header first, up to a NUL; bit 4: a wrong
Content-Type), then the query or body; ``$CODE``, ``$RT``, ``$AT`` stand for the public client's
code, refresh token and access token."""

from __future__ import annotations

import re
from collections.abc import Coroutine
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from vmcp_trio.auth.jwt import parse_jws, verify_signature
from vmcp_trio.authserver.assertion_grant import AssertionGrant
from vmcp_trio.authserver.authorize import AUTHORIZE_PARAMETERS, MAX_STATE_CHARS, AuthorizeEndpoint
from vmcp_trio.authserver.cimd import ClientDocumentError, ClientDocuments
from vmcp_trio.authserver.endpoints import sha256
from vmcp_trio.authserver.exchange_grant import ExchangeGrant
from vmcp_trio.authserver.keys import SigningKeys
from vmcp_trio.authserver.opaque import OpaqueTokens
from vmcp_trio.authserver.registration import RegistrationEndpoint
from vmcp_trio.authserver.revocation import RevocationEndpoint
from vmcp_trio.authserver.storage import CodeGrant, RefreshFamily, RegisteredClient
from vmcp_trio.authserver.storage.memory import MemoryStorage
from vmcp_trio.authserver.token import TokenEndpoint
from vmcp_trio.authserver.trusted import TrustedIssuers
from vmcp_trio.authserver.upstream import UpstreamProvider
from vmcp_trio.authserver.validation import ERROR_CODES, check_pkce_request, redirect_uri_matches
from vmcp_trio.authserver.validation import validate_client_metadata as registration
from vmcp_trio.http.asgi import http_request
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import OAuth2Provider, UserInfoPlan

ISSUER, UPSTREAM, RESOURCES = "https://as.example", "https://idp.example/a", ("https://as.example/mcp",)
SCOPES, GRANTED = ("mcp:tools", "openid", "read"), ("mcp:tools", "read")
PUBLIC, CONFIDENTIAL, DOCUMENT = "pub-client", "conf-client", "https://app.example/client.json"
REGISTERED = ("https://app.example/callback", "http://127.0.0.1:8080/cb", "com.example.app:/cb")
VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"  # RFC 7636 appendix B
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
CLIENTS = {client_id: RegisteredClient(
    client_id, REGISTERED, "client_secret_post" if secret else "none",
    ("authorization_code", "refresh_token"), "App", None, secret and sha256(secret), 0.0, 2e9)
    for client_id, secret in ((PUBLIC, None), (CONFIDENTIAL, "s3cret"), (DOCUMENT, None))}
KEYS, OPAQUE = SigningKeys([]), OpaqueTokens([])
(CODE, CODE_ID), (RT, RT_ID) = OPAQUE.mint("code"), OPAQUE.mint("rt")
ACCESS = KEYS.sign({"iss": ISSUER, "client_id": PUBLIC, "tsid": "at-tsid", "exp": 4102444800})
TOKENS = {b"$CODE": CODE, b"$RT": "fam~" + RT, b"$AT": ACCESS}
PROVIDERS = {"hub": UpstreamProvider(OAuth2Provider(
    "hub", UPSTREAM, "https://idp.example/t", "vmcp", user_info=UserInfoPlan("https://i/me")),
    HttpClient())}
NO_ISSUERS = TrustedIssuers((), HttpClient())
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]*)" value="([^"]*)">')
_RECORD: Any = lambda *args, **kwargs: None  # noqa: E731 (the audit log)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def run(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run a coroutine that never waits (memory storage, canned upstream and documents)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise AssertionError("an endpoint waited for I/O")


class _Documents(ClientDocuments):
    async def resolve(self, url: str) -> RegisteredClient:
        if url != DOCUMENT:
            raise ClientDocumentError("only the canned document exists here")
        return CLIENTS[DOCUMENT]


DOCUMENTS = _Documents(allow_http=False, allow_private=False)


class Case:
    """One input: fresh storage (two clients, the code, the refresh family) and endpoints, the
    request (its body there at once, as ``receive_nowait`` says), then the answer."""

    status: int
    headers: dict[str, str]

    def __init__(self, flags: int, header: bytes | None, raw: bytes) -> None:
        self.storage, self.revoked, self.body = MemoryStorage(), set[str](), b""
        self.allow_confidential, self.header, self.raw = bool(flags & 4), header, raw
        self.form = {k: v[0] for k, v in parse_qs(raw.decode(errors="replace"),
                                                  keep_blank_values=True).items()}  # read_form's
        self.storage.clients.put(PUBLIC, CLIENTS[PUBLIC], 2e9)
        self.storage.clients.put(CONFIDENTIAL, CLIENTS[CONFIDENTIAL], 2e9)
        run(self.storage.put_code(CodeGrant(CODE_ID, PUBLIC, REGISTERED[0], CHALLENGE, GRANTED,
                                            RESOURCES[0], "u", "code-tsid", None, None, 2e9)))
        run(self.storage.put_family(RefreshFamily("fam", RT_ID, PUBLIC, "u", "rt-tsid", GRANTED,
                                                  None, None, None, 2e9)))
        common: dict[str, Any] = {"opaque": OPAQUE, "issuer": ISSUER, "documents": DOCUMENTS}
        self.endpoint = (
            AuthorizeEndpoint(self.storage, providers=PROVIDERS, scopes=SCOPES, resources=RESOURCES,
                              authorization_endpoint=ISSUER + "/authorize",
                              callback_url=ISSUER + "/cb", **common),
            TokenEndpoint(self.storage, keys=KEYS, resources=RESOURCES, access_lifetime=60,
                          refresh_lifetime=60, revoke_session=self.revoke, record=_RECORD,
                          session_revoked=self.is_revoked, assertions=AssertionGrant(
                              NO_ISSUERS, self.storage, access_lifetime=60),
                          exchange=ExchangeGrant(
                              keys=KEYS, issuer=ISSUER, resources=RESOURCES, trusted=NO_ISSUERS,
                              delegates=(), session_revoked=self.is_revoked,
                              access_lifetime=60), **common),
            RegistrationEndpoint(self.storage, allow_confidential=self.allow_confidential),
            RevocationEndpoint(self.storage, keys=KEYS, revoke_session=self.revoke,
                               record=_RECORD, **common))[flags & 3]
        self.messages = [{"type": "http.request", "body": b"" if flags & 3 == 0 else raw}]

    async def revoke(self, session_id: str) -> None:
        self.revoked.add(session_id)

    async def is_revoked(self, session_id: str) -> bool:
        return session_id in self.revoked

    def receive_nowait(self) -> dict[str, Any]:
        return self.messages.pop() if self.messages else {"type": "http.disconnect"}

    async def receive(self) -> dict[str, Any]:
        return self.receive_nowait()

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode("latin-1") for k, v in message["headers"]}
        self.body += message.get("body", b"")


def check_error(case: Case, codes: frozenset[str] = ERROR_CODES) -> None:
    answer = orjson.loads(case.body)
    check(case.status in (400, 401) and answer["error"] in codes and (case.status == 401) == (
        answer["error"] == "invalid_client") and isinstance(answer["error_description"], str)
        and (case.status != 401 or "www-authenticate" in case.headers), f"error {answer!r}")


def check_authorize(case: Case) -> None:
    query = parse_qs(case.raw.decode("latin-1"), keep_blank_values=True)
    one, uri = {k: v[0] for k, v in query.items()}, query.get("redirect_uri", [""])[0]
    if case.status == 400:  # a page for the user (or http_request's JSON): nothing redirected
        return
    check(one.get("client_id") in CLIENTS and all(len(v) == 1 for v in query.values())
          and redirect_uri_matches(REGISTERED, uri), "an untrusted request went on")
    if case.status == 200:
        fields = {unescape(k): unescape(v) for k, v in _HIDDEN.findall(case.body.decode())}
        fields.pop("consent")
        check(one["client_id"] == DOCUMENT and fields == {
            k: one[k] for k in AUTHORIZE_PARAMETERS if k in one}, "the consent form differs")
        return
    location = case.headers["location"]
    if location.startswith(UPSTREAM + "?"):
        [(_, pending)] = case.storage.pending.rows.values()
        check_pkce_request(pending.code_challenge, "S256")  # OAuthError escapes: a bad one
        check(one["client_id"] != DOCUMENT and one.get("response_type") == "code"
              and one.get("code_challenge_method") == "S256"
              and (pending.client_id, pending.redirect_uri, pending.code_challenge) == (
                  one["client_id"], uri, one["code_challenge"])
              and pending.client_state == one.get("state")
              and len(one.get("state") or "") <= MAX_STATE_CHARS
              and len(set(pending.scopes)) == len(pending.scopes)
              and set(pending.scopes) <= set(SCOPES) and pending.resource in (None, *RESOURCES)
              and parse_qs(urlsplit(location).query)["state"] == [pending.state],
              f"accepted {one!r} as {pending!r}")
        return
    check(case.status == 302 and location.startswith(uri + "?"), f"sent to {location!r}")
    back = parse_qs(location[len(uri) + 1:], keep_blank_values=True)
    check(back["error"][0] in ERROR_CODES and back["iss"] == [ISSUER]
          and back.get("state") == query.get("state"), f"error redirect {back!r}")


def check_token(case: Case) -> None:
    if case.status != 200:
        check_error(case)
        return
    form, answer = case.form, orjson.loads(case.body)
    token = parse_jws(answer["access_token"])
    verify_signature(token, KEYS.signing.verify_key)
    claims, code = token.claims, form.get("grant_type") == "authorization_code"
    check(claims["client_id"] == PUBLIC and answer["token_type"] == "Bearer"
          and set(claims["scp"]) <= set(GRANTED) and answer["refresh_token"].count("~") == 1
          and (case.header is not None or form.get("client_id") == PUBLIC)
          and claims["tsid"] == ("code-tsid" if code else "rt-tsid"), f"issued {claims!r}")
    check((form.get("code"), form.get("code_verifier"), form.get("redirect_uri", REGISTERED[0]))
          == (CODE, VERIFIER, REGISTERED[0]) if code else
          form.get("refresh_token") == TOKENS[b"$RT"], f"tokens for {form!r}")


def check_register(case: Case) -> None:
    if case.status != 201:
        check_error(case, frozenset({"invalid_client_metadata", "invalid_redirect_uri"}))
        return
    answer = orjson.loads(case.body)
    metadata = registration(orjson.loads(case.raw), allow_confidential=case.allow_confidential)
    check(answer["redirect_uris"] == list(metadata.redirect_uris)
          and answer["token_endpoint_auth_method"] == metadata.token_endpoint_auth_method
          and ("client_secret" in answer) != metadata.public
          and case.storage.clients.get(answer["client_id"]) is not None, f"registered {answer}")


def check_revoke(case: Case) -> None:
    if case.status != 200:
        check_error(case)
        return
    ours = case.form.get("token") in (TOKENS[b"$RT"], ACCESS)
    named = case.header is None and case.form.get("client_id") == PUBLIC
    check(not case.revoked or (ours and (named or case.header is not None)),
          "a revocation ended a session for another client")
    check(case.body == b"" and (bool(case.revoked) or not (ours and named)), "a token not revoked")


CHECKS = (check_authorize, check_token, check_register, check_revoke)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    flags, rest, header = data[0], data[1:], None
    if flags & 8:
        header, _, rest = rest.partition(b"\0")
    for name, value in TOKENS.items():
        rest = rest.replace(name, value.encode())
    case = Case(flags, header, rest)
    headers = [(b"content-type", b"text/plain" if flags & 16 else b"application/json"
                if flags & 3 == 2 else b"application/x-www-form-urlencoded")]
    scope = {"type": "http", "method": "POST" if flags & 3 else "GET", "path": "/oauth/x",
             "query_string": b"" if flags & 3 else rest, "client": ("203.0.113.7", 1234),
             "headers": headers + ([(b"authorization", header)] if header is not None else [])}

    async def serve() -> None:
        request = await http_request(scope, case.receive, case.send)
        if request is not None:
            await case.endpoint.serve(request, case.send)

    run(serve())
    CHECKS[flags & 3](case)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
