"""WebSocket connections (RFC 6455) on trio streams, with wsproto: both handshakes, then whole
messages in and out, with no task of their own.

The rules it keeps:

* **No reader task.** :meth:`WebSocket.receive` reads the stream itself, so the one task that
  takes messages is the only one woken for them; every message that one read completed is kept
  (in order) for the next calls. A ping is answered from there, and the peer's Close is
  answered and ends the messages (:attr:`WebSocket.close_code` says how it ended: the peer's
  code, 1006 when the stream just ended, 1009 for a message past ``max_message_bytes``).
* **Writes in order, without waiting when the socket takes them.** :meth:`WebSocket.send` may
  be called by many tasks at once. On a plain socket with no write in progress the frame goes
  straight to the socket; what it does not take, and every frame while another is being
  written, goes through one lock, in the order the frames were made, so frames never
  interleave. A write once started is finished even if its task is cancelled (a frame cut in
  half would break the connection for every task using it), within :data:`WRITE_LIMIT`
  seconds: a peer that takes nothing for that long has its connection closed.
* **Bounded.** A message (all its fragments) is at most ``max_message_bytes`` (past it: Close
  1009); a handshake has ``timeout`` seconds; reads are at most :data:`MAX_READ` bytes.
* The server side is ASGI's WebSocket protocol (:func:`serve_asgi`) for the lean HTTP/1.1
  server's upgraded connections; the client side is :func:`open_websocket`.
"""

from __future__ import annotations

import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .asgi import ASGIApp, Scope
from .connect_errors import connect_failure
from .socket_stream import LeanSocketStream, adopt

__all__ = ["MAX_MESSAGE_BYTES", "WEBSOCKET_EXTENSION", "WebSocket", "WebSocketError",
           "WebSocketRejected", "open_websocket", "serve_asgi"]

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_READ = 64 * 1024
WRITE_LIMIT = 10.0
"""Seconds a started write may take before the connection is taken for dead."""
WEBSOCKET_EXTENSION = "vmcp.websocket"
"""The scope extension of :func:`serve_asgi`'s sessions: an object whose ``socket`` is the
:class:`WebSocket` once accepted, for an app that would rather use it than ASGI's messages."""
_ABNORMAL = 1006
_TOO_BIG = 1009

Message = bytes | str


class WebSocketError(Exception):
    """The connection could not be made, or broke (the message says how)."""


