"""The tunnel's frame protocol: many HTTP exchanges over one WebSocket, with no I/O.

``vmcp tunnel relay`` (the public side) and ``vmcp proxy tunnel`` (the agent next to the
internal server) keep one WebSocket between them; each HTTP exchange a client makes at the relay
is a *stream* on it. :class:`TunnelProtocol` is one side's state of that connection: it turns
what that side wants to send into frames, and frames received into events, and says when the
peer broke the rules. Like h11 it does no I/O and keeps no clock: the caller sends the bytes
(one frame per WebSocket binary message), reads the events, and closes the connection on a
:class:`ProtocolError`.

The wire. A frame is ``type`` (1 byte), ``stream id`` (4 bytes, big-endian), then the payload.
The type byte's high bit (``END_STREAM``, as HTTP/2's flag) may mark an OPEN, HEAD or DATA as
the last frame of the sender's half, so a small exchange is two messages each way (OPEN, then
DATA+END_STREAM; HEAD, then DATA+END_STREAM) or fewer, instead of three:

========  ===============  ===================================================================
type      direction        payload
========  ===============  ===================================================================
OPEN      relay -> agent   the request head: JSON ``{"method", "path", "query", "headers"}``
HEAD      agent -> relay   the response head: JSON ``{"status", "headers"}``
DATA      either           body bytes (1 to ``max_payload``), counted against the window
END       either           nothing: the sender's half of the stream is complete
RESET     either           a UTF-8 reason: the stream is aborted, both halves
WINDOW    either           4 bytes: the sender may be sent that many more bytes on the stream
PING      either, id 0     8 bytes, echoed by a PONG
PONG      either, id 0     the 8 bytes of the PING it answers
========  ===============  ===================================================================

The rules it keeps (a frame that breaks one is a :class:`ProtocolError`):

* Streams are opened by the relay only, with ids that increase from 1 and are never reused;
  at most ``max_streams`` are open at once (the agent refuses more as a protocol error: the
  relay counts the same limit, so only a broken or hostile relay exceeds it).
* Each half of a stream goes ``open -> ended``: DATA only while the sender's half is open,
  one END (or END_STREAM on the half's last OPEN, HEAD or DATA; on another type it is an
  error). The agent's half starts with exactly one HEAD (DATA and END before it are errors);
  the relay's half is open from OPEN on. A stream whose two halves ended, or that was reset, is
  closed; frames that still arrive for a closed stream (the peer sent them before it saw the
  RESET) are ignored, never an error; frames for a stream never opened are.
* Flow control per stream and direction, as in HTTP/2: each side may send at most
  ``window`` bytes of DATA until the receiver grants more with WINDOW, which it does once the
  application has consumed half a window (:meth:`TunnelProtocol.consumed`). Sending past the
  peer's grant raises :class:`FlowControlBlocked` here (wait for :class:`WindowOpened`);
  receiving past ours is a protocol error. So a slow reader holds at most one window per
  stream, and one stuck stream never blocks the others.
* Everything is bounded: the payload of a frame (``max_payload``), a head (``max_head_bytes``,
  with at most 100 headers), the open streams, a window (2**31 - 1).
* A request head is a method of at most 16 letters, an origin-form path and query
  (:func:`~vmcp_trio.protocol.targets.target_problem`) and at most 100 headers
  (:func:`check_request_head`). The relay refuses to open a stream for a request that breaks
  this (:class:`HeadRefused`: the client gets 400 or 431, and the tunnel never sees it); an
  OPEN that carries such a head anyway is refused by the agent as that stream's error alone
  (:class:`StreamRefused`: it resets the stream), never the connection's, so one request cannot
  cut the exchanges of others.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal

from .targets import target_problem

__all__ = ["END_STREAM", "DataReceived", "Event", "FlowControlBlocked", "FrameType", "HeadReceived",
           "HeadRefused", "PingReceived", "PongReceived", "ProtocolError", "StreamEnded",
           "StreamOpened", "StreamRefused", "StreamReset", "TunnelProtocol", "WindowOpened",
           "check_request_head"]

Role = Literal["relay", "agent"]
Headers = list[tuple[str, str]]

_HEADER = struct.Struct(">BI")
END_STREAM = 0x80
"""The flag bit of the type byte: the sender's half of the stream ends with this frame."""
MAX_WINDOW = 2**31 - 1
MAX_HEADERS = 100
MAX_METHOD = 16
PING_BYTES = 8


