"""``vmcp proxy stdio`` to a remote on the legacy HTTP+SSE transport (protocol 2024-11-05).

:class:`LegacySseSession` is the stdio client's session with such a remote. Rules it keeps:

* Used with ``--transport sse``, or (``--transport auto``, the default) when the remote refuses
  the client's ``initialize`` POST with HTTP 400, 404 or 405, the spec's sign of an older
  server (2025-11-25, transports: backwards compatibility). When no SSE stream opens there
  either, the client gets the remote's answer to its ``initialize`` (or an error naming both
  tries).
* The stream: a GET of the target whose first event, ``endpoint``, names where to POST (a URL
  relative to the target, on the target's origin: any other origin is refused, as a peer may
  not send the proxy's credentials elsewhere). Every message of the remote arrives on it as a
  ``message`` event and goes to stdout as it comes.
* Each message of the client is POSTed to the endpoint as it arrives, with the credentials and
  injected headers of ``vmcp proxy`` (a 401 asks a credential once for a new value). A request
  the remote refused (HTTP 300 or more) or that could not be sent is answered at once with an
  error naming the target.
* The stream ends: this transport cannot resume, so each request of the client not answered yet
  gets an error saying so (never silence), the stream is opened again (a supervised task,
  :data:`~vmcp_trio.runtime.supervisor.RECONNECT`) and the client's ``initialize`` and
  ``notifications/initialized`` are replayed there (the replayed answer is not shown), so the
  session goes on. Messages that come while it reconnects wait for it (at most
  :data:`RECONNECT_WAIT` seconds, then an error).
* At most :data:`MAX_PENDING` of the client's requests wait for their answers at once; past
  that a request is answered with an error at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urljoin, urlsplit

import orjson
import trio

from ..http.client import HttpClient, HttpError
from ..protocol.jsonrpc import INTERNAL_ERROR, RequestId, encode_error
from ..protocol.sse import SSEError, SSEParser
from ..protocol.streamable import StreamAnswer, media_type, stream_answer, stream_headers
from ..runtime.supervisor import RECONNECT, Retry, Supervisor, TaskHealth
from .credentials import LoginPending, RemoteCredential, credential_headers, posted
from .refusals import refusal

__all__ = ["MAX_PENDING", "RECONNECT_WAIT", "LegacySseSession"]

log = logging.getLogger("vmcp.proxy")

MAX_PENDING = 4096
"""The client's requests waiting for their answers at once."""
RECONNECT_WAIT = 30.0
"""How long a message waits for the stream to be open again."""
_REPLAY_ID = "vmcp-proxy-reinitialize"


