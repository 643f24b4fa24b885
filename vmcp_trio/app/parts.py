"""The parts of one gateway process, and how each is made from a plan (at start and on reload).

:func:`build_gateway` makes them, each given only what it uses:

* the upstream HTTP client (shared), the metrics registry;
* the embedded authorization server (``authServerConfig``) with its storage (memory, or Redis
  sealed with the HMAC secrets);
* the incoming authenticator (boundary 1), which validates the embedded server's tokens with its
  in-process keys when there is one;
* each backend's outgoing strategy (boundary 2; token-exchange caches shared per service), the
  stdio processes, and the link policy (:class:`~vmcp_trio.gateway.backends.links.BackendLinks`);
* the gateway (sessions, health) and its HTTP app;
* with ``sessionStorage: redis``, what the replicas share (:class:`SharedParts`): one Redis
  connection for the session records, the messages between replicas and the token-exchange
  cache (the authorization server keeps its own, with its own prefix).

:func:`start_tasks` starts the long-lived tasks of a part under the process's supervisor and
remembers them under the part's name (:attr:`GatewayProcess.tasks`), so that a reload can stop
exactly those of a part it replaces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from ..auth.incoming.authenticator import Authenticator
from ..auth.incoming.build import build_authenticator
from ..auth.outgoing.exchange import TokenExchanger
from ..auth.outgoing.shared_exchange import SharedExchangeCache
from ..auth.outgoing.strategies import BackendStrategy, build_strategy
from ..auth.policy.cedar import CedarPolicies
from ..auth.policy.rate_limits import LocalRateLimiter, RedisRateLimiter
from ..auth.policy.webhooks import Webhooks
from ..authserver.server import AuthorizationServer
from ..authserver.storage import Storage
from ..authserver.storage.memory import MemoryStorage
from ..authserver.storage.redis import RedisStorage
from ..gateway.admission import BackendPolicies, Gate, RateLimiter
from ..gateway.backends.links import BackendLinks
from ..gateway.backends.stdio import StdioProcess
from ..gateway.call_log import CallLog
from ..gateway.core import Gateway
from ..gateway.fleet import Fleet
from ..gateway.server import GatewayApp, ReadinessCheck
from ..gateway.session_records import SessionRecords
from ..gateway.settings import GatewaySettings
from ..gateway.sharing import SessionSharing
from ..http.client import HttpClient
from ..resources.plan import (
    AuthzPlan,
    BackendPlan,
    EmbeddedIncoming,
    GatewayPlan,
    RateLimitRules,
    StdioEndpoint,
)
from ..resources.plan import RedisStorage as RedisStoragePlan
from ..runtime.audit import AuditLog
from ..runtime.metrics import Metrics
from ..runtime.redis import RedisConnection
from ..runtime.supervisor import (
    DEFAULT_POLICY,
    NamedTask,
    RestartPolicy,
    Supervisor,
    TaskHealth,
)

__all__ = [
    "KEY_REFRESH",
    "STDIO_BACKEND",
    "GatewayProcess",
    "SharedParts",
    "audit_log_for",
    "authenticator_for",
    "authorization_server",
    "build_gateway",
    "readiness_of",
    "shared_parts",
    "start_backend_tasks",
    "stdio_process",
    "strategies_for",
    "watch_backends",
    "wire_authserver",
    "wire_policies",
]

STDIO_BACKEND = RestartPolicy(initial=0.5, cap=30.0, reset_after=60.0)
KEY_REFRESH = RestartPolicy(initial=1.0, cap=60.0)


@dataclass(frozen=True)
class SharedParts:
    """What the replicas of a gateway share through its ``sessionStorage`` Redis."""

    redis: RedisConnection
    fleet: Fleet
    sharing: SessionSharing
    call_log: CallLog
    exchange_cache: SharedExchangeCache

    def supervised(self) -> list[NamedTask]:
        return [("session storage connection", self.redis.run),
                ("replica heartbeat", self.fleet.run),
                ("call log writer", self.call_log.run)]

    async def not_ready(self) -> str | None:
        problem = await self.redis.unreachable()
        if problem is not None:
            return f"the session storage is unreachable: {problem}"
        return None if self.fleet.beating else "the replica's heartbeat is not written yet"


def shared_parts(plan: GatewayPlan, settings: GatewaySettings) -> SharedParts | None:
    """The parts the replicas share, with ``sessionStorage: redis`` (else None)."""
    storage = plan.session_storage
    if storage is None:
        return None
    secrets = [secret.value for secret in plan.fleet_secrets]
    redis = RedisConnection(storage, storage.key_prefix)
    fleet = Fleet(redis)
    records = SessionRecords(redis, secrets, ttl=settings.session_idle_ttl)
    call_log = CallLog(redis, fleet, ttl=settings.session_idle_ttl,
                       max_events=settings.stream_buffer_events)
    return SharedParts(redis, fleet, SessionSharing(records, fleet), call_log,
                       SharedExchangeCache(redis, secrets))


@dataclass
class GatewayProcess:
    """The parts of one gateway process."""

    plan: GatewayPlan
    settings: GatewaySettings
    http: HttpClient
    metrics: Metrics
    authserver: AuthorizationServer | None
    authenticator: Authenticator
    exchangers: dict[tuple[str, str | None], TokenExchanger]
    links: BackendLinks
    gateway: Gateway
    app: GatewayApp
    shared: SharedParts | None = None
    audit: AuditLog = field(default_factory=AuditLog.disabled)
    supervisor: Supervisor | None = None
    """The process's supervisor, once running: its ``tasks`` are the tree of tasks."""
    tasks: dict[str, list[TaskHealth]] = field(default_factory=dict)
    """The supervised tasks of each part (``authenticator``, ``authserver``, ``stdio <name>``,
    ``health <name>``), for a reload to stop those of a part it replaces."""
    started_at: float = field(default_factory=time.time)
    status_url: str | None = None
    """The status view's URL, when it has a listener (``--diagnostics-port``)."""
    config_digest: str | None = None
    """The short hash of the configuration serving now (``vmcp_config_info``)."""
    config_loaded_at: float | None = None
    last_reload: tuple[float, str] | None = None
    """When the last reload was tried (Unix time), and its outcome."""

    def config_loaded(self, digest: str | None) -> None:
        """A configuration was loaded now: at start, or accepted by a reload."""
        if digest is not None:
            self.metrics.config_loaded_now(digest)
        self.config_digest, self.config_loaded_at = digest, time.time()

    def reload_tried(self, outcome: str) -> None:
        self.metrics.reloads.labels(outcome).inc()
        self.last_reload = (time.time(), outcome)

    async def start_tasks(self, part: str, tasks: Iterable[NamedTask], *,
                          policy: RestartPolicy = DEFAULT_POLICY, started: bool = True) -> None:
        """Start ``tasks`` (``started``: with ``task_status``, waiting for each to report) and
        remember them as ``part``'s."""
        assert self.supervisor is not None
        handles = self.tasks.setdefault(part, [])
        for name, task in tasks:
            if started:
                handles.append(await self.supervisor.start(name, task, policy=policy))
            else:
                handles.append(self.supervisor.start_soon(name, task, policy=policy))

    def stop_tasks(self, part: str) -> None:
        for handle in self.tasks.pop(part, []):
            handle.stop()


