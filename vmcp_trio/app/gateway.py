"""Running one ``vmcp serve`` process, whose parts :mod:`.parts` makes from a plan.

:func:`serve_gateway` runs them: the tree of supervised tasks first (:func:`_run_parts`), then
the HTTP server. Shutdown order matters: the gateway drains first (:func:`drain`: readiness off,
new sessions refused, calls in flight finished or stopped with an error, sessions ended: their
SSE streams observe it and finish cleanly), then hypercorn stops accepting, then the rest stops.
:func:`run_gateway` does that on SIGINT or SIGTERM (a second one stops at once); the process then
exits 0.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from ..gateway.core import SHUTTING_DOWN
from ..gateway.server import MCP_PATH
from ..gateway.settings import GatewaySettings
from ..http import hypercorn_guard, hypercorn_tuning
from ..http.serving import listen, serve, server_config
from ..resources.plan import GatewayPlan
from ..runtime.logs import say, write_access_log
from ..runtime.memory_census import MemoryCensus
from ..runtime.memory_trim import trim_forever
from ..runtime.supervisor import Supervisor
from .diagnostics import DiagnosticsApp
from .parts import KEY_REFRESH, GatewayProcess, build_gateway, start_backend_tasks
from .reload import Loaded, Reloader

__all__ = ["GatewayProcess", "build_gateway", "run_gateway", "serve_gateway"]

log = logging.getLogger("vmcp.gateway")


async def _run_parts(process: GatewayProcess, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Everything but the HTTP server, until cancelled: the process's tree of tasks.

    Under the process's supervisor (each restarted with backoff if it fails): the incoming
    authenticator's key refreshers; the authorization server's storage connection, providers'
    key refreshers and upstream-token refresher; one task per stdio backend process; one health
    checker per backend; the table of client sessions (each session then supervises its own
    backend links' streams), the watcher of answers that may turn into streams, the
    idle-session reaper, the access log's writer, the memory trim (:mod:`~vmcp_trio.runtime.
    memory_trim`)."""
    await process.authenticator.prepare()
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(nursery, on_restart=process.metrics.count_restart)
            process.supervisor = supervisor
            if process.authenticator.anonymous:
                log.warning("ANONYMOUS incoming auth: every client is let in without a "
                            "token. For development only; configure incomingAuth type "
                            "oidc for anything else.")
            await process.start_tasks("authenticator", process.authenticator.supervised(),
                                      policy=KEY_REFRESH)
            if process.authserver is not None:
                await process.start_tasks("authserver", process.authserver.supervised(),
                                          policy=KEY_REFRESH)
            await process.start_tasks("audit", [("audit log writer", process.audit.run)])
            if process.shared is not None:  # not waited for: /readyz says when it is up
                await process.start_tasks("shared", process.shared.supervised(),
                                          policy=KEY_REFRESH, started=False)
            for name in process.gateway.health.backends:
                await start_backend_tasks(process, name)
            gateway = process.gateway
            await supervisor.start("client sessions", gateway.run)
            await supervisor.start("JSON windows", process.app.responder.watch_windows)
            supervisor.start_soon("idle-session reaper", gateway.reap_idle_sessions)
            supervisor.start_soon("idle connection expiry", process.http.expire_idle_forever)
            supervisor.start_soon("memory trim", trim_forever)
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
    config = server_config(settings.host, settings.port,
                           max_header_bytes=settings.max_header_bytes,
                           idle_seconds=settings.idle_connection_seconds,
                           tls_cert=tls_cert, tls_key=tls_key)
    sockets = listen(config)  # before anything starts: an operator's mistake is one line
    diagnostics = None
    if settings.diagnostics_port is not None:
        diagnostics = server_config(settings.diagnostics_host, settings.diagnostics_port,
                                    max_header_bytes=settings.max_header_bytes,
                                    idle_seconds=settings.idle_connection_seconds)
        diagnostics_sockets = listen(diagnostics)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_run_parts, process)
        served = trio.Event()
        binds: list[str] = await nursery.start(partial(
            serve, process.app, config, sockets, shutdown_trigger=stop.wait, served=served))
        if diagnostics is not None:  # up until the end: a drain shows on it
            status_binds: list[str] = await nursery.start(partial(
                serve, DiagnosticsApp(process, settings.diagnostics_host), diagnostics,
                diagnostics_sockets, shutdown_trigger=stop.wait))
            process.status_url = status_binds[0] + "/"
        task_status.started([f"{bind}{MCP_PATH}" for bind in binds])
        await shutdown_trigger()
        await drain(process)
        stop.set()
        with trio.move_on_after(10):  # hypercorn returns from serve() once drained
            await served.wait()
        nursery.cancel_scope.cancel()


_SETTLE = 0.1
"""Seconds between the last answer of a drain and the end of the sessions: a client that got
its last answer closes its streams itself, instead of seeing them cut and reconnecting to a
gateway that no longer listens."""


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
    await trio.sleep(_SETTLE)  # and a client that just got its last answer may leave first
    gateway.close_all()
    with trio.move_on_after(settings.keepalive_seconds):
        while gateway.sessions:
            await trio.sleep(0.02)


async def run_gateway(plan: GatewayPlan, settings: GatewaySettings, *,
                      tls_cert: str | None = None, tls_key: str | None = None,
                      config_digest: str | None = None,
                      load: Callable[[], Loaded] | None = None,
                      fingerprint: Callable[[], str] | None = None,
                      on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (:func:`drain`); a second signal stops at
    once. With ``load`` (the configuration, loaded and validated again), SIGHUP reloads it,
    and so does a change of ``fingerprint`` (``--watch``) (see :mod:`.reload`). SIGUSR1 writes
    a memory census to the log (:mod:`~vmcp_trio.runtime.memory_census`). ``config_digest``:
    the short hash of the configuration ``plan`` was loaded from (``vmcp_config_info``)."""
    process = build_gateway(plan, settings)
    process.config_loaded(config_digest)
    reloader = Reloader(process, load, fingerprint=fingerprint) if load is not None else None
    census = MemoryCensus()
    first = trio.Event()
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                           signal.SIGUSR1) as signals:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if signum == signal.SIGUSR1:
                        say("vmcp: SIGUSR1, a memory census in the log", signal=name)
                        census.log()
                    elif signum == signal.SIGHUP:
                        if reloader is None:
                            say("vmcp: SIGHUP ignored: no configuration files to reload")
                        else:
                            say("vmcp: SIGHUP, reloading the configuration", signal=name)
                            reloader.request()
                    elif not first.is_set():
                        say(f"vmcp: {name}, draining (up to "
                            f"{settings.shutdown_grace_seconds:g}s; a second signal stops at "
                            "once)", signal=name)
                        first.set()
                    else:
                        say(f"vmcp: {name} again, stopping now", signal=name)
                        nursery.cancel_scope.cancel()

        async def serving(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve_gateway(process, shutdown_trigger=first.wait, tls_cert=tls_cert,
                                tls_key=tls_key, task_status=task_status)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_signals)
        urls = await nursery.start(serving)
        if reloader is not None:
            assert process.supervisor is not None
            process.supervisor.start_soon("config reloader", reloader.run)
        if on_ready is not None:
            on_ready(urls + ([process.status_url] if process.status_url else []))
