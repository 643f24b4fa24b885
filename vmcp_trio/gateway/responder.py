"""Answering one MCP request over HTTP: as plain JSON when it is quick, else as an SSE stream.

Both fronts of ``/mcp`` (the handshake revisions and 2026-07-28) answer requests the same way:

* The work runs in the client session (:meth:`ClientSession.spawn`), not in the HTTP request,
  and writes what relates to the request on an :class:`~.streams.EventStream`: the messages the
  backend sends during the call, then the reply.
* If the stream holds only the reply within ``json_window_seconds``, it goes as one JSON body
  (the common case, and the cheapest). Otherwise the response is SSE: the events so far, then
  each one as it comes, with keep-alive comments while the call is quiet. A handshake session's
  response stream starts with a priming event, so the client can resume it at once.
* The client leaving: in the handshake revisions the work goes on (the stream can be resumed
  with ``Last-Event-ID``); in 2026-07-28, closing the response stream cancels the request
  (``cancel_on_close``). With shared sessions a handshake call answered over SSE is logged
  (:mod:`.call_log`), so that it can be resumed at another replica too.

:meth:`Responder.pump` writes a stream's events to one connection: also the GET stream and the
2026-07-28 listen stream. One connection per stream at a time; a session ending ends them all.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from ..http.asgi import HttpRequest, Send, open_stream, send_json
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorResponse,
    RequestId,
    Response,
    encode,
    encode_error,
)
from ..protocol.sse import encode_comment
from .calls import SessionBusy, SessionClosed
from .session import ClientSession
from .settings import GatewaySettings
from .streams import EventStream, StreamGap

__all__ = ["Compute", "Responder"]

log = logging.getLogger("vmcp.http")

Reply = Response | ErrorResponse | None
Compute = Callable[[EventStream], Awaitable[Reply]]
"""The work of one request: related messages go on the stream it is given; its reply (None
when the client cancelled the request: nothing to say) is returned."""


def _always_ok(reply: Reply) -> int:
    return 200


class Responder:
    def __init__(self, settings: GatewaySettings) -> None:
        self.json_window = settings.json_window_seconds
        self.keepalive = settings.keepalive_seconds
        self.open_streams = 0
        """SSE connections open to clients now."""

    async def answer(self, http: HttpRequest, send: Send, session: ClientSession,
                     request_id: RequestId, compute: Compute, *, headers: list[tuple[str, str]],
                     cancel_on_close: bool = False,
                     status: Callable[[Reply], int] = _always_ok) -> None:
        """Run ``compute`` in the session and answer with what it writes (see the module
        docstring). A session that is ending (:class:`~.session.SessionClosed`) or full
        (:class:`~.session.SessionBusy`) raises before anything was sent."""
        stream = session.streams.open()
        work_scope = trio.CancelScope() if cancel_on_close else None
        replies: list[Response | ErrorResponse] = []

        workload = session.services.workload

        async def work() -> None:
            try:
                reply = None  # a request cancelled (its client left) has no answer
                if work_scope is None:
                    reply = await compute(stream)
                else:
                    with work_scope:
                        reply = await compute(stream)
                if reply is not None:
                    replies.append(reply)
                    stream.push(encode(reply))
            except Exception as exc:  # still an answer: the client must not wait forever
                log.error("session %s: request %r failed", session.id[:8], request_id,
                          exc_info=exc)
                stream.push(encode_error(INTERNAL_ERROR, "Internal error: the gateway failed "
                                         "to answer this request", request_id))
            finally:
                stream.finish()
                workload.leave()

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
        else:  # the work goes on whatever the client does: nothing to watch (the hot path)
            with trio.move_on_after(self.json_window):
                await stream.wait_event()
        payload = stream.only_reply()
        if payload is not None:
            await send_json(send, status(replies[0] if replies else None), payload, headers)
            return
        if stream.last_seq < 0 and not stream.finished and session.revision.primes_streams:
            stream.prime()  # (a finished empty stream is a cancelled request: nothing to say)
        call_log = session.services.call_log
        if call_log is not None and not session.revision.stateless:
            call_log.start(session.id, stream, request_id)  # another replica may resume it
        await self.pump(http, send, session, stream, -1, headers)
        if work_scope is not None and not stream.finished:
            work_scope.cancel()

    async def _client_left_within_window(self, http: HttpRequest, stream: EventStream) -> bool:
        """Wait up to the JSON window for the stream's first event; True if the client left
        meanwhile."""
        client_left = False
        async with trio.open_nursery() as nursery:

            async def watch_disconnect() -> None:
                nonlocal client_left
                await http.wait_disconnect()
                client_left = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_disconnect)
            with trio.move_on_after(self.json_window):
                await stream.wait_event()
            nursery.cancel_scope.cancel()
        return client_left

    async def pump(self, http: HttpRequest, send: Send, session: ClientSession,
                   stream: EventStream, after: int, headers: list[tuple[str, str]]) -> None:
        """Write ``stream``'s events after ``after`` until it ends or the client leaves."""
        session.open_connections += 1
        self.open_streams += 1
        try:
            async with open_stream(http, send, headers) as (writer, nursery):
                async def keepalive() -> None:
                    while True:
                        await trio.sleep(self.keepalive)
                        if trio.current_time() - writer.last_write >= self.keepalive:
                            await writer.write(encode_comment())

                async def end_with_session() -> None:
                    await session.closed.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(keepalive)
                nursery.start_soon(end_with_session)
                try:
                    async for event in stream.follow(after):
                        await writer.write(event)
                except StreamGap as exc:
                    log.info("session %s: %s", session.id[:8], exc)
        finally:
            session.open_connections -= 1
            self.open_streams -= 1
            session.touch()
