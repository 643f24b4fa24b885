"""A lean HTTP/1.1 client on trio and ``httptools`` (llhttp), with a keep-alive connection pool.

Why not httpx: on this hot path (every tools/call goes through it) httpx/httpcore cost ~1.75 ms
of CPU per request, mostly pool bookkeeping (REFERENCE.md), and under trio its HTTP/2 streams
closed early are never reset. This client does only what the gateway needs: HTTP/1.1, TLS,
keep-alive with a bounded idle pool per origin, streamed responses (SSE) that can be abandoned
at any point, and trio-native cancellation.

Rules it keeps:

* A connection returns to the pool only when its response was read to the end and the server
  keeps the connection; a response abandoned early (an SSE stream the caller stopped reading)
  closes its connection. A response to HEAD is never followed by another on its connection.
* A request on a *reused* connection that fails before any response byte arrived is retried
  once on a fresh connection: the server closed the idle connection, so it never saw the
  request. Nothing else is retried.
* Bounds: response head size, idle connections per origin and in all, and the body size of
  :meth:`HttpResponse.read`. An idle connection is closed after ``IDLE_EXPIRY`` seconds
  unused (:meth:`HttpClient.expire_idle_forever`, a supervised task of the process that owns
  the client): the pool grows with the peak of concurrent requests (a burst, calls piling up
  on a backend that froze) and shrinks back when the peak is over. The pool is a stack, so
  the connections left idle longest are at its bottom.
* A request header that would break the framing (a name that is not a token, a line break or
  NUL in a value) fails the request before anything is sent.
* A request with a ``guard`` (:class:`ConnectGuard`: the SSRF guard of a URL a peer supplied)
  connects to the addresses the guard gives for the host, not to a second lookup of the name.
  Its connection is pooled apart: a guarded request reuses only a connection made through a
  guard, never one made to whatever the name resolved to.

Timeouts are the caller's: wrap calls in ``trio.fail_after`` / ``trio.move_on_after``. A client
may also be given per-phase :class:`Deadlines` (``vmcp proxy stdio``'s timeouts): connecting
(TCP and TLS), the wait for a response's head after the request went out, and each wait for
more of a body. Each passed is an
:class:`HttpError` naming the phase; a request whose head did not come in time is never sent
again (the server may be working on it).
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httptools
import trio

from .connect_errors import connect_failure
from .socket_stream import LeanSocketStream, adopt

__all__ = ["ConnectGuard", "Deadlines", "HttpClient", "HttpError", "HttpResponse", "Origin"]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_READ_CHUNK = 65536
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_IN_VALUE = re.compile(r"[\r\n\0]")
_USUAL_NAMES = frozenset({
    "accept", "authorization", "content-type", "mcp-session-id", "mcp-protocol-version",
    "last-event-id", "user-agent", "x-request-id", "traceparent", "tracestate", "mcp-method",
    "mcp-name"})
"""Header names this client sends all the time: known tokens, not checked again each time."""


class HttpError(Exception):
    """The exchange failed (connection refused, reset, protocol error, body too large)."""


class _HeadTimeout(HttpError):
    """No response head in time: the request must not be sent again."""


@dataclass(frozen=True)
class Deadlines:
    """Seconds each phase of an exchange may take (None: as long as the caller lets it)."""

    connect: float | None = None
    head: float | None = None
    body_idle: float | None = None
    """The longest wait for the next bytes of a body (a quiet event stream ends too)."""


class ConnectGuard(Protocol):
    async def addresses(self, host: str, port: int) -> Sequence[str]:
        """The addresses a connection to ``host`` may go to (raises :class:`HttpError` when
        none may)."""
        ...


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    @functools.lru_cache(maxsize=1024)  # a gateway calls the same few URLs all the time
    def of(cls, url: str) -> tuple[Origin, str]:
        """``(origin, request target)`` of an absolute http(s) URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"not an absolute http(s) URL: {url[:200]}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port), target

    @property
    def host_header(self) -> bytes:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode("ascii")


