"""Rolling a deployment: SIGTERM drains ``vmcp serve`` without losing a call.

After the signal: ``/readyz`` says 503 at once; new sessions are still served for
``--drain-delay``, then refused with 503 and ``Retry-After``; calls in flight have
``--shutdown-grace`` to finish and reach their client whole (the official SDK client here); at
that deadline each call left gets a JSON-RPC error saying the gateway is shutting down, as the
last event of its stream; the process exits 0. A second signal stops it at once.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from vmcp_trio.http.client import HttpClient

from .gateway_helpers import RawClient, quickstart_docs
from .serve_helpers import Served, serving


async def status_of(served: Served, path: str) -> tuple[int, Any]:
    http = HttpClient()
    try:
        status, _, body = await http.request("GET", served.base + path)
    finally:
        await http.aclose()
    return status, body


async def test_sigterm_lets_a_slow_call_finish_and_refuses_new_sessions(tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path, "--drain-delay", "1s",
                 "--shutdown-grace", "20s") as served:
        results: list[Any] = []

        async def slow_call() -> None:
            async with Client(served.url, read_timeout_seconds=30) as client:
                started.set()
                results.append(await client.call_tool(
                    "clock_countdown", {"steps": 3, "delay_ms": 1000}))

        started = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await started.wait()
            await trio.sleep(0.5)  # the call is at work
            signalled = trio.current_time()
            served.process.send_signal(signal.SIGTERM)
            await trio.sleep(0.2)
            status, body = await status_of(served, "/readyz")
            assert status == 503 and b'"draining":true' in body
            # Within the drain delay a new client is still served (the load balancer has not
            # noticed yet); after it, refused with 503 and Retry-After.
            early = RawClient(served.url)
            assert (await early.initialize()).status == 200
            await trio.sleep_until(signalled + 1.3)
            late = RawClient(served.url)
            refused = await late.initialize()
            assert refused.status == 503 and refused.headers["retry-after"] == "5"
            assert "shutting down" in refused.body["error"]["message"]
            # A session open before the signal is still served during the grace.
            still = await early.request("tools/call", {"name": "clock_echo",
                                                       "arguments": {"message": "x"}})
            assert still.result["content"][0]["text"] == "x"
            for client in (early, late):
                await client.aclose()
        assert results[0].content[0].text == "done after 3 steps"
        with trio.fail_after(15):
            while served.process.poll() is None:
                await trio.sleep(0.05)
        assert served.process.returncode == 0
        assert "draining" in served.log()


async def test_calls_left_at_the_deadline_end_with_an_error_event(tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path, "--shutdown-grace", "1s") as served:
        client = RawClient(served.url)
        await client.initialize()
        reply: list[Any] = []

        async def slow_call() -> None:
            reply.append(await client.request("tools/call", {
                "name": "clock_countdown", "arguments": {"steps": 10, "delay_ms": 500},
                "_meta": {"progressToken": "p"}}, timeout=20))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await trio.sleep(1.2)  # a progress event or two went out on the SSE stream
            served.process.send_signal(signal.SIGTERM)
        messages = reply[0].messages
        assert messages[0]["method"] == "notifications/progress"
        last = messages[-1]
        assert last["id"] == 1 and last["error"]["code"] == -32000
        assert "the gateway is shutting down" in last["error"]["message"]
        assert all(event.data for event in reply[0].events[1:])  # whole events, none cut
        await client.aclose()
        with trio.fail_after(15):
            while served.process.poll() is None:
                await trio.sleep(0.05)
        assert served.process.returncode == 0


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
async def test_a_second_signal_stops_at_once(tmp_path: Path, second: signal.Signals) -> None:
    with serving(quickstart_docs(), tmp_path, "--drain-delay", "30s") as served:
        served.process.send_signal(signal.SIGTERM)
        await trio.sleep(0.5)
        assert served.process.poll() is None  # draining: the delay is 30 s
        stopped = trio.current_time()
        served.process.send_signal(second)
        with trio.fail_after(10):
            while served.process.poll() is None:
                await trio.sleep(0.05)
        assert trio.current_time() - stopped < 8
        assert served.process.returncode == 0
        assert "again, stopping now" in served.log()
