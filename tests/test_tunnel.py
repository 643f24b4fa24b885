"""The tunnel: ``vmcp tunnel relay`` (an ASGI app on the lean server) and the agent of ``vmcp
proxy tunnel``, in this process, in front of an MCP Python SDK 2.x server; the official SDK
client reaches that server through the relay's public URL."""

from __future__ import annotations

import itertools
import logging
from functools import partial
from pathlib import Path

import httpx2
import orjson
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from vmcp_trio.app.tunnel import run_relay
from vmcp_trio.auth.incoming.build import AuthSettings, build_authenticator
from vmcp_trio.http.client import HttpClient, HttpError
from vmcp_trio.resources.plan import OIDCIncoming
from vmcp_trio.tunnel.agent import TokenRefused, TunnelAgent
from vmcp_trio.tunnel.relay import TunnelRelay
from vmcp_trio.tunnel.tokens import TunnelTokens, new_token_line

from .fixtures.idp import running_idp
from .fixtures.sdk_servers import make_server, serving
from .gateway_helpers import Reply, StatelessClient
from .helpers import free_port, private_ca
from .proxy_helpers import recording_remote
from .tunnel_helpers import (
    LINE,
    agent_running,
    connections,
    relay_running,
    status_running,
)

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_reaches_the_internal_server_through_the_relay(mode: str) -> None:
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        public = f"{relay_url}/t/demo/mcp"
        async with httpx2.AsyncClient() as http, Client(
                streamable_http_client(public, http_client=http), mode=mode) as client:
            seen: list[float] = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                seen.append(done)

            result = await client.call_tool("slow", {"steps": 3}, progress_callback=progress)
            assert not result.is_error and seen == [1, 2, 3]
            calls = [client.call_tool("add", {"a": i, "b": 1}) for i in range(200)]
            results: list[object] = []
            async with trio.open_nursery() as nursery:
                for call in calls:
                    async def one(call: object = call) -> None:
                        results.append((await call).structured_content)  # type: ignore[attr-defined]
                    nursery.start_soon(one)
            assert sorted(r["total"] for r in results) == list(range(1, 201))  # type: ignore[index]


async def test_no_agent_is_503_an_unknown_name_404_and_a_wrong_token_connects_nothing(
        ) -> None:
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    async with serving(server, state) as target, relay_running(relay) as relay_url:
        client = HttpClient()
        status, headers, body = await client.request("POST", f"{relay_url}/t/demo/mcp",
                                                     body=b"{}")
        assert status == 503 and (b"retry-after", b"5") in headers and b"demo" in body
        status, _, body = await client.request("POST", f"{relay_url}/t/nobody/mcp",
                                               body=b"{}")
        assert status == 404 and orjson.loads(body)["error_description"] == (
            "no tunnel named 'nobody'")
        async with agent_running(relay_url, target, token="x" * 43) as agent:
            await trio.sleep(0.5)
            assert connections(agent) == 0 and not relay.agents
            assert connections(agent, "refused") >= 1
        await client.aclose()


async def test_a_refused_token_is_retried_with_a_doubling_backoff_then_given_up(
        caplog: pytest.LogCaptureFixture) -> None:
    """The relay's tokens may be changing: a refused agent logs and counts each refusal and
    tries again after 1 s, then 2 s (with +-20% jitter); the third refusal in a row ends it
    with TokenRefused (``vmcp proxy tunnel`` then exits 1: tests/test_tunnel_operations.py)."""
    caplog.set_level(logging.WARNING, logger="vmcp.tunnel")
    refused: list[float] = []
    client = HttpClient()
    async with relay_running(TunnelRelay(TunnelTokens.parse(LINE))) as relay_url:
        agent = TunnelAgent(relay_url.replace("http://", "ws://"), "demo", "x" * 43,
                            "http://127.0.0.1:9", client)

        async def count() -> None:
            while True:
                if connections(agent, "refused") > len(refused):
                    refused.append(trio.current_time())
                await trio.sleep(0.01)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(count)
                with pytest.raises(TokenRefused, match="3 times in a row"):
                    await agent.run()
                await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    await client.aclose()
    assert len(refused) == 3
    for gap, nominal in zip([b - a for a, b in itertools.pairwise(refused)], (1, 2),
                            strict=True):
        assert nominal * 0.8 <= gap <= nominal * 1.2 + 0.2, refused
    lines = [r.getMessage() for r in caplog.records if r.name == "vmcp.tunnel"]
    assert lines == [f"tunnel demo: the relay refused the token (HTTP 403; {n} of 3 in a row)"
                     for n in (1, 2, 3)]


