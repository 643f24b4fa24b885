"""The gateway on the wire: Streamable HTTP rules, sessions, routing and relays, as a client
sees them, with the quickstart's two real stdio backends behind it."""

from __future__ import annotations

import re

import orjson
import pytest
import trio

from vmcp_trio.protocol.sse import SSEParser

from .gateway_helpers import RawClient, running_gateway


@pytest.fixture
async def gateway():  # type: ignore[no-untyped-def]
    async with running_gateway(session_idle_ttl=30) as running:
        yield running


@pytest.fixture
async def client(gateway):  # type: ignore[no-untyped-def]
    url, _ = gateway
    raw = RawClient(url)
    yield raw
    await raw.aclose()


@pytest.mark.parametrize(("asked", "answered"), [
    ("2025-03-26", "2025-03-26"), ("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"),
    ("1999-01-01", "2025-11-25")])
async def test_initialize_negotiates_and_creates_a_session(gateway, asked: str,
                                                           answered: str) -> None:
    client = RawClient(gateway[0], asked)
    reply = await client.initialize()
    assert reply.status == 200
    session_id = reply.headers["mcp-session-id"]
    assert re.fullmatch(r"[\x21-\x7e]{32,}", session_id)
    result = reply.result
    assert result["protocolVersion"] == answered
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert "clock:" in result["instructions"] and "notes:" in result["instructions"]
    await client.aclose()


async def test_tools_are_prefixed_and_routed(client: RawClient) -> None:
    await client.initialize()
    names = {tool["name"] for tool in (await client.request("tools/list")).result["tools"]}
    assert {"clock_add", "clock_countdown", "notes_add_note", "notes_list_notes"} <= names
    reply = await client.request("tools/call", {"name": "clock_add",
                                                "arguments": {"a": 2, "b": 40}})
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    assert reply.result["structuredContent"] == {"sum": 42}
    unknown = await client.request("tools/call", {"name": "nope", "arguments": {}})
    assert unknown.body["error"]["code"] == -32602
    assert "Unknown tool: nope" in unknown.body["error"]["message"]


async def test_progress_and_logging_arrive_on_the_request_stream(client: RawClient) -> None:
    await client.initialize()
    reply = await client.request("tools/call", {
        "name": "clock_countdown", "arguments": {"steps": 3, "delay_ms": 400},
        "_meta": {"progressToken": "tok-1"}})
    assert reply.headers["content-type"] == "text/event-stream"
    ids = [e.id for e in reply.events]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"r\d+\.\d+", i or "") for i in ids)
    messages = reply.messages
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3]
    assert all(p["progressToken"] == "tok-1" for p in progress)
    assert any(m.get("method") == "notifications/message" for m in messages)
    assert messages[-1]["result"]["content"][0]["text"] == "done after 3 steps"


async def test_one_sessions_log_level_does_not_silence_another_on_a_shared_backend(
        gateway) -> None:
    quiet, chatty = RawClient(gateway[0]), RawClient(gateway[0])
    await quiet.initialize()
    await chatty.initialize()
    assert (await quiet.request("logging/setLevel", {"level": "error"})).result == {}

    def logs(reply) -> list[dict]:  # type: ignore[no-untyped-def]
        return [m for m in reply.messages if m.get("method") == "notifications/message"]

    countdown = {"name": "clock_countdown", "arguments": {"steps": 2, "delay_ms": 0}}
    assert len(logs(await chatty.request("tools/call", countdown))) == 2  # info lines
    assert logs(await quiet.request("tools/call", countdown)) == []
    await quiet.aclose()  # the level it asked for goes with it
    assert len(logs(await chatty.request("tools/call", countdown))) == 2
    await chatty.aclose()


async def test_session_header_rules(client: RawClient) -> None:
    await client.initialize()
    session_id = client.session_id
    client.session_id = None
    missing = await client.request("tools/list")
    assert missing.status == 400 and "Mcp-Session-Id" in missing.body["error"]["message"]
    client.session_id = "not-a-session"
    assert (await client.request("tools/list")).status == 404
    client.session_id = session_id
    bad_version = await client.request(
        "tools/list", headers=[*client.headers()[:3], ("mcp-protocol-version", "2024-01-01")])
    assert bad_version.status == 400
    assert "MCP-Protocol-Version" in bad_version.body["error"]["message"]
    assert await client.delete() == 204
    assert (await client.request("tools/list")).status == 404


