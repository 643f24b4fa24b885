"""The audit log, field by field: ToolHive's event shape for MCP operations and our authentication
events, the eventTypes filters, request and response data (off by default, cut at maxDataSize),
and the writer: JSON lines in order to a 0600 file or stdout, a full queue that drops and counts
without blocking, what is queued written when the writer is cancelled."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from vmcp_trio.runtime.audit import (
    AUTH_EVENT_TYPES,
    AuditLog,
    AuditLogError,
    AuditSettings,
    Caller,
    auth_event,
    mcp_event,
    mcp_event_type,
)

ON = AuditSettings(enabled=True)
ADA = Caller(subject="u-1", user="Ada", issuer="https://idp.example", client_id="cli-1",
             client_name="claude", client_version="1.2")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def tool_call(settings: AuditSettings = ON, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"params": {"name": "github_search", "arguments": {"q": "trio"}},
                            "rpc_id": 7, "caller": ADA, "address": "10.0.0.5",
                            "user_agent": "claude/1.2", "request_id": "req-1",
                            "session_id": "sess-1", "backend": "github", "duration": 0.0127,
                            "result": {"content": [{"type": "text", "text": "ok"}]}}
    event = mcp_event(settings, "tools/call", **{**args, **kw})
    assert event is not None
    return event


# -- event shapes ------------------------------------------------------------------------------


def test_tool_call_success_has_toolhive_shape() -> None:
    event = tool_call()
    assert list(event) == ["time", "level", "msg", "audit_id", "type", "logged_at", "outcome",
                           "component", "source", "subjects", "target", "metadata"]
    assert TIMESTAMP.match(event["time"]) and event["logged_at"] == event["time"]
    assert event["level"] == "AUDIT" and event["msg"] == "audit_event"
    assert uuid.UUID(event["audit_id"]).version == 4
    assert event["type"] == "mcp_tool_call"
    assert event["outcome"] == "success"
    assert event["component"] == "toolhive-api"
    assert event["source"] == {"type": "network", "value": "10.0.0.5",
                               "extra": {"user_agent": "claude/1.2", "request_id": "req-1",
                                         "session_id": "sess-1"}}
    assert event["subjects"] == {"user": "Ada", "user_id": "u-1", "issuer": "https://idp.example",
                                 "client_id": "cli-1", "client_name": "claude",
                                 "client_version": "1.2"}
    assert event["target"] == {"endpoint": "/mcp", "method": "tools/call", "type": "tool",
                               "name": "github_search"}
    assert event["metadata"] == {"extra": {"transport": "http", "duration_ms": 12,
                                           "backend_name": "github", "jsonrpc_id": 7}}
    assert "data" not in event and "delegation" not in event
    assert orjson.loads(orjson.dumps(event)) == event
    assert tool_call(AuditSettings(enabled=True, component="vmcp-prod"))["component"] == "vmcp-prod"
    assert tool_call()["audit_id"] != event["audit_id"]


def test_minimal_event_is_anonymous_and_local() -> None:
    event = mcp_event(ON, "tools/list")
    assert event is not None
    assert event["subjects"] == {"user": "anonymous"}
    assert event["source"] == {"type": "local", "value": "", "extra": {}}
    assert event["target"] == {"endpoint": "/mcp", "method": "tools/list", "type": "endpoint"}
    assert event["metadata"] == {"extra": {"transport": "http"}}


@pytest.mark.parametrize(("method", "params", "event_type", "target_type", "name"), [
    ("initialize", {"clientInfo": {"name": "x"}}, "mcp_initialize", "endpoint", None),
    ("tools/call", {"name": "echo"}, "mcp_tool_call", "tool", "echo"),
    ("resources/read", {"uri": "file:///a"}, "mcp_resource_read", "resource", "file:///a"),
    ("prompts/get", {"name": "greet"}, "mcp_prompt_get", "prompt", "greet"),
    ("resources/list", None, "mcp_resources_list", "endpoint", None),
    ("prompts/list", None, "mcp_prompts_list", "endpoint", None),
    ("ping", None, "mcp_ping", "endpoint", None),
    ("logging/setLevel", {"level": "info"}, "mcp_logging", "endpoint", None),
    ("completion/complete", {}, "mcp_completion", "endpoint", None),
    ("notifications/message", {}, "mcp_notification", "endpoint", None),
    ("notifications/roots/list_changed", None, "mcp_roots_list_changed", "endpoint", None),
    ("tasks/get", {"taskId": "t"}, "mcp_request", "endpoint", None),
])
def test_method_names_the_event_type_and_target(method: str, params: dict[str, Any] | None,
                                                event_type: str, target_type: str,
                                                name: str | None) -> None:
    assert mcp_event_type(method) == event_type
    event = mcp_event(ON, method, params=params)
    assert event is not None and event["type"] == event_type
    assert event["target"]["type"] == target_type
    assert event["target"].get("name") == name


def test_jsonrpc_error_is_application_error_when_detected() -> None:
    message = "backend said no " * 40
    event = tool_call(result=None, error=(-32603, message))
    assert event["outcome"] == "application_error"
    extra = event["metadata"]["extra"]
    assert extra["jsonrpc_error_code"] == -32603
    assert extra["jsonrpc_error_message"] == message[:256]

    quiet = tool_call(AuditSettings(enabled=True, detect_application_errors=False), result=None,
                      error=(-32603, message))
    assert quiet["outcome"] == "success"
    assert "jsonrpc_error_code" not in quiet["metadata"]["extra"]
    assert "jsonrpc_error_message" not in quiet["metadata"]["extra"]


def test_tool_result_is_error_is_application_error_when_detected() -> None:
    failed = {"content": [{"type": "text", "text": "boom"}], "isError": True}
    event = tool_call(result=failed)
    assert event["outcome"] == "application_error"
    assert "jsonrpc_error_code" not in event["metadata"]["extra"]
    quiet = tool_call(AuditSettings(enabled=True, detect_application_errors=False),
                      result=failed)
    assert quiet["outcome"] == "success"
    assert tool_call(result={"content": [], "isError": False})["outcome"] == "success"


@pytest.mark.parametrize(("status", "outcome"), [
    (200, "success"), (202, "success"), (401, "denied"), (403, "denied"), (400, "failure"),
    (404, "failure"), (429, "failure"), (500, "error"), (502, "error"),
])
def test_http_status_gives_the_outcome(status: int, outcome: str) -> None:
    # A denial or failure is not turned into application_error by its JSON-RPC error.
    event = tool_call(status=status, result=None, error=(-32001, "forbidden"))
    assert event["outcome"] == (outcome if status >= 300 else "application_error")
    assert tool_call(status=status)["outcome"] == outcome


def test_denied_tool_call_event() -> None:
    event = tool_call(status=403, result=None, error=(-32001, "not allowed"), backend=None,
                      duration=0.001)
    assert event["type"] == "mcp_tool_call"
    assert event["outcome"] == "denied"
    assert event["target"]["name"] == "github_search"
    assert event["metadata"] == {"extra": {"transport": "http", "duration_ms": 1,
                                           "jsonrpc_id": 7}}


def test_auth_event_shapes() -> None:
    settings = AuditSettings(enabled=True, include_request_data=True, include_response_data=True)
    issued = auth_event(settings, "token_issued", "success",
                        caller=Caller(subject="u-1", client_id="cli-1"), address="10.0.0.9",
                        user_agent="curl/8", request_id="req-9", endpoint="/oauth/token",
                        grant_type="authorization_code")
    assert issued is not None
    assert list(issued) == ["time", "level", "msg", "audit_id", "type", "logged_at", "outcome",
                            "component", "source", "subjects", "target"]
    assert issued["type"] == "vmcp_auth_token_issued" and issued["outcome"] == "success"
    assert issued["source"] == {"type": "network", "value": "10.0.0.9",
                                "extra": {"user_agent": "curl/8", "request_id": "req-9"}}
    assert issued["subjects"] == {"user": "anonymous", "user_id": "u-1", "client_id": "cli-1"}
    assert issued["target"] == {"type": "token", "endpoint": "/oauth/token",
                                "method": "authorization_code"}

    refused = auth_event(settings, "denied", "denied", address="10.0.0.9", endpoint="/mcp",
                         reason="token expired " * 30)
    assert refused is not None and refused["type"] == "vmcp_auth_denied"
    assert refused["outcome"] == "denied"
    assert refused["target"] == {"type": "endpoint", "endpoint": "/mcp"}
    assert refused["metadata"] == {"extra": {"reason": ("token expired " * 30)[:256]}}

    login = auth_event(settings, "login", "failure", caller=Caller(subject="ada@corp"),
                       endpoint="/oauth/callback", provider="corp", reason="access_denied")
    assert login is not None and login["type"] == "vmcp_auth_login"
    assert login["target"] == {"type": "login", "endpoint": "/oauth/callback", "name": "corp"}
    assert "data" not in login  # never data: no token, code or secret
    assert set(AUTH_EVENT_TYPES.values()) == {
        "vmcp_auth_login", "vmcp_auth_token_issued", "vmcp_auth_token_refreshed",
        "vmcp_auth_token_revoked", "vmcp_auth_denied"}


def test_caller_from_claims() -> None:
    caller = Caller.from_claims({"sub": "u-1", "iss": "https://idp", "preferred_username": "ada",
                                 "email": "ada@x", "azp": "cli-1", "aud": "vmcp",
                                 "act": {"sub": "agent"}})
    assert caller == Caller(subject="u-1", user="ada", issuer="https://idp", client_id="cli-1",
                            act={"sub": "agent"})
    assert Caller.from_claims({"name": "Ada L", "preferred_username": "ada"}).user == "Ada L"
    assert Caller.from_claims({"email": "ada@x", "name": ""}).user == "ada@x"
    assert Caller.from_claims({"sub": 5}).subject is None


def test_delegation_chain() -> None:
    act = {"iss": "https://as", "sub": "agent-1", "secret_claim": "x",
           "act": {"sub": "agent-2", "act": {"sub": "agent-3"}}}
    event = tool_call(caller=Caller(subject="u-1", act=act))
    assert event["delegation"] == {"chain": [{"iss": "https://as", "sub": "agent-1"},
                                             {"sub": "agent-2"}, {"sub": "agent-3"}],
                                   "truncated": False, "omitted": 0, "malformed": False}
    assert "secret_claim" not in orjson.dumps(event).decode()

    capped = tool_call(AuditSettings(enabled=True, max_delegation_depth=1),
                       caller=Caller(act=act))
    assert capped["delegation"] == {"chain": [{"iss": "https://as", "sub": "agent-1"}],
                                    "truncated": True, "omitted": 2, "malformed": False}

    odd = tool_call(caller=Caller(act={"sub": 3, "act": "nope"}))
    assert odd["delegation"] == {"chain": [{}], "truncated": False, "omitted": 0,
                                 "malformed": True, "malformedReason": "sub_not_string"}
    nested = tool_call(caller=Caller(act={"sub": "a", "act": ["x"]}))
    assert nested["delegation"]["malformedReason"] == "nested_act_not_object"
    assert nested["delegation"]["chain"] == [{"sub": "a"}]
    flat = tool_call(caller=Caller(act="agent"))
    assert flat["delegation"] == {"chain": [], "truncated": False, "omitted": 0,
                                  "malformed": True, "malformedReason": "act_not_object"}


# -- filters -----------------------------------------------------------------------------------


def test_event_type_filters() -> None:
    assert not AuditSettings().wants("mcp_tool_call")  # disabled by default
    assert ON.wants("mcp_tool_call") and ON.wants("vmcp_auth_denied")
    only = AuditSettings(enabled=True, event_types=frozenset({"mcp_tool_call", "mcp_ping"}))
    assert only.wants("mcp_tool_call") and not only.wants("mcp_tools_list")
    both = AuditSettings(enabled=True, event_types=frozenset({"mcp_tool_call", "mcp_ping"}),
                         exclude_event_types=frozenset({"mcp_ping"}))
    assert both.wants("mcp_tool_call") and not both.wants("mcp_ping")  # exclusion wins
    minus = AuditSettings(enabled=True, exclude_event_types=frozenset({"mcp_ping"}))
    assert minus.wants("mcp_initialize") and not minus.wants("mcp_ping")

    assert mcp_event(only, "tools/list") is None  # nothing built
    assert mcp_event(AuditSettings(), "tools/call") is None
    assert auth_event(only, "login", "success") is None
    assert mcp_event(only, "tools/call") is not None


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="mcp_tool_calls"):
        AuditSettings(enabled=True, event_types=frozenset({"mcp_tool_calls"}))
    with pytest.raises(ValueError, match="unknown event types: nope"):
        AuditSettings(exclude_event_types=frozenset({"nope"}))
    with pytest.raises(ValueError, match="maxDataSize"):
        AuditSettings(max_data_size=-1)
    with pytest.raises(ValueError, match="maxDelegationDepth"):
        AuditSettings(max_delegation_depth=0)
    AuditSettings(event_types=frozenset({"sse_connection", "vmcp_workflow_started",
                                         "vmcp_auth_token_refreshed"}))


# -- request and response data -----------------------------------------------------------------


def test_no_data_unless_asked() -> None:
    event = tool_call(result={"content": [{"type": "text", "text": "secret-ish"}]})
    assert "data" not in event and "response_size_bytes" not in event["metadata"]["extra"]
    assert "trio" not in orjson.dumps(event).decode()  # the argument value


def test_request_data_holds_the_arguments() -> None:
    settings = AuditSettings(enabled=True, include_request_data=True)
    event = tool_call(settings)
    assert event["data"] == {"request": {"jsonrpc": "2.0", "method": "tools/call", "id": 7,
                                         "params": {"name": "github_search",
                                                    "arguments": {"q": "trio"}}}}
    assert "response_size_bytes" not in event["metadata"]["extra"]


def test_request_data_is_truncated_at_max_data_size() -> None:
    settings = AuditSettings(enabled=True, include_request_data=True, max_data_size=64)
    event = tool_call(settings, params={"name": "t", "arguments": {"text": "é" * 200}})
    request = event["data"]["request"]
    assert isinstance(request, str) and event["data"]["request_truncated"] is True
    assert len(request.encode()) <= 64
    assert request.startswith('{"jsonrpc":"2.0","method":"tools/call","id":7,"params":')

    whole = tool_call(AuditSettings(enabled=True, include_request_data=True, max_data_size=256))
    assert "request_truncated" not in whole["data"]
    empty = tool_call(AuditSettings(enabled=True, include_request_data=True, max_data_size=0))
    assert empty["data"] == {"request": "", "request_truncated": True}


def test_response_data() -> None:
    settings = AuditSettings(enabled=True, include_response_data=True, max_data_size=1024)
    event = tool_call(settings)
    response = {"jsonrpc": "2.0", "id": 7,
                "result": {"content": [{"type": "text", "text": "ok"}]}}
    assert event["data"] == {"response": response}
    assert event["metadata"]["extra"]["response_size_bytes"] == len(orjson.dumps(response))

    error = tool_call(settings, result=None, error=(-32602, "bad"))
    assert error["data"]["response"] == {"jsonrpc": "2.0", "id": 7,
                                         "error": {"code": -32602, "message": "bad"}}
    small = tool_call(AuditSettings(enabled=True, include_response_data=True, max_data_size=10))
    assert small["data"] == {"response": '{"jsonrpc"', "response_truncated": True}
    notification = mcp_event(settings, "notifications/message")
    assert notification is not None and "data" not in notification


def test_hostile_values_do_not_break_the_builder_or_the_log() -> None:
    settings = AuditSettings(enabled=True, include_request_data=True, max_data_size=4096)
    params = {"name": "t\ud800", "arguments": {"n": 2**80, "s": "\udfff"}}
    event = tool_call(settings, params=params)
    log = AuditLog(settings)
    log.record(event)
    assert log.dropped == 0
    written = json.loads(log._receive.receive_nowait())  # orjson refuses lone surrogates
    assert written["data"]["request"]["params"] == params


# -- the writer --------------------------------------------------------------------------------


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(5):
        while not condition():
            await trio.sleep(0.005)


async def test_file_log_is_json_lines_in_order_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(AuditSettings(enabled=True, log_file=str(path)))
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        assert path.exists() and os.stat(path).st_mode & 0o777 == 0o600
        for n in range(5):
            log.record(tool_call(rpc_id=n))
        log.record(mcp_event(log.settings, "tools/list"))
        await until(lambda: len(lines_of(path)) == 6)
        log.record(auth_event(log.settings, "token_revoked", "success"))
        await until(lambda: len(lines_of(path)) == 7)
        nursery.cancel_scope.cancel()
    events = lines_of(path)
    assert [e["metadata"]["extra"]["jsonrpc_id"] for e in events[:5]] == [0, 1, 2, 3, 4]
    assert [e["type"] for e in events[5:]] == ["mcp_tools_list", "vmcp_auth_token_revoked"]
    assert log.dropped == 0


async def test_file_log_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(b'{"old":1}\n')
    log = AuditLog(AuditSettings(enabled=True, log_file=str(path)))
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        log.record(tool_call())
        await until(lambda: len(lines_of(path)) == 2)
        nursery.cancel_scope.cancel()
    assert lines_of(path)[0] == {"old": 1}


async def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "audit.log"
    log = AuditLog(AuditSettings(enabled=True, log_file=str(path)))
    with pytest.raises(AuditLogError, match=r"its directory .*nowhere does not exist"):
        await log.run()


async def test_write_failure_is_a_retry_and_keeps_the_queue() -> None:
    log = AuditLog(AuditSettings(enabled=True, log_file="/dev/full"))
    log.record(tool_call())
    log.record(tool_call())
    with pytest.raises(AuditLogError, match="2 events lost: No space left on device"):
        await log.run()
    log.record(tool_call())
    assert len(log._queued()) == 1  # still queued for the restarted writer


async def test_stdout_log(capfd: pytest.CaptureFixture[str]) -> None:
    log = AuditLog(ON)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        log.record(tool_call())
        log.record(auth_event(ON, "login", "success", caller=ADA))
        nursery.cancel_scope.cancel()
    out = capfd.readouterr().out
    assert [orjson.loads(line)["type"] for line in out.splitlines()] == [
        "mcp_tool_call", "vmcp_auth_login"]


async def test_full_queue_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    drops: list[None] = []
    log = AuditLog(AuditSettings(enabled=True, log_file=str(path)), queue_size=8,
                   on_drop=lambda: drops.append(None))
    event = tool_call()
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        await trio.testing.wait_all_tasks_blocked()  # the writer waits for a line
        for _ in range(80):  # no checkpoint: the writer cannot run meanwhile
            log.record(event)
        assert log.dropped == 80 - 9 == len(drops)  # one handed to the writer, 8 queued
        await until(lambda: len(lines_of(path)) == 9)
        log.record(mcp_event(log.settings, "ping"))  # the writer survives
        await until(lambda: len(lines_of(path)) == 10)
        nursery.cancel_scope.cancel()
    assert lines_of(path)[-1]["type"] == "mcp_ping"
    assert log.dropped == 71


async def test_on_drop_errors_are_swallowed() -> None:
    def boom() -> None:
        raise RuntimeError("metrics down")

    log = AuditLog(ON, queue_size=1, on_drop=boom)
    log.record(tool_call())
    log.record(tool_call())
    log.record({"no": "type"})
    assert log.dropped == 2


@pytest.mark.parametrize("writer_waiting", [True, False])
async def test_cancellation_writes_what_is_queued(tmp_path: Path, writer_waiting: bool) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(AuditSettings(enabled=True, log_file=str(path)))
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        if writer_waiting:
            await trio.testing.wait_all_tasks_blocked()
        for n in range(50):
            log.record(tool_call(rpc_id=n))
        nursery.cancel_scope.cancel()  # before the writer got to run
    assert [e["metadata"]["extra"]["jsonrpc_id"] for e in lines_of(path)] == list(range(50))
    assert log.dropped == 0


async def test_disabled_log_is_a_no_op() -> None:
    log = AuditLog.disabled()
    log.record(tool_call())
    log.record(None)
    assert log.dropped == 0
    with trio.fail_after(1):
        await log.run()  # returns at once
    quiet = AuditLog(AuditSettings(enabled=True, event_types=frozenset({"mcp_ping"})))
    quiet.record(tool_call())  # built with other settings: still filtered
    assert quiet._queued() == []