class _Connection:
    """One pooled connection: writes requests whole, parses responses with ``httptools``."""

    __slots__ = ("body", "done", "eof", "guarded", "head_bytes", "head_done", "headers",
                 "idle_since", "keep_alive", "max_header_bytes", "origin", "parser", "reused",
                 "status", "stream")

    def __init__(self, stream: trio.abc.Stream, origin: Origin, max_header_bytes: int, *,
                 guarded: bool = False) -> None:
        self.stream = stream
        self.origin = origin
        self.guarded = guarded
        self.max_header_bytes = max_header_bytes
        self.parser = httptools.HttpResponseParser(self)
        self.reused = False
        self.idle_since = 0.0
        """trio's clock when it last went back to the pool."""
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.done = False
        self.eof = False
        self.keep_alive = True

    async def head(self) -> None:
        """Read until the response's head (a final one: 1xx heads are passed over)."""
        while not self.head_done:
            await self.read_more()

    async def read_more(self) -> None:
        """Read and parse what the server sent next; :class:`HttpError` when it broke off."""
        data = await self.stream.receive_some(_READ_CHUNK)
        if not data:
            self.eof = True
            self.keep_alive = False
            if self.head_done and self._delimited_by_close():
                self.done = True  # a body without length ends with the connection
                return
            raise HttpError(f"{self.origin.host} closed the connection before the response "
                            "ended")
        if not self.head_done:
            self.head_bytes += len(data)  # the head still coming, held by the parser
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.done:  # bytes after a whole response: that one stands, the connection not
                self.keep_alive = False
                return
            raise HttpError(f"the response from {self.origin.host} cannot be parsed: "
                            f"{exc}") from None
        if self.head_bytes > self.max_header_bytes:
            raise HttpError(f"the response head from {self.origin.host} is larger than "
                            f"{self.max_header_bytes} bytes")

    def _delimited_by_close(self) -> bool:
        return not any(name in (b"content-length", b"transfer-encoding")
                       for name, _ in self.headers)

    def reusable(self) -> bool:
        if self.done and self.keep_alive and not self.eof:
            self._reset()
            return True
        return False

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)

    # httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue): its head is not the response's
            self.headers = []
            return
        self.status = status
        self.head_done = True
        self.head_bytes = sum(len(name) + len(value) for name, value in self.headers)
        # (the bytes read while it came may have held the body's first bytes too)
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.head_done:
            self.done = True