async def test_batches_only_in_2025_03_26(gateway) -> None:
    old = RawClient(gateway[0], "2025-03-26")
    await old.initialize()
    reply = await old.post([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                            {"jsonrpc": "2.0", "id": "b", "method": "tools/list"}])
    assert reply.status == 200 and {m["id"] for m in reply.body} == {"a", "b"}
    new = RawClient(gateway[0], "2025-11-25")
    await new.initialize()
    refused = await new.post([{"jsonrpc": "2.0", "id": "a", "method": "ping"}])
    assert refused.status == 400 and "batches are not allowed" in refused.body["error"]["message"]
    await old.aclose()
    await new.aclose()


async def test_malformed_input(client: RawClient) -> None:
    await client.initialize()
    parse = await client.post(None, raw=b"{nope")
    assert parse.status == 400 and parse.body["error"]["code"] == -32700
    invalid = await client.post({"jsonrpc": "2.0", "id": 7, "method": 5})
    assert invalid.status == 400 and invalid.body == {
        "jsonrpc": "2.0", "id": 7,
        "error": {"code": -32600, "message": 'field "method" must be a non-empty string'}}
    unknown = await client.request("no/such/method")
    assert unknown.body["error"]["code"] == -32601
    wrong_type = await client.post({}, headers=[("accept", "application/json, "
                                                           "text/event-stream"),
                                                ("content-type", "text/plain")])
    assert wrong_type.status == 415
    not_acceptable = await client.post({}, headers=[("accept", "application/json"),
                                                    ("content-type", "application/json")])
    assert not_acceptable.status == 406


async def test_body_limit(gateway) -> None:
    async with running_gateway(max_body_bytes=1000) as (url, _):
        client = RawClient(url)
        await client.initialize()
        reply = await client.request("tools/call", {"name": "clock_echo",
                                                    "arguments": {"message": "x" * 2000}})
        assert reply.status == 413 and "larger than 1000 bytes" in reply.body["error"]["message"]
        await client.aclose()


async def test_origin_and_host_are_checked(client: RawClient) -> None:
    evil = await client.request("ping", headers=[*client.headers(),
                                                 ("origin", "https://evil.example")])
    assert evil.status == 403 and "Origin" in evil.body["error"]["message"]
    rebinding = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers=[*client.headers(), ("host", "attacker.example:4483")])
    assert rebinding.status in (400, 403)


async def test_resources_prompts_and_completion(client: RawClient) -> None:
    await client.initialize()
    await client.request("tools/call", {"name": "notes_add_note",
                                        "arguments": {"title": "Hello", "text": "World"}})
    uris = {r["uri"] for r in (await client.request("resources/list")).result["resources"]}
    assert {"notes://index", "notes://note/1"} <= uris
    templates = (await client.request("resources/templates/list")).result["resourceTemplates"]
    assert templates[0]["uriTemplate"] == "notes://note/{id}"
    read = await client.request("resources/read", {"uri": "notes://note/1"})
    assert "World" in read.result["contents"][0]["text"]
    missing = await client.request("resources/read", {"uri": "nowhere://x"})
    assert missing.body["error"]["code"] == -32002
    prompt = await client.request("prompts/get", {"name": "notes_summarize_notes",
                                                  "arguments": {"style": "brief"}})
    assert "Hello" in str(prompt.result["messages"])
    completion = await client.request("completion/complete", {
        "ref": {"type": "ref/prompt", "name": "notes_summarize_notes"},
        "argument": {"name": "style", "value": "b"}})
    assert set(completion.result["completion"]["values"]) == {"brief", "bullet"}


async def test_subscription_updates_and_list_changes_reach_the_get_stream(
        client: RawClient) -> None:
    await client.initialize()
    assert (await client.request("resources/subscribe", {"uri": "notes://index"})).status == 200

    async def add_later() -> None:
        await trio.sleep(0.3)
        await client.request("tools/call", {"name": "notes_add_note",
                                            "arguments": {"title": "t", "text": "x"}})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add_later)
        stream = await client.get(stop_after=2)
    methods = {m["method"] for m in stream.messages}
    assert methods <= {"notifications/resources/updated", "notifications/resources/list_changed",
                       "notifications/message"}
    assert "notifications/resources/updated" in methods or (
        "notifications/resources/list_changed" in methods)


async def test_sampling_is_relayed_to_the_client_and_back(client: RawClient) -> None:
    await client.initialize({"sampling": {}})
    call = {"jsonrpc": "2.0", "id": "s1", "method": "tools/call",
            "params": {"name": "clock_summarize", "arguments": {"text": "long text"}}}
    async with client.http.stream("POST", client.url, headers=client.headers(),
                                  body=orjson.dumps(call)) as response:
        parser = SSEParser()
        seen = []
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                if not event.data:
                    continue
                message = orjson.loads(event.data)
                seen.append(message)
                if message.get("method") == "sampling/createMessage":
                    assert message["id"] == "vmcp-1"
                    answer = await client.post({"jsonrpc": "2.0", "id": message["id"], "result": {
                        "role": "assistant", "content": {"type": "text", "text": "short"},
                        "model": "test-model"}})
                    assert answer.status == 202
    assert seen[-1]["id"] == "s1"
    assert seen[-1]["result"]["content"][0]["text"] == "short"


