"""Calls of shared sessions logged in Redis, so that another replica can resume them.

With ``sessionStorage: redis`` a call answered over SSE (not the plain-JSON common case, which
costs nothing here) is *logged*: every event its client may be given, which replica answers it,
and where the backend's own response stream stands. A client whose connection broke reconnects
with ``Last-Event-ID`` wherever its balancer sends it:

* to the replica answering the call: its local stream serves it (nothing from here);
* to another one: :meth:`CallLog.follow` replays the logged events after that id, then follows
  the log for as long as the answering replica is alive (its heartbeat), to the call's end;
* when the answering replica died (its heartbeat expired, and is still gone a heartbeat later),
  this replica takes the call over (one replica wins: a compare-and-set on the log's owner)
  and, when the backend's stream can be resumed (it gave event ids, and the session's link to
  it joined the same backend session), resumes it from where the dead replica left it: the
  rest of the progress and the answer come from here, and are logged in turn. Otherwise the
  call ends with a JSON-RPC error that says its replica was lost. Never a hang: a call that
  shows no life for ``stall_seconds`` ends too.

Recoverable, exactly: every event the dead replica had logged (writes are queued and pipelined,
so its last milliseconds may be missing; a client that got those events already resumes after
them, and a gap is an error, never a stream with a hole); the rest of the answer when the
backend's stream is resumable. Not recoverable: a call whose backend keeps no resumable
stream, a stdio or legacy-SSE backend's call (those links are per replica), and a call of the
2026-07-28 revision (its clients retry; a stream closed ends the request).

Layout, under the session storage's prefix, each key with the session TTL: ``log:<session>:
<stream>`` a Redis stream of the events (entry ``0-<seq + 1>``: payload and retry), bounded to
the session's replay buffer; ``call:<session>:<stream>`` a hash: ``owner`` (replica), ``id``
(the client's request id, JSON), ``done``, and ``backend``/``bid``/``bev`` (the backend, its
request id, its stream's last event id). Bounds: at most ``max_pending`` writes wait to be
written (past it a call's log is marked broken: a resume elsewhere ends it with the error).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
import trio
from coredis import PureToken

from ..protocol.jsonrpc import INTERNAL_ERROR, RequestId, encode_error
from ..runtime.redis import RedisConnection
from ..runtime.shared_storage import StorageUnavailable, milliseconds
from .fleet import Fleet
from .streams import EventStream

__all__ = ["CallLog", "LoggedCall", "Resume"]

log = logging.getLogger("vmcp.sessions")

_CLAIM = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'owner', ARGV[2])
  return 1
end
return 0
"""
LOST = ("the replica answering this request was lost before it finished, and the backend's "
        "answer could not be recovered")


@dataclass(frozen=True)
class LoggedCall:
    """What the log says of one call."""

    owner: str
    request_id: RequestId
    done: bool
    broken: bool
    backend: str | None = None
    backend_request_id: RequestId | None = None
    backend_event_id: str | None = None


Resume = Callable[[EventStream, LoggedCall], Awaitable[None]]
"""Finish a call taken over: resume its backend stream onto the stream (its reply included),
or push the error; the stream is finished by the caller."""


@dataclass
class _Pending:
    """The writes queued for one call's keys."""

    events: list[tuple[int, bytes, int | None]] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)


class _Mirror:
    """One stream's events, queued for the log (a :class:`~.streams.StreamMirror`)."""

    def __init__(self, log: CallLog, session: str, key: str) -> None:
        self.log = log
        self.session = session
        self.key = key

    def event(self, seq: int, payload: bytes, retry: int | None) -> None:
        self.log.queue(self.session, self.key, event=(seq, payload, retry))

    def position(self, backend: str, request_id: RequestId, event_id: str) -> None:
        self.log.queue(self.session, self.key, fields={
            "backend": backend, "bid": orjson.dumps(request_id).decode(), "bev": event_id})

    def finished(self) -> None:
        self.log.queue(self.session, self.key, fields={"done": "1"})


