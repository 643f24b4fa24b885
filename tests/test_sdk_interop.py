"""The official MCP Python SDK 2.x ``Client`` against vmcp, with real SDK-built backends.

Behind one gateway: two SDK 2.x ``MCPServer`` backends over Streamable HTTP, served in this
process (``alpha``, which vmcp talks to in 2026-07-28, and ``beta``, which refuses 2026-07-28 so
that vmcp talks to it with a 2025-11-25 handshake), one SDK 1.x ``FastMCP`` backend over
Streamable HTTP (``v1``, a subprocess of ``.venv-mcp1``, started once per module) and the
repository's two stdio example servers (``clock`` and ``notes``, started by vmcp). Every test
runs with the client in ``mode="legacy"`` (initialize handshake, 2025-11-25 session) and
``mode="auto"`` (a ``server/discover`` probe, which vmcp answers: then stateless 2026-07-28
requests, with the backends' questions as input requests and subscriptions on
``subscriptions/listen``), and asserts what the client's user sees: results, callbacks,
notifications.

Every HTTP exchange of the client is recorded (JSON-RPC method and status): no exchange may get
a 5xx from the gateway, whatever the test does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp.types as types
import pytest
import trio
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from vmcp_trio.app.parts import GatewayProcess

from .fixtures.sdk1 import running_sdk1
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import quickstart_docs, running_gateway

GROUP = "quickstart"
TIMEOUT = 30  # seconds for one test's whole conversation; each request has its own below
REQUEST_TIMEOUT = 10.0

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


# --- the 1.x backend: one subprocess per module ------------------------------------------------

@pytest.fixture(scope="module")
def sdk1_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a 1.x FastMCP server started for this module (stopped at its end)."""
    with running_sdk1(tmp_path_factory.mktemp("sdk1")) as url:
        yield url


# --- the gateway with every backend -----------------------------------------------------------

def http_backend(name: str, url: str) -> dict[str, Any]:
    return {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name}, "spec": {"groupRef": {"name": GROUP}, "url": url}}


@dataclass
class Stack:
    url: str
    alpha: BackendState
    beta: BackendState
    gateway: GatewayProcess


@pytest.fixture
async def stack(sdk1_url: str) -> AsyncIterator[Stack]:
    """vmcp in front of alpha (SDK 2.x in 2026-07-28) and beta (SDK 2.x, handshake only), v1
    (SDK 1.x, the module's subprocess) and the quickstart's clock and notes (stdio, started by
    vmcp)."""
    alpha, alpha_state = make_server("alpha")
    beta, beta_state = make_server("beta")
    async with serving(alpha, alpha_state) as alpha_url, \
            serving(beta, beta_state, handshake_only=True) as beta_url:
        docs = [*quickstart_docs(), http_backend("alpha", alpha_url),
                http_backend("beta", beta_url), http_backend("v1", sdk1_url)]
        async with running_gateway(docs) as (url, gateway):
            yield Stack(url, alpha_state, beta_state, gateway)


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- the client, with every callback recording what it saw -------------------------------------

ROOTS = [types.Root(uri="file:///work/project", name="project")]


@dataclass
class Seen:
    """What the client's callbacks and its HTTP client saw."""

    exchanges: list[tuple[str, str, int]] = field(default_factory=list)
    """(HTTP method, JSON-RPC method or "", status) of every HTTP exchange."""
    notifications: list[Any] = field(default_factory=list)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    sampling: list[types.CreateMessageRequestParams] = field(default_factory=list)
    elicitations: list[types.ElicitRequestParams] = field(default_factory=list)
    roots_asked: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def server_errors(self) -> list[tuple[str, str, int]]:
        return [e for e in self.exchanges if e[2] >= 500]

    async def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 5) -> Any:
        """The first notification matching ``predicate``, waiting for it."""
        with trio.fail_after(timeout):
            while True:
                for item in self.notifications:
                    if predicate(item):
                        return item
                await self.changed.wait()