class FrameType(IntEnum):
    OPEN = 1
    HEAD = 2
    DATA = 3
    END = 4
    RESET = 5
    WINDOW = 6
    PING = 7
    PONG = 8


class ProtocolError(Exception):
    """The peer broke the protocol: close the connection (the message says how)."""


class FlowControlBlocked(Exception):
    """More DATA than the peer granted: send at most :meth:`TunnelProtocol.sendable` bytes."""


class HeadRefused(ValueError):
    """A request head the tunnel does not carry: the HTTP status to answer its client with
    (400, or 431 for its headers) and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def check_request_head(method: object, path: object, query: object, headers: object) -> None:
    """Raise :class:`HeadRefused` unless this is a request head the tunnel carries."""
    if not isinstance(method, str) or not method.isascii() or not method.isalpha() or len(
            method) > MAX_METHOD:
        raise HeadRefused(400, f"the method must be a name of at most {MAX_METHOD} letters")
    if not isinstance(query, str):
        raise HeadRefused(400, "the query must be a string")
    if not isinstance(path, str):
        raise HeadRefused(400, "the path must be a string")
    problem = target_problem(path, query)
    if problem is not None:
        raise HeadRefused(400, problem)
    if not isinstance(headers, list | tuple) or len(headers) > MAX_HEADERS:
        raise HeadRefused(431, f"a request carries at most {MAX_HEADERS} headers")


# --- events ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamOpened:
    stream_id: int
    method: str
    path: str
    query: str
    headers: Headers
    end_stream: bool = False
    """The request has no body (its half ended with the OPEN)."""


@dataclass(frozen=True)
class StreamRefused:
    """An OPEN whose request head breaks :func:`check_request_head`: reset that stream (the
    relay answers its client 502); the connection goes on."""

    stream_id: int
    reason: str


@dataclass(frozen=True)
class HeadReceived:
    stream_id: int
    status: int
    headers: Headers
    end_stream: bool = False
    """The response has no body (the agent's half ended with its HEAD)."""


@dataclass(frozen=True)
class DataReceived:
    stream_id: int
    data: bytes
    end_stream: bool = False
    """The last of the body: the sender's half ended with it."""


@dataclass(frozen=True)
class StreamEnded:
    stream_id: int


@dataclass(frozen=True)
class StreamReset:
    stream_id: int
    reason: str


@dataclass(frozen=True)
class WindowOpened:
    stream_id: int
    increment: int


@dataclass(frozen=True)
class PingReceived:
    payload: bytes


@dataclass(frozen=True)
class PongReceived:
    payload: bytes


Event = (StreamOpened | StreamRefused | HeadReceived | DataReceived | StreamEnded | StreamReset
         | WindowOpened | PingReceived | PongReceived)


# --- one stream --------------------------------------------------------------------------------

@dataclass
class _Stream:
    send_window: int
    receive_window: int
    local_open: bool = True
    remote_open: bool = True
    head_done: bool = False
    """The agent's half began with its HEAD (sent by the agent, received by the relay)."""
    unacknowledged: int = field(default=0)
    """Bytes the application consumed and the peer was not yet granted again."""


def _frame(kind: FrameType, stream_id: int, payload: bytes = b"", *, end: bool = False) -> bytes:
    return _HEADER.pack(kind | END_STREAM if end else kind, stream_id) + payload


def _headers(value: object, what: str) -> Headers:
    if not isinstance(value, list) or len(value) > MAX_HEADERS:
        raise ProtocolError(f"{what}: headers must be a list of at most {MAX_HEADERS} pairs")
    pairs: Headers = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], str) or not item[0]):
            raise ProtocolError(f"{what}: each header must be a [name, value] pair of strings")
        pairs.append((item[0], item[1]))
    return pairs