class LegacySseSession:
    def __init__(self, target: str, client: HttpClient, write: Callable[[bytes], Awaitable[None]],
                 *, credentials: Sequence[RemoteCredential] = (),
                 injected: Sequence[tuple[str, str]] = (),
                 max_event_bytes: int = 4 * 1024 * 1024) -> None:
        self.target = target
        self.client = client
        self.write = write
        self.credentials = credentials
        self.injected = injected
        self.max_event_bytes = max_event_bytes
        self.endpoint: str | None = None
        """Where messages are POSTed, while the stream is open."""
        self.failure = ""
        """Why the stream could not be opened, the last time it could not."""
        self._ready = trio.Event()
        self._replayed = trio.Event()
        self._pending: set[RequestId] = set()
        self._initialize: bytes | None = None
        self._initialized: bytes | None = None
        self._background: trio.Nursery | None = None

    async def open(self, supervisor: Supervisor) -> TaskHealth | None:
        """Open the stream as a supervised task: its health, or None (and the task stopped)
        when the first try failed (``failure`` says why)."""
        self._background = supervisor.nursery
        health = await supervisor.start("the remote's SSE stream", self._stream,
                                        policy=RECONNECT)
        if self.endpoint is None:
            health.stop()
            return None
        return health

    # --- the stream ---------------------------------------------------------------------------

    async def _stream(self, *, task_status: trio.TaskStatus[None]) -> None:
        """One GET stream, until it ends (:class:`Retry`, for the supervisor)."""
        parser = SSEParser(self.max_event_bytes)
        opened = False
        try:
            headers = stream_headers() + await credential_headers(self.credentials, None,
                                                                  self.injected)
            async with self.client.stream("GET", self.target, headers=headers) as response:
                answer = stream_answer(response.status, media_type(response.header(
                    "content-type")))
                if answer is not StreamAnswer.OPEN:
                    raise Retry(self._failed(f"no SSE stream at {self.target} (HTTP "
                                             f"{response.status})"))
                async for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        if event.event == "endpoint" and not opened:
                            self.endpoint = self._resolve(event.data)
                            opened = True
                            assert self._background is not None
                            self._background.start_soon(self._replay)
                            task_status.started()
                        elif event.event == "message" and event.data:
                            await self._dispatch(event.data)
        except (HttpError, SSEError, LoginPending) as exc:
            raise Retry(self._failed(f"the SSE stream at {self.target}: {exc}"),
                        reset=opened) from None
        finally:
            self.endpoint = None
            if self._ready.is_set():  # (an unset one is kept: who waits for it still does)
                self._ready = trio.Event()
            await self._lost()
        raise Retry("the remote ended its SSE stream", reset=opened)

    def _failed(self, why: str) -> str:
        self.failure = why
        return why

    def _resolve(self, endpoint: str) -> str:
        url = urljoin(self.target, endpoint.strip())
        if urlsplit(url)[:2] != urlsplit(self.target)[:2]:
            raise Retry(self._failed("the remote named a message endpoint on another origin: "
                                     "refused"))
        return url

    async def _replay(self) -> None:
        """On a stream opened again: the client's handshake once more (the answer not shown),
        then the client's messages go."""
        if self._initialize is not None and self._initialized is not None:  # set up before
            replay = orjson.loads(self._initialize)
            replay["id"] = _REPLAY_ID
            self._replayed = trio.Event()
            if await self._post(orjson.dumps(replay)) is None:
                with trio.move_on_after(RECONNECT_WAIT):
                    await self._replayed.wait()
                if self._initialized is not None:
                    await self._post(self._initialized)
        self._ready.set()

    async def _dispatch(self, data: str) -> None:
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            log.info("the remote sent an event that is not JSON: dropped")
            return
        if isinstance(message, dict) and "method" not in message:
            if message.get("id") == _REPLAY_ID:
                self._replayed.set()
                return
            self._pending.discard(message.get("id"))
        await self.write(data.encode())

    async def _lost(self) -> None:
        """The stream ended: each request still waiting hears so."""
        lost, self._pending = self._pending, set()
        with trio.CancelScope(shield=True):
            for request_id in lost:
                await self.write(encode_error(INTERNAL_ERROR, (
                    f"vmcp proxy: the remote {self.target} ended its SSE stream before "
                    "answering (this transport cannot resume)"), request_id))

    # --- the client's messages ----------------------------------------------------------------

    async def forward(self, line: bytes, message: object) -> None:
        """POST one message of the client to the endpoint (after a reconnection: once the
        stream is open again)."""
        method = message.get("method") if isinstance(message, dict) else None
        request_id = message.get("id") if isinstance(message, dict) and method else None
        if method == "initialize":
            self._initialize = line
        elif method == "notifications/initialized":
            self._initialized = line
        with trio.move_on_after(RECONNECT_WAIT):
            await self._ready.wait()
        why = None
        if self.endpoint is None:
            why = f"its SSE stream is not open ({self.failure or 'reconnecting'})"
        elif request_id is not None and len(self._pending) >= MAX_PENDING:
            why = f"more than {MAX_PENDING} requests wait for its answers"
        else:
            if request_id is not None:
                self._pending.add(request_id)
            why = await self._post(line)
        if why is None:
            return
        log.warning("a message to %s was not delivered: %s", self.target, why)
        if request_id is not None:
            self._pending.discard(request_id)
            await self.write(encode_error(INTERNAL_ERROR, f"vmcp proxy: the remote "
                                                          f"{self.target}: {why}", request_id))

    async def _post(self, line: bytes) -> str | None:
        """POST ``line`` to the endpoint: None when taken, else why not."""
        endpoint = self.endpoint
        if endpoint is None:
            return "its SSE stream ended"
        try:
            async with posted(self.client, endpoint, [("content-type", "application/json")],
                              line, self.credentials, self.injected) as response:
                body = await response.read(65536)
                status, media = response.status, media_type(response.header("content-type"))
        except (HttpError, LoginPending) as exc:
            return f"a message could not be sent: {exc}"
        return f"it refused a message: it {refusal(status, media, body)}" if status >= 300 \
            else None

