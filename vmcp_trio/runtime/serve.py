"""``vmcp serve``: run the gateway under hypercorn's trio worker until SIGINT or SIGTERM.

Shutdown order matters: the sessions end first (their SSE streams observe it and finish
cleanly), then hypercorn stops accepting and drains, then the supervised backends stop. The
process exits 0 after a signal.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..gateway.core import Gateway, GatewaySettings
from ..gateway.server import MCP_PATH, GatewayApp
from ..http import hypercorn_tuning
from ..resources.plan import GatewayPlan

if TYPE_CHECKING:
    from hypercorn.typing import Framework

__all__ = ["hypercorn_config", "run_gateway", "serve_gateway"]


def hypercorn_config(settings: GatewaySettings, *, tls_cert: str | None = None,
                     tls_key: str | None = None) -> Config:
    config = Config()
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    config.bind = [f"{host}:{settings.port}"]
    config.h11_max_incomplete_size = settings.max_header_bytes
    config.h2_max_header_list_size = settings.max_header_bytes
    config.keep_alive_timeout = 75
    # hypercorn closes a connection after 1000 requests by default (and sends GOAWAY on
    # HTTP/2); an MCP client keeps one busy for its whole session, so allow far more.
    config.keep_alive_max_requests = 100_000
    config.backlog = 2048  # bursts of new clients (a load balancer reconnecting many at once)
    config.graceful_timeout = 5
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.include_server_header = False
    if tls_cert and tls_key:
        config.certfile = tls_cert
        config.keyfile = tls_key
    return config


async def serve_gateway(gateway: Gateway, *, shutdown_trigger: Callable[[], Awaitable[None]],
                        tls_cert: str | None = None, tls_key: str | None = None,
                        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                        ) -> None:
    """Serve until ``shutdown_trigger`` returns; reports the ``/mcp`` URLs when listening."""
    hypercorn_tuning.install()
    app = GatewayApp(gateway)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(gateway.run)
        config = hypercorn_config(gateway.settings, tls_cert=tls_cert, tls_key=tls_key)
        serve = partial(hypercorn_serve, cast("Framework", app), config,
                        shutdown_trigger=stop.wait)
        binds: list[str] = await nursery.start(serve)
        task_status.started([f"{bind}{MCP_PATH}" for bind in binds])
        await shutdown_trigger()
        for session in list(gateway.sessions.values()):
            session.close()
        with trio.move_on_after(gateway.settings.keepalive_seconds):
            while gateway.sessions:
                await trio.sleep(0.02)
        stop.set()
        with trio.move_on_after(10):  # hypercorn returns from serve() once drained
            while len(nursery.child_tasks) > 1:
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()


async def _signalled() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            print(f"\nvmcp: {signal.Signals(signum).name}, shutting down", file=sys.stderr)
            return


async def run_gateway(plan: GatewayPlan, settings: GatewaySettings, *,
                      tls_cert: str | None = None, tls_key: str | None = None,
                      on_ready: Callable[[list[str]], None] | None = None) -> None:
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve_gateway, Gateway(plan, settings),
                                           shutdown_trigger=_signalled, tls_cert=tls_cert,
                                           tls_key=tls_key))
        if on_ready is not None:
            on_ready(urls)
