"""Faults: a backend that never answers, clients that vanish mid-stream. Nothing leaks: the
open-streams and sessions gauges come back to zero."""

from __future__ import annotations

import trio

from vmcp_trio.http.client import HttpClient

from .gateway_helpers import RawClient, running_gateway, stuck_backend


async def gauges(base: str) -> dict[str, float]:
    http = HttpClient()
    _, _, body = await http.request("GET", base + "/metrics")
    await http.aclose()
    out = {}
    for line in body.decode().splitlines():
        for name in ("vmcp_open_streams", "vmcp_sessions"):
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


async def test_a_backend_that_never_answers_times_out_and_is_told_to_stop() -> None:
    async with stuck_backend() as (docs, cancelled):
        docs[-1]["spec"]["operational"] = {"timeouts": {"perWorkload": {"stuck": "1s"}}}
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            await client.initialize()
            started = trio.current_time()
            reply = await client.request("tools/call", {"name": "stuck_hang", "arguments": {}})
            elapsed = trio.current_time() - started
            error = reply.messages[-1]["error"]
            assert error["message"] == "backend 'stuck' did not answer tools/call within 1s"
            assert error["data"] == {"backend": "stuck"}
            assert 0.9 < elapsed < 5
            with trio.fail_after(5):
                await cancelled.wait()  # the backend was told (notifications/cancelled)
            other = await client.request("tools/call", {"name": "clock_echo",
                                                        "arguments": {"message": "fine"}})
            assert other.result["content"][0]["text"] == "fine"
            await client.aclose()


async def test_clients_that_vanish_leak_nothing() -> None:
    async with running_gateway() as (url, _):
        base = url.removesuffix("/mcp")
        clients = [RawClient(url) for _ in range(3)]
        for client in clients:
            await client.initialize()
        # One leaves in the middle of a streamed call, one in the middle of its GET stream.
        partial_call = await clients[0].request("tools/call", {
            "name": "clock_countdown", "arguments": {"steps": 3, "delay_ms": 300},
            "_meta": {"progressToken": "p"}}, stop_after=1)
        assert partial_call.messages[0]["method"] == "notifications/progress"

        async def hold_stream(client: RawClient, ready: trio.Event) -> None:
            async with client.http.stream("GET", client.url, headers=[
                    ("accept", "text/event-stream"),
                    ("mcp-session-id", client.session_id or "")]) as response:
                assert response.status == 200
                ready.set()
                await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            ready = trio.Event()
            nursery.start_soon(hold_stream, clients[1], ready)
            await ready.wait()
            with trio.fail_after(5):
                while (await gauges(base)).get("vmcp_open_streams") != 1:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()  # the client drops the connection
        for client in clients:
            await client.http.aclose()
        with trio.fail_after(10):
            while (await gauges(base)).get("vmcp_open_streams") != 0:
                await trio.sleep(0.05)
        # The interrupted call went on (its stream is resumable); the sessions are all there.
        assert (await gauges(base))["vmcp_sessions"] == 3
        for client in clients:
            client.http = HttpClient()
            assert await client.delete() == 204
        with trio.fail_after(10):
            while (await gauges(base)).get("vmcp_sessions") != 0:
                await trio.sleep(0.05)
        for client in clients:
            await client.aclose()

