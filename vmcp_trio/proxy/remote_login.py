"""``--remote-auth``: the proxy's OAuth 2.1 / OIDC login to the remote server, and the access
token it then sends (a :class:`~.credentials.RemoteCredential`).

How the login is found (each step through :mod:`vmcp_trio.auth.oauth`, with its bounded fetches
and SSRF rules). Every URL is fetched over https at public addresses only, unless the
operator's own configuration says the login is local: the target (``--target-uri``) or a
configured issuer or authorization URL is on loopback, or ``--remote-auth-allow-private`` is
given. That allowance is decided once, from the configuration, and never from a URL the remote
or a document names (``resource_metadata``, an issuer, a ``realm``, an endpoint): a public
remote cannot steer the proxy to loopback or private addresses.

1. The authorization server: ``--remote-auth-authorize-url`` + ``--remote-auth-token-url``
   as given; else ``--remote-auth-issuer``'s metadata (RFC 8414 / OIDC); else the remote's own
   401 (the seed's rule 3): its ``WWW-Authenticate`` names ``resource_metadata`` (RFC 9728, whose
   ``resource`` must be the target, compared canonically), whose first authorization server's
   metadata is then read; without it the well-known metadata of the target is tried, and last
   a ``realm`` that is a URL is taken as the issuer (what ToolHive does, and all it does).
   PKCE S256 is always used; a server whose metadata does not offer it is refused.
2. The client: ``--remote-auth-client-id`` with the secret of the first source that has one
   (``client_secret_basic``; none: a public client) or its ``--remote-auth-client-key-file``
   (``private_key_jwt``: each token request carries a fresh assertion signed with it, RFC 7523,
   whose audience is the authorization server's issuer); else, where the authorization server
   says ``client_id_metadata_document_supported``, ``--remote-auth-client-metadata-url`` as the
   client id (a public client whose document, published by the user, names the callback as a
   redirect URI); else the client registered before for this issuer (kept with the tokens);
   else dynamic client registration (RFC 7591, the seed's rule 4:
   ``token_endpoint_auth_method: none``, the callback as redirect URI).
   With ``--remote-auth-client-credentials`` (the forms of these grants without a user are
   :mod:`.own_grants`') there is no user: the token is the client's own,
   from the ``client_credentials`` grant (with ``resource`` and the scopes), asked again when it
   is due (such tokens come without a refresh token). With ``--remote-auth-idp-token-url``
   (enterprise-managed authorization, SEP-990) no browser either: the user's ID token
   (``--remote-auth-id-token-file``, read at each exchange) is exchanged at the identity
   provider (RFC 8693, as ``--remote-auth-idp-client-id``) for an ID-JAG whose audience is the
   remote's authorization server and whose resource is the remote, and the ID-JAG for the
   token (RFC 7523's JWT-bearer grant, as the client). PKCE is not needed there and not
   required of the metadata. With ``--remote-auth-assertion-file`` (workload identity
   federation, SEP-1933) the workload's own JWT (re-read at each request) is the assertion of
   the JWT-bearer grant, as the (public) client. With ``--remote-auth-device-code`` the user
   logs in on another device (:mod:`.device_login`, RFC 8628; a client registered for that
   grant when it must be).
3. The tokens: the ones kept from before (:mod:`.login_store`; a restart does not ask the user
   again), else a login: the authorization URL (``resource``: ``--remote-auth-resource``, else
   the target's canonical URI; ``--remote-auth-scopes``, else with an issuer given the OIDC
   ``openid profile email``, else the challenge's ``scope`` or the metadata's scopes, with
   ``offline_access`` added when the authorization server lists it in ``scopes_supported``, so
   that the login comes with a refresh token (SEP-2207); the scope parameter named
   ``--remote-auth-scope-param-name``; the ``--remote-auth-authorize-param`` parameters after
   the login's own, which they may not replace) is printed on stderr with the time left
   and opened in a browser unless ``--remote-auth-skip-browser``; the callback server
   (:mod:`.callback`) takes the code within ``--remote-auth-timeout``, and the code is exchanged
   with the PKCE verifier, the redirect URI and the resource.

Then, under the supervisor: the access token is refreshed ahead of expiry (a third of its
lifetime before it, at most two minutes, jittered: the authorization server's rule for upstream
tokens), with the same resource; a refresh the server refuses (``invalid_grant``) means a new
login. A 401 from the remote to a request with the current token asks for one refresh
(:meth:`RemoteLogin.rejected`), never a loop. While a login is under way, requests wait for it
(at most as long as it may take: a desktop client's first ``initialize`` simply takes as long as
the user); when there is no token (the login failed or timed out) they get 503 with the reason;
a request that arrives after a failed login starts a new one (the URL is printed again), so a
login is never attempted in a loop nobody watches.
"""

