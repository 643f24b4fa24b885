"""The thin ASGI layer under every endpoint: a request view, bounded body reading, replies.

Hypercorn's trio worker calls the app once per request. What this layer adds:

* :class:`HttpRequest`: method, path, lower-cased headers, query, client address;
  :meth:`HttpRequest.body` reads at most ``limit`` bytes and raises :class:`BodyTooLarge` past it
  (a declared ``Content-Length`` over the limit fails before reading anything), within a
  deadline (:class:`BodyTimeout`), or :class:`ClientGone` when the client leaves first.
* Replies: :func:`send_json`, :func:`send_empty`, :func:`send_text`, and
  :func:`open_stream` for SSE, which gives a :class:`StreamWriter` and watches ``receive()`` for
  ``http.disconnect`` (hypercorn's ``send`` never raises after the client left, so this is the
  only way to notice, and it cancels the writer's scope). When the server offers it
  (:data:`NOWAIT_EXTENSION`: the lean HTTP/1.1 server on a plain socket), the writer can also
  hand an event to the socket without waiting (:meth:`StreamWriter.write_now`): one event
  fanned out to many streams is written by the loop that fans it out, with no task switch.
* The lifespan protocol (an app that returns on lifespan crashes hypercorn's ``serve``).
* Only origin-form request-targets reach an app (:mod:`vmcp_trio.protocol.targets`; 400
  otherwise).
"""

from __future__ import annotations

import ipaddress
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    MutableMapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, Protocol
from urllib.parse import parse_qs

import orjson
import trio

from ..protocol.targets import target_problem