async def test_a_second_agent_with_the_token_replaces_the_first() -> None:
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as first:
        with trio.fail_after(10):
            await first.connected.wait()
        async with agent_running(relay_url, target) as second:
            with trio.fail_after(10):
                await second.connected.wait()
                while first.connected.is_set():  # the relay closed the first one's connection
                    await trio.sleep(0.01)
            client = HttpClient()
            status, _, _ = await client.request(
                "POST", f"{relay_url}/t/demo/mcp", body=b'{"jsonrpc":"2.0","id":1,"method":'
                b'"ping"}', headers=[("content-type", "application/json"),
                                     ("accept", "application/json, text/event-stream"),
                                     ("mcp-protocol-version", "2025-11-25")])
            await client.aclose()
            assert status in (200, 400)  # the server answered through the tunnel
            assert connections(first) == 1 and connections(second) == 1


def test_the_tokens_file_keeps_only_hashes_and_refuses_bad_lines() -> None:
    token, line = new_token_line("team-a")
    assert token not in line and line.startswith("team-a:sha256:")
    tokens = TunnelTokens.parse(f"# tunnels\n{line}\nplain:{'p' * 20}\n")
    assert tokens.allows("team-a", token) and not tokens.allows("team-a", token + "x")
    assert tokens.allows("plain", "p" * 20) and not tokens.allows("nobody", token)
    for bad in ("Upper:" + "x" * 20, "short:abc", "x:sha256:zz", "nocolon",
                f"{line}\n{line}"):
        with pytest.raises(Exception, match="line"):
            TunnelTokens.parse(bad)


async def test_a_stuck_stream_slows_no_other_and_a_client_leaving_cancels_its_call() -> None:
    """A call that sleeps holds its stream; fifty others through the same tunnel finish
    meanwhile. The client of the sleeping call leaves: the agent stops the call at the target."""
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        public = f"{relay_url}/t/demo/mcp"
        stuck = StatelessClient(public)
        leaving = trio.CancelScope()

        async def stuck_call() -> None:
            with leaving:
                await stuck.call("sleepy", {"seconds": 60})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stuck_call)
            with trio.fail_after(10):
                await state.sleepy_started.wait()
            quick = StatelessClient(public)
            with trio.fail_after(15):
                for i in range(50):
                    reply = await quick.call("add", {"a": i, "b": 1})
                    assert reply.messages[-1]["result"]["structuredContent"]["total"] == i + 1
            await quick.http.aclose()
            leaving.cancel()  # the client leaves mid-call: its connection closes
            with trio.fail_after(10):
                await state.sleepy_cancelled.wait()
            nursery.cancel_scope.cancel()


