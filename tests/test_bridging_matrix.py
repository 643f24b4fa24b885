"""The bridging matrix: every client era against every kind of backend, feature by feature,
through one gateway.

One gateway (vmcp in this process, on a trio loop of its own thread so that every cell shares it
and its backends) presents six backends, each an ``MCPServer`` of one group, so every tool and
prompt is ``<backend>_<name>``:

* ``sdk2stdio``: the MCP Python SDK 2.x test server (``tests/fixtures/sdk_servers.py``) over stdio
  (``sdk_stdio_server.py``: its stdio loop on trio, with a ``stats`` tool);
* ``sdk1stdio``: the SDK 1.x ``FastMCP`` server (``tests/fixtures/sdk1_server.py --stdio``), run
  with ``.venv-mcp1``;
* ``everything``: ``@modelcontextprotocol/server-everything`` over stdio (Node);
* ``sdk2stateless``: the SDK 2.x server over Streamable HTTP, which vmcp talks to in 2026-07-28;
* ``sdk2handshake``: the same refusing 2026-07-28, which vmcp talks to with a handshake;
* ``legacysse``: the SDK 1.x server on the legacy HTTP+SSE transport (``transport: sse``).

Clients speak each era on the wire: 2025-03-26, 2025-06-18 and 2025-11-25 with a session
(``initialize``; server-to-client requests come on the call's stream and are answered by
POSTing a JSON-RPC response; a 2025-03-26 client declares no elicitation, which that revision
did not have), and 2026-07-28 without one (its backend questions come as an
``InputRequiredResult``, answered in a retry). Each cell of (backend, feature, era) is one test,
with a fresh client session; it works, or fails with the precise JSON-RPC error the README
documents for it (said in its id with ``-error``), or is ``n/a`` when the backend has no such
feature (said in its id, and the cell still checks what a client then gets). At the end of the
module the whole matrix is printed as a markdown table (nothing is written to disk); a failing
cell's message carries the gateway's log lines of that cell.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import selectors
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.sse import SSEParser

from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import (
    ACCEPT,
    VERSION,
    RawClient,
    Reply,
    StatelessClient,
    meta,
    running_gateway,
)
from .helpers import stop_process

ROOT = Path(__file__).resolve().parent.parent
SDK1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
SDK1_SERVER = ROOT / "tests" / "fixtures" / "sdk1_server.py"
EVERYTHING = ROOT / "tests" / "peers" / "node_modules" / "@modelcontextprotocol" / (
    "server-everything") / "dist" / "index.js"
GROUP = "matrix"

ERAS = ("2025-03-26", "2025-06-18", "2025-11-25", VERSION)
KINDS = ("sdk2stdio", "sdk1stdio", "everything", "sdk2stateless", "sdk2handshake", "legacysse")
FAMILY = {"sdk2stdio": "sdk2", "sdk1stdio": "sdk1", "everything": "everything",
          "sdk2stateless": "sdk2", "sdk2handshake": "sdk2", "legacysse": "sdk1"}
FEATURES = ("initialize", "tools", "progress", "cancellation", "logging", "resources",
            "subscribe", "prompts", "completion", "elicitation", "sampling", "roots",
            "list_changed")

NOT_APPLICABLE = {
    ("sdk1stdio", "subscribe"): "FastMCP 1.x declares resources.subscribe false",
    ("legacysse", "subscribe"): "FastMCP 1.x declares resources.subscribe false",
}
"""(backend, feature) -> why the backend has no such feature (the cell checks what a client
gets instead)."""
EXPECTED_ERRORS = {
    ("elicitation", "2025-03-26"): "a 2025-03-26 client has no elicitation capability",
}
"""(feature, era) -> why the cell is a documented error (the README: a question needing a
capability the client did not declare is refused, naming it)."""

CELL_TIMEOUT = 20.0
"""Seconds for one cell, whatever it waits for."""
WAIT = 5.0
"""Seconds for one awaited event (a notification, a backend learning of a cancel)."""
ROOTS = [{"uri": "file:///work/project", "name": "project"}]
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "forty-two"},
           "model": "test-model", "stopReason": "endTurn"}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


# --- the stack: the backends and the gateway, on a trio loop of their own --------------------

class LogTap(logging.Handler):
    """Every ``vmcp.*`` log record, as a line (a failing cell shows those of its time)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


@dataclass
class Stack:
    url: str
    gateway: GatewayProcess
    states: dict[str, BackendState]
    """What the in-process SDK 2.x backends recorded (read from the tests' thread)."""
    stop: trio.Event
    token: trio.lowlevel.TrioToken
    tap: LogTap = field(default_factory=LogTap)


def _docs(node: str, stateless_url: str, handshake_url: str, sse_url: str) -> list[dict[str, Any]]:
    api = "toolhive.stacklok.dev/v1alpha1"

    def backend(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": api, "kind": "MCPServer", "metadata": {"name": name},
                "spec": {"groupRef": {"name": GROUP}, **spec}}

    return [
        {"apiVersion": api, "kind": "MCPGroup", "metadata": {"name": GROUP}},
        backend("sdk2stdio", command=sys.executable,
                args=["-m", "tests.fixtures.sdk_stdio_server", "sdk2stdio"],
                workingDir=str(ROOT)),
        backend("sdk1stdio", command=str(SDK1_PYTHON),
                args=[str(SDK1_SERVER), "--stdio", "--name", "sdk1stdio"]),
        backend("everything", command=node, args=[str(EVERYTHING), "stdio"]),
        backend("sdk2stateless", url=stateless_url),
        backend("sdk2handshake", url=handshake_url),
        backend("legacysse", url=sse_url, transport="sse"),
        {"apiVersion": api, "kind": "VirtualMCPServer", "metadata": {"name": GROUP},
         "spec": {"groupRef": {"name": GROUP}, "incomingAuth": {"type": "anonymous"}}},
    ]


