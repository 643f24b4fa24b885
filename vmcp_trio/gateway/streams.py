"""The server-to-client SSE streams of one client session, with resumption.

Rules kept here (Streamable HTTP, handshake revisions):

* Every message goes on exactly one stream: the response stream of the request it relates to,
  or the session's standalone stream (the GET stream) when it relates to none.
* Event ids are ``<stream key>.<sequence>``, unique within the session, and name their stream, so a
  ``Last-Event-ID`` says which stream to resume and from where; resumption replays only that
  stream's later events.
* A stream keeps its last ``max_events`` events for replay. A writer that falls further behind
  than that lost events: it is told so (:class:`StreamGap`) and ends its connection rather than
  deliver a stream with a hole in it.
* A response stream is *finished* once its final response is pushed; it is forgotten when that has
  been delivered, or when the session ends. The standalone stream lives as long as the session.
* Shared sessions: response stream keys start with the replica's id (unique across the fleet);
  a stream given a *mirror* (:class:`StreamMirror`, :mod:`.call_log`) tells it every event
  from the one it holds on, so another replica can resume it; a stream another replica began is
  continued here under its own key, numbered from where that replica's log ends.

* A follower that is caught up is handed a new event by the one who pushes it, when its writer
  can take it without waiting (:class:`DirectWriter`): one notification fanned out to thousands
  of sessions costs no task switch per stream. Otherwise, or when the writer holds bytes the
  socket did not take, the follower's task is woken to write.
* A follower ends when its session ends (:meth:`StreamRegistry.end_followers` cancels the scope
  it follows in), and writes a keep-alive comment when asked (:meth:`EventStream.ask_keepalive`):
  no task per stream waits for either.

No HTTP here: :meth:`EventStream.follow` yields encoded SSE events; the server writes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import trio

from ..protocol.jsonrpc import RequestId
from ..protocol.sse import encode_comment, encode_event

__all__ = ["KEEPALIVE", "DirectWriter", "EventStream", "StreamGap", "StreamMirror",
           "StreamRegistry", "parse_event_id"]

STANDALONE = "g"
KEEPALIVE = encode_comment()


class StreamMirror(Protocol):
    """Where a stream's events are also kept (without blocking: it queues them)."""

    def event(self, seq: int, payload: bytes, retry: int | None) -> None: ...

    def position(self, backend: str, request_id: RequestId, event_id: str) -> None:
        """Where the backend's own stream for this call stands (to resume it elsewhere)."""

    def finished(self) -> None: ...


class DirectWriter(Protocol):
    """A follower's connection, written without waiting (:class:`~vmcp_trio.http.asgi.
    StreamWriter`)."""

    @property
    def holding(self) -> bool: ...

    def write_now(self, data: bytes) -> bool: ...


class StreamGap(Exception):
    """The reader asked for events that were dropped from the replay buffer."""


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    key, sep, seq = event_id.rpartition(".")
    if not sep or not key or not seq.isdigit() or len(seq) > 18:
        return None
    return key, int(seq)