async def test_the_agent_comes_back_after_a_relay_restart_under_traffic() -> None:
    """The relay goes away and comes back on its port while four clients keep calling: every
    call ends promptly, either answered or with a clear failure (the relay's port refusing,
    503 until the agent is back, 502 for an exchange the break cut), and the agent's backoff
    brings it back, so calls are answered again. The agent's own ``/readyz`` follows it (503
    while it is away, ``/health`` staying 200: the process lives) and its ``/metrics`` count
    both connections."""
    server, state = make_server("internal")
    port = free_port()
    async with serving(server, state) as target, trio.open_nursery() as nursery:

        async def relay_on_port(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                async with relay_running(TunnelRelay(TunnelTokens.parse(LINE)), port):
                    task_status.started(scope)
                    await trio.sleep_forever()

        first = await nursery.start(relay_on_port)
        relay_url = f"http://127.0.0.1:{port}"
        outcomes: list[tuple[float, str]] = []
        async with agent_running(relay_url, target) as agent, \
                status_running(agent) as status_url:
            with trio.fail_after(10):
                await agent.connected.wait()
            http = HttpClient()
            assert (await http.request("GET", f"{status_url}/readyz"))[0] == 200

            async def caller(worker: int) -> None:
                client = StatelessClient(f"{relay_url}/t/demo/mcp")
                for call in range(10_000):
                    try:
                        reply = await client.call("add", {"a": worker, "b": call})
                    except HttpError:
                        outcome = "refused"
                    else:
                        total = (reply.messages[-1]["result"]["structuredContent"]["total"]
                                 if reply.status == 200 else None)
                        outcome = ("answered" if total == worker + call
                                   else f"status {reply.status}")
                    outcomes.append((trio.current_time(), outcome))
                    if outcome != "answered":
                        await trio.sleep(0.05)
                await client.http.aclose()

            async with trio.open_nursery() as callers:
                for worker in range(4):
                    callers.start_soon(caller, worker)
                await trio.sleep(0.5)
                first.cancel()
                with trio.fail_after(10):
                    while agent.connected.is_set():
                        await trio.sleep(0.05)
                assert (await http.request("GET", f"{status_url}/readyz"))[0] == 503
                assert (await http.request("GET", f"{status_url}/health"))[0] == 200
                await trio.sleep(0.5)
                second = await nursery.start(relay_on_port)
                with trio.fail_after(20):
                    await agent.connected.wait()
                back = trio.current_time()
                await trio.sleep(1.0)
                callers.cancel_scope.cancel()
            kinds = {outcome for _, outcome in outcomes}
            assert kinds <= {"answered", "refused", "status 502", "status 503"}, kinds
            assert {"answered", "refused"} <= kinds
            assert sum(1 for at, outcome in outcomes if at > back and outcome == "answered") > 4
            status, _, body = await http.request("GET", f"{status_url}/metrics")
            assert status == 200
            assert 'vmcp_tunnel_connections_total{outcome="connected"} 2.0' in body.decode()
            assert "vmcp_tunnel_agents_connected 1.0" in body.decode()
            await http.aclose()
            second.cancel()


async def test_host_names_route_to_tunnels_and_the_relay_counts_them() -> None:
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE), domain="tunnels.test")
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            agent_running(relay_url, target) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        client = StatelessClient(f"{relay_url}/mcp")
        reply = await client.post("tools/call", {"name": "add", "arguments": {"a": 2, "b": 2}},
                                  name="add", headers={"host": "demo.tunnels.test:443"})
        assert reply.messages[-1]["result"]["structuredContent"]["total"] == 4
        await client.http.aclose()
        http = HttpClient()
        status, _, body = await http.request("GET", f"{relay_url}/metrics")
        await http.aclose()
        text = body.decode()
        assert status == 200 and "vmcp_tunnel_agents_connected 1.0" in text
        assert 'vmcp_tunnel_connections_total{outcome="accepted"} 1.0' in text
        assert 'vmcp_tunnel_bytes_total{direction="to_client"}' in text


async def test_the_relay_protects_the_public_side_with_oidc() -> None:
    """With incoming auth the relay asks for a token (401 pointing to the RFC 9728 document of
    the tunnel's public URL), takes a valid one, and keeps it from the agent and the target."""
    audience = "https://relay.test/t/demo/mcp"
    with running_idp(resources={audience: {}}) as idp:
        token = str((await trio.to_thread.run_sync(
            lambda: idp.client_credentials_token("confidential", resource=audience)))[
                "access_token"])
        http = HttpClient()
        authenticator = build_authenticator(OIDCIncoming(
            issuer=idp.issuer, audience=audience, jwks_allow_private_ip=True,
            insecure_allow_http=True), AuthSettings(), http)
        server, state = make_server("internal")
        relay = TunnelRelay(TunnelTokens.parse(LINE), authenticator=authenticator,
                            public_url="https://relay.test", scopes=("mcp:tools",))
        async with serving(server, state) as target, relay_running(relay) as relay_url, \
                agent_running(relay_url, target) as agent:
            with trio.fail_after(10):
                await agent.connected.wait()
            # the relay fetched the issuer's keys before any token came (its refresher runs)
            assert authenticator.health()["keys"] == "healthy"
            public = f"{relay_url}/t/demo/mcp"
            status, headers, _ = await http.request("POST", public, body=b"{}")
            challenge = dict(headers)[b"www-authenticate"].decode()
            assert status == 401
            assert ('resource_metadata="https://relay.test/.well-known/oauth-protected-resource'
                    '/t/demo/mcp"') in challenge
            status, _, body = await http.request(
                "GET", f"{relay_url}/.well-known/oauth-protected-resource/t/demo/mcp")
            assert status == 200 and orjson.loads(body)["resource"] == audience
            client = StatelessClient(public)
            reply = await client.post("tools/call", {"name": "add", "arguments": {"a": 1,
                                                                                   "b": 2}},
                                      name="add", headers={"authorization": f"Bearer {token}"})
            assert reply.messages[-1]["result"]["structuredContent"]["total"] == 3
            assert state.authorizations and token not in "".join(state.authorizations)
            await client.http.aclose()
        await http.aclose()