def _serve(node: str, sse_url: str, out: queue.Queue[Stack | BaseException]) -> None:
    """The thread's life: the in-process backends and the gateway, until ``stop`` is set."""

    async def main() -> None:
        stateless, stateless_state = make_server("sdk2stateless")
        handshake, handshake_state = make_server("sdk2handshake")
        async with serving(stateless, stateless_state) as stateless_url, \
                serving(handshake, handshake_state, handshake_only=True) as handshake_url, \
                running_gateway(_docs(node, stateless_url, handshake_url, sse_url)) as (url, gw):
            stop = trio.Event()
            out.put(Stack(url, gw, {"sdk2stateless": stateless_state,
                                    "sdk2handshake": handshake_state},
                          stop, trio.lowlevel.current_trio_token()))
            await stop.wait()

    try:
        trio.run(main)
    except BaseException as exc:
        out.put(exc)


def _start_sse_backend() -> tuple[subprocess.Popen[str], str]:
    """The SDK 1.x server on HTTP+SSE (a subprocess of .venv-mcp1) and its URL."""
    if not SDK1_PYTHON.exists():
        pytest.fail(f"{SDK1_PYTHON} is missing: run `make mcp1` (scripts/mcp1_venv.py)")
    process = subprocess.Popen(
        [str(SDK1_PYTHON), str(SDK1_SERVER), "--sse", "--port", "0", "--name", "legacysse"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stderr: list[str] = []

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            stderr.append(line.rstrip())

    threading.Thread(target=drain, daemon=True).start()
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        line = process.stdout.readline().strip() if selector.select(30) else ""
    if not line.startswith("ready http://127.0.0.1:"):
        stop_process(process, 5)
        pytest.fail("the SDK 1.x SSE server did not start: " + "\n".join(stderr[-20:]))
    return process, line.split()[1]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if not EVERYTHING.exists():
        pytest.fail(f"{EVERYTHING} is missing: run `make peers` (scripts/peers.py)")
    node = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers.py"), "--print-node"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    sse_process, sse_url = _start_sse_backend()
    vmcp_log = logging.getLogger("vmcp")
    tap = LogTap()
    level = vmcp_log.level
    vmcp_log.setLevel(logging.DEBUG)
    vmcp_log.addHandler(tap)
    try:
        out: queue.Queue[Stack | BaseException] = queue.Queue()
        thread = threading.Thread(target=_serve, args=(node, sse_url, out),
                                  name="matrix-gateway", daemon=True)
        thread.start()
        started = out.get(timeout=90)
        if isinstance(started, BaseException):
            raise RuntimeError("the gateway did not start") from started
        started.tap = tap
        yield started
        trio.from_thread.run_sync(started.stop.set, trio_token=started.token)
        thread.join(30)
    finally:
        stop_process(sse_process, 5)
        vmcp_log.removeHandler(tap)
        vmcp_log.setLevel(level)


# --- the wire: one request's stream, and the two kinds of client ------------------------------

@dataclass
class Wire:
    """What one HTTP response carried."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    sse: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)


OnMessage = Callable[[dict[str, Any]], Awaitable[bool]]
"""Told each message of a stream as it arrives; True stops reading."""
Answerer = Callable[[dict[str, Any]], Awaitable[None]]
"""Answers a server-to-client request."""


async def read_stream(http: HttpClient, method: str, url: str, headers: list[tuple[str, str]],
                      body: bytes = b"", *, on_message: OnMessage | None = None,
                      opened: trio.Event | None = None) -> Wire:
    """Send one request and read its answer: a JSON body, or SSE events as they arrive until
    the stream ends (or ``on_message`` says stop)."""
    wire = Wire()
    async with http.stream(method, url, headers=headers, body=body) as response:
        wire.status = response.status
        wire.headers = {k.decode().lower(): v.decode() for k, v in response.headers}
        if opened is not None:
            opened.set()
        if not wire.headers.get("content-type", "").startswith("text/event-stream"):
            data = await response.read(1 << 24)
            if data:
                wire.messages.append(orjson.loads(data))
            return wire
        wire.sse = True
        parser = SSEParser()
        async for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                if not event.data:
                    continue  # a priming event
                message = orjson.loads(event.data)
                wire.messages.append(message)
                if on_message is not None and await on_message(message):
                    return wire
    return wire


def _fill(schema: dict[str, Any]) -> dict[str, Any]:
    """An accepted elicitation's content: the schema's required fields, filled in."""
    properties = schema.get("properties") or {}
    content: dict[str, Any] = {}
    for key in schema.get("required") or list(properties):
        prop = properties.get(key, {})
        if key == "answer":
            content[key] = "blue"
        elif key == "name":
            content[key] = "Ada"
        elif "default" in prop:
            content[key] = prop["default"]
        elif prop.get("type") == "boolean":
            content[key] = True
        elif prop.get("type") in ("integer", "number"):
            content[key] = prop.get("minimum", 1)
        else:
            content[key] = "blue"
    return content


def answer_for(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """What the client answers a server's question with."""
    if method == "sampling/createMessage":
        return SAMPLED
    if method == "elicitation/create":
        return {"action": "accept", "content": _fill(params.get("requestedSchema") or {})}
    if method == "roots/list":
        return {"roots": ROOTS}
    raise AssertionError(f"the client was asked something it does not know: {method}")


@dataclass
class Exchange:
    """One request, its questions answered, and everything its stream(s) carried."""

    request_id: Any
    messages: list[dict[str, Any]] = field(default_factory=list)
    asked: list[dict[str, Any]] = field(default_factory=list)
    """The server-to-client requests (handshake) or input requests (2026) answered."""
    sse: bool = False
    status: int = 0
    rounds: int = 1

    @property
    def final(self) -> dict[str, Any] | None:
        for message in reversed(self.messages):
            if "method" not in message and ("result" in message or "error" in message):
                return message
        return None

    def result(self) -> dict[str, Any]:
        final = self.final
        assert final is not None and "result" in final, f"no result: {self.messages}"
        return final["result"]

    def text(self) -> str:
        result = self.result()
        assert not result.get("isError"), f"the tool failed: {result}"
        return "\n".join(c.get("text", "") for c in result.get("content", []))

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [m.get("params") or {} for m in self.messages
                if m.get("method") == method and "id" not in m]

    def logs(self) -> list[tuple[str, Any]]:
        return [(p.get("level"), p.get("data"))
                for p in self.notifications("notifications/message")]

    def asked_methods(self) -> list[str]:
        return [q.get("method", "") for q in self.asked]


class HandshakeSide:
    """A client of a handshake revision: a session; questions come on the call's stream."""

    def __init__(self, url: str, era: str) -> None:
        self.client = RawClient(url, version=era)
        self.era = era
        self.init: Reply | None = None
        self.asked: list[dict[str, Any]] = []
        """Every server-to-client request answered (on a call's stream or the GET stream)."""

    @property
    def capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {"sampling": {}, "roots": {"listChanged": True}}
        if self.era >= "2025-06-18":
            caps["elicitation"] = {}
        return caps

    async def open(self) -> None:
        self.init = await self.client.initialize(self.capabilities)
        assert self.init.status == 200 and self.client.session_id, self.init

    async def close(self) -> None:
        with trio.move_on_after(5), contextlib.suppress(Exception):
            if self.client.session_id:
                await self.client.delete()
        await self.client.aclose()

    def next_id(self) -> int:
        return next(self.client._ids)

    async def answer(self, question: dict[str, Any]) -> None:
        """POST the client's answer to a server-to-client request."""
        self.asked.append(question)
        reply = await self.client.post({"jsonrpc": "2.0", "id": question["id"], "result":
                                        answer_for(question["method"],
                                                   question.get("params") or {})})
        assert reply.status == 202, f"the answer was refused: {reply}"

    async def rpc(self, method: str, params: dict[str, Any] | None = None, *,
                  request_id: int | None = None, meta: dict[str, Any] | None = None,
                  on_message: OnMessage | None = None) -> Exchange:
        request_id = self.next_id() if request_id is None else request_id
        params = dict(params or {})
        if meta:
            params["_meta"] = {**params.get("_meta", {}), **meta}
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params:
            body["params"] = params
        exchange = Exchange(request_id)

        async def take(message: dict[str, Any]) -> bool:
            if "method" in message and "id" in message:
                exchange.asked.append(message)
                await self.answer(message)
            if on_message is not None and await on_message(message):
                return True
            return message.get("id") == request_id and "method" not in message

        wire = await read_stream(self.client.http, "POST", self.client.url,
                                 self.client.headers(), orjson.dumps(body), on_message=take)
        exchange.messages, exchange.sse, exchange.status = wire.messages, wire.sse, wire.status
        return exchange

    async def call(self, tool: str, arguments: dict[str, Any], **kwargs: Any) -> Exchange:
        return await self.rpc("tools/call", {"name": tool, "arguments": arguments}, **kwargs)

    def stream_request(self) -> tuple[str, list[tuple[str, str]], bytes]:
        """The session's standalone stream: GET."""
        headers = [("accept", "text/event-stream")] + [
            h for h in self.client.headers() if h[0] in ("mcp-session-id", "mcp-protocol-version")]
        return "GET", headers, b""


_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class StatelessSide:
    """A 2026-07-28 client: no session; questions come as input requests, answered in a
    retry."""

    def __init__(self, url: str) -> None:
        self.client = StatelessClient(url)
        self.era = VERSION

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        await self.client.http.aclose()

    def next_id(self) -> int:
        self.client.ids += 1
        return self.client.ids

    @staticmethod
    def headers(method: str, name: str | None) -> list[tuple[str, str]]:
        headers = [("accept", ACCEPT), ("content-type", "application/json"),
                   ("mcp-protocol-version", VERSION), ("mcp-method", method)]
        if name is not None:
            headers.append(("mcp-name", name))
        return headers

    def body(self, request_id: int, method: str, params: dict[str, Any],
             extra_meta: dict[str, Any] | None) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                             "params": {**params, "_meta": meta(**(extra_meta or {}))}})

    async def rpc(self, method: str, params: dict[str, Any] | None = None, *,
                  request_id: int | None = None, meta: dict[str, Any] | None = None,
                  on_message: OnMessage | None = None) -> Exchange:
        params = dict(params or {})
        named = _NAMED.get(method)
        name = params.get(named) if named else None
        exchange = Exchange(request_id)
        for round_ in range(1, 6):
            request_id = self.next_id() if request_id is None or round_ > 1 else request_id
            current = request_id

            async def take(message: dict[str, Any], current: int = current) -> bool:
                if on_message is not None and await on_message(message):
                    return True
                return message.get("id") == current and "method" not in message

            wire = await read_stream(self.client.http, "POST", self.client.url,
                                     self.headers(method, name),
                                     self.body(current, method, params, meta), on_message=take)
            exchange.request_id, exchange.rounds = current, round_
            exchange.messages += wire.messages
            exchange.sse |= wire.sse
            exchange.status = wire.status
            final = exchange.final
            result = final.get("result") if final is not None else None
            if not (isinstance(result, dict) and result.get("resultType") == "input_required"):
                return exchange
            responses = {}
            for key, question in result["inputRequests"].items():
                exchange.asked.append(question)
                responses[key] = answer_for(question["method"], question.get("params") or {})
            params = {**params, "inputResponses": responses}
            params.pop("requestState", None)
            if "requestState" in result:
                params["requestState"] = result["requestState"]
        raise AssertionError(f"still asked after 5 rounds: {exchange.messages[-1]}")

    async def call(self, tool: str, arguments: dict[str, Any], **kwargs: Any) -> Exchange:
        return await self.rpc("tools/call", {"name": tool, "arguments": arguments}, **kwargs)

    def listen_request(self, filters: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        return "POST", self.headers("subscriptions/listen", None), self.body(
            self.next_id(), "subscriptions/listen", {"notifications": filters}, None)


Side = HandshakeSide | StatelessSide


class Listener:
    """A stream read in the background: a session's GET stream, or a 2026-07-28 listen."""

    def __init__(self, answer: Answerer | None = None) -> None:
        self.answer = answer
        """Told each server-to-client request on the stream (to answer it)."""
        self.messages: list[dict[str, Any]] = []
        self.opened = trio.Event()
        self.ended = False
        self.ack: dict[str, Any] = {}
        self._changed = trio.Event()

    async def run(self, http: HttpClient, url: str,
                  request: tuple[str, list[tuple[str, str]], bytes]) -> None:
        async def take(message: dict[str, Any]) -> bool:
            self.messages.append(message)
            if self.answer is not None and "method" in message and "id" in message:
                await self.answer(message)
            self._changed.set()
            self._changed = trio.Event()
            return False

        method, headers, body = request
        try:
            wire = await read_stream(http, method, url, headers, body, on_message=take,
                                     opened=self.opened)
            if not wire.sse:  # an answer instead of a stream (a refusal)
                self.messages += wire.messages
        finally:
            self.ended = True
            self.opened.set()
            self._changed.set()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                       what: str) -> dict[str, Any]:
        try:
            with trio.fail_after(WAIT):
                while True:
                    for message in self.messages:
                        if predicate(message):
                            return message
                    if self.ended:
                        raise AssertionError(f"the stream ended without {what}: {self.messages}")
                    await self._changed.wait()
        except trio.TooSlowError:
            raise AssertionError(f"no {what} within {WAIT:g}s; the stream carried "
                                 f"{self.messages}") from None


