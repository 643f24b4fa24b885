"""One side of a tunnel connection, on whatever carries its messages (the relay's ASGI WebSocket,
the agent's :class:`~vmcp_trio.http.websocket.WebSocket`): the frame protocol
(:mod:`vmcp_trio.protocol.tunnel`) with I/O.

Rules it keeps:

* Frames are sent as they are made, each as one binary message; the carrier keeps messages sent
  by many tasks at once whole and in the order they were made (both carriers do: one lock
  under a write that must wait, none when the socket takes it at once).
* Each tracked stream's events (its head, data, end or reset) go to its :class:`StreamInbox`,
  read by the one task serving it, which takes all that came in one go (a head or data marked
  END_STREAM is followed there by a :class:`StreamEnded`, so readers see one way of ending); a
  reset also cancels the scope the stream is served in (:attr:`StreamInbox.scope`); window
  grants wake its sender instead. The peer cannot overfill an inbox while it keeps to the
  window (a window holds at most ``window / max_payload`` DATA frames); one that does has
  broken the protocol and the connection is closed. Events of a stream nobody tracks are the
  caller's (the agent gathers a request's body before it serves the request).
* Body bytes are sent as the window allows, waiting for grants; the reader grants again what it
  consumed (:meth:`TunnelLink.consumed`). A slow stream waits alone.
* When the connection ends, every inbox is closed: its task sees the tunnel gone.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from ..http.websocket import WebSocket, WebSocketError
from ..protocol.tunnel import (
    DataReceived,
    Event,
    HeadReceived,
    PingReceived,
    PongReceived,
    ProtocolError,
    StreamEnded,
    StreamReset,
    TunnelProtocol,
    WindowOpened,
)

__all__ = ["StreamEvent", "StreamInbox", "TunnelClosed", "TunnelLink"]

StreamEvent = HeadReceived | DataReceived | StreamEnded | StreamReset


class TunnelClosed(Exception):
    """The tunnel connection ended (the stream cannot go on)."""


class StreamInbox:
    """One stream's events as they come, for the one task that serves the stream."""

    __slots__ = ("_capacity", "_wake", "_window", "closed", "events", "scope")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.events: list[StreamEvent] = []
        self.closed = False
        self._wake: trio.Event | None = None
        self._window: trio.Event | None = None
        self.scope: trio.CancelScope | None = None
        """Cancelled when the stream is reset or the tunnel goes (:meth:`serve_in`)."""

    def put(self, event: StreamEvent) -> None:
        if len(self.events) >= self._capacity:
            raise ProtocolError(f"stream {event.stream_id}: more events than its window "
                                "allows")
        self.events.append(event)
        if self._wake is not None:
            self._wake.set()
            self._wake = None
        if isinstance(event, StreamReset) and self.scope is not None:
            self.scope.cancel()

    def serve_in(self, scope: trio.CancelScope) -> None:
        """The stream is served in ``scope``: cancel it on a reset or when the tunnel goes
        (now, if either came first)."""
        self.scope = scope
        if self.closed or any(isinstance(event, StreamReset) for event in self.events):
            scope.cancel()

    async def take(self, deadline: float = math.inf) -> list[StreamEvent]:
        """Every event so far, waiting for one until ``deadline`` (then []); raises
        TunnelClosed once the tunnel went and every event was taken."""
        if not self.events:
            if self.closed:
                raise TunnelClosed("the tunnel is closed")
            wake = self._wake = trio.Event()
            if deadline == math.inf:
                await wake.wait()
            else:
                with trio.move_on_at(deadline):
                    await wake.wait()
            if not self.events:
                if self.closed:
                    raise TunnelClosed("the tunnel is closed")
                return []
        events, self.events = self.events, []
        return events

    async def window_opened(self) -> None:
        """Until the peer grants more window (or the stream or tunnel ends)."""
        if not self.closed:
            window = self._window = trio.Event()
            await window.wait()

    def grant(self) -> None:
        if self._window is not None:
            self._window.set()
            self._window = None

    def close(self) -> None:
        self.closed = True
        if self._wake is not None:
            self._wake.set()
            self._wake = None
        self.grant()
        if self.scope is not None:
            self.scope.cancel()