async def test_each_side_drops_a_silent_connection_in_bounded_time() -> None:
    """The relay pings; an agent that hears nothing for its silence limit reconnects. (Here the
    relay's pings are slower than the agent's limit, so the agent keeps reconnecting.)"""
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE), ping_interval=30.0)
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            agent_running(relay_url, target, silence_limit=0.3) as agent:
        with trio.fail_after(10):
            while connections(agent) < 2:
                await trio.sleep(0.05)
    quiet = TunnelRelay(TunnelTokens.parse(LINE), ping_interval=0.2)
    async with serving(server, state) as target, relay_running(quiet) as relay_url, \
            agent_running(relay_url, target, silence_limit=5.0) as agent:
        with trio.fail_after(10):
            await agent.connected.wait()
        await trio.sleep(1.0)  # five pings, all answered: still the first connection
        assert connections(agent) == 1 and "demo" in quiet.agents


async def test_an_exchange_in_flight_when_the_agent_goes_ends_at_once() -> None:
    """The agent's connection breaks mid-call: the relay ends that exchange (502, or the
    response stops there if it had started) instead of leaving the client waiting; the next
    request is 503 until an agent is back."""
    server, state = make_server("internal")
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    public_replies: list[Reply] = []
    async with serving(server, state) as target, relay_running(relay) as relay_url, \
            trio.open_nursery() as nursery:
        public = f"{relay_url}/t/demo/mcp"

        async def call() -> None:
            public_replies.append(await StatelessClient(public).call("sleepy", {"seconds": 60}))

        async with agent_running(relay_url, target) as agent:
            with trio.fail_after(10):
                await agent.connected.wait()
            nursery.start_soon(call)
            with trio.fail_after(10):
                await state.sleepy_started.wait()
        # The agent is gone (its connection closed): the call ends, its client told so.
        with trio.fail_after(5):
            while not public_replies:
                await trio.sleep(0.05)
        [reply] = public_replies
        assert reply.status == 502 or not any("result" in m for m in reply.messages)
        client = HttpClient()
        status, _, _ = await client.request("POST", public, body=b"{}")
        await client.aclose()
        assert status == 503


async def test_the_agent_reaches_a_relay_over_tls_and_large_bodies_cross_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wss://``: the agent verifies the relay's certificate against the system's CAs
    (``SSL_CERT_FILE`` here); a body larger than the tunnel's window crosses it whole."""
    ca, cert, key = private_ca(tmp_path, "relay")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    urls: list[str] = []
    ready = trio.Event()

    def on_ready(bound: list[str]) -> None:
        urls.extend(bound)
        ready.set()

    body = orjson.dumps({"blob": "x" * 600_000})
    async with recording_remote() as (target, remote), trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_relay, relay, "127.0.0.1", 0, tls_cert=str(cert),
                                   tls_key=str(key), on_ready=on_ready))
        await ready.wait()
        relay_url = urls[0]
        assert relay_url.startswith("https://")
        async with agent_running(relay_url.replace("https://", "wss://"), target) as agent:
            with trio.fail_after(10):
                await agent.connected.wait()
            client = HttpClient.trusting(ca.read_text())
            try:
                status, _, answer = await client.request(
                    "POST", f"{relay_url}/t/demo/big", body=body,
                    headers=[("content-type", "application/json")])
            finally:
                await client.aclose()
            assert (status, orjson.loads(answer)) == (200, {"ok": True})
            assert remote.seen[-1]["body"] == body
        nursery.cancel_scope.cancel()
