"""The client sessions of the virtual server: the table, their lifetimes, and what reaches them.

:class:`Gateway` holds the sessions: a handshake client's (created by ``initialize``, named by
``Mcp-Session-Id``), and one hidden context per identity for the stateless 2026-07-28 clients
(their backend links and catalog). Every session's tasks run in the one sessions nursery (see
:meth:`Gateway.run`), each in a scope of its session's; a session is found only by the identity
that created it. A reaper ends sessions
idle for longer than the TTL; a client holding a stream open is not idle.

Two things reach sessions from outside: a backend's change of health (each session rebuilds its
catalog and tells its client the lists changed) and the messages of a shared stdio backend that
no call waits for (routed to the session they belong to, or to all).

With shared sessions (:mod:`.sharing`, ``sessionStorage: redis``) a handshake session created by
another replica is served here too: its first request here makes a local copy from its record
(adoption), later ones find the copy; a copy idle past the TTL is released (the session may go on
elsewhere) rather than ended, and a DELETE ends the session on every replica.

The process around it (storage, authorization server, authentication, backends, HTTP server) is
assembled by :mod:`vmcp_trio.app`; the gateway is given what it uses.
"""

from __future__ import annotations

import logging
import secrets
from functools import partial
from typing import Any

import trio

from .. import __version__
from ..auth.caller import Caller
from ..protocol.jsonrpc import ErrorResponse, Message, Request, Response
from ..protocol.revisions import STATELESS, Revision, revision
from ..protocol.stateless_requests import StatelessContext
from ..protocol.tasks_extension import TASKS_EXTENSION
from ..resources.plan import GatewayPlan
from ..runtime.metrics import Metrics
from ..runtime.shared_storage import StorageUnavailable
from .backends.links import BackendLinks
from .backends.stdio import RELAY_CAPABILITIES
from .call_log import CallLog
from .calls import SessionBusy, SessionClosed
from .health import HealthMonitor
from .parked_calls import RequestStateSigner
from .parked_relay import ParkedRelay
from .session import ClientSession
from .session_peer import SessionPeer
from .session_services import SessionServices
from .settings import GatewaySettings
from .sharing import SessionSharing, shareable_id
from .skills import EXTENSION as SKILLS_EXTENSION
from .skills import offered_settings
from .streams import EventStream
from .task_ids import TaskIds, owns_tasks_per_caller

__all__ = ["SERVER_CAPABILITIES", "SHUTTING_DOWN", "Gateway", "TooManySessions",
           "server_capabilities"]

log = logging.getLogger("vmcp.gateway")

SERVER_CAPABILITIES: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
    "completions": {},
}
"""What the virtual server offers clients, whatever its backends offer (a list is empty when no
backend has such items)."""


def server_capabilities(session: ClientSession) -> dict[str, Any]:
    """What the virtual server offers a session's client: :data:`SERVER_CAPABILITIES`, the
    Tasks extension when one of the session's 2026-07-28 backends offers it (the only backends
    a client's declaration is passed to, see :mod:`~vmcp_trio.protocol.tasks_extension`), and
    the Skills extension when one of its backends declares it (``directoryRead`` when one of
    those does: a directory of another's is -32601 from it). Other extensions are not
    announced: the gateway cannot vouch for what it does not know."""
    extensions: dict[str, Any] = {}
    links = session.links.values()
    if any(owns_tasks_per_caller(link.revision.stateless, link.server_capabilities)
           for link in links):
        extensions[TASKS_EXTENSION] = {}
    skills = [settings for link in links
              if (settings := offered_settings(link.server_capabilities)) is not None]
    if skills:
        extensions[SKILLS_EXTENSION] = {"directoryRead": True} if any(
            settings.get("directoryRead") is True for settings in skills) else {}
    return {**SERVER_CAPABILITIES, "extensions": extensions} if extensions \
        else SERVER_CAPABILITIES


