"""Protocol revision 2026-07-28 through vmcp, on the wire: stateless requests, discovery,
request checks, input requests across retries, log opt-in, cancellation by closing the stream,
and subscriptions/listen. The backends are the quickstart's stdio servers (and an SDK server
for cancellation), which speak the handshake revisions: vmcp bridges the two."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from .gateway_helpers import (
    VERSION,
    Reply,
    StatelessClient,
    meta,
    running_gateway,
    stuck_backend,
)


@pytest.fixture
async def stateless():  # type: ignore[no-untyped-def]
    async with running_gateway() as (url, gateway):
        client = StatelessClient(url)
        yield client, gateway
        await client.http.aclose()


async def test_discover_and_complete_results(stateless) -> None:  # type: ignore[no-untyped-def]
    client, _ = stateless
    reply = await client.post("server/discover")
    assert reply.status == 200 and "mcp-session-id" not in reply.headers
    result = reply.result
    assert VERSION in result["supportedVersions"] and "2025-11-25" in result["supportedVersions"]
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == (
        "complete", 0, "private")
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "vmcp-trio/quickstart"
    tools = (await client.post("tools/list")).result
    assert "clock_add" in {t["name"] for t in tools["tools"]} and tools["cacheScope"] == "private"
    added = (await client.call("clock_add", {"a": 2, "b": 3})).result
    assert added["structuredContent"] == {"sum": 5} and added["resultType"] == "complete"


@pytest.mark.parametrize(("params", "headers", "status", "code"), [
    ({"_meta": {}}, {}, 400, -32602),
    ({}, {"mcp-protocol-version": "2099-01-01"}, 400, -32022),
    ({}, {"mcp-method": "prompts/list"}, 400, -32020),
])
async def test_request_checks(stateless, params: dict[str, Any],  # type: ignore[no-untyped-def]
                              headers: dict[str, str], status: int, code: int) -> None:
    client, _ = stateless
    reply = await client.post("tools/list", params, headers=headers)
    assert reply.status == status and reply.body["error"]["code"] == code
    assert reply.body["id"] == client.ids  # never null when the id could be read


async def test_removed_and_unknown_methods_and_no_get(stateless) -> None:  # type: ignore[no-untyped-def]
    client, _ = stateless
    for method in ("ping", "initialize", "logging/setLevel", "resources/subscribe", "nope/x"):
        reply = await client.post(method)
        assert (reply.status, reply.body["error"]["code"]) == (404, -32601), method
    status, _, _ = await client.http.request("GET", client.url, headers=[
        ("accept", "text/event-stream"), ("mcp-protocol-version", VERSION)])
    assert status == 405


async def test_log_messages_only_when_asked(stateless) -> None:  # type: ignore[no-untyped-def]
    client, _ = stateless
    quiet = await client.call("clock_countdown", {"steps": 2, "delay_ms": 50},
                              _meta={**meta(), "progressToken": "t"})
    assert not [m for m in quiet.messages if m.get("method") == "notifications/message"]
    assert [m["params"]["progress"] for m in quiet.messages
            if m.get("method") == "notifications/progress"] == [1, 2]
    loud = await client.call("clock_countdown", {"steps": 2, "delay_ms": 50},
                             _meta=meta(**{"io.modelcontextprotocol/logLevel": "info"}))
    assert len([m for m in loud.messages if m.get("method") == "notifications/message"]) == 2
    assert loud.messages[-1]["result"]["content"][0]["text"] == "done after 2 steps"


async def test_a_backend_question_becomes_an_input_request(stateless) -> None:  # type: ignore[no-untyped-def]
    """clock_summarize asks for sampling (the handshake way): the client gets an
    InputRequiredResult, answers in its retry, and the same backend call completes."""
    client, _ = stateless
    first = (await client.call("clock_summarize", {"text": "long"})).result
    assert first["resultType"] == "input_required"
    (key, question), = first["inputRequests"].items()
    assert question["method"] == "sampling/createMessage"
    assert question["params"]["messages"][0]["content"]["text"].endswith("long")
    answer = {"role": "assistant", "content": {"type": "text", "text": "short"},
              "model": "m"}
    tampered = await client.call("clock_summarize", {"text": "long"},
                                 inputResponses={key: answer},
                                 requestState=first["requestState"] + "x")
    assert tampered.messages[-1]["error"]["code"] == -32602
    other_params = await client.call("clock_summarize", {"text": "other"},
                                     inputResponses={key: answer},
                                     requestState=first["requestState"])
    assert other_params.messages[-1]["error"]["code"] == -32602
    done = await client.call("clock_summarize", {"text": "long"},
                             inputResponses={key: answer}, requestState=first["requestState"])
    assert done.result["content"][0]["text"] == "short"
    assert done.result["resultType"] == "complete"
    replay = await client.call("clock_summarize", {"text": "long"},
                               inputResponses={key: answer},
                               requestState=first["requestState"])
    assert replay.messages[-1]["error"]["code"] == -32602  # the call is over: single use


async def test_a_missing_client_capability_is_32021(stateless) -> None:  # type: ignore[no-untyped-def]
    client, _ = stateless
    reply = await client.post("tools/call", {"name": "clock_summarize",
                                             "arguments": {"text": "x"}, "_meta": meta({})},
                              name="clock_summarize")
    assert reply.status == 400
    assert reply.body["error"]["code"] == -32021
    assert reply.body["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_closing_the_stream_cancels_the_backend_call() -> None:
    async with stuck_backend() as (docs, cancelled), running_gateway(docs) as (url, _):
        client = StatelessClient(url)
        with trio.move_on_after(0.4):  # within the JSON window: nothing was answered yet
            await client.call("stuck_hang", {})
        await client.http.aclose()  # the connection goes: the request is cancelled
        with trio.fail_after(5):
            await cancelled.wait()


async def test_subscriptions_listen(stateless) -> None:  # type: ignore[no-untyped-def]
    client, _ = stateless
    results: dict[str, Reply] = {}

    async def listen(label: str, filters: dict[str, Any], count: int) -> None:
        listener = StatelessClient(client.url)
        results[label] = await listener.post("subscriptions/listen", {"notifications": filters},
                                             stop_after=count)
        await listener.http.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen, "resources", {"resourcesListChanged": True}, 2)
        nursery.start_soon(listen, "tools", {"toolsListChanged": True}, 1)
        await trio.sleep(0.5)
        await client.call("notes_add_note", {"title": "t", "text": "x"})
        with trio.fail_after(10):
            while "resources" not in results:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    ack, changed = results["resources"].messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"resourcesListChanged": True}
    subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
    assert changed["method"] == "notifications/resources/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == subscription


async def test_first_requests_of_an_identity_arriving_together_all_find_its_tools() -> None:
    """The identity's context is made once, by whichever request comes first; the others
    wait for it to be up rather than finding it half made (no tools yet)."""
    async with running_gateway() as (url, _):
        clients = [StatelessClient(url) for _ in range(12)]
        replies: list[Reply] = []

        async def first_call(client: StatelessClient) -> None:
            replies.append(await client.call("clock_echo", {"message": "together"}))

        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(first_call, client)
        for client in clients:
            await client.http.aclose()
    assert len(replies) == 12
    assert all(r.result["content"][0]["text"].endswith("together") for r in replies), [
        r.body for r in replies]
