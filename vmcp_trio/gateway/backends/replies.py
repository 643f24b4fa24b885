"""Reading a Streamable HTTP backend's answer to a POST: a JSON body or an SSE stream.

Shared by the handshake link (:mod:`.http`) and the 2026-07-28 link (:mod:`.stateless`): both POST
one message and get back either ``application/json`` (the response) or ``text/event-stream``
(related messages, then the response).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ...http.client import HttpClient, HttpError, HttpResponse
from ...protocol.jsonrpc import (
    ErrorResponse,
    JsonRpcError,
    Message,
    RequestId,
    Response,
    parse_message,
)
from ...protocol.sse import SSEError, SSEParser
from .base import BackendError, CredentialHook, NoCredentials, Sink

__all__ = ["ACCEPT_BOTH", "HttpLinkFields", "consume_sse", "content_type", "read_json_reply"]

log = logging.getLogger("vmcp.backend.http")

ACCEPT_BOTH = "application/json, text/event-stream"


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


def content_type(response: HttpResponse) -> str:
    """The response's media type, lower-case, without parameters."""
    return (response.header("content-type") or "").split(";")[0].strip().lower()


async def read_json_reply(backend: str, response: HttpResponse,
                          max_body: int) -> Response | ErrorResponse:
    """The JSON-RPC response in an ``application/json`` body."""
    try:
        body = await response.read(max_body)
        message = parse_message(orjson.loads(body))
    except (orjson.JSONDecodeError, JsonRpcError, HttpError) as exc:
        raise BackendError(backend, f"sent an invalid JSON reply: {exc}") from None
    if isinstance(message, Response | ErrorResponse):
        return message
    raise BackendError(backend, "answered a request with something other than a response")


def _parse_event(backend: str, data: str) -> Message | None:
    try:
        return parse_message(orjson.loads(data))
    except (orjson.JSONDecodeError, JsonRpcError) as exc:
        log.warning("backend %s sent an invalid message on SSE: %s", backend, exc)
        return None


async def consume_sse(backend: str, response: HttpResponse, parser: SSEParser,
                      request_id: RequestId | None, sink: Sink) -> Response | ErrorResponse | None:
    """Read an SSE stream until the response to ``request_id`` (returned); every other message
    goes to ``sink``. None when the stream ended (or broke) first."""
    try:
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                if not event.data:
                    continue  # priming event
                message = _parse_event(backend, event.data)
                if message is None:
                    continue
                if isinstance(message, Response | ErrorResponse) and message.id == request_id:
                    return message
                await sink(message)
    except (HttpError, SSEError) as exc:
        log.info("backend %s stream broke: %s", backend, exc)
    return None
