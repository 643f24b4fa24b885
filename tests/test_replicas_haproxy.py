"""Three ``vmcp serve`` processes behind haproxy (``balance roundrobin``, no stickiness), sharing
one redis-server (``sessionStorage: redis``), in front of the official SDK 1.x server (it speaks
only the handshake revisions: its sessions are what the replicas share). The official SDK 2.x
client talks to haproxy alone, as a client of a production deployment would."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .authserver_helpers import Stack, as_docs, call, mcp_status, tokens
from .fixtures.haproxy import running_haproxy
from .fixtures.idp import Idp
from .fixtures.redis_cluster import redis_command, running_redis
from .fixtures.sdk1 import running_sdk1
from .gateway_helpers import RawClient, StatelessClient, replica_docs, running_gateway
from .serve_helpers import Served, serving

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


@dataclass
class Deployment:
    url: str
    """The balancer's ``/mcp``."""
    replicas: list[Served]
    redis_port: int

    def replica(self, replica_id: str) -> Served:
        """The process of the replica whose id is ``replica_id`` (each logs it at start)."""
        [found] = [r for r in self.replicas if f"replica {replica_id}:" in r.log()]
        return found

    def served(self, rpc: str) -> list[int]:
        """How many access records for JSON-RPC method ``rpc`` each replica wrote."""
        return [len(re.findall(rf"rpc={re.escape(rpc)}\b", replica.log()))
                for replica in self.replicas]

    async def served_since(self, before: list[int], rpc: str, total: int) -> list[int]:
        """How many more each replica served than ``before``, once ``total`` more are written
        (access records are written every half second)."""
        with trio.move_on_after(3):
            while sum(self.served(rpc)) - sum(before) < total:
                await trio.sleep(0.1)
        return [a - b for a, b in zip(self.served(rpc), before, strict=True)]