@asynccontextmanager
async def listening(side: Side, filters: dict[str, Any] | None = None
                    ) -> AsyncIterator[Listener]:
    """The client's stream for what is not a call's: its GET stream (handshake), or a
    ``subscriptions/listen`` with ``filters`` whose acknowledgement came (2026-07-28)."""
    listener = Listener(side.answer if isinstance(side, HandshakeSide) else None)
    async with trio.open_nursery() as nursery:
        if isinstance(side, StatelessSide):
            http = HttpClient()
            nursery.start_soon(listener.run, http, side.client.url,
                               side.listen_request(filters or {}))
        else:
            http = side.client.http
            nursery.start_soon(listener.run, http, side.client.url, side.stream_request())
        with trio.fail_after(WAIT):
            await listener.opened.wait()
        if isinstance(side, StatelessSide):
            listener.ack = await listener.wait_for(
                lambda m: m.get("method") == "notifications/subscriptions/acknowledged",
                "acknowledgement")
        yield listener
        nursery.cancel_scope.cancel()
    if isinstance(side, StatelessSide):
        await http.aclose()


# --- the cells -------------------------------------------------------------------------------

@dataclass
class Cell:
    stack: Stack
    kind: str
    era: str
    side: Side

    @property
    def family(self) -> str:
        return FAMILY[self.kind]

    @property
    def stateless(self) -> bool:
        return self.era == VERSION

    def tool(self, name: str) -> str:
        return f"{self.kind}_{name}"

    @property
    def serial(self) -> int:
        """A number of its own (URIs and names the cell creates)."""
        return KINDS.index(self.kind) * 10 + ERAS.index(self.era)