def authorization_server(plan: GatewayPlan, client: HttpClient,
                         storage: Storage | None = None) -> AuthorizationServer | None:
    """The embedded authorization server of ``authServerConfig``, if any. Its tokens are for
    the resource the incoming config names (audience and resource URL). ``storage``: the one to
    keep (a reload that did not change the storage block keeps what it holds)."""
    config = plan.auth_server
    if config is None:
        return None
    incoming = plan.incoming
    resources: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    if isinstance(incoming, EmbeddedIncoming):
        resources = incoming.resources
        scopes = incoming.scopes
    if storage is None:
        storage = MemoryStorage()
        if isinstance(config.storage, RedisStoragePlan):
            # Sealed with the HMAC secrets (ephemeral ones: nothing readable after a restart,
            # as the tokens themselves).
            seal_secrets = [s.value for s in config.hmac_secrets] or [os.urandom(32)]
            storage = RedisStorage(config.storage, seal_secrets)
    return AuthorizationServer(config, resources=resources, scopes=scopes, client=client,
                               storage=storage)


def authenticator_for(plan: GatewayPlan, settings: GatewaySettings, client: HttpClient,
                      authserver: AuthorizationServer | None) -> Authenticator:
    """Boundary 1 (raises IncomingAuthError when the mode cannot be set up)."""
    return build_authenticator(
        plan.incoming, settings.auth, client,
        embedded_keys=authserver.keys if authserver else None,
        still_valid=authserver.session_valid if authserver else None,
        first_seen_valid=authserver.session_not_revoked if authserver else None)


