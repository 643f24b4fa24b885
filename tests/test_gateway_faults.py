"""Faults: a backend that never answers, clients that vanish mid-stream. Nothing leaks: the
open-streams and sessions gauges come back to zero, the tasks gauge to where it was."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from vmcp_trio.gateway.session import ClientSession
from vmcp_trio.http.client import HttpClient

from .gateway_helpers import RawClient, running_gateway, stuck_backend


async def gauges(base: str) -> dict[str, float]:
    http = HttpClient()
    _, _, body = await http.request("GET", base + "/metrics")
    await http.aclose()
    out = {}
    for line in body.decode().splitlines():
        for name in ("vmcp_open_streams", "vmcp_sessions", "vmcp_tasks"):
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
        warm = RawClient(url)  # the backends' own tasks start with the first session
        await warm.initialize()
        assert await warm.delete() == 204
        await warm.aclose()
        tasks_before = (await gauges(base))["vmcp_tasks"]
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
        # Every task those clients' sessions, streams and calls started has ended.
        with trio.fail_after(10):
            while (await gauges(base))["vmcp_tasks"] > tasks_before:
                await trio.sleep(0.05)



async def test_a_bug_in_one_handler_ends_only_that_request(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An injected bug (KeyError for one tool): that request gets -32603 with its id and the
    request id the log line carries; the session, another client, and the process go on."""
    original = ClientSession._dispatch

    async def buggy(self: ClientSession, request: Any, call: Any) -> Any:
        if (request.params or {}).get("name") == "clock_echo" and \
                request.params["arguments"].get("message") == "boom":
            raise KeyError("injected")
        return await original(self, request, call)

    monkeypatch.setattr(ClientSession, "_dispatch", buggy)
    async with running_gateway() as (url, _):
        first, second = RawClient(url), RawClient(url)
        await first.initialize()
        await second.initialize()
        broken = await first.post({"jsonrpc": "2.0", "id": "req-9", "method": "tools/call",
                                   "params": {"name": "clock_echo",
                                              "arguments": {"message": "boom"}}},
                                  headers=first.headers(x_request_id="trace-123"))
        error = broken.messages[-1]["error"]
        assert broken.messages[-1]["id"] == "req-9" and error["code"] == -32603
        assert "logged as request trace-123" in error["message"]
        assert "injected" not in error["message"]  # no internals in the answer
        for client in (first, second):
            again = await client.request("tools/call", {"name": "clock_echo",
                                                        "arguments": {"message": "ok"}})
            assert again.result["content"][0]["text"] == "ok"
        await first.aclose()
        await second.aclose()
    crashes = [r for r in caplog.records if r.exc_info]
    assert len(crashes) == 1 and "tools/call" in crashes[0].getMessage()
    assert isinstance(crashes[0].exc_info[1], KeyError)  # type: ignore[index]


async def test_one_session_cannot_take_a_shared_stdio_backend_from_the_others() -> None:
    """A session may hold only --max-stdio-calls-per-session calls on a shared stdio process:
    its next one is refused at once, naming the bound, while another session's calls and lists
    go through."""
    async with running_gateway(max_stdio_calls_per_session=2) as (url, _):
        greedy, other = RawClient(url), RawClient(url)
        await greedy.initialize()
        await other.initialize()
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(greedy.request, "tools/call", {
                    "name": "clock_countdown", "arguments": {"steps": 2, "delay_ms": 500}})
            await trio.sleep(0.3)
            refused = await greedy.request("tools/call", {"name": "clock_echo",
                                                          "arguments": {"message": "x"}})
            error = refused.messages[-1]["error"]
            assert error["data"] == {"backend": "clock"}
            assert "already has 2 calls of this session in flight" in error["message"]
            listed = await other.request("tools/list")
            assert any(t["name"] == "clock_echo" for t in listed.result["tools"])
            fine = await other.request("tools/call", {"name": "clock_echo",
                                                      "arguments": {"message": "mine"}})
            assert fine.result["content"][0]["text"] == "mine"
        await greedy.aclose()
        await other.aclose()
