"""One ``vmcp serve`` process, assembled from a plan: the only module that knows every part.

:func:`build_gateway` makes the parts, each given only what it uses:

* the upstream HTTP client (shared), the metrics registry;
* the embedded authorization server (``authServerConfig``) with its storage (memory, or Redis
  sealed with the HMAC secrets);
* the incoming authenticator (boundary 1), which validates the embedded server's tokens with its
  in-process keys when there is one;
* each backend's outgoing strategy (boundary 2; token-exchange caches shared per service), the
  stdio processes, and the link policy (:class:`~vmcp_trio.gateway.backends.links.BackendLinks`);
* the gateway (sessions, health) and its HTTP app.

:func:`serve_gateway` runs them: the tree of supervised tasks first (:func:`_run_parts`), then
the HTTP server. Shutdown order matters: the gateway drains first (:func:`drain`: readiness off,
new sessions refused, calls in flight finished or stopped with an error, sessions ended: their
SSE streams observe it and finish cleanly), then hypercorn stops accepting, then the rest stops.
:func:`run_gateway` does that on SIGINT or SIGTERM (a second one stops at once); the process then
exits 0.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import trio

from ..auth.incoming.authenticator import Authenticator
from ..auth.incoming.build import build_authenticator
from ..auth.outgoing.exchange import TokenExchanger
from ..auth.outgoing.strategies import OutgoingStrategy, build_strategy
from ..authserver.server import AuthorizationServer
from ..authserver.storage import Storage
from ..authserver.storage.memory import MemoryStorage
from ..authserver.storage.redis import RedisStorage
from ..gateway.backends.links import BackendLinks
from ..gateway.backends.stdio import StdioProcess
from ..gateway.core import SHUTTING_DOWN, Gateway
from ..gateway.server import MCP_PATH, GatewayApp
from ..gateway.settings import GatewaySettings
from ..http import hypercorn_guard, hypercorn_tuning
from ..http.client import HttpClient
from ..http.serving import hypercorn_config, listen, serve
from ..resources.plan import EmbeddedIncoming, GatewayPlan, StdioEndpoint
from ..resources.plan import RedisStorage as RedisStoragePlan
from ..runtime.logs import say, write_access_log
from ..runtime.metrics import Metrics
from ..runtime.supervisor import RestartPolicy, Supervisor

__all__ = ["GatewayProcess", "build_gateway", "run_gateway", "serve_gateway"]

log = logging.getLogger("vmcp.gateway")


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
    supervisor: Supervisor | None = None
    """The process's supervisor, once running: its ``tasks`` are the tree of tasks."""


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
    storage: Storage = MemoryStorage()
    if isinstance(config.storage, RedisStoragePlan):
        # Sealed with the HMAC secrets (ephemeral ones: nothing readable after a restart, as
        # the tokens themselves).
        seal_secrets = [s.value for s in config.hmac_secrets] or [os.urandom(32)]
        storage = RedisStorage(config.storage, seal_secrets)
    return AuthorizationServer(config, resources=resources, scopes=scopes, client=client,
                               storage=storage)


def build_gateway(plan: GatewayPlan, settings: GatewaySettings) -> GatewayProcess:
    """The parts of a gateway process (raises IncomingAuthError when the incoming auth mode
    cannot be set up)."""
    http = HttpClient()
    metrics = Metrics()
    authserver = _authorization_server(plan, http)
    authenticator = build_authenticator(
        plan.incoming, settings.auth, http,
        embedded_keys=authserver.keys if authserver else None,
        still_valid=authserver.session_valid if authserver else None,
        first_seen_valid=authserver.session_not_revoked if authserver else None)
    exchangers: dict[tuple[str, str | None], TokenExchanger] = {}
    strategies: dict[str, OutgoingStrategy] = {
        backend.name: build_strategy(backend.outgoing, client=http, exchangers=exchangers,
                                     tokens=authserver, cache=settings.token_exchange_cache)
        for backend in plan.backends}
    stdio = {backend.name: StdioProcess(
                 backend.name, backend.endpoint,
                 init_timeout=plan.operational.timeout_for(backend.name).total_seconds(),
                 max_calls_per_session=settings.max_stdio_calls_per_session)
             for backend in plan.backends if isinstance(backend.endpoint, StdioEndpoint)}
    links = BackendLinks(plan, http, strategies, stdio)
    gateway = Gateway(plan, settings, links, metrics)
    app = GatewayApp(gateway, authenticator,
                     extra_endpoints=authserver.handle if authserver else None,
                     readiness={"storage": authserver.not_ready} if authserver else None)
    _watch(metrics, gateway, app, authenticator, authserver)
    return GatewayProcess(plan, settings, http, metrics, authserver, authenticator, exchangers,
                          links, gateway, app)


def _watch(metrics: Metrics, gateway: Gateway, app: GatewayApp, authenticator: Authenticator,
           authserver: AuthorizationServer | None) -> None:
    """The gauges read on scrape, and the counters other parts report to."""
    metrics.watch(metrics.sessions, lambda: len(gateway.sessions))
    metrics.watch(metrics.open_streams, lambda: app.responder.open_streams)
    metrics.watch(metrics.anonymous_mode, lambda: 1.0 if authenticator.anonymous else 0.0)
    if not authenticator.anonymous:
        metrics.watch(metrics.auth_keys_healthy, lambda: 1.0 if authenticator.health().get(
            "keys", "healthy") == "healthy" else 0.0)
    if authserver is not None:
        refreshes = metrics.upstream_refreshes
        authserver.refresher.on_outcome = (
            lambda provider, outcome: refreshes.labels(provider, outcome).inc())
        if isinstance(authserver.storage, RedisStorage):
            authserver.storage.on_task_restart = metrics.count_restart
    for name, health in gateway.health.backends.items():
        metrics.watch(metrics.backend_healthy,
                      lambda h=health: 1.0 if h.usable else 0.0, name)  # type: ignore[misc]
    for process in gateway.links.stdio.values():
        process.on_restart = lambda name: metrics.backend_restarts.labels(name).inc()