async def until(predicate: Callable[[], Awaitable[bool]], what: str) -> None:
    try:
        with trio.fail_after(WAIT):
            while not await predicate():
                await trio.sleep(0.05)
    except trio.TooSlowError:
        raise AssertionError(f"{what}: not within {WAIT:g}s") from None


def error_of(exchange: Exchange) -> str | None:
    """The JSON-RPC error (or tool error) the exchange ended with, as ``code: message``."""
    final = exchange.final
    if final is None:
        return None
    if "error" in final:
        return f"{final['error'].get('code')}: {final['error'].get('message')}"
    if final["result"].get("isError"):
        texts = [c.get("text", "") for c in final["result"].get("content", [])]
        return "tool error: " + " ".join(texts)
    return None


async def check_initialize(cell: Cell) -> str:
    """The handshake (its era negotiated) or ``server/discover``, with this backend's
    instructions among the merged ones (it was connected)."""
    if isinstance(cell.side, StatelessSide):
        discovered = await cell.side.rpc("server/discover")
        result = discovered.result()
        assert VERSION in result["supportedVersions"], result
        assert result["resultType"] == "complete", result
    else:
        assert cell.side.init is not None
        result = cell.side.init.result
        assert result["protocolVersion"] == cell.era, result
        assert result["capabilities"].get("tools") is not None, result
    instructions = result.get("instructions") or ""
    expected = {"sdk2": f"the {cell.kind} test backend", "sdk1": "the SDK 1.x test backend",
                "everything": ""}[cell.family]
    assert f"{cell.kind}: {expected}" in instructions, instructions[:2000]
    state = cell.stack.states.get(cell.kind)
    if cell.kind == "sdk2stateless" and state is not None:
        assert set(state.versions) == {VERSION}, set(state.versions)
    if cell.kind == "sdk2handshake" and state is not None:
        assert "2025-11-25" in state.versions, set(state.versions)
    return "ok"


