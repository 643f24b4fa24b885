"""``vmcp proxy stdio --protocol auto``: a stdio client of the handshake era (the official SDK
2.x ``Client`` in ``legacy`` mode, 2025-11-25) reaching a remote that speaks only 2026-07-28
(an SDK 2.x server behind ``tests/fixtures/sdk_servers.py``'s ``stateless_only``, which refuses
``initialize`` and every request without the 2026 envelope, as a server of that revision alone
does).

mcp-remote 0.15.1's ``--protocol auto`` runs the same client session side by side: the bar the
bridge is held to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from mcp import Client, types
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from vmcp_trio.http.asgi import lifespan
from vmcp_trio.proxy.tool_filter import ToolFilter

from .fixtures.asgi_body import read_body
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import running_gateway
from .proxy_helpers import bridge, leaves, stdio_bridge_to

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

TIMEOUT = 60


@dataclass
class Seen:
    """What the stdio client was asked and told."""

    asked: list[str] = field(default_factory=list)
    notifications: list[Any] = field(default_factory=list)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)

    def names(self) -> list[str]:
        return [type(message).__name__ for message in self.notifications]


@asynccontextmanager
async def connected(url: str, proxy: str, *flags: str, sampling: bool = True,
                    ) -> AsyncIterator[tuple[Client, Seen]]:
    seen = Seen()

    async def on_elicitation(context: ClientRequestContext,
                             params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def on_sampling(context: ClientRequestContext, params: types.CreateMessageRequestParams
                          ) -> types.CreateMessageResult:
        seen.asked.append("sampling")
        return types.CreateMessageResult(role="assistant", model="test-model", content=(
            types.TextContent(type="text", text="forty-two")))

    async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
        seen.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

    async def on_message(message: object) -> None:
        seen.notifications.append(message)
        seen.changed.set()
        seen.changed = trio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        seen.logs.append(params)

    async with Client(stdio_client(bridge(url, proxy, *flags)), mode="legacy",
                      elicitation_callback=on_elicitation,
                      sampling_callback=on_sampling if sampling else None,
                      list_roots_callback=on_roots, message_handler=on_message,
                      logging_callback=on_log) as client:
        yield client, seen


async def notified(seen: Seen, name: str) -> None:
    with trio.fail_after(10):
        while name not in seen.names():
            await seen.changed.wait()


async def listening_to(state: BackendState, uri: str) -> None:
    """Until the remote has a listen stream for ``uri`` (and a moment to take it)."""
    with trio.fail_after(10):
        while not any(uri in listened for listened in state.listens):
            await trio.sleep(0.05)
    await trio.sleep(0.5)


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


@pytest.mark.parametrize("proxy", ["vmcp", "mcp-remote"])
async def test_a_handshake_client_uses_a_server_of_2026_07_28_alone(proxy: str) -> None:
    """The whole session of a 2025-11-25 client, bridged: the handshake answered from one
    server/discover; tools, progress and logs; elicitation, sampling and roots asked of the
    client in the middle of calls (input requests, their requestState echoed); list changes
    and a resource subscription over subscriptions/listen; ping and logging/setLevel kept by
    the bridge. The remote never sees a request outside 2026-07-28."""
    server, state = make_server("remote")
    with trio.fail_after(TIMEOUT):
        async with serving(server, state, stateless_only=True) as url, connected(
                url, proxy, "--protocol", "auto") as (client, seen):
            assert client.protocol_version == "2025-11-25"
            assert client.server_info is not None and client.server_info.name == "remote"
            assert state.methods[0] == "server/discover" and "initialize" not in state.methods

            assert {"add", "ask", "sample", "roots"} <= {
                tool.name for tool in (await client.list_tools()).tools}
            added = await client.call_tool("add", {"a": 2, "b": 3})
            assert added.structured_content == {"total": 5, "backend": "remote"}

            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            await client.set_logging_level("info")
            assert text_of(await client.call_tool("slow", {"steps": 2},
                                                  progress_callback=on_progress)) == \
                "remote finished 2 steps"
            assert progress == [1, 2]
            assert [log.data for log in seen.logs][-2:] == ["remote log 1", "remote log 2"]

            assert text_of(await client.call_tool("ask", {"question": "colour?"})) == \
                "accept:blue"
            assert "forty-two" in text_of(await client.call_tool("sample", {"prompt": "?"}))
            assert text_of(await client.call_tool("roots", {})) == "file:///work/project"
            assert seen.asked == ["elicitation", "sampling", "roots"]

            await client.call_tool("grow", {})
            await notified(seen, "ToolListChangedNotification")
            assert "grown" in {tool.name for tool in (await client.list_tools()).tools}

            await client.subscribe_resource("remote://static")
            if proxy == "mcp-remote":  # it answers before the remote has the new filter: an
                await listening_to(state, "remote://static")  # update sent at once is lost
            await client.call_tool("touch", {"uri": "remote://static"})
            await notified(seen, "ResourceUpdatedNotification")

            await client.send_ping()
    assert set(state.versions) == {"2026-07-28"}
    assert not {"initialize", "ping", "logging/setLevel", "resources/subscribe"} & set(
        state.methods)
    log_levels = {meta.get("io.modelcontextprotocol/logLevel") for method, meta in zip(
        state.methods, state.metas, strict=True) if method == "tools/call"}
    assert "info" in log_levels


async def test_without_protocol_auto_the_handshake_client_is_refused() -> None:
    """The same client without the flag: its initialize reaches the remote, which refuses it
    (what the flag is for)."""
    server, state = make_server("remote")
    with trio.fail_after(TIMEOUT):
        async with serving(server, state, stateless_only=True) as url:
            refused: list[str] = []
            try:
                async with connected(url, "vmcp"):
                    pass
            except* MCPError as group:
                refused = [str(error) for error in leaves(group)]
    assert refused == ["Unsupported protocol version"]
    assert state.methods == ["initialize"]


async def test_protocol_auto_leaves_a_handshake_server_as_it_is() -> None:
    """A remote of the handshake revisions answers the probe as one does: the client's own
    initialize goes out, and the session is the usual one (its GET stream included)."""
    server, state = make_server("remote")
    with trio.fail_after(TIMEOUT):
        async with serving(server, state, handshake_only=True) as url, connected(
                url, "vmcp", "--protocol", "auto") as (client, seen):
            assert client.protocol_version == "2025-11-25"
            assert text_of(await client.call_tool("ask", {"question": "colour?"})) == \
                "accept:blue"
            await client.call_tool("grow", {})
            await notified(seen, "ToolListChangedNotification")
    assert state.methods[:2] == ["server/discover", "initialize"]
    assert state.sessions[-1]  # in a session


async def test_a_client_of_2026_07_28_passes_through_as_it_is() -> None:
    """A client that speaks 2026-07-28 itself sends no initialize: nothing is bridged, its
    requests (and its own input round trips) reach the remote as they are."""
    server, state = make_server("remote")
    with trio.fail_after(TIMEOUT):
        async with serving(server, state, stateless_only=True) as url, Client(
                stdio_client(bridge(url, "vmcp", "--protocol", "auto")), mode="auto") as client:
            assert client.protocol_version == "2026-07-28"
            added = await client.call_tool("add", {"a": 1, "b": 2})
            assert added.structured_content == {"total": 3, "backend": "remote"}
    assert state.methods[0] == "server/discover" and "tools/call" in state.methods
    assert "initialize" not in state.methods and set(state.versions) == {"2026-07-28"}


async def test_the_gateway_as_the_remote_carries_a_backends_question_to_the_client() -> None:
    """vmcp serve speaks both eras, so a handshake client behind --protocol auto is carried to
    it over 2026-07-28 (no session is made there); a backend's elicitation, which the gateway
    parks and returns as an input request, reaches the client as an ordinary request, and its
    answer goes back to the backend."""
    with trio.fail_after(TIMEOUT):
        async with running_gateway() as (url, gateway), connected(
                url, "vmcp", "--protocol", "auto") as (client, seen):
            assert client.protocol_version == "2025-11-25"
            assert text_of(await client.call_tool("clock_ask_user", {"question": "go?"})) == \
                "blue"
            assert seen.asked == ["elicitation"]
            assert not gateway.gateway.sessions


async def test_a_question_the_client_cannot_be_asked_is_an_error_not_a_hang() -> None:
    """The remote needs sampling from a client that did not declare it: the call is answered
    at once with an error naming the capability."""
    server, state = make_server("remote")
    with trio.fail_after(TIMEOUT):
        async with serving(server, state, stateless_only=True) as url, connected(
                url, "vmcp", "--protocol", "auto", sampling=False) as (client, seen):
            with pytest.raises(MCPError, match="did not declare the sampling capability"):
                await client.call_tool("sample", {"prompt": "?"})
            assert seen.asked == []
            assert text_of(await client.call_tool("add", {"a": 1, "b": 1}))


# --- a remote that misbehaves ------------------------------------------------------------------

class Hostile2026:
    """A stand-in for a 2026-07-28 remote that misbehaves on purpose (no installable server
    does): every tool asks the client for input on every round (``many``: 16 questions at
    once, the others one), with a new ``requestState`` each time (kept, with what came back),
    but ``vanish`` (an event stream that ends after a progress notification, unanswered) and
    ``garble`` (a JSON body that is no JSON-RPC message); its listen stream acknowledges no
    subscription."""

    def __init__(self) -> None:
        self.states_sent: list[str] = []
        self.states_back: list[object] = []
        self.listens = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        request = orjson.loads(await read_body(receive) or b"{}")
        method, params = request.get("method"), request.get("params") or {}
        if method == "server/discover":
            await self.json(send, request, {"supportedVersions": ["2026-07-28"], "capabilities": {
                "tools": {}, "resources": {"subscribe": True}}, "_meta": {
                "io.modelcontextprotocol/serverInfo": {"name": "hostile", "version": "1"}}})
        elif method == "tools/call" and params.get("name") == "vanish":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            progress = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                                     "params": {"progressToken": 1, "progress": 1}})
            await send({"type": "http.response.body", "body": b"data: " + progress + b"\n\n"})
        elif method == "tools/call" and params.get("name") == "garble":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"jsonrpc": "2.0"}'})
        elif method == "tools/call":
            self.states_back.append(params.get("requestState"))
            state = f'round {len(self.states_sent)} \u00e9t\u00e0t "quoted" \\ {{}}'
            self.states_sent.append(state)
            asked = 16 if params.get("name") == "many" else 1
            await self.json(send, request, {
                "resultType": "input_required", "requestState": state, "inputRequests": {
                    f"q{n}": {"method": "elicitation/create", "params": {
                        "message": "more?", "requestedSchema": {
                            "type": "object", "properties": {}}}} for n in range(asked)}})
        elif method == "subscriptions/listen":
            self.listens += 1
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            ack = orjson.dumps({"jsonrpc": "2.0", "method":
                                "notifications/subscriptions/acknowledged", "params": {
                                    "notifications": {"resourceSubscriptions": []}}})
            await send({"type": "http.response.body", "body": b"data: " + ack + b"\n\n",
                        "more_body": True})
            await trio.sleep_forever()
        else:
            await self.json(send, request, {})

    @staticmethod
    async def json(send: Any, request: dict[str, Any], result: dict[str, Any]) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(
            {"jsonrpc": "2.0", "id": request.get("id"), "result": result})})


class Lines:
    """The bridge's stdout, a message at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffered = b""

    async def raw(self) -> Any:
        with trio.fail_after(10):
            while b"\n" not in self.buffered:
                self.buffered += await self.stream.receive_some()
        line, self.buffered = self.buffered.split(b"\n", 1)
        return orjson.loads(line)

    async def next(self) -> dict[str, Any]:
        message = await self.raw()
        assert isinstance(message, dict), message
        return message


