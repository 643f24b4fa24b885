"""Hostile clients against ``vmcp tunnel relay`` and its agent (in this process,
:mod:`.tunnel_helpers`), and a hostile relay against the agent.

A request the agent would refuse must never cut the tunnel: the relay refuses it itself (400,
431), and an agent that is sent such a head anyway resets that stream alone. The relay's
anonymous probes name no tunnel, and its clients' bodies are bounded together.
"""

from __future__ import annotations

import json
import struct
from functools import partial

import trio
from trio_websocket import WebSocketRequest, serve_websocket

from vmcp_trio.http.body_budget import BodyBudget
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.tunnel import FrameType, TunnelProtocol
from vmcp_trio.tunnel.agent import TunnelAgent
from vmcp_trio.tunnel.relay import TunnelRelay
from vmcp_trio.tunnel.tokens import TunnelTokens

from .proxy_helpers import fetch, raw_http, recording_remote
from .tunnel_helpers import LINE, agent_running, connections, relay_running

HOSTILE = [
    (b"M-SEARCH /t/demo/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"400"),
    (b"ABCDEFGHIJKLMNOPQR /t/demo/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"400"),
    (b"GET /t/demo/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
     + b"".join(b"X-%d: 1\r\n" % i for i in range(101)), b"431"),
    (b"OPTIONS * HTTP/1.1\r\nHost: demo.tunnels.test\r\n", b"400"),
    (b"GET @127.0.0.1:1/x HTTP/1.1\r\nHost: demo.tunnels.test\r\n", b"400"),
    (b"GET /t/demo/a%0d%0ab HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"400"),
]


async def test_requests_the_agent_would_refuse_never_cut_the_tunnel() -> None:
    """Calls in flight when hostile requests arrive finish; the agent keeps its one
    connection; each hostile request got its own refusal from the relay."""
    relay = TunnelRelay(TunnelTokens.parse(LINE), domain="tunnels.test")
    async with recording_remote() as (target, remote), relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        held: list[int] = []
        async with trio.open_nursery() as nursery:
            async def call() -> None:
                held.append((await fetch(f"{relay_url}/t/demo/hold"))[0])

            for _ in range(3):
                nursery.start_soon(call)
            with trio.fail_after(10):
                while len(remote.seen) < 3:
                    await trio.sleep(0.01)
            for head, status in HOSTILE:
                reply, _ = await raw_http(relay_url, head + b"\r\n", linger=2,
                                          answered=True)
                assert reply.startswith(b"HTTP/1.1 " + status), (head[:40], reply[:200])
            remote.release.set()
        assert held == [200, 200, 200]
        assert (await fetch(f"{relay_url}/t/demo/mcp"))[0] == 200
        assert connections(agent) == 1 and connections(agent, "failed") == 0
    assert len(remote.seen) == 4


async def test_an_agent_sent_a_bad_head_resets_that_stream_alone() -> None:
    """A relay (a stand-in here: the real one never sends such a head) opens a stream with a
    head the agent refuses, then a good one on the same connection: the first is reset, the
    second answered."""
    frames: list[tuple[int, int, bytes]] = []

    async def hostile_relay(request: WebSocketRequest) -> None:
        socket = await request.accept()
        relay = TunnelProtocol("relay")
        bad = json.dumps({"method": "M-SEARCH", "path": "/mcp", "query": "", "headers": []})
        await socket.send_message(struct.pack(">BI", FrameType.OPEN | 0x80, 1) + bad.encode())
        relay._last_id = 1  # the next stream the relay opens is 2
        _, opening = relay.open_stream("GET", "/mcp", "", [], end=True)
        await socket.send_message(opening)
        while True:
            message = await socket.get_message()
            assert isinstance(message, bytes)
            kind, stream_id = struct.unpack_from(">BI", message)
            frames.append((kind, stream_id, message[5:]))
            if stream_id == 2 and (kind & 0x80 or kind == FrameType.END):
                return

    async with recording_remote() as (target, remote), trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, hostile_relay, "127.0.0.1", 0,
                                                ssl_context=None))
        port = server.port
        client = HttpClient()
        agent = TunnelAgent(f"ws://127.0.0.1:{port}", "demo", "t" * 43, target, client)
        nursery.start_soon(agent.run)
        with trio.fail_after(10):
            while not any(s == 2 and (k & 0x80 or k == FrameType.END) for k, s, _ in frames):
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await client.aclose()
    kinds = [(FrameType(k & 0x7F), s) for k, s, _ in frames]
    assert kinds[0] == (FrameType.RESET, 1) and b"method" in frames[0][2]
    assert (FrameType.HEAD, 2) in kinds and connections(agent) == 1
    assert [seen["path"] for seen in remote.seen] == ["/mcp"]


async def test_the_relays_probes_count_tunnels_without_naming_them() -> None:
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    async with recording_remote() as (target, _), relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        answers = {path: await fetch(f"{relay_url}{path}", method="GET")
                   for path in ("/health", "/readyz", "/metrics")}
    assert {path: status for path, (status, _, _) in answers.items()} == {
        "/health": 200, "/readyz": 200, "/metrics": 200}
    assert json.loads(answers["/readyz"][2]) == {"status": "ready", "tunnels": 1}
    assert not any(b"demo" in body for _, _, body in answers.values())


async def test_maximal_uploads_wait_for_room_before_their_bodies_are_read() -> None:
    """One client's concurrent uploads past its share of the relay's body budget get 503 with
    Retry-After instead of being held in memory; the tunnel serves the rest."""
    relay = TunnelRelay(TunnelTokens.parse(LINE), max_body_bytes=1000)
    relay.bodies = BodyBudget(2000, per_client=1200, wait=0.3)
    async with recording_remote() as (target, remote), relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        first: list[int] = []
        async with trio.open_nursery() as nursery:
            async def upload() -> None:
                first.append((await fetch(f"{relay_url}/t/demo/hold", body=b"x" * 1000))[0])

            nursery.start_soon(upload)
            with trio.fail_after(10):
                while not remote.seen:
                    await trio.sleep(0.01)
            status, headers, _ = await fetch(f"{relay_url}/t/demo/mcp", body=b"y" * 1000)
            assert status == 503 and headers["retry-after"] == "1"
            assert (await fetch(f"{relay_url}/t/demo/mcp"))[0] == 200
            remote.release.set()
        assert first == [200]