async def check_tools(cell: Cell) -> str:
    listed = (await cell.side.rpc("tools/list")).result()
    names = {tool["name"] for tool in listed["tools"]}
    tool, args = ("get-sum", {"a": 2, "b": 3}) if cell.family == "everything" else (
        "add", {"a": 2, "b": 3})
    assert cell.tool(tool) in names, sorted(names)
    assert all(name.startswith(tuple(f"{k}_" for k in KINDS)) for name in names), sorted(names)
    called = await cell.side.call(cell.tool(tool), args)
    result = called.result()
    if cell.family == "sdk2":
        assert result.get("structuredContent") == {"total": 5, "backend": cell.kind}, result
    elif cell.family == "sdk1":
        assert result.get("structuredContent") == {"result": 5}, result
    else:
        assert called.text() == "The sum of 2 and 3 is 5.", result
    if cell.stateless:
        assert listed["resultType"] == result["resultType"] == "complete", (listed, result)
    return "ok"


def _progress_tool(cell: Cell, steps: int, duration: float) -> tuple[str, dict[str, Any]]:
    """A tool reporting ``steps`` progress steps (server-everything's over ``duration``)."""
    if cell.family == "everything":
        return cell.tool("trigger-long-running-operation"), {"duration": duration,
                                                             "steps": steps}
    return cell.tool("slow"), {"steps": steps}


async def check_progress(cell: Cell) -> str:
    """Progress notifications of the call, in order and before its result, on SSE."""
    token = f"progress-{cell.kind}-{cell.era}"
    tool, args = _progress_tool(cell, 3, 0.3)
    exchange = await cell.side.call(tool, args, meta={"progressToken": token})
    seen = [(p.get("progressToken"), p.get("progress"), p.get("total"))
            for p in exchange.notifications("notifications/progress")]
    assert seen == [(token, step, 3) for step in (1, 2, 3)], exchange.messages
    assert exchange.sse, "progress came without an event stream"
    assert exchange.messages[-1] is exchange.final, exchange.messages
    expected = ("Long running operation completed. Duration: 0.3 seconds, Steps: 3."
                if cell.family == "everything" else f"{cell.kind} finished 3 steps")
    assert exchange.text() == expected, exchange.result()
    return "ok"


async def _stats(cell: Cell) -> dict[str, int]:
    return json.loads((await cell.side.call(cell.tool("stats"), {})).text())


async def check_cancellation(cell: Cell) -> str:
    """A call abandoned by the client (handshake: ``notifications/cancelled``; 2026-07-28:
    its response stream closed): its stream ends with no answer, the backend learns it (the
    in-process SDK 2.x backends record it; the SDK 1.x ones and sdk2stdio count it, which their
    ``stats`` tool tells) and the gateway goes on."""
    kind, progressed = cell.kind, trio.Event()
    learned: Callable[[], Awaitable[bool]] | None = None
    call_meta: dict[str, Any] | None = None
    if kind in cell.stack.states:
        state = cell.stack.states[kind]
        state.sleepy_started, state.sleepy_cancelled = trio.Event(), trio.Event()
        tool, args = cell.tool("sleepy"), {"seconds": 30}

        async def started() -> bool:
            return state.sleepy_started.is_set()

        async def cancelled() -> bool:
            return state.sleepy_cancelled.is_set()

        learned = cancelled
    elif kind in ("sdk1stdio", "legacysse", "sdk2stdio"):  # their own count, by a tool
        before = await _stats(cell)
        tool, args = cell.tool("sleepy"), {"seconds": 30}

        async def started() -> bool:
            return (await _stats(cell))["sleepy_started"] > before["sleepy_started"]

        async def counted() -> bool:
            return (await _stats(cell))["sleepy_cancelled"] > before["sleepy_cancelled"]

        learned = counted
    else:  # its first progress says the call is at work in the backend's process
        tool, args = _progress_tool(cell, 20, 10.0)
        call_meta = {"progressToken": f"cancel-{kind}-{cell.era}"}

        async def started() -> bool:
            return progressed.is_set()

    async def on_message(message: dict[str, Any]) -> bool:
        if message.get("method") == "notifications/progress":
            progressed.set()
        return False

    outcome: dict[str, Exchange] = {}
    request_id = cell.side.next_id()
    async with trio.open_nursery() as nursery:
        if isinstance(cell.side, StatelessSide):
            caller = StatelessSide(cell.side.client.url)  # its connection goes to cancel
            scope = trio.CancelScope()

            async def run_stateless() -> None:
                with scope:
                    outcome["answered"] = await caller.call(
                        tool, args, request_id=request_id, meta=call_meta, on_message=on_message)

            nursery.start_soon(run_stateless)
            await until(started, "the backend never started the call")
            scope.cancel()
            await caller.close()
        else:
            side = cell.side

            async def run_handshake() -> None:
                outcome["answered"] = await side.call(tool, args, request_id=request_id,
                                                      meta=call_meta, on_message=on_message)

            nursery.start_soon(run_handshake)
            await until(started, "the backend never started the call")
            told = await side.client.notify("notifications/cancelled",
                                            {"requestId": request_id, "reason": "matrix"})
            assert told.status == 202, told
            with trio.fail_after(WAIT):
                while "answered" not in outcome:
                    await trio.sleep(0.02)
    if isinstance(cell.side, HandshakeSide):
        final = outcome["answered"].final
        assert final is None, f"a cancelled call was answered: {final}"
    else:
        assert "answered" not in outcome, outcome
    if learned is not None:
        await until(learned, "the backend never learnt of the cancellation")
    add = "get-sum" if cell.family == "everything" else "add"
    after = await cell.side.call(cell.tool(add), {"a": 1, "b": 1})
    assert error_of(after) is None, after.messages
    if learned is None:
        return ("ok (the call ended unanswered and the gateway serves on; whether "
                "server-everything stopped is not observable)")
    return "ok"


async def _set_level(cell: Cell, level: str) -> None:
    reply = await cell.side.rpc("logging/setLevel", {"level": level})
    assert reply.result() == {}, reply.messages


