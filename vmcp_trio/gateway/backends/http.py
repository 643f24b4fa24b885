"""A backend reached over Streamable HTTP (handshake revisions), as one client session's link.

What it does, in order: ``initialize`` (proposing the newest handshake revision; the backend's
answer decides), ``notifications/initialized``, then a supervised GET stream for the backend's
unrelated messages. Each forwarded request is a POST whose answer is JSON or an SSE stream; on
SSE, messages before the response go to the call's sink. The transport's rules (headers, what
an answer means, resuming a stream) are :mod:`vmcp_trio.protocol.streamable`'s; this link acts
on them:

* ``initialize`` answered 400, 404 or 405: the backend does not speak Streamable HTTP
  (:class:`FallbackToLegacy`: the caller tries the legacy transport).
* The session is gone (404 to our session id: the backend restarted): the link initializes
  again and sends the request once more (it was never processed).
* A response stream that ends before the response is resumed with ``Last-Event-ID`` when the
  backend gave event ids (at most :data:`MAX_RESUME_ATTEMPTS` times, honouring ``retry:``),
  else the call fails.
* Transport errors and timeouts raise :class:`BackendError` naming the backend; a timed-out or
  cancelled call sends ``notifications/cancelled`` to the backend so it can stop work.
* The GET stream is a supervised task: it reconnects with backoff (and ``Last-Event-ID``, after
  the backend's ``retry:``); a backend that has none (405) is not asked again.

Shared sessions (``sessionStorage: redis``): another replica's copy of a client session *joins*
the backend session this link made (:meth:`HttpBackendLink.join`: the session id and what
``initialize`` settled, from the session record), with request ids drawn from a random range of
its own so that two replicas never send the backend the same id in one session. A copy that is
only let go of (:meth:`HttpBackendLink.release`) leaves the backend session alone; the end of
the client session ends it (:meth:`HttpBackendLink.aclose`: DELETE). When the backend forgets
the session and the link initializes again, :attr:`HttpBackendLink.on_new_session` is told, so
the record (and the other replicas) follow.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
from collections.abc import Callable
from typing import Any

import trio

from ...auth.outgoing.strategies import OutgoingRequest
from ...http.client import HttpClient, HttpError, HttpResponse
from ...protocol.jsonrpc import (
    ErrorResponse,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)
from ...protocol.revisions import LATEST_HANDSHAKE, Revision
from ...protocol.sse import SSEParser
from ...protocol.streamable import (
    PostAnswer,
    Resumption,
    Sent,
    StreamAnswer,
    delete_headers,
    media_type,
    post_answer,
    post_headers,
    stream_answer,
    stream_headers,
)
from ...runtime import tracing
from ...runtime.supervisor import Retry, Supervisor
from .base import (
    BackendAuthRequired,
    BackendError,
    BackendTimedOut,
    CredentialHook,
    FallbackToLegacy,
    Sink,
    initialize_params,
    read_initialize,
)
from .replies import HttpLinkFields, consume_sse, read_json_reply

__all__ = ["HttpBackendLink", "Position"]

log = logging.getLogger("vmcp.backend.http")

MAX_RESUME_ATTEMPTS = 3


Position = Callable[[RequestId, str], None]
"""Told a call's backend request id and its response stream's latest event id."""


class _SessionLost(Exception):
    """The backend answered 404 to our session id."""


class HttpBackendLink(HttpLinkFields):
    def __init__(self, name: str, url: str, client: HttpClient, *,
                 session_sink: Sink, credentials: CredentialHook | None = None,
                 timeout: float = 60.0) -> None:
        super().__init__(name, url, client, session_sink=session_sink,
                         credentials=credentials, timeout=timeout)
        self.revision: Revision = LATEST_HANDSHAKE
        self.session_id: str | None = None
        self._ids = itertools.count(1)
        self._client_capabilities: dict[str, Any] = {}
        self._reinit_lock = trio.Lock()
        self._generation = 0
        self._closed = False
        self._listen_stream = Resumption(SSEParser(self.max_event_bytes))
        """The GET stream's place: its last event id and ``retry:`` outlive a reconnect."""
        self._listening = False
        self.on_new_session: Callable[[], None] | None = None
        """Told when the link initialized a new backend session in place of a lost one."""

    # --- setup --------------------------------------------------------------------------------

    async def start(self, supervisor: Supervisor, client_capabilities: dict[str, Any], *,
                    listen: bool = True) -> None:
        """Initialize the backend session and (unless ``listen`` is false) start listening on
        its GET stream."""
        self._client_capabilities = client_capabilities
        try:
            with trio.fail_after(self.timeout):
                await self._initialize()
        except trio.TooSlowError:
            raise BackendError(self.name, f"did not answer initialize within "
                                          f"{self.timeout:g}s") from None
        if listen:
            self.listen(supervisor)

    def listen(self, supervisor: Supervisor) -> None:
        """Listen on the backend session's GET stream (once), for unrelated messages."""
        if not self._listening:
            self._listening = True
            supervisor.start_soon(f"backend {self.name} GET stream", self._listen)

    def join(self, supervisor: Supervisor, client_capabilities: dict[str, Any],
             joined: tuple[str, Revision, dict[str, Any], dict[str, Any], str | None], *,
             listen: bool = False) -> None:
        """Take part in a backend session another replica made: ``joined`` is its session id,
        revision, capabilities, server info and instructions. No request is sent."""
        self._client_capabilities = client_capabilities
        (self.session_id, self.revision, self.server_capabilities, self.server_info,
         self.instructions) = joined
        self._ids = itertools.count(random.randrange(2**32, 2**50))  # noqa: S311 (not a secret)
        self._generation += 1
        if listen:
            self.listen(supervisor)

    async def _initialize(self) -> None:
        self.session_id = None
        params = initialize_params(LATEST_HANDSHAKE.version, self._client_capabilities)
        request_id = next(self._ids)
        reply = await self._exchange(Request(request_id, "initialize", params).to_dict(),
                                     request_id, None, initializing=True)
        assert reply is not None
        (self.revision, self.server_capabilities, self.server_info,
         self.instructions) = read_initialize(self.name, reply)
        self._generation += 1
        await self._exchange(Notification("notifications/initialized").to_dict(), None, None)

    async def _reinitialize(self, seen_generation: int) -> None:
        async with self._reinit_lock:
            if self._generation == seen_generation:  # nobody else did it meanwhile
                log.warning("backend %s lost our session; initializing again", self.name)
                await self._initialize()
                if self.on_new_session is not None:
                    self.on_new_session()

    # --- HTTP exchange -----------------------------------------------------------------------

    async def _headers(self, method: str, transport: list[tuple[str, str]],
                       body: bytes = b"") -> list[tuple[str, str]]:
        """The ``transport`` headers with the credential and the trace context."""
        headers = [*transport,
                   *await self.credentials.headers(OutgoingRequest(method, self.url, transport,
                                                                   body))]
        tracing.inject_headers(headers)
        return headers

    async def _exchange(self, message: dict[str, Any], request_id: RequestId | None,
                        sink: Sink | None, *, initializing: bool = False,
                        on_position: Position | None = None
                        ) -> Response | ErrorResponse | None:
        """POST one message; the response for ``request_id`` (None for notifications)."""
        if initializing:
            sent, session_id, transport = Sent.INITIALIZE, None, post_headers()
        else:
            sent = Sent.NO_REQUEST if request_id is None else Sent.REQUEST
            session_id = self.session_id
            transport = post_headers(self.revision.version, session_id)
        body = encode(message)
        headers = await self._headers("POST", transport, body)
        try:
            async with self.client.stream("POST", self.url, headers=headers,
                                          body=body) as response:
                answer = post_answer(response.status, media_type(response.header(
                    "content-type")), sent, in_session=session_id is not None)
                if answer is PostAnswer.NOT_STREAMABLE:
                    raise FallbackToLegacy(self.name, f"answered initialize with HTTP "
                                                      f"{response.status}")
                if initializing:
                    given = response.header("mcp-session-id")
                    if given is not None:
                        self.session_id = given
                return await self._read_reply(response, answer, request_id, sink, on_position)
        except HttpError as exc:
            raise BackendError(self.name, f"is unreachable: {exc}") from None

    async def _read_reply(self, response: HttpResponse, answer: PostAnswer,
                          request_id: RequestId | None, sink: Sink | None,
                          on_position: Position | None = None
                          ) -> Response | ErrorResponse | None:
        if answer is PostAnswer.SESSION_GONE:
            raise _SessionLost
        if answer is PostAnswer.ACCEPTED:
            return None
        if answer is PostAnswer.UNAUTHORIZED:
            raise BackendAuthRequired(self.name, f"refused the credential (HTTP "
                                                 f"{response.status})")
        if answer is PostAnswer.JSON:
            return await read_json_reply(self.name, response, self.max_body)
        if answer is PostAnswer.STREAM:
            return await self._read_stream(response, request_id, sink or self.session_sink,
                                           on_position)
        if answer is PostAnswer.FAILED:
            raise BackendError(self.name, f"answered HTTP {response.status}")
        raise BackendError(self.name, f"answered with unexpected content type "
                                      f"{media_type(response.header('content-type'))[:60]!r} "
                                      f"(HTTP {response.status})")

    async def _read_stream(self, response: HttpResponse, request_id: RequestId | None,
                           sink: Sink, on_position: Position | None = None
                           ) -> Response | ErrorResponse | None:
        parser = SSEParser(self.max_event_bytes)
        on_event_id = (None if on_position is None or request_id is None
                       else lambda event_id: on_position(request_id, event_id))
        reply = await consume_sse(self.name, response, parser, request_id, sink,
                                  on_event_id=on_event_id)
        if reply is not None or request_id is None:
            return reply
        # The stream ended without our response: resume it if the backend gave event ids.
        return await self._resume_stream(Resumption(parser, max_attempts=MAX_RESUME_ATTEMPTS),
                                         request_id, sink, on_event_id)

    async def _resume_stream(self, resumption: Resumption, request_id: RequestId, sink: Sink,
                             on_event_id: Callable[[str], None] | None
                             ) -> Response | ErrorResponse:
        """GET the rest of a response stream (see :class:`Resumption`) until the response to
        ``request_id``."""
        while True:
            delay = resumption.reconnect()
            if delay is None:
                raise BackendError(self.name, "closed the response stream before answering")
            if delay:
                await trio.sleep(delay)
            headers = await self._headers("GET", stream_headers(
                self.revision.version, self.session_id, resumption.last_event_id))
            try:
                async with self.client.stream("GET", self.url, headers=headers) as resumed:
                    answer = stream_answer(resumed.status,
                                           media_type(resumed.header("content-type")))
                    if answer is not StreamAnswer.OPEN:
                        raise BackendError(self.name, f"refused to resume a response stream "
                                                      f"(HTTP {resumed.status})")
                    reply = await consume_sse(self.name, resumed, resumption.parser,
                                              request_id, sink, on_event_id=on_event_id)
                    if reply is not None:
                        return reply
            except HttpError as exc:
                raise BackendError(self.name, f"is unreachable: {exc}") from None

    async def resume(self, request_id: RequestId, last_event_id: str, sink: Sink, *,
                     on_position: Position | None = None) -> Response | ErrorResponse:
        """The rest of a call another replica began on this backend session (it died): its
        response stream from ``last_event_id``, until the response to ``request_id`` (the
        backend's id). Raises :class:`BackendError`."""
        parser = SSEParser(self.max_event_bytes)
        parser.last_event_id = last_event_id
        on_event_id = (None if on_position is None
                       else lambda event_id: on_position(request_id, event_id))
        try:
            with trio.fail_after(self.timeout):
                return await self._resume_stream(
                    Resumption(parser, max_attempts=MAX_RESUME_ATTEMPTS), request_id, sink,
                    on_event_id)
        except trio.TooSlowError:
            await self._cancel_remote(request_id, "timed out")
            raise BackendTimedOut(self.name, "finish a resumed call", self.timeout) from None

    # --- the link's operations -----------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any] | None,
                   sink: Sink, *, on_position: Position | None = None
                   ) -> Response | ErrorResponse:
        """Forward a request (see :class:`~.base.BackendLink`); ``on_position`` is told the
        backend's request id and the id of each event of its response stream (where another
        replica would resume it)."""
        request_id: RequestId = next(self._ids)
        message = Request(request_id, method, params).to_dict()
        # A scope with a deadline, not trio.fail_after: that wraps one in a generator-based
        # context manager (~1.5 us a call).
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.timeout) as limit:
                for attempt in (1, 2):
                    generation = self._generation
                    try:
                        reply = await self._exchange(message, request_id, sink,
                                                     on_position=on_position)
                    except _SessionLost:
                        if attempt == 2:
                            raise BackendError(self.name, "lost the session again after "
                                                          "initializing") from None
                        await self._reinitialize(generation)
                        continue
                    assert reply is not None
                    return reply
        except trio.Cancelled:
            await self._cancel_remote(request_id, "cancelled by the client")
            raise
        assert limit.cancelled_caught
        await self._cancel_remote(request_id, "timed out")
        raise BackendTimedOut(self.name, f"answer {method}", self.timeout)

    async def _cancel_remote(self, request_id: RequestId, reason: str) -> None:
        with trio.move_on_after(2) as scope:
            scope.shield = True
            with contextlib.suppress(BackendError):
                await self.notify("notifications/cancelled",
                                  {"requestId": request_id, "reason": reason})

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        try:
            await self._exchange(Notification(method, params).to_dict(), None, None)
        except _SessionLost:
            raise BackendError(self.name, "lost the session") from None

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        reply: Response | ErrorResponse
        if isinstance(message, Response):
            reply = Response(request_id, message.result)
        else:
            reply = ErrorResponse(request_id, message.error)
        try:
            await self._exchange(reply.to_dict(), None, None)
        except _SessionLost:
            raise BackendError(self.name, "lost the session") from None

    async def _listen(self) -> None:
        """The GET stream, for the supervisor: open it, deliver what it carries, and raise
        :class:`Retry` when it ends or fails (reconnecting with ``Last-Event-ID`` and the
        backend's ``retry:`` hint, if any); return when the link closed or the backend has no
        GET stream (405)."""
        if self._closed:
            return
        stream = self._listen_stream
        parser = stream.next_connection()
        headers = await self._headers("GET", stream_headers(
            self.revision.version, self.session_id, stream.last_event_id))
        try:
            async with self.client.stream("GET", self.url, headers=headers) as response:
                answer = stream_answer(response.status,
                                       media_type(response.header("content-type")))
                if answer is StreamAnswer.NONE:
                    return
                if answer is StreamAnswer.REFUSED:
                    raise Retry(f"backend {self.name} GET stream: HTTP {response.status}",
                                after=stream.retry_delay)
                await consume_sse(self.name, response, parser, None, self.session_sink)
        except HttpError as exc:
            raise Retry(f"backend {self.name} GET stream failed: {exc}",
                        after=stream.retry_delay) from None
        if not self._closed:
            raise Retry(f"backend {self.name} GET stream ended", after=stream.retry_delay)

    def release(self) -> None:
        """Stop using the link, leaving the backend session to the other replicas' copies."""
        self._closed = True

    async def aclose(self) -> None:
        """End the backend session (DELETE; a 405 or an unreachable backend is fine)."""
        self._closed = True
        if self.session_id is None:
            return
        with trio.move_on_after(2) as scope:
            scope.shield = True
            try:
                headers = await self._headers("DELETE", delete_headers(self.revision.version,
                                                                       self.session_id))
                await self.client.request("DELETE", self.url, headers=headers, limit=65536)
            except HttpError:
                pass