@asynccontextmanager
async def connect(url: str, mode: str) -> AsyncIterator[tuple[Client, Seen]]:
    seen = Seen()

    async def on_response(response: httpx2.Response) -> None:
        rpc = ""
        if response.request.method == "POST":
            try:
                body = json.loads(response.request.content or b"null")
                rpc = body.get("method") or ("<response>" if "id" in body else "")
            except (ValueError, AttributeError):
                rpc = "?"
        seen.exchanges.append((response.request.method, rpc, response.status_code))

    async def on_message(message: Any) -> None:
        seen.notifications.append(message)
        seen.changed.set()
        seen.changed = trio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        seen.logs.append(params)

    async def on_sampling(context: ClientRequestContext,
                          params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        seen.sampling.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="forty-two"),
            model="test-model", stop_reason="endTurn")

    async def on_elicitation(context: ClientRequestContext,
                             params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.elicitations.append(params)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
        seen.roots_asked += 1
        return types.ListRootsResult(roots=ROOTS)

    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(
            timeout=httpx2.Timeout(REQUEST_TIMEOUT, read=60),
            event_hooks={"response": [on_response]}))
        client = await stack.enter_async_context(Client(
            streamable_http_client(url, http_client=http), mode=mode,
            read_timeout_seconds=REQUEST_TIMEOUT, message_handler=on_message,
            logging_callback=on_log, sampling_callback=on_sampling,
            elicitation_callback=on_elicitation, list_roots_callback=on_roots,
            log_level="debug" if mode == "auto" else None))
        yield client, seen
    assert not seen.server_errors(), f"the gateway failed with 5xx: {seen.server_errors()}"


class ProgressLog:
    """A progress callback that keeps what it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


# --- the tests -------------------------------------------------------------------------------

async def test_handshake_and_the_aggregated_tool_list(stack: Stack, mode: str) -> None:
    """Legacy mode gets a 2025-11-25 session, auto mode discovers vmcp and speaks 2026-07-28;
    both see one server whose tools are every backend's tools under ``<backend>_<tool>``, with
    descriptions and schemas kept."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            assert client.protocol_version == ("2026-07-28" if mode == "auto" else
                                               "2025-11-25")
            assert client.server_info is not None
            assert client.server_info.name == f"vmcp-trio/{GROUP}"
            capabilities = client.server_capabilities
            assert capabilities is not None and capabilities.tools is not None
            assert capabilities.resources is not None and capabilities.resources.subscribe
            assert "the alpha test backend" in (client.instructions or "")

            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            sdk2 = {"add", "slow", "sleepy", "ask", "sample", "roots", "touch"}
            expected = ({f"alpha_{t}" for t in sdk2} | {f"beta_{t}" for t in sdk2}
                        | {f"v1_{t}" for t in ("add", "slow", "ask", "sample", "sleepy",
                                               "stats")}
                        | {"clock_add", "clock_countdown", "clock_summarize",
                           "notes_add_note", "notes_list_notes"})
            assert expected <= set(tools)
            prefixes = ("alpha_", "beta_", "v1_", "clock_", "notes_")
            assert all(name.startswith(prefixes) for name in tools)
            assert tools["alpha_slow"].description == ("Reports progress and logs one info line "
                                                      "per step.")
            assert set(tools["beta_add"].input_schema["properties"]) == {"a", "b"}
            assert tools["alpha_add"].output_schema is not None

        methods = [(http, rpc) for http, rpc, _ in seen.exchanges]
        if mode == "auto":
            assert seen.exchanges[0] == ("POST", "server/discover", 200)
            assert ("POST", "initialize") not in methods and ("DELETE", "") not in methods
        else:
            assert methods[0] == ("POST", "initialize")
            assert ("POST", "server/discover") not in methods
            assert ("DELETE", "") in methods