def _everything_uri(cell: Cell, n: int) -> str:
    return f"demo://resource/dynamic/text/{1000 + cell.serial * 10 + n}"


async def check_logging(cell: Cell) -> str:
    """Handshake: ``logging/setLevel`` then only messages at or above it. 2026-07-28: log
    messages only when the request's ``_meta`` asks for a level, at or above it."""
    if cell.family == "everything":
        return await _everything_logging(cell)
    expected = [("info", f"{cell.kind} log {step}") for step in (1, 2)]
    tool = cell.tool("slow")
    if isinstance(cell.side, StatelessSide):
        silent = await cell.side.call(tool, {"steps": 2})
        assert silent.logs() == [], silent.messages
        warning = await cell.side.call(tool, {"steps": 2}, meta={LOG_LEVEL: "warning"})
        assert warning.logs() == [], warning.messages
        info = await cell.side.call(tool, {"steps": 2}, meta={LOG_LEVEL: "info"})
        assert info.logs() == expected, info.messages
        return "ok"
    try:
        await _set_level(cell, "warning")
        quiet = await cell.side.call(tool, {"steps": 2})
        assert quiet.logs() == [], quiet.messages
        await _set_level(cell, "info")
        loud = await cell.side.call(tool, {"steps": 2})
        assert loud.logs() == expected, loud.messages
    finally:
        await _set_level(cell, "debug")
    return "ok"


async def _everything_logging(cell: Cell) -> str:
    """server-everything logs (info) when it takes a ``resources/subscribe``."""
    first, second = _everything_uri(cell, 1), _everything_uri(cell, 2)
    if isinstance(cell.side, StatelessSide):
        # No 2026-07-28 request of a client makes it log but a listen's subscription, and a
        # listen never asked for log messages: none may come on it.
        async with listening(cell.side, {"resourceSubscriptions": [first]}) as listener:
            honored = listener.ack["params"]["notifications"].get("resourceSubscriptions")
            assert honored == [first], listener.ack
            await trio.sleep(0.2)
            logs = [m for m in listener.messages if m.get("method") == "notifications/message"]
            assert logs == [], f"log messages a listen never asked for: {logs}"
        return ("ok (only a listen's subscription makes it log: no log line on a listen "
                "without a level)")
    try:
        await _set_level(cell, "warning")
        quiet = await cell.side.rpc("resources/subscribe", {"uri": first})
        assert quiet.result() == {} and quiet.logs() == [], quiet.messages
        await _set_level(cell, "info")
        loud = await cell.side.rpc("resources/subscribe", {"uri": second})
        assert loud.result() == {}, loud.messages
        assert [(level, str(data).strip()) for level, data in loud.logs()] == [
            ("info", f"Received Subscribe Resource request for URI: {second}")], loud.messages
    finally:
        for uri in (first, second):
            await cell.side.rpc("resources/unsubscribe", {"uri": uri})
        await _set_level(cell, "debug")
    return "ok"


async def check_resources(cell: Cell) -> str:
    if cell.family == "everything":
        wanted = [("demo://resource/static/document/architecture.md", "# Everything Server"),
                  ("demo://resource/dynamic/text/3", "Resource 3: This is a plaintext resource")]
    else:
        wanted = [(f"{cell.kind}://static", f"static content of {cell.kind}"),
                  (f"{cell.kind}://item/7", f"{cell.kind} item 7")]
    for uri, start in wanted:
        read = (await cell.side.rpc("resources/read", {"uri": uri})).result()
        contents = read["contents"]
        assert len(contents) == 1 and contents[0]["uri"] == uri, read
        assert contents[0]["text"].startswith(start), contents[0]["text"][:200]
        if cell.stateless:
            assert read["resultType"] == "complete" and "ttlMs" in read, read
    return "ok"


