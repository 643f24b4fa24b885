"""One upstream identity provider of the embedded authorization server's chained login.

The authorization server sends the user through each configured provider in turn (one *leg*
each): :meth:`UpstreamProvider.start` builds the provider's authorization URL (authorization code
with S256 PKCE, and an OIDC nonce), :meth:`UpstreamProvider.finish` redeems the code the callback
received and finds out who the user is, and :meth:`UpstreamProvider.refresh` renews the provider's
tokens later (for ``upstreamInject``).

Two kinds of provider, as ToolHive has them:

* ``oidc``: endpoints and signing keys come from the issuer's discovery document, fetched lazily
  at first use (a provider that is down at startup does not stop the server); the user is the
  ``sub`` of the ID token (or the claim ``subjectClaim`` names, such as Entra ID's ``oid``: a
  non-empty string, else the login fails rather than key the user by another claim, as
  ToolHive), which is checked fully (signature with the provider's JWKS, ``iss`` = the
  discovered issuer, ``aud`` contains our client id, ``azp``, ``exp``, the leg's ``nonce``, and
  ``at_hash`` when present).
* ``oauth2``: explicit endpoints; the user comes from the ``userInfo`` endpoint through its
  ``fieldMapping`` (ordered candidate fields, the first non-empty one wins, numbers become
  integer strings as GitHub's numeric ``id`` needs). ``tokenResponseMapping`` reads tokens that a
  provider nests in its token response (also on refresh).

The OAuth client work is the shared core's (:mod:`vmcp_trio.auth.oauth`): discovery and its
checks, PKCE, the authorization URL, the token requests (client authentication, OAuth error
answers) and reading token responses; this module adds what is particular to a login leg (the
nonce and the ID token checks, the userInfo identity, RFC 9207).

Errors are :class:`UpstreamError`; their messages name the provider and what went wrong (HTTP
status, the provider's OAuth error code and description, a missing field, the ID token check)
and never contain a token, a code, a verifier or a secret. Every network call is bounded in
time (``timeout``) and size (:data:`~vmcp_trio.auth.oauth.discovery.MAX_DOCUMENT_BYTES`).

Only the URLs the provider's discovery document names are put through the SSRF guard
(:func:`~vmcp_trio.auth.ssrf.check_fetch_url`, with ``allow_http``/``allow_private``), and every
request to such a URL (each token request, not only the discovery) connects through it;
configured URLs (the issuer, the ``oauth2`` endpoints) were checked by the configuration rules.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from ..auth.incoming.jwks import JwksCache, KeysUnavailable
from ..auth.jwt import TokenError, UnverifiedToken, check_claims, parse_jws, verify_signature
from ..auth.oauth.authorize import authorization_url
from ..auth.oauth.discovery import (
    MAX_DOCUMENT_BYTES,
    DiscoveryError,
    FetchError,
    discover,
    read_authorization_server_metadata,
)
from ..auth.oauth.pkce import pkce_pair
from ..auth.oauth.tokens import (
    ClientCredentials,
    TokenEndpointError,
    TokenResponse,
    first_text,
    oauth_error,
    parse_token_response,
    token_request,
)
from ..auth.ssrf import fetch_guard
from ..http.client import HttpClient, HttpError
from ..protocol import base64url
from ..resources.plan import OIDCProvider, ProviderPlan, TokenResponseMappingPlan, UserInfoPlan
from ..runtime.supervisor import NamedTask
from .upstream_registration import RegistrationFailed, UpstreamRegistrar

__all__ = ["LegStart", "RegistrationGone", "UpstreamError", "UpstreamIdentity",
           "UpstreamProvider", "UpstreamTokens"]

log = logging.getLogger("vmcp.authserver.upstream")

DEFAULT_TIMEOUT = 10.0
#: After a failed discovery, calls within this many seconds fail at once with the same reason
#: instead of each waiting for the issuer again (a login storm while the issuer is down).
DISCOVERY_RETRY_AFTER = 2.0
# Headers the provider's configuration may not set: the client owns them.
_RESERVED_HEADERS = frozenset({"authorization", "host", "content-length", "transfer-encoding",
                               "connection"})
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")
# What an access token may hold to be sent as "Authorization: Bearer <token>" (RFC 6750's
# b64token is stricter; some providers use other visible characters).
_BEARER_SAFE = re.compile(r"[\x21-\x7e]+")
# OIDC Core 3.1.3.6: at_hash is the left half of the hash the JWS alg uses.
_AT_HASH: dict[str, Callable[[bytes], Any]] = {
    "RS256": hashlib.sha256, "PS256": hashlib.sha256, "ES256": hashlib.sha256,
    "RS384": hashlib.sha384, "PS384": hashlib.sha384, "ES384": hashlib.sha384,
    "RS512": hashlib.sha512, "PS512": hashlib.sha512, "ES512": hashlib.sha512,
    "EdDSA": hashlib.sha512, "Ed25519": hashlib.sha512,
}
_ID_TOKEN_TYPS = frozenset({"jwt"})  # never "at+jwt": an access token is not an ID token


class UpstreamError(Exception):
    """The provider refused or failed. The message says which provider and what (HTTP status,
    the provider's OAuth error code and description, a missing field, an ID token check); it
    never contains tokens, codes or secrets. ``oauth_error`` is the provider's OAuth error code
    when it gave one (``invalid_grant`` on refresh means: log in again)."""

    def __init__(self, message: str, *, oauth_error: str | None = None) -> None:
        super().__init__(message)
        self.oauth_error = oauth_error


class RegistrationGone(UpstreamError):
    """The client registration that obtained a token is no longer vmcp's (a reload changed the
    provider's ``clientId``, or a registration expired): the token cannot be refreshed or
    redeemed as that client, so the user logs in again."""


UpstreamTokens = TokenResponse
"""A provider's tokens: the shared core's token response, under the name the login code uses."""


@dataclass(frozen=True)
class UpstreamIdentity:
    subject: str
    name: str | None = None
    email: str | None = None


@dataclass(frozen=True)
class LegStart:
    url: str  # where to send the user's browser
    verifier: str = field(repr=False)  # PKCE verifier of this leg (for the pending record)
    nonce: str | None = field(repr=False)  # OIDC nonce of this leg (None for oauth2)
    client_id: str  # vmcp's client id at the provider for this leg (its code is bound to it)


@dataclass(frozen=True)
class _Endpoints:
    issuer: str | None  # the discovered issuer (oidc), None for oauth2
    authorization: str
    token: str
    jwks_uri: str | None
    iss_parameter_supported: bool = False
    """The metadata's ``authorization_response_iss_parameter_supported`` (RFC 9207)."""


# --- the provider ------------------------------------------------------------------------------

class UpstreamProvider:
    """One configured provider. Built from a :data:`ProviderPlan`; ``oidc`` discovers its
    endpoints (and keys, through a :class:`JwksCache`) from ``issuerUrl`` lazily, at first use;
    ``oauth2`` uses the explicit endpoints."""

    def __init__(self, plan: ProviderPlan, client: HttpClient, *, allow_http: bool = False,
                 allow_private: bool = False, timeout: float = DEFAULT_TIMEOUT,
                 registrar: UpstreamRegistrar | None = None) -> None:
        self.plan = plan
        self.registrar = registrar
        """Obtains vmcp's client id by registering at the provider (``dcrConfig``)."""
        self.name = plan.name
        self.client = client
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.timeout = timeout
        # A public client names itself in the form (RFC 6749 section 3.2.1).
        self._credentials = ClientCredentials(plan.client_id, None, "none")
        if plan.client_secret is not None:
            try:
                secret = plan.client_secret.value.decode("utf-8")
            except UnicodeDecodeError:
                raise self._error("the client secret is not UTF-8 text") from None
            self._credentials = ClientCredentials(plan.client_id, secret, "client_secret_basic")
        self._endpoints: _Endpoints | None = None
        self._jwks: JwksCache | None = None
        self._mapping: TokenResponseMappingPlan | None = None  # None: the standard members
        self._userinfo_headers: list[tuple[str, str]] = []
        self._discovery_lock = trio.Lock()
        self._discovery_failure: tuple[float, str] | None = None  # (when, why)
        if isinstance(plan, OIDCProvider):
            self._jwks = JwksCache(plan.issuer_url, self._jwks_uri, client,
                                   allow_http=allow_http, allow_private=allow_private,
                                   fetch_timeout=timeout,
                                   private_switch="authServerConfig.insecureAllowHTTP")
        else:
            self._endpoints = _Endpoints(None, plan.authorization_endpoint, plan.token_endpoint,
                                         None)
            self._mapping = plan.token_response_mapping
        if plan.user_info is not None:
            self._userinfo_headers = self._build_userinfo_headers(
                plan.user_info.additional_headers)

    def __repr__(self) -> str:
        return f"UpstreamProvider({self.name!r}, {self.plan.type})"

    @property
    def issuer(self) -> str:
        """The issuer that this provider's credentials are keyed by (MCP 2026-07-28,
        "Authorization Server Binding"): an oidc provider's issuer (discovery checks that the
        metadata names exactly this one, RFC 8414 section 3.3). An oauth2 provider has no issuer
        identifier (explicit endpoints, no metadata), so its token endpoint, where its refresh
        tokens are sent, stands for it. Stored tokens are used only while it stays the same: a
        provider name that a reload points elsewhere never receives the old one's tokens."""
        if isinstance(self.plan, OIDCProvider):
            return self.plan.issuer_url
        return self.plan.token_endpoint

    def _error(self, message: str, *, oauth_error: str | None = None) -> UpstreamError:
        return UpstreamError(f"upstream provider {self.name!r}: {message}",
                             oauth_error=oauth_error)

    def _build_userinfo_headers(self, extra: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """``Accept: application/json`` and the configured additionalHeaders (which may replace
        Accept, never Authorization, Host or the framing headers). Invalid ones are refused
        here, at construction, because the HTTP layer's own error would quote the value."""
        headers = {"accept": ("accept", "application/json")}
        for name, value in extra:
            if not _HEADER_NAME.fullmatch(name):
                raise self._error(f"userInfo additional header {name[:100]!r} is not a valid "
                                  "header name")
            if name.lower() in _RESERVED_HEADERS:
                raise self._error(f"userInfo additional header {name!r} cannot be set: vmcp "
                                  "sets it")
            if not _HEADER_VALUE.fullmatch(value):
                raise self._error(f"the value of userInfo additional header {name!r} is not a "
                                  "valid header value (visible ASCII only)")
            headers[name.lower()] = (name, value)
        return list(headers.values())

    def supervised(self) -> list[NamedTask]:
        """Tasks for the supervisor (``task_status``): the JWKS refresher of an ``oidc``
        provider. Without it the keys are still fetched on demand at first use."""
        return [("JWKS", self._jwks.run)] if self._jwks is not None else []

    # --- endpoints -----------------------------------------------------------------------------

    async def _discover(self) -> _Endpoints:
        """The oidc provider's endpoints, discovered once; raises FetchError (the JwksCache
        calls this for its URL and reports FetchError as a failed fetch)."""
        if self._endpoints is not None:
            return self._endpoints
        assert isinstance(self.plan, OIDCProvider)
        async with self._discovery_lock:
            if self._endpoints is not None:  # discovered while we waited
                return self._endpoints
            failure = self._discovery_failure
            if failure is not None and trio.current_time() - failure[0] < DISCOVERY_RETRY_AFTER:
                raise DiscoveryError(failure[1])
            try:
                endpoints = await self._fetch_endpoints(self.plan.issuer_url)
            except FetchError as exc:
                self._discovery_failure = (trio.current_time(), str(exc))
                raise
            self._endpoints, self._discovery_failure = endpoints, None
            log.debug("upstream provider %s: discovered %s", self.name, self.plan.issuer_url)
            return endpoints

    async def _fetch_endpoints(self, issuer: str) -> _Endpoints:
        try:
            with trio.fail_after(self.timeout):
                meta = await discover(self.client, issuer, allow_http=self.allow_http,
                                      allow_private=self.allow_private)
        except trio.TooSlowError:
            raise DiscoveryError(f"the metadata of {issuer} did not arrive within "
                                 f"{self.timeout:g}s") from None
        # The endpoints' checks (the browser's is a web URL, the token endpoint passes the SSRF
        # guard) are the shared core's; the JWKS URL is put through the guard when fetched.
        checked = await read_authorization_server_metadata(meta, allow_http=self.allow_http,
                                                           allow_private=self.allow_private)
        jwks_uri = meta.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise DiscoveryError(f"the metadata of {issuer} has no jwks_uri")
        return _Endpoints(checked.issuer, checked.authorization_endpoint, checked.token_endpoint,
                          jwks_uri,
                          meta.get("authorization_response_iss_parameter_supported") is True)

    async def _jwks_uri(self) -> str:
        endpoints = await self._discover()
        assert endpoints.jwks_uri is not None
        return endpoints.jwks_uri

    async def _get_endpoints(self) -> _Endpoints:
        try:
            return await self._discover()
        except FetchError as exc:
            raise self._error(f"discovery failed: {exc}") from None

    # --- HTTP ----------------------------------------------------------------------------------

    async def _call(self, what: str, method: str, url: str, headers: list[tuple[str, str]],
                    body: bytes = b"") -> tuple[int, object]:
        """``(status, decoded JSON or None)`` of one bounded exchange."""
        try:
            with trio.fail_after(self.timeout):
                status, _, data = await self.client.request(method, url, headers=headers,
                                                            body=body, limit=MAX_DOCUMENT_BYTES)
        except trio.TooSlowError:
            raise self._error(f"the {what} did not answer within {self.timeout:g}s") from None
        except HttpError as exc:
            raise self._error(f"the {what} failed: {exc}") from None
        try:
            document: object = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            document = None  # the caller reports the status; a 200 needs an object anyway
        return status, document

    # --- who vmcp is at the provider -------------------------------------------------------------

    async def credentials(self) -> ClientCredentials:
        """vmcp's client at the provider for a new login: the configured one, or the
        registration (:mod:`.upstream_registration`, registered at first use)."""
        if self.registrar is None:
            return self._credentials
        try:
            return await self.registrar.credentials()
        except RegistrationFailed as exc:
            raise self._error(f"registering vmcp at the provider failed: {exc}") from None

    async def credentials_of(self, client_id: str | None) -> ClientCredentials:
        """The client that obtained a code or tokens (None: one stored before it was kept, the
        current one). Raises :class:`RegistrationGone` when it is no longer vmcp's."""
        if client_id is None:
            return await self.credentials()
        if self.registrar is None:
            if client_id == self._credentials.client_id:
                return self._credentials
        else:
            registered = await self.registrar.credentials_for(client_id)
            if registered is not None:
                return registered
        raise RegistrationGone(f"upstream provider {self.name!r}: the client that obtained "
                               "these tokens is no longer vmcp's (its client id changed since)")

    async def _token_request(self, form: dict[str, str], what: str,
                             credentials: ClientCredentials) -> UpstreamTokens:
        endpoints = await self._get_endpoints()
        try:
            document = await token_request(
                self.client, endpoints.token, form, credentials, timeout=self.timeout,
                what=what, guard=None if endpoints.issuer is None  # configured (oauth2)
                else fetch_guard(allow_private=self.allow_private))
            return parse_token_response(document, self._mapping, now=time.time())
        except TokenEndpointError as exc:
            raise self._error(str(exc), oauth_error=exc.oauth_error) from None

    # --- the leg -------------------------------------------------------------------------------

    async def start(self, *, state: str, redirect_uri: str) -> LegStart:
        """The authorization URL of this leg: ``response_type=code``, ``client_id``,
        ``redirect_uri``, ``scope`` (the plan's scopes), ``state``, ``code_challenge`` (S256 of a
        fresh verifier), ``code_challenge_method=S256``, and for oidc a fresh ``nonce``. An oidc
        provider's endpoint comes from discovery (UpstreamError when that fails)."""
        endpoints = await self._get_endpoints()
        client_id = (await self.credentials()).client_id
        verifier, challenge = pkce_pair()
        nonce = secrets.token_urlsafe(32) if isinstance(self.plan, OIDCProvider) else None
        url = authorization_url(endpoints.authorization, client_id=client_id,
                                redirect_uri=redirect_uri, state=state,
                                code_challenge=challenge, scopes=self.plan.scopes,
                                extra=(*self.plan.authorization_params,
                                       *(() if nonce is None else (("nonce", nonce),))))
        return LegStart(url, verifier, nonce, client_id)

    async def check_response_issuer(self, iss: Sequence[str]) -> None:
        """RFC 9207 section 2.4, as MCP 2026-07-28 ("Authorization Response Validation") has
        clients apply it before a code goes to any token endpoint, success and error responses
        alike: ``iss`` (the values the callback received) must be exactly the oidc provider's
        discovered issuer (simple string comparison, no normalisation), and must be present
        when its metadata says ``authorization_response_iss_parameter_supported``. An oauth2
        provider has no issuer identifier to compare with (no metadata), so its ``iss`` is not
        checked: the leg's single-use state and PKCE verifier bind its response. Raises
        UpstreamError, never quoting the value received."""
        if not isinstance(self.plan, OIDCProvider):
            return
        endpoints = await self._get_endpoints()
        if len(iss) > 1:
            raise self._error("the authorization response carries iss more than once (RFC 9207)")
        if not iss:
            if endpoints.iss_parameter_supported:
                raise self._error("the authorization response has no iss, though the provider's "
                                  "metadata says it sends one (RFC 9207)")
            return
        if iss[0] != endpoints.issuer:
            raise self._error("the authorization response names another issuer than the "
                              "provider's (RFC 9207: a mix-up); it was refused")

    async def finish(self, *, code: str, verifier: str, nonce: str | None, redirect_uri: str,
                     client_id: str | None = None) -> tuple[UpstreamTokens, UpstreamIdentity]:
        """Redeem the leg's code (with its PKCE verifier, as ``client_id``, the client the leg
        started as) and find out who the user is. An oidc provider: its ID token (the name and
        email from ``userInfoOverride`` when set). An oauth2 one: ``identityFromToken``'s paths
        in the token response, else its userInfo endpoint, else the access token alone
        (``tk-`` and a digest of it, as ToolHive: a new user at each login, with no name)."""
        plan = self.plan
        if isinstance(plan, OIDCProvider) and not nonce:
            raise self._error("the login leg has no nonce to check the ID token with")
        tokens = await self._token_request(
            {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
             "code_verifier": verifier}, "authorization code",
            await self.credentials_of(client_id))
        if isinstance(plan, OIDCProvider):
            assert nonce is not None
            identity = await self._id_token_identity(tokens, nonce)
            if plan.user_info is None:
                return tokens, identity
            profile = await self._userinfo_identity(tokens.access_token, plan.user_info)
            return tokens, UpstreamIdentity(identity.subject, profile.name or identity.name,
                                            profile.email or identity.email)
        if plan.identity_paths is not None:
            return tokens, self._token_identity(tokens, plan.identity_paths)
        if plan.user_info is not None:
            return tokens, await self._userinfo_identity(tokens.access_token, plan.user_info)
        digest = hashlib.sha256(tokens.access_token.encode("utf-8")).hexdigest()[:32]
        return tokens, UpstreamIdentity("tk-" + digest)

    def _token_identity(self, tokens: UpstreamTokens,
                        paths: tuple[str, str | None, str | None]) -> UpstreamIdentity:
        """``identityFromToken``: the user as the token response names them (trusted as the
        TLS connection to the token endpoint is: nothing signs it)."""
        subject_path, name_path, email_path = paths
        subject = first_text(tokens.document, (subject_path,))
        if subject is None:
            raise self._error(f"the token response has no user at {subject_path!r} "
                              "(identityFromToken.subjectPath)")
        return UpstreamIdentity(
            subject, first_text(tokens.document, (name_path,)) if name_path else None,
            first_text(tokens.document, (email_path,)) if email_path else None)

    async def refresh(self, refresh_token: str, *, client_id: str | None = None,
                      scope: str | None = None) -> UpstreamTokens:
        """The refresh_token grant (tokenResponseMapping applies too), as ``client_id``, the
        client that obtained the token (:meth:`credentials_of`), asking for ``scope``, the
        grant's (some providers narrow a refreshed token to a default set without it; never
        the configuration's, which may have changed since the login). A response without a
        refresh_token gives None: the caller keeps the one it has. Any new ID token is passed
        on unchecked, in ``id_token``: the user is known, and a check that failed after the
        provider rotated the refresh token would lose the session."""
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        if scope:
            form["scope"] = scope
        return await self._token_request(form, "refresh token",
                                         await self.credentials_of(client_id))

    # --- identity ------------------------------------------------------------------------------

    async def _id_token_identity(self, tokens: UpstreamTokens, nonce: str) -> UpstreamIdentity:
        if tokens.id_token is None:
            raise self._error("the token response has no id_token (is 'openid' among the "
                              "scopes?)")
        endpoints = await self._get_endpoints()
        assert endpoints.issuer is not None and self._jwks is not None
        try:
            token = parse_jws(tokens.id_token)
            try:
                key = await self._jwks.key_for(token.kid)
            except KeysUnavailable as exc:
                raise self._error(f"the signing keys are unavailable: {exc}") from None
            if key is None:
                raise self._error("the ID token is signed with a key that the provider's JWKS "
                                  "does not hold")
            verify_signature(token, key)
            check_claims(token, issuer=endpoints.issuer, audience=self.plan.client_id,
                         now=time.time(), typs=_ID_TOKEN_TYPS)
        except TokenError as exc:
            raise self._error(f"the ID token was refused: {exc.reason}") from None
        self._check_id_token_bindings(token, tokens.access_token, nonce)
        claims = token.claims
        claim = self.plan.subject_claim if isinstance(self.plan, OIDCProvider) else "sub"
        subject = claims.get(claim)
        if not isinstance(subject, str) or not subject.strip():
            raise self._error(f"the ID token has no {claim} (the claim that names the user) "
                              "or it is not a non-empty string")
        email = claims.get("email")
        return UpstreamIdentity(subject, first_text(claims, ("name",)),
                                email if isinstance(email, str) and email.strip() else None)

    def _check_id_token_bindings(self, token: UnverifiedToken, access_token: str,
                                 nonce: str) -> None:
        """OIDC Core 3.1.3.7: azp, nonce (against replay of another login's ID token), and
        at_hash (3.2.2.9, the access token is the one this ID token was issued with)."""
        claims = token.claims
        azp = claims.get("azp")
        if azp is not None and azp != self.plan.client_id:
            raise self._error("the ID token's azp is not our client id")
        claimed = claims.get("nonce")
        if not isinstance(claimed, str):
            raise self._error("the ID token has no nonce")
        if not hmac.compare_digest(claimed.encode("utf-8"), nonce.encode("utf-8")):
            raise self._error("the ID token's nonce is not the one of this login")
        at_hash = claims.get("at_hash")
        hash_ = _AT_HASH.get(token.alg)
        if at_hash is not None and hash_ is not None:
            digest = hash_(access_token.encode("utf-8")).digest()
            expected = base64url.encode(digest[:len(digest) // 2])
            if not isinstance(at_hash, str) or not hmac.compare_digest(
                    at_hash.encode("utf-8"), expected.encode("ascii")):
                raise self._error("the ID token's at_hash does not match the access token")

    async def _userinfo_identity(self, access_token: str,
                                 info: UserInfoPlan) -> UpstreamIdentity:
        if not _BEARER_SAFE.fullmatch(access_token):
            raise self._error("the access token holds characters that cannot be sent in an "
                              "Authorization header")
        headers = [*self._userinfo_headers, ("authorization", f"Bearer {access_token}")]
        status, document = await self._call("userInfo endpoint", info.http_method,
                                            info.endpoint_url, headers)
        if status != 200:
            error = oauth_error(document, redact=(access_token,))
            raise self._error(f"the userInfo endpoint answered HTTP {status}"
                              + (f": {error[1]}" if error else ""),
                              oauth_error=error[0] if error else None)
        if not isinstance(document, dict):
            raise self._error("the userInfo endpoint's answer is not a JSON object")
        subject = first_text(document, info.subject_fields)
        if subject is None:
            raise self._error("the userInfo response has none of the subject fields "
                              + ", ".join(info.subject_fields))
        return UpstreamIdentity(subject, first_text(document, info.name_fields),
                                first_text(document, info.email_fields))