def strategies_for(plan: GatewayPlan, settings: GatewaySettings, client: HttpClient,
                   authserver: AuthorizationServer | None,
                   exchangers: dict[tuple[str, str | None], TokenExchanger],
                   shared: SharedParts | None) -> dict[str, BackendStrategy]:
    """Boundary 2: each backend's strategy (exchange caches shared per exchange service, kept
    across reloads, and shared by the replicas when they share a Redis)."""
    return {backend.name: build_strategy(backend.outgoing, client=client, exchangers=exchangers,
                                         tokens=authserver, cache=settings.token_exchange_cache,
                                         shared=shared.exchange_cache if shared else None)
            for backend in plan.backends}


def stdio_process(backend: BackendPlan, plan: GatewayPlan, settings: GatewaySettings,
                  metrics: Metrics) -> StdioProcess:
    assert isinstance(backend.endpoint, StdioEndpoint)
    process = StdioProcess(
        backend.name, backend.endpoint,
        init_timeout=plan.operational.timeout_for(backend.name).total_seconds(),
        max_calls_per_session=settings.max_stdio_calls_per_session)
    process.on_restart = lambda name: metrics.backend_restarts.labels(name).inc()
    return process


async def start_backend_tasks(process: GatewayProcess, name: str) -> None:
    """A backend's tasks, as part ``backend <name>``: its stdio process (if it is one) and its
    health checker."""
    tasks: list[NamedTask] = []
    stdio = process.links.stdio.get(name)
    if stdio is not None:
        process_task: NamedTask = (f"stdio backend {name}", stdio.run)
        await process.start_tasks(f"backend {name}", [process_task], policy=STDIO_BACKEND,
                                  started=False)
    health = process.gateway.health
    tasks.append((f"health {name}", lambda: health.check_forever(name)))
    await process.start_tasks(f"backend {name}", tasks, started=False)


def readiness_of(authserver: AuthorizationServer | None,
                 shared: SharedParts | None) -> dict[str, ReadinessCheck]:
    checks: dict[str, ReadinessCheck] = {"storage": authserver.not_ready} if authserver else {}
    if shared is not None:
        checks["sessionStorage"] = shared.not_ready
    return checks


def build_gateway(plan: GatewayPlan, settings: GatewaySettings) -> GatewayProcess:
    """The parts of a gateway process (raises IncomingAuthError when the incoming auth mode
    cannot be set up)."""
    http = HttpClient()
    metrics = Metrics()
    authserver = authorization_server(plan, http)
    authenticator = authenticator_for(plan, settings, http, authserver)
    exchangers: dict[tuple[str, str | None], TokenExchanger] = {}
    shared = shared_parts(plan, settings)
    strategies = strategies_for(plan, settings, http, authserver, exchangers, shared)
    stdio = {backend.name: stdio_process(backend, plan, settings, metrics)
             for backend in plan.backends if isinstance(backend.endpoint, StdioEndpoint)}
    links = BackendLinks(plan, http, strategies, stdio)
    gateway = Gateway(plan, settings, links, metrics)
    if shared is not None:
        gateway.share(shared.sharing, shared.call_log)
    app = GatewayApp(gateway, authenticator,
                     extra_endpoints=authserver.handle if authserver else None,
                     readiness=readiness_of(authserver, shared))
    process = GatewayProcess(plan, settings, http, metrics, authserver, authenticator,
                             exchangers, links, gateway, app, shared,
                             audit_log_for(plan, metrics))
    _watch(process)
    wire_shared(process)
    wire_policies(process)
    watch_backends(process, added=set(gateway.health.backends), removed=set())
    return process


def _watch(process: GatewayProcess) -> None:
    """The gauges read on scrape (of whichever authenticator serves now)."""
    metrics, app = process.metrics, process.app
    metrics.watch(metrics.sessions, lambda: len(process.gateway.sessions))
    metrics.watch(metrics.open_streams, lambda: app.responder.open_streams)
    metrics.watch(metrics.tasks, lambda: trio.lowlevel.current_statistics().tasks_living)
    metrics.watch(metrics.anonymous_mode, lambda: 1.0 if app.auth.anonymous else 0.0)
    metrics.watch(metrics.auth_keys_healthy, lambda: 0.0 if app.auth.health().get(
        "keys", "healthy") != "healthy" else 1.0)
    wire_authserver(process)