class TunnelLink:
    def __init__(self, protocol: TunnelProtocol, send: Callable[[bytes], Awaitable[None]],
                 send_many: Callable[[list[bytes]], Awaitable[None]] | None = None) -> None:
        self.protocol = protocol
        self._send = send
        self._send_many = send_many
        self._inboxes: dict[int, StreamInbox] = {}
        self.closed = False
        self.last_pong = trio.current_time()
        self._capacity = math.ceil(protocol.window / protocol.max_payload) + 4

    async def send(self, frame: bytes) -> None:
        """Send one frame (raises TunnelClosed, also for the carrier's failure)."""
        if self.closed:
            raise TunnelClosed("the tunnel is closed")
        try:
            await self._send(frame)
        except WebSocketError as exc:
            raise TunnelClosed(str(exc)) from None

    @classmethod
    def over(cls, protocol: TunnelProtocol, socket: WebSocket) -> TunnelLink:
        """A link whose frames are ``socket``'s messages."""
        return cls(protocol, socket.send, socket.send_many)

    async def send_frames(self, frames: list[bytes]) -> None:
        """Send frames in one write when the carrier can (in order either way)."""
        if self._send_many is None:
            for frame in frames:
                await self.send(frame)
            return
        if self.closed:
            raise TunnelClosed("the tunnel is closed")
        try:
            await self._send_many(frames)
        except WebSocketError as exc:
            raise TunnelClosed(str(exc)) from None

    def track(self, stream_id: int) -> StreamInbox:
        """The inbox of a stream's events from now on."""
        inbox = self._inboxes[stream_id] = StreamInbox(self._capacity)
        if self.closed:
            inbox.close()
        return inbox

    def forget(self, stream_id: int) -> None:
        inbox = self._inboxes.pop(stream_id, None)
        if inbox is not None:
            inbox.close()

    async def take(self, frame: bytes) -> Event | None:
        """Handle one received frame. What is not handled here is the caller's: a
        :class:`StreamOpened` to serve, a :class:`StreamRefused` to reset, and the events of a
        stream nobody tracks (late ones for a stream whose task ended: ignore them). Raises
        ProtocolError."""
        event: Event | None = self.protocol.receive(frame)
        if event is None:
            return None
        if isinstance(event, HeadReceived | DataReceived | StreamEnded | StreamReset):
            inbox = self._inboxes.get(event.stream_id)
            if inbox is None:
                return event
            inbox.put(event)
            if isinstance(event, HeadReceived | DataReceived) and event.end_stream:
                inbox.put(StreamEnded(event.stream_id))
            return None
        if isinstance(event, WindowOpened):
            inbox = self._inboxes.get(event.stream_id)
            if inbox is not None:
                inbox.grant()
            return None
        if isinstance(event, PingReceived):
            await self.send(TunnelProtocol.pong(event.payload))
            return None
        if isinstance(event, PongReceived):
            self.last_pong = trio.current_time()
            return None
        return event

    async def send_body(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        """Send ``data`` on a tracked stream as the window allows, its last frame marked
        END_STREAM with ``end`` (raises TunnelClosed)."""
        view = memoryview(data)
        while view:
            if stream_id not in self.protocol.streams:
                raise TunnelClosed(f"stream {stream_id} was reset")
            room = self.protocol.sendable(stream_id)
            if room == 0:
                inbox = self._inboxes.get(stream_id)
                if inbox is None or inbox.closed:
                    raise TunnelClosed(f"stream {stream_id} was reset")
                await inbox.window_opened()
                continue
            chunk, view = bytes(view[:room]), view[room:]
            await self.send(self.protocol.send_data(stream_id, chunk, end=end and not view))

    async def consumed(self, stream_id: int, count: int) -> None:
        grant = self.protocol.consumed(stream_id, count)
        if grant is not None:
            await self.send(grant)

    async def reset(self, stream_id: int, reason: str) -> None:
        """Abort a stream (if still open) and forget it."""
        self.forget(stream_id)
        if stream_id in self.protocol.streams and not self.closed:
            await self.send(self.protocol.send_reset(stream_id, reason))

    def close(self) -> None:
        self.closed = True
        for stream_id in list(self._inboxes):
            self.forget(stream_id)