async def test_calls_are_routed_to_their_backend(stack: Stack, mode: str) -> None:
    """A prefixed tool name reaches the backend that owns the tool, under its own name, and the
    result comes back whole: structured content from SDK 2.x, SDK 1.x and stdio backends, and a
    tool error as ``isError``; an unknown name is a JSON-RPC error."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, _):
            alpha = await client.call_tool("alpha_add", {"a": 2, "b": 3})
            assert alpha.structured_content == {"total": 5, "backend": "alpha"}
            beta = await client.call_tool("beta_add", {"a": 40, "b": 2})
            assert beta.structured_content == {"total": 42, "backend": "beta"}
            v1 = await client.call_tool("v1_add", {"a": 20, "b": 22})
            assert v1.structured_content == {"result": 42}
            assert text_of(v1) == "42"
            clock = await client.call_tool("clock_add", {"a": 1.5, "b": 2})
            assert clock.structured_content == {"sum": 3.5}
            failed = await client.call_tool("clock_fail", {})
            assert failed.is_error
            with pytest.raises(MCPError, match="Unknown tool"):
                await client.call_tool("add", {"a": 1, "b": 1})
    # Each backend in the newest revision it speaks (beta refused the 2026-07-28 probe).
    assert set(stack.alpha.versions) == {"2026-07-28"}
    assert "2025-11-25" in stack.beta.versions


async def test_progress_and_logging_reach_the_client_callbacks(stack: Stack, mode: str) -> None:
    """Progress notifications of a call reach that call's progress callback, in order and with
    their values (total, message), and the backend's log lines during the call reach the logging
    callback, for SDK 2.x (2026-07-28 and handshake), SDK 1.x and stdio backends."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            for tool, label in (("alpha_slow", "alpha"), ("beta_slow", "beta"),
                                ("v1_slow", "v1")):
                progress = ProgressLog()
                seen.logs.clear()
                result = await client.call_tool(tool, {"steps": 3}, progress_callback=progress)
                assert text_of(result) == f"{label} finished 3 steps"
                assert progress.seen == [(float(i), 3.0, f"{label} step {i}") for i in (1, 2, 3)]
                assert [(log.level, log.data) for log in seen.logs] == [
                    ("info", f"{label} log {i}") for i in (1, 2, 3)]

            progress = ProgressLog()
            seen.logs.clear()
            result = await client.call_tool("clock_countdown", {"steps": 3, "delay_ms": 10},
                                            progress_callback=progress)
            assert text_of(result) == "done after 3 steps"
            assert progress.seen == [(float(i), 3.0, f"step {i} of 3") for i in (1, 2, 3)]
            assert [log.data for log in seen.logs] == [
                f"countdown: step {i} of 3" for i in (1, 2, 3)]


