"""One HTTP/1.1 connection of the lean server: ``httptools`` (llhttp, in C) parses, the ASGI app
answers, one request at a time.

The rules it keeps:

* **In order.** Requests are answered one after the other; pipelined ones wait, parsed, in a
  queue of at most :data:`MAX_QUEUED` (past it the connection stops reading until the queue
  drains).
* **Bounded heads.** A request head (request line and headers) over ``max_head_bytes`` is
  answered 431 and the connection closed; input the parser refuses (a bad request line or
  header, ``Content-Length`` with ``Transfer-Encoding``, a bad chunk) is answered 400 and the
  connection closed; nothing of it reaches the app.
* **Idle bound.** Between requests the connection waits at most ``idle_seconds`` (and one
  :func:`idle_tick` more) for the next head to be complete (which also bounds a head that
  trickles in), and not at all once the server drains. The server enforces it
  (:meth:`H1Connection.end_if_idle`).
* **receive()** gives the body as it arrives (``100 Continue`` first when the client asked for
  it); once the body is whole it watches the socket and returns ``http.disconnect`` when the
  client closes, which is how an event stream learns that its client left.
* **send()** holds the head until the first body chunk, so a JSON reply is one write, except for
  an event stream, whose head goes out at once (a client waits for it). A body without
  ``Content-Length`` is sent chunked (or until close, to an HTTP/1.0 client); a HEAD answer has
  no body. ``Connection: close`` is honoured both ways and added when the connection will close
  (the client asked, the server drains, the body was left unread). Like hypercorn's, ``send``
  never raises once the client has left: the connection is marked closed and the app learns it
  from ``receive()``.
* **An event stream can be written without waiting** (:data:`~.asgi.NOWAIT_EXTENSION`, on a
  plain socket): :meth:`_Exchange.send_nowait` writes a body chunk straight to the socket when no
  write is in progress and nothing is held, and holds what the socket did not take for the next
  ``send``, so bytes never interleave and never reorder.
* **Faults stay on the connection.** An app that fails before answering gets a 500 sent for it,
  after that the connection is closed; either way the server goes on.
* **Upgrades are handed over.** An ``Upgrade`` request (WebSocket, h2c) that is the
  connection's first, or HTTP/2's preface (prior knowledge), is not served here:
  :meth:`H1Connection.run` returns the bytes read so far (and :attr:`H1Connection.upgrade` the
  protocol asked for) for the server to serve a WebSocket itself
  (:func:`~vmcp_trio.http.websocket.serve_asgi`) or replay the bytes to hypercorn (h2c, HTTP/2).
  A later request's ``Upgrade`` header is ignored (the request is served as HTTP/1.1).
"""

from __future__ import annotations

import logging
import os
from email.utils import formatdate
from http import HTTPStatus
from time import time
from typing import Any
from urllib.parse import unquote

import httptools
import orjson
import trio

from .asgi import NOWAIT_EXTENSION, ASGIApp, is_event_stream
from .socket_stream import LeanSocketStream

__all__ = ["MAX_QUEUED", "H1Connection", "Limits", "idle_tick"]

log = logging.getLogger("vmcp.http")

MAX_QUEUED = 8
"""Pipelined requests parsed and waiting their turn on one connection."""
MAX_RECV = 64 * 1024

_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("ascii")
                 for status in HTTPStatus}
_NO_BODY_STATUSES = frozenset({204, 304})
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_PROBLEMS = {400: "the request cannot be parsed", 500: "the server failed on this request"}
_DISCONNECT = {"type": "http.disconnect"}
H2_PREFACE = b"PRI * HTTP/2.0\r\n"


def idle_tick(idle_seconds: float) -> float:
    """How often a server looks for connections idle too long: a second, or a quarter of a
    shorter bound."""
    return min(1.0, idle_seconds / 4)


class Limits:
    """What every connection of one server is held to."""

    __slots__ = ("idle_seconds", "max_head_bytes")

    def __init__(self, *, max_head_bytes: int, idle_seconds: float) -> None:
        self.max_head_bytes = max_head_bytes
        self.idle_seconds = idle_seconds


class _Date:
    """The ``Date`` header's value, formatted once a second."""

    second = 0
    value = b""

    @classmethod
    def now(cls) -> bytes:
        second = int(time())
        if second != cls.second:
            cls.second = second
            cls.value = formatdate(second, usegmt=True).encode("ascii")
        return cls.value


