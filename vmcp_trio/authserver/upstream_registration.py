"""vmcp's registration at an upstream provider that has no client id configured (``dcrConfig``,
RFC 7591), shared by every replica, and the registration each stored token is refreshed with.

Rules kept here:

* One registration per provider and settings. Its *fingerprint* hashes what it was registered
  for: the registration endpoint or discovery URL, the redirect URI, the scopes, ``softwareId``
  and ``softwareStatement``. The storage keeps it (:class:`~.storage.UpstreamClient`, sealed in
  Redis), so a replica or a restart finds it there; one replica registers at a time (the
  storage's lock ``upstream-registration:<provider>``), the others wait for its record, at most
  :data:`REGISTRATION_WAIT`.
* Registered at the first login that needs it, not at startup: a provider down at startup
  does not stop the server. A failure is that login's error (naming the provider and what
  failed, never the initial access token or a secret); the next login tries again.
* A change of the settings (a reload with other scopes) registers anew for new logins. Tokens
  obtained with an older registration go on being refreshed with it (providers bind refresh
  tokens to the client that obtained them: refreshing as the new client is ``invalid_grant``),
  and it is kept for as long as such tokens may be (renewed whenever it is used). A
  registration whose secret expired (``client_secret_expires_at``) is replaced for new logins.
* ``discoveryUrl`` names an RFC 8414 metadata document: its ``registration_endpoint`` (put
  through the SSRF guard, as every URL a document supplies) and its
  ``token_endpoint_auth_methods_supported`` (vmcp asks for ``client_secret_basic``, else
  ``client_secret_post``, else ``none``: a public client with PKCE). With
  ``registrationEndpoint`` vmcp asks for ``client_secret_basic``. The provider's answer decides.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time

import orjson
import trio

from ..auth.oauth.discovery import FetchError, fetch_json
from ..auth.oauth.registration import RegistrationError, register_client
from ..auth.oauth.tokens import ClientAuthMethod, ClientCredentials
from ..http.client import HttpClient
from ..resources.plan import RegistrationPlan
from .storage import Storage, UpstreamClient

__all__ = ["CLIENT_NAME", "REGISTRATION_WAIT", "RegistrationFailed", "UpstreamRegistrar"]

CLIENT_NAME = "vmcp-trio"
REGISTRATION_WAIT = 10.0
"""How long a login waits for another replica's registration before it fails (retryable)."""
LOCK_TTL = 30.0
SECRET_MARGIN = 60.0
"""A secret that expires within this is not used for a new login."""
_PREFERENCE: tuple[ClientAuthMethod, ...] = ("client_secret_basic", "client_secret_post",
                                             "none")


class RegistrationFailed(Exception):
    """Registering vmcp at the provider failed; the message says where and why."""


def _as_credentials(client: UpstreamClient) -> ClientCredentials:
    method: ClientAuthMethod = ("client_secret_post" if client.auth_method == "client_secret_post"
                                else "none" if client.client_secret is None
                                else "client_secret_basic")
    return ClientCredentials(client.client_id, None if method == "none" else client.client_secret,
                             method)