def _secrets(plan: GatewayPlan) -> list[bytes]:
    return [secret.value for secret in plan.fleet_secrets]


SHUTTING_DOWN = "the gateway is shutting down; try again (another replica will answer)"


class TooManySessions(Exception):
    """No session for this client now (the message says which bound, and why): 503 when the
    gateway is full, 429 when this client is."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class Gateway:
    def __init__(self, plan: GatewayPlan, settings: GatewaySettings, links: BackendLinks,
                 metrics: Metrics) -> None:
        self.plan = plan
        self.settings = settings
        self.links = links
        self.metrics = metrics
        self.server_info = {"name": f"vmcp-trio/{plan.name}", "version": __version__}
        self.health = HealthMonitor(plan, links, self._health_changed)
        self.sessions: dict[str, ClientSession] = {}
        self._by_client: dict[tuple[str, ...], dict[str, ClientSession]] = {}
        """The handshake sessions of each client (:attr:`Caller.client_key`)."""
        self.stateless_contexts: dict[tuple[str, str], ClientSession] = {}
        self._stateless_lock = trio.Lock()
        """The stateless clients' context, one per identity: their backend links and catalog."""
        self.services = SessionServices(
            plan=plan, links=links, health=self.health, metrics=metrics,
            request_states=RequestStateSigner(_secrets(plan)), task_ids=TaskIds(_secrets(plan)),
            forget=self.forget_session,
            stream_buffer_events=settings.stream_buffer_events,
            sse_retry_ms=settings.sse_retry_ms, max_requests=settings.max_requests_per_session,
            open_seconds=settings.backend_open_seconds)
        self.workload = self.services.workload
        self.draining = False
        """Shutting down: readiness says no (so a load balancer stops sending new clients)."""
        self.refusing = False
        """Later in a drain: new sessions (and 2026-07-28 listen streams) are refused with
        503."""
        self._sessions_nursery: trio.Nursery | None = None
        for process in links.stdio.values():
            process.router = self._route_from_stdio
        self.sharing: SessionSharing | None = None
        """Shared sessions (:meth:`share`); None: this process's sessions are its own."""
        self._adopting: dict[str, trio.Event] = {}
        """Sessions being copied from their record now (one copy per session)."""
        self.parked_relay: ParkedRelay | None = None
        """Shared sessions: 2026-07-28 retries passed to the replica holding their call."""

    def share(self, sharing: SessionSharing, call_log: CallLog) -> None:
        """Serve the handshake sessions every replica records, and log their calls answered
        over SSE so that any replica can resume them (before :meth:`run`)."""
        self.sharing = sharing
        sharing.on_ended = self._ended_elsewhere
        sharing.on_changed = self._changed_elsewhere
        sharing.on_client_message = self._client_message_from_elsewhere
        sharing.on_note = self._note_from_elsewhere
        self.services.call_log = call_log
        self.services.stream_key_prefix = sharing.fleet.replica
        self.parked_relay = ParkedRelay(sharing.fleet)
        self.parked_relay.continue_here = self._continue_parked

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the sessions until cancelled (a supervised task)."""
        async with trio.open_nursery() as nursery:
            self._sessions_nursery = nursery
            if self.sharing is not None:
                self.sharing.start(nursery)
                log.info("replica %s: sessions shared through the session storage",
                         self.sharing.fleet.replica)
            if self.parked_relay is not None:
                self.parked_relay.start(nursery)
            task_status.started()
            await trio.sleep_forever()

    # --- sessions ------------------------------------------------------------------------------

    async def create_session(self, revision: Revision, client_capabilities: dict[str, Any],
                             client_info: dict[str, Any], caller: Caller) -> ClientSession:
        """A new handshake session. Past ``max_sessions_per_client`` this client's longest-idle
        session without an open stream makes room (429 when every one has a stream open: a
        client that never says DELETE cannot lock itself, or anyone, out); a full gateway makes
        room by :meth:`_make_room` (503 when it cannot). Raises :class:`TooManySessions`."""
        mine = self._by_client.setdefault(caller.client_key, {})
        if len(mine) >= self.settings.max_sessions_per_client:
            idle = [s for s in mine.values() if s.open_connections == 0]
            if not idle:
                raise TooManySessions(f"this client holds {len(mine)} sessions with open "
                                      "streams, the most one client may; end one (DELETE) "
                                      "first", status=429)
            oldest = min(idle, key=lambda s: s.last_active)
            log.info("session %s ended: its client opened more than %d sessions",
                     oldest.id[:8], self.settings.max_sessions_per_client)
            self._end_for_room(oldest)
        self._make_room(caller.client_key)
        assert self._sessions_nursery is not None
        session = ClientSession(self.services, secrets.token_urlsafe(24), revision,
                                client_capabilities, client_info, caller)
        self.sessions[session.id] = session
        self._by_client.setdefault(caller.client_key, {})[session.id] = session
        await session.open(self._sessions_nursery)
        if self.sharing is not None:
            await self.sharing.created(session)
        return session

    def held(self) -> int:
        """Sessions and 2026-07-28 contexts held (what ``max_sessions`` bounds)."""
        return len(self.sessions) + len(self.stateless_contexts)

    def _make_room(self, newcomer: tuple[str, ...]) -> None:
        """Room for one more session of the client ``newcomer`` (:attr:`Caller.client_key`)
        when the gateway holds ``max_sessions``, so that no client is refused because of
        another one: the client holding the most sessions gives up its longest-idle one
        (one without an open stream first) when it holds at least two more than the newcomer
        does; the newcomer gives up its own when it holds as many as anyone. Only a table
        shared out evenly (every client at most one session more than the newcomer, who holds
        none) is full: :class:`TooManySessions` (503)."""
        if self.held() < self.settings.max_sessions:
            return
        own = len(self._by_client.get(newcomer, ()))
        largest = max(self._by_client.values(), key=len, default={})
        if len(largest) > own + 1:
            holder = largest
        elif own:
            holder = self._by_client[newcomer]
        else:
            raise TooManySessions(f"the gateway holds {self.held()} sessions, the most it "
                                  "may, shared out evenly among its clients; try again later",
                                  status=503)
        victim = min(holder.values(), key=lambda s: (s.open_connections > 0, s.last_active))
        log.info("session %s ended to make room: the gateway holds %d sessions, the most it "
                 "may, and its client held %d of them", victim.id[:8], self.held(),
                 len(holder))
        self.metrics.sessions_evicted.inc()
        self._end_for_room(victim)

    def _end_for_room(self, session: ClientSession) -> None:
        """End ``session`` now and take it out of the table at once (its teardown finishes
        later)."""
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        mine = self._by_client.get(session.client_key)
        if mine is not None:
            mine.pop(session.id, None)
            if not mine:
                del self._by_client[session.client_key]
        session.close()

    async def stateless_context(self, caller: Caller) -> ClientSession:
        """The context of an identity's 2026-07-28 requests: a session no client can name,
        whose backend links may relay every question (each request says what its client
        takes)."""
        key = caller.identity.key
        session = self.stateless_contexts.get(key)
        if session is not None and not session.closed.is_set():  # the common case: no lock
            session.caller = caller
            return session
        async with self._stateless_lock:
            session = self.stateless_contexts.get(key)
            if session is not None and not session.closed.is_set():
                session.caller = caller
                return session
            self._make_room(caller.client_key)
            assert self._sessions_nursery is not None
            session = ClientSession(self.services, "stateless-" + secrets.token_urlsafe(12),
                                    STATELESS, RELAY_CAPABILITIES, {}, caller)
            if self.parked_relay is not None:
                session.peer = SessionPeer(parked_elsewhere=partial(
                    self._parked_elsewhere, self.parked_relay, session))
            await session.open(self._sessions_nursery)
            self.stateless_contexts[key] = session  # once its links are up (found unlocked)
            return session

    async def find_session(self, session_id: str, caller: Caller) -> ClientSession | None:
        """The live session with this id owned by this caller's identity (else None: 404 for
        both); with shared sessions, a copy of another replica's. Raises
        :class:`TooManySessions` when a copy would pass ``max_sessions``."""
        session = self.sessions.get(session_id)
        if session is None and self.sharing is not None and shareable_id(session_id):
            session = await self._adopt(self.sharing, session_id, caller)
        if (session is None or session.closed.is_set()
                or session.identity.key != caller.identity.key):
            return None
        session.caller = caller
        if self.sharing is not None:
            self.sharing.used(session)
        return session

    async def _adopt(self, sharing: SessionSharing, session_id: str,
                     caller: Caller) -> ClientSession | None:
        waiting = self._adopting.get(session_id)
        if waiting is not None:
            await waiting.wait()
            return self.sessions.get(session_id)
        self._make_room(caller.client_key)
        self._adopting[session_id] = done = trio.Event()
        try:
            record = await sharing.load(session_id, caller)
            negotiated = revision(record.revision) if record is not None else None
            if record is None or negotiated is None or negotiated.stateless:
                return None
            session = ClientSession(self.services, record.id, negotiated,
                                    record.client_capabilities, record.client_info, caller,
                                    joined=record)
            self.sessions[session.id] = session
            self._by_client.setdefault(session.client_key, {})[session.id] = session
            assert self._sessions_nursery is not None
            await session.open(self._sessions_nursery)
            sharing.joined(session)
            self.metrics.shared_sessions.labels("adopted").inc()
            log.info("session %s adopted from replica %s (a copy of its record)", session.id[:8],
                     record.owner)
            return session
        finally:
            del self._adopting[session_id]
            done.set()

    async def continue_logged(self, session: ClientSession, key: str,
                              seq: int) -> EventStream | None:
        """The stream ``key`` of ``session`` after ``seq``, continued here from its call's log
        (another replica began it; :mod:`.call_log`); None when no call was logged so."""
        call_log = self.services.call_log
        if call_log is None or session.revision.stateless:
            return None
        try:
            called = await call_log.call(session.id, key)
        except StorageUnavailable:
            return None
        if called is None:
            return None
        stream = session.streams.continued(key, seq + 1)
        try:
            session.spawn(call_log.follow, session.id, stream, session.resume_call)
        except (SessionBusy, SessionClosed):  # no room for the follower: as if not logged
            stream.finish()
            return None
        return stream

    async def end_session(self, session: ClientSession) -> None:
        """The client ended the session (DELETE): here and, shared, on every replica."""
        session.close()
        if self.sharing is not None and not session.revision.stateless:
            await self.sharing.ended(session)

    def _ended_elsewhere(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.release()  # the replica that ended it ends the backend sessions

    def _changed_elsewhere(self, session_id: str) -> None:
        session, sharing = self.sessions.get(session_id), self.sharing
        if session is not None and sharing is not None and self._sessions_nursery is not None:
            self._sessions_nursery.start_soon(self._refresh, sharing, session)

    def _note_from_elsewhere(self, session_id: str, payload: bytes) -> None:
        """A backend message another replica put on the session's standalone stream: the
        client's GET stream may be here (only then is it put on this copy's)."""
        session = self.sessions.get(session_id)
        if session is not None and session.streams.standalone.followed:
            session.streams.standalone.push(payload)

    @staticmethod
    async def _parked_elsewhere(relay: ParkedRelay, session: ClientSession, call_id: str,
                                request: Request, context: StatelessContext,
                                stream: EventStream) -> Response | ErrorResponse | None:
        holder = relay.holder(call_id)
        if holder is None:
            return None
        return await relay.retry(holder, session.identity.key, request, context, stream)

    async def _continue_parked(self, identity: tuple[str, str], request: Request,
                               context: StatelessContext,
                               stream: EventStream) -> Response | ErrorResponse | None:
        """A retry another replica passed here: the parked call goes on in the identity's
        context (None: no such context here)."""
        session = self.stateless_contexts.get(identity)
        if session is None or session.closed.is_set():
            return None
        return await session.handle_stateless(request, stream, context)

    def _client_message_from_elsewhere(self, session_id: str, message: Message) -> None:
        session = self.sessions.get(session_id)
        if session is not None and not session.closed.is_set() and self._sessions_nursery:
            self._sessions_nursery.start_soon(partial(session.receive, message, forwarded=True))

    async def _refresh(self, sharing: SessionSharing, session: ClientSession) -> None:
        record = await sharing.load(session.id, session.caller)
        if record is not None and not session.closed.is_set():
            session.take(record)

    def forget_session(self, session: ClientSession) -> None:
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        mine = self._by_client.get(session.client_key)
        if mine is not None and mine.get(session.id) is session:
            del mine[session.id]
            if not mine:
                del self._by_client[session.client_key]
        if self.stateless_contexts.get(session.identity.key) is session:
            del self.stateless_contexts[session.identity.key]
        if self.sharing is not None:
            self.sharing.forget(session.id)
        for process in self.links.stdio.values():
            process.forget(session.id)

    def update(self, plan: GatewayPlan, gone: set[str], new: set[str]) -> None:
        """A reload: the new plan for everyone; every session retires its links to the backends
        ``gone`` and connects those ``new`` (both hold the changed ones), and hears its lists
        changed."""
        if plan.fleet_secrets != self.plan.fleet_secrets:  # rotated: new ones seal, all open
            self.services.request_states = RequestStateSigner(_secrets(plan))
            self.services.task_ids = TaskIds(_secrets(plan))
        self.plan = plan
        self.services.plan = plan
        self.server_info = {"name": f"vmcp-trio/{plan.name}", "version": __version__}
        for process in self.links.stdio.values():
            process.router = self._route_from_stdio
        for session in [*self.sessions.values(), *self.stateless_contexts.values()]:
            session.backends_changed(gone, new)

    def close_all(self) -> None:
        for session in [*self.sessions.values(), *self.stateless_contexts.values()]:
            session.close()

    def stop_calls(self, reason: str) -> None:
        """The shutdown deadline: every request still being answered gets a JSON-RPC error
        saying ``reason``."""
        for session in [*self.sessions.values(), *self.stateless_contexts.values()]:
            session.stop_calls(reason)

    def undelivered(self) -> int:
        """Finished response streams that a connected client has not been given whole yet."""
        return sum(session.streams.undelivered()
                   for session in [*self.sessions.values(), *self.stateless_contexts.values()])

    async def reap_idle_sessions(self) -> None:
        """End the sessions idle longer than the TTL (a supervised task)."""
        ttl = self.settings.session_idle_ttl
        while True:
            await trio.sleep(min(10.0, ttl / 4))
            now = trio.current_time()
            for session in [*self.sessions.values(), *self.stateless_contexts.values()]:
                if session.open_connections == 0 and now - session.last_active > ttl:
                    if self.sharing is not None and not session.revision.stateless:
                        log.info("session %s: this copy let go after %.0fs idle here",
                                 session.id[:8], ttl)
                        session.release()  # another replica may be serving it
                        continue
                    log.info("session %s expired after %.0fs idle", session.id[:8], ttl)
                    session.close()

    # --- what reaches sessions from the backends ------------------------------------------------

    async def _health_changed(self, backend: str, usable: bool) -> None:
        for session in [*self.sessions.values(), *self.stateless_contexts.values()]:
            session.backend_health_changed(backend, usable)

    async def _route_from_stdio(self, backend: str, owner: str | None,
                                message: Message) -> None:
        everyone = [*self.sessions.values(), *self.stateless_contexts.values()]
        targets = everyone if owner is None else [s for s in everyone if s.id == owner]
        for session in targets:
            if backend in session.links:
                await session.unrelated_sink(backend)(message)
