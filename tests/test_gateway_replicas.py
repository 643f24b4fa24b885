"""Several replicas of one gateway sharing a Redis (``sessionStorage: redis``), in this process:
three real gateways (hypercorn), a real redis-server, and an MCP SDK backend that speaks only
the handshake revisions (so its sessions are what the replicas must share)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.auth.caller import Caller
from vmcp_trio.auth.identity import Identity
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.sse import SSEParser

from .fixtures.redis_cluster import redis_command, running_redis, running_redis_cluster
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import RawClient, StatelessClient, replica_docs, running_gateway

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    with running_redis(tmp_path) as (_, port):
        yield port


@asynccontextmanager
async def replicas(redis_port: int | None, count: int = 3, *,
                   storage: dict[str, Any] | None = None
                   ) -> AsyncIterator[tuple[list[tuple[str, GatewayProcess]], BackendState]]:
    server, state = make_server("numbers")
    async with AsyncExitStack() as stack:
        backend = await stack.enter_async_context(serving(server, state, handshake_only=True))
        running = [await stack.enter_async_context(running_gateway(
            replica_docs(backend, redis_port, storage=storage))) for _ in range(count)]
        for _, process in running:  # each has its Redis connection before the test starts
            assert process.shared is not None
            with trio.fail_after(10):
                while await process.shared.not_ready() is not None:
                    await trio.sleep(0.05)
        yield running, state


async def eventually(check: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.02)


async def test_any_replica_serves_the_next_request_of_a_session(redis_port: int) -> None:
    """A session made on one replica is served by every replica, round robin, with one backend
    session behind it (the copies join it: one initialize at the backend)."""
    async with replicas(redis_port) as (running, state):
        client = RawClient(running[0][0])
        assert (await client.initialize()).status == 200
        session = client.session_id
        assert session is not None
        for call in range(30):
            client.url = running[call % 3][0]
            reply = await client.request("tools/call", {"name": "numbers_add",
                                                        "arguments": {"a": call, "b": 1}})
            assert reply.status == 200, reply.body
            assert reply.result["structuredContent"]["total"] == call + 1
        calls = [(backend_session, request_id) for method, backend_session, request_id
                 in zip(state.methods, state.sessions, state.ids, strict=True)
                 if method == "tools/call"]
        assert len(calls) == 30
        assert len({backend_session for backend_session, _ in calls}) == 1  # one session
        assert len({request_id for _, request_id in calls}) == 30  # ids never collide
        for _, process in running:
            assert session in process.gateway.sessions
        adopted = [process.metrics.registry.get_sample_value(
            "vmcp_shared_session_events_total", {"event": "adopted"}) or 0
            for _, process in running]
        assert adopted == [0, 1, 1]  # the copies B and C made (A made the session)
        await client.aclose()


async def test_a_change_reaches_every_copy_and_delete_ends_them_all(redis_port: int) -> None:
    async with replicas(redis_port) as (running, _):
        (a_url, a), (b_url, b), (c_url, c) = running
        client = RawClient(a_url)
        await client.initialize()
        session = client.session_id
        assert session is not None
        client.url = b_url
        reply = await client.request("logging/setLevel", {"level": "error"})
        assert reply.status == 200
        await eventually(lambda: a.gateway.sessions[session].log_level == "error")
        client.url = c_url
        assert (await client.request("tools/list")).status == 200  # C holds a copy too
        assert c.gateway.sessions[session].log_level == "error"  # from the record
        assert await client.delete() == 204
        await eventually(lambda: session not in a.gateway.sessions
                         and session not in b.gateway.sessions)
        for url in (a_url, b_url, c_url):
            client.url = url
            assert (await client.request("tools/list")).status == 404
        await client.aclose()


async def test_records_are_sealed_and_only_their_identity_takes_them(redis_port: int) -> None:
    async with replicas(redis_port, count=1) as (running, _):
        url, process = running[0]
        client = RawClient(url)
        await client.initialize()
        session = client.session_id
        assert session is not None and process.shared is not None
        keys = redis_command(redis_port, "KEYS", "*")
        [key] = [k for k in keys if k.endswith(f":session:{session}")]
        assert key == f"vmcp:session:{{team:gw}}:session:{session}"
        stored = redis_command(redis_port, "GET", key)
        link = process.gateway.sessions[session].links["numbers"]
        backend_session = getattr(link, "session_id", None)
        assert backend_session and backend_session not in stored and "numbers" not in stored
        sharing = process.shared.sharing
        mine = process.gateway.sessions[session].caller
        assert (await sharing.load(session, mine)) is not None
        other = Caller(Identity("https://issuer.example", "mallory"))
        assert await sharing.load(session, other) is None
        # Moved under another session's key, it does not open.
        redis_command(redis_port, "SET", key.replace(session, "x" * 32), stored)
        assert await sharing.load("x" * 32, mine) is None
        await client.aclose()


async def test_without_redis_a_new_session_stays_where_it_was_made(redis_port: int,
                                                                   tmp_path: Path) -> None:
    """Redis away: initialize still works on the replica that gets it (others cannot take the
    session: 404), and readiness says why."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, _b) = running
        http = HttpClient()
        status, _, _ = await http.request("GET", a_url.removesuffix("/mcp") + "/readyz")
        assert status == 200  # in the balancer
        with contextlib.suppress(ConnectionError):  # it answers by closing the connection
            redis_command(redis_port, "SHUTDOWN", "NOSAVE")
        client = RawClient(a_url)
        assert (await client.initialize()).status == 200
        assert (await client.request("tools/list")).status == 200
        client.url = b_url
        assert (await client.request("tools/list")).status == 404
        # Redis is every replica's: the replica stays in the balancer (it serves the sessions
        # it holds, and new ones), and says what is wrong.
        status, _, body = await http.request("GET", a_url.removesuffix("/mcp") + "/readyz")
        ready = orjson.loads(body)
        assert status == 200 and ready["status"] == "degraded"
        assert ready["degraded"]["sessionStorage"].startswith(
            "the session storage is unreachable")
        await http.aclose()
        await client.aclose()


