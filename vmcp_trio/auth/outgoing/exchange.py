"""RFC 8693 token exchange with a cache: one exchange per subject, audience and scopes per
token lifetime, not one per request (ToolHive exchanges on every request).

:class:`TokenExchanger` talks to one ``tokenUrl`` as one client. :meth:`TokenExchanger.exchange`
answers from the cache when it can; concurrent misses for one key share one exchange
(single-flight); an exchanged token is reused until ``margin`` seconds before it expires (a tenth
of its lifetime at most, so short tokens are still reused); a failure is remembered for
``failure_backoff`` seconds only (then tried again), so a broken exchange service is not hammered
and recovers at once. The cache is bounded (LRU) and keyed by a hash of the subject token (the
token is never kept).

With ``shared`` (a :class:`~.shared_exchange.SharedExchangeCache`, Redis), the replicas share
what they exchanged: a local miss asks Redis first, and only then, still inside the local
single-flight (one task per process goes to Redis), joins the fleet's single-flight: the replica
holding the lock exchanges and stores the token (sealed) for the others, which use it when it
appears. So N replicas make one exchange per key per token lifetime, not N. Failures are not
shared (each replica keeps its own back-off), and when Redis is unavailable every replica
exchanges on its own as without it (the shared cache counts and logs that).

The request goes through the one token endpoint client (:mod:`..oauth.tokens`). Client
authentication: ``client_secret_basic`` (RFC 6749 section 2.3.1 encoding), and when the service
answers 401 ``invalid_client`` to that, ``client_secret_post`` (remembered); a client without a
secret names itself in the form; without a client id, none. The answer must be a JSON object
with ``access_token``, ``token_type`` Bearer (case-insensitive; N_A is accepted for
non-access-token types, RFC 8693 section 2.2.1), ``issued_token_type`` and a positive
``expires_in`` (a number, or a string of digits; ``default_lifetime`` when absent or null).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import trio

from ...http.client import HttpClient
from ..oauth.tokens import (
    ClientCredentials,
    TokenEndpointError,
    parse_token_response,
    token_request,
)
from .shared_exchange import ExchangedToken, Reusable, SharedExchangeCache

__all__ = ["ExchangeError", "ExchangedToken", "TokenExchanger"]

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


class ExchangeError(Exception):
    """The exchange failed; the message says why (never a token or the secret)."""


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    result: ExchangedToken | None = None
    error: ExchangeError | None = None


class TokenExchanger:
    def __init__(self, client: HttpClient, *, token_url: str, client_id: str | None,
                 client_secret: str | None, timeout: float = 10.0, max_entries: int = 10_000,
                 margin: float = 30.0, failure_backoff: float = 2.0,
                 default_lifetime: float = 300.0, cache: bool = True,
                 shared: SharedExchangeCache | None = None) -> None:
        self.client = client
        self.token_url = token_url
        self.client_id = client_id
        self.client_secret = client_secret
        self.timeout = timeout
        self.max_entries = max_entries
        self.margin = margin
        self.failure_backoff = failure_backoff
        self.default_lifetime = default_lifetime
        self.cache = cache
        """False: exchange on every request, as ToolHive does (for comparisons only)."""
        self.shared = shared
        """The cache the replicas share (Redis), behind this one; None: this process only."""
        self.use_post = False
        self.exchanges = 0
        """Exchanges made (cache misses that reached the service), for metrics and tests."""
        self._cache: OrderedDict[str, tuple[float, ExchangedToken]] = OrderedDict()
        self._failures: dict[str, tuple[float, ExchangeError]] = {}
        self._flights: dict[str, _Flight] = {}

    def _key(self, subject: str, audience: str, scopes: tuple[str, ...],
             subject_type: str) -> str:
        material = "\0".join((subject, self.token_url, self.client_id or "", audience,
                              " ".join(scopes), subject_type))
        return hashlib.sha256(material.encode()).hexdigest()

    async def exchange(self, subject: str, *, audience: str, scopes: tuple[str, ...] = (),
                       subject_type: str = ACCESS_TOKEN_TYPE) -> ExchangedToken:
        if not self.cache:
            return await self._exchange(subject, audience, scopes, subject_type)
        key = self._key(subject, audience, scopes, subject_type)
        now = time.time()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key)
            return cached[1]
        failed = self._failures.get(key)
        if failed is not None and failed[0] > now:
            raise failed[1]
        flight = self._flights.get(key)
        if flight is not None:
            await flight.done.wait()
            if flight.result is not None:
                return flight.result
            if flight.error is not None:
                raise flight.error
            # The task that led the flight was cancelled: start again (this one may lead).
            return await self.exchange(subject, audience=audience, scopes=scopes,
                                       subject_type=subject_type)
        flight = self._flights[key] = _Flight()
        try:
            token, reuse_until = await self._fetch(key, subject, audience, scopes, subject_type)
        except ExchangeError as exc:
            flight.error = exc
            self._failures[key] = (time.time() + self.failure_backoff, exc)
            if len(self._failures) > self.max_entries:
                self._failures.clear()
            raise
        finally:
            del self._flights[key]
            flight.done.set()
        flight.result = token
        self._failures.pop(key, None)
        self._cache[key] = (reuse_until, token)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return token

    def _reusable(self, token: ExchangedToken) -> Reusable:
        """A fresh token with its reuse time: ``margin`` before it expires, a tenth of its
        lifetime at most."""
        lifetime = token.expires_at - time.time()
        return Reusable(token, token.expires_at - min(self.margin, lifetime / 10))

    async def _fetch(self, key: str, subject: str, audience: str, scopes: tuple[str, ...],
                     subject_type: str) -> Reusable:
        """A local miss: from the replicas' shared cache, else exchanged (once for the fleet)."""
        shared = self.shared
        if shared is None:
            return self._reusable(await self._exchange(subject, audience, scopes, subject_type))
        found = await shared.get(key)
        if found is not None:
            return found
        async with shared.flight(key) as found:
            if found is not None:
                return found
            fresh = self._reusable(await self._exchange(subject, audience, scopes, subject_type))
            await shared.put(key, fresh.token, fresh.until - time.time())
            return fresh

    async def _exchange(self, subject: str, audience: str, scopes: tuple[str, ...],
                        subject_type: str) -> ExchangedToken:
        form = {"grant_type": GRANT, "subject_token": subject,
                "subject_token_type": subject_type, "requested_token_type": ACCESS_TOKEN_TYPE,
                "audience": audience}
        if scopes:
            form["scope"] = " ".join(scopes)
        self.exchanges += 1
        try:
            try:
                document = await self._post(form)
            except TokenEndpointError as exc:
                if (exc.status != 401 or exc.oauth_error != "invalid_client" or self.use_post
                        or self.client_secret is None):
                    raise
                self.use_post = True  # the service wants client_secret_post
                document = await self._post(form)
        except TokenEndpointError as exc:
            raise ExchangeError(f"the token exchange at {self.token_url} failed: {exc}") from None
        return self._read(document)

    def _credentials(self) -> ClientCredentials | None:
        if self.client_id is None:
            return None
        if self.client_secret is None:
            return ClientCredentials(self.client_id, None, "none")
        return ClientCredentials(self.client_id, self.client_secret,
                                 "client_secret_post" if self.use_post else "client_secret_basic")

    async def _post(self, form: dict[str, str]) -> dict[str, Any]:
        return await token_request(self.client, self.token_url, form, self._credentials(),
                                   timeout=self.timeout, what="token exchange")

    def _read(self, document: dict[str, Any]) -> ExchangedToken:
        try:
            response = parse_token_response(document, now=time.time())
        except TokenEndpointError as exc:
            raise ExchangeError(f"the token exchange answer was refused: {exc}") from None
        issued = document.get("issued_token_type")
        if not isinstance(issued, str) or not issued:
            raise ExchangeError("the token exchange answer has no issued_token_type")
        token_type = response.token_type
        if token_type is None or token_type.lower() not in ("bearer", "n_a"):
            raise ExchangeError("the token exchange answer's token_type is not Bearer")
        expires_at = response.expires_at
        if expires_at is None:
            if document.get("expires_in") is not None:  # 0 is not a lifetime here
                raise ExchangeError("the token exchange answer's expires_in is not a positive "
                                    "number")
            expires_at = time.time() + self.default_lifetime
        return ExchangedToken(response.access_token, token_type, expires_at)
