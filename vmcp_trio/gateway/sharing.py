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
* Redis unavailable: a new session goes on on this replica (a warning says the others cannot
  take it now); a change not written is written with the next one; nothing waits longer than
  the Redis timeouts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from ..auth.outgoing.caller import Caller
from ..runtime.redis import StorageUnavailable
from .fleet import Fleet
from .session import ClientSession
from .session_records import SessionRecord, SessionRecords

__all__ = ["SessionSharing", "shareable_id"]

log = logging.getLogger("vmcp.sessions")

_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def shareable_id(session_id: str) -> bool:
    """Whether ``session_id`` could be one of ours (worth a Redis lookup)."""
    return 0 < len(session_id) <= 64 and set(session_id) <= _ID_CHARS


class SessionSharing:
    def __init__(self, records: SessionRecords, fleet: Fleet) -> None:
        self.records = records
        self.fleet = fleet
        self._renewed: dict[str, float] = {}
        self._nursery: trio.Nursery | None = None
        self.on_ended: Callable[[str], None] | None = None
        """Told of each session another replica ended."""
        self.on_changed: Callable[[str], None] | None = None
        """Told of each session whose record another replica changed."""
        fleet.on("session-ended", lambda message: self._heard(self.on_ended, message))
        fleet.on("session-changed", lambda message: self._heard(self.on_changed, message))

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
        session.on_changed = lambda: self._spawn(self._write, session, True)
        await self._write(session, False)

    async def _write(self, session: ClientSession, announce: bool) -> None:
        record = session.next_record(self.fleet.replica)
        try:
            await self.records.put(record)
            self._renewed[session.id] = trio.current_time()
            if announce:
                await self.fleet.announce("session-changed", session=session.id,
                                          version=record.version)
        except StorageUnavailable as exc:
            log.warning("session %s: its record was not written, other replicas cannot take "
                        "it now: %s", session.id[:8], exc)

    def used(self, session: ClientSession) -> None:
        """A request of ``session`` arrived here: renew its record now and then."""
        if trio.current_time() - self._renewed.get(session.id, 0.0) > self.records.ttl / 4:
            self._renewed[session.id] = trio.current_time()
            self._spawn(self._renew, session.id)

    async def _renew(self, session_id: str) -> None:
        try:
            await self.records.renew(session_id)
        except StorageUnavailable as exc:
            log.info("session %s: its record was not renewed: %s", session_id[:8], exc)

    async def ended(self, session: ClientSession) -> None:
        """The client ended ``session`` (DELETE): every replica's copy ends."""
        self._renewed.pop(session.id, None)
        try:
            await self.records.delete(session.id)
            await self.fleet.announce("session-ended", session=session.id)
        except StorageUnavailable as exc:
            log.warning("session %s: its end was not shared (its record expires after the "
                        "idle TTL): %s", session.id[:8], exc)

    def forget(self, session_id: str) -> None:
        self._renewed.pop(session_id, None)

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
        session.on_changed = lambda: self._spawn(self._write, session, True)

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)