async def test_sampling_without_the_capability_is_refused_to_the_backend(
        client: RawClient) -> None:
    await client.initialize()
    reply = await client.request("tools/call", {"name": "clock_summarize",
                                                "arguments": {"text": "x"}})
    assert reply.result["isError"] is True


async def test_cancellation_reaches_the_backend(client: RawClient, gateway) -> None:
    await client.initialize()

    async def cancel_later() -> None:
        await trio.sleep(0.5)
        await client.notify("notifications/cancelled", {"requestId": 99, "reason": "test"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_later)
        with trio.fail_after(10):
            reply = await client.post({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                                       "params": {"name": "clock_countdown",
                                                  "arguments": {"steps": 50, "delay_ms": 200}}})
    assert all("result" not in m and "error" not in m for m in reply.messages)
    steps = [m for m in reply.messages if m.get("method") == "notifications/message"]
    assert len(steps) < 10


async def test_resuming_a_broken_response_stream(client: RawClient) -> None:
    await client.initialize()
    first = await client.request("tools/call", {
        "name": "clock_countdown", "arguments": {"steps": 4, "delay_ms": 300},
        "_meta": {"progressToken": 1}}, stop_after=1)
    last_id = first.events[-1].id
    assert last_id is not None
    rest = await client.get(last_event_id=last_id)
    ids = [e.id for e in first.events + rest.events]
    assert len(set(ids)) == len(ids)
    assert rest.messages[-1]["result"]["content"][0]["text"] == "done after 4 steps"
    progress = [m["params"]["progress"] for m in first.messages + rest.messages
                if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3, 4]


async def test_a_backend_that_dies_mid_call_fails_only_that_call(client: RawClient,
                                                                 gateway) -> None:
    await client.initialize()
    crash = await client.request("tools/call", {"name": "clock_crash", "arguments": {}})
    error = crash.messages[-1]["error"]
    assert "backend 'clock'" in error["message"] and error["data"] == {"backend": "clock"}
    notes = await client.request("tools/call", {"name": "notes_list_notes", "arguments": {}})
    assert "result" in notes.messages[-1]
    process = gateway[1].links.stdio["clock"]
    with trio.fail_after(20):
        while not process.ready.is_set() or process.restarts == 0:
            await trio.sleep(0.05)
    again = await client.request("tools/call", {"name": "clock_echo",
                                                "arguments": {"message": "back"}})
    assert again.result["content"][0]["text"] == "back"


async def test_idle_sessions_expire() -> None:
    async with running_gateway(session_idle_ttl=0.5) as (url, gateway):
        client = RawClient(url)
        await client.initialize()
        assert (await client.request("ping")).status == 200
        with trio.fail_after(10):
            while gateway.gateway.sessions:
                await trio.sleep(0.1)
        assert (await client.request("ping")).status == 404
        await client.aclose()


async def test_a_backend_cancelling_its_own_request_is_told_by_the_client_facing_id(
        client: RawClient) -> None:
    """clock's ask_user waits for an elicitation; cancelling the call makes the backend cancel
    its elicitation request, which the client must see under the id it was given (vmcp-N)."""
    await client.initialize({"elicitation": {}})
    call = {"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
            "params": {"name": "clock_ask_user", "arguments": {"question": "why?"}}}
    relayed_id = None
    async with client.http.stream("POST", client.url, headers=client.headers(),
                                  body=orjson.dumps(call)) as response:
        parser = SSEParser()
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                message = orjson.loads(event.data) if event.data else {}
                if message.get("method") == "elicitation/create":
                    relayed_id = message["id"]
                    await client.notify("notifications/cancelled", {"requestId": "ask"})
    assert relayed_id == "vmcp-1"
    stream = await client.get(stop_after=1, timeout=10)
    cancelled = [m for m in stream.messages if m.get("method") == "notifications/cancelled"]
    assert cancelled and cancelled[0]["params"]["requestId"] == "vmcp-1"


async def test_oversized_headers_are_refused(gateway) -> None:
    url, _ = gateway
    host, port = url.removeprefix("http://").removesuffix("/mcp").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"POST /mcp HTTP/1.1\r\nhost: " + f"{host}:{port}".encode()
                          + b"\r\nx-big: " + b"a" * 32_000 + b"\r\n\r\n")
    data = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(65536):  # answered, then closed
            data += chunk
    assert data.startswith(b"HTTP/1.1 431 ")
    assert b"larger than 16384 bytes in all" in data
    await stream.aclose()