from __future__ import annotations

import hmac
import logging
import random
import secrets
import sys
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import trio

from ..auth.caller import Caller
from ..auth.headers import parse_challenges
from ..auth.oauth.authorize import authorization_url
from ..auth.oauth.discovery import (
    AuthorizationServerMetadata,
    FetchError,
    ResourceMismatch,
    authorization_server_metadata,
    canonical_uri,
    protected_resource_metadata,
)
from ..auth.oauth.pkce import pkce_pair, supports_s256
from ..auth.oauth.registration import RegistrationError, register_client
from ..auth.oauth.tokens import (
    ClientCredentials,
    TokenEndpointError,
    TokenResponse,
    parse_token_response,
    token_request,
)
from ..auth.ssrf import fetch_guard, is_loopback_url
from ..http.client import HttpClient, HttpError
from ..http.serving import ListenError
from ..protocol.revisions import LATEST_HANDSHAKE
from ..protocol.streamable import post_headers
from ..runtime.supervisor import NamedTask, Retry
from .callback import CallbackResult, CallbackServer
from .credentials import LoginPending
from .device_login import DeviceLoginFailed, device_tokens
from .login_store import LoginStore
from .own_grants import GrantFailed, grant_without_user
from .settings import RemoteAuthSettings

__all__ = ["OIDC_DEFAULT_SCOPES", "RemoteLogin"]

log = logging.getLogger("vmcp.proxy")

OIDC_DEFAULT_SCOPES = ("openid", "profile", "email")
OFFLINE_ACCESS = "offline_access"
TOKEN_TIMEOUT = 15.0
"""Seconds for one token request."""
_PROBE = orjson.dumps({"jsonrpc": "2.0", "id": "vmcp-proxy-probe", "method": "initialize",
                       "params": {"protocolVersion": LATEST_HANDSHAKE.version, "capabilities": {},
                                  "clientInfo": {"name": "vmcp-proxy", "version": "1"}}})


class LoginFailed(Exception):
    """The login could not finish; the message says why (never a code or a token)."""


@dataclass(frozen=True)
class _Challenge:
    resource_metadata: str | None = None
    scope: str | None = None
    realm: str | None = None


def _bearer_params(challenge: str | None) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate`` value's Bearer challenge (empty: none)."""
    if not challenge:
        return {}
    try:
        challenges = parse_challenges(challenge)
    except ValueError:
        return {}
    return next((params for scheme, params in challenges if scheme.lower() == "bearer"), {})


def announce(url: str, seconds_left: float, *, open_browser: bool) -> None:
    """Print the authorization URL on stderr with the time left; open it in a browser."""
    print(f"vmcp proxy: log in to the remote server within {seconds_left:.0f}s at:\n  {url}",
          file=sys.stderr, flush=True)
    if open_browser:
        try:
            webbrowser.open(url)
        except webbrowser.Error as exc:
            print(f"vmcp proxy: no browser could be opened ({exc}); open the URL yourself",
                  file=sys.stderr, flush=True)


