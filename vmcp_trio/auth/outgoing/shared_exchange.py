"""The token-exchange cache the replicas share through Redis: one exchange per subject token,
audience and scopes per token lifetime for the whole fleet, not one per replica.

:class:`SharedExchangeCache` is the second level behind each :class:`~.exchange.TokenExchanger`'s
own cache; its one job is that a token exchanged by one replica is reused by the others. Rules it
keeps:

* **What is stored.** Under the connection's prefix, ``exchange:<key>`` where ``<key>`` is the
  exchanger's cache key (a SHA-256 of the subject token, token URL, client id, audience, scopes and
  subject token type: never the token itself), one entry: the exchanged token, its type, when it
  expires and until when it may be reused, as JSON **sealed** (AES-256-GCM,
  :class:`~vmcp_trio.auth.sealer.Sealer` with the ``info`` :data:`EXCHANGE_CACHE_INFO`, so its keys
  are its own) with the Redis key as the context: an entry copied under another key does not open.
  No token is ever stored or logged in clear; an entry that does not open is treated as absent.
* **TTLs.** An entry lives (``PX``) exactly as long as the token may be reused (the exchanger's
  margin before expiry already taken off), and :meth:`SharedExchangeCache.get` also refuses one
  whose reuse time has passed (the replicas' clocks are not Redis's).
* **One exchange for the fleet.** :meth:`SharedExchangeCache.flight` takes the lock
  ``lock:exchange:<key>`` (``SET NX PX``, ``lock_ttl`` seconds, released by compare-and-delete);
  the holder exchanges, stores the token (:meth:`~SharedExchangeCache.put`), then releases the
  lock (shielded and bounded: a cancelled holder frees the others at once too). The others poll
  every ``poll_interval`` seconds (one ``MGET`` of the entry and the lock) until the entry appears
  (they use it) or the lock is gone without one (the holder failed: one of them takes the lock),
  and never longer than ``lock_ttl`` in all: then they exchange themselves. Failures are not
  shared: each replica remembers its own back-off.
* **Redis away.** Any :class:`~vmcp_trio.runtime.redis.StorageUnavailable` makes the cache step
  aside: the exchanger exchanges locally (each replica on its own, as without Redis), one warning
  is logged when the outage begins (not per request) and one line when Redis answers again,
  :attr:`~SharedExchangeCache.fallbacks` counts the exchanges made without the fleet, and Redis
  is not asked again for ``retry_after`` seconds (so a partitioned Redis does not add its
  timeouts to every request). Every command is bounded by the connection's timeouts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import orjson
import trio

from ...runtime.shared_storage import StorageUnavailable, milliseconds
from ..sealer import Sealer, SealingError

if TYPE_CHECKING:  # the Redis client is loaded by whoever makes the connection
    from ...runtime.redis import RedisConnection

__all__ = ["EXCHANGE_CACHE_INFO", "ExchangedToken", "Reusable", "SharedExchangeCache"]

log = logging.getLogger("vmcp.exchange")

EXCHANGE_CACHE_INFO = b"vmcp-trio exchange cache v1"
"""The sealing use of the shared exchange cache (its keys differ from every other use's)."""

T = TypeVar("T")


@dataclass(frozen=True)
class ExchangedToken:
    access_token: str = field(repr=False)
    token_type: str
    expires_at: float


class Reusable(NamedTuple):
    """A token and the time (``time.time()``) until which it may be reused."""

    token: ExchangedToken
    until: float


class SharedExchangeCache:
    def __init__(self, connection: RedisConnection, seal_secrets: Sequence[bytes], *,
                 lock_ttl: float = 5.0, poll_interval: float = 0.05,
                 retry_after: float = 5.0) -> None:
        self.redis = connection
        self.sealer = Sealer(seal_secrets, info=EXCHANGE_CACHE_INFO)
        self.lock_ttl = lock_ttl
        """How long the lock holds, and how long the other replicas wait for its holder."""
        self.poll_interval = poll_interval
        self.retry_after = retry_after
        """During an outage, how long Redis is left alone before it is asked again."""
        self.fallbacks = 0
        """Exchanges made without the fleet because Redis was unavailable (for metrics)."""
        self.hits = 0
        """Tokens answered from Redis (exchanged by another replica, or by this one earlier)."""
        self.on_outcome: Callable[[str], None] | None = None
        """Told ``hit`` or ``fallback`` as they happen (the metrics)."""
        self._retry_at: float | None = None
        """During an outage: when (trio clock) to ask Redis again; None while it answers."""

    def _told(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    # --- the outage ----------------------------------------------------------------------------

    def _skipping(self) -> bool:
        return self._retry_at is not None and trio.current_time() < self._retry_at

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """One bounded Redis call; StorageUnavailable marks (and logs) the outage."""
        try:
            result = await call()
        except StorageUnavailable as exc:
            if self._retry_at is None:
                log.warning("the shared token-exchange cache is unavailable (%s): replicas "
                            "exchange on their own until Redis answers", exc)
            self._retry_at = trio.current_time() + self.retry_after
            raise
        if self._retry_at is not None:
            self._retry_at = None
            log.info("the shared token-exchange cache answers again")
        return result

    async def _do(self, operation: Callable[[Any], Any]) -> Any:
        return await self._call(lambda: self.redis.do(operation))

    # --- entries -------------------------------------------------------------------------------

    def _entry_key(self, key: str) -> str:
        return self.redis.key("exchange", key)

    def _open(self, entry_key: str, sealed: str) -> Reusable | None:
        try:
            fields = orjson.loads(self.sealer.open(sealed, context=entry_key))
            found = Reusable(ExchangedToken(str(fields["access_token"]),
                                            str(fields["token_type"]),
                                            float(fields["expires_at"])),
                             float(fields["reuse_until"]))
        except (SealingError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("a shared token-exchange cache entry does not open: %s",
                        exc if isinstance(exc, SealingError) else type(exc).__name__)
            return None
        if found.until <= time.time():
            return None
        self.hits += 1
        self._told("hit")
        return found

    async def get(self, key: str) -> Reusable | None:
        """The token stored under ``key`` while it may be reused; None when absent, unreadable,
        past its reuse time, or Redis is unavailable."""
        if self._skipping():
            return None
        entry_key = self._entry_key(key)
        try:
            sealed = await self._do(lambda r: r.get(entry_key))
        except StorageUnavailable:
            return None
        return None if sealed is None else self._open(entry_key, sealed)

    async def put(self, key: str, token: ExchangedToken, ttl_seconds: float) -> None:
        """Store ``token`` under ``key`` for ``ttl_seconds`` (until it is no longer reusable);
        nothing when that is not in the future or Redis is unavailable."""
        if ttl_seconds <= 0 or self._skipping():
            return
        entry_key = self._entry_key(key)
        record = {"access_token": token.access_token, "token_type": token.token_type,
                  "expires_at": token.expires_at, "reuse_until": time.time() + ttl_seconds}
        sealed = self.sealer.seal(orjson.dumps(record), context=entry_key)
        with suppress(StorageUnavailable):  # logged by _call; each replica keeps its own
            await self._do(lambda r: r.set(entry_key, sealed, px=milliseconds(ttl_seconds)))

    # --- one exchange for the fleet ------------------------------------------------------------

    @asynccontextmanager
    async def flight(self, key: str) -> AsyncIterator[Reusable | None]:
        """The fleet's single-flight for ``key``. Yields the token another replica stored while
        this one waited (use it), or None: exchange, and :meth:`put` before leaving the block
        (holding the lock when this replica could take it; without it when Redis is
        unavailable, or the holder did not answer within ``lock_ttl``)."""
        name = f"exchange:{key}"
        lock, found = await self._lead_or_wait(key, name)
        try:
            yield found
        finally:
            if lock is not None and not self._skipping():  # else the lock's TTL ends it
                # Shielded (a cancelled holder still frees the others at once), and bounded by
                # the connection's timeouts; when Redis fails here, the lock's TTL ends it.
                with trio.CancelScope(shield=True), suppress(StorageUnavailable):
                    await self._call(lambda: self.redis.release(name, lock))

    async def _lead_or_wait(self, key: str, name: str) -> tuple[str | None, Reusable | None]:
        """``(lock token, None)``: this replica exchanges under the lock; ``(None, token)``:
        another one did; ``(None, None)``: exchange without the lock."""
        if self._skipping():
            self.fallbacks += 1
            self._told("fallback")
            return None, None
        entry_key = self._entry_key(key)
        lock_key = self.redis.key("lock", name)
        deadline = trio.current_time() + self.lock_ttl
        try:
            lock = await self._call(lambda: self.redis.acquire(name, self.lock_ttl))
            while lock is None:
                if trio.current_time() >= deadline:
                    log.debug("the shared token-exchange lock's holder did not answer in %.1f s",
                              self.lock_ttl)
                    return None, None
                await trio.sleep(self.poll_interval)
                sealed, holder = await self._do(lambda r: r.mget([entry_key, lock_key]))
                if sealed is not None:
                    return None, self._open(entry_key, sealed)
                if holder is None:  # the holder left without a token (its exchange failed)
                    lock = await self._call(lambda: self.redis.acquire(name, self.lock_ttl))
        except StorageUnavailable:
            self.fallbacks += 1
            self._told("fallback")
            return None, None
        return lock, None

