"""A lean HTTP/1.1 client on trio and h11, with a keep-alive connection pool.

Why not httpx: on this hot path (every tools/call goes through it) httpx/httpcore cost ~1.75 ms
of CPU per request, mostly pool bookkeeping (REFERENCE.md), and under trio its HTTP/2 streams
closed early are never reset. This client does only what the gateway needs: HTTP/1.1, TLS,
keep-alive with a bounded idle pool per origin, streamed responses (SSE) that can be abandoned
at any point, and trio-native cancellation.

Rules it keeps:

* A connection returns to the pool only when h11 says both sides finished the exchange cleanly;
  a response abandoned early (an SSE stream the caller stopped reading) closes its connection.
* A request on a *reused* connection that fails before any response byte arrived is retried
  once on a fresh connection: the server closed the idle connection, so it never saw the
  request. Nothing else is retried.
* Bounds: response header size (h11's limit), idle connections per origin and in all, and the
  body size of :meth:`HttpResponse.read`.
* A request with a ``guard`` (:class:`ConnectGuard`: the SSRF guard of a URL a peer supplied)
  connects to the addresses the guard gives for the host, not to a second lookup of the name.
  Its connection is pooled apart: a guarded request reuses only a connection made through a
  guard, never one made to whatever the name resolved to.

Timeouts are the caller's: wrap calls in ``trio.fail_after`` / ``trio.move_on_after``.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import h11
import trio

__all__ = ["ConnectGuard", "HttpClient", "HttpError", "HttpResponse", "Origin"]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_READ_CHUNK = 65536


class HttpError(Exception):
    """The exchange failed (connection refused, reset, protocol error, body too large)."""


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
    def __init__(self, stream: trio.abc.Stream, origin: Origin, max_header_bytes: int, *,
                 guarded: bool = False) -> None:
        self.stream = stream
        self.origin = origin
        self.guarded = guarded
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_header_bytes)
        self.reused = False

    async def next_event(self) -> h11.Event:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await self.stream.receive_some(_READ_CHUNK)
            self.h11.receive_data(bytes(data))

    def reusable(self) -> bool:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)


class HttpResponse:
    """A response whose body is read as it arrives."""

    def __init__(self, connection: _Connection, head: h11.Response) -> None:
        self._connection = connection
        self.status: int = head.status_code
        self.headers: list[tuple[bytes, bytes]] = list(head.headers)
        self._done = False

    def header(self, name: str) -> str | None:
        """The first value of a header, case-insensitively; None when absent."""
        key = name.lower().encode("ascii")
        for header, value in self.headers:
            if header == key:
                return value.decode("latin-1")
        return None

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        while not self._done:
            try:
                event = await self._connection.next_event()
            except (h11.RemoteProtocolError, trio.BrokenResourceError,
                    trio.ClosedResourceError, OSError) as exc:
                raise HttpError(f"the response from {self._connection.origin.host} broke off: "
                                f"{exc}") from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
            elif isinstance(event, h11.ConnectionClosed):
                raise HttpError(f"{self._connection.origin.host} closed the connection "
                                "before the response ended")

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`HttpError` if it is longer than ``limit`` bytes. (A plain
        loop, not ``iter_bytes``: this is the hot path of every JSON reply.)"""
        parts: list[bytes] = []
        size = 0
        connection = self._connection
        while not self._done:
            try:
                event = await connection.next_event()
            except (h11.RemoteProtocolError, trio.BrokenResourceError,
                    trio.ClosedResourceError, OSError) as exc:
                raise HttpError(f"the response from {connection.origin.host} broke off: "
                                f"{exc}") from None
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise HttpError(f"the response body is larger than {limit} bytes")
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
            elif isinstance(event, h11.ConnectionClosed):
                raise HttpError(f"{connection.origin.host} closed the connection before the "
                                "response ended")
        return b"".join(parts)

    @property
    def complete(self) -> bool:
        return self._done


class HttpClient:
    def __init__(self, *, max_idle_per_origin: int = 64, max_idle: int = 512,
                 max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.max_idle_per_origin = max_idle_per_origin
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
        try:
            if guard is None:
                stream: trio.abc.Stream = await trio.open_tcp_stream(origin.host, origin.port)
            else:
                stream = await _open_first(await guard.addresses(origin.host, origin.port),
                                           origin.port)
            if origin.scheme == "https":
                tls = trio.SSLStream(stream, self.ssl_context, server_hostname=origin.host,
                                     https_compatible=True)
                await tls.do_handshake()
                stream = tls
        except (OSError, trio.BrokenResourceError) as exc:
            raise HttpError(f"cannot connect to {origin.host}:{origin.port}: {exc}") from None
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
        self._idle.setdefault(key, idle).append(connection)
        self._idle_count += 1

    async def _exchange(self, connection: _Connection, method: bytes, target: str,
                        headers: list[tuple[bytes, bytes]], body: bytes) -> h11.Response:
        # One write for the whole request: a syscall (and a trio checkpoint) per part was a
        # fifth of the gateway's CPU per call.
        h11_conn = connection.h11
        wire = h11_conn.send(h11.Request(method=method, target=target.encode("ascii"),
                                         headers=headers)) or b""
        if body:
            wire += h11_conn.send(h11.Data(data=body)) or b""
        wire += h11_conn.send(h11.EndOfMessage()) or b""
        await connection.stream.send_all(wire)
        while True:
            event = await connection.next_event()
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.InformationalResponse):
                continue
            raise HttpError(f"{connection.origin.host} closed the connection without a response")

    @asynccontextmanager
    async def stream(self, method: str, url: str, *,
                     headers: Iterable[tuple[str, str]] = (), body: bytes = b"",
                     guard: ConnectGuard | None = None) -> AsyncIterator[HttpResponse]:
        """Send a request; yield the response with its body still to be read.

        Leaving the block before the body ended closes the connection; a finished exchange
        returns it to the pool.
        """
        origin, target = Origin.of(url)
        wire = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if not any(name == b"host" for name, _ in wire):
            wire.insert(0, (b"host", origin.host_header))
        if body or method not in ("GET", "HEAD", "DELETE"):
            wire.append((b"content-length", str(len(body)).encode("ascii")))
        verb = method.encode("ascii")
        connection = self._checkout(origin, guard is not None) or await self._connect(
            origin, guard)
        try:
            try:
                head = await self._exchange(connection, verb, target, wire, body)
            except (h11.RemoteProtocolError, h11.LocalProtocolError, trio.BrokenResourceError,
                    trio.ClosedResourceError, HttpError, OSError) as exc:
                if not connection.reused:
                    raise HttpError(f"request to {origin.host}:{origin.port} failed: "
                                    f"{exc}") from None
                await connection.aclose()
                connection = await self._connect(origin, guard)  # the idle one was closed
                head = await self._exchange(connection, verb, target, wire, body)
        except BaseException:
            await connection.aclose()
            raise
        response = HttpResponse(connection, head)
        try:
            yield response
        except BaseException:
            await connection.aclose()
            raise
        if response.complete:
            await self._release(connection)
        else:
            await connection.aclose()

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


async def _open_first(addresses: Sequence[str], port: int) -> trio.SocketStream:
    """A TCP connection to the first of ``addresses`` (IP literals: no lookup) that takes it."""
    failure: OSError | None = None
    for address in addresses:
        try:
            return await trio.open_tcp_stream(address, port)
        except OSError as exc:
            failure = exc
    raise failure or OSError("no address to connect to")