class RemoteLogin:
    def __init__(self, settings: RemoteAuthSettings, *, target: str, server_name: str,
                 client: HttpClient, store: LoginStore | None,
                 open_url: Callable[[str, float], None] | None = None) -> None:
        self.settings = settings
        self.target = target
        self.server_name = server_name
        self.client = client
        self.store = store
        self.open_url = open_url or (lambda url, left: announce(
            url, left, open_browser=not settings.skip_browser))
        self.resource = settings.resource or canonical_uri(target)
        self.local = settings.allow_private or any(
            url is not None and is_loopback_url(url)
            for url in (target, settings.issuer, settings.authorize_url, settings.token_url))
        """Plain http and private addresses are allowed for this login (decided from the
        configuration alone)."""
        self.metadata: AuthorizationServerMetadata | None = None
        self.credentials: ClientCredentials | None = None
        self.redirect_uri: str | None = None
        self.scopes: tuple[str, ...] = ()
        self.tokens: TokenResponse | None = None
        self.not_required = False
        """The remote answered without asking for a token: nothing to send."""
        self.problem = "the login to the remote server has not finished yet"
        self.logins = 0
        self.refreshes = 0
        self._logging_in = False
        self._discovery_failed = False
        self._requested: tuple[str, ...] = ()
        """The scopes the last login asked for."""
        self._migrating = False
        self._challenge: _Challenge | None = None
        """A 401 a request got when the probe had said no token was needed."""
        self._needed = trio.Event()
        self._wanted = trio.Event()
        """A request needs a token and there is none: start a login."""
        self._refresh_now = trio.Event()
        self._changed = trio.Event()
        """Set (and replaced) at every change of the tokens or of the problem."""

    def supervised(self) -> list[NamedTask]:
        return [("remote login", self.run)]

    # --- the credential ---------------------------------------------------------------------

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        if self.not_required:
            return []
        tokens = self.tokens
        if tokens is not None and not self._expired(tokens):
            return [("authorization", f"Bearer {tokens.access_token}")]
        if tokens is not None:  # expired: the refresher is late (a suspended laptop)
            self._refresh_now.set()
            await self._wait_change(10.0)
            tokens = self.tokens
            if tokens is not None and not self._expired(tokens):
                return [("authorization", f"Bearer {tokens.access_token}")]
        if not self._login_pending() and not self._discovery_failed:
            self._logging_in = True  # the last login failed: this request starts the next
            self._wanted.set()
        if self._login_pending():  # wait for it (bounded by the login's own timeout)
            with trio.move_on_after(self.settings.timeout + TOKEN_TIMEOUT):
                while self._login_pending():
                    await self._changed.wait()
            if self.tokens is not None or self.not_required:
                return await self.headers(caller)
        raise LoginPending(self.problem)

    def not_ready(self) -> str | None:
        """Why a request could not be sent a token now (no login finished yet, or it failed:
        :attr:`problem`), or None (``/readyz``)."""
        tokens = self.tokens
        if self.not_required or (tokens is not None and not self._expired(tokens)):
            return None
        return self.problem

    def _login_pending(self) -> bool:
        """A login is under way (or the first one is about to start)."""
        return self.tokens is None and not self.not_required and (self._logging_in or (
            self.logins == 0 and not self._discovery_failed))

    async def rejected(self, status: int, challenge: str | None) -> bool:
        """The remote refused a request (401, or 403 with its ``WWW-Authenticate``): True when
        a new token is there to send it again with. A 401 asks for one refresh, or, when the
        remote had not asked for a token before, a login (from this challenge); a 403
        ``insufficient_scope`` naming scopes not asked for yet asks for a login with them added
        (step-up). Never twice for the same scopes: no loop."""
        params = _bearer_params(challenge)
        if status == 403:
            needed = tuple((params.get("scope") or "").split())
            if params.get("error") != "insufficient_scope" or set(needed) <= set(
                    self._requested):
                return False
            self.scopes = tuple(dict.fromkeys((*self._requested, *self.scopes, *needed)))
            log.info("remote login: the remote asks for more scopes (%s): logging in again",
                     " ".join(needed)[:200])
            self.problem = "a step-up login to the remote server (more scopes) is under way"
            return await self._login_again()
        before = self.tokens
        if self.not_required:  # the remote asks for a token after all
            self.not_required = False
            self._challenge = _Challenge(params.get("resource_metadata"), params.get("scope"),
                                         params.get("realm"))
            self._needed.set()
            await self._wait_change(self.settings.timeout + TOKEN_TIMEOUT)
            return self.tokens is not None
        if before is None:
            return False
        if await self._moved(params):
            self._challenge = _Challenge(params.get("resource_metadata"), params.get("scope"),
                                         params.get("realm"))
            return await self._login_again()
        self._refresh_now.set()
        await self._wait_change(10.0)
        return self.tokens is not None and self.tokens is not before

    async def _moved(self, params: dict[str, str]) -> bool:
        """Whether the remote's metadata (named by a 401) now names another authorization
        server than the one logged in to (SEP-2352): its client and login are then made
        anew there."""
        metadata_url = params.get("resource_metadata")
        if (metadata_url is None or self.metadata is None or self.settings.issuer
                or self.settings.token_url):
            return False
        try:
            resource = await protected_resource_metadata(
                self.client, self.resource, metadata_url=metadata_url, allow_http=self.local,
                allow_private=self.local)
        except FetchError:
            return False
        if not resource.authorization_servers or (
                resource.authorization_servers[0] == self.metadata.issuer):
            return False
        log.info("remote login: the remote's authorization server is now %s: registering and "
                 "logging in there", resource.authorization_servers[0][:200])
        self._migrating = True
        return True

    async def _login_again(self) -> bool:
        """Drop the token and wait for a new login (bounded)."""
        self._set(None)
        self._logging_in = True
        self._wanted.set()
        self._refresh_now.set()  # the refresher wakes and yields to the login
        with trio.move_on_after(self.settings.timeout + TOKEN_TIMEOUT):
            while self._login_pending():
                await self._changed.wait()
        return self.tokens is not None

    @staticmethod
    def _expired(tokens: TokenResponse) -> bool:
        return tokens.expires_at is not None and tokens.expires_at <= time.time() + 5

    async def _wait_change(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._changed.wait()

    def _set(self, tokens: TokenResponse | None, problem: str | None = None) -> None:
        self.tokens = tokens
        if problem is not None:
            self.problem = problem
        self._changed.set()
        self._changed = trio.Event()

    # --- the supervised task ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Discover, take the kept login or log in, then keep the token fresh; forever."""
        self._logging_in = self._discovery_failed = False  # a restart starts over
        if self._migrating:
            self._migrating = False
            self.metadata = self.credentials = self.redirect_uri = None
            self._logging_in = True  # the requests waiting for it go on waiting
        task_status.started()
        try:
            await self._discover()
        except (FetchError, HttpError, LoginFailed) as exc:
            self._discovery_failed = True
            self._set(None, f"the remote server's authorization server cannot be found: {exc}")
            raise Retry(f"remote login: {self.problem}", level=logging.WARNING) from None
        if self.not_required:
            log.info("remote %s asks for no token: forwarding without one", self.target)
            self._set(None)  # the requests waiting for a login go on without one
            await self._needed.wait()
            raise Retry("remote login: the remote asks for a token after all", after=0.0)
        self._load()
        while True:
            if self.tokens is None:
                await self._login_when_wanted()
                continue
            await self._refresh_when_due()

    async def _login_when_wanted(self) -> None:
        """A login now (at start), or after a failed one when a request asks for a token."""
        if self.logins:
            await self._wanted.wait()
        self._wanted = trio.Event()  # asked for from here on: the next login
        self.logins += 1
        self._logging_in = True
        try:
            tokens = await self._login()
        except LoginFailed as exc:
            self._logging_in = False
            log.warning("remote login: %s", exc)
            self._set(None, f"the login to the remote server failed: {exc} (the next request "
                            "starts a new one)")
            return
        log.info("remote login: logged in to %s", self.target)
        self._logging_in = False
        self._keep(tokens)

    async def _refresh_when_due(self) -> None:
        tokens = self.tokens
        assert tokens is not None
        if tokens.expires_at is not None:
            lifetime = max(tokens.expires_at - time.time(), 0.0)
            margin = min(lifetime / 3, 120.0) * random.uniform(0.9, 1.0)  # noqa: S311 (jitter)
            with trio.move_on_at(trio.current_time() + max(lifetime - margin, 0.0)):
                await self._refresh_now.wait()
        else:
            await self._refresh_now.wait()
        self._refresh_now = trio.Event()
        if self._migrating:  # to another authorization server: discovered anew
            raise Retry("remote login: the authorization server changed", after=0.0)
        if self.tokens is None:  # dropped for a new login (step-up)
            return
        if tokens.refresh_token is None:  # due, or refused by the remote: nothing to refresh with
            self._set(None, "the remote server's token expired: a new one is asked for"
                      if self._no_user else
                            "the remote server's token expired and came without a refresh "
                            "token: log in again")
            self._wanted.set()
            return
        try:
            refreshed = await self._token_grant({"grant_type": "refresh_token",
                                                 "refresh_token": tokens.refresh_token},
                                                "refresh token")
        except TokenEndpointError as exc:
            if exc.oauth_error in ("invalid_grant", "invalid_client", "unauthorized_client"):
                log.warning("remote login: the refresh was refused (%s): logging in again",
                            exc.oauth_error)
                self._set(None, "the remote server's login expired: log in again")
                self._wanted.set()
                return
            self._set(self.tokens, f"refreshing the token failed: {exc}")
            raise Retry(f"remote login: refreshing failed: {exc}") from None
        self.refreshes += 1
        if refreshed.refresh_token is None:  # servers that do not rotate keep the old one
            refreshed = TokenResponse(refreshed.access_token, tokens.refresh_token,
                                      refreshed.expires_at, refreshed.scope,
                                      refreshed.token_type, refreshed.id_token)
        self._keep(refreshed)

    # --- discovery ----------------------------------------------------------------------------

    async def _discover(self) -> None:
        settings = self.settings
        if settings.token_url:  # given: no discovery (alone only for a login without a user)
            self.metadata = AuthorizationServerMetadata(
                issuer=canonical_uri(settings.token_url), authorization_endpoint=(
                    settings.authorize_url or ""), token_endpoint=settings.token_url,
                registration_endpoint=None, code_challenge_methods_supported=("S256",),
                scopes_supported=(), document={})
            self.scopes = settings.scopes or ()
            return
        if settings.issuer:
            metadata = await authorization_server_metadata(
                self.client, settings.issuer, allow_http=self.local, allow_private=self.local)
            self.scopes = settings.scopes if settings.scopes is not None else OIDC_DEFAULT_SCOPES
        else:
            challenge = self._challenge or await self._probe()
            if challenge is None:
                self.not_required = True
                return
            metadata = await self._from_challenge(challenge)
        if not self._no_user and not settings.device_code and not supports_s256(metadata):
            raise LoginFailed(f"the authorization server {metadata.issuer} does not offer PKCE "
                              "S256 (code_challenge_methods_supported): refused")
        if settings.scopes is None and not self._no_user \
                and OFFLINE_ACCESS in metadata.scopes_supported \
                and OFFLINE_ACCESS not in self.scopes:
            self.scopes = (*self.scopes, OFFLINE_ACCESS)  # a refresh token (SEP-2207)
        self.metadata = metadata

    async def _probe(self) -> _Challenge | None:
        """What the remote's 401 says (None: it answered without asking for a token)."""
        try:
            with trio.fail_after(TOKEN_TIMEOUT):
                status, raw_headers, _ = await self.client.request(
                    "POST", self.target, body=_PROBE, limit=1 << 20,
                    headers=post_headers(LATEST_HANDSHAKE.version))
        except trio.TooSlowError:
            raise LoginFailed(f"{self.target} did not answer within "
                              f"{TOKEN_TIMEOUT:g}s") from None
        if status != 401:
            return None
        value = next((v.decode("latin-1") for k, v in raw_headers
                      if k.lower() == b"www-authenticate"), None)
        params = _bearer_params(value)
        return _Challenge(params.get("resource_metadata"), params.get("scope"),
                          params.get("realm"))

    async def _from_challenge(self, challenge: _Challenge) -> AuthorizationServerMetadata:
        settings = self.settings
        issuer: str | None = None
        scopes: tuple[str, ...] = ()
        try:
            resource = await protected_resource_metadata(
                self.client, self.resource, metadata_url=challenge.resource_metadata,
                allow_http=self.local, allow_private=self.local)
            if not resource.authorization_servers:
                raise LoginFailed(f"the protected resource metadata of {self.resource} names "
                                  "no authorization server")
            issuer = resource.authorization_servers[0]
            scopes = resource.scopes_supported
            if settings.resource is None:  # the resource the server names (it covers ours)
                self.resource = resource.resource
        except ResourceMismatch as exc:
            raise LoginFailed(str(exc)) from None
        except FetchError as exc:
            realm = challenge.realm
            if realm and urlsplit(realm).scheme in ("http", "https"):
                log.info("remote login: no protected resource metadata (%s); the realm %s is "
                         "taken as the issuer", exc, realm)
                issuer = realm
            else:  # a 2025-03-26 server: its own origin is the authorization server
                log.info("remote login: no protected resource metadata (%s); the server's "
                         "origin is taken as the authorization server (2025-03-26)", exc)
                return await self._origin_as_issuer(challenge)
        self._choose_scopes(challenge, scopes)
        return await authorization_server_metadata(self.client, issuer, allow_http=self.local,
                                                   allow_private=self.local)

    def _choose_scopes(self, challenge: _Challenge, advertised: tuple[str, ...]) -> None:
        if self.settings.scopes is not None:
            self.scopes = self.settings.scopes
        elif challenge.scope:
            self.scopes = tuple(challenge.scope.split())
        else:
            self.scopes = advertised

    async def _origin_as_issuer(self, challenge: _Challenge) -> AuthorizationServerMetadata:
        """Protocol revision 2025-03-26's discovery: the metadata at the server's origin, else
        its default endpoints ``/authorize``, ``/token`` and ``/register`` there."""
        parts = urlsplit(self.target)
        origin = f"{parts.scheme}://{parts.netloc}"
        self._choose_scopes(challenge, ())
        try:
            return await authorization_server_metadata(self.client, origin,
                                                       allow_http=self.local,
                                                       allow_private=self.local)
        except FetchError as exc:
            log.info("remote login: no metadata at %s (%s): its default endpoints", origin, exc)
        return AuthorizationServerMetadata(
            issuer=origin, authorization_endpoint=f"{origin}/authorize",
            token_endpoint=f"{origin}/token", registration_endpoint=f"{origin}/register",
            code_challenge_methods_supported=("S256",), scopes_supported=(), document={})

    # --- the client and the stored login -----------------------------------------------------

    @property
    def _store_name(self) -> str:
        assert self.metadata is not None
        return f"{canonical_uri(self.target)}\0{self.metadata.issuer}"

    def _load(self) -> None:
        if self.store is None:
            return
        record = self.store.load(self._store_name)
        if record is None:
            return
        client = record.get("client")
        if self.settings.client_id is None and isinstance(client, dict):
            try:
                self.credentials = ClientCredentials(str(client["client_id"]),
                                                     client.get("secret"), client["method"])
                self.redirect_uri = str(client["redirect_uri"])
            except (KeyError, ValueError, TypeError):
                self.credentials = None
        tokens = record.get("tokens")
        if isinstance(tokens, dict) and isinstance(tokens.get("access_token"), str):
            kept = TokenResponse(tokens["access_token"], tokens.get("refresh_token"),
                                 tokens.get("expires_at"), tokens.get("scope"),
                                 tokens.get("token_type"))
            if kept.refresh_token is not None or not self._expired(kept):
                log.info("remote login: using the login kept from before")
                self._set(kept)

    def _keep(self, tokens: TokenResponse) -> None:
        self._set(tokens)
        if self.store is None or self.credentials is None:
            return
        client: dict[str, Any] | None = None
        if self.settings.client_id is None:  # a registered client is kept with its tokens
            client = {"client_id": self.credentials.client_id,
                      "secret": self.credentials.secret, "method": self.credentials.method,
                      "redirect_uri": self.redirect_uri}
        self.store.save(self._store_name, {
            "issuer": self.metadata.issuer if self.metadata else None, "client": client,
            "tokens": {"access_token": tokens.access_token,
                       "refresh_token": tokens.refresh_token, "expires_at": tokens.expires_at,
                       "scope": tokens.scope, "token_type": tokens.token_type}})

    async def _client_for(self, redirect_uri: str, *, device: bool = False
                          ) -> ClientCredentials:
        settings = self.settings
        if settings.client_id is not None:
            secret = settings.client_secret
            self.credentials = ClientCredentials(
                settings.client_id, secret, "private_key_jwt" if settings.client_key else
                "client_secret_basic" if secret else "none", settings.client_key)
            return self.credentials
        assert self.metadata is not None
        if settings.client_metadata_url is not None and self.metadata.document.get(
                "client_id_metadata_document_supported") is True:
            self.credentials = ClientCredentials(settings.client_metadata_url, None, "none")
            return self.credentials
        if self.credentials is not None and self.redirect_uri == redirect_uri:
            return self.credentials
        endpoint = self.metadata.registration_endpoint
        if endpoint is None:
            raise LoginFailed(f"the authorization server {self.metadata.issuer} offers no "
                              "dynamic client registration: give --remote-auth-client-id")
        try:
            registered = await register_client(
                self.client, endpoint, redirect_uris=[redirect_uri] if redirect_uri else [],
                device=device,
                client_name=f"vmcp proxy ({self.server_name})",
                scope=" ".join(self.scopes) or None, allow_http=self.local,
                allow_private=self.local)
        except (RegistrationError, FetchError) as exc:
            raise LoginFailed(f"dynamic client registration failed: {exc}") from None
        log.info("remote login: registered client %s at %s", registered.client_id, endpoint)
        self.redirect_uri = redirect_uri
        # With a secret, the registered method (RFC 7591's default: client_secret_basic).
        method = registered.token_endpoint_auth_method
        self.credentials = ClientCredentials(
            registered.client_id, registered.client_secret,
            "none" if registered.client_secret is None else
            "client_secret_post" if method == "client_secret_post" else "client_secret_basic")
        return self.credentials

    # --- the login and the token requests ------------------------------------------------------

    async def _login(self) -> TokenResponse:
        metadata, settings = self.metadata, self.settings
        assert metadata is not None
        if settings.device_code:  # the user approves on another device
            credentials = await self._client_for("", device=True)

            def show(url: str, user_code: str, seconds_left: float) -> None:
                print(f"vmcp proxy: the code of the remote server's login is {user_code}",
                      file=sys.stderr, flush=True)
                self.open_url(url, seconds_left)
            self.problem = ("the login to the remote server waits for the user: open the URL "
                            "vmcp proxy printed and enter the code")
            try:
                return await device_tokens(self.client, metadata, credentials,
                                           scopes=self.scopes, resource=self.resource,
                                           local=self.local, timeout=settings.timeout,
                                           request_timeout=TOKEN_TIMEOUT, show=show)
            except DeviceLoginFailed as exc:
                raise LoginFailed(str(exc)) from None
        if self._no_user:  # the client's own grant, the workload's or the enterprise's
            await self._client_for("")
            try:
                form, what = await grant_without_user(settings, metadata, self.client,
                                                      scopes=self.scopes, resource=self.resource,
                                                      timeout=TOKEN_TIMEOUT)
                return await self._token_grant(form, what)
            except (TokenEndpointError, GrantFailed) as exc:
                raise LoginFailed(str(exc)) from None
        state = secrets.token_urlsafe(24)
        verifier, challenge = pkce_pair()
        try:
            server = CallbackServer(settings.callback_port, state)
        except ListenError as exc:
            raise LoginFailed(f"the callback server cannot listen: {exc}") from None
        answers: list[CallbackResult] = []
        failure: str | None = None
        redirect_uri = ""
        with trio.move_on_after(settings.timeout) as waited:
            async with trio.open_nursery() as nursery:

                async def callback(*, task_status: trio.TaskStatus[str]) -> None:
                    answers.append(await server.wait(task_status=task_status))

                redirect_uri = await nursery.start(callback)
                try:
                    credentials = await self._client_for(redirect_uri)
                except LoginFailed as exc:
                    failure = str(exc)
                    nursery.cancel_scope.cancel()
                else:
                    url = authorization_url(
                        metadata.authorization_endpoint, client_id=credentials.client_id,
                        redirect_uri=redirect_uri, state=state, code_challenge=challenge,
                        scopes=self.scopes, resource=self.resource,
                        scope_param_name=settings.scope_param_name,
                        extra=settings.authorize_params)
                    self._requested = self.scopes
                    self.problem = ("the login to the remote server waits for the user: open "
                                    "the URL vmcp proxy printed")
                    await trio.to_thread.run_sync(self.open_url, url, settings.timeout,
                                                  abandon_on_cancel=True)
        if failure is not None:
            raise LoginFailed(failure)
        if waited.cancelled_caught or not answers:
            raise LoginFailed(f"no login within {settings.timeout:g}s (--remote-auth-timeout)")
        answer = answers[0]
        if answer.error is not None:
            raise LoginFailed(f"the authorization server refused: {answer.error}")
        iss_promised = metadata.document.get("authorization_response_iss_parameter_supported")
        if (answer.iss is not None or iss_promised) and not hmac.compare_digest(
                (answer.iss or "").encode(), metadata.issuer.encode()):
            raise LoginFailed("the authorization response names another issuer (RFC 9207): "
                              "refused")
        assert answer.code is not None
        try:
            return await self._token_grant({
                "grant_type": "authorization_code", "code": answer.code,
                "redirect_uri": redirect_uri, "code_verifier": verifier}, "authorization code")
        except TokenEndpointError as exc:
            raise LoginFailed(str(exc)) from None

    @property
    def _no_user(self) -> bool:
        """The token comes without a user at a browser: client credentials, or an ID-JAG."""
        return (self.settings.client_credentials or self.settings.idp_token_url is not None
                or self.settings.assertion_file is not None)

    async def _token_grant(self, form: dict[str, str], what: str) -> TokenResponse:
        """A token request with the client and the resource (raises TokenEndpointError)."""
        assert self.metadata is not None and self.credentials is not None
        document = await token_request(
            self.client, self.metadata.token_endpoint, {**form, "resource": self.resource},
            self.credentials, timeout=TOKEN_TIMEOUT, what=what,
            guard=fetch_guard(allow_private=self.local), issuer=self.metadata.issuer)
        return parse_token_response(document, now=time.time())
