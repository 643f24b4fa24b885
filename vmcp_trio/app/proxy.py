"""Running one ``vmcp proxy`` process from its settings.

:func:`build_proxy` makes the parts: the HTTP client (shared), the incoming authenticator and its
boundary (``--oidc-*``; the same code as ``vmcp serve``), the outgoing credentials (a bearer
token, the remote login, token exchange with the gateway's exchanger), the forwarder and the
app. :func:`run_proxy` serves until SIGINT or SIGTERM, under one supervisor for the long-lived
tasks (the issuer's key refreshers, the remote login and its refresher), then drains like ``vmcp
serve``: new requests are still forwarded for ``drain_delay``, then refused with 503; those in
flight have until ``shutdown_grace`` (a stream still open then is cut); a second signal stops at
once. Exit 0.

Ctrl-C at a terminal stops at once instead (no drain): a SIGINT while the proxy is its
controlling terminal's foreground job (:func:`from_terminal`) comes from a person who wants it
gone, and no load balancer is waiting to be told. The contract keeps the drain for SIGTERM and
for a SIGINT sent by a supervisor (``--drain-delay``, default 5s); ``--drain-delay 0s`` skips
its wait there too. SIGHUP is logged, and re-reads ``--remote-auth-bearer-token-file``
(:mod:`vmcp_trio.proxy.token_file`, which also re-reads it when it changes).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import trio

from ..auth.boundary import IncomingBoundary
from ..auth.incoming.authenticator import Authenticator
from ..auth.incoming.build import AuthSettings, build_authenticator
from ..auth.outgoing.exchange import TokenExchanger
from ..auth.outgoing.strategies import build_strategy
from ..http import hypercorn_guard, hypercorn_tuning
from ..http.client import HttpClient
from ..http.origin import OriginGuard
from ..http.serving import listen, serve, server_config
from ..proxy.credentials import Exchanged, RemoteCredential, StaticBearer
from ..proxy.forwarder import Forwarder
from ..proxy.login_store import LoginStore
from ..proxy.remote_login import RemoteLogin
from ..proxy.server import ProxyApp
from ..proxy.settings import ProxySettings
from ..proxy.stdio_bridge import StdioBridge, standard_streams
from ..proxy.token_file import BearerTokenFile
from ..proxy.tool_filter import ToolFilter
from ..runtime.logs import say, write_access_log
from ..runtime.supervisor import NamedTask, RestartPolicy, Supervisor

__all__ = ["ProxyProcess", "build_proxy", "from_terminal", "outgoing_credentials", "run_proxy",
           "run_stdio", "serve_proxy"]

log = logging.getLogger("vmcp.proxy")

KEY_REFRESH = RestartPolicy(initial=1.0, cap=60.0)


@dataclass
class ProxyProcess:
    settings: ProxySettings
    http: HttpClient
    authenticator: Authenticator | None
    app: ProxyApp
    supervised: list[NamedTask] = field(default_factory=list)
    """The long-lived tasks of the parts, for the supervisor."""
    token_file: BearerTokenFile | None = None
    """``--remote-auth-bearer-token-file``'s credential, re-read on SIGHUP."""


def build_proxy(settings: ProxySettings, *,
                open_url: Callable[[str, float], None] | None = None) -> ProxyProcess:
    """The parts of a proxy process (raises IncomingAuthError when the incoming auth cannot be
    set up). ``open_url`` shows the user the remote login's authorization URL (default: printed
    on stderr, and opened in a browser unless ``--remote-auth-skip-browser``)."""
    http = HttpClient()
    supervised: list[NamedTask] = []
    authenticator = boundary = None
    if settings.incoming is not None:
        authenticator = build_authenticator(settings.incoming, AuthSettings(), http)
        supervised += authenticator.supervised()
        boundary = IncomingBoundary(
            authenticator, path=urlsplit(settings.target_uri).path or "/",
            default_host=f"{settings.host}:{settings.port}",
            configured_resource=settings.incoming.resource_url,
            scopes_supported=settings.scopes_supported)
    credentials, login_tasks = outgoing_credentials(settings, http, open_url=open_url)
    supervised += login_tasks
    forwarder = Forwarder(settings.target_uri, http, credentials,
                          injected=settings.injected_headers,
                          forward_authorization=authenticator is None and not credentials,
                          max_body_bytes=settings.max_body_bytes)
    app = ProxyApp(forwarder, boundary, OriginGuard(settings.host, settings.allowed_origins),
                   body_timeout=settings.body_timeout)
    token_file = next((c for c in credentials if isinstance(c, BearerTokenFile)), None)
    return ProxyProcess(settings, http, authenticator, app, supervised, token_file)


def outgoing_credentials(settings: ProxySettings, http: HttpClient, *,
                         open_url: Callable[[str, float], None] | None = None
                         ) -> tuple[list[RemoteCredential], list[NamedTask]]:
    """What the remote is sent (a bearer token, the remote login, token exchange), and the
    long-lived tasks of the remote login and of the bearer token's file."""
    credentials: list[RemoteCredential] = []
    supervised: list[NamedTask] = []
    if settings.bearer_token is not None and settings.bearer_token_file is not None:
        token_file = BearerTokenFile(settings.bearer_token_file, settings.bearer_token)
        credentials.append(token_file)
        supervised += token_file.supervised()
    elif settings.bearer_token is not None:
        credentials.append(StaticBearer(settings.bearer_token))
    if settings.remote_auth is not None:
        login = RemoteLogin(settings.remote_auth, target=settings.target_uri,
                            server_name=settings.server_name, client=http,
                            store=LoginStore(Path(settings.state_dir))
                            if settings.state_dir else None, open_url=open_url)
        credentials.append(login)
        supervised += login.supervised()
    if settings.token_exchange is not None:
        exchangers: dict[tuple[str, str | None], TokenExchanger] = {}
        credentials.append(Exchanged(build_strategy(settings.token_exchange, client=http,
                                                    exchangers=exchangers, tokens=None)))
    return credentials, supervised


