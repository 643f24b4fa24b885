"""One client at one token endpoint, and the RFC 8693 token exchange with a cache: one exchange
per subject, audience and scopes per token lifetime, not one per request (ToolHive exchanges on
every request).

:class:`TokenEndpoint` is vmcp as one client of one ``token_url``: it posts a grant's form
through the one token endpoint client (:mod:`..oauth.tokens`) and reads the answer as an
:class:`ExchangedToken`. Every grant of the outgoing strategies goes through it (the RFC 8693
exchange here, the RFC 7523 JWT-bearer grants of :mod:`.delegation`). Client authentication:
``client_secret_basic`` (RFC 6749 section 2.3.1 encoding), and when the service answers 401
``invalid_client`` to that, ``client_secret_post`` (remembered); a client without a secret
names itself in the form; without a client id, none. The answer must be a JSON object with
``access_token``, a ``token_type`` the grant accepts (Bearer, case-insensitive; an exchange
also takes N_A, RFC 8693 section 2.2.1) and a positive ``expires_in`` (a number, or a string of
digits; ``default_lifetime`` when absent or null).

:class:`TokenExchanger` answers from its :class:`~.cache.GrantCache` when it can (reuse until
shortly before expiry, single-flight, brief failure back-off, bounded, keyed by a digest of
the subject token, never the token). An exchange answer must also carry ``issued_token_type``.

With ``shared`` (a :class:`~.shared_exchange.SharedExchangeCache`, Redis), the replicas share
what they exchanged: a local miss asks Redis first, and only then, still inside the local
single-flight (one task per process goes to Redis), joins the fleet's single-flight: the replica
holding the lock exchanges and stores the token (sealed) for the others, which use it when it
appears. So N replicas make one exchange per key per token lifetime, not N. Failures are not
shared (each replica keeps its own back-off), and when Redis is unavailable every replica
exchanges on its own as without it (the shared cache counts and logs that).
"""

from __future__ import annotations

import time
from typing import Any

from ...http.client import HttpClient
from ..oauth.tokens import (
    ACCESS_TOKEN_TYPE,
    TOKEN_EXCHANGE,
    ClientCredentials,
    TokenEndpointError,
    parse_token_response,
    token_request,
)
from .cache import GrantCache, GrantError, grant_key
from .shared_exchange import ExchangedToken, SharedExchangeCache

__all__ = ["ExchangeError", "ExchangedToken", "TokenEndpoint", "TokenExchanger"]



class ExchangeError(GrantError):
    """The exchange failed; the message says why (never a token or the secret)."""


class TokenEndpoint:
    """vmcp as one client of one token endpoint (see the module docstring)."""

    def __init__(self, client: HttpClient, *, token_url: str, client_id: str | None,
                 client_secret: str | None, timeout: float = 10.0,
                 default_lifetime: float = 300.0) -> None:
        self.client = client
        self.token_url = token_url
        self.client_id = client_id
        self.client_secret = client_secret
        self.timeout = timeout
        self.default_lifetime = default_lifetime
        self.use_post = False
        self.requests = 0
        """Grants sent (cache misses that reached the service), for metrics and tests."""

    def _credentials(self) -> ClientCredentials | None:
        if self.client_id is None:
            return None
        if self.client_secret is None:
            return ClientCredentials(self.client_id, None, "none")
        return ClientCredentials(self.client_id, self.client_secret,
                                 "client_secret_post" if self.use_post else "client_secret_basic")

    async def _post(self, form: dict[str, str], what: str) -> dict[str, Any]:
        return await token_request(self.client, self.token_url, form, self._credentials(),
                                   timeout=self.timeout, what=what)

    async def post(self, form: dict[str, str], what: str) -> dict[str, Any]:
        """The JSON answer to one grant; :class:`ExchangeError` naming ``what`` and this
        endpoint when it fails."""
        self.requests += 1
        try:
            try:
                return await self._post(form, what)
            except TokenEndpointError as exc:
                if (exc.status != 401 or exc.oauth_error != "invalid_client" or self.use_post
                        or self.client_secret is None):
                    raise
                self.use_post = True  # the service wants client_secret_post
                return await self._post(form, what)
        except TokenEndpointError as exc:
            raise ExchangeError(f"the {what} at {self.token_url} failed: {exc}") from None

    def read(self, document: dict[str, Any], what: str,
             token_types: tuple[str, ...] = ("Bearer",)) -> ExchangedToken:
        """The token of a successful answer, whose ``token_type`` is one of ``token_types``
        (compared without case)."""
        try:
            response = parse_token_response(document, now=time.time())
        except TokenEndpointError as exc:
            raise ExchangeError(f"the {what} answer was refused: {exc}") from None
        token_type = response.token_type
        if token_type is None or token_type.lower() not in (t.lower() for t in token_types):
            raise ExchangeError(f"the {what} answer's token_type is not "
                                f"{' or '.join(token_types)}")
        expires_at = response.expires_at
        if expires_at is None:
            if document.get("expires_in") is not None:  # 0 is not a lifetime here
                raise ExchangeError(f"the {what} answer's expires_in is not a positive number")
            expires_at = time.time() + self.default_lifetime
        return ExchangedToken(response.access_token, token_type, expires_at)


