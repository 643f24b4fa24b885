"""Handshake sessions any replica of a gateway can serve (``sessionStorage: redis``).

:class:`SessionSharing` is what the :class:`~vmcp_trio.gateway.core.Gateway` asks when its
sessions are shared. Rules it keeps:

* A session created here is recorded (:mod:`.session_records`) before its ``initialize`` is
  answered, so that the client's next request may go to any replica.
* A request for a session this replica does not hold loads its record; when the record belongs
  to the caller's identity, the gateway makes a local copy that joins the backend sessions
  (:meth:`~vmcp_trio.gateway.core.Gateway.find_session`). A missing record (expired, deleted,
  never made) is 404, as for an unknown session; another identity's is 404 too.
* A change made on one copy (the log level, a backend session made anew) is written and
  announced (:class:`~.fleet.Fleet`); the other replicas' copies take it on.
* Ending a session (DELETE) deletes its record and is announced: the other copies end too. A
  copy let go for idleness is only released: the session goes on elsewhere, and its record
  expires after the idle TTL once no replica renews it (a copy renews it at most every quarter
  of the TTL, so an active session costs no Redis round trip per request).
* One replica *listens* on the backend sessions' GET streams (the one that made the session,
  named under ``listener:<session>``): what a backend sends there is put on that replica's
  standalone stream and announced, and a replica whose copy has the client's GET stream open
  now puts it on its own. When the listener's heartbeat is gone, a replica serving the session
  takes the role over (compare-and-set), at most one check per session every three heartbeats.
* A client's answer to a request another replica relayed (its id names that replica) is sent
  to that replica before the client's POST is answered, and is passed on only when a
  subscription of that replica received it (:meth:`~.fleet.Fleet.tell`): when it was not
  listening or Redis failed, the POST is 503 with ``Retry-After`` and the client sends the
  answer again (that replica takes one answer per request and ignores a repeat). A
  cancellation of a request this copy does not hold is announced to all, best effort (the one
  at work on it stops; which one that is, if any, is not known). Passed on once: what arrives
  from another replica is not passed on.
* Redis unavailable: a new session goes on on this replica (a warning says the others cannot
  take it now), and its record and listener are written at its next request here once Redis
  answers (at most one try a second), so a session made while Redis was away becomes every
  replica's when Redis is back instead of answering 404 elsewhere until it expires; a change
  not written is written the same way; a client's answer for another replica is 503 (above);
  nothing waits longer than the Redis timeouts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial

import orjson
import trio
from coredis import PureToken

from ..auth.caller import Caller
from ..protocol.jsonrpc import ErrorResponse, JsonRpcError, Message, Response, decode_message
from ..runtime.shared_storage import StorageUnavailable, milliseconds
from .fleet import Fleet
from .session import ClientSession
from .session_peer import NotPassedOn, SessionPeer
from .session_records import SessionRecord, SessionRecords

__all__ = ["SessionSharing", "shareable_id"]

log = logging.getLogger("vmcp.sessions")

_CLAIM_LISTENER = """
local current = redis.call('GET', KEYS[1])
if (current or '') == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
REWRITE_EVERY = 1.0
"""Seconds between tries to store a record a write failed to store (at the session's requests)."""
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def shareable_id(session_id: str) -> bool:
    """Whether ``session_id`` could be one of ours (worth a Redis lookup)."""
    return 0 < len(session_id) <= 64 and set(session_id) <= _ID_CHARS


