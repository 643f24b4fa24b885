"""A backend on the legacy HTTP+SSE transport (protocol 2024-11-05), as one session's link.

The transport: GET the SSE URL and keep the stream open; its first event, ``endpoint``, names
the URL to POST messages to (relative to the SSE URL); every message from the server, responses
included, arrives on that stream as a ``message`` event. vmcp uses it when an MCPServer says
``transport: sse``, and when a Streamable HTTP backend answers ``initialize`` with 400, 404 or
405, which is when the spec (2025-11-25) says a client falls back to it.

Nothing on the stream says which request a message concerns, except progress tokens. Since a
link serves one client session, messages go to the call in flight when there is exactly one,
else to the session's standalone stream. A stream that ends loses the backend session (this
transport cannot resume): pending calls fail, and the next call connects and initializes again.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any
from urllib.parse import urljoin, urlsplit

import trio

from ...auth.outgoing.strategies import OutgoingRequest
from ...http.client import HttpClient, HttpError
from ...protocol.jsonrpc import (
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)
from ...protocol.revisions import REVISIONS, Revision
from ...protocol.sse import SSEError, SSEParser
from ...protocol.streamable import StreamAnswer, media_type, stream_answer, stream_headers
from ...runtime import tracing
from .base import (
    BackendError,
    BackendTimedOut,
    CredentialHook,
    Sink,
    initialize_params,
    read_initialize,
)
from .pending import PendingCall, PendingCalls
from .replies import HttpLinkFields

__all__ = ["LegacySseBackendLink"]

log = logging.getLogger("vmcp.backend.sse")

LEGACY_VERSION = "2024-11-05"


class LegacySseBackendLink(HttpLinkFields):
    def __init__(self, name: str, url: str, client: HttpClient, *, session_sink: Sink,
                 credentials: CredentialHook | None = None, timeout: float = 60.0) -> None:
        super().__init__(name, url, client, session_sink=session_sink,
                         credentials=credentials, timeout=timeout)
        self._revision: Revision | None = None
        self._endpoint: str | None = None
        self._ids = itertools.count(1)
        self._calls = PendingCalls(name)
        self._client_capabilities: dict[str, Any] = {}
        self._nursery: trio.Nursery | None = None
        self._stream_scope: trio.CancelScope | None = None
        self._connect_lock = trio.Lock()

    @property
    def revision(self) -> Revision:
        """The handshake revision the backend answered (2024-11-05 is served as 2025-03-26,
        the oldest we speak: the message formats are the same)."""
        return self._revision or REVISIONS[0]

    async def start(self, nursery: trio.Nursery, client_capabilities: dict[str, Any]) -> None:
        self._nursery = nursery
        self._client_capabilities = client_capabilities
        await self._connect()

    async def _connect(self) -> None:
        async with self._connect_lock:
            if self._endpoint is not None:
                return
            assert self._nursery is not None
            try:
                with trio.fail_after(self.timeout):
                    await self._nursery.start(self._read_stream)
                    await self._initialize()
            except trio.TooSlowError:
                self._drop_stream()
                raise BackendError(self.name, "did not open its event stream and answer "
                                              f"initialize within {self.timeout:g}s") from None
            except BaseException:
                self._drop_stream()
                raise

    def _drop_stream(self) -> None:
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        self._endpoint = None

    async def _read_stream(self, *, task_status: trio.TaskStatus[None]) -> None:
        """The GET stream: the ``endpoint`` event first, then every message of the backend."""
        transport = stream_headers()
        headers = [*transport, *await self.credentials.headers(
            OutgoingRequest("GET", self.url, transport))]
        parser = SSEParser(self.max_event_bytes)
        with trio.CancelScope() as scope:
            self._stream_scope = scope
            try:
                async with self.client.stream("GET", self.url, headers=headers) as response:
                    answer = stream_answer(response.status,
                                           media_type(response.header("content-type")))
                    if answer is not StreamAnswer.OPEN:
                        raise BackendError(self.name, f"did not open an SSE stream at its URL "
                                                      f"(HTTP {response.status})")
                    async for chunk in response.iter_bytes():
                        for event in parser.feed(chunk):
                            if event.event == "endpoint" and self._endpoint is None:
                                self._endpoint = self._resolve(event.data)
                                task_status.started()
                            elif event.event == "message" and event.data:
                                await self._dispatch(event.data)
            except (HttpError, SSEError) as exc:
                if self._endpoint is None:
                    raise BackendError(self.name, f"event stream failed: {exc}") from None
                log.info("backend %s: event stream ended: %s", self.name, exc)
        self._endpoint = None
        self._calls.fail_all("closed its event stream")

    def _resolve(self, endpoint: str) -> str:
        target = urljoin(self.url, endpoint.strip())
        if urlsplit(target)[:2] != urlsplit(self.url)[:2]:
            raise BackendError(self.name, "named a message endpoint on another origin")
        return target

    async def _dispatch(self, data: str) -> None:
        message = self._calls.decode(data)
        if message is None:
            return
        if isinstance(message, Response | ErrorResponse):
            self._calls.deliver(message)
            return
        params = message.params or {}
        if isinstance(message, Notification) and message.method == "notifications/progress":
            token = params.get("progressToken")
            for candidate in self._calls.calls.values():
                if candidate.progress_token is not None and candidate.progress_token == token:
                    await candidate.sink(message)
                    return
        waiting = [p for p in self._calls.calls.values() if p.sink != self._drop]
        await (waiting[0].sink if len(waiting) == 1 else self.session_sink)(message)

    async def _drop(self, message: Message) -> None:
        """Messages during initialize belong to nobody."""

    async def _post(self, message: Message) -> None:
        if self._endpoint is None:
            raise BackendError(self.name, "has no open event stream")
        transport, body = [("content-type", "application/json")], encode(message)
        headers = [*transport, *await self.credentials.headers(
            OutgoingRequest("POST", self._endpoint, transport, body))]
        tracing.inject_headers(headers)
        try:
            status, _, _ = await self.client.request("POST", self._endpoint, headers=headers,
                                                     body=body, limit=65536)
        except HttpError as exc:
            raise BackendError(self.name, f"is unreachable: {exc}") from None
        if status >= 300:
            raise BackendError(self.name, f"refused a message (HTTP {status})")

    async def _request(self, method: str, params: dict[str, Any] | None,
                       sink: Sink) -> Response | ErrorResponse:
        call = PendingCall("", sink)
        meta = (params or {}).get("_meta")
        if isinstance(meta, dict):
            call.progress_token = meta.get("progressToken")
        return await self._calls.exchange(Request(next(self._ids), method, params), call,
                                          self._post)

    async def _initialize(self) -> None:
        reply = await self._request(
            "initialize", initialize_params(LEGACY_VERSION, self._client_capabilities),
            self._drop)
        (self._revision, self.server_capabilities, self.server_info,
         self.instructions) = read_initialize(self.name, reply, fallback=REVISIONS[0])
        await self._post(Notification("notifications/initialized"))

    async def call(self, method: str, params: dict[str, Any] | None,
                   sink: Sink) -> Response | ErrorResponse:
        try:
            with trio.fail_after(self.timeout):
                if self._endpoint is None:
                    await self._connect()  # the stream ended: a new backend session
                return await self._request(method, params, sink)
        except trio.TooSlowError:
            raise BackendTimedOut(self.name, f"answer {method}", self.timeout) from None

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        await self._post(Notification(method, params))

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        if isinstance(message, Response):
            await self._post(Response(request_id, message.result))
        else:
            await self._post(ErrorResponse(request_id, message.error))

    async def aclose(self) -> None:
        self._drop_stream()
