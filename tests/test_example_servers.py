"""The example stdio MCP servers (examples/servers) speak the protocol, driven by raw JSON-RPC.

Each test starts a server as a subprocess and plays the client, line by line. Every read has a
deadline, so a broken server fails a test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SERVERS = Path(__file__).resolve().parent.parent / "examples" / "servers"
TIMEOUT = 10.0
VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
Message = dict[str, Any]


class Peer:
    """A server subprocess, seen from the client's side of the pipe."""

    def __init__(self, script: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVERS / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._inbox: queue.Queue[Message | None] = queue.Queue()
        self.stderr: list[bytes] = []
        self.notifications: list[Message] = []
        self._ids = iter(range(1, 1_000_000))
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.stderr.append(b"NOT JSON ON STDOUT: " + line)
                break  # recv() fails the test, quoting the line
            self._inbox.put(message)
        self._inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    # -- writing -------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def start(self, method: str, params: Message | None = None) -> int:
        """Send a request; returns its id."""
        request_id = next(self._ids)
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return request_id

    def notify(self, method: str, params: Message | None = None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def respond(self, request: Message, result: Message) -> None:
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    # -- reading -------------------------------------------------------------------------

    def recv(self, timeout: float = TIMEOUT) -> Message:
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no message from the server in {timeout} s; stderr: {self.stderr}")
        if message is None:
            pytest.fail(f"the server closed stdout; stderr: {self.stderr}")
        return message

    def until(self, matches: Callable[[Message], bool], timeout: float = TIMEOUT) -> Message:
        """The next message that matches; notifications passed by are kept in order."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.01, deadline - time.monotonic()))
            if matches(message):
                return message
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            else:
                pytest.fail(f"unexpected message: {message}")

    def response(self, request_id: int) -> Message:
        return self.until(lambda m: m.get("id") == request_id and "method" not in m)

    def server_request(self, method: str) -> Message:
        return self.until(lambda m: m.get("method") == method and "id" in m)

    def quiet_for(self, seconds: float) -> list[Message]:
        """Everything the server sends in the next ``seconds``."""
        deadline = time.monotonic() + seconds
        seen: list[Message] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self._inbox.get(timeout=left)
            except queue.Empty:
                break
            if message is None:
                break
            seen.append(message)
        return seen

    def request(self, method: str, params: Message | None = None) -> Message:
        return self.response(self.start(method, params))

    def result(self, method: str, params: Message | None = None) -> Any:
        response = self.request(method, params)
        assert "result" in response, response
        return response["result"]

    def error(self, method: str, params: Message | None = None) -> Message:
        response = self.request(method, params)
        assert "error" in response, response
        error: Message = response["error"]
        return error

    def call(self, tool: str, **arguments: Any) -> Message:
        result: Message = self.result("tools/call", {"name": tool, "arguments": arguments})
        return result

    def text(self, tool: str, **arguments: Any) -> str:
        result = self.call(tool, **arguments)
        assert not result.get("isError"), result
        text: str = result["content"][0]["text"]
        return text

    def initialize(
        self, version: str = "2025-11-25", capabilities: Message | None = None
    ) -> Message:
        result: Message = self.result(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "pytest", "version": "0"},
            },
        )
        self.notify("notifications/initialized")
        return result

    def take(self, method: str) -> list[Message]:
        """The notifications received so far with this method (removed from the backlog)."""
        taken = [n for n in self.notifications if n["method"] == method]
        self.notifications = [n for n in self.notifications if n["method"] != method]
        return taken

    def close(self) -> int:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("the server did not exit when its stdin closed")


@pytest.fixture
def clock() -> Iterator[Peer]:
    peer = Peer("clock_server.py")
    try:
        yield peer
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait()


@pytest.fixture
def notes() -> Iterator[Peer]:
    peer = Peer("notes_server.py")
    try:
        yield peer
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait()


CLIENT_FEATURES = {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}}


# -- lifecycle -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [*VERSIONS, "2024-11-05", "2099-01-01"])
def test_initialize_negotiates_the_version(clock: Peer, version: str) -> None:
    result = clock.initialize(version)
    assert result["protocolVersion"] == (version if version in VERSIONS else "2025-11-25")
    assert result["serverInfo"]["name"] == "clock"
    assert result["capabilities"] == {"tools": {}, "logging": {}}
    assert clock.result("ping") == {}
    assert clock.close() == 0


def test_notes_capabilities(notes: Peer) -> None:
    result = notes.initialize("2025-06-18")
    assert result["protocolVersion"] == "2025-06-18"
    assert result["serverInfo"]["name"] == "notes"
    assert result["capabilities"] == {
        "tools": {"listChanged": False},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {},
        "completions": {},
        "logging": {},
    }


def test_initialize_without_a_version_is_invalid_params(clock: Peer) -> None:
    assert clock.error("initialize", {"capabilities": {}})["code"] == -32602


def test_stdin_closing_lets_a_running_request_finish(clock: Peer) -> None:
    clock.initialize()
    request_id = clock.start("tools/call", {"name": "countdown", "arguments": {"steps": 2}})
    assert clock.proc.stdin is not None
    clock.proc.stdin.close()
    response = clock.response(request_id)
    assert response["result"]["content"][0]["text"] == "done after 2 steps"
    assert clock.proc.wait(timeout=TIMEOUT) == 0


# -- errors ----------------------------------------------------------------------------------


def test_protocol_errors(clock: Peer) -> None:
    clock.initialize()
    unknown = clock.error("no/such/method")
    assert unknown["code"] == -32601
    assert "no/such/method" in unknown["message"]

    clock.send_raw(b"{not json\n")
    parse = clock.recv()
    assert parse["id"] is None
    assert parse["error"]["code"] == -32700

    clock.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": [1, 2]})
    assert clock.response(99)["error"]["code"] == -32602
    clock.send({"id": 100, "method": "ping"})  # no "jsonrpc": "2.0"
    assert clock.recv()["error"]["code"] == -32600
    clock.send({"jsonrpc": "2.0", "id": [1], "method": "ping"})
    assert clock.recv() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid Request: id must be a string or integer"},
    }

    assert clock.error("tools/call", {"name": "no_such_tool"})["code"] == -32602
    assert clock.error("tools/call", {"arguments": {}})["code"] == -32602
    assert clock.error("logging/setLevel", {"level": "loud"})["code"] == -32602
    assert clock.error("tools/list", {"cursor": "nope"})["code"] == -32602
    assert clock.result("ping") == {}  # still serving after all that


def test_a_line_over_4_mib_is_refused_without_reading_it_whole(clock: Peer) -> None:
    clock.initialize()
    big = b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":"' + b"x" * (5 << 20) + b'"}}\n'
    writer = threading.Thread(target=clock.send_raw, args=(big,), daemon=True)
    writer.start()
    refused = clock.recv()
    assert refused["id"] is None
    assert refused["error"]["code"] == -32700
    writer.join(TIMEOUT)
    assert clock.result("ping") == {}


def test_batches_only_in_2025_03_26(clock: Peer) -> None:
    clock.initialize("2025-03-26")
    clock.send(
        [
            {"jsonrpc": "2.0", "id": "a", "method": "ping"},
            {"jsonrpc": "2.0", "id": "b", "method": "nope"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
    )
    answers = clock.recv()
    assert isinstance(answers, list)
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id.keys() == {"a", "b"}
    assert by_id["a"]["result"] == {}
    assert by_id["b"]["error"]["code"] == -32601


def test_batches_refused_from_2025_06_18(clock: Peer) -> None:
    clock.initialize("2025-06-18")
    clock.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}])
    assert clock.recv()["error"]["code"] == -32600


# -- clock tools -----------------------------------------------------------------------------


def test_clock_tools_list(clock: Peer) -> None:
    clock.initialize()
    tools = {tool["name"]: tool for tool in clock.result("tools/list")["tools"]}
    assert set(tools) == {
        "now",
        "echo",
        "add",
        "countdown",
        "ask_user",
        "summarize",
        "list_roots",
        "fail",
        "crash",
    }
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["description"]
    assert tools["add"]["outputSchema"]["properties"] == {"sum": {"type": "number"}}
    assert tools["countdown"]["inputSchema"]["required"] == ["steps"]


def test_plain_clock_tools(clock: Peer) -> None:
    clock.initialize()
    utc = datetime.datetime.fromisoformat(clock.text("now"))
    assert utc.utcoffset() == datetime.timedelta(0)
    assert abs(utc - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=1)
    shifted = datetime.datetime.fromisoformat(clock.text("now", timezone=-5.5))
    assert shifted.utcoffset() == datetime.timedelta(hours=-5, minutes=-30)

    assert clock.text("echo", message="hello, ünïcode") == "hello, ünïcode"

    added = clock.call("add", a=2, b=3)
    assert added["content"] == [{"type": "text", "text": "5"}]
    assert added["structuredContent"] == {"sum": 5}
    assert clock.call("add", a=0.5, b=1)["structuredContent"] == {"sum": 1.5}

    failed = clock.call("fail")
    assert failed["isError"] is True
    assert failed["content"] == [{"type": "text", "text": "this tool always fails"}]


def test_argument_errors_are_tool_errors(clock: Peer) -> None:
    clock.initialize()
    for tool, arguments in [
        ("echo", {}),
        ("add", {"a": 1, "b": "2"}),
        ("add", {"a": True, "b": 2}),
        ("countdown", {"steps": 0}),
        ("countdown", {"steps": 51}),
        ("now", {"timezone": "UTC"}),
        ("echo", {"message": "x", "extra": 1}),
    ]:
        result = clock.result("tools/call", {"name": tool, "arguments": arguments})
        assert result["isError"] is True, (tool, arguments)
        assert result["content"][0]["text"].startswith(f"invalid arguments for {tool}")


def test_structured_content_is_left_out_for_2025_03_26(clock: Peer) -> None:
    clock.initialize("2025-03-26")
    tools = {tool["name"]: tool for tool in clock.result("tools/list")["tools"]}
    assert "outputSchema" not in tools["add"]
    assert clock.call("add", a=1, b=1) == {"content": [{"type": "text", "text": "2"}]}


def test_countdown_reports_progress_and_logs(clock: Peer) -> None:
    clock.initialize()
    response = clock.request(
        "tools/call",
        {
            "name": "countdown",
            "arguments": {"steps": 3, "delay_ms": 10},
            "_meta": {"progressToken": "tok-1"},
        },
    )
    assert response["result"]["content"][0]["text"] == "done after 3 steps"
    progress = [n["params"] for n in clock.take("notifications/progress")]
    assert progress == [
        {"progressToken": "tok-1", "progress": step, "total": 3, "message": f"step {step} of 3"}
        for step in (1, 2, 3)
    ]
    logs = [n["params"] for n in clock.take("notifications/message")]
    assert [log["level"] for log in logs] == ["info"] * 3
    assert logs[0]["logger"] == "clock"
    assert logs[0]["data"] == "countdown: step 1 of 3"
    assert clock.notifications == []


def test_countdown_without_a_progress_token_sends_no_progress(clock: Peer) -> None:
    clock.initialize()
    assert clock.text("countdown", steps=2, delay_ms=0) == "done after 2 steps"
    assert clock.take("notifications/progress") == []
    assert len(clock.take("notifications/message")) == 2


def test_log_level(clock: Peer) -> None:
    clock.initialize()
    assert clock.result("logging/setLevel", {"level": "warning"}) == {}
    clock.text("countdown", steps=2, delay_ms=0)
    assert clock.take("notifications/message") == []
    assert clock.result("logging/setLevel", {"level": "info"}) == {}
    clock.text("countdown", steps=2, delay_ms=0)
    assert len(clock.take("notifications/message")) == 2


def test_cancelling_countdown(clock: Peer) -> None:
    clock.initialize()
    request_id = clock.start(
        "tools/call",
        {
            "name": "countdown",
            "arguments": {"steps": 5, "delay_ms": 100},
            "_meta": {"progressToken": 5},
        },
    )
    first = clock.until(lambda m: m.get("method") == "notifications/progress")
    assert first["params"]["progressToken"] == 5
    clock.notify("notifications/cancelled", {"requestId": request_id, "reason": "test"})
    assert clock.result("ping") == {}
    # Uncancelled, the countdown would send 4 more progress notifications and its response.
    later = clock.quiet_for(0.8)
    assert all(m.get("id") != request_id for m in later), later
    assert len([m for m in later if m.get("method") == "notifications/progress"]) <= 1
    # Cancelling an unknown or finished request is ignored.
    clock.notify("notifications/cancelled", {"requestId": 12345})
    assert clock.result("ping") == {}


# -- server-to-client requests ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"action": "accept", "content": {"answer": "blue"}}, "blue"),
        ({"action": "decline"}, "declined"),
        ({"action": "cancel"}, "cancelled"),
    ],
)
def test_ask_user_elicits(clock: Peer, answer: Message, expected: str) -> None:
    clock.initialize(capabilities=CLIENT_FEATURES)
    call_id = clock.start(
        "tools/call", {"name": "ask_user", "arguments": {"question": "Favourite colour?"}}
    )
    asked = clock.server_request("elicitation/create")
    assert asked["params"] == {
        "message": "Favourite colour?",
        "requestedSchema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    }
    clock.respond(asked, answer)
    result = clock.response(call_id)["result"]
    assert result == {"content": [{"type": "text", "text": expected}]}


def test_summarize_samples_while_other_requests_are_served(clock: Peer) -> None:
    clock.initialize(capabilities=CLIENT_FEATURES)
    call_id = clock.start("tools/call", {"name": "summarize", "arguments": {"text": "long text"}})
    sampling = clock.server_request("sampling/createMessage")
    assert sampling["params"] == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "long text"}}],
        "maxTokens": 100,
    }
    assert clock.result("ping") == {}  # the reader is not blocked by the waiting tool
    assert clock.text("echo", message="meanwhile") == "meanwhile"
    clock.respond(
        sampling,
        {
            "role": "assistant",
            "content": {"type": "text", "text": "short"},
            "model": "test-model",
            "stopReason": "endTurn",
        },
    )
    assert clock.response(call_id)["result"]["content"][0]["text"] == "short"


def test_a_client_error_to_sampling_is_a_tool_error(clock: Peer) -> None:
    clock.initialize(capabilities=CLIENT_FEATURES)
    call_id = clock.start("tools/call", {"name": "summarize", "arguments": {"text": "x"}})
    sampling = clock.server_request("sampling/createMessage")
    clock.send(
        {
            "jsonrpc": "2.0",
            "id": sampling["id"],
            "error": {"code": -1, "message": "User rejected sampling request"},
        }
    )
    result = clock.response(call_id)["result"]
    assert result["isError"] is True
    assert "User rejected sampling request" in result["content"][0]["text"]


def test_list_roots(clock: Peer) -> None:
    clock.initialize(capabilities=CLIENT_FEATURES)
    call_id = clock.start("tools/call", {"name": "list_roots", "arguments": {}})
    asked = clock.server_request("roots/list")
    clock.respond(
        asked,
        {"roots": [{"uri": "file:///work", "name": "work"}, {"uri": "file:///tmp"}]},
    )
    text = clock.response(call_id)["result"]["content"][0]["text"]
    assert text == "file:///work\nfile:///tmp"


def test_server_requests_ids_count_on_their_own(clock: Peer) -> None:
    clock.initialize(capabilities=CLIENT_FEATURES)
    ids = []
    for _ in range(2):
        call_id = clock.start("tools/call", {"name": "list_roots", "arguments": {}})
        asked = clock.server_request("roots/list")
        ids.append(asked["id"])
        clock.respond(asked, {"roots": []})
        assert clock.response(call_id)["result"]["content"][0]["text"] == "no roots"
    assert ids[1] != ids[0]


@pytest.mark.parametrize(
    ("tool", "capability", "arguments"),
    [
        ("ask_user", "elicitation", {"question": "?"}),
        ("summarize", "sampling", {"text": "x"}),
        ("list_roots", "roots", {}),
    ],
)
def test_client_features_need_the_capability(
    clock: Peer, tool: str, capability: str, arguments: Message
) -> None:
    clock.initialize(capabilities={})
    result = clock.call(tool, **arguments)
    assert result["isError"] is True
    assert capability in result["content"][0]["text"]
    assert clock.quiet_for(0.1) == []  # and no request was sent to the client


def test_crash_exits_with_status_3(clock: Peer) -> None:
    clock.initialize()
    clock.start("tools/call", {"name": "crash", "arguments": {}})
    assert clock.proc.wait(timeout=TIMEOUT) == 3
    assert clock.quiet_for(0.2) == []


# -- notes -----------------------------------------------------------------------------------


def test_notes_tools(notes: Peer) -> None:
    notes.initialize()
    tools = {tool["name"]: tool for tool in notes.result("tools/list")["tools"]}
    assert set(tools) == {"add_note", "list_notes", "delete_note"}
    assert tools["add_note"]["inputSchema"]["required"] == ["title", "text"]
    assert tools["delete_note"]["inputSchema"]["required"] == ["id"]

    assert notes.text("list_notes") == "no notes"
    assert notes.text("add_note", title="Groceries", text="milk, eggs") == "added note 1"
    assert notes.text("add_note", title="Ideas", text="a gateway") == "added note 2"
    assert notes.text("list_notes") == "1: Groceries\n2: Ideas"
    assert notes.text("delete_note", id="1") == "deleted note 1"
    assert notes.text("list_notes") == "2: Ideas"

    missing = notes.call("delete_note", id="1")
    assert missing["isError"] is True
    assert notes.call("add_note", title="", text="x")["isError"] is True
    logs = [n["params"]["data"] for n in notes.take("notifications/message")]
    assert logs == ["added note 1", "added note 2", "deleted note 1"]


def test_notes_resources(notes: Peer) -> None:
    notes.initialize()
    notes.text("add_note", title="Groceries", text="milk, eggs")
    resources = notes.result("resources/list")["resources"]
    assert [r["uri"] for r in resources] == ["notes://index", "notes://note/1"]
    assert resources[1]["title"] == "Groceries"
    templates = notes.result("resources/templates/list")["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["notes://note/{id}"]

    note = notes.result("resources/read", {"uri": "notes://note/1"})["contents"]
    assert note == [
        {"uri": "notes://note/1", "mimeType": "text/plain", "text": "Groceries\n\nmilk, eggs"}
    ]
    index = notes.result("resources/read", {"uri": "notes://index"})["contents"][0]["text"]
    assert "Groceries" in index
    assert "milk, eggs" in index

    assert notes.error("resources/read", {"uri": "notes://note/9"})["code"] == -32002
    assert notes.error("resources/read", {"uri": "file:///etc/passwd"})["code"] == -32002
    assert notes.error("resources/read", {})["code"] == -32602


def test_notes_subscriptions(notes: Peer) -> None:
    notes.initialize()
    notes.text("add_note", title="One", text="1")
    notes.notifications.clear()
    assert notes.result("resources/subscribe", {"uri": "notes://index"}) == {}
    assert notes.result("resources/subscribe", {"uri": "notes://note/1"}) == {}
    assert notes.error("resources/subscribe", {"uri": "notes://note/7"})["code"] == -32002

    notes.text("add_note", title="Two", text="2")
    assert len(notes.take("notifications/resources/list_changed")) == 1
    updated = [n["params"] for n in notes.take("notifications/resources/updated")]
    assert updated == [{"uri": "notes://index"}]

    notes.text("delete_note", id="1")
    assert len(notes.take("notifications/resources/list_changed")) == 1
    updated = [n["params"] for n in notes.take("notifications/resources/updated")]
    assert updated == [{"uri": "notes://index"}, {"uri": "notes://note/1"}]

    assert notes.result("resources/unsubscribe", {"uri": "notes://index"}) == {}
    notes.text("add_note", title="Three", text="3")
    assert len(notes.take("notifications/resources/list_changed")) == 1
    assert notes.take("notifications/resources/updated") == []


def test_notes_prompt(notes: Peer) -> None:
    notes.initialize()
    notes.text("add_note", title="Groceries", text="milk, eggs")
    prompts = notes.result("prompts/list")["prompts"]
    assert [p["name"] for p in prompts] == ["summarize_notes"]
    assert prompts[0]["arguments"] == [
        {
            "name": "style",
            "description": "How to summarize: brief, detailed, bullet.",
            "required": False,
        }
    ]

    prompt = notes.result(
        "prompts/get", {"name": "summarize_notes", "arguments": {"style": "bullet"}}
    )
    [message] = prompt["messages"]
    assert message["role"] == "user"
    assert message["content"]["type"] == "text"
    assert "bulleted list" in message["content"]["text"]
    assert "milk, eggs" in message["content"]["text"]
    plain = notes.result("prompts/get", {"name": "summarize_notes"})
    assert plain["messages"][0]["content"]["text"].startswith("Summarize the following notes.")

    bad_style = {"name": "summarize_notes", "arguments": {"style": "haiku"}}
    assert notes.error("prompts/get", bad_style)["code"] == -32602
    assert notes.error("prompts/get", {"name": "nope"})["code"] == -32602


@pytest.mark.parametrize(
    ("prefix", "values"),
    [
        ("", ["brief", "detailed", "bullet"]),
        ("b", ["brief", "bullet"]),
        ("de", ["detailed"]),
        ("x", []),
    ],
)
def test_notes_completion(notes: Peer, prefix: str, values: list[str]) -> None:
    notes.initialize()
    completion = notes.result(
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "summarize_notes"},
            "argument": {"name": "style", "value": prefix},
        },
    )["completion"]
    assert completion == {"values": values, "total": len(values), "hasMore": False}


def test_notes_completion_of_note_ids_and_errors(notes: Peer) -> None:
    notes.initialize()
    for n in range(12):
        notes.text("add_note", title=f"n{n}", text="")
    completion = notes.result(
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "notes://note/{id}"},
            "argument": {"name": "id", "value": "1"},
        },
    )["completion"]
    assert completion["values"] == ["1", "10", "11", "12"]
    unknown = {
        "ref": {"type": "ref/prompt", "name": "nope"},
        "argument": {"name": "x", "value": ""},
    }
    assert notes.error("completion/complete", unknown)["code"] == -32602
    assert notes.error("completion/complete", {})["code"] == -32602