class SessionSharing:
    def __init__(self, records: SessionRecords, fleet: Fleet) -> None:
        self.records = records
        self.fleet = fleet
        self._renewed: dict[str, float] = {}
        self._unwritten: set[str] = set()
        """Sessions whose record (or, made here, listener) a write failed to store."""
        self._nursery: trio.Nursery | None = None
        self.on_ended: Callable[[str], None] | None = None
        """Told of each session another replica ended."""
        self.on_changed: Callable[[str], None] | None = None
        """Told of each session whose record another replica changed."""
        self.on_client_message: Callable[[str, Message], None] | None = None
        """Told of each client message another replica passed on (session id, message)."""
        fleet.on("session-ended", lambda message: self._heard(self.on_ended, message))
        fleet.on("session-changed", lambda message: self._heard(self.on_changed, message))
        self.on_note: Callable[[str, bytes], None] | None = None
        """Told of each backend message another replica put on a session's standalone
        stream (session id, the encoded message)."""
        fleet.on("client-message", self._heard_client_message)
        fleet.on("session-note", self._heard_note)
        self._listener_checked: dict[str, float] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Where the background writes run (the gateway's sessions nursery)."""
        self._nursery = nursery

    @staticmethod
    def _heard(handler: Callable[[str], None] | None, message: dict[str, object]) -> None:
        session = message.get("session")
        if handler is not None and isinstance(session, str):
            handler(session)

    # --- this replica's sessions ----------------------------------------------------------------

    async def created(self, session: ClientSession) -> None:
        """Record a new session (before its ``initialize`` is answered)."""
        session.peer = self._peer(session)
        if await self._write(session, False):
            await self._claim_listener(session)

    async def _claim_listener(self, session: ClientSession) -> None:
        """Name this replica the listener of a session it made (unless one was named)."""
        try:
            key, ttl = self._listener_key(session.id), milliseconds(self.records.ttl)
            await self.records.redis.do(lambda r: r.set(key, self.fleet.replica, px=ttl,
                                                        condition=PureToken.NX))
        except StorageUnavailable as exc:
            self._unwritten.add(session.id)
            log.warning("session %s: its listener was not recorded: %s", session.id[:8], exc)

    async def _write(self, session: ClientSession, announce: bool) -> bool:
        """Store the session's record (and announce the change); whether it was stored."""
        record = session.next_record(self.fleet.replica)
        try:
            await self.records.put(record)
            self._renewed[session.id] = trio.current_time()
            self._unwritten.discard(session.id)
            if announce:
                await self.fleet.announce("session-changed", session=session.id,
                                          version=record.version)
        except StorageUnavailable as exc:
            self._unwritten.add(session.id)
            log.warning("session %s: its record was not written, other replicas cannot take "
                        "it now: %s", session.id[:8], exc)
            return False
        return True

    async def _write_again(self, session: ClientSession) -> None:
        if await self._write(session, True) and session.links.joined is None:
            await self._claim_listener(session)  # made here: it listens, unless one does

    def used(self, session: ClientSession) -> None:
        """A request of ``session`` arrived here: renew its record now and then, and (a copy)
        see now and then that someone listens to its backends."""
        now = trio.current_time()
        if session.id in self._unwritten:
            if now - self._renewed.get(session.id, -math.inf) > REWRITE_EVERY:
                self._renewed[session.id] = now
                self._spawn(self._write_again, session)
        elif now - self._renewed.get(session.id, -math.inf) > self.records.ttl / 4:
            self._renewed[session.id] = now
            self._spawn(self._renew, session.id)
        if (session.links.joined is not None
                and now - self._listener_checked.get(session.id, -math.inf)
                > 3 * self.fleet.heartbeat):
            self._listener_checked[session.id] = now
            self._spawn(self._check_listener, session)

    def _listener_key(self, session_id: str) -> str:
        return self.records.redis.key("listener", session_id)

    async def _renew(self, session_id: str) -> None:
        try:
            await self.records.renew(session_id)
            key, ttl = self._listener_key(session_id), milliseconds(self.records.ttl)
            await self.records.redis.do(lambda r: r.pexpire(key, ttl))
        except StorageUnavailable as exc:
            log.info("session %s: its record was not renewed: %s", session_id[:8], exc)

    async def _check_listener(self, session: ClientSession) -> None:
        key = self._listener_key(session.id)
        try:
            listener = await self.records.redis.do(lambda r: r.get(key))
            if listener == self.fleet.replica or (listener is not None
                                                  and await self.fleet.alive(str(listener))):
                return
            ttl = milliseconds(self.records.ttl)
            claimed = await self.records.redis.do(lambda r: r.eval(
                _CLAIM_LISTENER, keys=[key], args=[listener or "", self.fleet.replica, ttl]))
        except StorageUnavailable as exc:
            log.info("session %s: its listener was not checked: %s", session.id[:8], exc)
            return
        if claimed:
            log.warning("session %s: the replica listening to its backends (%s) is gone; "
                        "listening here", session.id[:8], listener)
            session.listen_to_backends()

    async def ended(self, session: ClientSession) -> None:
        """The client ended ``session`` (DELETE): every replica's copy ends."""
        self._renewed.pop(session.id, None)
        self._unwritten.discard(session.id)
        try:
            await self.records.delete(session.id)
            await self.fleet.announce("session-ended", session=session.id)
        except StorageUnavailable as exc:
            log.warning("session %s: its end was not shared (its record expires after the "
                        "idle TTL): %s", session.id[:8], exc)

    def forget(self, session_id: str) -> None:
        self._renewed.pop(session_id, None)
        self._listener_checked.pop(session_id, None)
        self._unwritten.discard(session_id)

    # --- other replicas' sessions ---------------------------------------------------------------

    async def load(self, session_id: str, caller: Caller) -> SessionRecord | None:
        """The record of a session another replica made, when it is the caller's."""
        try:
            record = await self.records.get(session_id)
        except StorageUnavailable as exc:
            log.warning("session %s: its record could not be read: %s", session_id[:8], exc)
            return None
        if record is None or (record.issuer, record.subject) != caller.identity.key:
            return None
        return record

    def joined(self, session: ClientSession) -> None:
        """A copy of another replica's session now serves here."""
        self._renewed[session.id] = trio.current_time()
        session.peer = self._peer(session)

    def _peer(self, session: ClientSession) -> SessionPeer:
        """What the session tells the fleet: its record changed, a message of its standalone
        stream, a client's message for a request another replica holds."""
        return SessionPeer(changed=lambda: self._spawn(self._write, session, True),
                           noted=partial(self._announce_note, session.id),
                           elsewhere=partial(self._pass_on, session.id))

    # --- the standalone stream ------------------------------------------------------------------

    def _announce_note(self, session_id: str, payload: bytes) -> None:
        self._spawn(self._send_note, session_id, payload)

    async def _send_note(self, session_id: str, payload: bytes) -> None:
        try:
            await self.fleet.announce("session-note", session=session_id,
                                      payload=payload.decode())
        except (StorageUnavailable, ValueError) as exc:
            log.info("session %s: a backend message was not shared: %s", session_id[:8], exc)

    def _heard_note(self, data: dict[str, object]) -> None:
        session, payload = data.get("session"), data.get("payload")
        if self.on_note is not None and isinstance(session, str) and isinstance(payload, str):
            self.on_note(session, payload.encode())

    # --- client messages for another replica ----------------------------------------------------

    async def _pass_on(self, session_id: str, message: Message) -> None:
        """Send a client's answer to the replica that relayed its request (named in its id),
        raising :class:`NotPassedOn` unless it heard it; announce a cancellation to all."""
        fields = {"session": session_id, "message": message.to_dict()}
        if not isinstance(message, Response | ErrorResponse):
            try:
                await self.fleet.announce("client-message", **fields)
            except (StorageUnavailable, ValueError) as exc:
                log.warning("session %s: a cancellation for the other replicas was lost: %s",
                            session_id[:8], exc)
            return
        replica = str(message.id).removeprefix("vmcp-").partition("-")[0]
        try:
            if await self.fleet.tell(replica, "client-message", **fields):
                return
            why = "it is not listening"
        except (StorageUnavailable, ValueError) as exc:
            why = str(exc)
        log.warning("session %s: a client's answer for replica %s was not passed on (the client "
                    "is told to send it again): %s", session_id[:8], replica[:16], why)
        raise NotPassedOn("the answer could not be passed to the replica that asked for it; "
                          "try again")

    def _heard_client_message(self, data: dict[str, object]) -> None:
        session, message = data.get("session"), data.get("message")
        if self.on_client_message is None or not isinstance(session, str):
            return
        try:
            decoded = decode_message(orjson.dumps(message))
        except JsonRpcError:
            log.warning("a client message passed on by another replica does not decode")
            return
        self.on_client_message(session, decoded)

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)
