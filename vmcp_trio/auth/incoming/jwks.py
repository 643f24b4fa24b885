"""An issuer's signing keys, kept in memory by a supervised task.

Rules (the design's "hot path with a budget": a request with a warm cache does no I/O):

* :meth:`JwksCache.run` fetches the JWKS at start and again when it expires: ``Cache-Control:
  max-age`` within ``[min_refresh, max_refresh]`` (``no-store``/``no-cache``: ``min_refresh``;
  none: ``default_refresh``). A failed refresh keeps the last good keys (state ``stale``) and is
  retried by the supervisor with exponential backoff and jitter.
* A token naming a kid we do not hold makes :meth:`JwksCache.key_for` refetch (the issuer may
  have rotated its key), but at most once per ``miss_interval``, however many requests ask: a
  flood of random kids costs one fetch, not one per request. Concurrent misses share one fetch.
* When a refresh drops a key, ``on_removed`` is told its thumbprint, so tokens it verified leave
  the verified-token cache at once.

``state``: ``unknown`` (never loaded), ``healthy`` (last fetch worked), ``stale`` (the last fetch
failed; the previous keys still serve). With no keys at all and the issuer down, requests fail
fast with :class:`KeysUnavailable` (503), never hang.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Literal

import trio

from ...http.client import HttpClient
from ...runtime.supervisor import Retry
from ..jwt import JwksError, VerifyKey, load_jwks
from ..oauth.discovery import FetchError, fetch_json
from ..ssrf import UnsafeUrl, check_fetch_url

__all__ = ["JwksCache", "KeysUnavailable"]

log = logging.getLogger("vmcp.auth.jwks")

State = Literal["unknown", "healthy", "stale"]
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d+)", re.IGNORECASE)


class KeysUnavailable(Exception):
    """The issuer's keys could never be loaded (the message says why)."""


class JwksCache:
    def __init__(self, issuer: str, url: Callable[[], Awaitable[str]], client: HttpClient, *,
                 allow_http: bool = False, allow_private: bool = False,
                 min_refresh: float = 60.0, max_refresh: float = 24 * 3600.0,
                 default_refresh: float = 900.0, miss_interval: float = 30.0,
                 fetch_timeout: float = 5.0,
                 headers: Callable[[], list[tuple[str, str]]] = list,
                 private_switch: str | None = None,
                 on_removed: Callable[[str], None] | None = None) -> None:
        self.issuer = issuer
        self._url = url
        self.client = client
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.private_switch = private_switch
        """The setting that allows private addresses, named when one is refused."""
        self.min_refresh = min_refresh
        self.max_refresh = max_refresh
        self.default_refresh = default_refresh
        self.miss_interval = miss_interval
        self.fetch_timeout = fetch_timeout
        self.on_removed = on_removed
        self.headers = headers
        """Extra request headers, read per fetch (a Kubernetes token file rotates)."""
        self.keys: dict[str | None, VerifyKey] = {}
        self.state: State = "unknown"
        self.last_error: str | None = None
        self.fetches = 0
        self._fetching: trio.Event | None = None
        self._last_miss_fetch = -float("inf")
        self._next_refresh = 0.0

    # --- fetching ----------------------------------------------------------------------------

    async def _fetch(self) -> float:
        """One fetch; returns the seconds until the next refresh. Raises FetchError."""
        url = await self._url()
        try:
            guard = check_fetch_url(url, allow_http=self.allow_http,
                                    allow_private=self.allow_private,
                                    switch=self.private_switch)
        except UnsafeUrl as exc:
            raise FetchError(f"the JWKS URL is refused: {exc}") from None
        self.fetches += 1
        status, headers, document = await fetch_json(self.client, url, headers=self.headers(),
                                                     timeout=self.fetch_timeout, guard=guard)
        if status != 200:
            raise FetchError(f"{url[:200]} answered HTTP {status}")
        try:
            keys = load_jwks(document)
        except JwksError as exc:
            raise FetchError(f"{url[:200]} is not a usable JWKS: {exc}") from None
        if not keys:
            raise FetchError(f"{url[:200]} holds no signature key vmcp can use")
        fresh = {key.kid: key for key in keys}
        gone = {key.thumbprint for key in self.keys.values()} - {k.thumbprint for k in keys}
        self.keys = fresh
        self.state, self.last_error = "healthy", None
        if self.on_removed is not None:
            for thumbprint in gone:
                self.on_removed(thumbprint)
        return self._lifetime(headers.get("cache-control", ""))

    def _lifetime(self, cache_control: str) -> float:
        lowered = cache_control.lower()
        if "no-store" in lowered or "no-cache" in lowered:
            return self.min_refresh
        match = _MAX_AGE.search(cache_control)
        if match is None:
            return self.default_refresh
        return min(max(float(match.group(1)), self.min_refresh), self.max_refresh)

    async def refresh(self) -> None:
        """Fetch now, sharing a fetch already under way. Raises FetchError."""
        if self._fetching is not None:
            await self._fetching.wait()
            if self.state != "healthy":
                raise FetchError(self.last_error or "the JWKS fetch failed")
            return
        done = self._fetching = trio.Event()
        try:
            lifetime = await self._fetch()
            self._next_refresh = trio.current_time() + lifetime
        except FetchError as exc:
            self.last_error = str(exc)
            if self.state == "healthy":
                self.state = "stale"
            raise
        finally:
            self._fetching = None
            done.set()

    # --- the supervised task -----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the keys fresh (a supervised task): fetch, report started, wait until they
        expire, again. A failed fetch raises :class:`Retry`: the supervisor tries again with
        backoff while the last good keys keep serving, and reports started after that first
        attempt, so that serving starts with keys when the issuer is up (and without, but
        serving, when it is not)."""
        while True:
            try:
                await self.refresh()
            except FetchError as exc:
                raise Retry(f"{exc} (keeping {len(self.keys)} known keys)",
                            level=logging.WARNING) from None
            task_status.started()
            await trio.sleep(max(self._next_refresh - trio.current_time(), 0.0))

    # --- the hot path ------------------------------------------------------------------------

    async def key_for(self, kid: str | None) -> VerifyKey | None:
        """The key a token names (a kid-less token may use the only key there is). None when
        the issuer does not have it, even after the refetch a miss allows. Raises
        :class:`KeysUnavailable` when no keys were ever loaded and fetching fails."""
        key = self._lookup(kid)
        if key is not None:
            return key
        now = trio.current_time()
        if now - self._last_miss_fetch < self.miss_interval and self._fetching is None:
            if not self.keys:
                raise KeysUnavailable(self.last_error or "the issuer's keys are not loaded")
            return None
        self._last_miss_fetch = now
        try:
            await self.refresh()
        except FetchError as exc:
            if not self.keys:
                raise KeysUnavailable(str(exc)) from None
        return self._lookup(kid)

    def _lookup(self, kid: str | None) -> VerifyKey | None:
        key = self.keys.get(kid)
        if key is None and kid is None and len(self.keys) == 1:
            key = next(iter(self.keys.values()))
        return key
