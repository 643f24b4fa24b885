"""The tunnel's test harness: ``vmcp tunnel relay`` as its command runs it, an agent of ``vmcp
proxy tunnel`` and its status server, all in this process, and the agent's connection counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio

from vmcp_trio.app.tunnel import run_relay
from vmcp_trio.http.client import HttpClient
from vmcp_trio.http.serving import listen, serve, server_config
from vmcp_trio.tunnel.agent import TunnelAgent, status_app
from vmcp_trio.tunnel.relay import TunnelRelay
from vmcp_trio.tunnel.tokens import new_token_line

TOKEN, LINE = new_token_line("demo")


@asynccontextmanager
async def relay_running(relay: TunnelRelay, port: int = 0) -> AsyncIterator[str]:
    """The relay as ``vmcp tunnel relay`` runs it (with its incoming auth's tasks)."""
    urls: list[str] = []
    ready = trio.Event()

    def on_ready(bound: list[str]) -> None:
        urls.extend(bound)
        ready.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_relay, relay, "127.0.0.1", port, on_ready=on_ready))
        await ready.wait()
        yield urls[0]
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def status_running(agent: TunnelAgent) -> AsyncIterator[str]:
    """The agent's ``--metrics-port`` server."""
    config = server_config("127.0.0.1", 0, max_header_bytes=16 * 1024)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, status_app(agent), config, listen(config),
                                            shutdown_trigger=trio.sleep_forever))
        yield binds[0]
        nursery.cancel_scope.cancel()


def connections(agent: TunnelAgent, outcome: str = "connected") -> float:
    return agent.metrics.registry.get_sample_value("vmcp_tunnel_connections_total",
                                                   {"outcome": outcome}) or 0.0


@asynccontextmanager
async def agent_running(relay_url: str, target: str, token: str = TOKEN,
                        silence_limit: float = 60.0) -> AsyncIterator[TunnelAgent]:
    client = HttpClient()
    agent = TunnelAgent(relay_url.replace("http://", "ws://"), "demo", token, target, client,
                        silence_limit=silence_limit)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.run)
        yield agent
        nursery.cancel_scope.cancel()
    await client.aclose()