class WebSocketRejected(WebSocketError):
    """The server answered the handshake with an HTTP status instead of accepting it."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the server refused the WebSocket with HTTP {status}")
        self.status = status


class WebSocket:
    """One open WebSocket connection (after its handshake), either side."""

    def __init__(self, protocol: Connection, stream: trio.abc.Stream, *,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._protocol = protocol
        self._stream = stream
        self._fd = stream.socket.fileno() if isinstance(stream, LeanSocketStream) else -1
        """The socket, for writes without waiting (-1: the stream is not a plain socket)."""
        self._lock = trio.Lock()
        self._messages: deque[Message] = deque()
        self._parts: list[Any] = []
        self._part_bytes = 0
        self._pending = True
        """Frames may have come with the handshake: look at the protocol's events first."""
        self.max_message_bytes = max_message_bytes
        self.close_code: int | None = None
        """Set when the connection ended: the peer's Close code, or how it broke."""
        self.close_reason = ""

    # --- receiving -----------------------------------------------------------------------------

    async def receive(self) -> Message | None:
        """The next whole message (bytes or str); None once the connection has ended."""
        messages = self._messages
        while not messages:
            if self.close_code is not None:
                return None
            if self._pending:
                self._pending = False
            else:
                try:
                    data = await self._stream.receive_some(MAX_READ)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                try:
                    self._protocol.receive_data(bytes(data) if data else None)
                except LocalProtocolError:  # closed here already
                    self._ended(_ABNORMAL, "the connection is closed")
                    return None
            await self._take_events()
        return messages.popleft()

    async def _take_events(self) -> None:
        for event in self._protocol.events():
            if isinstance(event, BytesMessage | TextMessage):
                self._part_bytes += len(event.data)
                if self._part_bytes > self.max_message_bytes:
                    await self.close(_TOO_BIG, "message too big")
                    self._ended(_TOO_BIG, f"a message larger than {self.max_message_bytes} "
                                          "bytes")
                    return
                if not event.message_finished:
                    self._parts.append(event.data)
                    continue
                if self._parts:
                    self._parts.append(event.data)
                    joined: Message = ("".join(self._parts) if isinstance(event.data, str)
                                       else b"".join(self._parts))
                    self._parts.clear()
                else:
                    joined = event.data if isinstance(event.data, str) else bytes(event.data)
                self._part_bytes = 0
                self._messages.append(joined)
            elif isinstance(event, Ping):
                await self._send_event(event.response())
            elif isinstance(event, CloseConnection):
                if self._protocol.state is ConnectionState.REMOTE_CLOSING:
                    await self._send_event(event.response())
                self._ended(event.code, event.reason or "")
                return

    def _ended(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason

    # --- sending -------------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        """Send one whole message (raises WebSocketError once the connection has ended)."""
        self._check_open()
        event = (TextMessage(data=message) if isinstance(message, str)
                 else BytesMessage(data=message))
        await self._write(self._protocol.send(event))

    async def send_many(self, messages: Sequence[bytes]) -> None:
        """Send binary messages in one write (raises WebSocketError once the connection has
        ended)."""
        self._check_open()
        send = self._protocol.send
        await self._write(b"".join([send(BytesMessage(data=message)) for message in messages]))

    def _check_open(self) -> None:
        if self.close_code is not None or self._protocol.state is not ConnectionState.OPEN:
            raise WebSocketError(f"the WebSocket is closed ({self.close_code or 'closing'})")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a Close (once; nothing when the connection already ended)."""
        if self._protocol.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            with suppress(WebSocketError):
                await self._send_event(CloseConnection(code=code, reason=reason))

    async def _send_event(self, event: Any) -> None:
        try:
            data = self._protocol.send(event)
        except LocalProtocolError:  # the connection closed meanwhile: nothing to answer
            return
        await self._write(data)

    async def _write(self, data: bytes) -> None:
        if self._fd >= 0 and not self._lock.locked():
            try:
                sent = os.write(self._fd, data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._ended(_ABNORMAL, f"the connection broke: {exc.strerror or exc}")
                raise WebSocketError(self.close_reason) from None
            if sent == len(data):
                return
            data = data[sent:]
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + WRITE_LIMIT) as \
                    limit:
                try:
                    await self._stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._ended(_ABNORMAL, f"the connection broke: {exc}")
                    raise WebSocketError(self.close_reason) from None
            if limit.cancelled_caught:
                self._ended(_ABNORMAL, f"the peer took nothing for {WRITE_LIMIT:g} s")
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self._stream)
                raise WebSocketError(self.close_reason)
        finally:
            self._lock.release()


# --- the client side -------------------------------------------------------------------------

@asynccontextmanager
async def open_websocket(url: str, headers: Sequence[tuple[bytes, bytes]] = (), *,
                         timeout: float = 30.0,
                         max_message_bytes: int = MAX_MESSAGE_BYTES) -> AsyncIterator[WebSocket]:
    """A WebSocket to ``url`` (``ws://`` or ``wss://``, verified against the system's CAs),
    closed (1000) at the end of the block. Raises :class:`WebSocketRejected` when the server
    answers with a status, :class:`WebSocketError` when the host cannot be reached (saying
    why: :func:`~.connect_errors.connect_failure`), the handshake fails or it takes longer
    than ``timeout`` seconds."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise WebSocketError(f"not a ws:// or wss:// URL: {url[:200]!r}")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    host_header = parts.netloc.rpartition("@")[2]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with trio.move_on_after(timeout) as waited:
        try:
            stream: trio.abc.Stream = adopt(await trio.open_tcp_stream(parts.hostname, port))
        except OSError as exc:
            raise WebSocketError(connect_failure(exc, parts.hostname, port)) from None
        try:
            if secure:
                stream = trio.SSLStream(stream, ssl.create_default_context(),
                                        server_hostname=parts.hostname, https_compatible=True)
                try:
                    await stream.do_handshake()
                except (OSError, trio.BrokenResourceError) as exc:
                    raise WebSocketError(connect_failure(exc, parts.hostname, port)) from None
            socket = await _client_handshake(stream, host_header, target, headers,
                                             max_message_bytes)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
    if waited.cancelled_caught:
        raise WebSocketError(f"no WebSocket handshake with {host_header} within {timeout:g} s")
    try:
        yield socket
    finally:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(1):
                await socket.close()
            await trio.aclose_forcefully(stream)


async def _client_handshake(stream: trio.abc.Stream, host: str, target: str,
                            headers: Sequence[tuple[bytes, bytes]],
                            max_message_bytes: int) -> WebSocket:
    handshake = WSConnection(ConnectionType.CLIENT)
    try:
        await stream.send_all(handshake.send(Request(host=host, target=target,
                                                     extra_headers=list(headers))))
        while True:
            data = await stream.receive_some(MAX_READ)
            if not data:
                raise WebSocketError("the server closed the connection during the handshake")
            handshake.receive_data(bytes(data))
            for event in handshake.events():
                if isinstance(event, AcceptConnection):
                    assert handshake.connection is not None
                    return WebSocket(handshake.connection, stream,
                                     max_message_bytes=max_message_bytes)
                if isinstance(event, RejectConnection):
                    raise WebSocketRejected(event.status_code)
    except RemoteProtocolError as exc:
        raise WebSocketError(f"the server's handshake answer is not valid: {exc}") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise WebSocketError(f"the connection broke during the handshake: {exc}") from None


# --- the server side (ASGI) ------------------------------------------------------------------

_BAD_HANDSHAKE = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n"
                  b"connection: close\r\ncontent-length: 31\r\n\r\n"
                  b"the WebSocket handshake is bad\n")


async def serve_asgi(app: ASGIApp, stream: trio.abc.Stream, request_bytes: bytes,
                     scope: Scope, *,
                     max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Serve one upgrade request (``request_bytes``: everything read so far, its head first;
    ``scope``: its HTTP scope) as an ASGI WebSocket session: ``websocket.connect``, then the
    app accepts (or closes: 403), sends and receives; a handshake wsproto refuses is answered
    400. The connection is closed (1000) when the app returns without closing it. The scope's
    :data:`WEBSOCKET_EXTENSION` gives the app the :class:`WebSocket` itself once accepted."""
    handshake = WSConnection(ConnectionType.SERVER)
    try:
        handshake.receive_data(request_bytes)
        request = next((e for e in handshake.events() if isinstance(e, Request)), None)
    except RemoteProtocolError:
        request = None
    if request is None:
        await stream.send_all(_BAD_HANDSHAKE)
        return
    session = _AsgiSession(handshake, stream, max_message_bytes)
    websocket_scope = {**scope, "type": "websocket",
                       "scheme": "wss" if scope.get("scheme") == "https" else "ws",
                       "subprotocols": list(request.subprotocols),
                       "extensions": {**scope.get("extensions", {}),
                                      WEBSOCKET_EXTENSION: session}}
    await app(websocket_scope, session.receive, session.send)
    await session.finish()


class _AsgiSession:
    """The ``receive`` and ``send`` of one ASGI WebSocket session."""

    def __init__(self, handshake: WSConnection, stream: trio.abc.Stream,
                 max_message_bytes: int) -> None:
        self._handshake = handshake
        self._stream = stream
        self._max = max_message_bytes
        self._connected = False
        self.socket: WebSocket | None = None
        self._refused = False

    async def receive(self) -> dict[str, Any]:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        socket = self.socket
        message = await socket.receive() if socket is not None else None
        if message is None:
            return {"type": "websocket.disconnect",
                    "code": socket.close_code if socket is not None else _ABNORMAL}
        if isinstance(message, str):
            return {"type": "websocket.receive", "text": message}
        return {"type": "websocket.receive", "bytes": message}

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        socket = self.socket
        if kind == "websocket.send":
            if socket is None:
                raise RuntimeError("websocket.send before websocket.accept")
            data = message.get("bytes")
            with suppress(WebSocketError):  # the peer left: receive() says so
                await socket.send(data if data is not None else message["text"])
        elif kind == "websocket.accept":
            if socket is not None or self._refused:
                raise RuntimeError("websocket.accept twice or after websocket.close")
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", ())]
            data = self._handshake.send(AcceptConnection(
                subprotocol=message.get("subprotocol"), extra_headers=headers))
            assert self._handshake.connection is not None
            self.socket = WebSocket(self._handshake.connection, self._stream,
                                    max_message_bytes=self._max)
            await self.socket._write(data)
        elif kind == "websocket.close":
            if socket is None:
                await self._refuse()
            else:
                await socket.close(message.get("code", 1000), message.get("reason") or "")
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on a WebSocket")

    async def _refuse(self) -> None:
        if not self._refused:
            self._refused = True
            await self._stream.send_all(self._handshake.send(
                RejectConnection(status_code=403, headers=[(b"content-length", b"0")],
                                 has_body=False)))

    async def finish(self) -> None:
        """The app returned: a session never accepted is refused, an open one closed."""
        if self.socket is None:
            await self._refuse()
        else:
            with trio.move_on_after(1):
                await self.socket.close()
