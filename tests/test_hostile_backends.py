"""Hostile or broken backends are only their own problem.

Next to the quickstart's healthy ``clock`` backend, in both partial-failure modes:

* a hand-written stdio server (tests/fixtures/hostile_stdio_server.py) and a hand-written
  Streamable HTTP server (tests/fixtures/hostile_http_server.py), each misbehaving one way per
  tool: answers nested 300 deep, garbage lines and events, an invalid answer, a line or event
  over 4 MiB (well over, and just over), an answer to an id nobody asked, a process that exits
  or a stream that closes mid-call. (Stand-ins: no installable
  MCP server misbehaves on purpose.) Each hostile call gets a prompt JSON-RPC error naming the
  backend, never a hang (every call is bounded far below the backend's timeout); where the bad
  message precedes a normal answer, the call succeeds and the bad message is dropped. After
  each, ``clock`` still answers, ``/health`` is 200 and the hostile backend serves again (a
  restarted process comes back).
* stdio backends that never answer ``initialize`` (``sleep 600``) or exit at once (``false``),
  and an HTTP backend that takes connections and never answers: in both modes a session opens
  without them within the opening's deadline, again and again, without crashing;
  ``/api/backends/health`` and ``/readyz`` say what happened to each; a backend that answers
  late joins the open sessions, which are told their lists changed.

A crash of the in-process gateway would surface as an exception here; and since these are bad
*inputs* (refusals, not faults of the gateway), no ERROR log record with a traceback may appear.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.sse import SSEError

from .fixtures.hostile_http_server import hostile_http_backend
from .gateway_helpers import RawClient, Reply, quickstart_docs, running_gateway

STDIO_SERVER = Path(__file__).parent / "fixtures" / "hostile_stdio_server.py"
MODES = ["best_effort", "fail"]
BACKEND_TIMEOUT = "20s"
"""The hostile backends' operational timeout: an answer within CALL_BOUND is never a timeout."""
CALL_BOUND = 5.0


# --- the gateway ---------------------------------------------------------------------------------

def mcp_server(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name}, "spec": {"groupRef": {"name": "quickstart"}, **spec}}


def gateway_docs(mode: str, backends: list[dict[str, Any]], timeouts: dict[str, str],
                 **failure_handling: Any) -> list[dict[str, Any]]:
    """``clock`` (the quickstart's, without ``notes``) and ``backends``, in ``mode``."""
    docs = [d for d in quickstart_docs() if d["metadata"]["name"] != "notes"]
    docs[1:1] = backends
    docs[-1]["spec"]["operational"] = {
        "timeouts": {"perWorkload": timeouts},
        "failureHandling": {"partialFailureMode": mode, **failure_handling}}
    return docs


# --- what a client sees ------------------------------------------------------------------------

async def call(client: RawClient, tool: str, arguments: dict[str, Any] | None = None,
               **params: Any) -> tuple[Reply, float]:
    """A tools/call, bounded: a hang fails the test. Its reply and how long it took."""
    started = trio.current_time()
    try:
        with trio.fail_after(CALL_BOUND):
            reply = await client.request("tools/call", {"name": tool,
                                                        "arguments": arguments or {}, **params},
                                         timeout=CALL_BOUND + 5)
    except SSEError as exc:
        raise AssertionError(f"{tool}: the gateway relayed to the client an SSE event over its "
                             f"own 4 MiB limit ({exc})") from exc
    return reply, trio.current_time() - started


def refused(reply: Reply, backend: str, *phrases: str) -> str:
    """The reply is a JSON-RPC error naming ``backend`` (and saying ``phrases``); its message."""
    assert reply.status == 200, reply
    final = reply.messages[-1]
    assert "error" in final, final
    error = final["error"]
    assert f"backend {backend!r}" in error["message"], error
    assert error.get("data") == {"backend": backend}, error
    for phrase in phrases:
        assert phrase in error["message"], error
    return str(error["message"])