def wire_shared(process: GatewayProcess) -> None:
    """The counters of what the replicas share."""
    shared, metrics = process.shared, process.metrics
    if shared is None:
        return
    shared.call_log.on_event = lambda event: metrics.shared_sessions.labels(event).inc()
    shared.exchange_cache.on_outcome = (
        lambda outcome: metrics.exchange_shared.labels(outcome).inc())
    shared.redis.on_task_restart = metrics.count_restart


def wire_authserver(process: GatewayProcess) -> None:
    """The counters the authorization server reports to."""
    authserver, metrics = process.authserver, process.metrics
    if authserver is None:
        return
    refreshes = metrics.upstream_refreshes
    authserver.refresher.on_outcome = (
        lambda provider, outcome: refreshes.labels(provider, outcome).inc())
    if isinstance(authserver.storage, RedisStorage):
        authserver.storage.redis.on_task_restart = metrics.count_restart


def audit_log_for(plan: GatewayPlan, metrics: Metrics) -> AuditLog:
    """The process's audit log (``config.audit``; a no-op when not enabled)."""
    if not plan.audit.enabled:
        return AuditLog.disabled()
    return AuditLog(plan.audit, on_drop=metrics.audit_dropped.inc)


def _cedar(authz: AuthzPlan, server_name: str) -> CedarPolicies:
    """The Cedar engine of policies whose resources are under ``MCP::"<server_name>"``."""
    return CedarPolicies(list(authz.policies), authz.entities_json, server_name=server_name,
                         group_claim_name=authz.group_claim_name,
                         role_claim_name=authz.role_claim_name,
                         group_entity_type=authz.group_entity_type)


def gate_for(process: GatewayProcess) -> Gate | None:
    """The authorization policies (the gateway's and its backends' own), rate limits and
    backends' webhooks of the plan (None: none of them)."""
    plan = process.plan
    policies = _cedar(plan.authz, plan.name) if plan.authz is not None else None
    own = [backend for backend in plan.backends if backend.authz is not None
           or backend.rate_limits is not None or backend.webhooks is not None]
    if policies is None and plan.rate_limits is None and not own:
        return None
    gate = Gate(policies, None, process.metrics,
                primary_upstream=plan.authz.primary_upstream_provider if plan.authz else None,
                tokens=process.authserver)

    def limiter(rules: RateLimitRules | None, scope: tuple[str, ...]) -> RateLimiter | None:
        if rules is None:
            return None
        if process.shared is None:
            return LocalRateLimiter(rules)
        return RedisRateLimiter(process.shared.redis, rules,
                                on_unavailable=gate.rate_limit_unavailable, scope=scope)
    gate.limiter = limiter(plan.rate_limits, ())
    gate.backends = {backend.name: BackendPolicies(
        _cedar(backend.authz, backend.name) if backend.authz is not None else None,
        backend.authz.primary_upstream_provider if backend.authz is not None else None,
        limiter(backend.rate_limits, ("backend", backend.name)),
        Webhooks(backend.webhooks, backend.name, process.metrics)
        if backend.webhooks is not None else None) for backend in own}
    return gate


def wire_policies(process: GatewayProcess) -> None:
    """The gate and the audit log every session and the authorization server use (a reload
    that changes them builds new ones: rate-limit buckets of this process start full)."""
    services = process.gateway.services
    services.gate = gate_for(process)
    services.audit = process.audit
    if process.authserver is not None:
        process.authserver.audit = process.audit


def watch_backends(process: GatewayProcess, *, added: set[str], removed: set[str]) -> None:
    """Each backend's health and circuit gauges: one each per backend of the plan, none for
    one a reload removed."""
    metrics, health = process.metrics, process.gateway.health
    for name in removed:
        metrics.backend_healthy.remove(name)
        metrics.backend_circuit_open.remove(name)
    for name in added:
        metrics.watch(metrics.backend_healthy,
                      lambda n=name: 1.0 if health.usable(n) else 0.0,  # type: ignore[misc]
                      name)
        metrics.watch(metrics.backend_circuit_open,
                      lambda n=name: 0.0 if health.circuit_closed(n) else 1.0,  # type: ignore[misc]
                      name)
