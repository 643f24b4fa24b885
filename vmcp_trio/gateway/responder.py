"""Answering one MCP request over HTTP: as plain JSON when it is quick, else as an SSE stream.

Both fronts of ``/mcp`` (the handshake revisions and 2026-07-28) answer requests the same way:

* The work writes what relates to the request on an :class:`~.streams.EventStream`: the
  messages the backend sends during the call, then the reply.
* If the stream holds only the reply within ``json_window_seconds``, it goes as one JSON body
  (the common case, and the cheapest). Otherwise the response is SSE: the events so far, then
  each one as it comes, with keep-alive comments while the call is quiet. A handshake session's
  response stream starts with a priming event, so the client can resume it at once.
* Where the work runs: in the HTTP request's own task (no task is started for it: the quick
  path), counted by the session like the rest (:meth:`ClientSession.admit_work`,
  cancelled when the session ends); :meth:`Responder.watch_windows` streams its answer from a
  task of its own when the window closes, or an event besides the reply comes, first (looking
  every :data:`WINDOW_TICK`). While the watcher is not running, the work has a task of the
  session's (:meth:`ClientSession.spawn`) and the request's task waits for the window.
* The client leaving: in the handshake revisions the work goes on (the stream can be resumed
  with ``Last-Event-ID``); in 2026-07-28, closing the response stream cancels the request
  (``cancel_on_close``). A client that leaves before its answer started (within the JSON
  window) is noticed when the window closes and the answer would stream. With shared
  sessions a handshake call answered over SSE is logged (:mod:`.call_log`), so that it can be
  resumed at another replica too.

:meth:`Responder.pump` writes a stream's events to one connection: also the GET stream and the
2026-07-28 listen stream. One connection per stream at a time; a session ending ends them all
(:meth:`~.streams.StreamRegistry.end_followers`). Keep-alive comments are the watcher's: every
quarter of ``keepalive_seconds`` it writes one to each open stream idle that long (or has the
stream's task write it when the connection cannot be written without waiting), and ends any
stream whose session has ended, so that an open stream has no task of its own waiting but the
one that watches its client.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from ..http.asgi import (
    HttpRequest,
    Send,
    StreamWriter,
    open_stream,
    send_json,
    until_client_leaves,
)
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorResponse,
    RequestId,
    Response,
    encode,
    encode_error,
)
from .calls import SessionBusy, SessionClosed
from .session import ClientSession
from .settings import GatewaySettings
from .streams import KEEPALIVE, EventStream, StreamGap

__all__ = ["Compute", "Responder"]

log = logging.getLogger("vmcp.http")

Reply = Response | ErrorResponse | None
Compute = Callable[[EventStream], Awaitable[Reply]]
"""The work of one request: related messages go on the stream it is given; its reply (None
when the client cancelled the request: nothing to say) is returned."""


WINDOW_TICK = 0.05
"""How often :meth:`Responder.watch_windows` looks at the answers it watches."""


def _always_ok(reply: Reply) -> int:
    return 200


async def _work(session: ClientSession, request_id: RequestId, compute: Compute,
                stream: EventStream, replies: list[Response | ErrorResponse]) -> None:
    """Run one request's work: its reply (if any) goes on ``stream``, which then finishes; a
    failure is still an answer (the client must not wait forever)."""
    try:
        reply = await compute(stream)  # None: cancelled (its client left); nothing to say
        if reply is not None:
            replies.append(reply)
            stream.push(encode(reply))
    except Exception as exc:
        log.error("session %s: request %r failed", session.id[:8], request_id, exc_info=exc)
        stream.push(encode_error(INTERNAL_ERROR, "Internal error: the gateway failed to answer "
                                 "this request", request_id))
    finally:
        stream.finish()
        session.services.workload.leave()


class _Window:
    """A request answered in place, whose answer may still become a stream: when its JSON
    window closes first, or when an event other than its reply comes first."""

    __slots__ = ("answered", "deadline", "start_stream", "stream", "streamed")

    def __init__(self, deadline: float, stream: EventStream,
                 start_stream: Callable[[], Awaitable[None]]) -> None:
        self.deadline = deadline
        self.stream = stream
        self.start_stream = start_stream
        self.answered = False
        """The work ended before the window closed: the request's own task answers."""
        self.streamed: trio.Event | None = None
        """Set once the answer has been streamed (by the watcher's task)."""