class HttpResponse:
    """A response whose body is read as it arrives."""

    def __init__(self, connection: _Connection, body_idle: float | None = None) -> None:
        self._connection = connection
        self._body_idle = body_idle
        self.status: int = connection.status
        self.headers: list[tuple[bytes, bytes]] = connection.headers

    def header(self, name: str) -> str | None:
        """The first value of a header, case-insensitively; None when absent."""
        key = name.lower().encode("ascii")
        for header, value in self.headers:
            if header == key:
                return value.decode("latin-1")
        return None

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while True:
            if connection.body:
                parts = connection.body
                connection.body = []
                yield b"".join(parts)  # one part: that very object, no copy
            elif connection.done:
                return
            else:
                await self._read_more()

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`HttpError` if it is longer than ``limit`` bytes. (A plain
        loop, not ``iter_bytes``: this is the hot path of every JSON reply.)"""
        connection = self._connection
        while not connection.done:
            if sum(map(len, connection.body)) > limit:
                break
            await self._read_more()
        parts = connection.body
        connection.body = []
        data = b"".join(parts)
        if len(data) > limit:
            raise HttpError(f"the response body is larger than {limit} bytes")
        return data

    def arrived_whole(self) -> bytes | None:
        """The whole body when it came with the head (nothing left to read), else None."""
        connection = self._connection
        if not connection.done:
            return None
        parts = connection.body
        connection.body = []
        return b"".join(parts)

    async def _read_more(self) -> None:
        try:
            if self._body_idle is None:
                await self._connection.read_more()
                return
            with trio.move_on_after(self._body_idle) as waited:
                await self._connection.read_more()
            if waited.cancelled_caught:
                raise HttpError(f"{self._connection.origin.host} sent no more of the response "
                                f"within {self._body_idle:g}s")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise HttpError(f"the response from {self._connection.origin.host} broke off: "
                            f"{exc}") from None

    @property
    def complete(self) -> bool:
        return self._connection.done and not self._connection.body


class _Streaming:
    """:meth:`HttpClient.stream`'s block (a class: a generator-based one cost ~1.5 us a
    request)."""

    __slots__ = ("_args", "_client", "_response")

    def __init__(self, client: HttpClient, method: str, url: str,
                 headers: Iterable[tuple[str, str]], body: bytes,
                 guard: ConnectGuard | None) -> None:
        self._client = client
        self._args = (method, url, headers, body, guard)
        self._response: HttpResponse | None = None

    async def __aenter__(self) -> HttpResponse:
        self._response = await self._client._send(*self._args)
        return self._response

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        assert self._response is not None
        await self._client._finish(self._response, exc_type is not None)


IDLE_EXPIRY = 30.0
"""Seconds an idle pooled connection is kept (httpx keeps 5, Go's http.Transport 90)."""


class HttpClient:
    def __init__(self, *, max_idle_per_origin: int = 64, max_idle: int = 512,
                 max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 ssl_context: ssl.SSLContext | None = None,
                 deadlines: Deadlines = Deadlines()) -> None:
        self.max_idle_per_origin = max_idle_per_origin
        self.deadlines = deadlines
        self.max_idle = max_idle
        self._idle_count = 0
        self.max_header_bytes = max_header_bytes
        self.ssl_context = ssl_context or ssl.create_default_context()
        # This client speaks HTTP/1.1 only: say so in ALPN, or a server may pick h2.
        self.ssl_context.set_alpn_protocols(["http/1.1"])
        self._idle: dict[tuple[Origin, bool], list[_Connection]] = {}
        """Idle connections by origin and whether they were made through a guard."""
        self._closed = False

    @classmethod
    def trusting(cls, ca_bundle: str) -> HttpClient:
        """A client that also trusts the PEM CA certificates of ``ca_bundle`` (a private
        CA's servers), besides the system's."""
        context = ssl.create_default_context()
        context.load_verify_locations(cadata=ca_bundle)
        return cls(ssl_context=context)

    async def _connect(self, origin: Origin, guard: ConnectGuard | None = None) -> _Connection:
        limit = self.deadlines.connect
        if limit is None:
            return await self._open(origin, guard)
        with trio.move_on_after(limit) as waited:
            return await self._open(origin, guard)
        assert waited.cancelled_caught
        raise HttpError(f"connecting to {origin.host}:{origin.port} took longer than "
                        f"{limit:g}s")

    async def _open(self, origin: Origin, guard: ConnectGuard | None) -> _Connection:
        try:
            if guard is None:
                stream: trio.abc.Stream = adopt(
                    await trio.open_tcp_stream(origin.host, origin.port))
            else:
                stream = await _open_first(await guard.addresses(origin.host, origin.port),
                                           origin.port)
            if origin.scheme == "https":
                tls = trio.SSLStream(stream, self.ssl_context, server_hostname=origin.host,
                                     https_compatible=True)
                await tls.do_handshake()
                stream = tls
        except (OSError, trio.BrokenResourceError) as exc:
            raise HttpError(connect_failure(exc, origin.host, origin.port)) from None
        return _Connection(stream, origin, self.max_header_bytes, guarded=guard is not None)

    def _checkout(self, origin: Origin, guarded: bool) -> _Connection | None:
        idle = self._idle.get((origin, guarded))
        if not idle:
            return None
        connection = idle.pop()
        self._idle_count -= 1
        if not idle:
            del self._idle[origin, guarded]
        connection.reused = True
        return connection

    async def _release(self, connection: _Connection) -> None:
        key = (connection.origin, connection.guarded)
        idle = self._idle.get(key, [])
        if (self._closed or len(idle) >= self.max_idle_per_origin
                or self._idle_count >= self.max_idle or not connection.reusable()):
            await connection.aclose()
            return
        connection.idle_since = trio.current_time()
        self._idle.setdefault(key, idle).append(connection)
        self._idle_count += 1

    async def close_idle(self, older_than: float) -> int:
        """Close the pooled connections idle for more than ``older_than`` seconds; how many."""
        cutoff = trio.current_time() - older_than
        expired: list[_Connection] = []
        for key, idle in list(self._idle.items()):
            stale = 0
            while stale < len(idle) and idle[stale].idle_since < cutoff:
                stale += 1
            if stale:
                expired += idle[:stale]
                del idle[:stale]
                if not idle:
                    del self._idle[key]
        self._idle_count -= len(expired)
        for connection in expired:
            await connection.aclose()
        return len(expired)

    async def expire_idle_forever(self, expiry: float = IDLE_EXPIRY) -> None:
        """Close idle connections once they were unused for ``expiry`` seconds (checked every
        half of it)."""
        while True:
            await trio.sleep(expiry / 2)
            await self.close_idle(expiry)

    async def _exchange(self, connection: _Connection, wire: bytes) -> None:
        """Send the request (one write: a syscall and a trio checkpoint per part was a fifth
        of the gateway's CPU per call) and read the response's head."""
        await connection.stream.send_all(wire)
        limit = self.deadlines.head
        if limit is None:
            await connection.head()
            return
        with trio.move_on_after(limit) as waited:
            await connection.head()
        if waited.cancelled_caught:
            raise _HeadTimeout(f"{connection.origin.host} sent no response head within "
                               f"{limit:g}s")

    def stream(self, method: str, url: str, *, headers: Iterable[tuple[str, str]] = (),
               body: bytes = b"", guard: ConnectGuard | None = None) -> _Streaming:
        """``async with client.stream(...) as response``: send a request, get the response
        with its body still to be read.

        Leaving the block before the body ended closes the connection; a finished exchange
        returns it to the pool.
        """
        return _Streaming(self, method, url, headers, body, guard)

    async def _send(self, method: str, url: str, headers: Iterable[tuple[str, str]],
                    body: bytes, guard: ConnectGuard | None) -> HttpResponse:
        origin, target = Origin.of(url)
        wire = _request_bytes(method, target, origin, headers, body)
        connection = self._checkout(origin, guard is not None) or await self._connect(
            origin, guard)
        try:
            try:
                await self._exchange(connection, wire)
            except (trio.BrokenResourceError, trio.ClosedResourceError, HttpError,
                    OSError) as exc:
                if isinstance(exc, _HeadTimeout):
                    raise
                if not connection.reused:
                    raise HttpError(f"request to {origin.host}:{origin.port} failed: "
                                    f"{exc}") from None
                await connection.aclose()
                connection = await self._connect(origin, guard)  # the idle one was closed
                await self._exchange(connection, wire)
        except BaseException:
            await connection.aclose()
            raise
        if method == "HEAD":  # no body follows, whatever the head says: not reusable
            connection.done = True
            connection.keep_alive = False
        return HttpResponse(connection, self.deadlines.body_idle)

    async def _finish(self, response: HttpResponse, failed: bool) -> None:
        if response.complete and not failed:
            await self._release(response._connection)
        else:
            await response._connection.aclose()

    async def request(self, method: str, url: str, *, headers: Iterable[tuple[str, str]] = (),
                      body: bytes = b"", limit: int = 16 * 1024 * 1024,
                      guard: ConnectGuard | None = None
                      ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """A whole exchange: ``(status, headers, body)``."""
        async with self.stream(method, url, headers=headers, body=body,
                               guard=guard) as response:
            data = await response.read(limit)
            return response.status, response.headers, data

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()


def _request_bytes(method: str, target: str, origin: Origin,
                   headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """The request on the wire; :class:`HttpError` for a header that would break the framing
    (a name that is not a token, a line break or NUL in a value)."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    has_host = False
    for name, value in headers:
        lowered = name.lower()
        if lowered not in _USUAL_NAMES and not _TOKEN.fullmatch(lowered):
            raise HttpError(f"request header {name[:64]!r}: not a valid header")
        if lowered == "host":
            has_host = True
        value = value.strip(" \t")
        lines.append(f"{lowered}: {value}\r\n")
    if not has_host:
        lines.insert(1, f"host: {origin.host_header.decode('ascii')}\r\n")
    if body or method not in ("GET", "HEAD", "DELETE"):
        lines.append(f"content-length: {len(body)}\r\n")
    lines.append("\r\n")
    head = "".join(lines)
    if head.count("\n") != len(lines) or head.count("\r") != len(lines) or "\0" in head:
        bad = next((name for name, value in headers if _NOT_IN_VALUE.search(value)), "")
        raise HttpError(f"request header {bad[:64]!r}: not a valid header")
    return head.encode("latin-1") + body


async def _open_first(addresses: Sequence[str], port: int) -> LeanSocketStream:
    """A TCP connection to the first of ``addresses`` (IP literals: no lookup) that takes it."""
    failure: OSError | None = None
    for address in addresses:
        try:
            return adopt(await trio.open_tcp_stream(address, port))
        except OSError as exc:
            failure = exc
    raise failure or OSError("no address to connect to")
