"""The gateway process: its settings, its backends and its client sessions.

:class:`Gateway` owns what lives as long as the process: the shared upstream HTTP client, one
supervised :class:`~.backends.stdio.StdioProcess` per stdio backend, and the table of client
sessions (each running in the sessions nursery, see :meth:`Gateway.run`). A reaper ends sessions
idle for longer than the TTL; a client holding a stream open is not idle.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

import trio

from ..auth.identity import Identity
from ..auth.incoming.build import AuthSettings, build_authenticator
from ..auth.outgoing.caller import CALLER
from ..auth.outgoing.exchange import TokenExchanger
from ..auth.outgoing.strategies import CredentialError, OutgoingStrategy, build_strategy
from ..authserver.server import AuthorizationServer
from ..authserver.storage import Storage
from ..authserver.storage.memory import MemoryStorage as MemoryStore
from ..authserver.storage.redis import RedisStorage
from ..http.client import HttpClient
from ..protocol.jsonrpc import Message
from ..protocol.revisions import STATELESS, Revision
from ..resources.plan import (
    EmbeddedIncoming,
    GatewayPlan,
    HttpEndpoint,
    StdioEndpoint,
)
from ..resources.plan import RedisStorage as RedisStoragePlan
from ..runtime.metrics import Metrics
from .backends.base import (
    BackendError,
    BackendLink,
    CredentialHook,
    FallbackToLegacy,
    Sink,
)
from .backends.http import HttpBackendLink
from .backends.legacy_sse import LegacySseBackendLink
from .backends.stateless import StatelessBackendLink
from .backends.stdio import RELAY_CAPABILITIES, StdioBackendLink, StdioProcess
from .health import HealthMonitor
from .mrtr import RequestStateSigner
from .session import ClientSession

__all__ = ["Gateway", "GatewaySettings", "HttpLink", "TooManySessions"]

log = logging.getLogger("vmcp.gateway")

HttpLink = StatelessBackendLink | HttpBackendLink | LegacySseBackendLink
"""The links to a backend reached by URL."""


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 4483
    session_idle_ttl: float = 30 * 60.0
    max_sessions: int = 10_000
    max_body_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 16 * 1024
    stream_buffer_events: int = 256
    sse_retry_ms: int = 2000
    keepalive_seconds: float = 15.0
    json_window_seconds: float = 1.0
    """How long a request may wait for its backend before the reply switches to SSE."""
    allowed_origins: tuple[str, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)
    token_exchange_cache: bool = True
    """False exchanges tokens on every backend request (ToolHive's behaviour; benchmarks)."""
    trust_forwarded_headers: bool = False
    """Take the resource URL's scheme and host from X-Forwarded-Proto/-Host (behind a trusted
    load balancer that sets them) when no resourceUrl is configured."""
    extra: dict[str, Any] = field(default_factory=dict)


class TooManySessions(Exception):
    pass


class SessionCredentials:
    """A backend's outgoing strategy as one client session's link sees it.

    The credential is computed for the session's latest caller, so that the link's long-lived
    work (a GET or listen stream reconnecting long after the request that opened it) uses the
    token the client sends now, not the one it sent then (every caller of a session is the same
    identity). A failure to get one is that backend's error (a JSON-RPC error naming it)."""

    def __init__(self, backend: str, strategy: OutgoingStrategy,
                 session: ClientSession) -> None:
        self.backend = backend
        self.strategy = strategy
        self.session = session

    async def headers(self) -> list[tuple[str, str]]:
        token = CALLER.set(self.session.caller or CALLER.get())
        try:
            return await self.strategy.headers()
        except CredentialError as exc:
            raise BackendError(self.backend, f"has no credential for this caller: {exc}") \
                from None
        finally:
            CALLER.reset(token)


def _authorization_server(plan: GatewayPlan, client: HttpClient) -> AuthorizationServer | None:
    """The embedded authorization server of ``authServerConfig``, if any. Its tokens are for
    the resource the incoming config names (audience and resource URL)."""
    config = plan.auth_server
    if config is None:
        return None
    incoming = plan.incoming
    resources: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    if isinstance(incoming, EmbeddedIncoming):
        resources = tuple(dict.fromkeys(r for r in (incoming.audience, incoming.resource_url)
                                        if r))
        scopes = incoming.scopes
    storage: Storage = MemoryStore()
    if isinstance(config.storage, RedisStoragePlan):
        # Sealed with the HMAC secrets (ephemeral ones: nothing readable after a restart, as
        # the tokens themselves).
        seal_secrets = [s.value for s in config.hmac_secrets] or [os.urandom(32)]
        storage = RedisStorage(config.storage, seal_secrets)
    return AuthorizationServer(config, resources=resources, scopes=scopes, client=client,
                               storage=storage)


class Gateway:
    def __init__(self, plan: GatewayPlan, settings: GatewaySettings) -> None:
        self.plan = plan
        self.settings = settings
        self.http = HttpClient()
        self.authserver = _authorization_server(plan, self.http)
        self.authenticator = build_authenticator(
            plan.incoming, settings.auth, self.http,
            embedded_keys=self.authserver.keys if self.authserver else None,
            still_valid=self.authserver.session_valid if self.authserver else None,
            first_seen_valid=self.authserver.session_not_revoked if self.authserver else None)
        """Boundary 1 (raises IncomingAuthError when the mode cannot be set up)."""
        self.sessions: dict[str, ClientSession] = {}
        self.stdio: dict[str, StdioProcess] = {}
        for backend in plan.backends:
            if isinstance(backend.endpoint, StdioEndpoint):
                self.stdio[backend.name] = StdioProcess(backend.name, backend.endpoint,
                                                        router=self._route_from_stdio)
        self._sessions_nursery: trio.Nursery | None = None
        self.shutting_down = trio.Event()
        self.request_states = RequestStateSigner()
        """Signs and checks 2026-07-28 ``requestState`` values (per process)."""
        self.stateless_sessions: dict[tuple[str, str], ClientSession] = {}
        self._stateless_lock = trio.Lock()
        """The stateless clients' context, one per identity: their backend links and catalog."""
        self.handshake_backends: set[str] = set()
        """Streamable HTTP backends found not to speak 2026-07-28."""
        self.legacy_backends: set[str] = set()
        """Streamable HTTP backends found to speak only the legacy HTTP+SSE transport."""
        exchangers: dict[tuple[str, str | None], TokenExchanger] = {}
        self.strategies: dict[str, OutgoingStrategy] = {
            backend.name: build_strategy(backend.outgoing, client=self.http,
                                         exchangers=exchangers, tokens=self.authserver,
                                         cache=settings.token_exchange_cache)
            for backend in plan.backends}
        """Boundary 2: each backend's outgoing strategy (exchange caches shared per service)."""
        self.exchangers = exchangers
        self.health = HealthMonitor(self, self._health_changed)
        self.metrics = Metrics()
        self.open_streams = 0
        self.metrics.watch(self.metrics.sessions, lambda: len(self.sessions))
        self.metrics.watch(self.metrics.open_streams, lambda: self.open_streams)
        if self.authserver is not None:
            refreshes = self.metrics.upstream_refreshes
            self.authserver.refresher.on_outcome = (
                lambda provider, outcome: refreshes.labels(provider, outcome).inc())
        self.metrics.watch(self.metrics.anonymous_mode,
                           lambda: 1.0 if self.authenticator.anonymous else 0.0)
        if not self.authenticator.anonymous:
            self.metrics.watch(self.metrics.auth_keys_healthy, lambda: 1.0 if self.authenticator
                               .health().get("keys", "healthy") == "healthy" else 0.0)
        for name, health in self.health.backends.items():
            self.metrics.watch(self.metrics.backend_healthy,
                               lambda h=health: 1.0 if h.usable else 0.0, name)  # type: ignore[misc]
        for name, process in self.stdio.items():
            self.metrics.watch(self.metrics.backend_restarts,
                               lambda p=process: p.restarts, name)  # type: ignore[misc]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise the stdio backends and hold the sessions until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                if self.authenticator.anonymous:
                    log.warning("ANONYMOUS incoming auth: every client is let in without a "
                                "token. For development only; configure incomingAuth type "
                                "oidc for anything else.")
                await nursery.start(self.authenticator.run)
                if self.authserver is not None:
                    await nursery.start(self.authserver.run)
                for process in self.stdio.values():
                    await nursery.start(process.run)
                await nursery.start(self.health.run)
                nursery.start_soon(self._reap_idle_sessions)
                self._sessions_nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.shutting_down.set()
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    # --- sessions ------------------------------------------------------------------------------

    async def create_session(self, revision: Revision, client_capabilities: dict[str, Any],
                             client_info: dict[str, Any], identity: Identity) -> ClientSession:
        if len(self.sessions) >= self.settings.max_sessions:
            raise TooManySessions
        assert self._sessions_nursery is not None
        session = ClientSession(self, secrets.token_urlsafe(24), revision, client_capabilities,
                                client_info, identity)
        session.caller = CALLER.get()
        self.sessions[session.id] = session
        await self._sessions_nursery.start(session.run)
        return session

    async def stateless_session(self, identity: Identity) -> ClientSession:
        """The context of an identity's 2026-07-28 requests: a session no client can name,
        whose backend links may relay every question (each request says what its client
        takes)."""
        async with self._stateless_lock:
            session = self.stateless_sessions.get(identity.key)
            if session is not None and not session.closed.is_set():
                session.caller = CALLER.get()
                return session
            assert self._sessions_nursery is not None
            session = ClientSession(self, "stateless-" + secrets.token_urlsafe(12), STATELESS,
                                    RELAY_CAPABILITIES, {}, identity)
            session.caller = CALLER.get()
            self.stateless_sessions[identity.key] = session
            await self._sessions_nursery.start(session.run)
            return session

    def find_session(self, session_id: str, identity: Identity) -> ClientSession | None:
        """The live session with this id owned by this identity (else None: 404 for both)."""
        session = self.sessions.get(session_id)
        if session is None or session.closed.is_set() or session.identity.key != identity.key:
            return None
        session.caller = CALLER.get()
        return session

    def forget_session(self, session: ClientSession) -> None:
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        if self.stateless_sessions.get(session.identity.key) is session:
            del self.stateless_sessions[session.identity.key]
        for process in self.stdio.values():
            process.forget(session.id)

    async def _reap_idle_sessions(self) -> None:
        ttl = self.settings.session_idle_ttl
        while True:
            await trio.sleep(min(10.0, ttl / 4))
            now = trio.current_time()
            for session in [*self.sessions.values(), *self.stateless_sessions.values()]:
                if session.open_connections == 0 and now - session.last_active > ttl:
                    log.info("session %s expired after %.0fs idle", session.id[:8], ttl)
                    session.close()

    # --- backends ------------------------------------------------------------------------------

    async def open_link(self, name: str, session: ClientSession,
                        nursery: trio.Nursery) -> BackendLink:
        backend = next(b for b in self.plan.backends if b.name == name)
        endpoint = backend.endpoint
        timeout = self.plan.operational.timeout_for(name).total_seconds()
        if not self.health.usable(name):
            raise BackendError(name, f"is unhealthy ({self.health.backends[name].last_error})")
        if isinstance(endpoint, HttpEndpoint):
            return await self.connect_http(name, endpoint, nursery, session.client_capabilities,
                                           session.unrelated_sink(name), timeout,
                                           credentials=SessionCredentials(
                                               name, self.strategies[name], session))
        process = self.stdio[name]
        with trio.move_on_after(timeout):
            await process.ready.wait()
        if not process.ready.is_set():
            raise BackendError(name, f"is not running ({process.last_error or 'starting'})")
        return StdioBackendLink(process, session.id, timeout=timeout)

    async def connect_http(self, name: str, endpoint: HttpEndpoint, nursery: trio.Nursery,
                           capabilities: dict[str, Any], sink: Sink, timeout: float, *,
                           listen: bool = True,
                           credentials: CredentialHook | None = None) -> HttpLink:
        """A started link to an HTTP backend, in the newest revision it speaks: 2026-07-28 when
        it answers ``server/discover``, else a handshake revision over Streamable HTTP, or the
        legacy HTTP+SSE transport when the resource says ``transport: sse`` or the backend
        refused ``initialize`` with 400, 404 or 405. What a backend turned out not to speak is
        remembered, so later sessions go straight to what it does."""
        if endpoint.transport == "streamable-http" and name not in self.handshake_backends:
            stateless = StatelessBackendLink(name, endpoint.url, self.http, session_sink=sink,
                                       credentials=credentials, timeout=timeout)
            if await stateless.start(nursery, capabilities, listen=listen):
                return stateless
            self.handshake_backends.add(name)
        refused: FallbackToLegacy | None = None
        if endpoint.transport == "streamable-http" and name not in self.legacy_backends:
            link = HttpBackendLink(name, endpoint.url, self.http, session_sink=sink,
                                   credentials=credentials, timeout=timeout)
            try:
                await link.start(nursery, capabilities, listen=listen)
                return link
            except FallbackToLegacy as exc:
                refused = exc
        legacy = LegacySseBackendLink(name, endpoint.url, self.http, session_sink=sink,
                                      credentials=credentials, timeout=timeout)
        try:
            await legacy.start(nursery, capabilities)
        except BackendError:
            if refused is not None:
                raise refused from None
            raise
        if refused is not None:
            log.info("backend %s speaks the legacy HTTP+SSE transport (%s)", name,
                     refused.detail)
            self.legacy_backends.add(name)
        return legacy

    async def _health_changed(self, backend: str, usable: bool) -> None:
        for session in [*self.sessions.values(), *self.stateless_sessions.values()]:
            await session.backend_health_changed(backend, usable)

    async def _route_from_stdio(self, backend: str, owner: str | None,
                                message: Message) -> None:
        everyone = [*self.sessions.values(), *self.stateless_sessions.values()]
        targets = everyone if owner is None else [s for s in everyone if s.id == owner]
        for session in targets:
            if backend in session.links:
                await session.unrelated_sink(backend)(message)