class CallLog:
    def __init__(self, redis: RedisConnection, fleet: Fleet, *, ttl: float,
                 max_events: int = 256, max_pending: int = 4096, poll: float = 0.1,
                 stall_seconds: float = 120.0) -> None:
        self.redis = redis
        self.fleet = fleet
        self.ttl = ttl
        self.max_events = max_events
        self.max_pending = max_pending
        self.poll = poll
        self.stall_seconds = stall_seconds
        self.on_event: Callable[[str], None] | None = None
        """Told ``taken_over`` or ``lost`` for each call another replica was answering (the
        metrics)."""
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._count = 0
        self._wake = trio.Event()

    def _keys(self, session: str, key: str) -> tuple[str, str]:
        return self.redis.key("log", session, key), self.redis.key("call", session, key)

    # --- the answering replica ------------------------------------------------------------------

    def start(self, session: str, stream: EventStream, request_id: RequestId) -> None:
        """Log ``stream`` (a call of ``session`` answered here over SSE) from now on."""
        self.queue(session, stream.key, fields={
            "owner": self.fleet.replica, "id": orjson.dumps(request_id).decode()})
        stream.mirror_to(_Mirror(self, session, stream.key))

    def queue(self, session: str, key: str, *, event: tuple[int, bytes, int | None] | None = None,
              fields: dict[str, str] | None = None) -> None:
        pending = self._pending.get((session, key))
        if pending is None:
            pending = self._pending[session, key] = _Pending()
        if self._count >= self.max_pending:
            if "broken" not in pending.fields:
                self._told("unlogged")
            pending.fields["broken"] = "1"  # a resume elsewhere cannot trust this log
            return
        if event is not None:
            pending.events.append(event)
            self._count += 1
        if fields:
            pending.fields.update(fields)
            self._count += 1
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what is queued, in batches (a supervised task)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            batch, self._pending, self._count = self._pending, {}, 0
            try:
                await self.redis.do(partial(self._write, batch=batch))
            except StorageUnavailable as exc:
                log.warning("%d call logs not written (their calls cannot be resumed "
                            "elsewhere): %s", len(batch), exc)
                for _ in batch:
                    self._told("unlogged")

    async def _write(self, r: Any, *, batch: dict[tuple[str, str], _Pending]) -> None:
        ttl = milliseconds(self.ttl)
        async with r.pipeline(transaction=False) as pipe:
            for (session, key), pending in batch.items():
                events_key, call_key = self._keys(session, key)
                for seq, payload, retry in pending.events:
                    pipe.xadd(events_key, {"p": payload, "r": "" if retry is None else retry},
                              identifier=f"0-{seq + 1}", trim_strategy=PureToken.MAXLEN,
                              threshold=self.max_events)
                if pending.fields:
                    pipe.hset(call_key, pending.fields)
                pipe.pexpire(events_key, ttl)
                pipe.pexpire(call_key, ttl)

    # --- another replica ------------------------------------------------------------------------

    async def call(self, session: str, key: str) -> LoggedCall | None:
        """What the log says of the call of stream ``key`` (None: no such logged call)."""
        _, call_key = self._keys(session, key)
        fields = await self.redis.do(lambda r: r.hgetall(call_key))
        if not fields or "owner" not in fields or "id" not in fields:
            return None
        bid = fields.get("bid")
        return LoggedCall(str(fields["owner"]), orjson.loads(fields["id"]),
                          fields.get("done") == "1", fields.get("broken") == "1",
                          fields.get("backend"), orjson.loads(bid) if bid else None,
                          fields.get("bev"))

    async def follow(self, session: str, stream: EventStream, resume: Resume) -> None:
        """Fill ``stream`` (continued here, numbered from the first event it lacks) from the
        log of its call, to the end: the events logged, then those logged later while the
        answering replica lives; when it died, take the call over (``resume``). Always
        finishes ``stream``."""
        events_key, call_key = self._keys(session, stream.key)
        try:
            last_life = trio.current_time()
            dead_since: float | None = None
            finishing = False
            while True:
                entries = await self.redis.do(lambda r: r.xrange(
                    events_key, f"0-{stream.last_seq + 2}", "+", count=100))
                for entry in entries:
                    seq = int(str(entry.identifier).split("-")[1]) - 1
                    if seq != stream.last_seq + 1:  # trimmed, or never written: a hole
                        raise _Unrecoverable(f"events of stream {stream.key} are missing")
                    retry = str(entry.field_values.get("r") or "")
                    stream.append_logged(str(entry.field_values["p"]).encode(),
                                         int(retry) if retry.isdigit() else None)
                if entries:
                    last_life = trio.current_time()
                    continue
                if finishing:  # the events written with the end are in too
                    return
                called = await self.call(session, stream.key)
                if called is None:
                    raise _Unrecoverable(f"the log of stream {stream.key} expired")
                if called.done:
                    finishing = True
                    continue
                if called.broken:
                    raise _Unrecoverable(f"the log of stream {stream.key} is incomplete")
                if await self.fleet.alive(called.owner):
                    dead_since = None
                elif dead_since is None:
                    dead_since = trio.current_time()  # seen dead: sure once it stays so
                elif trio.current_time() - dead_since >= self.fleet.heartbeat:
                    if await self._claim(call_key, called.owner):
                        log.warning("session %s: replica %s was lost; taking over its call on "
                                    "stream %s", session[:8], called.owner, stream.key)
                        stream.mirror_to(_Mirror(self, session, stream.key), replay=False)
                        self._told("taken_over")
                        await resume(stream, called)
                        return
                    last_life = trio.current_time()  # another replica took it: follow that one
                    dead_since = None
                if trio.current_time() - last_life > self.stall_seconds:
                    raise _Unrecoverable(f"the call on stream {stream.key} showed no life for "
                                         f"{self.stall_seconds:g}s")
                await trio.sleep(self.poll)
        except (_Unrecoverable, StorageUnavailable) as exc:
            log.warning("session %s: %s", session[:8], exc)
            self._told("lost")
            called_id = await self._request_id(session, stream.key)
            stream.push(encode_error(INTERNAL_ERROR, LOST, called_id))
        finally:
            stream.finish()

    def _told(self, event: str) -> None:
        if self.on_event is not None:
            self.on_event(event)

    async def _request_id(self, session: str, key: str) -> RequestId | None:
        try:
            called = await self.call(session, key)
        except StorageUnavailable:
            return None
        return called.request_id if called is not None else None

    async def _claim(self, call_key: str, owner: str) -> bool:
        return bool(await self.redis.do(lambda r: r.eval(
            _CLAIM, keys=[call_key], args=[owner, self.fleet.replica])))


class _Unrecoverable(Exception):
    """The rest of a logged call cannot be had (the message says why)."""