class _Request:
    """A request as parsed: its scope once the head is complete, its body as it arrives."""

    __slots__ = ("body", "complete", "continue_wanted", "headers", "keep_alive", "scope",
                 "upgrade", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.scope: dict[str, Any] | None = None
        self.body: list[bytes] = []
        self.complete = False
        self.keep_alive = True
        self.continue_wanted = False
        self.upgrade = b""
        """The protocol an ``Upgrade`` header names, lower-cased (empty: none)."""


class _BadRequest(Exception):
    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


class H1Connection:
    """Serves one HTTP/1.1 connection; :meth:`run` until it closes (or hands it over)."""

    def __init__(self, app: ASGIApp, stream: trio.abc.Stream, limits: Limits, *,
                 scheme: str, client: tuple[str, int] | None,
                 server: tuple[str, int] | None) -> None:
        self._app = app
        self._stream = stream
        self._limits = limits
        self._scheme = scheme
        self._client = client
        self._server = server
        self._parser: httptools.HttpRequestParser | None = None
        """Made when bytes come and dropped while the connection waits between requests: an
        idle one holds ~900 bytes, on every open session's connections (a new one costs
        ~0.2 us)."""
        self._parsing: _Request | None = None
        self._queue: list[_Request] = []
        """Requests parsed, in order (a list: at most :data:`MAX_QUEUED`, and an empty one
        costs a tenth of an empty deque on every idle connection)."""
        self._head_bytes = 0
        """Bytes read while no head was complete (a head still coming, held by the parser)."""
        self._parsed_head_bytes = 0
        """The request line's and headers' bytes of the head being parsed."""
        self._read_so_far: list[bytes] | None = []
        """Every byte read until the first request is answered (what an upgrade replays)."""
        self._failed: int = 0
        """A status (400, 431) when the input cannot be parsed further."""
        self._problem = ""
        """What was wrong with it, when more is known than the status says."""
        self._h2_preface = False
        self._eof = False
        self._closed = False
        self._draining = False
        self._idle_scope = trio.CancelScope()
        self._waiting = False
        """Waiting for a request (what a drain cancels at once)."""
        self._waiting_since = 0.0
        """When the wait for the next request began (trio's clock)."""
        self._send_lock: trio.Lock | None = None
        """Serialises the writes of a streamed body (made by the first: most connections
        answer in one write)."""
        self._writing = False
        """A write is in progress (a write without waiting would interleave with it)."""
        self._fd = stream.socket.fileno() if isinstance(stream, LeanSocketStream) else -1
        """The socket, for writes without waiting (-1: the stream is not a plain socket)."""
        self.upgrade: tuple[bytes, dict[str, Any]] | None = None
        """The protocol the first request asked to upgrade to, and its scope (set when
        :meth:`run` returns the bytes read for an upgrade)."""

    # --- the server's side ---------------------------------------------------------------------

    def drain(self) -> None:
        """Serve the request in flight (with ``Connection: close``), then close; an idle
        connection closes at once."""
        self._draining = True
        if self._waiting:
            self._idle_scope.cancel()

    def end_if_idle(self, now: float) -> None:
        """Close the connection if it has waited for its next request (or for the rest of its
        head) for ``idle_seconds``."""
        if self._waiting and now - self._waiting_since >= self._limits.idle_seconds:
            self._idle_scope.cancel()

    async def run(self) -> bytes | None:
        """Serve requests until the connection closes; the bytes read so far when the first
        request asks to upgrade (the caller hands the connection to hypercorn), else None.

        One cancel scope for the connection's life ends a wait for a request that lasts too
        long: the server looks at its connections' waits every :func:`idle_tick` seconds
        (:meth:`end_if_idle`); a scope per request, or a deadline moved twice a request, cost
        ~5 and ~4 us a request."""
        try:
            with self._idle_scope:
                while not self._draining:
                    self._waiting_since = trio.current_time()
                    self._waiting = True
                    request = await self._next_request()
                    self._waiting = False
                    if request is None:
                        return b"".join(self._read_so_far or ()) if self._h2_preface else None
                    if request.upgrade and self._read_so_far is not None:
                        assert request.scope is not None  # its head is complete
                        self.upgrade = (request.upgrade, request.scope)
                        return b"".join(self._read_so_far)
                    self._read_so_far = None
                    served = await _Exchange(self, request).serve()
                    del request  # an idle connection holds no request (its head, its scope)
                    if not served or self._closed:
                        return None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return None
        return None

    async def _next_request(self) -> _Request | None:
        """The next request whose head is complete; None when the connection should close."""
        while not (self._queue and self._queue[0].scope is not None):
            if self._h2_preface:
                return None
            if self._failed:
                await self._refuse(self._failed)
                return None
            if self._eof or self._draining:
                return None
            await self._read()
        return self._queue.pop(0)

    async def _read(self) -> None:
        if self._parsing is None:  # between requests: nothing for the parser to keep
            self._parser = None
        try:
            data = bytes(await self._stream.receive_some(MAX_RECV))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self._eof = True
            return
        if self._read_so_far is not None:
            self._read_so_far.append(data)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        in_head = self._parsing is None or self._parsing.scope is None
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the request is marked; what follows its head is the upgraded protocol's
        except httptools.HttpParserCallbackError as exc:  # one of ours, raised in a callback
            cause = exc.__context__
            if isinstance(cause, _BadRequest):
                self._fail(cause.status, cause.problem)
            else:
                self._fail(400, "the request cannot be parsed")
        except httptools.HttpParserInvalidURLError as exc:
            self._fail(400, f"the request-target is not valid: {exc}")
        except httptools.HttpParserError as exc:
            if self._read_so_far is not None and b"".join(self._read_so_far).startswith(
                    H2_PREFACE):
                self._h2_preface = True  # HTTP/2 with prior knowledge: hypercorn's to serve
            else:
                self._fail(400, f"the request cannot be parsed: {exc}")
        if in_head and (self._parsing is None or self._parsing.scope is None):
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_head_bytes:
                self._fail(431, self._too_large())

    def _too_large(self) -> str:
        return (f"Request header fields are larger than {self._limits.max_head_bytes} bytes "
                f"in all")

    def _fail(self, status: int, problem: str) -> None:
        if not self._failed:
            self._failed = status
            self._problem = problem

    async def _refuse(self, status: int) -> None:
        """Answer input that cannot be served (what was wrong, in the body), and close."""
        body = orjson.dumps({"error": "invalid_request" if status < 500 else "server_error",
                             "error_description": self._problem or _PROBLEMS.get(status, "")})
        await self._write(b"".join((_STATUS_LINES[status], b"content-type: application/json\r\n",
                                    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
                                    body)))
        self._closed = True

    async def _write(self, data: bytes) -> None:
        if self._closed:
            return
        self._writing = True
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._closed = True
        finally:
            self._writing = False

    # --- httptools' callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if len(self._queue) >= MAX_QUEUED:
            raise _BadRequest(429, f"more than {MAX_QUEUED} requests sent ahead of their "
                                   "answers")
        self._parsing = _Request()
        self._head_bytes = 0
        self._parsed_head_bytes = 0

    def on_url(self, url: bytes) -> None:
        assert self._parsing is not None
        self._parsing.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._parsing is not None
        self._parsing.headers.append((name.lower(), value.strip(b" \t")))  # no OWS (RFC 9110)
        self._parsed_head_bytes += len(name) + len(value) + 4
        if self._parsed_head_bytes > self._limits.max_head_bytes:
            raise _BadRequest(431, self._too_large())

    def _count_head(self, size: int) -> None:
        self._parsed_head_bytes += size
        if self._parsed_head_bytes > self._limits.max_head_bytes:
            raise _BadRequest(431, self._too_large())

    def on_headers_complete(self) -> None:
        request = self._parsing
        assert request is not None
        parser = self._parser
        assert parser is not None  # it is calling
        target, _, query = request.url.partition(b"?")
        try:
            path = unquote(target.decode("ascii"))
        except UnicodeDecodeError:
            raise _BadRequest(400, "the request-target holds a character that is not "
                                   "visible ASCII") from None
        request.scope = {
            "type": "http", "asgi": _ASGI, "http_version": parser.get_http_version(),
            "method": parser.get_method().decode("ascii"), "scheme": self._scheme,
            "path": path, "raw_path": target, "query_string": query, "root_path": "",
            "headers": request.headers, "client": self._client, "server": self._server,
        }
        request.keep_alive = parser.should_keep_alive()
        for name, value in request.headers:
            if name == b"expect" and value.lower() == b"100-continue":
                request.continue_wanted = True
            elif name == b"upgrade":
                request.upgrade = value.lower()
        self._head_bytes = 0
        self._queue.append(request)

    def on_body(self, body: bytes) -> None:
        assert self._parsing is not None
        self._parsing.body.append(body)

    def on_message_complete(self) -> None:
        assert self._parsing is not None
        self._parsing.complete = True
        self._parsing = None


class _Exchange:
    """One request and its response: the ``receive`` and ``send`` the app is given."""

    __slots__ = ("_chunked", "_connection", "_head", "_head_request", "_held", "_request",
                 "_sent_all", "_started", "_status", "_unbounded", "keep_alive")

    def __init__(self, connection: H1Connection, request: _Request) -> None:
        self._connection = connection
        self._request = request
        self.keep_alive = request.keep_alive and not connection._draining
        self._head: bytes | None = None
        self._status = 0
        self._started = False
        self._chunked = False
        self._unbounded = False
        self._sent_all = False
        self._held = b""
        """Body bytes :meth:`send_nowait` took that the socket did not (they go first)."""
        assert request.scope is not None
        self._head_request = request.scope["method"] == "HEAD"

    async def serve(self) -> bool:
        """Run the app on the request; whether the connection can serve another."""
        connection = self._connection
        scope = self._request.scope
        assert scope is not None
        try:
            await connection._app(scope, self.receive, self.send)
        except Exception:
            if not connection._failed:  # not the app's fault when the body was unreadable
                log.exception("the app failed on %s %s", scope["method"], scope["path"][:200])
            if not self._started:
                await connection._refuse(connection._failed or 500)
            return False
        if not self._sent_all:
            if not self._started:
                await connection._refuse(connection._failed or 500)
            return False
        request = self._request
        return self.keep_alive and request.complete and not connection._failed

    # --- receive -------------------------------------------------------------------------------

    def receive_nowait(self) -> dict[str, Any]:
        """The body chunk already parsed (what :meth:`HttpRequest.body` takes without a
        deadline); raises ``trio.WouldBlock`` when it would have to read."""
        request = self._request
        if request.body or request.complete:
            return self._take()
        raise trio.WouldBlock

    async def receive(self) -> dict[str, Any]:
        request = self._request
        connection = self._connection
        if self._sent_all or connection._closed:
            return _DISCONNECT
        if request.complete and not request.body:
            # the body is whole: watch the socket for the client leaving
            while not connection._eof and not connection._closed:
                if len(connection._queue) >= MAX_QUEUED or connection._failed:
                    await trio.sleep_forever()
                await connection._read()
            return _DISCONNECT
        if request.continue_wanted:
            request.continue_wanted = False
            await connection._write(_CONTINUE)
        while not request.body and not request.complete:
            if connection._eof or connection._failed or connection._closed:
                return _DISCONNECT
            await connection._read()
        return self._take()

    def _take(self) -> dict[str, Any]:
        request = self._request
        body = b"".join(request.body)  # one part: that very object, no copy
        request.body.clear()
        return {"type": "http.request", "body": body, "more_body": not request.complete}

    # --- send ----------------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self._start(message)
            if self._head is not None and is_event_stream(message.get("headers", ())):
                stream_head, self._head = self._head, None
                await self._connection._write(stream_head)
                if self._connection._fd >= 0 and not self._head_request:
                    scope = self._request.scope
                    assert scope is not None
                    scope.setdefault("extensions", {})[NOWAIT_EXTENSION] = self
            return
        if kind != "http.response.body" or self._sent_all:
            return
        if not self._started:
            raise RuntimeError("http.response.body before http.response.start")
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        if self._head_request or self._status in _NO_BODY_STATUSES:
            body = b""
        if self._chunked:
            if body:
                body = b"%x\r\n%b\r\n" % (len(body), body)
            if not more:
                body += b"0\r\n\r\n"
        head, self._head = self._head, None
        if not more:
            self._sent_all = True
        data = head + body if head is not None else body
        if self._held:
            data, self._held = self._held + data, b""
        if data:
            if more:
                connection = self._connection
                if connection._send_lock is None:
                    connection._send_lock = trio.Lock()
                async with connection._send_lock:
                    await connection._write(data)
            else:
                await self._connection._write(data)
        if not more and self._unbounded:
            self._connection._closed = True  # an HTTP/1.0 body ends with the connection

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def send_nowait(self, body: bytes) -> bool:
        """One more chunk of an event stream's body, written now if no write is in progress
        and nothing is held: True when it was taken (what the socket did not take is held for
        the next :meth:`send`), False when nothing was done."""
        connection = self._connection
        if (self._held or self._head is not None or self._sent_all or connection._writing
                or (connection._send_lock is not None and connection._send_lock.locked())
                or connection._closed):
            return False
        if self._chunked:
            body = b"%x\r\n%b\r\n" % (len(body), body)
        try:
            written = os.write(connection._fd, body)
        except BlockingIOError:
            written = 0
        except OSError:  # the client left: as with send, the app learns it from receive()
            connection._closed = True
            return False
        if written < len(body):
            self._held = body[written:]
        return True

    def _start(self, message: dict[str, Any]) -> None:
        if self._started:
            raise RuntimeError("http.response.start sent twice")
        status = message["status"]
        lines = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        has_length = False
        for name, value in message.get("headers", ()):
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection" and value.lower() == b"close":
                self.keep_alive = False
                continue
            lines.append(b"%b: %b\r\n" % (name, value))
        lines.append(b"date: %b\r\n" % _Date.now())
        if not has_length and status not in _NO_BODY_STATUSES and status >= 200:
            if self._request.scope is not None and self._request.scope["http_version"] == "1.0":
                self._unbounded = True
                self.keep_alive = False
            else:
                self._chunked = not self._head_request
                if self._chunked:
                    lines.append(b"transfer-encoding: chunked\r\n")
        if not self._request.complete:
            self.keep_alive = False  # the body left unread stays on the connection
        if self._connection._draining:
            self.keep_alive = False
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        head = b"".join(lines)
        if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines):
            raise ValueError("a response header holds a line break")  # it would split the head
        self._head = head
        self._status = status
        self._started = True
