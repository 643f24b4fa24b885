"""How the gateway answers a handshake session's call, whose work runs in the HTTP request's own
task: JSON when the reply comes within the JSON window, a stream (priming event first) when it
does not, the session's bound on calls at work, a session that ends while a call is at work
(the call is cancelled at the backend, and the links close after it), and a quiet GET stream
kept alive and ended with its session; without the answer watcher, a client that leaves
within the JSON window is noticed."""

from __future__ import annotations

import pytest
import trio

from vmcp_trio.gateway.responder import Responder
from vmcp_trio.gateway.settings import GatewaySettings
from vmcp_trio.gateway.streams import EventStream

from .gateway_helpers import RawClient, running_gateway, stuck_backend


async def test_quick_calls_are_json_and_a_quiet_slow_one_becomes_a_stream() -> None:
    async with stuck_backend() as (docs, _), running_gateway(
            docs, json_window_seconds=0.3, shutdown_grace_seconds=0.5) as (url, _):
        client = RawClient(url)
        await client.initialize()
        quick = await client.request("tools/call", {"name": "clock_now", "arguments": {}})
        assert quick.headers["content-type"] == "application/json" and quick.result
        started = trio.current_time()
        slow = await client.request("tools/call", {"name": "stuck_hang", "arguments": {}},
                                    stop_after=1)
        waited = trio.current_time() - started
        assert slow.headers["content-type"] == "text/event-stream"
        assert slow.events[0].id and not slow.events[0].data  # the priming event
        assert 0.25 < waited < 2.0, waited  # the window (0.3 s), looked at every 50 ms
        await client.aclose()


async def test_a_session_holds_at_most_its_bound_of_calls_at_work() -> None:
    async with stuck_backend() as (docs, _), running_gateway(
            docs, json_window_seconds=0.2, max_requests_per_session=2,
            shutdown_grace_seconds=0.5) as (url, _):
        client = RawClient(url)
        await client.initialize()
        async with trio.open_nursery() as nursery:
            for _ in range(2):  # two calls at work, streamed (they never end)
                nursery.start_soon(lambda: client.request(
                    "tools/call", {"name": "stuck_hang", "arguments": {}}, timeout=30))
            await trio.sleep(1.0)
            refused = await client.request("tools/call", {"name": "clock_now", "arguments": {}})
            assert refused.status == 429 and "2 requests in flight" in str(refused.body)
            assert int(refused.headers["retry-after"]) >= 1
            nursery.cancel_scope.cancel()
        await client.aclose()


async def test_ending_the_session_cancels_its_call_at_the_backend() -> None:
    async with stuck_backend() as (docs, cancelled), running_gateway(
            docs, json_window_seconds=0.2) as (url, gateway):
        client = RawClient(url)
        await client.initialize()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: client.request(
                "tools/call", {"name": "stuck_hang", "arguments": {}}, timeout=30))
            await trio.sleep(0.5)
            other = RawClient(url)
            other.session_id = client.session_id
            assert await other.delete() in (200, 204)
            with trio.fail_after(5):
                await cancelled.wait()  # the backend was told, before its link closed
                while gateway.gateway.sessions:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
            await other.aclose()
        await client.aclose()


async def test_a_quiet_get_stream_is_kept_alive_and_ends_when_its_session_ends() -> None:
    async with running_gateway(keepalive_seconds=0.4) as (url, gateway):
        client = RawClient(url)
        await client.initialize()
        headers = [("accept", "text/event-stream"), ("mcp-session-id", client.session_id or ""),
                   ("mcp-protocol-version", client.version)]
        received = b""
        async with client.http.stream("GET", url, headers=headers) as response:
            chunks = response.iter_bytes()
            with trio.fail_after(3):  # the opening comment, then a keep-alive each 0.4-0.5 s
                while received.count(b":\n\n") < 3:
                    received += await chunks.__anext__()
            assert received.replace(b":\n\n", b"") == b""  # comments only: nothing happened
            other = RawClient(url)
            other.session_id = client.session_id
            assert await other.delete() in (200, 204)
            with trio.fail_after(2):  # the stream ends with its session
                async for _ in chunks:
                    pass
        with trio.fail_after(2):
            while gateway.app.responder.open_streams:
                await trio.sleep(0.02)
        await other.aclose()
        await client.aclose()


class _Client:
    """The one thing the window's wait asks of an HTTP request: when its client leaves."""

    def __init__(self) -> None:
        self.left = trio.Event()

    async def wait_disconnect(self) -> None:
        await self.left.wait()


@pytest.mark.parametrize("what", ["event", "window", "leaves"])
async def test_without_the_watcher_a_client_that_leaves_within_the_window_is_noticed(
        what: str) -> None:
    responder = Responder(GatewaySettings(json_window_seconds=0.3))
    stream, client = EventStream("r1"), _Client()
    async with trio.open_nursery() as nursery:
        if what == "event":
            nursery.start_soon(lambda: trio.sleep(0.05))
            stream.push(b"{}")
        elif what == "leaves":
            nursery.start_soon(lambda: _leave_after(client, 0.05))
        started = trio.current_time()
        left = await responder._client_left_within_window(client, stream)  # type: ignore[arg-type]
        waited = trio.current_time() - started
    assert left is (what == "leaves")
    assert waited < 0.2 if what != "window" else waited >= 0.3


async def _leave_after(client: _Client, seconds: float) -> None:
    await trio.sleep(seconds)
    client.left.set()
