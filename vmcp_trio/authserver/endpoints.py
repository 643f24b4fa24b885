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
* A client authenticates as it registered: public clients by ``client_id``, confidential ones
  with their secret (HTTP Basic, RFC 6749 section 2.3.1 encoding, or ``client_secret`` in the
  form), compared as SHA-256 in constant time. A client known by its metadata document is
  public: nothing to authenticate, and nothing fetched for a request that names no grant of it.

How each endpoint records what it did in the audit log is the server's (:class:`AuditRecord`):
it is handed to the endpoints that record, as a callable.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Protocol
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

from ..http.asgi import BodyTooLarge, HttpRequest, Send, send_empty, send_json, send_text
from ..runtime.audit import AuthKind, Outcome
from .cimd import ClientDocuments
from .storage import RegisteredClient, Storage
from .validation import GRANT_TYPES, OAuthError

__all__ = [
    "MAX_FORM_BYTES",
    "NO_STORE",
    "AuditRecord",
    "authenticate_client",
    "client_redirect",
    "read_form",
    "redirect",
    "send_oauth_error",
    "sha256",
    "show_error",
]

MAX_FORM_BYTES = 16 * 1024
NO_STORE = [("cache-control", "no-store"), ("pragma", "no-cache")]


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


async def authenticate_client(request: HttpRequest, form: dict[str, str], storage: Storage,
                              documents: ClientDocuments) -> RegisteredClient:
    """The calling client, authenticated as it registered (see the module docstring)."""
    client_id, secret = form.get("client_id", ""), form.get("client_secret")
    basic = request.header("authorization")
    if basic is not None and basic[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(basic[6:].strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise OAuthError("invalid_client", "the Authorization header is not valid "
                             "Basic credentials", status=401) from None
        user, _, password = decoded.partition(":")
        client_id, secret = unquote_plus(user), unquote_plus(password)
    if documents.is_document_client(client_id):
        # A public client (the only kind a metadata document may describe): nothing to
        # authenticate, and nothing fetched for a request that names no grant of it.
        return RegisteredClient(
            client_id=client_id, redirect_uris=(), token_endpoint_auth_method="none",
            grant_types=GRANT_TYPES, client_name=None, scope=None, secret_sha256=None,
            created_at=0.0, expires_at=float("inf"))
    client = await storage.get_client(client_id)
    if client is None:
        raise OAuthError("invalid_client", "unknown client_id", status=401)
    if client.secret_sha256 is not None and not hmac.compare_digest(
            sha256(secret or ""), client.secret_sha256):
        raise OAuthError("invalid_client", "client authentication failed", status=401)
    return client
