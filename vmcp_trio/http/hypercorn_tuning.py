"""hypercorn's keep-alive timer, made cheap: one watcher per connection instead of a task
started per request.

hypercorn serves what the lean HTTP/1.1 server hands it: HTTP/2 (TLS with ALPN ``h2``, h2c) and
WebSocket upgrades. Its connection restarts an idle-timeout task (``nursery.start``, a lock, a
cancel) every time the connection goes idle, that is after every response, and cancels it when
the next request starts. :class:`MovableIdleTask` keeps one watcher per connection and moves its
deadline instead, with the same behaviour: the connection is closed after
``keep_alive_timeout`` idle, or at shutdown once it is idle (never under a request in flight).
The watcher ends when the connection's read loop does: a client that leaves, idle or in the
middle of a request, has its connection closed as soon as its request has ended, rather than
left half-closed until the idle timeout or the shutdown.

Only hypercorn 0.18 is patched (the test suite exercises it); another version is left as it is.
"""

from __future__ import annotations

import logging
import math
from importlib.metadata import version
from typing import Any

import trio
from hypercorn.trio import tcp_server

__all__ = ["MovableIdleTask", "install"]

log = logging.getLogger("vmcp.http")
SUPPORTED = "0.18."


def install() -> bool:
    """Patch hypercorn's connections (once); False when the version is not supported."""
    if tcp_server.TrioSingleTask is MovableIdleTask:  # type: ignore[attr-defined,comparison-overlap]
        return True
    if not version("hypercorn").startswith(SUPPORTED):
        log.info("hypercorn %s: its keep-alive timer is left as it is", version("hypercorn"))
        return False
    tcp_server.TrioSingleTask = MovableIdleTask  # type: ignore[attr-defined,assignment]
    original_read = tcp_server.TCPServer._read_data

    async def read_data(self: Any) -> None:
        try:
            await original_read(self)
        finally:  # the client left (or the connection was closed): the watcher has nothing
            if isinstance(self.idle_task, MovableIdleTask):  # to do, and the connection
                self.idle_task.cancel()  # ends once its requests have ended

    tcp_server.TCPServer._read_data = read_data  # type: ignore[method-assign]
    return True


class MovableIdleTask:
    """Stands in for hypercorn's ``TrioSingleTask`` as a connection's ``idle_task``: the action
    it is given is always the connection's ``_idle_timeout``, so it implements that directly."""

    def __init__(self) -> None:
        self._deadline = math.inf
        self._scope: trio.CancelScope | None = None
        self._restarted: trio.Event | None = None
        self._watching = False
        self._life = trio.CancelScope()

    async def restart(self, task_group: Any, action: Any) -> None:
        server = action.__self__
        self._deadline = trio.current_time() + server.config.keep_alive_timeout
        if self._scope is not None:
            self._scope.deadline = self._deadline
        if self._restarted is not None:
            self._restarted.set()
        if not self._watching:
            self._watching = True
            task_group._nursery.start_soon(self._watch, server)

    async def stop(self) -> None:
        self._deadline = math.inf
        if self._scope is not None:
            self._scope.deadline = math.inf

    def cancel(self) -> None:
        self._life.cancel()

    async def _watch(self, server: Any) -> None:
        with self._life:
            await self._watch_idle(server)
            with trio.CancelScope(shield=True):
                await server._initiate_server_close()

    async def _watch_idle(self, server: Any) -> None:
        terminated = server.context.terminated
        while True:
            if self._deadline == math.inf:  # a request is in flight: never close under it
                self._restarted = trio.Event()
                await self._restarted.wait()
                self._restarted = None
                continue
            with trio.CancelScope(deadline=self._deadline) as scope:
                self._scope = scope
                await terminated.wait()
            self._scope = None
            if self._deadline == math.inf:
                continue
            if terminated.is_set() or trio.current_time() >= self._deadline:
                return