async def test_a_session_made_while_redis_was_away_is_shared_once_it_is_back(
        redis_port: int) -> None:
    """Redis refusing writes (``min-replicas-to-write`` with no replica: NOREPLICAS at once): a
    session opens at A alone (B answers 404 for it). Redis back: A stores the record at the
    session's next request there, and from then on B serves the session too, instead of 404
    until it expires."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, _b) = running
        client = RawClient(a_url)
        redis_command(redis_port, "CONFIG", "SET", "min-replicas-to-write", "1")
        try:
            assert (await client.initialize()).status == 200
            client.url = b_url
            assert (await client.request("tools/list")).status == 404
        finally:
            redis_command(redis_port, "CONFIG", "SET", "min-replicas-to-write", "0")
        with trio.fail_after(15):
            while True:  # each request at A tries the write again, at most once a second
                client.url = a_url
                assert (await client.request("tools/list")).status == 200
                client.url = b_url
                if (await client.request("tools/list")).status == 200:
                    break
                await trio.sleep(0.3)
        await client.aclose()


async def test_a_stream_resumes_at_another_replica_while_its_own_still_answers(
        redis_port: int) -> None:
    """The client reads part of a call's SSE stream at A and leaves; its ``Last-Event-ID``
    reaches B, which replays what A logged and follows A's log to the answer (A is alive: B
    takes nothing over)."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, b) = running
        client = RawClient(a_url)
        await client.initialize()
        first = await client.request("tools/call", {"name": "numbers_slow",
                                                    "arguments": {"steps": 12}},
                                     stop_after=4)
        seen = [event.id for event in first.events]
        assert first.status == 200 and len(seen) == 4 and all(seen)
        client.url = b_url
        rest = await client.get(last_event_id=seen[-1], timeout=15)
        messages = rest.messages
        logged = [m["params"]["data"] for m in messages
                  if m.get("method") == "notifications/message"]
        assert logged == [f"numbers log {step}" for step in range(5, 13)]  # none lost, no repeat
        assert messages[-1]["result"]["content"][0]["text"] == "numbers finished 12 steps"
        first_id, last_seen = rest.events[0].id or "", seen[-1] or ""
        assert int(first_id.rpartition(".")[2]) == int(last_seen.rpartition(".")[2]) + 1
        session = b.gateway.sessions[client.session_id or ""]
        assert session.streams.get(seen[-1].rpartition(".")[0]) is not None  # continued at B
        await client.aclose()