async def test_server_to_client_requests_round_trip(stack: Stack, mode: str) -> None:
    """Sampling, elicitation and roots requests a backend sends during a call reach the
    client's callbacks through vmcp, and the client's answers reach the backend: from SDK 2.x
    in 2026-07-28 (input requests, which vmcp turns into requests for a handshake client and
    passes through to a 2026-07-28 one) and with a handshake (requests on the call's stream;
    roots on its standalone stream), SDK 1.x and stdio backends."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            for backend in ("alpha", "beta"):
                question = f"{backend}: favourite colour?"
                asked = await client.call_tool(f"{backend}_ask", {"question": question})
                assert text_of(asked) == "accept:blue"
                assert seen.elicitations[-1].message == question
                sampled = await client.call_tool(f"{backend}_sample", {"prompt": "6 times 7?"})
                assert text_of(sampled) == f"{backend} sampled: forty-two (model test-model)"
                request = seen.sampling[-1]
                assert request.max_tokens == 50
                assert request.messages[0].content == types.TextContent(type="text",
                                                                        text="6 times 7?")
                roots = await client.call_tool(f"{backend}_roots", {})
                assert text_of(roots) == "file:///work/project"
            assert stack.alpha.roots_seen == stack.beta.roots_seen == ["file:///work/project"]

            assert text_of(await client.call_tool("v1_ask", {"question": "v1?"})) == "accept:blue"
            assert seen.elicitations[-1].message == "v1?"
            v1 = await client.call_tool("v1_sample", {"prompt": "v1 prompt"})
            assert text_of(v1) == "v1 sampled: forty-two"

            clock = await client.call_tool("clock_ask_user", {"question": "stdio?"})
            assert text_of(clock) == "blue"
            summary = await client.call_tool("clock_summarize", {"text": "a long text"})
            assert text_of(summary) == "forty-two"
            assert text_of(await client.call_tool("clock_list_roots", {})) == (
                "file:///work/project")
            assert len(seen.sampling) == 4 and len(seen.elicitations) == 4
            assert seen.roots_asked == 3


async def test_resources_and_subscriptions(stack: Stack, mode: str) -> None:
    """Resources and templates of every backend are listed together and read from their owner;
    a subscription reaches the backend that owns the URI (a ``resources/subscribe``, or for a
    2026-07-28 backend the filter of vmcp's listen stream), and its
    ``notifications/resources/updated`` reaches the client's message handler (SDK 2.x backends
    and stdio backend); unsubscribing reaches the backend too."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert {"alpha://static", "beta://static", "legacy://static",
                    "notes://index"} <= uris
            templates = {t.uri_template for t in
                         (await client.list_resource_templates()).resource_templates}
            assert {"alpha://item/{item_id}", "beta://item/{item_id}", "legacy://item/{item_id}",
                    "notes://note/{id}"} <= templates

            for uri, text in (("alpha://static", "static content of alpha"),
                              ("beta://item/7", "beta item 7"),
                              ("legacy://item/3", "legacy item 3")):
                contents = (await client.read_resource(uri)).contents
                assert len(contents) == 1
                assert isinstance(contents[0], types.TextResourceContents)
                assert (str(contents[0].uri), contents[0].text) == (uri, text)
            index = (await client.read_resource("notes://index")).contents[0]
            assert isinstance(index, types.TextResourceContents)

            if mode == "auto":
                await listen_for_updates(client, stack)
                return

            def updated(uri: str) -> Callable[[Any], bool]:
                return lambda m: (isinstance(m, types.ResourceUpdatedNotification)
                                  and str(m.params.uri) == uri)

            await client.subscribe_resource("alpha://static")
            assert stack.alpha.listens[-1] == ["alpha://static"]
            assert stack.beta.subscriptions == set()
            await client.call_tool("alpha_touch", {"uri": "alpha://static"})
            await seen.wait_for(updated("alpha://static"))
            await client.subscribe_resource("beta://static")
            assert stack.beta.subscriptions == {"beta://static"}
            await client.call_tool("beta_touch", {"uri": "beta://static"})
            await seen.wait_for(updated("beta://static"))

            await client.subscribe_resource("notes://index")
            await client.call_tool("notes_add_note", {"title": "t", "text": "subscribed"})
            await seen.wait_for(updated("notes://index"))

            await client.unsubscribe_resource("alpha://static")
            assert stack.alpha.listens[-1] == []
            await client.unsubscribe_resource("beta://static")
            assert stack.beta.subscriptions == set()


async def listen_for_updates(client: Client, stack: Stack) -> None:
    """2026-07-28: one ``subscriptions/listen`` stream for three URIs of three backends; each
    backend is subscribed once, updates arrive on the stream, and leaving it unsubscribes."""
    uris = {"alpha://static", "beta://static", "notes://index"}
    async with client.listen(resource_subscriptions=sorted(uris),
                             tools_list_changed=True) as subscription:
        assert set(subscription.honored.resource_subscriptions or ()) == uris
        assert stack.alpha.listens[-1] == ["alpha://static"]
        assert stack.beta.subscriptions == {"beta://static"}
        await client.call_tool("alpha_touch", {"uri": "alpha://static"})
        await client.call_tool("beta_touch", {"uri": "beta://static"})
        await client.call_tool("notes_add_note", {"title": "t", "text": "listened"})
        got: set[str] = set()
        with trio.fail_after(5):
            async for event in subscription:
                uri = getattr(event, "uri", None)
                if uri is not None:
                    got.add(str(uri))
                if got >= uris:
                    break
    with trio.fail_after(5):
        while stack.beta.subscriptions or stack.alpha.listens[-1]:
            await trio.sleep(0.05)


