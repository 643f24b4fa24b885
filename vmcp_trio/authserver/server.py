"""The embedded OAuth 2.1 authorization server (``authServerConfig``), inside the vmcp process.

An MCP client that knows only ``/mcp`` finds this server through vmcp's RFC 9728 metadata,
registers itself (RFC 7591), and sends its user to ``/oauth/authorize``. The user then logs in
at every configured upstream provider in order, one *leg* each: a leg starts with a fresh
internal state (the key of the :class:`~.storage.PendingAuthorization`, single use), its own
PKCE verifier and nonce, and ends at ``/oauth/callback``, which picks the provider by the stored
name (never by anything the request says: IdP mix-up), exchanges the code, keeps the tokens in the
pending record, and starts the next leg. After the last leg the upstream tokens are stored under
a new session id and the client gets its code. An upstream error, or a user who walks away, leaves
nothing stored: the tokens of finished legs live only in the pending record, which expires.

Tokens we issue: access tokens are JWTs signed with the first configured key (``iss``, ``sub``,
``aud``, ``exp``, ``iat``, ``jti``, ``client_id``, ``scope``/``scp``, ``tsid``: the session id that
keys the upstream tokens); codes and refresh tokens are opaque and HMAC-protected. A code works
once: a replay revokes the refresh tokens it issued and the session. Refresh tokens rotate on
every use; presenting an old one revokes the whole family and the session. ``resource`` (RFC
8707) is checked at ``/oauth/authorize``, bound to the code, and checked again at
``/oauth/token``.

Errors before the client's redirect URI is trusted (unknown client, unregistered redirect URI)
are shown to the user, never redirected (RFC 6749 section 4.1.2.1); later ones go back to the
client with ``error``, ``state`` and ``iss`` (RFC 9207), as the code does.

Clients either register (RFC 7591, with OpenID Connect Registration's ``application_type``) or
name themselves by the https URL of their Client ID Metadata Document (:mod:`.cimd`; MCP
2026-07-28). Nobody vouches for such a document, so its client is first shown to the user on a
consent page: its name, the host that publishes it, and where the code will go (MCP 2026-07-28
"Client ID Metadata Document Security"). Towards the upstream providers vmcp is a client itself:
it checks the ``iss`` of their authorization responses (RFC 9207) before using them, and keys the
upstream tokens it stores by the issuer they came from.

Not an OpenID provider: no ID tokens, so discovery does not claim any (both well-known paths serve
the same RFC 8414 document).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import html
import logging
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

import orjson

from ..auth.identity import Identity
from ..auth.jwt import TokenError, parse_jws, verify_signature
from ..auth.outgoing.strategies import CredentialError
from ..http.asgi import BodyTooLarge, HttpRequest, Send, send_empty, send_json, send_text
from ..http.client import HttpClient
from ..resources.plan import AuthServerPlan
from ..runtime.audit import AuditLog, AuthKind, Outcome, auth_event
from ..runtime.audit import Caller as AuditCaller
from ..runtime.logs import REQUEST_ID
from ..runtime.supervisor import NamedTask
from .cimd import ClientDocumentError, ClientDocuments
from .keys import SigningKeys
from .opaque import OpaqueTokens
from .rates import AddressRate
from .refresher import UpstreamRefresher
from .storage import (
    CodeGrant,
    PendingAuthorization,
    RefreshFamily,
    RegisteredClient,
    Storage,
    StorageFull,
    StorageUnavailable,
    StoredUpstream,
)
from .upstream import UpstreamError, UpstreamProvider
from .validation import (
    GRANT_TYPES,
    LOOPBACK_HOSTS,
    OAuthError,
    check_pkce_request,
    check_resource,
    parse_scope,
    redirect_uri_matches,
    validate_client_metadata,
    verify_pkce,
)

__all__ = ["AuthorizationServer"]

log = logging.getLogger("vmcp.authserver")

MAX_REGISTRATION_BYTES = 64 * 1024
MAX_FORM_BYTES = 16 * 1024
CLIENT_LIFETIME = 30 * 24 * 3600.0
UNUSED_CLIENT_LIFETIME = 24 * 3600.0
"""A public client that never completed a login is forgotten after a day (a registration flood
fades); its first login extends it to CLIENT_LIFETIME."""
PENDING_LIFETIME = 600.0
REGISTRATIONS_PER_MINUTE = 20
REGISTRATIONS_PER_MINUTE_ALL = 120
"""Registrations from every address together (per replica)."""
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
_NO_STORE = [("cache-control", "no-store"), ("pragma", "no-cache")]
_CORS = [("access-control-allow-origin", "*")]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cookie(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, or None."""
    for part in (header or "").split(";"):
        key, eq, value = part.strip().partition("=")
        if eq and key == name:
            return value
    return None


