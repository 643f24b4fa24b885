"""The cache of the credentials a strategy obtains for its callers: one grant per key per
credential lifetime, not one per request.

:class:`GrantCache` is the one home of that policy for every strategy that asks a service for a
per-user credential (the RFC 8693 exchange, on-behalf-of, Cross-App Access, AWS STS). Rules it
keeps:

* **Keys are digests.** A key is the SHA-256 of the grant's material (:func:`grant_key`: the
  subject token among them), so the cache never holds a user's token.
* **Reuse until near expiry.** A credential is reused until ``margin`` seconds before it expires,
  a tenth of its lifetime at most (:meth:`GrantCache.reusable`), so short-lived ones are still
  reused and none is sent when about to expire.
* **Single-flight.** Concurrent misses for one key share one request to the service; when the
  task that led it is cancelled, a waiting one starts again.
* **Failures back off briefly.** A refusal is remembered for ``failure_backoff`` seconds only
  (then tried again): a broken service is not hammered, and recovers at once.
* **Bounded.** At most ``max_entries`` credentials (least recently used first out), and as many
  remembered failures.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

import trio

__all__ = ["Expiring", "GrantCache", "GrantError", "grant_key"]


class GrantError(Exception):
    """A credential could not be obtained; the message says why (never a token or a secret)."""


class Expiring(Protocol):
    @property
    def expires_at(self) -> float: ...


T = TypeVar("T", bound=Expiring)


class _Reusable(NamedTuple, Generic[T]):
    value: T
    until: float


@dataclass
class _Flight(Generic[T]):
    done: trio.Event = field(default_factory=trio.Event)
    result: T | None = None
    error: GrantError | None = None


def grant_key(*material: str) -> str:
    """The cache key of a grant: a digest of its material (which may hold a token)."""
    return hashlib.sha256("\0".join(material).encode()).hexdigest()


class GrantCache(Generic[T]):
    def __init__(self, *, max_entries: int = 10_000, margin: float = 30.0,
                 failure_backoff: float = 2.0) -> None:
        self.max_entries = max_entries
        self.margin = margin
        self.failure_backoff = failure_backoff
        self._entries: OrderedDict[str, _Reusable[T]] = OrderedDict()
        self._failures: dict[str, tuple[float, GrantError]] = {}
        self._flights: dict[str, _Flight[T]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def reusable_until(self, value: T) -> float:
        """When ``value`` stops being reused: ``margin`` before it expires, a tenth of its
        lifetime at most."""
        lifetime = value.expires_at - time.time()
        return value.expires_at - min(self.margin, lifetime / 10)

    async def get(self, key: str, fetch: Callable[[], Awaitable[tuple[T, float]]]) -> T:
        """The credential of ``key``: cached, or ``fetch()``-ed (a value and until when it may
        be reused) once for every concurrent caller. Raises :class:`GrantError`."""
        now = time.time()
        cached = self._entries.get(key)
        if cached is not None and cached.until > now:
            self._entries.move_to_end(key)
            return cached.value
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
            return await self.get(key, fetch)  # its leader was cancelled: this one may lead
        flight = self._flights[key] = _Flight()
        try:
            value, until = await fetch()
        except GrantError as exc:
            flight.error = exc
            self._failures[key] = (time.time() + self.failure_backoff, exc)
            if len(self._failures) > self.max_entries:
                self._failures.clear()
            raise
        finally:
            del self._flights[key]
            flight.done.set()
        flight.result = value
        self._failures.pop(key, None)
        self._entries[key] = _Reusable(value, until)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return value