async def run_stdio(settings: ProxySettings) -> None:
    """``vmcp proxy stdio``: the bridge between this process's stdin/stdout and the target,
    until stdin ends (see :mod:`vmcp_trio.proxy.stdio_bridge`)."""
    http = HttpClient(deadlines=settings.deadlines)
    credentials, login_tasks = outgoing_credentials(settings, http)
    bridge = StdioBridge(settings.target_uri, http, credentials=credentials,
                         injected=settings.injected_headers,
                         max_line_bytes=settings.max_body_bytes,
                         shutdown_grace=settings.shutdown_grace,
                         tools=ToolFilter(settings.ignored_tools),
                         ping_interval=settings.ping_interval, dual_era=settings.dual_era,
                         transport=settings.transport)
    stdin, stdout = standard_streams()
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(nursery)
            for name, task in login_tasks:
                await supervisor.start(name, task, policy=KEY_REFRESH)
            supervisor.start_soon("idle connection expiry", http.expire_idle_forever)
            await bridge.run(stdin, stdout)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await http.aclose()
            await stdin.aclose()
            await stdout.aclose()


def endpoint_url(settings: ProxySettings, bind: str) -> str:
    """The URL a client uses: the listener with the target's path."""
    parts = urlsplit(settings.target_uri)
    path = parts.path or "/"
    return f"{bind}{path}" + (f"?{parts.query}" if parts.query else "")


async def serve_proxy(process: ProxyProcess, *,
                      shutdown_trigger: Callable[[], Awaitable[None]],
                      task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                      ) -> None:
    """Serve until ``shutdown_trigger`` returns, then drain; reports the client URLs."""
    hypercorn_tuning.install()
    hypercorn_guard.install()
    settings = process.settings
    config = server_config(settings.host, settings.port,
                           max_header_bytes=settings.max_header_bytes,
                           idle_seconds=settings.idle_connection_seconds)
    sockets = listen(config)  # before anything starts: an operator's mistake is one line
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(nursery)
            if process.authenticator is not None:
                await process.authenticator.prepare()
            for name, task in process.supervised:
                await supervisor.start(name, task, policy=KEY_REFRESH)
            supervisor.start_soon("access log", write_access_log)
            supervisor.start_soon("idle connection expiry", process.http.expire_idle_forever)
            served = trio.Event()
            binds: list[str] = await nursery.start(partial(
                serve, process.app, config, sockets, shutdown_trigger=stop.wait, served=served))
            task_status.started([endpoint_url(settings, bind) for bind in binds])
            await shutdown_trigger()
            await drain(process)
            stop.set()
            with trio.move_on_after(5):  # hypercorn returns from serve() once drained
                await served.wait()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await process.http.aclose()


async def drain(process: ProxyProcess) -> None:
    settings, app = process.settings, process.app
    grace = settings.shutdown_grace
    deadline = trio.current_time() + grace
    app.draining = True
    log.info("draining: requests are refused after %gs; those in flight have %gs to finish",
             min(settings.drain_delay, grace), grace)
    await trio.sleep_until(min(trio.current_time() + settings.drain_delay, deadline))
    app.refusing = True
    with trio.move_on_at(deadline):
        await app.idle.wait()
    if app.active:
        log.warning("the shutdown grace (%gs) is over: %d request(s) still open are cut",
                    grace, app.active)


def from_terminal() -> bool:
    """Whether this process is the foreground job of its controlling terminal: where a SIGINT
    is a person's Ctrl-C."""
    try:
        terminal = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal: a service, a container without -t
    try:
        return os.tcgetpgrp(terminal) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(terminal)


async def _reread(process: ProxyProcess) -> None:
    """SIGHUP: re-read ``--remote-auth-bearer-token-file``, the one thing that can change."""
    if process.token_file is None:
        say("vmcp proxy: SIGHUP: nothing to re-read (only --remote-auth-bearer-token-file is)",
            signal="SIGHUP")
        return
    say(f"vmcp proxy: SIGHUP, re-reading --remote-auth-bearer-token-file "
        f"{process.token_file.path}", signal="SIGHUP")
    await process.token_file.reload()


async def run_proxy(settings: ProxySettings, *,
                    on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (Ctrl-C at a terminal, or a second signal,
    stops at once); SIGHUP re-reads the bearer token's file."""
    process = build_proxy(settings)
    first = trio.Event()
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM,
                                           signal.SIGHUP) as signals:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if signum == signal.SIGHUP:
                        nursery.start_soon(_reread, process)
                    elif not first.is_set() and signum == signal.SIGINT and from_terminal():
                        say("vmcp proxy: Ctrl-C, stopping", signal=name)
                        nursery.cancel_scope.cancel()
                    elif not first.is_set():
                        say(f"vmcp proxy: {name}, draining (up to {settings.shutdown_grace:g}s; "
                            "a second signal stops at once)", signal=name)
                        first.set()
                    else:
                        say(f"vmcp proxy: {name} again, stopping now", signal=name)
                        nursery.cancel_scope.cancel()

        async def run(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve_proxy(process, shutdown_trigger=first.wait, task_status=task_status)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_signals)
        urls = await nursery.start(run)
        if on_ready is not None:
            on_ready(urls)