__all__ = [
    "NOWAIT_EXTENSION",
    "ASGIApp",
    "BodyTimeout",
    "BodyTooLarge",
    "ClientGone",
    "HttpRequest",
    "NowaitSend",
    "StatusSend",
    "StreamWriter",
    "client_group",
    "http_request",
    "is_event_stream",
    "lifespan",
    "open_stream",
    "send_bytes",
    "send_empty",
    "send_json",
    "send_text",
    "until_client_leaves",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = Sequence[tuple[str, str]]


NOWAIT_EXTENSION = "vmcp.send_nowait"
"""The scope extension (``scope["extensions"]``) holding the :class:`NowaitSend` of a started
event stream; absent where the server cannot write without waiting (TLS, HTTP/2)."""


class NowaitSend(Protocol):
    """More of a started response's body, written at once (the lean HTTP/1.1 server's)."""

    @property
    def holding(self) -> bool:
        """Bytes the socket did not take are held, to go first on the next ``send``."""

    def send_nowait(self, body: bytes) -> bool:
        """True: ``body`` is on its way (written whole, or partly with the rest held); False:
        nothing was done (a send is in progress or bytes are still held)."""


class ClientGone(Exception):
    """The client went away before its request was read (an aborted upload, a reset stream):
    nobody to answer, nothing to log but a line."""


class BodyTimeout(Exception):
    """The body did not arrive within the deadline (a stalled upload holds a connection)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g}s")
        self.seconds = seconds


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes")
        self.limit = limit


class HttpRequest:
    __slots__ = ("_body_size", "_receive", "body_done", "body_timeout", "client", "headers",
                 "method", "path", "query_string", "raw_path", "scheme", "scope")

    def __init__(self, scope: Scope, receive: Receive, *, body_timeout: float = 30.0) -> None:
        self.scope = scope
        self._receive = receive
        self.body_timeout = body_timeout
        self.body_done = False
        """The whole body was read."""
        self._body_size = 0
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        """Percent-decoded, for routing."""
        self.raw_path: str = (scope.get("raw_path") or b"").decode("latin-1") or self.path
        """As the client encoded it, for forwarding."""
        self.scheme: str = scope.get("scheme", "http")
        self.query_string: bytes = scope.get("query_string", b"")
        client = scope.get("client")
        self.client: str = client[0] if client else ""
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            name = key.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
        self.headers = headers

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def client_group(self) -> str:
        """Who counts as one client for per-client bounds when nothing else tells clients
        apart: the address, an IPv6 one taken as its /64 (one host's whole subnet: IPv6
        hands every host more addresses than any bound could count)."""
        return client_group(self.client)

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(self.query_string.decode("latin-1"), keep_blank_values=True)

    @property
    def body_unread(self) -> bool:
        """The request has a body that was not (wholly) read: an answer now leaves it on the
        connection, which must then close (HTTP/1.1)."""
        if self.body_done:
            return False
        declared = self.headers.get("content-length")
        return (declared is not None and declared != "0") or "transfer-encoding" in self.headers

    def body_bound(self, limit: int) -> int:
        """The most bytes the body may hold, at most ``limit``: its declared
        ``Content-Length``; none on HTTP/1 without ``Transfer-Encoding``; else ``limit``."""
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit():
            return min(int(declared), limit)
        if self.scope.get("http_version", "1.1") in ("1.0", "1.1") and (
                "transfer-encoding" not in self.headers):
            return 0
        return limit

    async def body(self, limit: int) -> bytes:
        """The whole body: at most ``limit`` bytes (:class:`BodyTooLarge`), within
        ``body_timeout`` seconds (:class:`BodyTimeout`), or :class:`ClientGone`.

        A body that is already there (the usual small POST, which came with its headers) is
        taken without waiting, so without setting a deadline: what hypercorn hands the app
        is a memory channel's ``receive``, and its ``receive_nowait`` says what is queued."""
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        parts: list[bytes] = []
        queued = getattr(getattr(self._receive, "__self__", None), "receive_nowait", None)
        while queued is not None:
            try:
                message = queued()
            except trio.WouldBlock:
                break
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise ClientGone("the client went away before sending the whole body") \
                    from None
            if self._take(message, parts, limit):
                return b"".join(parts)
        with trio.move_on_after(self.body_timeout):
            while True:
                if self._take(await self._receive(), parts, limit):
                    return b"".join(parts)
        raise BodyTimeout(self.body_timeout)

    def _take(self, message: dict[str, Any], parts: list[bytes], limit: int) -> bool:
        """Add one ASGI body message to ``parts``; True when the body is complete."""
        if message["type"] == "http.disconnect":
            raise ClientGone("the client went away before sending the whole body")
        chunk = message.get("body", b"")
        parts.append(chunk)
        self._body_size += len(chunk)
        if self._body_size > limit:
            raise BodyTooLarge(limit)
        if message.get("more_body"):
            return False
        self.body_done = True
        return True

    async def wait_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass


def client_group(address: str) -> str:
    """:attr:`HttpRequest.client_group` of an address."""
    if ":" not in address:
        return address
    try:
        return str(ipaddress.IPv6Network((address.split("%")[0], 64), strict=False))
    except ValueError:
        return address


def is_event_stream(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a response's headers say ``text/event-stream`` (its head goes out at once: a
    client waits for it to know its stream is open)."""
    for name, value in headers:  # on every response: the length rules most names out at once
        if len(name) == 12 and name.lower() == b"content-type":
            return bool(value[:17].lower() == b"text/event-stream")
    return False


def _wire(headers: Headers) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def send_bytes(send: Send, status: int, data: bytes, content_type: str,
                     headers: Headers = ()) -> None:
    """A whole response of ``data`` (with its length)."""
    await send({"type": "http.response.start", "status": status,
                "headers": _wire([("content-type", content_type),
                                  ("content-length", str(len(data))), *headers])})
    await send({"type": "http.response.body", "body": data})


async def send_json(send: Send, status: int, body: Any, headers: Headers = ()) -> None:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    await send_bytes(send, status, data, "application/json", headers)


async def send_text(send: Send, status: int, text: str, *, content_type: str = "text/plain",
                    headers: Headers = ()) -> None:
    await send_bytes(send, status, text.encode("utf-8"), f"{content_type}; charset=utf-8",
                     headers)


async def send_empty(send: Send, status: int, headers: Headers = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": _wire([("content-length", "0"), *headers])})
    await send({"type": "http.response.body", "body": b""})


class StatusSend:
    """The ASGI ``send`` of one request, remembering the status of the response (0 before it
    started), for the access record and for knowing whether an error can still be answered."""

    __slots__ = ("_send", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0

    @property
    def started(self) -> bool:
        return self.status != 0

    async def __call__(self, message: dict[str, Any]) -> None:
        if not self.status:
            status = message.get("status", 200)
            self.status = status if isinstance(status, int) else 200
        await self._send(message)


class StreamWriter:
    """Writes SSE bytes to one response; serialises writers (events and keep-alives)."""

    def __init__(self, send: Send, nowait: NowaitSend | None = None) -> None:
        self._send = send
        self._nowait = nowait
        self._lock = trio.Lock()
        self.last_write = trio.current_time()

    async def write(self, data: bytes) -> None:
        """Write ``data`` (after any bytes :meth:`write_now` left held; ``b""`` writes only
        those)."""
        async with self._lock:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
            self.last_write = trio.current_time()

    def write_now(self, data: bytes) -> bool:
        """Hand ``data`` to the socket without waiting, when nothing else is being written:
        whether it was taken (what the socket could not take at once is held: :attr:`holding`,
        and :meth:`write` sends it first). False when the server offers no such write."""
        if self._nowait is None or self._lock.locked() or not self._nowait.send_nowait(data):
            return False
        self.last_write = trio.current_time()
        return True

    @property
    def holding(self) -> bool:
        """Bytes taken by :meth:`write_now` wait for a :meth:`write` to go out."""
        return self._nowait is not None and self._nowait.holding


@asynccontextmanager
async def until_client_leaves(request: HttpRequest) -> AsyncIterator[trio.Nursery]:
    """A nursery for the block whose tasks (and the block) are cancelled when the client
    disconnects; cancelled too when the block ends."""
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            await request.wait_disconnect()
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        yield nursery
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_stream(request: HttpRequest, send: Send,
                      headers: Headers = ()) -> AsyncIterator[tuple[StreamWriter, trio.Nursery]]:
    """Start an SSE response. The block runs in a nursery that is cancelled when the client
    disconnects; when it exits the response is ended."""
    await send({"type": "http.response.start", "status": 200,
                "headers": _wire([("content-type", "text/event-stream"),
                                  ("cache-control", "no-cache, no-transform"),
                                  ("x-accel-buffering", "no"), *headers])})
    writer = StreamWriter(send, request.scope.get("extensions", {}).get(NOWAIT_EXTENSION))
    await writer.write(b":\n\n")  # the headers go out now, even if no event follows for a while
    try:
        async with until_client_leaves(request) as nursery:
            yield writer, nursery
    finally:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def http_request(scope: Scope, receive: Receive, send: Send, *,
                       body_timeout: float = 30.0) -> HttpRequest | None:
    """What an app's ``__call__`` starts with: the HTTP request of ``scope``; None when there
    is none to serve (the lifespan protocol, answered here for as long as the server runs,
    another scope type, or a request-target :func:`~vmcp_trio.protocol.targets.target_problem`
    refuses, answered 400 here)."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return None
    if scope["type"] != "http":
        return None
    problem = target_problem((scope.get("raw_path") or b"").decode("latin-1") or scope["path"],
                             scope.get("query_string", b"").decode("latin-1"), scope["path"])
    if problem is not None:
        await send_json(send, 400, {"error": "invalid_request", "error_description": problem},
                        [("connection", "close")])
        return None
    return HttpRequest(scope, receive, body_timeout=body_timeout)


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the lifespan protocol for as long as the server runs."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