class UpstreamRegistrar:
    def __init__(self, provider: str, plan: RegistrationPlan, *, storage: Storage,
                 client: HttpClient, redirect_uri: str, scopes: tuple[str, ...],
                 keep_for: float, allow_http: bool, allow_private: bool) -> None:
        self.provider = provider
        self.plan = plan
        self.storage = storage
        self.client = client
        self.redirect_uri = redirect_uri
        self.scopes = scopes
        self.keep_for = keep_for
        """How long a registration is kept after its last use (the upstream tokens' keep)."""
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.fingerprint = hashlib.sha256(orjson.dumps([
            plan.registration_endpoint, plan.discovery_url, redirect_uri, sorted(scopes),
            plan.software_id, plan.software_statement])).hexdigest()[:32]
        self._current: UpstreamClient | None = None
        self._lock = trio.Lock()

    def _usable(self, client: UpstreamClient | None) -> bool:
        return client is not None and (client.secret_expires_at is None
                                       or client.secret_expires_at - time.time() > SECRET_MARGIN)

    async def _renewed(self, client: UpstreamClient, *, as_current: bool) -> UpstreamClient:
        """``client``, kept for ``keep_for`` more when half of that has passed."""
        now = time.time()
        if client.kept_until - now >= self.keep_for / 2:
            return client
        renewed = dataclasses.replace(client, kept_until=now + self.keep_for)
        await self.storage.put_upstream_client(renewed, as_current=as_current)
        return renewed

    async def credentials(self) -> ClientCredentials:
        """vmcp's client for new logins: the registration stored for these settings, else a
        new one. Raises :class:`RegistrationFailed` and the storage's ``StorageUnavailable``."""
        return _as_credentials(await self._current_registration())

    async def credentials_for(self, client_id: str) -> ClientCredentials | None:
        """The client ``client_id`` names (the current registration or an older one), or
        None: it is gone."""
        found = await self._registration_of(client_id)
        return None if found is None else _as_credentials(found)

    async def _current_registration(self) -> UpstreamClient:
        if self._current is not None and self._usable(self._current):
            self._current = await self._renewed(self._current, as_current=True)
            return self._current
        async with self._lock:
            found = await self.storage.registered_upstream_client(self.provider,
                                                                  self.fingerprint)
            if not self._usable(found):
                found = await self._register_once()
            assert found is not None
            self._current = await self._renewed(found, as_current=True)
            return self._current

    async def _registration_of(self, client_id: str) -> UpstreamClient | None:
        if self._current is not None and self._current.client_id == client_id:
            return self._current
        found = await self.storage.get_upstream_client(self.provider, client_id)
        if found is None:
            return None
        return await self._renewed(found, as_current=found.fingerprint == self.fingerprint
                                   and self._usable(found))

    async def _register_once(self) -> UpstreamClient:
        """Register, as the one replica holding the lock, or wait for the one that does."""
        lock = f"upstream-registration:{self.provider}"
        token = await self.storage.acquire(lock, LOCK_TTL)
        if token is None:
            with trio.move_on_after(REGISTRATION_WAIT):
                while True:
                    await trio.sleep(0.2)
                    found = await self.storage.registered_upstream_client(self.provider,
                                                                          self.fingerprint)
                    if self._usable(found):
                        assert found is not None
                        return found
            raise RegistrationFailed("another replica is registering vmcp at the provider; "
                                     "try again")
        try:
            found = await self.storage.registered_upstream_client(self.provider,
                                                                  self.fingerprint)
            if self._usable(found):  # registered while we took the lock
                assert found is not None
                return found
            registered = await self._register()
            await self.storage.put_upstream_client(registered, as_current=True)
            return registered
        finally:
            await self.storage.release(lock, token)

    async def _endpoint(self) -> tuple[str, ClientAuthMethod]:
        """The registration endpoint and the client authentication to ask for."""
        if self.plan.registration_endpoint is not None:
            return self.plan.registration_endpoint, "client_secret_basic"
        assert self.plan.discovery_url is not None
        url = self.plan.discovery_url
        try:  # a configured URL (the configuration's rules checked it)
            status, _, document = await fetch_json(self.client, url)
        except FetchError as exc:
            raise RegistrationFailed(f"the metadata could not be fetched: {exc}") from None
        if status != 200 or not isinstance(document, dict):
            raise RegistrationFailed(f"{url[:200]} answered HTTP {status} without a metadata "
                                     "document")
        endpoint = document.get("registration_endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise RegistrationFailed(f"the metadata at {url[:200]} names no "
                                     "registration_endpoint")
        offered = document.get("token_endpoint_auth_methods_supported")
        if not isinstance(offered, list):
            return endpoint, "client_secret_basic"  # RFC 8414's default
        for method in _PREFERENCE:
            if method in offered:
                return endpoint, method
        raise RegistrationFailed(f"the metadata at {url[:200]} offers none of the client "
                                 f"authentication methods vmcp has ({', '.join(_PREFERENCE)})")

    async def _register(self) -> UpstreamClient:
        endpoint, method = await self._endpoint()
        extra = {name: value for name, value in (("software_id", self.plan.software_id),
                                                 ("software_statement",
                                                  self.plan.software_statement)) if value}
        initial = self.plan.initial_access_token
        try:
            token = None if initial is None else initial.value.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise RegistrationFailed("the initial access token is not UTF-8 text") from None
        try:
            registered = await register_client(
                self.client, endpoint, redirect_uris=[self.redirect_uri],
                client_name=CLIENT_NAME, scope=" ".join(self.scopes) or None,
                token_endpoint_auth_method=method, application_type="web",
                initial_access_token=token, extra_metadata=extra,
                allow_http=self.allow_http, allow_private=self.allow_private)
        except RegistrationError as exc:
            raise RegistrationFailed(str(exc)) from None
        expires = registered.document.get("client_secret_expires_at")
        now = time.time()
        return UpstreamClient(
            provider=self.provider, client_id=registered.client_id,
            client_secret=registered.client_secret,
            auth_method=registered.token_endpoint_auth_method,
            fingerprint=self.fingerprint,
            secret_expires_at=float(expires) if isinstance(expires, int | float) and expires > 0
            and not isinstance(expires, bool) else None,
            kept_until=now + self.keep_for)
