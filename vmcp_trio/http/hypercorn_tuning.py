"""Two costs removed from hypercorn's HTTP/1.1 path: three writes per response, and a task
started per request for the keep-alive timer.

**Writes.**
hypercorn's HTTP/1.1 protocol writes the status line and headers, then each body chunk, then
the end of the message, each as its own ``send_all`` (a syscall, a lock, a cancel scope and a
trio checkpoint). For the gateway's typical reply (headers and one JSON body) that was a fifth of
its CPU per call (bench/gateway_overhead.py). :func:`install` makes the headers wait for the
first body chunk (or the end of the message) and skips the empty write of a Content-Length
response's end, so a JSON reply is one write.

An event stream (``Content-Type: text/event-stream``) is the exception: its headers go out at
once. A client waits for them to know its stream is open (many wait before they send anything
else), and a forwarded stream's first event may come much later, or only once the client goes
on (``vmcp proxy`` and the tunnel relay forward a remote's standalone GET stream as it is).

**Keep-alive timer.** hypercorn's connection restarts an idle-timeout task (``nursery.start``,
a lock, a cancel) every time the connection goes idle, that is after every response, and cancels
it when the next request starts. :class:`MovableIdleTask` keeps one watcher per connection and
moves its deadline instead, with the same behaviour: the connection is closed after
``keep_alive_timeout`` idle, or at shutdown once it is idle (never under a request in flight).
The watcher ends when the connection's read loop does: a client that leaves, idle or in the
middle of a request, has its connection closed as soon as its request has ended, rather than
left half-closed until the idle timeout or the shutdown.

Only hypercorn 0.18 is patched (the test suite exercises both); another version is left as it is.
"""

from __future__ import annotations

import logging
import math
from importlib.metadata import version
from itertools import chain
from typing import Any

import h11
import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import Body, EndBody, Response
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio import tcp_server

from .asgi import is_event_stream

__all__ = ["MovableIdleTask", "install"]

log = logging.getLogger("vmcp.http")
SUPPORTED = "0.18."


def install() -> bool:
    """Patch hypercorn's HTTP/1.1 protocol (once); False when the version is not supported."""
    if getattr(H11Protocol, "_vmcp_coalescing", False):
        return True
    if not version("hypercorn").startswith(SUPPORTED):
        log.info("hypercorn %s: response writes not coalesced", version("hypercorn"))
        return False
    original = H11Protocol.stream_send

    def encode(self: Any, event: h11.Response | h11.Data | h11.EndOfMessage) -> bytes:
        try:
            return self.connection.send(event) or b""
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            return b""

    async def stream_send(self: Any, event: Any) -> None:
        pending: bytes = getattr(self, "_vmcp_pending", b"")
        if isinstance(event, Response) and event.status_code >= 200:
            headers = list(chain(event.headers, self.config.response_headers("h11")))
            if self.keep_alive_requests >= self.config.keep_alive_max_requests:
                headers.append((b"connection", b"close"))
            head = pending + encode(
                self, h11.Response(headers=headers, status_code=event.status_code))
            if is_event_stream(event.headers):
                self._vmcp_pending = b""
                await self.send(RawData(data=head))
            else:
                self._vmcp_pending = head
            return
        if isinstance(event, Body | EndBody):
            data = encode(self, h11.Data(data=event.data) if isinstance(event, Body)
                          else h11.EndOfMessage())
            self._vmcp_pending = b""
            if pending or data:
                await self.send(RawData(data=pending + data))
            return
        if pending:
            self._vmcp_pending = b""
            await self.send(RawData(data=pending))
        await original(self, event)

    H11Protocol.stream_send = stream_send  # type: ignore[method-assign]
    H11Protocol._vmcp_coalescing = True  # type: ignore[attr-defined]
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