@asynccontextmanager
async def bridged_to(remote: Hostile2026, ignored: Sequence[str] = ()) -> AsyncIterator[
        tuple[trio.abc.SendStream, Lines]]:
    """``--protocol auto`` in this process against ``remote`` (``ignored``: its
    ``--ignore-tool`` patterns), the handshake done."""
    async with stdio_bridge_to(remote, dual_era=True, tools=ToolFilter(ignored)) as (
            bridge, stdin, stdout):
        assert bridge.dual_era is not None
        bridge.dual_era.acknowledgement_wait = 1.0
        lines = Lines(stdout)
        await stdin.send_all(orjson.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "test", "version": "1"}}}) + b"\n")
        assert (await lines.next())["result"]["serverInfo"]["name"] == "hostile"
        yield stdin, lines


def line(message: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n"


async def test_a_remote_that_asks_forever_gets_ten_rounds_each_state_echoed() -> None:
    """Each round's requestState goes back exactly as it came (quotes, escapes, non-ASCII);
    after ten rounds the call is answered with an error, not an eleventh question."""
    remote = Hostile2026()
    async with bridged_to(remote) as (stdin, lines):
        await stdin.send_all(line({"id": 1, "method": "tools/call",
                                   "params": {"name": "forever", "arguments": {}}}))
        questions = 0
        while True:
            message = await lines.next()
            if message.get("id") == 1:
                break
            assert message["method"] == "elicitation/create"
            questions += 1
            await stdin.send_all(line({"id": message["id"], "result": {"action": "decline"}}))
    assert questions == 10
    assert message["error"]["code"] == -32603
    assert "more than 10 times" in message["error"]["message"]
    assert remote.states_back == [None, *remote.states_sent[:10]]


async def test_a_cancelled_call_withdraws_its_question_to_the_client() -> None:
    """The client gives up on a call while the bridge waits for its answer to the remote's
    question: the question is cancelled at the client too, and the call gets no answer."""
    async with bridged_to(Hostile2026()) as (stdin, lines):
        await stdin.send_all(line({"id": 7, "method": "tools/call",
                                   "params": {"name": "forever", "arguments": {}}}))
        question = await lines.next()
        await stdin.send_all(line({"method": "notifications/cancelled",
                                   "params": {"requestId": 7}}))
        withdrawn = await lines.next()
        assert withdrawn == {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": question["id"], "reason": "the call ended"}}
        await stdin.send_all(line({"id": 8, "method": "ping"}))
        assert await lines.next() == {"jsonrpc": "2.0", "id": 8, "result": {}}


async def test_a_subscription_the_remote_does_not_honour_is_an_error() -> None:
    """The listen stream acknowledged without the URI: the client hears it was not accepted
    (not a silent success whose updates never come)."""
    remote = Hostile2026()
    async with bridged_to(remote) as (stdin, lines):
        await stdin.send_all(line({"id": 3, "method": "resources/subscribe",
                                   "params": {"uri": "file:///x"}}))
        refused = await lines.next()
    assert refused["id"] == 3 and "did not accept a subscription to file:///x" in \
        refused["error"]["message"]
    assert remote.listens == 1


async def test_questions_waiting_for_the_client_are_bounded() -> None:
    """Seventeen calls each asking sixteen questions the client leaves unanswered: 256 wait,
    and the call that would make 272 is answered at once with an error saying so."""
    async with bridged_to(Hostile2026()) as (stdin, lines):
        for call in range(17):
            await stdin.send_all(line({"id": 100 + call, "method": "tools/call",
                                       "params": {"name": "many", "arguments": {}}}))
        questions, refused = 0, []
        while len(refused) < 1 or questions < 256:
            message = await lines.next()
            if "method" in message:
                questions += 1
            else:
                refused.append(message)
    assert questions == 256
    assert "more than 256 questions would wait for the client" in \
        refused[0]["error"]["message"]


async def test_a_batch_is_answered_in_one_array() -> None:
    """A 2025-03-26 client's batch: its requests taken at once (a ping the remote answers, a
    log level kept here, a call of an ignored tool refused) and answered in one array, its
    notification answered by nothing; a batch of notifications only gets no line."""
    async with bridged_to(Hostile2026(), ["secret*"]) as (stdin, lines):
        await stdin.send_all(orjson.dumps([
            {"jsonrpc": "2.0", "id": "a", "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": "b", "method": "logging/setLevel",
             "params": {"level": "error"}},
            {"jsonrpc": "2.0", "id": "c", "method": "tools/call",
             "params": {"name": "secret_tool", "arguments": {}}}]) + b"\n")
        await stdin.send_all(orjson.dumps([
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]) + b"\n")
        await stdin.send_all(line({"id": "d", "method": "ping"}))
        batch = await lines.raw()
        assert await lines.next() == {"jsonrpc": "2.0", "id": "d", "result": {}}
    answers = {answer["id"]: answer for answer in batch}
    assert answers["a"]["result"] == {} and answers["b"]["result"] == {}
    assert answers["c"]["error"]["message"] == 'Tool "secret_tool" is not available'
    assert len(batch) == 3


async def test_a_remote_that_answers_nothing_or_garbage_is_an_error_for_that_call() -> None:
    """A call's stream that ends unanswered (its progress passed on first), a JSON answer that
    is no message: each call gets an error naming what the remote did; the next call works."""
    async with bridged_to(Hostile2026()) as (stdin, lines):
        await stdin.send_all(line({"id": 1, "method": "tools/call", "params": {
            "name": "vanish", "arguments": {}, "_meta": {"progressToken": 1}}}))
        assert (await lines.next())["method"] == "notifications/progress"
        vanished = await lines.next()
        await stdin.send_all(line({"id": 2, "method": "tools/call",
                                   "params": {"name": "garble", "arguments": {}}}))
        garbled = await lines.next()
        await stdin.send_all(line({"id": 3, "method": "ping"}))
        assert await lines.next() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert vanished["id"] == 1 and "closed the stream of tools/call before answering" in \
        vanished["error"]["message"]
    assert garbled["id"] == 2 and "its JSON answer is no JSON-RPC message" in \
        garbled["error"]["message"]