@contextmanager
def deployed(workdir: Path) -> Iterator[Deployment]:
    """Redis, the resumable SDK 1.x backend, three replicas and haproxy, in ``workdir``."""
    with ExitStack() as stack:
        _, redis_port = stack.enter_context(running_redis(workdir))
        backend = stack.enter_context(running_sdk1(workdir, "--resumable"))
        docs = replica_docs(backend, redis_port)
        replicas = []
        for index in range(3):
            (workdir / f"r{index}").mkdir()
            replicas.append(stack.enter_context(serving(docs, workdir / f"r{index}")))
        ports = [int(replica.base.rsplit(":", 1)[1]) for replica in replicas]
        balancer = stack.enter_context(running_haproxy(workdir, ports))
        yield Deployment(f"{balancer.base}/mcp", replicas, redis_port)
        for replica in replicas:
            assert "Traceback" not in replica.log(), replica.log()[-3000:]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployed(tmp_path_factory.mktemp("replicas")) as running:
        yield running


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_one_session_is_served_by_every_replica(deployment: Deployment, mode: str) -> None:
    """The SDK client's session (``legacy``: a handshake session; ``auto``: whatever the client
    and gateway agree on) makes 30 calls through the balancer; every replica serves some, and
    every answer is right."""
    before = deployment.served("tools/call")
    async with httpx2.AsyncClient() as http, Client(
            streamable_http_client(deployment.url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        assert "numbers_add" in {tool.name for tool in tools.tools}
        for turn in range(30):
            result = await client.call_tool("numbers_add", {"a": turn, "b": 2})
            assert not result.is_error, result
            assert result.structured_content == {"result": turn + 2}
    spread = await deployment.served_since(before, "tools/call", 30)
    assert sum(spread) == 30 and all(count >= 5 for count in spread), spread


async def test_stateless_requests_go_anywhere(deployment: Deployment) -> None:
    """2026-07-28 requests carry no session: round robin spreads them, each answered."""
    client = StatelessClient(deployment.url)
    before = deployment.served("tools/call")
    for turn in range(9):
        reply = await client.call("numbers_add", {"a": turn, "b": 1})
        assert reply.status == 200
        assert reply.messages[-1]["result"]["structuredContent"] == {"result": turn + 1}
    assert await deployment.served_since(before, "tools/call", 9) == [3, 3, 3]
    await client.http.aclose()


def test_the_replicas_agree_on_one_backend_session_per_client_session(
        deployment: Deployment, tmp_path: Path) -> None:
    """The joins are logged: each replica that served a session it did not make says it
    adopted it (from the replica that made it)."""
    joined = [replica.log().count("adopted from replica") for replica in deployment.replicas]
    assert sum(joined) >= 2, joined


async def test_a_call_whose_replica_is_killed_finishes_on_another(tmp_path: Path) -> None:
    """A long call with progress; the replica answering it is SIGKILLed halfway. The client's
    SDK reconnects with ``Last-Event-ID``; the balancer sends that to another replica, which
    replays what was logged, notices the dead replica (its heartbeat stops), takes the call
    over and resumes the backend's stream where the dead one left it: the rest of the progress
    and the answer arrive, and the call succeeds."""
    with deployed(tmp_path) as running:
        progress: list[float] = []
        killed: list[Served] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(done)
            if done == 5 and not killed:
                [call_key] = redis_command(running.redis_port, "KEYS", "*:call:*")
                owner = redis_command(running.redis_port, "HGET", call_key, "owner")
                killed.append(running.replica(owner))
                killed[0].kill()

        async with httpx2.AsyncClient() as http, Client(
                streamable_http_client(running.url, http_client=http), mode="legacy") as client:
            with trio.fail_after(40):
                result = await client.call_tool("numbers_slow", {"steps": 25, "pause": 0.2},
                                                progress_callback=on_progress)
        assert killed, "the call ended before a replica could be killed"
        assert not result.is_error, result
        assert result.content[0].text == "v1 finished 25 steps"  # type: ignore[union-attr]
        assert max(progress) == 25 and progress.index(25) > progress.index(5)
        survivors = [r for r in running.replicas if not r.killed]
        assert any("taking over its call" in r.log() for r in survivors)
        taken = 0.0
        for survivor in survivors:
            with urllib.request.urlopen(survivor.base + "/metrics", timeout=5) as answer:
                found = re.search(r'vmcp_shared_session_events_total\{event="taken_over"\} '
                                  r"(\S+)", answer.read().decode())
            taken += float(found.group(1)) if found else 0.0
        assert taken == 1.0


async def test_a_login_through_the_balancer_spans_the_replicas(
        upstreams: tuple[int, Idp, Idp], tmp_path: Path) -> None:
    """The embedded authorization server behind haproxy: three replicas (in this process)
    share its storage and the sessions through one Redis, and haproxy holds the issuer's
    address. Registration, authorize, both upstream callbacks and the token request each land
    on the next replica; the login completes, the token serves a session spread over all
    three, refreshes, and once revoked at one replica it is refused at every one."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        _, redis_port = stack.enter_context(running_redis(tmp_path))
        docs = as_docs(issuer, corp, hub, storage={
            "type": "redis", "redis": {"addr": f"127.0.0.1:{redis_port}"}})
        vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
        vmcp["spec"]["sessionStorage"] = {"provider": "redis",
                                          "address": f"127.0.0.1:{redis_port}"}
        async with AsyncExitStack() as gateways:
            running = [await gateways.enter_async_context(running_gateway(docs))
                       for _ in range(3)]
            ports = [int(url.rsplit(":", 1)[1].removesuffix("/mcp")) for url, _ in running]
            balancer = await trio.to_thread.run_sync(
                stack.enter_context, running_haproxy(tmp_path, ports, port=port))
            front = Stack(issuer, f"{balancer.base}/mcp", corp, hub)
            client_id, answer, _ = await tokens(front)
            client = RawClient(front.mcp)
            client.token = answer["access_token"]
            assert (await client.initialize()).status == 200
            for turn in range(6):
                reply = await client.request("tools/call", {"name": "clock_echo",
                                                            "arguments": {"message": str(turn)}})
                assert reply.result["content"][0]["text"] == str(turn)
            assert all(client.session_id in process.gateway.sessions for _, process in running)
            status, _, refreshed = await call(front, "POST", "/oauth/token", form={
                "grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
                "client_id": client_id})
            assert status == 200 and refreshed["access_token"] != answer["access_token"]
            status, _, _ = await call(front, "POST", "/oauth/revoke", form={
                "token": refreshed["refresh_token"], "client_id": client_id})
            assert status == 200
            with trio.fail_after(5):
                while await mcp_status(front, refreshed["access_token"]) != 401:
                    await trio.sleep(0.1)
            for _ in running:  # round robin: one refusal from each replica
                assert await mcp_status(front, refreshed["access_token"]) == 401
            await client.aclose()
            await trio.to_thread.run_sync(stack.close)
