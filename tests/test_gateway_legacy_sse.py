"""Backends on the legacy HTTP+SSE transport (2024-11-05): named with ``transport: sse``, or
found by falling back when a Streamable HTTP ``initialize`` is refused with 405, as the spec
says. The backend is the official SDK's ``sse_app``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.mcpserver import Context, MCPServer

from .gateway_helpers import RawClient, quickstart_docs, running_gateway


@asynccontextmanager
async def legacy_server() -> AsyncIterator[str]:
    server = MCPServer("oldtimer", log_level="WARNING")

    @server.tool()
    async def count(steps: int, ctx: Context) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps)
        return f"counted {steps}"

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.loglevel = "WARNING"
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, server.sse_app(), config,
                                            shutdown_trigger=trio.sleep_forever))
        yield binds[0] + "/sse"
        nursery.cancel_scope.cancel()


def docs_for(url: str, transport: str | None) -> list[dict[str, Any]]:
    docs = quickstart_docs()
    spec: dict[str, Any] = {"groupRef": {"name": "quickstart"}, "url": url}
    if transport:
        spec["transport"] = transport
    docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                    "metadata": {"name": "oldtimer"}, "spec": spec})
    return docs


@pytest.mark.parametrize("transport", ["sse", None], ids=["declared", "fallback"])
async def test_legacy_sse_backend(transport: str | None) -> None:
    async with legacy_server() as url, running_gateway(docs_for(url, transport)) as (gw, gateway):
        client = RawClient(gw)
        await client.initialize()
        tools = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert {"oldtimer_count", "clock_add"} <= tools
        reply = await client.request("tools/call", {
            "name": "oldtimer_count", "arguments": {"steps": 3},
            "_meta": {"progressToken": "legacy-1"}})
        progress = [m["params"]["progress"] for m in reply.messages
                    if m.get("method") == "notifications/progress"]
        assert progress == [1, 2, 3]
        assert reply.messages[-1]["result"]["content"][0]["text"] == "counted 3"
        assert ("oldtimer" in gateway.links.legacy_backends) is (transport is None)
        await client.aclose()