class EventStream:
    def __init__(self, key: str, *, max_events: int = 256, retry_ms: int | None = None,
                 first_seq: int = 0) -> None:
        self.key = key
        self.max_events = max_events
        self.retry_ms = retry_ms
        self._events: list[tuple[int, bytes, int | None]] = []
        """(sequence, JSON-RPC payload or b"" for a priming event, retry); a list: most
        streams hold none or one, and an empty deque costs 760 bytes on every session"""
        self._next = first_seq
        self._first_seq = first_seq
        self._mirror: StreamMirror | None = None
        self.position: tuple[str, RequestId, str] | None = None
        """The backend, its request id and its stream's latest event id, for a call whose
        backend stream can be resumed."""
        self._changed: trio.Event | None = None
        """What a waiting follower waits on (made when one waits: an Event costs ~270
        bytes, on every session's standalone stream)."""
        self.finished = False
        self.delivered = -1
        """Highest sequence number a writer has handed to the transport."""
        self._follower = 0
        self.followed = False
        """A writer (a client's connection) is following the stream now."""
        self._sent = -1
        """The follower's position: the last sequence handed to its connection."""
        self._direct: DirectWriter | None = None
        """The follower's writer, when it can be written without waiting."""
        self._follower_scope: trio.CancelScope | None = None
        """What the follower runs in (cancelled when the session ends)."""
        self._keepalive_due = False

    @property
    def last_seq(self) -> int:
        return self._next - 1

    def push(self, payload: bytes) -> None:
        """Queue one JSON-RPC message (already encoded)."""
        self._append(payload, None)

    def prime(self) -> None:
        """The priming event (id, empty data): the client can resume from it at once."""
        self._append(b"", self.retry_ms)

    def append_logged(self, payload: bytes, retry: int | None) -> None:
        """An event another replica logged (a priming event keeps its ``retry``)."""
        self._append(payload, retry)

    def finish(self) -> None:
        self.finished = True
        if self._mirror is not None:
            self._mirror.finished()
        self._wake()

    @property
    def mirrored(self) -> bool:
        return self._mirror is not None

    def mirror_to(self, mirror: StreamMirror, *, replay: bool = True) -> None:
        """Tell ``mirror`` every later event (and the end), and with ``replay`` the events
        held now too."""
        self._mirror = mirror
        for seq, payload, retry in self._events if replay else ():
            mirror.event(seq, payload, retry)
        if self.position is not None:
            mirror.position(*self.position)
        if self.finished:
            mirror.finished()

    def note_position(self, backend: str, request_id: RequestId, event_id: str) -> None:
        """Where the backend's response stream for this call stands."""
        self.position = (backend, request_id, event_id)
        if self._mirror is not None:
            self._mirror.position(backend, request_id, event_id)

    def _append(self, payload: bytes, retry: int | None) -> None:
        if self.finished:
            raise RuntimeError(f"stream {self.key} is finished")
        seq = self._next
        self._events.append((seq, payload, retry))
        if self._mirror is not None:
            self._mirror.event(seq, payload, retry)
        self._next += 1
        if len(self._events) > self.max_events:
            del self._events[0]
        direct = self._direct
        if direct is not None and self._sent == seq - 1 and direct.write_now(
                self._encoded(seq, payload, retry)):
            self._sent = self.delivered = seq
            if not direct.holding:
                return  # the follower's task sleeps on: nothing for it to do
        self._wake()

    def _encoded(self, seq: int, payload: bytes, retry: int | None) -> bytes:
        """One event as its follower's connection gets it (its id names this stream)."""
        return encode_event(payload, id=f"{self.key}.{seq}", retry=retry)

    def ask_keepalive(self) -> None:
        """The follower's connection was idle too long: it writes a keep-alive comment."""
        self._keepalive_due = True
        self._wake()

    def end_follower(self) -> None:
        """The session ended: the follower stops, even in the middle of a write."""
        if self._follower_scope is not None:
            self._follower_scope.cancel()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _change(self) -> trio.Event:
        """The event the next change sets."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    @property
    def drained(self) -> bool:
        return self.finished and self.delivered >= self.last_seq

    def only_reply(self) -> bytes | None:
        """When the stream finished with exactly one event (its reply), that payload: it can go
        as plain JSON instead of SSE. Marks it delivered."""
        if not (self.finished and self.last_seq == 0 and self._events):
            return None
        self.delivered = 0
        return self._events[0][1]

    async def wait_event(self) -> None:
        """Return once the stream has an event or is finished."""
        while self._next == self._first_seq and not self.finished:
            await self._change().wait()

    async def follow(self, after: int = -1, direct: DirectWriter | None = None,
                     scope: trio.CancelScope | None = None) -> AsyncIterator[bytes]:
        """Encoded events with sequence > ``after``, waiting for new ones until finished; with
        ``direct``, events pushed while the follower is caught up may go straight to it, and
        ``b""`` is yielded when it holds bytes to flush; :data:`KEEPALIVE` when asked for one.
        ``scope``: what the follower runs in, for :meth:`end_follower`.

        One follower at a time: a new one (a client reconnecting) ends the previous one, so no
        event is sent on two connections."""
        self._follower += 1
        me = self._follower
        self._wake()
        self.followed = True
        self._sent = after
        self._direct = direct
        self._follower_scope = scope
        try:
            while me == self._follower:
                changed = self._change()  # taken before scanning: an append during a yield wakes
                if direct is not None and direct.holding:
                    yield b""
                    continue
                if self._keepalive_due:
                    self._keepalive_due = False
                    yield KEEPALIVE
                    continue
                if (self._events and self._events[0][0] > self._sent + 1
                        and self._sent < self.last_seq):
                    raise StreamGap(f"events of stream {self.key} after {self._sent} were "
                                    "dropped")
                for seq, payload, retry in list(self._events):
                    if seq > self._sent:
                        if me != self._follower:
                            return
                        self._sent = seq
                        yield self._encoded(seq, payload, retry)
                        self.delivered = max(self.delivered, seq)
                if self.finished and self._sent >= self.last_seq:
                    return
                await changed.wait()
        finally:
            if me == self._follower:
                self.followed = False
                self._direct = None
                self._follower_scope = None


class StreamRegistry:
    """The streams of one session, by key; bounded in number."""

    def __init__(self, *, max_streams: int = 1024, max_events: int = 256,
                 retry_ms: int | None = None, key_prefix: str = "") -> None:
        self.max_streams = max_streams
        self.max_events = max_events
        self.retry_ms = retry_ms
        self.key_prefix = key_prefix
        """Before each response stream's key: the replica's id when sessions are shared."""
        self._streams: dict[str, EventStream] = {}
        self._counter = 0
        self._next_sweep = 16
        """How many streams make :meth:`_make_room` forget the delivered ones."""
        self.standalone = self._add(STANDALONE)

    def _add(self, key: str, first_seq: int = 0) -> EventStream:
        stream = EventStream(key, max_events=self.max_events, retry_ms=self.retry_ms,
                             first_seq=first_seq)
        self._streams[key] = stream
        return stream

    def _make_room(self) -> None:
        """Delivered streams are forgotten once the registry has doubled since it last
        looked (and 16 more), or is full: a look per new stream was a scan of every stream,
        quadratic in a 2026-07-28 context that many clients of one identity share. If every
        stream is still undelivered when full, the oldest one is dropped (its client can no
        longer resume it)."""
        if len(self._streams) >= min(self._next_sweep, self.max_streams):
            self._forget_drained()
            self._next_sweep = 2 * len(self._streams) + 16
        if len(self._streams) >= self.max_streams:
            oldest = next(k for k in self._streams if k != STANDALONE)
            del self._streams[oldest]

    def open(self) -> EventStream:
        """A new response stream."""
        self._make_room()
        self._counter += 1
        return self._add(f"{self.key_prefix}r{self._counter}")

    def continued(self, key: str, first_seq: int) -> EventStream:
        """A stream another replica began, continued here from ``first_seq``."""
        self._make_room()
        return self._add(key, first_seq)

    def _forget_drained(self) -> None:
        for key in [k for k, s in self._streams.items() if k != STANDALONE and s.drained]:
            del self._streams[key]

    def end_followers(self) -> None:
        """The session ended: every stream's follower stops."""
        for stream in self._streams.values():
            stream.end_follower()

    def get(self, key: str) -> EventStream | None:
        return self._streams.get(key)

    def undelivered(self) -> int:
        """Finished streams whose client is still connected for them: it has not had every
        event yet, or its response has not ended (an event handed straight to the connection
        is delivered before the follower's task ends the response)."""
        return sum(1 for stream in self._streams.values()
                   if stream.finished and stream.followed)

    def __len__(self) -> int:
        return len(self._streams)
