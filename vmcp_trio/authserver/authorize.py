"""``/oauth/authorize``: the authorization request, the consent page, the upstream legs' start.

An MCP client that knows only ``/mcp`` finds this server through vmcp's RFC 9728 metadata,
registers itself (:mod:`.registration`) or names itself by the https URL of its Client ID
Metadata Document (:mod:`.cimd`; MCP 2026-07-28), and sends its user here. The user then logs
in at every configured upstream provider in order, one *leg* each: a leg starts
(:meth:`AuthorizeEndpoint.start_leg`) with a fresh internal state (the key of the
:class:`~.storage.PendingAuthorization`, single use), its own PKCE verifier and nonce, and ends at
``/oauth/callback`` (:mod:`.callback`), which starts the next one.

Rules kept here:

* Errors before the client's redirect URI is trusted (unknown client, a metadata document that
  cannot be used, unregistered redirect URI, a ``state`` over ``MAX_STATE_CHARS``, a repeated
  parameter) are shown to the user, never redirected (RFC 6749 section 4.1.2.1); later ones go
  back to the client with ``error``, ``state`` and ``iss`` (RFC 9207).
* ``response_type`` is ``code``, PKCE (S256) is required, the scopes are within the configured
  ones, and ``resource`` (RFC 8707) is one this server issues tokens for; it is bound to the
  code and checked again at ``/oauth/token``.
* Logins started are budgeted per client address and for every address together
  (:class:`~.rates.AddressRate`; 429 with ``Retry-After``), so that the pending table never
  fills and refuses everyone.
* Nobody vouches for a Client ID Metadata Document, so its client is first shown to the user on
  a consent page: its name, the host that publishes it, and where the code will go (MCP
  2026-07-28 "Client ID Metadata Document Security"). The page's form is valid only with the
  cookie set with it and before it expires (``CONSENT_LIFETIME``).
"""

from __future__ import annotations

import html
import logging
import secrets
import time
from collections.abc import Mapping
from urllib.parse import urlencode, urlsplit

from ..http.asgi import HttpRequest, Send, send_text
from .cimd import ClientDocumentError, ClientDocuments
from .endpoints import client_redirect, read_form, redirect, show_error
from .opaque import OpaqueTokens
from .rates import AddressRate
from .storage import PendingAuthorization, RegisteredClient, Storage
from .upstream import UpstreamError, UpstreamProvider
from .validation import (
    LOOPBACK_HOSTS,
    OAuthError,
    check_pkce_request,
    check_resource,
    parse_scope,
    redirect_uri_matches,
)

__all__ = ["AuthorizeEndpoint"]

log = logging.getLogger("vmcp.authserver")

PENDING_LIFETIME = 600.0
AUTHORIZATIONS_PER_MINUTE = 30
AUTHORIZATIONS_PER_MINUTE_ALL = 600
"""Logins started from every address together (per replica): with PENDING_LIFETIME, at most
6,000 pending logins, within the pending table's 10,000, so the table never fills and refuses
everyone."""
MAX_STATE_CHARS = 1024
CONSENT_LIFETIME = 600
"""Seconds a consent page's form stays valid."""
CONSENT_COOKIE = "vmcp_consent_"
AUTHORIZE_PARAMETERS = ("response_type", "client_id", "redirect_uri", "state", "code_challenge",
                        "code_challenge_method", "scope", "resource")