def _updated(uri: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: (m.get("method") == "notifications/resources/updated"
                      and (m.get("params") or {}).get("uri") == uri)


async def _trigger_update(cell: Cell, uri: str) -> Exchange:
    if cell.family == "everything":
        toggled = await cell.side.call(cell.tool("toggle-subscriber-updates"), {})
        if "Stopped" in toggled.text():  # a cell before left them on: on again
            toggled = await cell.side.call(cell.tool("toggle-subscriber-updates"), {})
        assert "Started" in toggled.text(), toggled.text()
        return toggled
    touched = await cell.side.call(cell.tool("touch"), {"uri": uri})
    assert touched.text() == f"touched {uri}", touched.messages
    return touched


async def _stop_updates(cell: Cell) -> None:
    if cell.family == "everything":
        toggled = await cell.side.call(cell.tool("toggle-subscriber-updates"), {})
        if "Started" in toggled.text():
            await cell.side.call(cell.tool("toggle-subscriber-updates"), {})


async def check_subscribe(cell: Cell) -> str:
    """Handshake: ``resources/subscribe``, and the backend's update reaches the client;
    2026-07-28: a ``subscriptions/listen`` for the URI, and the update comes on it."""
    uri = ("demo://resource/dynamic/text/2" if cell.family == "everything"
           else f"{cell.kind}://static")
    if cell.family == "sdk1":
        return await _subscribe_refused(cell, uri)
    if isinstance(cell.side, StatelessSide):
        async with listening(cell.side, {"resourceSubscriptions": [uri]}) as listener:
            acknowledged = listener.ack["params"]
            assert acknowledged["notifications"].get("resourceSubscriptions") == [uri], \
                acknowledged
            try:
                await _trigger_update(cell, uri)
                update = await listener.wait_for(_updated(uri), f"an update of {uri}")
            finally:
                await _stop_updates(cell)
            assert update["params"]["_meta"][SUBSCRIPTION_ID] == \
                acknowledged["_meta"][SUBSCRIPTION_ID], update
        return "ok"
    side = cell.side
    async with listening(side) as listener:
        subscribed = await side.rpc("resources/subscribe", {"uri": uri})
        assert subscribed.result() == {}, subscribed.messages
        try:
            trigger = await _trigger_update(cell, uri)
            on_call = [m for m in trigger.messages if _updated(uri)(m)]
            if not on_call:
                await listener.wait_for(_updated(uri), f"an update of {uri}")
        finally:
            await _stop_updates(cell)
        unsubscribed = await side.rpc("resources/unsubscribe", {"uri": uri})
        assert unsubscribed.result() == {}, unsubscribed.messages
    return "ok" if not on_call else "ok (the update came on the call's stream)"


async def _subscribe_refused(cell: Cell, uri: str) -> str:
    why = NOT_APPLICABLE[(cell.kind, "subscribe")]
    if isinstance(cell.side, StatelessSide):
        async with listening(cell.side, {"resourceSubscriptions": [uri]}) as listener:
            honored = listener.ack["params"]["notifications"]
        assert "resourceSubscriptions" not in honored, listener.ack
        return f"n/a ({why}): the listen is acknowledged without the URI"
    refused = await cell.side.rpc("resources/subscribe", {"uri": uri})
    final = refused.final
    assert final is not None and "error" in final, refused.messages
    return f"n/a ({why}): resources/subscribe -> {error_of(refused)}"


async def check_prompts(cell: Cell) -> str:
    if cell.family == "everything":
        name, arguments, expected = (cell.tool("args-prompt"), {"city": "Oslo"},
                                     "What's weather in Oslo?")
    else:
        name, arguments, expected = (cell.tool("greet"), {"person": "Bob"},
                                     f"Say hello to Bob from {cell.kind}")
    got = (await cell.side.rpc("prompts/get", {"name": name, "arguments": arguments})).result()
    assert got["messages"][0]["content"]["text"] == expected, got
    return "ok"


async def check_completion(cell: Cell) -> str:
    if cell.family == "everything":
        wanted = [({"type": "ref/prompt", "name": cell.tool("completable-prompt")},
                   {"name": "department", "value": "E"}, ["Engineering"])]
    else:
        wanted = [({"type": "ref/prompt", "name": cell.tool("greet")},
                   {"name": "person", "value": "al"}, ["alice", "albert"]),
                  ({"type": "ref/resource", "uri": f"{cell.kind}://item/{{item_id}}"},
                   {"name": "item_id", "value": "b"}, ["bob"])]
    for ref, argument, values in wanted:
        completed = await cell.side.rpc("completion/complete", {"ref": ref, "argument": argument})
        assert completed.result()["completion"]["values"] == values, completed.messages
    return "ok"


async def _question(cell: Cell, feature: str, method: str, tool: str,
                    arguments: dict[str, Any]) -> tuple[Exchange, str | None]:
    """A call during which the backend asks the client ``method``; for an era whose client
    cannot be asked, the documented error (returned as the cell's outcome)."""
    exchange = await cell.side.call(cell.tool(tool), arguments)
    why = EXPECTED_ERRORS.get((feature, cell.era))
    if why is None:
        return exchange, None
    asked = exchange.asked + (cell.side.asked if isinstance(cell.side, HandshakeSide) else [])
    assert method not in [q.get("method") for q in asked], asked
    error = error_of(exchange)
    assert error is not None and feature in error.lower(), exchange.messages
    return exchange, f"error ({why}): {error}"


async def check_elicitation(cell: Cell) -> str:
    question = f"favourite colour? ({cell.kind} {cell.era})"
    if cell.family == "everything":
        exchange, refused = await _question(cell, "elicitation", "elicitation/create",
                                            "trigger-elicitation-request", {})
        if refused is not None:
            return refused
        assert "- Name: Ada" in exchange.text(), exchange.result()
    else:
        exchange, refused = await _question(cell, "elicitation", "elicitation/create", "ask",
                                            {"question": question})
        if refused is not None:
            return refused
        assert exchange.text() == "accept:blue", exchange.result()
        asked = [q for q in exchange.asked if q.get("method") == "elicitation/create"]
        assert asked and asked[0]["params"]["message"] == question, exchange.asked
    assert "elicitation/create" in exchange.asked_methods(), exchange.asked
    return "ok"


async def check_sampling(cell: Cell) -> str:
    if cell.family == "everything":
        exchange, _ = await _question(cell, "sampling", "sampling/createMessage",
                                      "trigger-sampling-request",
                                      {"prompt": "what is vmcp?", "maxTokens": 20})
        head, _, body = exchange.text().partition("\n")
        assert head.startswith("LLM sampling result:"), exchange.text()
        assert json.loads(body)["content"] == SAMPLED["content"], body
        prompt = "Resource trigger-sampling-request context: what is vmcp?"
    else:
        prompt = f"6 times 7? ({cell.kind} {cell.era})"
        exchange, _ = await _question(cell, "sampling", "sampling/createMessage", "sample",
                                      {"prompt": prompt})
        suffix = " (model test-model)" if cell.family == "sdk2" else ""
        assert exchange.text() == f"{cell.kind} sampled: forty-two{suffix}", exchange.result()
    asked = [q for q in exchange.asked if q.get("method") == "sampling/createMessage"]
    assert asked, exchange.asked
    assert asked[0]["params"]["messages"][0]["content"]["text"] == prompt, asked
    return "ok"


async def check_roots(cell: Cell) -> str:
    """A backend asks ``roots/list`` during a call. A handshake client holds its GET stream
    open meanwhile, as SDK clients do: a backend may ask there (SDK servers ask roots on their
    standalone stream), and the client answers wherever it is asked."""
    tool = "get-roots-list" if cell.family == "everything" else "roots"
    async with listening(cell.side) as listener:
        exchange, _ = await _question(cell, "roots", "roots/list", tool, {})
    on_get = [m for m in listener.messages if m.get("method") == "roots/list"]
    if cell.family == "everything":
        assert "file:///work/project" in exchange.text(), exchange.result()
        if "roots/list" not in exchange.asked_methods() and not on_get:
            return "ok (server-everything answered from the roots it cached earlier)"
    else:
        assert exchange.text() == "file:///work/project", exchange.result()
        assert "roots/list" in exchange.asked_methods() or on_get, exchange.asked
    return "ok (roots/list came on the session's GET stream)" if on_get else "ok"


async def check_list_changed(cell: Cell) -> str:
    """The backend's list changes (SDK servers: ``grow`` adds a tool; server-everything:
    ``gzip-file-as-resource`` adds a resource) and the client hears it, then lists it."""
    if cell.family == "everything":
        name = f"matrix-{cell.era}.gz"
        method, filters = "notifications/resources/list_changed", {"resourcesListChanged": True}

        async def trigger() -> Exchange:
            return await cell.side.call(cell.tool("gzip-file-as-resource"), {
                "name": name, "data": "data:text/plain;base64,aGVsbG8=",
                "outputType": "resourceLink"})

        async def listed() -> bool:
            uris = {r["uri"] for r in
                    (await cell.side.rpc("resources/list")).result()["resources"]}
            return f"demo://resource/session/{name}" in uris
    else:
        method, filters = "notifications/tools/list_changed", {"toolsListChanged": True}
        # The SDK 1.x servers add a tool named per cell, so that each cell's is new.
        grown = f"grown{cell.serial}" if cell.family == "sdk1" else "grown"

        async def trigger() -> Exchange:
            args = {"name": grown} if cell.family == "sdk1" else {}
            return await cell.side.call(cell.tool("grow"), args)

        async def listed() -> bool:
            names = {t["name"] for t in (await cell.side.rpc("tools/list")).result()["tools"]}
            return cell.tool(grown) in names

    async with listening(cell.side, filters) as listener:
        if cell.stateless:
            assert listener.ack["params"]["notifications"] == filters, listener.ack
        triggered = await trigger()
        assert error_of(triggered) is None, triggered.messages
        on_call = [m for m in triggered.messages if m.get("method") == method]
        problems = []
        if on_call and cell.stateless:
            problems.append(f"{method} came on the tools/call's response stream, not on the "
                            "subscriptions/listen stream that asked for it")
        elif not on_call:
            await listener.wait_for(lambda m: m.get("method") == method, method)
    if not await listed():
        where = "the call's response stream" if on_call else "its own stream"
        problems.append(f"the client heard the change (on {where}), but the next list lacks "
                        "the new item (the gateway's catalog is stale)")
    assert not problems, "; ".join(problems)
    if cell.family != "everything":
        called = await cell.side.call(cell.tool(grown), {})
        assert called.text() == f"grown on {cell.kind}", called.messages
    return "ok" if not on_call else "ok (the change came on the call's stream)"


CHECKS: dict[str, Callable[[Cell], Awaitable[str]]] = {
    "initialize": check_initialize, "tools": check_tools, "progress": check_progress,
    "cancellation": check_cancellation, "logging": check_logging,
    "resources": check_resources, "subscribe": check_subscribe, "prompts": check_prompts,
    "completion": check_completion, "elicitation": check_elicitation,
    "sampling": check_sampling, "roots": check_roots, "list_changed": check_list_changed,
}
assert set(CHECKS) == set(FEATURES)


# --- the test and the report -----------------------------------------------------------------

RESULTS: dict[tuple[str, str, str], str] = {}


def _cells() -> Iterator[Any]:
    for kind, feature, era in itertools.product(KINDS, FEATURES, ERAS):
        suffix = ""
        if (kind, feature) in NOT_APPLICABLE:
            suffix = "-n/a"
        elif (feature, era) in EXPECTED_ERRORS:
            suffix = "-error"
        yield pytest.param(kind, feature, era, id=f"{kind}-{feature}-{era}{suffix}")


def _table() -> str:
    lines = ["| backend | feature | " + " | ".join(ERAS) + " |",
             "|---|---|" + "---|" * len(ERAS)]
    for kind, feature in itertools.product(KINDS, FEATURES):
        cells = [RESULTS.get((kind, feature, era), "not run").replace("|", "\\|")
                 for era in ERAS]
        lines.append(f"| {kind} | {feature} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def matrix_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the matrix once every cell ran (to the terminal only)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not RESULTS:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line("the bridging matrix:")
        reporter.write_line(_table())


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nurseries' groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@pytest.mark.parametrize(("kind", "feature", "era"), list(_cells()))
async def test_bridging_matrix(stack: Stack, kind: str, feature: str, era: str) -> None:
    side: Side = StatelessSide(stack.url) if era == VERSION else HandshakeSide(stack.url, era)
    mark = len(stack.tap.lines)
    try:
        with trio.fail_after(CELL_TIMEOUT):
            try:
                await side.open()
                outcome = await CHECKS[feature](Cell(stack, kind, era, side))
            finally:
                with trio.CancelScope(shield=True):
                    await side.close()
    except Exception as exc:
        cause = _leaf(exc)
        first = (str(cause).strip().splitlines() or [""])[0]
        RESULTS[(kind, feature, era)] = f"FAIL: {type(cause).__name__}: {first}"[:400]
        lines = [line for line in stack.tap.lines[mark:]
                 if " vmcp.access:" not in line and " stderr: " not in line]
        raise AssertionError(f"{kind} x {feature} x {era}: {type(cause).__name__}: {cause}"
                             "\n--- the gateway's log of this cell:\n"
                             + "\n".join(lines[-60:])) from exc
    RESULTS[(kind, feature, era)] = outcome
    if (kind, feature) in NOT_APPLICABLE:
        assert outcome.startswith("n/a"), outcome
    elif (feature, era) in EXPECTED_ERRORS:
        assert outcome.startswith("error"), outcome