class TunnelProtocol:
    def __init__(self, role: Role, *, max_streams: int = 100, window: int = 256 * 1024,
                 max_payload: int = 64 * 1024, max_head_bytes: int = 64 * 1024) -> None:
        if not 0 < window <= MAX_WINDOW or max_payload < 1 or max_streams < 1:
            raise ValueError("window, max_payload and max_streams must be positive")
        self.role = role
        self.max_streams = max_streams
        self.window = window
        self.max_payload = max_payload
        self.max_head_bytes = max_head_bytes
        self.streams: dict[int, _Stream] = {}
        """The open streams (not yet closed)."""
        self._last_id = 0
        """The highest stream id opened (sent by the relay, received by the agent)."""

    # --- sending -------------------------------------------------------------------------------

    def _stream(self, stream_id: int) -> _Stream:
        stream = self.streams.get(stream_id)
        if stream is None:
            raise KeyError(f"stream {stream_id} is not open")
        return stream

    def _head_bytes(self, head: dict[str, Any]) -> bytes:
        encoded = json.dumps(head, separators=(",", ":")).encode()
        if len(encoded) > self.max_head_bytes:
            raise ValueError(f"the head is larger than {self.max_head_bytes} bytes")
        return encoded

    def open_stream(self, method: str, path: str, query: str, headers: Headers, *,
                    end: bool = False) -> tuple[int, bytes]:
        """The relay opens a stream for a request: its id and the OPEN frame (``end``: the
        request has no body). Raises :class:`HeadRefused` for a head the agent would refuse
        (answer the client with its status), ValueError when ``max_streams`` are open (answer
        the client 503)."""
        if self.role != "relay":
            raise ValueError("only the relay opens streams")
        check_request_head(method, path, query, headers)
        try:
            payload = self._head_bytes({"method": method, "path": path, "query": query,
                                        "headers": [list(h) for h in headers]})
        except ValueError as exc:
            raise HeadRefused(431, str(exc)) from None
        if len(self.streams) >= self.max_streams:
            raise ValueError(f"{self.max_streams} streams are open")
        self._last_id += 1
        stream_id = self._last_id
        self.streams[stream_id] = _Stream(self.window, self.window, local_open=not end)
        return stream_id, _frame(FrameType.OPEN, stream_id, payload, end=end)

    def send_head(self, stream_id: int, status: int, headers: Headers, *,
                  end: bool = False) -> bytes:
        """The agent's response head, once per stream, before its body (``end``: there is
        none)."""
        stream = self._stream(stream_id)
        if self.role != "agent" or stream.head_done or not stream.local_open:
            raise ValueError(f"stream {stream_id}: no head can be sent now")
        payload = self._head_bytes({"status": status, "headers": [list(h) for h in headers]})
        stream.head_done = True
        if end:
            self._end_local(stream_id, stream)
        return _frame(FrameType.HEAD, stream_id, payload, end=end)

    def sendable(self, stream_id: int) -> int:
        """How many bytes of DATA may be sent on the stream now (0: wait for a window)."""
        stream = self._stream(stream_id)
        return min(stream.send_window, self.max_payload) if stream.local_open else 0

    def send_data(self, stream_id: int, data: bytes, *, end: bool = False) -> bytes:
        """Body bytes within the peer's window (``end``: the last of the body)."""
        stream = self._stream(stream_id)
        if not stream.local_open or (self.role == "agent" and not stream.head_done):
            raise ValueError(f"stream {stream_id}: no data can be sent now")
        if not data:
            raise ValueError("empty DATA")
        if len(data) > self.max_payload or len(data) > stream.send_window:
            raise FlowControlBlocked(f"stream {stream_id}: {len(data)} bytes, "
                                     f"{self.sendable(stream_id)} may be sent")
        stream.send_window -= len(data)
        if end:
            self._end_local(stream_id, stream)
        return _frame(FrameType.DATA, stream_id, data, end=end)

    def send_end(self, stream_id: int) -> bytes:
        stream = self._stream(stream_id)
        if not stream.local_open or (self.role == "agent" and not stream.head_done):
            raise ValueError(f"stream {stream_id}: cannot end now")
        self._end_local(stream_id, stream)
        return _frame(FrameType.END, stream_id)

    def send_reset(self, stream_id: int, reason: str) -> bytes:
        """Abort a stream (both halves); nothing more is sent or taken on it."""
        self.streams.pop(stream_id, None)
        return _frame(FrameType.RESET, stream_id, reason.encode()[:1024])

    def consumed(self, stream_id: int, count: int) -> bytes | None:
        """The application took ``count`` bytes of the stream's DATA: a WINDOW frame granting
        them again once half a window was taken (None before, or for a closed stream)."""
        stream = self.streams.get(stream_id)
        if stream is None or not stream.remote_open:
            return None
        stream.unacknowledged += count
        if stream.unacknowledged < self.window // 2:
            return None
        granted, stream.unacknowledged = stream.unacknowledged, 0
        stream.receive_window += granted
        return _frame(FrameType.WINDOW, stream_id, struct.pack(">I", granted))

    @staticmethod
    def ping(payload: bytes) -> bytes:
        if len(payload) != PING_BYTES:
            raise ValueError(f"a ping carries {PING_BYTES} bytes")
        return _frame(FrameType.PING, 0, payload)

    @staticmethod
    def pong(payload: bytes) -> bytes:
        return _frame(FrameType.PONG, 0, payload)

    def _end_local(self, stream_id: int, stream: _Stream) -> None:
        stream.local_open = False
        self._close_if_done(stream_id, stream)

    def _end_remote(self, stream_id: int, stream: _Stream) -> None:
        stream.remote_open = False
        self._close_if_done(stream_id, stream)

    def _close_if_done(self, stream_id: int, stream: _Stream) -> None:
        if not stream.local_open and not stream.remote_open:
            del self.streams[stream_id]

    # --- receiving -----------------------------------------------------------------------------

    def receive(self, frame: bytes) -> Event | None:
        """The event of one received frame (None: a late frame for a closed stream). Raises
        :class:`ProtocolError`."""
        if len(frame) < _HEADER.size:
            raise ProtocolError(f"a frame of {len(frame)} bytes is shorter than its header")
        kind_value, stream_id = _HEADER.unpack_from(frame)
        payload = frame[_HEADER.size:]
        end = bool(kind_value & END_STREAM)
        try:
            kind = FrameType(kind_value & ~END_STREAM)
        except ValueError:
            raise ProtocolError(f"unknown frame type {kind_value}") from None
        if end and kind not in (FrameType.OPEN, FrameType.HEAD, FrameType.DATA):
            raise ProtocolError(f"END_STREAM on a {kind.name} frame")
        if kind in (FrameType.PING, FrameType.PONG):
            if stream_id != 0 or len(payload) != PING_BYTES:
                raise ProtocolError(f"{kind.name} must be on stream 0 with {PING_BYTES} bytes")
            return PingReceived(payload) if kind is FrameType.PING else PongReceived(payload)
        if stream_id == 0:
            raise ProtocolError(f"{kind.name} on stream 0")
        if kind is FrameType.OPEN:
            return self._opened(stream_id, payload, end)
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id <= self._last_id:
                return None  # closed here (a reset crossed it): late, harmless
            raise ProtocolError(f"{kind.name} for stream {stream_id}, which was never opened")
        if kind is FrameType.RESET:
            del self.streams[stream_id]
            return StreamReset(stream_id, payload[:1024].decode("utf-8", errors="replace"))
        if kind is FrameType.WINDOW:
            return self._window(stream_id, stream, payload)
        if not stream.remote_open:
            raise ProtocolError(f"{kind.name} on stream {stream_id} after its END")
        if kind is FrameType.HEAD:
            return self._head(stream_id, stream, payload, end)
        if self.role == "relay" and not stream.head_done:
            raise ProtocolError(f"{kind.name} on stream {stream_id} before its HEAD")
        if kind is FrameType.DATA:
            if not payload or len(payload) > self.max_payload:
                raise ProtocolError(f"DATA of {len(payload)} bytes on stream {stream_id} "
                                    f"(1 to {self.max_payload})")
            if len(payload) > stream.receive_window:
                raise ProtocolError(f"DATA past the window on stream {stream_id}")
            stream.receive_window -= len(payload)
            if end:
                self._end_remote(stream_id, stream)
            return DataReceived(stream_id, payload, end)
        # END
        if payload:
            raise ProtocolError(f"END with a payload on stream {stream_id}")
        self._end_remote(stream_id, stream)
        return StreamEnded(stream_id)

    def _decode_head(self, payload: bytes, what: str) -> dict[str, Any]:
        if len(payload) > self.max_head_bytes:
            raise ProtocolError(f"{what} larger than {self.max_head_bytes} bytes")
        try:
            head = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError(f"{what} is not JSON") from None
        if not isinstance(head, dict):
            raise ProtocolError(f"{what} is not a JSON object")
        return head

    def _opened(self, stream_id: int, payload: bytes, end: bool) -> StreamOpened | StreamRefused:
        if self.role != "agent":
            raise ProtocolError("OPEN sent to the relay")
        if stream_id <= self._last_id:
            raise ProtocolError(f"OPEN reuses stream id {stream_id}")
        if len(self.streams) >= self.max_streams:
            raise ProtocolError(f"OPEN past {self.max_streams} open streams")
        self._last_id = stream_id  # from here on, a fault of the head is this stream's
        try:
            head = self._decode_head(payload, "the request head")
            method, path, query = head.get("method"), head.get("path"), head.get("query", "")
            raw_headers = head.get("headers", [])
            check_request_head(method, path, query, raw_headers)
            headers = _headers(raw_headers, "the request head")
        except (ProtocolError, HeadRefused) as exc:
            return StreamRefused(stream_id, str(exc))
        assert isinstance(method, str) and isinstance(path, str) and isinstance(query, str)
        self.streams[stream_id] = _Stream(self.window, self.window, remote_open=not end)
        return StreamOpened(stream_id, method, path, query, headers, end)

    def _head(self, stream_id: int, stream: _Stream, payload: bytes,
              end: bool) -> HeadReceived:
        if self.role != "relay":
            raise ProtocolError("HEAD sent to the agent")
        if stream.head_done:
            raise ProtocolError(f"a second HEAD on stream {stream_id}")
        head = self._decode_head(payload, "the response head")
        status = head.get("status")
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise ProtocolError("the response head's status is not an HTTP status")
        headers = _headers(head.get("headers", []), "the response head")
        stream.head_done = True
        if end:
            self._end_remote(stream_id, stream)
        return HeadReceived(stream_id, status, headers, end)

    @staticmethod
    def _window(stream_id: int, stream: _Stream, payload: bytes) -> WindowOpened:
        if len(payload) != 4:
            raise ProtocolError(f"WINDOW with {len(payload)} bytes on stream {stream_id}")
        (increment,) = struct.unpack(">I", payload)
        if increment == 0 or stream.send_window + increment > MAX_WINDOW:
            raise ProtocolError(f"WINDOW of {increment} on stream {stream_id}")
        stream.send_window += increment
        return WindowOpened(stream_id, increment)
