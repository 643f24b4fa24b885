"""A 2026-07-28 session's listen streams, and what they hold at the backends, on one count.

A 2026-07-28 client has no back-channel but ``subscriptions/listen``: a stream that names what
it wants to hear (list changes, updates of resource URIs, status changes of tasks).
:class:`Subscriptions` keeps a session's listen streams and the rules:

* A notification goes to every stream that asked for it (:meth:`Subscription.wants`), with the
  stream's id in ``_meta`` (:data:`~vmcp_trio.protocol.stateless_requests.SUBSCRIPTION_ID`).
* A resource URI is subscribed at its backend once, whoever many streams want it, and
  unsubscribed when the last of them closes; a task's status is watched at its backend the
  same way. One reference count holds both (keyed ``uri:`` and ``task:``), under one lock, so
  streams opening and closing at once always leave the count right.
* Only what a backend accepted is honoured, and said so in the acknowledgement: a URI no
  backend serves, or whose backend cannot subscribe or whose own policies or webhooks do not
  let the caller read it (a webhook's change to a subscription is not applied: the
  subscription is to the URI the client named; the backend is asked under its own URI, a
  presented ``skill://`` one translated back); a task id this identity was not given, or
  whose backend cannot watch (only a 2026-07-28 link can).
* What a backend says while (un)subscribing belongs to no client call: it goes where its
  unrelated messages go (``sink``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from ..protocol.jsonrpc import (
    ErrorResponse,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)
from ..protocol.stateless_requests import SUBSCRIPTION_ID
from ..protocol.tasks_extension import STATUS_NOTIFICATION
from .backends.base import BackendError, BackendLink, Sink
from .backends.stateless_link import StatelessBackendLink
from .routing import NotRouted
from .session_catalog import SessionCatalog
from .session_links import SessionLinks
from .streams import EventStream
from .task_ids import TaskIds

__all__ = ["Subscription", "Subscriptions"]

log = logging.getLogger("vmcp.session")

RELEASE_WITHIN = 5.0
"""Seconds a closing stream has to release what it held at the backends."""


@dataclass(frozen=True)
class Subscription:
    """One listen stream and what it was granted."""

    id: RequestId
    stream: EventStream
    methods: frozenset[str]
    uris: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    """The watched tasks, by the ids the client sees."""

    def wants(self, message: Notification) -> bool:
        if message.method == "notifications/resources/updated":
            uri = (message.params or {}).get("uri")
            return isinstance(uri, str) and uri in self.uris
        if message.method == STATUS_NOTIFICATION:
            return (message.params or {}).get("taskId") in self.task_ids
        return message.method in self.methods


class Subscriptions:
    def __init__(self, links: SessionLinks, catalog: SessionCatalog, task_ids: TaskIds, *,
                 owner: str, identity: tuple[str, str], sink: Callable[[str], Sink],
                 not_found_code: int) -> None:
        self.links = links
        self.catalog = catalog
        self.task_ids = task_ids
        self.owner = owner
        self.identity = identity
        self._sink = sink
        self._not_found_code = not_found_code
        self._streams: list[Subscription] = []
        self._holders: dict[str, int] = {}
        """Listen streams holding each ``uri:<uri>`` and ``task:<id the client sees>``."""
        self._lock = trio.Lock()

    def publish(self, message: Notification) -> None:
        for subscription in self._streams:
            if subscription.wants(message):
                params = dict(message.params or {})
                meta = params.get("_meta")
                params["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                                   SUBSCRIPTION_ID: subscription.id}
                subscription.stream.push(encode(Notification(message.method, params)))

    @asynccontextmanager
    async def listen(self, subscription_id: RequestId, stream: EventStream,
                     methods: frozenset[str], uris: list[str],
                     task_ids: list[str]) -> AsyncIterator[Subscription]:
        """A listen stream for the block, holding what the backends granted of ``uris`` and
        ``task_ids``; released when it closes."""
        async with self._lock:
            granted = Subscription(subscription_id, stream, methods,
                                   tuple(await self._hold_uris(uris)),
                                   tuple(await self._hold_tasks(task_ids)))
        self._streams.append(granted)
        try:
            yield granted
        finally:
            self._streams.remove(granted)
            with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_WITHIN):
                async with self._lock:
                    await self._release_uris(granted.uris)
                    await self._release_tasks(granted.task_ids)

    def _take(self, key: str) -> bool:
        """One more holder of ``key`` if it is held already."""
        if self._holders.get(key):
            self._holders[key] += 1
            return True
        return False

    def _let_go(self, key: str) -> bool:
        """One holder fewer of ``key``; True when it was the last."""
        holders = self._holders.get(key, 0) - 1
        if holders > 0:
            self._holders[key] = holders
            return False
        self._holders.pop(key, None)
        return True

    async def _hold_uris(self, uris: Iterable[str]) -> list[str]:
        honored = []
        for uri in dict.fromkeys(uris):
            if self._take(f"uri:{uri}"):
                honored.append(uri)
                continue
            found = await self._resource_link(uri)
            if found is None:
                continue
            link, own = found
            if not link.server_capabilities.get("resources", {}).get(
                    "subscribe") or isinstance(await self.links.admitted(
                    link.name, Request(0, "resources/subscribe", {"uri": own}),
                    {"uri": own}), ErrorResponse):
                continue
            try:
                reply = await link.call("resources/subscribe", {"uri": own},
                                        self._sink(link.name))
            except BackendError as exc:
                log.info("session %s: %s", self.owner[:8], exc)
                continue
            if isinstance(reply, Response):
                self._holders[f"uri:{uri}"] = 1
                honored.append(uri)
        return honored

    async def _release_uris(self, uris: Iterable[str]) -> None:
        for uri in uris:
            if not self._let_go(f"uri:{uri}"):
                continue
            found = await self._resource_link(uri)
            if found is not None:
                link, own = found
                try:
                    await link.call("resources/unsubscribe", {"uri": own},
                                    self._sink(link.name))
                except BackendError as exc:
                    log.info("session %s: %s", self.owner[:8], exc)

    async def _resource_link(self, uri: str) -> tuple[BackendLink, str] | None:
        """The link to the backend serving ``uri``, and the URI it knows it by."""
        try:
            routed = await self.catalog.route("resources/subscribe", {"uri": uri},
                                              not_found_code=self._not_found_code)
        except NotRouted:
            return None
        link = self.links.get(routed.backend)
        return None if link is None else (link, routed.params["uri"])

    async def _hold_tasks(self, task_ids: Iterable[str]) -> list[str]:
        """Ask the backends whose tasks these are (by the ids the client sees) to announce
        their status changes; the ids that will be announced. An id this identity was not
        given is not (as ``tasks/get`` would not know it)."""
        honored: list[str] = []
        asked: dict[str, dict[str, str]] = {}
        for sealed in dict.fromkeys(task_ids):
            if self._take(f"task:{sealed}"):
                honored.append(sealed)
                continue
            opened = self.task_ids.open(self.identity, sealed)
            if opened is not None:
                asked.setdefault(opened[0], {})[opened[1]] = sealed
        for backend, sealed_by_id in asked.items():
            link = self.links.get(backend)
            if not isinstance(link, StatelessBackendLink):
                continue
            for task_id in await link.watch_tasks(sealed_by_id.keys(), True):
                self._holders[f"task:{sealed_by_id[task_id]}"] = 1
                honored.append(sealed_by_id[task_id])
        return honored

    async def _release_tasks(self, task_ids: Iterable[str]) -> None:
        released: dict[str, list[str]] = {}
        for sealed in task_ids:
            if not self._let_go(f"task:{sealed}"):
                continue
            opened = self.task_ids.open(self.identity, sealed)
            if opened is not None:
                released.setdefault(opened[0], []).append(opened[1])
        for backend, backend_ids in released.items():
            link = self.links.get(backend)
            if isinstance(link, StatelessBackendLink):
                await link.watch_tasks(backend_ids, False)