async def test_a_clients_answer_at_another_replica_reaches_the_one_that_asked(
        redis_port: int) -> None:
    """The backend asks the client (elicitation) during a call at A; the client posts its
    answer to B: B sends it to A (the relayed id names A), and the call finishes."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, _b) = running
        client = RawClient(a_url)
        await client.initialize({"elicitation": {}})
        answer_to = RawClient(b_url)
        answer_to.session_id = client.session_id
        messages: list[dict[str, Any]] = []
        questions, asked_here = trio.open_memory_channel[dict[str, Any]](1)
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_asking_call, client, questions, messages)
                assert (await answer_to.post(_answer(await asked_here.receive()))).status == 202
        [asked] = [m for m in messages if m.get("method") == "elicitation/create"]
        assert asked["id"].startswith("vmcp-") and asked["id"].count("-") == 2
        assert messages[-1]["result"]["content"][0]["text"] == "accept:blue"
        await client.aclose()
        await answer_to.aclose()


async def _asking_call(client: RawClient, questions: trio.MemorySendChannel[dict[str, Any]],
                       messages: list[dict[str, Any]]) -> None:
    """A call at the client's replica whose backend asks the client (elicitation): the question
    goes to ``questions``, every message of the call to ``messages``."""
    call = {"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
            "params": {"name": "numbers_ask", "arguments": {"question": "colour?"}}}
    async with client.http.stream("POST", client.url, headers=client.headers(),
                                  body=orjson.dumps(call)) as response:
        parser = SSEParser()
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                message = orjson.loads(event.data) if event.data else {}
                messages.append(message)
                if message.get("method") == "elicitation/create":
                    await questions.send(message)


async def _session_at_a_with_a_copy_at_b(a_url: str, b_url: str) -> tuple[RawClient, RawClient]:
    """A client of a session made at A (it declares elicitation), and the same session's
    client at B, where a copy of it now serves."""
    client = RawClient(a_url)
    await client.initialize({"elicitation": {}})
    answer_to = RawClient(b_url)
    answer_to.session_id = client.session_id
    assert (await answer_to.request("tools/list")).status == 200  # B holds a copy
    return client, answer_to


def _answer(question: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": question["id"],
            "result": {"action": "accept", "content": {"answer": "blue"}}}


def _told_to_retry(reply: Any) -> bool:
    """A 503 with Retry-After whose JSON-RPC error says the answer did not reach the replica
    that asked."""
    error = (reply.body or {}).get("error", {})
    return (reply.status == 503 and reply.headers.get("retry-after") == "1"
            and reply.body["id"] is None and error.get("code") == -32000
            and error.get("message") == "the answer could not be passed to the replica that "
                                        "asked for it; try again")


async def test_an_answer_the_asking_replica_cannot_hear_is_refused_until_it_can(
        redis_port: int) -> None:
    """A's fleet subscriptions are cut (CLIENT KILL, again and again: as while a failover's new
    master has no subscription of A yet) when the client posts its answer to B: the PUBLISH to
    A's channel reaches nobody, so B answers 503 with Retry-After, not 202, and A's call still
    waits. Once A listens again, the same answer sent again finishes the call; a repeat of it is
    taken (202) and ignored by A."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, a), (b_url, _b) = running
        assert a.shared is not None
        a_channel = a.shared.redis.key(f"fleet:{a.shared.fleet.replica}")

        def a_listens() -> bool:
            return bool(redis_command(redis_port, "PUBSUB", "NUMSUB", a_channel)[1])

        client, answer_to = await _session_at_a_with_a_copy_at_b(a_url, b_url)
        assert a_listens()
        messages: list[dict[str, Any]] = []
        questions, asked = trio.open_memory_channel[dict[str, Any]](1)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_asking_call, client, questions, messages)
                question = await asked.receive()
                cut = trio.CancelScope()

                async def cut_subscriptions() -> None:
                    with cut:
                        while True:
                            redis_command(redis_port, "CLIENT", "KILL", "TYPE", "pubsub")
                            await trio.sleep(0.05)

                nursery.start_soon(cut_subscriptions)
                await eventually(lambda: not a_listens())
                refused = await answer_to.post(_answer(question))
                assert _told_to_retry(refused), (refused.status, refused.headers, refused.body)
                await trio.sleep(0.2)
                assert "result" not in messages[-1]  # the call still waits for its answer
                cut.cancel()
                await eventually(a_listens, timeout=15)
                assert (await answer_to.post(_answer(question))).status == 202
        assert messages[-1]["result"]["content"][0]["text"] == "accept:blue"
        assert (await answer_to.post(_answer(question))).status == 202  # a repeat: ignored
        assert (await client.request("tools/list")).status == 200
        await client.aclose()
        await answer_to.aclose()