STDIO_BACKEND = RestartPolicy(initial=0.5, cap=30.0, reset_after=60.0)
KEY_REFRESH = RestartPolicy(initial=1.0, cap=60.0)


async def _run_parts(process: GatewayProcess, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Everything but the HTTP server, until cancelled: the process's tree of tasks.

    Under the process's supervisor (each restarted with backoff if it fails): the incoming
    authenticator's key refreshers; the authorization server's storage connection, providers'
    key refreshers and upstream-token refresher; one task per stdio backend process; one health
    checker per backend; the table of client sessions (each session then supervises its own
    backend links' streams), the idle-session reaper, the access log's writer."""
    await process.authenticator.prepare()
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(nursery, on_restart=process.metrics.count_restart)
            process.supervisor = supervisor
            if process.authenticator.anonymous:
                log.warning("ANONYMOUS incoming auth: every client is let in without a "
                            "token. For development only; configure incomingAuth type "
                            "oidc for anything else.")
            for name, task in process.authenticator.supervised():
                await supervisor.start(name, task, policy=KEY_REFRESH)
            if process.authserver is not None:
                for name, task in process.authserver.supervised():
                    await supervisor.start(name, task, policy=KEY_REFRESH)
            for name, stdio in process.links.stdio.items():
                supervisor.start_soon(f"stdio backend {name}", stdio.run, policy=STDIO_BACKEND)
            gateway = process.gateway
            for name in gateway.health.backends:
                supervisor.start_soon(f"health {name}", gateway.health.check_forever, name)
            await supervisor.start("client sessions", gateway.run)
            supervisor.start_soon("idle-session reaper", gateway.reap_idle_sessions)
            supervisor.start_soon("access log", write_access_log)
            task_status.started()
    finally:
        with trio.CancelScope(shield=True):
            await process.http.aclose()


async def serve_gateway(process: GatewayProcess, *,
                        shutdown_trigger: Callable[[], Awaitable[None]],
                        tls_cert: str | None = None, tls_key: str | None = None,
                        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                        ) -> None:
    """Serve until ``shutdown_trigger`` returns; reports the ``/mcp`` URLs when listening."""
    hypercorn_tuning.install()
    hypercorn_guard.install(process.metrics.faults.labels("connection").inc)
    settings = process.settings
    config = hypercorn_config(settings.host, settings.port,
                              max_header_bytes=settings.max_header_bytes,
                              idle_seconds=settings.idle_connection_seconds,
                              tls_cert=tls_cert, tls_key=tls_key)
    sockets = listen(config)  # before anything starts: an operator's mistake is one line
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_run_parts, process)
        binds: list[str] = await nursery.start(partial(
            serve, process.app, config, sockets, shutdown_trigger=stop.wait))
        task_status.started([f"{bind}{MCP_PATH}" for bind in binds])
        await shutdown_trigger()
        await drain(process)
        stop.set()
        with trio.move_on_after(10):  # hypercorn returns from serve() once drained
            while len(nursery.child_tasks) > 1:
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()


async def drain(process: GatewayProcess) -> None:
    """The graceful part of a shutdown: readiness says no at once (a load balancer stops
    sending new clients); new sessions are still served for ``drain_delay`` (while it
    notices), then refused with 503; the calls in flight have until ``shutdown_grace`` to
    finish and are delivered whole; at that deadline each call left gets a JSON-RPC error
    saying the gateway is shutting down (a streamed call ends with that event); then the
    sessions end."""
    settings, gateway = process.settings, process.gateway
    grace = settings.shutdown_grace_seconds
    deadline = trio.current_time() + grace
    gateway.draining = True
    log.info("draining: /readyz says 503; new sessions are refused after %gs; calls in flight "
             "have %gs to finish", min(settings.drain_delay_seconds, grace), grace)
    await trio.sleep_until(min(trio.current_time() + settings.drain_delay_seconds, deadline))
    gateway.refusing = True
    with trio.move_on_at(deadline):
        await gateway.workload.wait_idle()
    if gateway.workload.active:
        log.warning("the shutdown grace (%gs) is over: %d call(s) still at work are stopped, "
                    "each told the gateway is shutting down", grace, gateway.workload.active)
        gateway.stop_calls(SHUTTING_DOWN)
        with trio.move_on_after(5):
            await gateway.workload.wait_idle()
    with trio.move_on_after(2):  # the last answers reach the clients connected for them
        while gateway.undelivered():
            await trio.sleep(0.02)
    gateway.close_all()
    with trio.move_on_after(settings.keepalive_seconds):
        while gateway.sessions:
            await trio.sleep(0.02)


async def run_gateway(plan: GatewayPlan, settings: GatewaySettings, *,
                      tls_cert: str | None = None, tls_key: str | None = None,
                      on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (:func:`drain`); a second signal stops at
    once."""
    process = build_gateway(plan, settings)
    first = trio.Event()
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if not first.is_set():
                        say(f"vmcp: {name}, draining (up to "
                            f"{settings.shutdown_grace_seconds:g}s; a second signal stops at "
                            "once)", signal=name)
                        first.set()
                    else:
                        say(f"vmcp: {name} again, stopping now", signal=name)
                        nursery.cancel_scope.cancel()

        async def serve(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve_gateway(process, shutdown_trigger=first.wait, tls_cert=tls_cert,
                                tls_key=tls_key, task_status=task_status)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_signals)
        urls = await nursery.start(serve)
        if on_ready is not None:
            on_ready(urls)
