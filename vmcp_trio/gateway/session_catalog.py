"""What one session's client sees: its backends' lists merged, kept, and where each item goes.

:class:`SessionCatalog` builds the session's :class:`~.aggregation.Catalog` from its links and
keeps it until something changes. The rules it keeps:

* The catalog is built once (under a lock: concurrent requests wait for the one build) and kept
  until :meth:`invalidate` (a list_changed, a backend's health, a reload); a build invalidated
  while it ran is used for the request that asked but not kept.
* A catalog built while a backend failed (its listing, or the session's connection to it) is
  rebuilt in the background every :data:`RETRY_FAILED_AFTER` seconds while requests go on with
  it, since no health change may ever come to say the backend is back; when the failures
  change, the client hears that its lists changed (``lists_changed``).
* Every backend is listed in full, page by page (at most :data:`MAX_PAGES` pages of each list);
  a backend whose listing fails is left out with the reason, the others are kept. A backend
  that declares the Skills extension has its ``skills/list`` listed too, and the catalog's
  skills are as fresh as the shortest ``ttlMs`` the backends gave: :meth:`fresh` rebuilds a
  catalog whose skills are older than that (a backend's hint, honoured in the gateway's own
  cache).
* :meth:`route` is the one place a request's method and params lead to a backend
  (:func:`~.routing.route`), from the current catalog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ..protocol.jsonrpc import ErrorResponse
from ..runtime.supervisor import NEVER_RESTART, Supervisor
from .aggregation import BackendListing, Catalog, build_catalog, with_composite_tools
from .backends.base import BackendError, BackendLink, Sink
from .routing import Routed, route
from .session_links import SessionLinks
from .session_services import SessionServices
from .skills import offered_settings

__all__ = ["MAX_PAGES", "RETRY_FAILED_AFTER", "SessionCatalog"]

log = logging.getLogger("vmcp.session")

MAX_PAGES = 50
RETRY_FAILED_AFTER = 2.0
"""Seconds between tries of a backend that failed this session's catalog."""

_LISTINGS = (
    ("tools/list", "tools", "tools", "tools"),
    ("prompts/list", "prompts", "prompts", "prompts"),
    ("resources/list", "resources", "resources", "resources"),
    ("resources/templates/list", "resourceTemplates", "templates", "resources"),
)
"""``(method, result key, listing field, the server capability that offers it)``."""