class TokenExchanger(TokenEndpoint):
    def __init__(self, client: HttpClient, *, token_url: str, client_id: str | None,
                 client_secret: str | None, timeout: float = 10.0, max_entries: int = 10_000,
                 margin: float = 30.0, failure_backoff: float = 2.0,
                 default_lifetime: float = 300.0, cache: bool = True,
                 shared: SharedExchangeCache | None = None) -> None:
        super().__init__(client, token_url=token_url, client_id=client_id,
                         client_secret=client_secret, timeout=timeout,
                         default_lifetime=default_lifetime)
        self.cache = cache
        """False: exchange on every request, as ToolHive does (for comparisons only)."""
        self.shared = shared
        """The cache the replicas share (Redis), behind this one; None: this process only."""
        self.grants: GrantCache[ExchangedToken] = GrantCache(
            max_entries=max_entries, margin=margin, failure_backoff=failure_backoff)

    @property
    def exchanges(self) -> int:
        """Exchanges made (cache misses that reached the service), for metrics and tests."""
        return self.requests

    async def exchange(self, subject: str, *, audience: str, scopes: tuple[str, ...] = (),
                       subject_type: str = ACCESS_TOKEN_TYPE) -> ExchangedToken:
        if not self.cache:
            return await self._exchange(subject, audience, scopes, subject_type)
        key = grant_key(subject, self.token_url, self.client_id or "", audience,
                        " ".join(scopes), subject_type)
        return await self.grants.get(
            key, lambda: self._fetch(key, subject, audience, scopes, subject_type))

    async def _fetch(self, key: str, subject: str, audience: str, scopes: tuple[str, ...],
                     subject_type: str) -> tuple[ExchangedToken, float]:
        """A local miss: from the replicas' shared cache, else exchanged (once for the fleet)."""
        shared = self.shared
        if shared is None:
            token = await self._exchange(subject, audience, scopes, subject_type)
            return token, self.grants.reusable_until(token)
        found = await shared.get(key)
        if found is not None:
            return found
        async with shared.flight(key) as found:
            if found is not None:
                return found
            token = await self._exchange(subject, audience, scopes, subject_type)
            until = self.grants.reusable_until(token)
            await shared.put(key, token, until - time.time())
            return token, until

    async def _exchange(self, subject: str, audience: str, scopes: tuple[str, ...],
                        subject_type: str) -> ExchangedToken:
        form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject,
                "subject_token_type": subject_type, "requested_token_type": ACCESS_TOKEN_TYPE,
                "audience": audience}
        if scopes:
            form["scope"] = " ".join(scopes)
        document = await self.post(form, "token exchange")
        issued = document.get("issued_token_type")
        if not isinstance(issued, str) or not issued:
            raise ExchangeError("the token exchange answer has no issued_token_type")
        return self.read(document, "token exchange", ("Bearer", "N_A"))
