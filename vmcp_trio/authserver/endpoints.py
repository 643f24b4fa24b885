"""What the authorization server's endpoints share: reading forms, answering, client authentication.

Rules kept here:

* A form (``/oauth/token``, ``/oauth/revoke``, the consent page's answer) is a POST of
  ``application/x-www-form-urlencoded``, at most ``MAX_FORM_BYTES``, with no parameter repeated.
* Errors of the JSON endpoints are ``{"error", "error_description"}`` with ``no-store``; a 401
  carries a ``Basic`` challenge and a 503 ``Retry-After``.
* Errors before the client's redirect URI is trusted (unknown client, unregistered redirect
  URI) are shown to the user, never redirected (RFC 6749 section 4.1.2.1); later ones go back to
  the client with ``error``, ``state`` and ``iss`` (RFC 9207), as the code does
  (:func:`client_redirect`).
* A client authenticates as it registered: public clients by ``client_id`` (a secret presented
  for one is ``invalid_client``), confidential ones with their secret by the method they
  registered (``client_secret_basic``: HTTP Basic, RFC 6749 section 2.3.1 encoding;
  ``client_secret_post``: ``client_secret`` in the form; the other method is
  ``invalid_client``), compared as SHA-256 in constant time; a delegate client of the
  configuration may use either. One method per request. A client known by its metadata document
  is public: nothing to authenticate, and nothing fetched for a request that names no grant of
  it. A secret is never logged, nor recorded in the audit log.

How each endpoint records what it did in the audit log is the server's (:class:`AuditRecord`):
it is handed to the endpoints that record, as a callable.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

from ..http.asgi import BodyTooLarge, HttpRequest, Send, send_empty, send_json, send_text
from ..runtime.audit import AuthKind, Outcome
from .cimd import ClientDocuments
from .storage import RegisteredClient, Storage
from .validation import GRANT_TYPES, SECRET_METHODS, OAuthError

__all__ = [
    "MAX_FORM_BYTES",
    "NO_STORE",
    "AccessGrant",
    "AuditRecord",
    "authenticate_client",
    "client_redirect",
    "has_credentials",
    "read_form",
    "redirect",
    "send_oauth_error",
    "sha256",
    "show_error",
]

MAX_FORM_BYTES = 16 * 1024
NO_STORE = [("cache-control", "no-store"), ("pragma", "no-cache")]


@dataclass(frozen=True)
class AccessGrant:
    """What a grant of the token endpoint decided to issue: one access token, which the token
    endpoint signs (its claims are the token endpoint's)."""

    subject: str
    client_id: str
    audience: str
    scopes: tuple[str, ...]
    lifetime: float
    """Seconds (a grant may cap it below ``tokenLifespans.accessTokenLifespan``)."""
    session_id: str | None = None
    name: str | None = None
    email: str | None = None
    act: dict[str, Any] | None = None
    """RFC 8693 section 4.1: who acts for the subject (token exchange)."""


class AuditRecord(Protocol):
    """Records one authorization event (a login, a token issued, refreshed or revoked) of
    ``request`` in the process's audit log."""

    def __call__(self, kind: AuthKind, outcome: Outcome, request: HttpRequest, *,
                 client_id: str | None = None, subject: str | None = None,
                 grant_type: str | None = None, provider: str | None = None,
                 reason: str | None = None) -> None: ...


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def read_form(request: HttpRequest) -> dict[str, str]:
    content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
    if request.method != "POST" or content_type != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "POST an application/x-www-form-urlencoded "
                                            "body")
    try:
        body = await request.body(MAX_FORM_BYTES)
    except BodyTooLarge:
        raise OAuthError("invalid_request", "the request body is too large") from None
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    repeated = [k for k, v in parsed.items() if len(v) > 1]
    if repeated:
        raise OAuthError("invalid_request", f"the parameter {repeated[0][:40]} is repeated")
    return {k: v[0] for k, v in parsed.items()}


async def send_oauth_error(send: Send, exc: OAuthError) -> None:
    headers = list(NO_STORE)
    if exc.status == 401:
        headers.append(("www-authenticate", 'Basic realm="oauth"'))
    elif exc.status == 503:
        headers.append(("retry-after", "5"))
    await send_json(send, exc.status, {"error": exc.error,
                                       "error_description": exc.description}, headers)