class _Pumped:
    """An open stream, as the watcher sees it."""

    __slots__ = ("scope", "session", "stream", "writer")

    def __init__(self, writer: StreamWriter, stream: EventStream, session: ClientSession,
                 scope: trio.CancelScope) -> None:
        self.writer = writer
        self.stream = stream
        self.session = session
        self.scope = scope


class Responder:
    def __init__(self, settings: GatewaySettings) -> None:
        self.json_window = settings.json_window_seconds
        self.keepalive = settings.keepalive_seconds
        self.open_streams = 0
        """SSE connections open to clients now."""
        self._pumped: set[_Pumped] = set()
        self._next_keepalive = 0.0
        self._windows: deque[_Window] = deque()
        self._streams: trio.Nursery | None = None
        """Where :meth:`watch_windows` streams the answers whose window closed."""

    async def answer(self, http: HttpRequest, send: Send, session: ClientSession,
                     request_id: RequestId, compute: Compute, *, headers: list[tuple[str, str]],
                     cancel_on_close: bool = False,
                     status: Callable[[Reply], int] = _always_ok) -> None:
        """Run ``compute`` in the session and answer with what it writes (see the module
        docstring). A session that is ending (:class:`~.session.SessionClosed`) or full
        (:class:`~.session.SessionBusy`) raises before anything was sent."""
        stream = session.streams.open()
        if self._streams is not None:
            await self._answer_in_place(http, send, session, request_id, compute, stream,
                                        headers, status, cancel_on_close=cancel_on_close)
            return
        work_scope = trio.CancelScope() if cancel_on_close else None
        replies: list[Response | ErrorResponse] = []
        workload = session.services.workload

        async def work() -> None:
            if work_scope is None:
                await _work(session, request_id, compute, stream, replies)
            else:
                with work_scope:
                    await _work(session, request_id, compute, stream, replies)

        workload.enter()
        try:
            session.spawn(work)
        except (SessionClosed, SessionBusy):
            stream.finish()
            workload.leave()
            raise
        if work_scope is not None:
            if await self._client_left_within_window(http, stream):
                work_scope.cancel()
                return
        else:
            with trio.move_on_after(self.json_window):
                await stream.wait_event()
        payload = stream.only_reply()
        if payload is not None:
            await send_json(send, status(replies[0] if replies else None), payload, headers)
            return
        await self._stream_answer(http, send, session, stream, request_id, headers, work_scope)

    async def _answer_in_place(self, http: HttpRequest, send: Send, session: ClientSession,
                               request_id: RequestId, compute: Compute, stream: EventStream,
                               headers: list[tuple[str, str]],
                               status: Callable[[Reply], int], *,
                               cancel_on_close: bool) -> None:
        """The quick path: the work runs in this task (starting a task for it, and one to
        watch the client, were a tenth of a call's CPU), watched by :meth:`watch_windows`,
        which streams the answer from its own task if the window closes, or an event comes,
        before the reply. With ``cancel_on_close``, the client leaving while its answer streams
        cancels the work; a client that leaves within the window is noticed when it closes."""
        workload = session.services.workload
        work_scope = trio.CancelScope()
        try:
            session.admit_work(work_scope)
        except (SessionClosed, SessionBusy):
            stream.finish()
            raise
        workload.enter()
        window = _Window(trio.current_time() + self.json_window, stream, partial(
            self._stream_answer, http, send, session, stream, request_id, headers,
            work_scope if cancel_on_close else None))
        self._windows.append(window)
        replies: list[Response | ErrorResponse] = []
        try:
            with work_scope:
                await _work(session, request_id, compute, stream, replies)
        finally:
            session.leave_work(work_scope)
        if window.streamed is not None:  # the watcher is streaming it: wait for the end
            await window.streamed.wait()
            return
        window.answered = True
        payload = stream.only_reply()
        if payload is not None:
            await send_json(send, status(replies[0] if replies else None), payload, headers)
            return
        await window.start_stream()

    async def watch_windows(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        """Stream the answers of requests answered in place whose JSON window closed, or whose
        stream has an event besides the reply, each from a task of its own (a supervised task;
        until it runs, requests are answered from a task of the session's). It looks every
        :data:`WINDOW_TICK` seconds: a window closes that much late at most. It also keeps the
        open streams alive (:meth:`_keep_alive`)."""
        try:
            async with trio.open_nursery() as streams:
                self._streams = streams
                task_status.started()
                while True:
                    await trio.sleep(WINDOW_TICK)
                    self._look(streams)
                    now = trio.current_time()
                    if now >= self._next_keepalive:
                        self._next_keepalive = now + self.keepalive / 4
                        self._keep_alive(now)
        finally:
            self._streams = None

    def _keep_alive(self, now: float) -> None:
        """A keep-alive comment on every open stream idle for ``keepalive`` seconds; the end
        of those whose session ended (a stream opened as it ended)."""
        idle_since = now - self.keepalive
        for pumped in self._pumped:
            if pumped.session.closed.is_set():
                pumped.scope.cancel()
            elif pumped.writer.last_write <= idle_since and not pumped.writer.write_now(
                    KEEPALIVE):
                pumped.stream.ask_keepalive()

    def _look(self, streams: trio.Nursery) -> None:
        now = trio.current_time()
        waiting: deque[_Window] = deque()
        for window in self._windows:
            if window.answered:
                continue
            if window.deadline <= now or window.stream.last_seq >= 0 or window.stream.finished:
                window.streamed = trio.Event()
                streams.start_soon(self._stream_window, window)
            else:
                waiting.append(window)
        self._windows = waiting

    @staticmethod
    async def _stream_window(window: _Window) -> None:
        try:
            await window.start_stream()
        except Exception as exc:  # this answer's fault: the others go on
            log.error("streaming an answer failed", exc_info=exc)
        finally:
            assert window.streamed is not None
            window.streamed.set()

    async def _stream_answer(self, http: HttpRequest, send: Send, session: ClientSession,
                             stream: EventStream, request_id: RequestId,
                             headers: list[tuple[str, str]],
                             cancel_on_close: trio.CancelScope | None) -> None:
        """Answer with the request's stream (its events so far, then each as it comes); when
        it ends before the work (the client left), cancel ``cancel_on_close``."""
        if stream.last_seq < 0 and not stream.finished and session.revision.primes_streams:
            stream.prime()  # (a finished empty stream is a cancelled request: nothing to say)
        call_log = session.services.call_log
        if call_log is not None and not session.revision.stateless:
            call_log.start(session.id, stream, request_id)  # another replica may resume it
        await self.pump(http, send, session, stream, -1, headers)
        if cancel_on_close is not None and not stream.finished:
            cancel_on_close.cancel()

    async def _client_left_within_window(self, http: HttpRequest, stream: EventStream) -> bool:
        """Wait up to the JSON window for the stream's first event; True if the client left
        meanwhile (the wait ended with neither)."""
        with trio.move_on_after(self.json_window) as window:
            async with until_client_leaves(http):
                await stream.wait_event()
        return not window.cancelled_caught and stream.last_seq < 0 and not stream.finished

    async def pump(self, http: HttpRequest, send: Send, session: ClientSession,
                   stream: EventStream, after: int, headers: list[tuple[str, str]]) -> None:
        """Write ``stream``'s events after ``after`` until it ends or the client leaves."""
        session.open_connections += 1
        self.open_streams += 1
        try:
            async with open_stream(http, send, headers) as (writer, nursery):
                pumped = _Pumped(writer, stream, session, nursery.cancel_scope)
                self._pumped.add(pumped)
                if session.closed.is_set():
                    nursery.cancel_scope.cancel()
                try:
                    async for event in stream.follow(after, writer, nursery.cancel_scope):
                        await writer.write(event)
                except StreamGap as exc:
                    log.info("session %s: %s", session.id[:8], exc)
                finally:
                    self._pumped.discard(pumped)
        finally:
            session.open_connections -= 1
            self.open_streams -= 1
            session.touch()