async def test_without_redis_an_answer_for_another_replica_is_refused(redis_port: int) -> None:
    """Redis away: B cannot pass the client's answer to A, so its POST is 503 with Retry-After
    (never a 202 for an answer that is lost); sent again to A, it finishes the call."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, _b) = running
        client, answer_to = await _session_at_a_with_a_copy_at_b(a_url, b_url)
        messages: list[dict[str, Any]] = []
        questions, asked = trio.open_memory_channel[dict[str, Any]](1)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_asking_call, client, questions, messages)
                question = await asked.receive()
                with contextlib.suppress(ConnectionError):
                    redis_command(redis_port, "SHUTDOWN", "NOSAVE")
                refused = await answer_to.post(_answer(question))
                assert _told_to_retry(refused), (refused.status, refused.headers, refused.body)
                answer_to.url = a_url  # the retry, which the balancer sends to A this time
                assert (await answer_to.post(_answer(question))).status == 202
        assert messages[-1]["result"]["content"][0]["text"] == "accept:blue"
        await client.aclose()
        await answer_to.aclose()


async def test_a_cancellation_at_another_replica_stops_the_call(redis_port: int) -> None:
    async with replicas(redis_port, count=2) as (running, state):
        (a_url, _a), (b_url, _b) = running
        client = RawClient(a_url)
        await client.initialize()
        canceller = RawClient(b_url)
        canceller.session_id = client.session_id
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(client.request, "tools/call", {
                "name": "numbers_sleepy", "arguments": {"seconds": 30}}, timeout=30))
            with trio.fail_after(10):
                await state.sleepy_started.wait()
            assert (await canceller.notify("notifications/cancelled",
                                           {"requestId": 1})).status == 202
            with trio.fail_after(10):
                await state.sleepy_cancelled.wait()
            nursery.cancel_scope.cancel()
        await client.aclose()
        await canceller.aclose()


async def test_a_backend_notification_reaches_the_get_stream_at_another_replica(
        redis_port: int) -> None:
    """A listens to the backend session (it made the session); the client's GET stream is at
    B: what the backend sends on its own stream reaches the client through B."""
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, b) = running
        client = RawClient(a_url)
        await client.initialize()
        session_id = client.session_id or ""
        watcher = RawClient(b_url)
        watcher.session_id = session_id
        heard: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                heard.extend((await watcher.get(stop_after=1, timeout=15)).messages)

            nursery.start_soon(watch)
            await eventually(lambda: session_id in b.gateway.sessions
                             and b.gateway.sessions[session_id].streams.standalone.followed)
            client.url = b_url  # the call too goes through B: the backend answers A's GET
            reply = await client.request("tools/call", {"name": "numbers_touch",
                                                        "arguments": {"uri": "numbers://x"}})
            assert reply.status == 200
        assert heard and heard[0]["method"] == "notifications/resources/updated"
        assert heard[0]["params"]["uri"] == "numbers://x"
        await client.aclose()
        await watcher.aclose()


async def test_a_replica_listens_when_the_listener_is_gone(redis_port: int) -> None:
    async with replicas(redis_port, count=2) as (running, _):
        (a_url, _a), (b_url, b) = running
        client = RawClient(a_url)
        await client.initialize()
        session_id = client.session_id or ""
        [key] = [k for k in redis_command(redis_port, "KEYS", "*")
                 if k.endswith(f":listener:{session_id}")]
        redis_command(redis_port, "SET", key, "deadbeef")  # a replica with no heartbeat
        client.url = b_url
        assert (await client.request("tools/list")).status == 200
        assert b.shared is not None
        await eventually(lambda: redis_command(redis_port, "GET", key) == b.shared.fleet.replica
                         if b.shared else False)
        link = b.gateway.sessions[session_id].links["numbers"]
        assert getattr(link, "_listening", False)
        await client.aclose()


async def test_a_sentinel_failover_under_traffic_loses_no_session(tmp_path: Path) -> None:
    """Four sessions made at A and used at B; the Redis master is killed while their calls go on
    at A and B. The calls need no Redis (each replica holds its copy): none fails. After the
    failover, C (which never saw them) takes each one from its record on the new master, and a
    session made after it is taken by C too."""
    with running_redis_cluster(tmp_path) as cluster:
        storage = {"sentinelConfig": {"masterName": cluster.master_name,
                                      "sentinelAddrs": cluster.sentinel_addrs()}}
        async with replicas(None, storage=storage) as (running, _):
            (a_url, _a), (b_url, _b), (c_url, _c) = running
            clients = []
            for _index in range(4):
                client = RawClient(a_url)
                await client.initialize()
                client.url = b_url
                assert (await client.request("tools/list")).status == 200
                clients.append(client)
            outcomes: list[int] = []
            failover_done = trio.Event()

            async def traffic(client: RawClient) -> None:
                turn = 0
                while not failover_done.is_set():
                    client.url = (a_url, b_url)[turn % 2]
                    turn += 1
                    reply = await client.request("tools/call", {
                        "name": "numbers_add", "arguments": {"a": turn, "b": 1}})
                    ok = reply.status == 200 and "result" in reply.messages[-1]
                    outcomes.append(200 if ok else reply.status)
                    await trio.sleep(0.05)

            async with trio.open_nursery() as nursery:
                for client in clients:
                    nursery.start_soon(traffic, client)
                await trio.sleep(0.5)
                old = await trio.to_thread.run_sync(cluster.kill_master)
                await trio.to_thread.run_sync(cluster.wait_for_failover, old)
                await trio.sleep(1.0)
                failover_done.set()
            assert len(outcomes) > 40 and set(outcomes) == {200}, outcomes
            for client in clients:
                client.url = c_url
                with trio.fail_after(15):
                    while (await client.request("tools/list")).status != 200:
                        await trio.sleep(0.2)  # until C's connection found the new master
            late = RawClient(a_url)
            assert (await late.initialize()).status == 200
            late.url = c_url
            assert (await late.request("tools/list")).status == 200
            for client in [*clients, late]:
                await client.aclose()


async def test_a_2026_retry_at_another_replica_continues_the_parked_call(
        redis_port: int) -> None:
    """A 2026-07-28 call at A parks on the handshake backend's question (elicitation) and
    answers with an InputRequiredResult; the client's retry goes to B, which passes it to A
    (the requestState names A): the same backend call completes, and its answer comes back
    through B."""
    async with replicas(redis_port, count=2) as (running, state):
        (a_url, _a), (b_url, _b) = running
        client = StatelessClient(a_url)
        first = (await client.call("numbers_ask", {"question": "colour?"})).result
        assert first["resultType"] == "input_required"
        (key, question), = first["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        asks = state.methods.count("tools/call")
        retry_at = StatelessClient(b_url)
        done = await retry_at.call("numbers_ask", {"question": "colour?"},
                                   inputResponses={key: {"action": "accept",
                                                         "content": {"answer": "blue"}}},
                                   requestState=first["requestState"])
        assert done.result["content"][0]["text"] == "accept:blue"
        assert state.methods.count("tools/call") == asks  # the same call, not a new one
        again = await retry_at.call("numbers_ask", {"question": "colour?"},
                                    inputResponses={key: {"action": "accept",
                                                          "content": {"answer": "blue"}}},
                                    requestState=first["requestState"])
        assert again.messages[-1]["error"]["code"] == -32602  # over: single use, everywhere
        await client.http.aclose()
        await retry_at.http.aclose()


async def test_the_status_of_each_replica_lists_the_fleet(redis_port: int) -> None:
    """The status view's fleet: every replica keeping its heartbeat, this one marked; a
    session made on one replica and used on another is counted on both (each holds a copy)."""
    from vmcp_trio.app.status import status_document

    async with replicas(redis_port) as (running, _):
        ids = sorted(process.shared.fleet.replica for _, process in running
                     if process.shared is not None)
        client = RawClient(running[0][0])
        await client.initialize()
        client.url = running[1][0]
        await client.request("tools/list")
        documents = [await status_document(process) for _, process in running]
        for document, (_, process) in zip(documents, running, strict=True):
            fleet = document["fleet"]
            assert process.shared is not None and fleet["self"] == process.shared.fleet.replica
            assert [member["id"] for member in fleet["replicas"]] == ids
            assert all(0 <= member["secondsSinceHeartbeat"] <= 3 * fleet["heartbeatSeconds"]
                       for member in fleet["replicas"])
        assert [d["sessions"]["total"] for d in documents] == [1, 1, 0]
        assert "numbers_add" in documents[1]["catalog"]["backends"]["numbers"]["tools"]
        await client.aclose()
