"""The Tasks extension through the gateway, beyond what the conformance scenarios ask: clients of
both eras, a reconnect, several backends, ids that must not open.

Backends: the conformance fixture (MCP Python SDK 2.x with the Tasks extension of
``tests/fixtures/tasks_extension.py``, spoken to in 2026-07-28) as ``fixture``, and an SDK 2.x
server without the extension as ``alpha``. (``tests/test_conformance.py`` runs the official
``tasks-*`` scenarios through vmcp.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from .fixtures.conformance_server import serve as serve_fixture
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import RawClient, StatelessClient, meta, quickstart_docs, running_gateway

TASKS = "io.modelcontextprotocol/tasks"
DECLARED = {"extensions": {TASKS: {}}, "elicitation": {}}
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


@dataclass
class Stack:
    url: str
    alpha: BackendState


def http_backend(name: str, url: str) -> dict[str, Any]:
    return {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name}, "spec": {"groupRef": {"name": "quickstart"}, "url": url}}


@asynccontextmanager
async def stack(*, with_fixture: bool = True) -> AsyncIterator[Stack]:
    alpha, alpha_state = make_server("alpha")
    async with trio.open_nursery() as nursery, serving(alpha, alpha_state) as alpha_url:
        docs = [*quickstart_docs(), http_backend("alpha", alpha_url)]
        if with_fixture:
            binds = await nursery.start(serve_fixture, 0)
            docs.append(http_backend("fixture", binds[0] + "/mcp"))
        async with running_gateway(docs) as (url, _):
            yield Stack(url, alpha_state)
        nursery.cancel_scope.cancel()


async def test_a_handshake_client_that_declared_the_extension_keeps_its_task_across_sessions(
        ) -> None:
    """A 2025-11-25 client declares the extension in ``initialize``: it is told vmcp offers it,
    gets a task from a 2026-07-28 backend (its id vmcp's own), and reaches it from a new session
    (a reconnect); a session that did not declare it gets -32021, and an id vmcp did not give out
    -32602."""
    async with stack() as running:
        first, second, plain = (RawClient(running.url) for _ in range(3))
        try:
            hello = await first.initialize(DECLARED)
            assert hello.result["capabilities"]["extensions"][TASKS] == {}
            created = (await first.request("tools/call", {
                "name": "fixture_slow_compute",
                "arguments": {"seconds": 60, "label": "handshake"}})).result
            assert created["resultType"] == "task" and created["status"] == "working"
            task_id = created["taskId"]
            assert "." in task_id and len(task_id) > 40  # sealed, not the fixture's own id
            await first.delete()

            await second.initialize(DECLARED)
            got = (await second.request("tasks/get", {"taskId": task_id})).result
            assert got["taskId"] == task_id and got["status"] == "working"
            ack = (await second.request("tasks/cancel", {"taskId": task_id})).result
            assert set(ack) <= {"_meta"}  # an empty ack (resultType is not a handshake field)
            got = (await second.request("tasks/get", {"taskId": task_id})).result
            assert got["status"] == "cancelled"

            forged = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
            error = (await second.request("tasks/get", {"taskId": forged})).messages[-1]["error"]
            assert error["code"] == -32602 and "params.taskId" in error["message"]

            await plain.initialize({})
            error = (await plain.request("tasks/get", {"taskId": task_id})).messages[-1]["error"]
            assert error["code"] == -32021
            assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
            # Without the declaration the backend never makes a task: the call runs to its end.
            done = (await plain.request("tools/call", {
                "name": "fixture_slow_compute", "arguments": {"seconds": 0, "label": "x"}})).result
            assert "taskId" not in done and done["content"]
        finally:
            for client in (first, second, plain):
                await client.aclose()


async def test_only_backends_that_declare_the_extension_hear_a_clients_declaration() -> None:
    """A 2026-07-28 client's per-request declaration goes to the fixture (which makes a task of
    it) but never to ``alpha``, which does not declare the extension; ``server/discover``
    announces the extension, and the client's other capabilities reach both."""
    async with stack() as running:
        client = StatelessClient(running.url)
        discover = await client.post("server/discover")
        assert discover.body["result"]["capabilities"]["extensions"][TASKS] == {}
        with_tasks = {"_meta": meta(DECLARED)}
        added = await client.post("tools/call", {"name": "alpha_add",
                                                 "arguments": {"a": 1, "b": 2}, **with_tasks},
                                  name="alpha_add")
        assert added.messages[-1]["result"]["resultType"] == "complete"
        sent = [m for method, m in zip(running.alpha.methods, running.alpha.metas, strict=True)
                if method == "tools/call"]
        assert sent[-1][CAPABILITIES] == {"elicitation": {}}
        created = await client.post("tools/call", {
            "name": "fixture_slow_compute", "arguments": {"seconds": 60, "label": "s"},
            **with_tasks}, name="fixture_slow_compute")
        task_id = created.messages[-1]["result"]["taskId"]
        got = await client.post("tasks/get", {"taskId": task_id, **with_tasks}, name=task_id)
        assert got.messages[-1]["result"]["status"] == "working"
        mismatch = await client.post("tasks/cancel", {"taskId": task_id, **with_tasks},
                                     name="some-other-task")
        assert mismatch.status == 400 and mismatch.body["error"]["code"] == -32020
        cancelled = await client.post("tasks/cancel", {"taskId": task_id, **with_tasks},
                                      name=task_id)
        ack = cancelled.messages[-1]["result"]
        assert ack["resultType"] == "complete" and set(ack) == {"resultType", "_meta"}


async def test_no_backend_with_the_extension_no_extension_offered() -> None:
    async with stack(with_fixture=False) as running:
        client = StatelessClient(running.url)
        discover = await client.post("server/discover")
        assert "extensions" not in discover.body["result"]["capabilities"]
        reply = await client.post("tasks/get", {"taskId": "anything", "_meta": meta(DECLARED)},
                                  name="anything")
        assert reply.messages[-1]["error"]["code"] == -32602


async def test_a_listen_stream_that_names_a_task_hears_its_status_changes() -> None:
    """A 2026-07-28 client opens ``subscriptions/listen`` with ``taskIds`` naming the task vmcp
    gave it: the acknowledgement honours that id (and not one made up), the backend is asked to
    watch its own id, and its ``notifications/tasks`` reach the client under vmcp's id, with the
    result inlined at the end. Without the declaration the listen is refused with -32021."""
    async with stack() as running:
        client = StatelessClient(running.url)
        with_tasks = {"_meta": meta(DECLARED)}
        created = await client.post("tools/call", {
            "name": "fixture_slow_compute", "arguments": {"seconds": 1, "label": "watched"},
            **with_tasks}, name="fixture_slow_compute")
        task_id = created.messages[-1]["result"]["taskId"]
        made_up = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")

        refused = await StatelessClient(running.url).post(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
        assert refused.status == 400 and refused.body["error"]["code"] == -32021
        assert refused.body["error"]["data"] == {
            "requiredCapabilities": {"extensions": {TASKS: {}}}}

        listener = StatelessClient(running.url)
        with trio.fail_after(20):
            heard = await listener.post("subscriptions/listen", {
                "notifications": {"taskIds": [task_id, made_up]}, **with_tasks}, stop_after=2)
        await listener.http.aclose()
        ack, status = heard.messages
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"taskIds": [task_id]}
        assert status["method"] == "notifications/tasks"
        assert status["params"]["taskId"] == task_id
        assert status["params"]["status"] == "completed"
        assert status["params"]["result"]["content"]
        subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        assert status["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == subscription
