"""One side of a tunnel connection, on whatever carries its messages (the relay's ASGI WebSocket,
the agent's trio-websocket): the frame protocol (:mod:`vmcp_trio.protocol.tunnel`) with I/O.

Rules it keeps:

* Frames are sent one at a time (a lock), each as one binary message.
* Each stream's events (its head, data, end or reset) go to that stream's own bounded channel,
  read by the task serving it (a head or data marked END_STREAM is followed there by a
  :class:`StreamEnded`, so readers see one way of ending); window grants wake its sender
  instead. The peer cannot overfill a channel while it keeps to the window (a window holds at
  most ``window / max_payload`` DATA frames); one that does has broken the protocol and the
  connection is closed.
* Body bytes are sent as the window allows, waiting for grants; the reader grants again what it
  consumed (:meth:`TunnelLink.consumed`). A slow stream waits alone.
* When the connection ends, every stream's channel is closed: its task sees the tunnel gone.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from ..protocol.tunnel import (
    DataReceived,
    Event,
    HeadReceived,
    PingReceived,
    PongReceived,
    ProtocolError,
    StreamEnded,
    StreamOpened,
    StreamRefused,
    StreamReset,
    TunnelProtocol,
    WindowOpened,
)

__all__ = ["StreamEvent", "TunnelClosed", "TunnelLink"]

StreamEvent = HeadReceived | DataReceived | StreamEnded | StreamReset


class TunnelClosed(Exception):
    """The tunnel connection ended (the stream cannot go on)."""


class TunnelLink:
    def __init__(self, protocol: TunnelProtocol, send: Callable[[bytes], Awaitable[None]]) -> None:
        self.protocol = protocol
        self._send = send
        self._lock = trio.Lock()
        self._channels: dict[int, trio.MemorySendChannel[StreamEvent]] = {}
        self._windows: dict[int, trio.Event] = {}
        self.closed = False
        self.last_pong = trio.current_time()
        self._capacity = math.ceil(protocol.window / protocol.max_payload) + 4

    async def send(self, frame: bytes) -> None:
        if self.closed:
            raise TunnelClosed("the tunnel is closed")
        async with self._lock:
            await self._send(frame)

    def track(self, stream_id: int) -> trio.MemoryReceiveChannel[StreamEvent]:
        """The channel of a stream's events (from its opening)."""
        send, receive = trio.open_memory_channel[StreamEvent](self._capacity)
        self._channels[stream_id] = send
        self._windows[stream_id] = trio.Event()
        return receive

    def forget(self, stream_id: int) -> None:
        channel = self._channels.pop(stream_id, None)
        if channel is not None:
            channel.close()
        window = self._windows.pop(stream_id, None)
        if window is not None:
            window.set()

    async def take(self, frame: bytes) -> StreamOpened | StreamRefused | None:
        """Handle one received frame; a :class:`StreamOpened` is the caller's to serve, a
        :class:`StreamRefused` its to reset. Raises ProtocolError."""
        event: Event | None = self.protocol.receive(frame)
        if event is None:
            return None
        if isinstance(event, StreamOpened | StreamRefused):
            return event
        if isinstance(event, PingReceived):
            await self.send(TunnelProtocol.pong(event.payload))
            return None
        if isinstance(event, PongReceived):
            self.last_pong = trio.current_time()
            return None
        if isinstance(event, WindowOpened):
            waiting = self._windows.get(event.stream_id)
            if waiting is not None:
                waiting.set()
                self._windows[event.stream_id] = trio.Event()
            return None
        channel = self._channels.get(event.stream_id)
        if channel is not None:
            try:
                channel.send_nowait(event)
                if isinstance(event, HeadReceived | DataReceived) and event.end_stream:
                    channel.send_nowait(StreamEnded(event.stream_id))
            except trio.WouldBlock:
                raise ProtocolError(f"stream {event.stream_id}: more events than its window "
                                    "allows") from None
            except trio.BrokenResourceError:  # its reader left: tell the peer
                self.forget(event.stream_id)
                if event.stream_id in self.protocol.streams:
                    await self.send(self.protocol.send_reset(event.stream_id, "gone"))
        return None

    async def send_body(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        """Send ``data`` on a stream as the window allows, its last frame marked END_STREAM
        with ``end`` (raises TunnelClosed)."""
        view = memoryview(data)
        while view:
            if stream_id not in self.protocol.streams:
                raise TunnelClosed(f"stream {stream_id} was reset")
            room = self.protocol.sendable(stream_id)
            if room == 0:
                window = self._windows.get(stream_id)
                if window is None:
                    raise TunnelClosed(f"stream {stream_id} was reset")
                await window.wait()
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
        for stream_id in list(self._channels):
            self.forget(stream_id)