async def show_error(send: Send, status: int, message: str) -> None:
    """An error the user sees (the redirect URI is not trusted, so nothing is redirected)."""
    await send_text(send, status, f"Authorization failed: {message}\n")


async def redirect(send: Send, url: str) -> None:
    await send_empty(send, 302, [("location", url), *NO_STORE])


def client_redirect(issuer: str, redirect_uri: str, params: dict[str, str | None]) -> str:
    query = urlencode({k: v for k, v in {**params, "iss": issuer}.items() if v is not None})
    return redirect_uri + ("&" if urlsplit(redirect_uri).query else "?") + query


def _credentials(request: HttpRequest, form: dict[str, str]) -> tuple[str, str | None, str]:
    """``(client_id, secret, method)`` of a request: the method is the one it authenticates by
    (``client_secret_basic``, ``client_secret_post``, or ``none`` for a public client naming
    itself; an empty secret, in the form or as HTTP Basic's password, is no secret: RFC 6749
    section 2.3.1 lets a client omit one that is empty). More than one method is refused
    (section 2.3)."""
    basic = request.header("authorization")
    if basic is None or basic[:6].lower() != "basic ":
        if form.get("client_secret"):
            return form.get("client_id", ""), form["client_secret"], "client_secret_post"
        return form.get("client_id", ""), None, "none"
    try:
        decoded = base64.b64decode(basic[6:].strip(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise OAuthError("invalid_client", "the Authorization header is not valid "
                         "Basic credentials", status=401) from None
    user, _, password = decoded.partition(":")
    client_id, secret = unquote_plus(user), unquote_plus(password)
    if form.get("client_secret"):
        raise OAuthError("invalid_request", "the client authenticates by more than one method "
                                            "(HTTP Basic and client_secret)")
    if form.get("client_id", client_id) != client_id:
        raise OAuthError("invalid_client", "client_id differs from the HTTP Basic user",
                         status=401)
    return client_id, secret or None, "client_secret_basic" if secret else "none"


def has_credentials(request: HttpRequest, form: dict[str, str]) -> bool:
    """Whether the request names a client at all (a grant that needs none checks them when
    given)."""
    authorization = request.header("authorization") or ""
    return (authorization[:6].lower() == "basic " or bool(form.get("client_id"))
            or bool(form.get("client_secret")))


async def authenticate_client(request: HttpRequest, form: dict[str, str], storage: Storage,
                              documents: ClientDocuments,
                              delegates: Mapping[str, RegisteredClient] | None = None
                              ) -> RegisteredClient:
    """The calling client, authenticated as it registered (see the module docstring).
    ``delegates``: the clients of the configuration (``delegateClients``), which may present
    their secret either way."""
    client_id, secret, method = _credentials(request, form)
    if documents.is_document_client(client_id):
        # A public client (the only kind a metadata document may describe): nothing to
        # authenticate, and nothing fetched for a request that names no grant of it.
        if method != "none":
            raise OAuthError("invalid_client", "a client known by its metadata document is "
                             "public: it presents no secret", status=401)
        return RegisteredClient(
            client_id=client_id, redirect_uris=(), token_endpoint_auth_method="none",
            grant_types=GRANT_TYPES, client_name=None, scope=None, secret_sha256=None,
            created_at=0.0, expires_at=float("inf"))
    client = (delegates or {}).get(client_id)
    allowed: tuple[str, ...] = SECRET_METHODS
    if client is None:
        client = await storage.get_client(client_id)
        if client is None:
            raise OAuthError("invalid_client", "unknown client_id", status=401)
        allowed = (client.token_endpoint_auth_method,)
    if method not in allowed:
        raise OAuthError("invalid_client", f"the client authenticates with {method}, not as it "
                         f"registered ({client.token_endpoint_auth_method})", status=401)
    if client.secret_sha256 is not None and not hmac.compare_digest(
            sha256(secret or ""), client.secret_sha256):
        raise OAuthError("invalid_client", "client authentication failed", status=401)
    return client