class AuthorizationServer:
    def __init__(self, plan: AuthServerPlan, *, resources: tuple[str, ...],
                 scopes: tuple[str, ...], client: HttpClient, storage: Storage) -> None:
        self.plan = plan
        self.issuer = plan.issuer.rstrip("/")
        self.base_path = urlsplit(self.issuer).path
        self.resources = resources
        """The resource indicators (and audiences) this server issues tokens for."""
        self.scopes = scopes
        self.storage = storage
        self.keys = SigningKeys([key.value for key in plan.signing_keys])
        self.opaque = OpaqueTokens([secret.value for secret in plan.hmac_secrets])
        self.providers = {p.name: UpstreamProvider(p, client, allow_http=plan.insecure_allow_http,
                                                   allow_private=plan.insecure_allow_http)
                          for p in plan.providers}
        self.documents = ClientDocuments(allow_http=plan.insecure_allow_http,
                                         allow_private=plan.insecure_allow_http)
        """Clients whose client_id is the URL of their metadata document."""
        self.revoked_sessions: dict[str, float] = {}
        """Sessions revoked in this process (replayed code, reused refresh token, revocation),
        until their tokens would have expired anyway: their access tokens stop working."""
        self.registrations = AddressRate(REGISTRATIONS_PER_MINUTE, REGISTRATIONS_PER_MINUTE_ALL)
        self.authorizations = AddressRate(AUTHORIZATIONS_PER_MINUTE,
                                         AUTHORIZATIONS_PER_MINUTE_ALL)
        """Logins started per client address: what one address may hold of the pending
        table."""
        storage.on_revoked = self.heard_revocation
        self.access_lifetime = plan.access_token_lifespan.total_seconds()
        self.refresh_lifetime = plan.refresh_token_lifespan.total_seconds()
        self.code_lifetime = plan.auth_code_lifespan.total_seconds()
        self.refresher = UpstreamRefresher(storage, self.providers,
                                           end_session=self._revoke_session,
                                           keep_for=self.refresh_lifetime)
        self.audit = AuditLog.disabled()
        """Where logins and tokens issued, refreshed and revoked are recorded (the process's
        audit log, set by the application)."""
        if self.keys.ephemeral or self.opaque.ephemeral:
            log.warning("authServerConfig has no %s: using ephemeral ones, so tokens and codes "
                        "do not survive a restart and replicas cannot verify each other's",
                        " and ".join(n for n, e in (("signingKeySecretRefs", self.keys.ephemeral),
                                                    ("hmacSecretRefs", self.opaque.ephemeral))
                                     if e))

    async def not_ready(self) -> str | None:
        """Why the authorization server cannot serve now (its storage), or None."""
        problem = await self.storage.unreachable()
        return None if problem is None else f"the token storage is unreachable: {problem}"

    def supervised(self) -> list[NamedTask]:
        """The long-lived tasks, for the supervisor (``task_status``): the storage's connection
        (Redis), the providers' key refreshers, the upstream-token refresher."""
        tasks: list[NamedTask] = []
        storage_run = getattr(self.storage, "run", None)
        if storage_run is not None:
            tasks.append(("authorization server storage", storage_run))
        for name, provider in self.providers.items():
            tasks.extend((f"upstream {name} {what}", task) for what, task in provider.supervised())
        tasks.append(("upstream token refresher", self.refresher.run))
        return tasks

    # --- routing -------------------------------------------------------------------------------

    def _path(self, suffix: str) -> str:
        return self.base_path + suffix

    def url(self, suffix: str) -> str:
        return self.issuer + suffix

    async def handle(self, request: HttpRequest, send: Send) -> bool:
        """Serve ``request`` if it is one of ours; False otherwise."""
        path = request.path
        well_known = {f"/.well-known/oauth-authorization-server{self.base_path}",
                      f"/.well-known/openid-configuration{self.base_path}",
                      self._path("/.well-known/openid-configuration"),
                      self._path("/.well-known/oauth-authorization-server")}
        try:
            if path in well_known:
                await send_json(send, 200, self.metadata(),
                                [*_CORS, ("cache-control", "public, max-age=3600")])
            elif path == self._path("/.well-known/jwks.json"):
                await send_json(send, 200, self.keys.jwks(),
                                [*_CORS, ("cache-control", "public, max-age=300")])
            elif path == self._path("/oauth/register"):
                await self.register(request, send)
            elif path == self._path("/oauth/authorize"):
                await self.authorize(request, send)
            elif path == self._path("/oauth/callback"):
                await self.callback(request, send)
            elif path == self._path("/oauth/token"):
                await self.token(request, send)
            elif path == self._path("/oauth/revoke"):
                await self.revoke(request, send)
            else:
                return False
        except StorageFull as exc:
            log.warning("authorization server: %s", exc)
            await send_json(send, 503, {"error": "temporarily_unavailable",
                                        "error_description": str(exc)},
                            [("retry-after", "30")])
        except StorageUnavailable as exc:
            log.error("authorization server storage: %s", exc)
            await send_json(send, 503, {"error": "temporarily_unavailable",
                                        "error_description": f"the token storage is "
                                                             f"unavailable: {exc}"},
                            [("retry-after", "5")])
        return True

    def metadata(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": self.plan.authorization_endpoint,
            "token_endpoint": self.url("/oauth/token"),
            "registration_endpoint": self.url("/oauth/register"),
            "revocation_endpoint": self.url("/oauth/revoke"),
            "jwks_uri": self.url("/.well-known/jwks.json"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": self._auth_methods(),
            "revocation_endpoint_auth_methods_supported": self._auth_methods(),
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": True,
        }
        if self.scopes:
            document["scopes_supported"] = list(self.scopes)
        return document

    def _auth_methods(self) -> list[str]:
        if self.plan.allow_confidential_clients:
            return ["none", "client_secret_basic", "client_secret_post"]
        return ["none"]

    # --- registration (RFC 7591) ---------------------------------------------------------------

    async def register(self, request: HttpRequest, send: Send) -> None:
        if request.method != "POST":
            await send_json(send, 405, {"error": "invalid_request",
                                        "error_description": "use POST"}, [("allow", "POST")])
            return
        refused = self.registrations.retry_after(request.client_group, time.monotonic())
        if refused is not None:
            wait, whose = refused
            await send_json(send, 429, {"error": "invalid_request", "error_description":
                                        "too many registrations from this address"
                                        if whose == "address" else
                                        "too many registrations at once; try again shortly"},
                            [("retry-after", str(wait))])
            return
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        try:
            if content_type != "application/json":
                raise OAuthError("invalid_client_metadata",
                                 "the registration must be JSON (Content-Type: "
                                 "application/json)")
            try:
                body = await request.body(MAX_REGISTRATION_BYTES)
            except BodyTooLarge:
                raise OAuthError("invalid_client_metadata", f"the registration is larger than "
                                 f"{MAX_REGISTRATION_BYTES} bytes") from None
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise OAuthError("invalid_client_metadata",
                                 "the registration is not valid JSON") from None
            metadata = validate_client_metadata(
                document, allow_confidential=self.plan.allow_confidential_clients)
        except OAuthError as exc:
            await send_json(send, exc.status, {"error": exc.error,
                                               "error_description": exc.description})
            return
        now = time.time()
        secret = None if metadata.token_endpoint_auth_method == "none" else \
            secrets.token_urlsafe(32)
        client = RegisteredClient(
            client_id=secrets.token_urlsafe(24), redirect_uris=metadata.redirect_uris,
            token_endpoint_auth_method=metadata.token_endpoint_auth_method,
            grant_types=metadata.grant_types, client_name=metadata.client_name,
            scope=metadata.scope, secret_sha256=_sha256(secret) if secret else None,
            created_at=now,
            expires_at=now + (CLIENT_LIFETIME if secret else UNUSED_CLIENT_LIFETIME),
            application_type=metadata.application_type)
        await self.storage.put_client(client)
        answer: dict[str, Any] = {
            "client_id": client.client_id, "client_id_issued_at": int(now),
            "redirect_uris": list(client.redirect_uris),
            "token_endpoint_auth_method": client.token_endpoint_auth_method,
            "grant_types": list(client.grant_types), "response_types": ["code"],
            "application_type": client.application_type}
        if secret is not None:  # shown once; only its hash is kept
            answer["client_secret"] = secret
            answer["client_secret_expires_at"] = int(client.expires_at)
        if client.client_name:
            answer["client_name"] = client.client_name
        if client.scope:
            answer["scope"] = client.scope
        await send_json(send, 201, answer, _NO_STORE)

    # --- authorization ---------------------------------------------------------------------------

    async def _show_error(self, send: Send, status: int, message: str) -> None:
        """An error the user sees (the redirect URI is not trusted, so nothing is redirected)."""
        await send_text(send, status, f"Authorization failed: {message}\n")

    async def _redirect(self, send: Send, url: str) -> None:
        await send_empty(send, 302, [("location", url), *_NO_STORE])

    def _client_redirect(self, redirect_uri: str, params: dict[str, str | None]) -> str:
        query = urlencode({k: v for k, v in {**params, "iss": self.issuer}.items()
                           if v is not None})
        return redirect_uri + ("&" if urlsplit(redirect_uri).query else "?") + query

    async def authorize(self, request: HttpRequest, send: Send) -> None:
        refused = self.authorizations.retry_after(request.client_group, time.monotonic())
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
            await self._show_error(send, 400, "a parameter is repeated")
            return
        await self._authorize(query, send)

    async def _authorize(self, query: dict[str, str], send: Send, *, consented: bool = False,
                         denied: bool = False) -> None:
        """The authorization request ``query``: checked, then the first upstream leg starts.
        A client known by its metadata document (its client_id is a URL) is first shown to the
        user, who allows it (``consented``) or not (``denied``)."""
        if len(query.get("state") or "") > MAX_STATE_CHARS:
            await self._show_error(send, 400, f"state is longer than {MAX_STATE_CHARS} "
                                              "characters")
            return
        client_id = query.get("client_id", "")
        document = self.documents.is_document_client(client_id)
        if document:
            try:
                client: RegisteredClient | None = await self.documents.resolve(client_id)
            except ClientDocumentError as exc:
                await self._show_error(send, 400, f"the client's metadata document (client_id) "
                                                  f"cannot be used: {exc}")
                return
        else:
            client = await self.storage.get_client(client_id)
        if client is None:
            await self._show_error(send, 400, "unknown client_id")
            return
        redirect_uri = query.get("redirect_uri")
        if redirect_uri is None:
            if len(client.redirect_uris) != 1:
                await self._show_error(send, 400, "redirect_uri is required")
                return
            redirect_uri = client.redirect_uris[0]
        if not redirect_uri_matches(client.redirect_uris, redirect_uri):
            await self._show_error(send, 400, "redirect_uri is not registered for this client")
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
            await self._redirect(send, self._client_redirect(redirect_uri, {
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
        await self._start_leg(send, pending)

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
        action = self.plan.authorization_endpoint
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
            form = await self._form(request)
        except OAuthError as exc:
            await self._show_error(send, 400, exc.description)
            return
        expires, _, rest = form.pop("consent", "").partition(".")
        cookie_id, _, mac = rest.partition(".")
        decision = form.pop("decision", "")
        nonce = _cookie(request.header("cookie"), CONSENT_COOKIE + cookie_id) if cookie_id \
            else None
        if (nonce is None or not expires.isdigit() or int(expires) < time.time()
                or not self.opaque.verify("consent", self._consent_data(expires, nonce, form),
                                          mac)):
            await self._show_error(send, 400, "this consent form has expired or was not shown "
                                              "to this browser; start the sign-in again from "
                                              "the application")
            return
        if decision not in ("allow", "deny"):
            await self._show_error(send, 400, "decision must be allow or deny")
            return
        await self._authorize(form, send, consented=True, denied=decision == "deny")

    async def _start_leg(self, send: Send, pending: PendingAuthorization) -> None:
        provider = self.providers[pending.providers[pending.leg]]
        pending.state = secrets.token_urlsafe(32)
        try:
            leg = await provider.start(state=pending.state,
                                       redirect_uri=self.url("/oauth/callback"))
        except UpstreamError as exc:
            log.warning("authorize: %s", exc)
            await self._redirect(send, self._client_redirect(pending.redirect_uri, {
                "error": "temporarily_unavailable", "error_description": str(exc)[:300],
                "state": pending.client_state}))
            return
        pending.verifier, pending.nonce = leg.verifier, leg.nonce
        await self.storage.put_pending(pending)
        await self._redirect(send, leg.url)

    def _audit(self, kind: AuthKind, outcome: Outcome, request: HttpRequest, *,
               client_id: str | None = None, subject: str | None = None,
               grant_type: str | None = None, provider: str | None = None,
               reason: str | None = None) -> None:
        if not self.audit.settings.enabled:
            return
        self.audit.record(auth_event(
            self.audit.settings, kind, outcome,
            caller=AuditCaller(subject=subject, issuer=self.issuer, client_id=client_id),
            address=request.client or None, user_agent=request.header("user-agent"),
            request_id=REQUEST_ID.get(), endpoint=request.path, grant_type=grant_type,
            provider=provider, reason=reason))

    async def callback(self, request: HttpRequest, send: Send) -> None:
        query = {k: v[0] for k, v in request.query.items() if v}
        pending = await self.storage.take_pending(query.get("state", ""))
        if pending is None:
            await self._show_error(send, 400, "this login is unknown, expired or already "
                                              "finished (state)")
            return
        name = pending.providers[pending.leg]
        provider = self.providers[name]
        try:  # RFC 9207: before the response is acted on, its error included
            await provider.check_response_issuer(request.query.get("iss", []))
        except UpstreamError as exc:
            log.warning("callback: %s", exc)
            await self._fail_chain(request, send, pending, "access_denied", str(exc)[:300])
            return
        if "error" in query or "code" not in query:
            detail = query.get("error", "no code")[:100]
            await self._fail_chain(request, send, pending, "access_denied",
                                   f"the login at {name} did not complete ({detail})")
            return
        try:
            tokens, identity = await provider.finish(
                code=query["code"], verifier=pending.verifier, nonce=pending.nonce,
                redirect_uri=self.url("/oauth/callback"))
        except UpstreamError as exc:
            log.warning("callback: %s", exc)
            await self._fail_chain(request, send, pending, "server_error", str(exc)[:300])
            return
        if pending.subject is None:
            pending.subject = "u-" + _sha256(f"{name}\0{identity.subject}")[:32]
        pending.name = pending.name or identity.name
        pending.email = pending.email or identity.email
        pending.upstream.append(StoredUpstream(
            session_id=pending.session_id, provider=name, access_token=tokens.access_token,
            refresh_token=tokens.refresh_token, expires_at=tokens.expires_at,
            scope=tokens.scope, subject=identity.subject, issued_at=time.time(),
            id_token=tokens.id_token, issuer=provider.issuer))
        if pending.leg + 1 < len(pending.providers):
            pending.leg += 1
            await self._start_leg(send, pending)
            return
        now = time.time()
        for upstream in pending.upstream:
            await self.storage.put_upstream(upstream, now + self.refresh_lifetime)
        code, code_id = self.opaque.mint("code")
        await self.storage.put_code(CodeGrant(
            code_id=code_id, client_id=pending.client_id, redirect_uri=pending.redirect_uri,
            code_challenge=pending.code_challenge, scopes=pending.scopes,
            resource=pending.resource, subject=pending.subject, session_id=pending.session_id,
            name=pending.name, email=pending.email, expires_at=now + self.code_lifetime))
        self._audit("login", "success", request, client_id=pending.client_id,
                    subject=pending.subject, provider=",".join(pending.providers))
        await self._redirect(send, self._client_redirect(pending.redirect_uri, {
            "code": code, "state": pending.client_state}))

    async def _fail_chain(self, request: HttpRequest, send: Send,
                          pending: PendingAuthorization, error: str, description: str) -> None:
        pending.upstream.clear()  # nothing of an abandoned chain is kept
        self._audit("login", "failure", request, client_id=pending.client_id,
                    provider=pending.providers[pending.leg], reason=error)
        await self._redirect(send, self._client_redirect(pending.redirect_uri, {
            "error": error, "error_description": description, "state": pending.client_state}))

    # --- tokens -----------------------------------------------------------------------------

    async def _form(self, request: HttpRequest) -> dict[str, str]:
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

    async def token(self, request: HttpRequest, send: Send) -> None:
        grant_type: str | None = None
        client_id: str | None = None
        try:
            form = await self._form(request)
            grant_type = form.get("grant_type")
            client = await self._client(request, form)
            client_id = client.client_id
            if grant_type == "authorization_code":
                answer, subject = await self._redeem_code(client, form)
            elif grant_type == "refresh_token":
                answer, subject = await self._refresh(client, form)
            else:
                raise OAuthError("unsupported_grant_type",
                                 "grant_type must be authorization_code or refresh_token")
        except OAuthError as exc:
            self._audit("token_refreshed" if grant_type == "refresh_token" else "token_issued",
                        "denied" if exc.status == 401 else "failure", request,
                        client_id=client_id, grant_type=(grant_type or "")[:40] or None,
                        reason=exc.error)
            await self._oauth_error(send, exc)
            return
        self._audit("token_refreshed" if grant_type == "refresh_token" else "token_issued",
                    "success", request, client_id=client_id, subject=subject,
                    grant_type=grant_type)
        await send_json(send, 200, answer, _NO_STORE)

    async def _oauth_error(self, send: Send, exc: OAuthError) -> None:
        headers = list(_NO_STORE)
        if exc.status == 401:
            headers.append(("www-authenticate", 'Basic realm="oauth"'))
        elif exc.status == 503:
            headers.append(("retry-after", "5"))
        await send_json(send, exc.status, {"error": exc.error,
                                           "error_description": exc.description}, headers)

    async def _client(self, request: HttpRequest, form: dict[str, str]) -> RegisteredClient:
        """The calling client, authenticated as it registered: public clients by client_id,
        confidential ones with their secret (HTTP Basic, RFC 6749 section 2.3.1 encoding, or
        client_secret in the form), compared as SHA-256 in constant time."""
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
        if self.documents.is_document_client(client_id):
            # A public client (the only kind a metadata document may describe): nothing to
            # authenticate, and nothing fetched for a request that names no grant of it.
            return RegisteredClient(
                client_id=client_id, redirect_uris=(), token_endpoint_auth_method="none",
                grant_types=GRANT_TYPES, client_name=None, scope=None, secret_sha256=None,
                created_at=0.0, expires_at=float("inf"))
        client = await self.storage.get_client(client_id)
        if client is None:
            raise OAuthError("invalid_client", "unknown client_id", status=401)
        if client.secret_sha256 is not None and not hmac.compare_digest(
                _sha256(secret or ""), client.secret_sha256):
            raise OAuthError("invalid_client", "client authentication failed", status=401)
        return client

    async def _redeem_code(self, client: RegisteredClient,
                           form: dict[str, str]) -> tuple[dict[str, Any], str]:
        """The token response and the subject it is for."""
        code_id = self.opaque.check("code", form.get("code", ""))
        if code_id is None:
            raise OAuthError("invalid_grant", "the code is invalid")
        grant, first = await self.storage.redeem_code(code_id)
        if grant is None:
            raise OAuthError("invalid_grant", "the code is unknown or expired")
        if not first:
            await self._revoke_session(grant.session_id)
            if grant.family_id is not None:
                await self.storage.revoke_family(grant.family_id)
            raise OAuthError("invalid_grant", "the code was already used; the tokens it "
                                              "issued are revoked")
        if grant.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the code was issued to another client")
        if form.get("redirect_uri", grant.redirect_uri) != grant.redirect_uri:
            raise OAuthError("invalid_grant", "redirect_uri differs from the authorization "
                                              "request's")
        verify_pkce(grant.code_challenge, "S256", form.get("code_verifier"))
        if await self._session_revoked(grant.session_id):
            raise OAuthError("invalid_grant", "the login session of this code ended")
        resource = self._same_resource(form, grant.resource)
        family_id = secrets.token_urlsafe(18)
        answer = await self._issue(client.client_id, grant.subject, grant.session_id,
                                   grant.scopes, resource, grant.name, grant.email, family_id,
                                   new_family=True)
        await self.storage.set_code_family(code_id, family_id)
        if self.documents.is_document_client(client.client_id):
            return answer, grant.subject  # not registered here: nothing to keep
        if not client.used or client.expires_at - time.time() < CLIENT_LIFETIME / 2:
            await self.storage.put_client(dataclasses.replace(  # a client in use stays
                client, used=True, expires_at=time.time() + CLIENT_LIFETIME))
        return answer, grant.subject

    def _same_resource(self, form: dict[str, str], bound: str | None) -> str | None:
        """RFC 8707 at the token endpoint: a resource, when given, must be the one the
        authorization request named."""
        asked = check_resource(form.get("resource"), allowed=self.resources)
        if asked is not None and asked != bound:
            raise OAuthError("invalid_target", "resource differs from the authorization "
                                               "request's")
        return bound

    async def _refresh(self, client: RegisteredClient,
                       form: dict[str, str]) -> tuple[dict[str, Any], str]:
        """The token response and the subject it is for."""
        family_id, _, token = form.get("refresh_token", "").partition("~")
        presented = self.opaque.check("rt", token)
        family = await self.storage.get_family(family_id) if presented else None
        if family is None or presented is None:
            raise OAuthError("invalid_grant", "the refresh token is invalid or expired")
        if family.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the refresh token was issued to another client")
        if family.revoked:
            raise OAuthError("invalid_grant", "the refresh token was revoked")
        if await self._session_revoked(family.session_id):
            await self.storage.revoke_family(family_id)
            raise OAuthError("invalid_grant", "the login session of this refresh token ended")
        if self.documents.is_document_client(client.client_id):
            await self._document_still_valid(client.client_id)
        resource = self._same_resource(form, family.resource)
        scopes = family.scopes
        if form.get("scope"):
            narrowed = parse_scope(form["scope"])
            if not set(narrowed) <= set(scopes):
                raise OAuthError("invalid_scope", "scope may only narrow the granted scopes")
            scopes = narrowed
        return await self._issue(client.client_id, family.subject, family.session_id, scopes,
                                 resource, family.name, family.email, family_id,
                                 rotate_from=presented), family.subject

    async def _document_still_valid(self, client_id: str) -> None:
        """A client known by its metadata document keeps refreshing only while the document
        still describes a client (fetched again once the cached copy is stale)."""
        try:
            await self.documents.resolve(client_id)
        except ClientDocumentError as exc:
            if exc.unavailable:
                raise OAuthError("temporarily_unavailable", f"the client's metadata document "
                                 f"cannot be fetched now: {exc}", status=503) from None
            raise OAuthError("invalid_client", f"the client's metadata document is no longer "
                             f"valid: {exc}", status=401) from None

    async def _issue(self, client_id: str, subject: str, session_id: str,
                     scopes: tuple[str, ...], resource: str | None, name: str | None,
                     email: str | None, family_id: str, *, new_family: bool = False,
                     rotate_from: str | None = None) -> dict[str, Any]:
        now = int(time.time())
        refresh, refresh_id = self.opaque.mint("rt")
        refresh_expires = now + self.refresh_lifetime
        if new_family:
            await self.storage.put_family(RefreshFamily(
                family_id=family_id, current_id=refresh_id, client_id=client_id,
                subject=subject, session_id=session_id, scopes=scopes, resource=resource,
                name=name, email=email, expires_at=refresh_expires))
        else:
            assert rotate_from is not None
            rotated = await self.storage.rotate(family_id, rotate_from, refresh_id,
                                                refresh_expires)
            if rotated is None:
                await self._revoke_session(session_id)
                raise OAuthError("invalid_grant", "the refresh token was already used (reuse "
                                                  "after rotation); its family is revoked")
        audience = resource or (self.resources[0] if self.resources else self.issuer)
        claims: dict[str, Any] = {
            "iss": self.issuer, "sub": subject, "aud": [audience], "iat": now,
            "exp": now + int(self.access_lifetime), "jti": secrets.token_urlsafe(16),
            "client_id": client_id, "scope": " ".join(scopes), "scp": list(scopes),
            "tsid": session_id}
        if name:
            claims["name"] = name
        if email:
            claims["email"] = email
        answer: dict[str, Any] = {
            "access_token": self.keys.sign(claims), "token_type": "Bearer",
            "expires_in": int(self.access_lifetime), "refresh_token": f"{family_id}~{refresh}"}
        if scopes:
            answer["scope"] = " ".join(scopes)
        return answer

    # --- revocation -------------------------------------------------------------------------

    async def _revoke_session(self, session_id: str) -> None:
        """End a login session: its upstream tokens are dropped, its access tokens stop working
        here at once (and at every replica, through the storage), and its refresh tokens and
        codes are refused for as long as one of them could still be presented."""
        now = time.time()
        self.revoked_sessions[session_id] = now + max(self.access_lifetime, 60.0)
        await self.storage.drop_session(
            session_id, now + max(self.refresh_lifetime, self.code_lifetime,
                                  self.access_lifetime, 60.0))

    async def _session_revoked(self, session_id: str) -> bool:
        """Whether a login session ended (here, or at any replica sharing the storage)."""
        return not self._session_live(session_id) or await self.storage.session_revoked(
            session_id)

    def _session_live(self, session_id: str) -> bool:
        until = self.revoked_sessions.get(session_id)
        if until is None:
            return True
        if until < time.time():
            del self.revoked_sessions[session_id]
            return True
        return False

    def session_valid(self, identity: Identity) -> bool:
        """For the incoming authenticator: False when the token's session was revoked."""
        session = identity.claims.get("tsid")
        return not isinstance(session, str) or self._session_live(session)

    async def upstream_access_token(self, session_id: str, provider: str) -> str | None:
        """The stored upstream access token of a session (for the outgoing strategies)."""
        stored = await self._upstream(session_id, provider)
        return stored.access_token if stored is not None else None

    async def upstream_id_token(self, session_id: str, provider: str) -> str | None:
        """The stored upstream ID token of a session (a token-exchange subject)."""
        stored = await self._upstream(session_id, provider)
        return stored.id_token if stored is not None else None

    async def _upstream(self, session_id: str, provider: str) -> StoredUpstream | None:
        """A session's stored upstream tokens; storage trouble (Redis failing over) is the
        calling backend's error for this call, saying so."""
        if session_id in self.revoked_sessions:
            return None
        try:
            stored = await self.storage.get_upstream(session_id, provider)
            if stored is not None and self.issuer_changed(stored):
                # Keyed by issuer: another issuer's tokens never go out under this name. The
                # login session ends, so the client's next request logs in again.
                log.warning("the stored %s tokens of a session come from another issuer than "
                            "the one configured now; ending the session", provider)
                await self._revoke_session(session_id)
                return None
            return stored
        except StorageUnavailable as exc:
            raise CredentialError(f"the stored {provider} token cannot be read now ({exc}); "
                                  "try again shortly") from None

    def issuer_changed(self, stored: StoredUpstream) -> bool:
        """Whether ``stored`` came from another issuer than the one its provider name has now
        (a reload pointed the name elsewhere). Records from before issuers were kept carry
        none and are taken as they are."""
        provider = self.providers.get(stored.provider)
        return (stored.issuer is not None and provider is not None
                and stored.issuer != provider.issuer)

    def heard_revocation(self, session_id: str, until: float) -> None:
        """Another replica revoked a session (the storage's broadcast): its access tokens stop
        working here (kept in memory only as long as one could still be valid; the storage
        remembers the revocation for the rest)."""
        self.revoked_sessions[session_id] = min(
            until, time.time() + max(self.access_lifetime, 60.0))

    async def session_not_revoked(self, identity: Identity) -> bool:
        """For a token this process sees for the first time: is its session revoked in the
        shared storage? Storage trouble does not lock everyone out (the signature is valid and
        no revocation is known): it answers True."""
        session = identity.claims.get("tsid")
        if not isinstance(session, str):
            return True
        try:
            return not await self.storage.session_revoked(session)
        except StorageUnavailable:
            return True

    async def _revocable(self, token: str, client: RegisteredClient
                         ) -> tuple[str | None, tuple[str, str]] | None:
        """What revoking ``token`` for ``client`` ends: ``(refresh family or None, (session
        id, subject))``; None when the token is not one of ours issued to this client (RFC 7009
        section 2.1: only that client may revoke it; nothing is said either way). A refresh
        token must be its family's current one (or the one it replaced, within the retry
        grace); an access token must verify with our keys. Either ends its whole login
        session (section 2.1 allows a server to revoke the related tokens)."""
        family_id, _, opaque = token.partition("~")
        presented = self.opaque.check("rt", opaque) if opaque else None
        if presented is not None:
            family = await self.storage.get_family(family_id)
            if family is None or family.client_id != client.client_id or presented not in (
                    family.current_id, family.previous_id):
                return None
            return family_id, (family.session_id, family.subject)
        try:
            parsed = parse_jws(token)
            key = await self.keys.key_for(parsed.kid)
            if key is None:
                return None
            verify_signature(parsed, key)
        except TokenError:
            return None
        claims = parsed.claims
        if (claims.get("iss") != self.issuer or claims.get("client_id") != client.client_id
                or not isinstance(claims.get("tsid"), str)):
            return None
        return None, (claims["tsid"], str(claims.get("sub")))

    async def revoke(self, request: HttpRequest, send: Send) -> None:
        """RFC 7009: always 200 for a well-formed request (an unknown token is no error)."""
        try:
            form = await self._form(request)
            client = await self._client(request, form)
        except OAuthError as exc:
            await self._oauth_error(send, exc)
            return
        token = form.get("token", "")
        session = await self._revocable(token, client)
        if session is not None:
            family_id, subject = session
            if family_id is not None:
                await self.storage.revoke_family(family_id)
            await self._revoke_session(subject[0])
            self._audit("token_revoked", "success", request, client_id=client.client_id,
                        subject=subject[1])
        await send_empty(send, 200, _NO_STORE)