def answered(reply: Reply, text: str) -> None:
    """The call succeeded with ``text``, and nothing else came with it (what was bad in the
    backend's messages was dropped, not relayed)."""
    assert reply.status == 200, reply
    assert reply.result["content"][0]["text"] == text, reply.messages
    assert len(reply.messages) == 1, reply.messages


async def all_well(client: RawClient, http: HttpClient, url: str, hostile_ok: str) -> None:
    """``clock`` answers, ``/health`` is 200, and the hostile backend serves again (polled: a
    restarted process takes a backoff to come back)."""
    echo, _ = await call(client, "clock_echo", {"message": "still here"})
    assert echo.result["content"][0]["text"] == "still here"
    status, _, body = await http.request("GET", url.removesuffix("/mcp") + "/health")
    assert status == 200 and orjson.loads(body) == {"status": "ok"}
    with trio.fail_after(15):
        while True:
            reply, _ = await call(client, hostile_ok)
            if "result" in reply.messages[-1]:
                assert reply.result["content"][0]["text"] == "ok"
                return
            assert "is not running" in reply.messages[-1]["error"]["message"], reply.messages
            await trio.sleep(0.1)


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    faults = [f"{r.name}: {r.getMessage()}" for r in caplog.records
              if r.levelno >= logging.ERROR and r.exc_info]
    assert not faults, faults


