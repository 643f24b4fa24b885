"""Reading a Streamable HTTP backend's answer to a POST: a JSON body or an SSE stream.

Shared by the handshake link (:mod:`.http`) and the 2026-07-28 link (:mod:`.stateless_link`): both
POST one message and get back either ``application/json`` (the response) or ``text/event-stream``
(related messages, then the response). Which one an answer is, or what else it means, is
:func:`~vmcp_trio.protocol.streamable.post_answer`'s to say; this module reads the two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...http.client import HttpClient, HttpError, HttpResponse
from ...protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Message,
    RequestId,
    Response,
    decode_message,
)
from ...protocol.sse import SSEError, SSEParser
from .base import BackendError, CredentialHook, NoCredentials, Sink

__all__ = ["HttpLinkFields", "consume_sse", "read_json_reply"]

log = logging.getLogger("vmcp.backend.http")


class HttpLinkFields:
    """What every link to a backend reached by URL holds (Streamable HTTP in either era, legacy
    HTTP+SSE): where it is, how to reach it, where unrelated messages go, its bounds, and what
    the backend said about itself."""

    def __init__(self, name: str, url: str, client: HttpClient, *, session_sink: Sink,
                 credentials: CredentialHook | None = None, timeout: float = 60.0,
                 max_body: int = 16 * 1024 * 1024,
                 max_event_bytes: int = 4 * 1024 * 1024) -> None:
        self.name = name
        self.url = url
        self.client = client
        self.session_sink = session_sink
        self.credentials = credentials or NoCredentials()
        self.timeout = timeout
        self.max_body = max_body
        self.max_event_bytes = max_event_bytes
        self.server_capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.instructions: str | None = None


async def read_json_reply(backend: str, response: HttpResponse,
                          max_body: int) -> Response | ErrorResponse:
    """The JSON-RPC response in an ``application/json`` body."""
    try:
        message = decode_message(await response.read(max_body))
    except (JsonRpcError, HttpError) as exc:
        raise BackendError(backend, f"sent an invalid JSON reply: {exc}") from None
    if isinstance(message, Response | ErrorResponse):
        return message
    raise BackendError(backend, "answered a request with something other than a response")


def _parse_event(backend: str, data: str, request_id: RequestId | None) -> Message | None:
    """The message of one SSE event; None when it is not one (logged). A malformed answer to
    ``request_id`` becomes an error answer saying what was wrong."""
    try:
        return decode_message(data)
    except JsonRpcError as exc:
        log.warning("backend %s sent an invalid message on SSE: %s", backend, exc)
        if exc.answer and exc.id is not None and exc.id == request_id:
            return ErrorResponse(request_id, ErrorObject(
                INTERNAL_ERROR, f"backend {backend!r} sent an invalid answer: {exc}",
                {"backend": backend}))
        return None


async def consume_sse(backend: str, response: HttpResponse, parser: SSEParser,
                      request_id: RequestId | None, sink: Sink, *,
                      on_event_id: Callable[[str], None] | None = None
                      ) -> Response | ErrorResponse | None:
    """Read an SSE stream until the response to ``request_id`` (returned); every other request
    or notification goes to ``sink``. An answer to any other id is dropped: the backend was not
    asked it on this stream, and passed on it could stand in for another of the client's
    requests. None when the stream ended (or broke) first. ``on_event_id`` is told the id of
    each event taken (where a resume would start), once the event was handled."""
    try:
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                if not event.data:
                    if on_event_id is not None and event.id:
                        on_event_id(event.id)
                    continue  # priming event
                message = _parse_event(backend, event.data, request_id)
                if message is None:
                    continue
                if isinstance(message, Response | ErrorResponse):
                    if message.id == request_id:
                        return message
                    log.info("backend %s answered id %r, which it was not asked on this "
                             "stream; dropped", backend, message.id)
                    continue
                await sink(message)
                if on_event_id is not None and event.id:
                    on_event_id(event.id)
    except (HttpError, SSEError) as exc:
        log.info("backend %s stream broke: %s", backend, exc)
    return None
