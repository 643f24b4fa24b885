"""The embedded OAuth 2.1 authorization server (``authServerConfig``), inside the vmcp process.

:class:`AuthorizationServer` is built from its plan, routes its paths, and keeps what every
endpoint shares: the signing keys and HMAC secrets, the storage, the upstream providers, the
audit recorder, and the state of login sessions. Each endpoint family has a module of its own,
handed what it uses (values and callables; none of them imports this one):

* ``/oauth/register``: :mod:`.registration` (RFC 7591);
* ``/oauth/authorize``: :mod:`.authorize` (the request, the consent page for clients known by
  their Client ID Metadata Document, the start of each upstream leg);
* ``/oauth/callback``: :mod:`.callback` (each upstream leg's end, the chain, the code);
* ``/oauth/token``: :mod:`.token` (codes, refresh rotation, the tokens issued), with the
  JWT-bearer grant of trusted issuers' assertions (:mod:`.assertion_grant`, :mod:`.trusted`)
  and token exchange with delegation for the delegate clients (:mod:`.exchange_grant`);
* ``/oauth/revoke``: :mod:`.revocation` (RFC 7009);
* what they share to read a request and answer: :mod:`.endpoints`.

Served here: the RFC 8414 metadata at ``/.well-known/oauth-authorization-server`` and
``/.well-known/openid-configuration``, each both inserted before the issuer's path (RFC 8414
section 3) and appended to it, and the JWKS of the access tokens (``/.well-known/jwks.json``
under the issuer's path). Not an OpenID provider: no ID tokens, so discovery does not claim any
(both well-known names serve the same RFC 8414 document).

Rules kept here:

* Every endpoint is under the issuer's path; :meth:`AuthorizationServer.handle` answers False
  for any other path, for the caller to serve.
* Storage trouble is 503 ``temporarily_unavailable`` on every endpoint: a full table with
  ``Retry-After: 30``, the storage unreachable with ``Retry-After: 5``.
* A login session ends (a replayed code, a reused refresh token, a revocation, an upstream
  provider that refuses its refresh token, stored tokens from another issuer): its upstream
  tokens are dropped, its access tokens stop working here at once and at every replica sharing
  the storage (its broadcast, :meth:`~AuthorizationServer.heard_revocation`), and its refresh
  tokens and codes are refused for as long as one of them could still be presented.
* The gateway's hooks: :meth:`~AuthorizationServer.session_valid` and
  :meth:`~AuthorizationServer.session_not_revoked` for the incoming authenticator,
  :meth:`~AuthorizationServer.upstream_access_token` and
  :meth:`~AuthorizationServer.upstream_id_token` for the outgoing strategies. Upstream tokens
  are kept by the issuer they came from: another issuer's tokens never go out under a
  provider's name.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from ..auth.identity import Identity
from ..auth.outgoing.strategies import CredentialError
from ..http.asgi import HttpRequest, Send, send_json
from ..http.client import HttpClient
from ..resources.plan import AuthServerPlan, OAuth2Provider, ProviderPlan
from ..runtime.audit import AuditLog, AuthKind, Outcome, auth_event
from ..runtime.audit import Caller as AuditCaller
from ..runtime.logs import REQUEST_ID
from ..runtime.supervisor import NamedTask
from .assertion_grant import AssertionGrant
from .authorize import AuthorizeEndpoint
from .callback import CallbackEndpoint
from .cimd import ClientDocuments
from .exchange_grant import ExchangeGrant
from .keys import SigningKeys
from .opaque import OpaqueTokens
from .refresher import UpstreamRefresher
from .registration import RegistrationEndpoint
from .revocation import RevocationEndpoint
from .storage import Storage, StorageFull, StorageUnavailable, StoredUpstream
from .token import TokenEndpoint
from .trusted import TrustedIssuers
from .upstream import UpstreamProvider
from .upstream_registration import UpstreamRegistrar
from .validation import SECRET_METHODS

__all__ = ["AuthorizationServer"]

log = logging.getLogger("vmcp.authserver")

_CORS = [("access-control-allow-origin", "*")]


class AuthorizationServer:
    def __init__(self, plan: AuthServerPlan, *, resources: tuple[str, ...],
                 scopes: tuple[str, ...], client: HttpClient, storage: Storage) -> None:
        self.plan = plan
        self.issuer = plan.issuer.rstrip("/")
        self.base_path = urlsplit(self.issuer).path
        self.scopes = scopes
        self.storage = storage
        self.keys = SigningKeys([key.value for key in plan.signing_keys])
        self.opaque = OpaqueTokens([secret.value for secret in plan.hmac_secrets])
        self.refresh_lifetime = plan.refresh_token_lifespan.total_seconds()
        self.providers = {p.name: self._provider(p, client) for p in plan.providers}
        documents = plan.client_documents
        self.documents = ClientDocuments(
            allow_http=plan.insecure_allow_http, allow_private=plan.insecure_allow_http,
            enabled=documents.enabled, max_cached=documents.max_cached,
            default_lifetime=documents.fallback_lifetime.total_seconds())
        """Clients whose client_id is the URL of their metadata document."""
        self.revoked_sessions: dict[str, float] = {}
        """Sessions revoked in this process (replayed code, reused refresh token, revocation),
        until their tokens would have expired anyway: their access tokens stop working."""
        storage.on_revoked = self.heard_revocation
        self.access_lifetime = plan.access_token_lifespan.total_seconds()
        self.code_lifetime = plan.auth_code_lifespan.total_seconds()
        self.refresher = UpstreamRefresher(storage, self.providers,
                                           end_session=self._revoke_session,
                                           keep_for=self.refresh_lifetime)
        self.audit = AuditLog.disabled()
        """Where logins and tokens issued, refreshed and revoked are recorded (the process's
        audit log, set by the application)."""
        callback_url = self.url("/oauth/callback")
        self.registration = RegistrationEndpoint(
            storage, allow_confidential=plan.allow_confidential_clients,
            baseline_scopes=plan.baseline_client_scopes,
            force_confidential=plan.force_confidential_redirect_uris)
        self.authorization = AuthorizeEndpoint(
            storage, documents=self.documents, providers=self.providers, opaque=self.opaque,
            issuer=self.issuer, scopes=scopes, resources=resources,
            authorization_endpoint=plan.authorization_endpoint,
            callback_url=callback_url)
        self.callback = CallbackEndpoint(
            storage, providers=self.providers, opaque=self.opaque, issuer=self.issuer,
            callback_url=callback_url, code_lifetime=self.code_lifetime,
            refresh_lifetime=self.refresh_lifetime, start_leg=self.authorization.start_leg,
            record=self._audit, keep_upstream=plan.upstream_token_injection)
        self.trusted = TrustedIssuers(plan.trusted_issuers, client)
        """External issuers whose assertions and subject tokens are accepted."""
        self.token = TokenEndpoint(
            storage, documents=self.documents, keys=self.keys, opaque=self.opaque,
            issuer=self.issuer, resources=resources, access_lifetime=self.access_lifetime,
            refresh_lifetime=self.refresh_lifetime, revoke_session=self._revoke_session,
            session_revoked=self._session_revoked, record=self._audit,
            assertions=AssertionGrant(self.trusted, storage,
                                      access_lifetime=self.access_lifetime),
            exchange=ExchangeGrant(keys=self.keys, issuer=self.issuer, resources=resources,
                                   trusted=self.trusted, delegates=plan.delegate_clients,
                                   session_revoked=self._session_revoked,
                                   access_lifetime=self.access_lifetime))
        self.revocation = RevocationEndpoint(
            storage, documents=self.documents, keys=self.keys, opaque=self.opaque,
            issuer=self.issuer, revoke_session=self._revoke_session, record=self._audit)
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
        tasks.extend(self.trusted.supervised())
        return tasks

    # --- routing -------------------------------------------------------------------------------

    def _path(self, suffix: str) -> str:
        return self.base_path + suffix

    def url(self, suffix: str) -> str:
        return self.issuer + suffix

    def _provider(self, plan: ProviderPlan, client: HttpClient) -> UpstreamProvider:
        """One upstream provider: plain http and private addresses when the server's
        ``insecureAllowHTTP`` allows them, or (oauth2) its own ``insecureAllowHTTP`` and
        ``allowPrivateIPs``."""
        insecure = self.plan.insecure_allow_http
        own = (plan.allow_http, plan.allow_private) if isinstance(plan, OAuth2Provider) \
            else (False, False)
        allow_http, allow_private = insecure or own[0], insecure or own[1]
        registrar = None
        if isinstance(plan, OAuth2Provider) and plan.registration is not None:  # dcrConfig
            registrar = UpstreamRegistrar(
                plan.name, plan.registration, storage=self.storage, client=client,
                redirect_uri=self.url("/oauth/callback"), scopes=plan.scopes,
                keep_for=self.refresh_lifetime, allow_http=allow_http,
                allow_private=allow_private)
        return UpstreamProvider(plan, client, registrar=registrar, allow_http=allow_http,
                                allow_private=allow_private)

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
                await self.registration.serve(request, send)
            elif path == self._path("/oauth/authorize"):
                await self.authorization.serve(request, send)
            elif path == self._path("/oauth/callback"):
                await self.callback.serve(request, send)
            elif path == self._path("/oauth/token"):
                await self.token.serve(request, send)
            elif path == self._path("/oauth/revoke"):
                await self.revocation.serve(request, send)
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
            "grant_types_supported": self.token.grant_types(),
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": self._auth_methods(),
            "revocation_endpoint_auth_methods_supported": self._auth_methods(),
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self.documents.enabled,
        }
        if self.scopes:
            document["scopes_supported"] = list(self.scopes)
        return document

    def _auth_methods(self) -> list[str]:
        if self.plan.allow_confidential_clients or self.plan.delegate_clients:
            return ["none", *SECRET_METHODS]
        return ["none"]

    def _audit(self, kind: AuthKind, outcome: Outcome, request: HttpRequest, *,
               client_id: str | None = None, subject: str | None = None,
               grant_type: str | None = None, provider: str | None = None,
               reason: str | None = None) -> None:
        """The endpoints' :class:`~.endpoints.AuditRecord`: into the audit log set now."""
        if not self.audit.settings.enabled:
            return
        self.audit.record(auth_event(
            self.audit.settings, kind, outcome,
            caller=AuditCaller(subject=subject, issuer=self.issuer, client_id=client_id),
            address=request.client or None, user_agent=request.header("user-agent"),
            request_id=REQUEST_ID.get(), endpoint=request.path, grant_type=grant_type,
            provider=provider, reason=reason))

    # --- login sessions ---------------------------------------------------------------------

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
