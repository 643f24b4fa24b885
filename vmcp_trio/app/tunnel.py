"""Running the two sides of a tunnel: ``vmcp tunnel relay`` and ``vmcp proxy tunnel``.

:func:`build_relay` makes the relay of the tunnels a token file names, with its incoming auth;
:func:`run_relay` serves the relay's ASGI app (:mod:`vmcp_trio.tunnel.relay`) with the
same hypercorn configuration as the other servers, until SIGINT or SIGTERM. :func:`run_agent`
keeps the agent (:mod:`vmcp_trio.tunnel.agent`) connected, with the outgoing credentials
of ``vmcp proxy`` for the target, until a signal (or until the relay refused its token too
many times in a row: :class:`~vmcp_trio.tunnel.agent.TokenRefused`), with its probes and
metrics on a listener of its own when asked (``--metrics-port``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from functools import partial

import trio

from ..auth.incoming.build import AuthSettings, build_authenticator
from ..http import hypercorn_guard, hypercorn_tuning
from ..http.client import HttpClient
from ..http.serving import listen, serve, server_config
from ..proxy.settings import ProxySettings
from ..resources.plan import OIDCIncoming
from ..runtime.logs import say, write_access_log
from ..runtime.supervisor import Supervisor
from ..tunnel.agent import TunnelAgent, status_app
from ..tunnel.relay import TunnelRelay
from ..tunnel.tokens import TokenFileError, TunnelTokens
from .proxy import KEY_REFRESH, outgoing_credentials

__all__ = ["build_relay", "run_agent", "run_relay"]


async def _until_signal(on_hangup: Callable[[], None] | None = None) -> None:
    """Until SIGINT or SIGTERM; SIGHUP calls ``on_hangup`` (or says there is nothing to
    reload) and the process goes on."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum != signal.SIGHUP:
                say(f"vmcp tunnel: {signal.Signals(signum).name}, stopping")
                return
            if on_hangup is None:
                say("vmcp tunnel: SIGHUP: nothing to reload (the tunnel token is read at "
                    "start; a --remote-auth-bearer-token-file is read again when it changes)")
            else:
                on_hangup()


def build_relay(tokens: TunnelTokens, incoming: OIDCIncoming | None, *, domain: str | None,
                public_url: str | None) -> TunnelRelay:
    """The relay of these tunnels; with ``incoming`` (the ``--oidc-*`` flags), every client
    request needs a token that authenticator accepts."""
    return TunnelRelay(tokens, domain=domain, public_url=public_url,
                       authenticator=build_authenticator(incoming, AuthSettings(),
                                                         HttpClient()) if incoming else None,
                       scopes=incoming.scopes if incoming else ("openid",))


async def run_relay(relay: TunnelRelay, host: str, port: int, *, tls_cert: str | None = None,
                    tls_key: str | None = None,
                    on_ready: Callable[[list[str]], None] | None = None,
                    load_tokens: Callable[[], TunnelTokens] | None = None) -> None:
    """Serve the relay until SIGINT or SIGTERM, with its incoming auth's key refreshers and the
    access log supervised (raises ListenError for a port or a certificate that cannot be had,
    IncomingAuthError for an issuer that cannot be set up). SIGHUP reads the tokens file again
    with ``load_tokens`` (:func:`reload_tokens`)."""
    hypercorn_tuning.install()
    hypercorn_guard.install()
    config = server_config(host, port, max_header_bytes=64 * 1024, tls_cert=tls_cert,
                           tls_key=tls_key)
    sockets = listen(config)
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery)
        if relay.authenticator is not None:
            await relay.authenticator.prepare()
            for name, task in relay.authenticator.supervised():
                await supervisor.start(name, task, policy=KEY_REFRESH)
        supervisor.start_soon("access log", write_access_log)

        async def stopping() -> None:
            await _until_signal(partial(reload_tokens, relay, load_tokens)
                                if load_tokens is not None else None)
            relay.stop()

        async def serving(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(relay, config, sockets, shutdown_trigger=stopping,
                        task_status=task_status)
            nursery.cancel_scope.cancel()

        urls: list[str] = await nursery.start(serving)
        if on_ready is not None:
            on_ready(urls)


def reload_tokens(relay: TunnelRelay, load_tokens: Callable[[], TunnelTokens]) -> None:
    """SIGHUP on the relay: the tokens file again; a file that does not load leaves the old
    tokens in force (one line says why); agents whose token it no longer holds are cut."""
    try:
        tokens = load_tokens()
    except TokenFileError as exc:
        say(f"vmcp tunnel relay: SIGHUP: the tokens file was not reloaded: {exc}; the old "
            "tokens stay in force", level="error")
        return
    cut = relay.reload(tokens)
    say(f"vmcp tunnel relay: SIGHUP: reloaded the tokens file: {len(tokens.names)} tunnel(s)"
        + (f"; disconnected the agents of {', '.join(cut)} (no longer allowed)" if cut else ""))


async def run_agent(settings: ProxySettings, relay_url: str, token: str, *,
                    status_listener: tuple[str, int] | None = None,
                    on_status_ready: Callable[[list[str]], None] | None = None) -> None:
    """Keep the agent connected until SIGINT or SIGTERM; with ``status_listener`` (host, port),
    serve its probes and ``/metrics`` there (raises ListenError when it cannot be had, and
    TokenRefused when the agent gives up)."""
    http = HttpClient()
    credentials, login_tasks = outgoing_credentials(settings, http)
    agent = TunnelAgent(relay_url, settings.server_name, token, settings.target_uri, http,
                        credentials=credentials, injected=settings.injected_headers,
                        max_body_bytes=settings.max_body_bytes)
    try:
        async with trio.open_nursery() as nursery:
            supervisor = Supervisor(nursery)
            if status_listener is not None:
                config = server_config(*status_listener, max_header_bytes=16 * 1024)
                urls: list[str] = await nursery.start(partial(
                    serve, status_app(agent), config, listen(config),
                    shutdown_trigger=trio.sleep_forever))
                if on_status_ready is not None:
                    on_status_ready(urls)
            for name, task in login_tasks:
                await supervisor.start(name, task, policy=KEY_REFRESH)
            supervisor.start_soon("idle connection expiry", http.expire_idle_forever)
            nursery.start_soon(agent.run)
            await _until_signal()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await http.aclose()