"""The authorization request parameters this server reads (the consent form carries them)."""
_PAGE_HEADERS = [("cache-control", "no-store"), ("x-frame-options", "DENY"),
                 ("content-security-policy",
                  "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
                 ("referrer-policy", "no-referrer")]


def _cookie(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, or None."""
    for part in (header or "").split(";"):
        key, eq, value = part.strip().partition("=")
        if eq and key == name:
            return value
    return None


class AuthorizeEndpoint:
    def __init__(self, storage: Storage, *, documents: ClientDocuments,
                 providers: Mapping[str, UpstreamProvider], opaque: OpaqueTokens, issuer: str,
                 scopes: tuple[str, ...], resources: tuple[str, ...],
                 authorization_endpoint: str, callback_url: str) -> None:
        self.storage = storage
        self.documents = documents
        self.providers = providers
        self.opaque = opaque
        self.issuer = issuer
        self.scopes = scopes
        self.resources = resources
        self.authorization_endpoint = authorization_endpoint
        """Where users are sent (the consent form posts there)."""
        self.callback_url = callback_url
        """Where every upstream leg ends (``/oauth/callback``)."""
        self.rate = AddressRate(AUTHORIZATIONS_PER_MINUTE, AUTHORIZATIONS_PER_MINUTE_ALL)
        """Logins started per client address: what one address may hold of the pending
        table."""

    async def serve(self, request: HttpRequest, send: Send) -> None:
        refused = self.rate.retry_after(request.client_group, time.monotonic())
        if refused is not None:
            wait, whose = refused
            await send_text(send, 429, "Authorization failed: too many logins started "
                            f"{'from this address' if whose == 'address' else 'at once'}; "
                            "try again shortly\n", headers=[("retry-after", str(wait))])
            return
        if request.method == "POST":
            await self._consent_answer(request, send)
            return
        query = {k: v[0] for k, v in request.query.items() if v}
        if any(len(v) > 1 for v in request.query.values()):
            await show_error(send, 400, "a parameter is repeated")
            return
        await self._authorize(query, send)

    async def _authorize(self, query: dict[str, str], send: Send, *, consented: bool = False,
                         denied: bool = False) -> None:
        """The authorization request ``query``: checked, then the first upstream leg starts.
        A client known by its metadata document (its client_id is a URL) is first shown to the
        user, who allows it (``consented``) or not (``denied``)."""
        if len(query.get("state") or "") > MAX_STATE_CHARS:
            await show_error(send, 400, f"state is longer than {MAX_STATE_CHARS} characters")
            return
        client_id = query.get("client_id", "")
        document = self.documents.is_document_client(client_id)
        if document:
            try:
                client: RegisteredClient | None = await self.documents.resolve(client_id)
            except ClientDocumentError as exc:
                await show_error(send, 400, f"the client's metadata document (client_id) "
                                            f"cannot be used: {exc}")
                return
        else:
            client = await self.storage.get_client(client_id)
        if client is None:
            await show_error(send, 400, "unknown client_id")
            return
        redirect_uri = query.get("redirect_uri")
        if redirect_uri is None:
            if len(client.redirect_uris) != 1:
                await show_error(send, 400, "redirect_uri is required")
                return
            redirect_uri = client.redirect_uris[0]
        if not redirect_uri_matches(client.redirect_uris, redirect_uri):
            await show_error(send, 400, "redirect_uri is not registered for this client")
            return
        state = query.get("state")
        try:
            if query.get("response_type") != "code":
                raise OAuthError("unsupported_response_type", "response_type must be code")
            check_pkce_request(query.get("code_challenge"), query.get("code_challenge_method"))
            scopes = parse_scope(query.get("scope"), allowed=self.scopes or None)
            resource = check_resource(query.get("resource"), allowed=self.resources)
            if denied:
                raise OAuthError("access_denied", "the user did not allow the client")
        except OAuthError as exc:
            await redirect(send, client_redirect(self.issuer, redirect_uri, {
                "error": exc.error, "error_description": exc.description, "state": state}))
            return
        if document and not consented:
            await self._consent_page(send, client, redirect_uri, query, scopes, resource)
            return
        providers = tuple(self.providers)
        pending = PendingAuthorization(
            state="", client_id=client.client_id, redirect_uri=redirect_uri, client_state=state,
            code_challenge=str(query["code_challenge"]), scopes=scopes, resource=resource,
            session_id=secrets.token_urlsafe(24), providers=providers, leg=0, verifier="",
            nonce=None, expires_at=time.time() + PENDING_LIFETIME)
        await self.start_leg(send, pending)

    async def start_leg(self, send: Send, pending: PendingAuthorization) -> None:
        """Send the user to the provider of ``pending``'s current leg, under a new state; a
        provider that cannot be reached sends them back to the client with the error."""
        provider = self.providers[pending.providers[pending.leg]]
        pending.state = secrets.token_urlsafe(32)
        try:
            leg = await provider.start(state=pending.state, redirect_uri=self.callback_url)
        except UpstreamError as exc:
            log.warning("authorize: %s", exc)
            await redirect(send, client_redirect(self.issuer, pending.redirect_uri, {
                "error": "temporarily_unavailable", "error_description": str(exc)[:300],
                "state": pending.client_state}))
            return
        pending.verifier, pending.nonce = leg.verifier, leg.nonce
        pending.upstream_client_id = leg.client_id
        await self.storage.put_pending(pending)
        await redirect(send, leg.url)

    # --- consent (clients known by their metadata document) -----------------------------------

    def _consent_data(self, expires: str, nonce: str, params: dict[str, str]) -> str:
        return f"{expires}\n{nonce}\n{urlencode(sorted(params.items()))}"

    async def _consent_page(self, send: Send, client: RegisteredClient, redirect_uri: str,
                            query: dict[str, str], scopes: tuple[str, ...],
                            resource: str | None) -> None:
        """The page that names the client before the user signs in for it. MCP 2026-07-28
        ("Client ID Metadata Document Security"): the redirect URI's host must be shown, with
        a warning when it is on the user's own computer; the draft (section 8.5): the
        client_id's host too, since anyone can publish a document with any client_name. The
        form carries the request, and a MAC that binds it to an expiry and to a cookie set
        with this page (SameSite=Strict, HttpOnly): a form posted from another site, or to
        another browser, does not carry it."""
        params = {k: query[k] for k in AUTHORIZE_PARAMETERS if k in query}
        params["redirect_uri"] = redirect_uri
        expires = str(int(time.time()) + CONSENT_LIFETIME)
        cookie_id, nonce = secrets.token_urlsafe(9), secrets.token_urlsafe(24)
        mac = self.opaque.sign("consent", self._consent_data(expires, nonce, params))
        action = self.authorization_endpoint
        cookie = (f"{CONSENT_COOKIE}{cookie_id}={nonce}; Path={urlsplit(action).path or '/'}; "
                  f"Max-Age={CONSENT_LIFETIME}; HttpOnly; SameSite=Strict"
                  + ("; Secure" if action.startswith("https:") else ""))
        client_parts = urlsplit(client.client_id)
        redirect_parts = urlsplit(redirect_uri)
        if redirect_parts.scheme in ("http", "https"):
            goes_to = redirect_parts.netloc
        else:
            goes_to = f"the application registered for {redirect_parts.scheme}: on this device"
        loopback = (redirect_parts.scheme == "http"
                    and (redirect_parts.hostname or "") in {h.strip("[]") for h in LOOPBACK_HOSTS})
        e = html.escape
        hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">'
                         for k, v in params.items())
        warning = ('<p class="warn">That address is <strong>on your own computer</strong>: '
                   "continue only if you started this sign-in from an application running on "
                   "this computer, since any program on it could receive the access you "
                   "grant.</p>") if loopback else ""
        page = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            "<title>Allow access?</title><style>body{font-family:system-ui,sans-serif;"
            "max-width:38em;margin:2em auto;padding:0 1em;line-height:1.4}code{word-break:"
            "break-all}.warn{background:#fff3cd;padding:.6em}button{font-size:1em;"
            "margin-right:1em;padding:.4em 1em}</style></head><body>"
            f"<h1>Allow {e(client.client_name or client_parts.netloc)} access?</h1>"
            f"<p>The application calls itself <strong>{e(client.client_name or '')}</strong>. "
            f"It is published at <strong>{e(client_parts.netloc)}</strong> "
            f"(<code>{e(client.client_id)}</code>).</p>"
            f"<p>After you sign in, you will be sent back to <strong>{e(goes_to)}</strong> "
            f"(<code>{e(redirect_uri)}</code>).</p>{warning}"
            f"<p>Access requested: <code>{e(' '.join(scopes) or 'default')}</code>"
            + (f" to <code>{e(resource)}</code>" if resource else "") + ".</p>"
            f'<form method="post" action="{e(action)}">{hidden}'
            f'<input type="hidden" name="consent" value="{e(expires)}.{e(cookie_id)}.{e(mac)}">'
            '<button name="decision" value="allow">Allow and sign in</button>'
            '<button name="decision" value="deny">Deny</button></form></body></html>')
        await send_text(send, 200, page, content_type="text/html",
                        headers=[*_PAGE_HEADERS, ("set-cookie", cookie)])

    async def _consent_answer(self, request: HttpRequest, send: Send) -> None:
        """The consent form, posted: valid only with its cookie and before it expires."""
        try:
            form = await read_form(request)
        except OAuthError as exc:
            await show_error(send, 400, exc.description)
            return
        expires, _, rest = form.pop("consent", "").partition(".")
        cookie_id, _, mac = rest.partition(".")
        decision = form.pop("decision", "")
        nonce = _cookie(request.header("cookie"), CONSENT_COOKIE + cookie_id) if cookie_id \
            else None
        if (nonce is None or not expires.isdigit() or int(expires) < time.time()
                or not self.opaque.verify("consent", self._consent_data(expires, nonce, form),
                                          mac)):
            await show_error(send, 400, "this consent form has expired or was not shown to "
                                        "this browser; start the sign-in again from the "
                                        "application")
            return
        if decision not in ("allow", "deny"):
            await show_error(send, 400, "decision must be allow or deny")
            return
        await self._authorize(form, send, consented=True, denied=decision == "deny")