class SessionCatalog:
    def __init__(self, services: SessionServices, links: SessionLinks, *, owner: str,
                 sink: Callable[[str], Sink], lists_changed: Callable[[], None]) -> None:
        self.services = services
        self.links = links
        self.owner = owner
        self._sink = sink
        self._lists_changed = lists_changed
        self.supervisor: Supervisor | None = None
        """The session's, once it is open (where a failed backend's retry runs)."""
        self._catalog: Catalog | None = None
        self._retry_at = 0.0
        """When a catalog with failures is next rebuilt (trio clock)."""
        self._built_at = 0.0
        """When the kept catalog was built (trio clock)."""
        self._generation = 0
        self._lock: trio.Lock | None = None
        """Held while building (made when first needed: most sessions share a catalog)."""

    @property
    def built(self) -> Catalog | None:
        """The catalog as last built, if it is still current (read by the status page)."""
        return self._catalog

    def invalidate(self) -> None:
        self._generation += 1
        self._catalog = None

    async def get(self) -> Catalog:
        catalog = self._catalog
        if catalog is not None:  # the common case: no lock, no checkpoint
            if catalog.failures and trio.current_time() >= self._retry_at:
                self._retry_at = trio.current_time() + RETRY_FAILED_AFTER
                supervisor = self.supervisor
                if supervisor is not None:
                    supervisor.start_soon("catalog retry", self._retry_failed,
                                          policy=NEVER_RESTART)
            return catalog
        async with self._building():
            if self._catalog is not None:
                return self._catalog
            return await self._build()

    async def fresh(self) -> Catalog:
        """The catalog, rebuilt first when its skills are older than their ``ttlMs``."""
        catalog = await self.get()
        ttl_ms = catalog.skills.ttl_ms
        if ttl_ms is not None and trio.current_time() - self._built_at >= ttl_ms / 1000:
            self.invalidate()
            catalog = await self.get()
        return catalog

    def skills_age(self) -> float:
        """Seconds since the kept catalog's skills were listed."""
        return trio.current_time() - self._built_at

    async def route(self, method: str, params: dict[str, Any], *,
                    not_found_code: int) -> Routed:
        """Where ``method`` with ``params`` goes (raises :class:`~.routing.NotRouted`)."""
        return route(await self.get(), method, params, not_found_code=not_found_code)

    async def _build(self) -> Catalog:
        """List every usable backend (under the lock) and keep the result unless the catalog
        was invalidated meanwhile."""
        generation = self._generation
        listings: list[BackendListing] = []
        failures: dict[str, str] = {}
        async with trio.open_nursery() as nursery:
            for link in self.links.values():
                if not self.services.health.usable(link.name):
                    failures[link.name] = "is unhealthy"
                    continue
                listing = BackendListing(link.name)
                listings.append(listing)
                nursery.start_soon(self._fill, link, listing, failures)
        failures.update(self.links.failed)
        plan = self.services.plan
        catalog = build_catalog(listings, plan.aggregation, failures)
        if plan.composite_tools:
            catalog = with_composite_tools(catalog, plan.composite_tools)
        for conflict in catalog.conflicts:
            log.warning("session %s: %s", self.owner[:8], conflict)
        if generation == self._generation:
            self._catalog = catalog
            self._built_at = trio.current_time()
            self._retry_at = trio.current_time() + RETRY_FAILED_AFTER
        return catalog

    def _building(self) -> trio.Lock:
        if self._lock is None:
            self._lock = trio.Lock()
        return self._lock

    async def _retry_failed(self) -> None:
        async with self._building():
            before = self._catalog
            supervisor = self.supervisor
            if before is None or not before.failures or supervisor is None:
                return
            await self.links.reconnect_failed(supervisor)
            after = await self._build()
        if set(after.failures) != set(before.failures):
            self._lists_changed()

    async def _fill(self, link: BackendLink, listing: BackendListing,
                    failures: dict[str, str]) -> None:
        capabilities = link.server_capabilities
        wanted = [(method, key, target) for method, key, target, capability in _LISTINGS
                  if capability in capabilities]
        skills = offered_settings(capabilities)
        try:
            for method, key, target in wanted:
                getattr(listing, target).extend(await self._list_all(link, method, key))
            if skills is not None:
                facts: dict[str, Any] = {"directoryRead": skills.get("directoryRead") is True}
                listing.skills.extend(await self._list_all(link, "skills/list", "skills",
                                                           facts))
                listing.skill_facts = facts
        except BackendError as exc:
            failures[link.name] = exc.detail
            log.warning("session %s: listing %s failed: %s", self.owner[:8], link.name, exc)

    async def _list_all(self, link: BackendLink, method: str, key: str,
                        facts: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every page of a list; the first page's ``ttlMs`` and ``cacheScope`` into ``facts``
        when given."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor else None
            reply = await link.call(method, params, self._sink(link.name))
            if isinstance(reply, ErrorResponse):
                log.info("session %s: %s %s failed: %s", self.owner[:8], link.name, method,
                         reply.error.message[:200])
                return items
            if facts is not None and cursor is None:
                facts.update({field: reply.result[field] for field in ("ttlMs", "cacheScope")
                              if field in reply.result})
            page = reply.result.get(key)
            if isinstance(page, list):
                items.extend(item for item in page if isinstance(item, dict))
            next_cursor = reply.result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return items
            cursor = next_cursor
        return items