async def test_prompts_and_completion(stack: Stack, mode: str) -> None:
    """Prompts are listed under prefixed names and fetched from their backend with arguments;
    completions for a prompt argument and for a resource-template argument come from the
    backend that owns the prompt or template."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, _):
            names = {p.name for p in (await client.list_prompts()).prompts}
            assert {"alpha_greet", "beta_greet", "v1_greet", "notes_summarize_notes"} <= names
            for prompt, backend in (("alpha_greet", "alpha"), ("v1_greet", "legacy-sdk1")):
                got = await client.get_prompt(prompt, {"person": "Bob"})
                content = got.messages[0].content
                assert isinstance(content, types.TextContent)
                assert content.text == f"Say hello to Bob from {backend}"

            by_prompt = await client.complete(
                types.PromptReference(type="ref/prompt", name="beta_greet"),
                {"name": "person", "value": "al"})
            assert by_prompt.completion.values == ["alice", "albert"]
            by_template = await client.complete(
                types.ResourceTemplateReference(type="ref/resource",
                                                uri="alpha://item/{item_id}"),
                {"name": "item_id", "value": "b"})
            assert by_template.completion.values == ["bob"]
            styles = await client.complete(
                types.PromptReference(type="ref/prompt", name="notes_summarize_notes"),
                {"name": "style", "value": "b"})
            assert set(styles.completion.values) == {"brief", "bullet"}


async def test_cancellation_reaches_the_backend(stack: Stack, mode: str) -> None:
    """When the client abandons a call (its scope is cancelled, or its per-call timeout
    expires), the backend's handler is cancelled: the SDK 2.x backends record it, and the SDK
    1.x backend counts it; the session goes on working afterwards. (The calls are abandoned
    after vmcp's JSON window, once their answer is an event stream; a quicker cancellation is
    the next test.)"""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            before = json.loads(text_of(await client.call_tool("v1_stats", {})))

            async def abandon(tool: str) -> None:
                with trio.move_on_after(1.5):
                    await client.call_tool(tool, {"seconds": 30})
                    raise AssertionError(f"{tool} was not cancelled")

            async def time_out(tool: str) -> None:
                with pytest.raises(MCPError, match="timed out"):
                    await client.call_tool(tool, {"seconds": 30}, read_timeout_seconds=1.5)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(abandon, "alpha_sleepy")
                nursery.start_soon(time_out, "beta_sleepy")
                nursery.start_soon(abandon, "v1_sleepy")
            with trio.fail_after(5):
                await stack.alpha.sleepy_cancelled.wait()
                await stack.beta.sleepy_cancelled.wait()
                while True:
                    after = json.loads(text_of(await client.call_tool("v1_stats", {})))
                    if after["sleepy_cancelled"] > before["sleepy_cancelled"]:
                        break
                    await trio.sleep(0.05)
            assert after["sleepy_started"] == before["sleepy_started"] + 1

            again = await client.call_tool("alpha_add", {"a": 1, "b": 1})
            assert again.structured_content == {"total": 2, "backend": "alpha"}
        cancels = [e for e in seen.exchanges if e[1] == "notifications/cancelled"]
        # legacy cancels with a notification; 2026-07-28 by closing the response stream
        assert [status for _, _, status in cancels] == ([202] * 3 if mode == "legacy" else [])


async def test_quick_cancellation_gets_a_valid_http_answer(stack: Stack, mode: str) -> None:
    """A call the client cancels within vmcp's JSON window (before the backend sent anything)
    still gets a well-formed HTTP answer, not a server error: the cancelled request has no
    JSON-RPC response, so the answer is an empty event stream."""
    stack.alpha.sleepy_started, stack.alpha.sleepy_cancelled = trio.Event(), trio.Event()
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            with trio.CancelScope() as calling:  # cancelled once the backend is at work

                async def cancel_once_started() -> None:
                    await stack.alpha.sleepy_started.wait()
                    calling.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_once_started)
                    await client.call_tool("alpha_sleepy", {"seconds": 30})
            with trio.fail_after(5):
                await stack.alpha.sleepy_cancelled.wait()
            if mode == "auto":
                return  # the client closed the request before any answer: nothing to see
            with trio.fail_after(5):
                while not [e for e in seen.exchanges if e[1] == "tools/call"]:
                    await trio.sleep(0.05)
            calls = [e for e in seen.exchanges if e[1] == "tools/call"]
            assert calls == [("POST", "tools/call", 200)], seen.exchanges


async def test_a_log_level_set_in_a_handshake_reaches_a_2026_backend(stack: Stack) -> None:
    """``logging/setLevel`` does not exist in 2026-07-28: for alpha vmcp keeps the level the
    client set and sends it as the ``_meta`` log level of each request, so the backend filters
    as a handshake server would. beta (SDK 2.x declares no logging capability, so it gets no
    ``logging/setLevel``, and logs everything) is filtered by vmcp."""
    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, "legacy") as (client, seen):
            await client.set_logging_level("warning")
            for backend in ("alpha", "beta"):
                await client.call_tool(f"{backend}_slow", {"steps": 2})
            assert seen.logs == []
            await client.set_logging_level("info")
            for backend in ("alpha", "beta"):
                seen.logs.clear()
                await client.call_tool(f"{backend}_slow", {"steps": 2})
                assert [log.data for log in seen.logs] == [f"{backend} log {i}" for i in (1, 2)]
    assert "logging/setLevel" not in stack.alpha.methods
    levels = [meta.get("io.modelcontextprotocol/logLevel")
              for method, meta in zip(stack.alpha.methods, stack.alpha.metas, strict=True)
              if method == "tools/call"]
    assert levels == ["warning", "info"]


async def test_list_changes_of_every_backend_reach_the_client(stack: Stack, mode: str) -> None:
    """A backend that adds a tool says so (alpha on vmcp's listen stream, beta on its GET
    stream); the client hears ``notifications/tools/list_changed`` (on its session stream, or
    on its own listen stream in 2026-07-28) and the next listing has the new tool."""

    def changed(m: Any) -> bool:
        return isinstance(m, types.ToolListChangedNotification)

    with trio.fail_after(TIMEOUT):
        async with connect(stack.url, mode) as (client, seen):
            for backend in ("alpha", "beta"):
                before = {t.name for t in (await client.list_tools()).tools}
                assert f"{backend}_grown" not in before
                if mode == "auto":
                    async with client.listen(tools_list_changed=True) as subscription:
                        await client.call_tool(f"{backend}_grow", {})
                        with trio.fail_after(5):
                            event = await subscription.__anext__()
                        assert type(event).__name__ == "ToolsListChanged"
                else:
                    seen.notifications.clear()
                    await client.call_tool(f"{backend}_grow", {})
                    await seen.wait_for(changed)
                after = {t.name for t in (await client.list_tools()).tools}
                assert after - before == {f"{backend}_grown"}
                grown = await client.call_tool(f"{backend}_grown", {})
                assert text_of(grown) == f"grown on {backend}"


async def test_a_2026_backend_is_health_checked_with_discover(stack: Stack) -> None:
    """2026-07-28 has no ``ping``: the health checker asks alpha ``server/discover`` and finds it
    healthy, while beta is pinged."""
    with trio.fail_after(TIMEOUT):
        while any(stack.gateway.gateway.health.backends[name].state != "healthy"
                  for name in ("alpha", "beta")):
            await trio.sleep(0.05)
    assert "ping" not in stack.alpha.methods and "server/discover" in stack.alpha.methods
    assert "ping" in stack.beta.methods


async def test_a_question_the_client_cannot_take_is_a_clear_error(stack: Stack,
                                                                  mode: str) -> None:
    """A client that declared no elicitation capability calls a tool that asks the user: from
    alpha (2026-07-28) and from beta (handshake) it gets a JSON-RPC error naming elicitation
    at once, never a hang, and the session goes on working."""
    with trio.fail_after(TIMEOUT):
        async with Client(stack.url, mode=mode, read_timeout_seconds=REQUEST_TIMEOUT) as client:
            for backend in ("alpha", "beta"):
                with pytest.raises(MCPError, match="elicitation") as caught:
                    await client.call_tool(f"{backend}_ask", {"question": "name?"})
                assert "timed out" not in str(caught.value)
            added = await client.call_tool("alpha_add", {"a": 1, "b": 2})
            assert added.structured_content == {"total": 3, "backend": "alpha"}
