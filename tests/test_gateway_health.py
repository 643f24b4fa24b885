"""Backend health, partial failure and the operational endpoints, with a real SDK backend that
the test stops and starts again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import orjson
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.mcpserver import MCPServer

from vmcp_trio import __version__
from vmcp_trio.app.status_page import circuit_text, when_text
from vmcp_trio.http.client import HttpClient
from vmcp_trio.runtime.build import revision

from .fixtures.sdk_servers import make_server, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import ROOT, free_port


@asynccontextmanager
async def weather_server(port: int) -> AsyncIterator[None]:
    """An SDK 2.x backend on a fixed port (a fresh app each time: an app serves only once)."""
    server = MCPServer("weather", log_level="WARNING")

    @server.tool()
    def forecast(city: str) -> str:
        return f"sunny in {city}"

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    # Gone at once when the block ends: the gateway's open streams to it are cut instead of
    # waited for (hypercorn's graceful shutdown waits 3 s by default for the streams to end).
    config.graceful_timeout = 0.1
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve, server.streamable_http_app(), config,
                                    shutdown_trigger=stop.wait))
        yield
        stop.set()


def gateway_docs(port: int, mode: str) -> list[dict[str, Any]]:
    docs = quickstart_docs()
    docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                    "metadata": {"name": "weather"},
                    "spec": {"groupRef": {"name": "quickstart"},
                             "url": f"http://127.0.0.1:{port}/mcp"}})
    gateway = docs[-1]
    gateway["spec"]["operational"] = {"failureHandling": {
        "healthCheckInterval": "1s", "healthCheckTimeout": "500ms", "unhealthyThreshold": 1,
        "partialFailureMode": mode}}
    return docs


async def get_json(http: HttpClient, url: str) -> tuple[int, Any]:
    status, _, body = await http.request("GET", url)
    return status, orjson.loads(body)


async def wait_for(predicate: Any, timeout: float = 15) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.1)


async def test_best_effort_drops_and_restores_a_backend_and_tells_the_client() -> None:
    port = free_port()
    http = HttpClient()
    async with running_gateway(gateway_docs(port, "best_effort")) as (url, _):
        base = url.removesuffix("/mcp")
        client = RawClient(url)
        async with weather_server(port):
            await client.initialize()

            async def healthy() -> bool:
                _, body = await get_json(http, base + "/api/backends/health")
                return all(entry["status"] == "healthy" for entry in body)

            await wait_for(healthy)

            async def listed() -> bool:
                tools = (await client.request("tools/list")).result["tools"]
                return "weather_forecast" in {t["name"] for t in tools}

            await wait_for(listed)  # the session connects to it once it is healthy
            called = await client.request("tools/call", {"name": "weather_forecast",
                                                         "arguments": {"city": "Oslo"}})
            assert called.result["content"][0]["text"] == "sunny in Oslo"
        # The backend is gone: within a check or two it is unhealthy, its tools leave the list,
        # and the client is told on its standalone stream.

        async def dropped() -> bool:
            return not await listed()

        await wait_for(dropped)
        names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert "clock_add" in names
        changes = await client.get(stop_after=3, timeout=15)
        assert {m["method"] for m in changes.messages} == {
            "notifications/tools/list_changed", "notifications/prompts/list_changed",
            "notifications/resources/list_changed"}
        status, body = await get_json(http, base + "/api/backends/health")
        weather = next(entry for entry in body if entry["name"] == "weather")
        assert weather["status"] == "unhealthy" and weather["lastError"]
        status, ready = await get_json(http, base + "/readyz")
        assert status == 200 and ready["backends"]["weather"] == "unhealthy"
        _, _, metrics = await http.request("GET", base + "/metrics")
        assert b'vmcp_backend_healthy{backend="weather"} 0.0' in metrics
        assert b'vmcp_requests_total{backend="weather",method="tools/call",outcome="ok"}' in (
            metrics)
        # It comes back: healthy again, listed again, for the same session.
        async with weather_server(port):
            await wait_for(listed)
            back = await client.get(stop_after=3, timeout=15)
            assert {m["method"] for m in back.messages} == {
                "notifications/tools/list_changed", "notifications/prompts/list_changed",
                "notifications/resources/list_changed"}
            called = await client.request("tools/call", {"name": "weather_forecast",
                                                         "arguments": {"city": "Rome"}})
            assert called.result["content"][0]["text"] == "sunny in Rome"
        await client.aclose()
    await http.aclose()


async def test_fail_mode_opens_sessions_without_a_backend_known_to_be_down() -> None:
    """A backend that is down (it refuses connections, never passed a health check) is left
    out: the session opens and lists the others (partialFailureMode fail fails a request only
    for a backend that was up and failed in it); the replica is not ready until every backend
    was up once, and says which one is down."""
    port = free_port()  # nothing listens there
    http = HttpClient()
    async with running_gateway(gateway_docs(port, "fail")) as (url, _):
        base = url.removesuffix("/mcp")
        client = RawClient(url)
        reply = await client.initialize()
        assert reply.body["result"]["serverInfo"] and client.session_id
        names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert "clock_add" in names and not any(n.startswith("weather_") for n in names)

        async def not_ready() -> bool:
            status, _ = await get_json(http, base + "/readyz")
            return status == 503

        await wait_for(not_ready)
        status, health = await get_json(http, base + "/health")
        assert status == 200 and health == {"status": "ok"}
        # Once the replica was ready, a backend going down no longer takes it out of the
        # balancer (every replica shares that backend: that would be a 503 for every client);
        # it is degraded, and says why.
        async with weather_server(port):
            async def ready() -> bool:
                return (await get_json(http, base + "/readyz"))[0] == 200
            await wait_for(ready)

        async def down() -> bool:
            return (await get_json(http, base + "/readyz"))[1]["backends"]["weather"] == (
                "unhealthy")
        await wait_for(down)
        status, ready = await get_json(http, base + "/readyz")
        assert status == 200 and ready["status"] == "degraded"
        assert ready["degraded"]["backends"].startswith("not healthy: weather")
        await client.aclose()
    await http.aclose()


async def test_an_open_circuit_leaves_the_backend_alone_until_one_check_closes_it() -> None:
    """circuitBreaker: two failed checks open the circuit (the backend unhealthy although
    unhealthyThreshold is 100); no check goes while it is open; the one check after it passes
    (the backend came back meanwhile) closes it and the backend serves; down again, the check
    after the wait fails and opens the circuit for another wait."""
    port = free_port()  # nothing listens there yet
    docs = gateway_docs(port, "best_effort")
    docs[-1]["spec"]["operational"]["failureHandling"].update(
        unhealthyThreshold=100, circuitBreaker={"enabled": True, "failureThreshold": 2,
                                                "timeout": "4s"})
    http = HttpClient()

    async def weather() -> dict[str, Any]:
        _, body = await get_json(http, base + "/api/backends/health")
        return next(entry for entry in body if entry["name"] == "weather")

    async with running_gateway(docs) as (url, _):
        base = url.removesuffix("/mcp")

        async def opened() -> bool:
            return (await weather())["circuit"] == "open"

        await wait_for(opened)
        entry = await weather()
        assert entry["status"] == "unhealthy" and entry["consecutiveFailures"] == 2
        assert entry["circuitReopensAt"] > entry["lastCheck"] + 3.5
        assert circuit_text(entry) == f"circuit open until {when_text(entry['circuitReopensAt'])}"
        _, _, metrics = await http.request("GET", base + "/metrics")
        assert b'vmcp_backend_circuit_open{backend="weather"} 1.0' in metrics
        assert b'vmcp_backend_circuit_open{backend="clock"} 0.0' in metrics
        await trio.sleep(1.2)  # more than a healthCheckInterval, well within the 4 s: no check
        assert (await weather())["lastCheck"] == entry["lastCheck"]
        client = RawClient(url)
        await client.initialize()
        async with weather_server(port):
            async def closed() -> bool:
                return (await weather())["status"] == "healthy"

            await wait_for(closed)
            back = await weather()
            assert back["circuit"] == "closed" and back["circuitReopensAt"] is None
            assert circuit_text(back) == ""  # the status page and `vmcp status` say nothing
            assert back["lastCheck"] >= entry["circuitReopensAt"] - 0.05  # not before its time

            async def listed() -> bool:
                tools = (await client.request("tools/list")).result["tools"]
                return "weather_forecast" in {t["name"] for t in tools}

            await wait_for(listed)
            called = await client.request("tools/call", {"name": "weather_forecast",
                                                         "arguments": {"city": "Oslo"}})
            assert called.result["content"][0]["text"] == "sunny in Oslo"
        await wait_for(opened)
        first = await weather()

        async def reopened() -> bool:
            entry = await weather()
            return entry["circuit"] == "open" and entry["lastCheck"] > first["lastCheck"]

        await wait_for(reopened)  # the half-open check failed: open again, one more failure
        again = await weather()
        assert again["consecutiveFailures"] == first["consecutiveFailures"] + 1
        assert again["lastCheck"] >= first["circuitReopensAt"] - 0.05
        await client.aclose()
    await http.aclose()


async def test_requests_a_hung_backend_does_not_answer_open_its_circuit() -> None:
    """A backend that passes its checks but takes requests and never answers them: two
    requests timing out open the circuit (without a check failing), so the next request for it
    is refused at once instead of waiting its timeout, and its tools leave the list."""
    server, state = make_server("slowpoke")
    async with serving(server, state) as backend_url:
        docs = quickstart_docs()
        docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                        "metadata": {"name": "slowpoke"},
                        "spec": {"groupRef": {"name": "quickstart"}, "url": backend_url}})
        docs[-1]["spec"]["operational"] = {
            "timeouts": {"default": "1s"},
            "failureHandling": {"healthCheckInterval": "30s", "healthCheckTimeout": "5s",
                                "circuitBreaker": {"enabled": True, "failureThreshold": 2,
                                                   "timeout": "30s"}}}
        http = HttpClient()
        async with running_gateway(docs) as (url, _):
            base = url.removesuffix("/mcp")
            client = RawClient(url)
            await client.initialize()

            async def names() -> set[str]:
                return {t["name"] for t in (await client.request("tools/list")).result["tools"]}

            async def listed() -> bool:
                return "slowpoke_sleepy" in await names()

            await wait_for(listed)
            errors: list[str] = []

            async def hang() -> None:
                reply = await client.request(
                    "tools/call", {"name": "slowpoke_sleepy", "arguments": {"seconds": 60}})
                errors.append(reply.messages[-1]["error"]["message"])  # JSON, or a stream

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(hang)
                    nursery.start_soon(hang)
            assert errors == ["backend 'slowpoke' did not answer tools/call within 1s"] * 2
            _, body = await get_json(http, base + "/api/backends/health")
            entry = next(e for e in body if e["name"] == "slowpoke")
            assert (entry["circuit"], entry["status"], entry["consecutiveFailures"]) == (
                "open", "unhealthy", 2)
            assert entry["lastError"] == "a request did not answer tools/call within 1s"
            started = trio.current_time()
            refused = await client.request("tools/call", {"name": "slowpoke_add",
                                                          "arguments": {"a": 1, "b": 2}})
            assert trio.current_time() - started < 0.5, refused.messages
            assert refused.messages[-1]["error"]["message"] == (
                "Unknown tool: slowpoke_add (unavailable now: backend 'slowpoke' is unhealthy)")
            assert "slowpoke_add" not in await names() and "clock_add" in await names()
            await client.aclose()
        await http.aclose()


async def test_metrics_count_requests_and_sessions() -> None:
    http = HttpClient()
    async with running_gateway() as (url, _):
        base = url.removesuffix("/mcp")
        client = RawClient(url)
        await client.initialize()
        await client.request("tools/call", {"name": "clock_echo", "arguments": {"message": "m"}})
        await client.request("tools/list")
        status, headers, body = await http.request("GET", base + "/metrics")
        assert status == 200 and (b"content-type", b"text/plain; version=0.0.4") in headers
        text = body.decode()
        assert 'vmcp_requests_total{backend="clock",method="tools/call",outcome="ok"} 1.0' in text
        assert 'vmcp_requests_total{backend="vmcp",method="tools/list",outcome="ok"} 1.0' in text
        assert "vmcp_sessions 1.0" in text
        assert "process_cpu_seconds_total " in text and "process_open_fds " in text
        count = 'vmcp_request_duration_seconds_count{backend="clock",method="tools/call"} 1.0'
        assert count in text
        assert await client.delete() == 204
        with trio.fail_after(5):
            while True:
                _, _, body = await http.request("GET", base + "/metrics")
                if b"vmcp_sessions 0.0" in body and b"vmcp_open_streams 0.0" in body:
                    break
                await trio.sleep(0.05)
        await client.aclose()
    await http.aclose()


async def test_metrics_follow_prometheus_conventions_and_are_documented() -> None:
    """Counters end in _total, no _created series, the version and revision in
    vmcp_build_info, the process's own series, and every metric family is in the operations
    page's table."""
    async with running_gateway() as (url, _):
        http = HttpClient()
        _, _, body = await http.request("GET", url.removesuffix("/mcp") + "/metrics")
        await http.aclose()
    text = body.decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE"))
    assert types and all(name.startswith(("vmcp_", "process_")) for name in types)
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
    assert "_created" not in text
    assert f'vmcp_build_info{{revision="{revision()}",version="{__version__}"}} 1.0' in text
    documented = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    missing = [name for name in types if f"`{name}`" not in documented]
    assert not missing, missing