# --- a hostile stdio backend -------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
async def test_a_hostile_stdio_backend_fails_only_its_own_calls(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    docs = gateway_docs(mode, [mcp_server("hostile", command=sys.executable,
                                          args=[str(STDIO_SERVER)])],
                        {"hostile": BACKEND_TIMEOUT})
    http = HttpClient()
    async with running_gateway(docs, ready=("clock", "hostile")) as (url, gateway):
        process = gateway.links.stdio["hostile"]
        client = RawClient(url)
        assert "result" in (await client.initialize()).messages[-1]
        names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert {"clock_echo", "hostile_ok", "hostile_deep_result"} <= names

        # An answer nested 300 deep: that call fails at once, saying why.
        reply, elapsed = await call(client, "hostile_deep_result")
        refused(reply, "hostile", "sent an invalid answer", "nested deeper than 128 levels")
        assert elapsed < 2
        await all_well(client, http, url, "hostile_ok")

        # A log line nested 300 deep, then the answer: the line is dropped, the call succeeds.
        reply, _ = await call(client, "hostile_deep_log")
        answered(reply, "logged")
        await all_well(client, http, url, "hostile_ok")

        # Lines that are not JSON, JSON that is not JSON-RPC: dropped, the call succeeds.
        reply, _ = await call(client, "hostile_garbage")
        answered(reply, "after garbage")
        await all_well(client, http, url, "hostile_ok")

        # An invalid answer for the call's id: failed at once, not after the timeout.
        reply, elapsed = await call(client, "hostile_bad_answer")
        refused(reply, "hostile", "sent an invalid answer", '"result" must be an object')
        assert elapsed < 2
        await all_well(client, http, url, "hostile_ok")
        assert process.restarts == 0

        # A line of 6 MiB (over the 4 MiB limit): the process is restarted, the call fails
        # naming the backend.
        reply, _ = await call(client, "hostile_huge_line")
        refused(reply, "hostile")
        assert any("wrote a line over" in r.getMessage() for r in caplog.records)
        await all_well(client, http, url, "hostile_ok")
        assert process.restarts == 1

        # The process exits in the middle of a call.
        reply, _ = await call(client, "hostile_exit_mid_call")
        refused(reply, "hostile", "exited with status 3")
        await all_well(client, http, url, "hostile_ok")
        assert process.restarts == 2

        # The session survived all of it: its lists and its other backend are intact.
        names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert {"clock_echo", "hostile_ok"} <= names
        await client.aclose()
    await http.aclose()
    no_tracebacks(caplog)


async def test_a_shared_stdio_backend_hands_out_no_task(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    """A stdio process serves every session, so it cannot say whose a task is: its task result
    is refused (an error naming the backend, never an id that opens), and its status
    notification, sent with no call in flight, reaches no session's stream."""
    docs = gateway_docs("best_effort", [mcp_server("hostile", command=sys.executable,
                                                   args=[str(STDIO_SERVER)])],
                        {"hostile": BACKEND_TIMEOUT})
    declared = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with running_gateway(docs, ready=("clock", "hostile")) as (url, _):
        caller, other = RawClient(url), RawClient(url)
        for client in (caller, other):
            assert "result" in (await client.initialize(declared)).messages[-1]
        async with trio.open_nursery() as nursery:
            heard: list[Reply] = []

            async def listen() -> None:
                with trio.move_on_after(2):
                    heard.append(await other.get(stop_after=1, timeout=5))

            nursery.start_soon(listen)
            await trio.sleep(0.3)
            reply, _ = await call(caller, "hostile_hand_out_task")
            refused(reply, "hostile", "answered with a task")
        assert not heard  # nothing came on the other session's stream
        for client in (caller, other):
            await client.aclose()
    no_tracebacks(caplog)


async def test_a_stdio_line_just_over_4_mib_restarts_the_backend(
        caplog: pytest.LogCaptureFixture) -> None:
    """The limit holds at its edge too: a line of 4 MiB + 1 KiB (a valid log notification) is
    over it, like one of 6 MiB, and must not reach the client."""
    caplog.set_level(logging.WARNING)
    docs = gateway_docs("best_effort", [mcp_server("hostile", command=sys.executable,
                                                   args=[str(STDIO_SERVER)])],
                        {"hostile": BACKEND_TIMEOUT})
    http = HttpClient()
    async with running_gateway(docs, ready=("clock", "hostile")) as (url, gateway):
        client = RawClient(url)
        await client.initialize()
        reply, _ = await call(client, "hostile_huge_line", {"bytes": 4 * 1024 * 1024 + 1024})
        refused(reply, "hostile")
        await all_well(client, http, url, "hostile_ok")
        assert gateway.links.stdio["hostile"].restarts == 1
        await client.aclose()
    await http.aclose()
    no_tracebacks(caplog)


# --- a hostile Streamable HTTP backend ---------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
async def test_a_hostile_http_backend_fails_only_its_own_calls(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    http = HttpClient()
    async with hostile_http_backend() as backend_url:
        docs = gateway_docs(mode, [mcp_server("hostile-http", url=backend_url)],
                            {"hostile-http": BACKEND_TIMEOUT})
        async with running_gateway(docs, ready=("clock",)) as (url, _):
            client = RawClient(url)
            assert "result" in (await client.initialize()).messages[-1]
            names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
            assert {"clock_echo", "hostile-http_ok", "hostile-http_deep_result"} <= names
            ok = "hostile-http_ok"

            # A JSON body nested 300 deep.
            reply, elapsed = await call(client, "hostile-http_deep_result")
            refused(reply, "hostile-http", "invalid JSON reply", "nested deeper than 128 levels")
            assert elapsed < 2
            await all_well(client, http, url, ok)

            # An SSE event nested 300 deep before the answer: dropped, the call succeeds.
            reply, _ = await call(client, "hostile-http_deep_event")
            answered(reply, "after a deep event")
            await all_well(client, http, url, ok)

            # SSE events that are not JSON or not JSON-RPC before the answer.
            reply, _ = await call(client, "hostile-http_garbage_events")
            answered(reply, "after garbage events")
            await all_well(client, http, url, ok)

            # One SSE event over 4 MiB.
            reply, elapsed = await call(client, "hostile-http_huge_event")
            refused(reply, "hostile-http", "closed the response stream before answering")
            await all_well(client, http, url, ok)

            # The response stream ends after a progress notification, without an answer: the
            # client gets the progress, then the error.
            reply, _ = await call(client, "hostile-http_close_mid_stream",
                                  _meta={"progressToken": "pt"})
            refused(reply, "hostile-http", "closed the response stream before answering")
            progress = [m for m in reply.messages if m.get("method") == "notifications/progress"]
            assert [p["params"]["progressToken"] for p in progress] == ["pt"], reply.messages
            await all_well(client, http, url, ok)

            names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
            assert {"clock_echo", ok} <= names
            await client.aclose()
    await http.aclose()
    no_tracebacks(caplog)


async def test_a_request_answered_like_a_notification_fails_naming_the_backend(
        caplog: pytest.LogCaptureFixture) -> None:
    """202 without a body is how a server takes a notification; to a request it is no answer:
    the call fails at once with an error naming the backend, and the backend serves again."""
    caplog.set_level(logging.WARNING)
    http = HttpClient()
    async with hostile_http_backend() as backend_url:
        docs = gateway_docs("best_effort", [mcp_server("hostile-http", url=backend_url)],
                            {"hostile-http": BACKEND_TIMEOUT})
        async with running_gateway(docs, ready=("clock",)) as (url, _):
            client = RawClient(url)
            await client.initialize()
            reply, elapsed = await call(client, "hostile-http_accepted")
            refused(reply, "hostile-http", "HTTP 202")
            assert elapsed < 2
            await all_well(client, http, url, "hostile-http_ok")
            await client.aclose()
    await http.aclose()
    no_tracebacks(caplog)


# --- an answer to an id nobody asked ------------------------------------------------------------

@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_answer_to_an_id_nobody_asked_is_dropped(
        transport: str, caplog: pytest.LogCaptureFixture) -> None:
    """A backend answers id 1, which the gateway did not send it (or no longer waits for), then
    answers the call. The stray answer must not reach the client: its ids are not the backend's,
    and a relayed ``{"id": 1, "result": ...}`` would pass for the answer to the client's own
    request 1."""
    caplog.set_level(logging.WARNING)
    http = HttpClient()
    async with hostile_http_backend() as backend_url:
        backend = "hostile" if transport == "stdio" else "hostile-http"
        spec = ({"command": sys.executable, "args": [str(STDIO_SERVER)]} if transport == "stdio"
                else {"url": backend_url})
        docs = gateway_docs("best_effort", [mcp_server(backend, **spec)],
                            {backend: BACKEND_TIMEOUT})
        ready = ("clock", "hostile") if transport == "stdio" else ("clock",)
        async with running_gateway(docs, ready=ready) as (url, _):
            client = RawClient(url)
            await client.initialize()
            reply, _ = await call(client, f"{backend}_stray_answer")
            responses = [m for m in reply.messages if "method" not in m]
            assert len(responses) == 1, (
                f"the client got {len(responses)} responses to its one request "
                f"(id {responses[-1]['id']}): {responses}")
            answered(reply, "after a stray answer")
            await all_well(client, http, url, f"{backend}_ok")
            await client.aclose()
    await http.aclose()
    no_tracebacks(caplog)


# --- stdio backends that never start -------------------------------------------------------------

async def backends_health(http: HttpClient, url: str) -> dict[str, dict[str, Any]]:
    status, _, body = await http.request("GET", url.removesuffix("/mcp") + "/api/backends/health")
    assert status == 200
    return {entry["name"]: entry for entry in orjson.loads(body)}


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_backends_that_never_start_are_reported_and_routed_around(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    docs = gateway_docs(mode, [mcp_server("sleepy", command="sleep", args=["600"]),
                               mcp_server("broken", command="false")],
                        {"sleepy": "2s", "broken": "2s"}, healthCheckInterval="1s",
                        healthCheckTimeout="1s", unhealthyThreshold=1)
    http = HttpClient()

    async def session_is_right(url: str, *reasons: str) -> None:
        client = RawClient(url)
        try:
            await check_session(client, reasons)
        finally:
            await client.aclose()

    async def check_session(client: RawClient, reasons: tuple[str, ...]) -> None:
        # In both modes: a backend that is not up is left out (partialFailureMode fail fails a
        # request only for a backend that was up and failed in it), at once, not after its
        # timeout; why is in the health report and /readyz.
        started = trio.current_time()
        reply = await client.initialize()
        assert reply.status == 200 and trio.current_time() - started < 1.5
        final = reply.messages[-1]
        assert "result" in final, final
        names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
        assert "clock_echo" in names
        assert not {n for n in names if n.startswith(("sleepy_", "broken_"))}, names
        echo, _ = await call(client, "clock_echo", {"message": "alone"})
        assert echo.result["content"][0]["text"] == "alone"

    async with running_gateway(docs, ready=("clock",)) as (url, _):
        # At once (the backends still starting, or failing) ...
        with trio.fail_after(10):
            await session_is_right(url)

        # ... and once the health checks have said what happened to each. (Polled: each life
        # of a process sets its last error, and a ``false`` that exits before the gateway wrote
        # ``initialize`` to it is reported as "closed its input" until its next life.)
        async def reported() -> bool:
            health = await backends_health(http, url)
            return ("did not answer initialize within 2s" in (health["sleepy"]["lastError"] or "")
                    and "exited with status 1" in (health["broken"]["lastError"] or ""))

        with trio.fail_after(20):
            while not await reported():
                await trio.sleep(0.1)
        health = await backends_health(http, url)
        assert health["clock"]["status"] == "healthy", health
        for name in ("sleepy", "broken"):
            assert health[name]["status"] == "unhealthy", health
            assert health[name]["transport"] == "stdio" and health[name]["process"] != "running"
        for _ in range(2):  # again and again, the same clear answer
            with trio.fail_after(10):
                await session_is_right(url, "did not answer initialize within 2s",
                                       "exited with status 1")
        status, _, body = await http.request("GET", url.removesuffix("/mcp") + "/health")
        assert status == 200 and orjson.loads(body) == {"status": "ok"}
        status, _, body = await http.request("GET", url.removesuffix("/mcp") + "/readyz")
        ready = orjson.loads(body)
        assert ready["backends"]["sleepy"] == ready["backends"]["broken"] == "unhealthy"
        assert status == (503 if mode == "fail" else 200), ready
    await http.aclose()
    no_tracebacks(caplog)


async def _never_answer(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()  # takes the connection, reads nothing, answers nothing


@pytest.mark.parametrize("mode", MODES)
async def test_a_session_never_waits_on_a_sick_backend(mode: str) -> None:
    clock_server = quickstart_docs()[2]["spec"]["args"][0]
    late = ("import runpy, sys, time; time.sleep(3); sys.argv = [sys.argv[1]]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, _never_answer, 0)
        port = listeners[0].socket.getsockname()[1]
        docs = gateway_docs(mode, [
            mcp_server("hung", url=f"http://127.0.0.1:{port}/mcp"),
            mcp_server("gone", command=sys.executable, args=["-c", "raise SystemExit(3)"]),
            mcp_server("late", command=sys.executable, args=["-c", late, clock_server])],
            {"hung": "20s", "late": "20s"})
        async with running_gateway(docs, ready=("clock",)) as (url, _):
            clients = []
            for _ in range(2):
                client = RawClient(url)
                clients.append(client)
                started = trio.current_time()
                assert "result" in (await client.initialize()).messages[-1]
                names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
                assert trio.current_time() - started < 1.5  # the deadline is 0.75 s
                assert "clock_echo" in names, names
                assert not {n for n in names if n.startswith(("hung_", "gone_"))}
                assert len(clients) > 1 or not any(n.startswith("late_") for n in names)
            # ``late`` answers after ~3 s: every open session gets it, and is told.
            changed = await clients[0].get(stop_after=1, timeout=15)
            assert changed.messages[0]["method"].endswith("/list_changed")
            for client in clients:
                names = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
                assert "late_echo" in names and not any(n.startswith("hung_") for n in names)
                await client.aclose()
        nursery.cancel_scope.cancel()
