"""The translation between the protocol's eras, message by message (no I/O)."""

from __future__ import annotations

from vmcp_trio.protocol.translation import (
    complete_result,
    meta_for_stateless,
    params_for_handshake,
    result_for_handshake,
)

CAPS = "io.modelcontextprotocol/clientCapabilities"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "c"},
            "io.modelcontextprotocol/logLevel": "info"}


def test_a_handshake_backend_gets_no_2026_envelope() -> None:
    """An SDK 2.x server refuses the envelope on a handshake connection."""
    params = {"name": "t", "arguments": {"a": 1}, "inputResponses": {}, "requestState": "s",
              "_meta": {**ENVELOPE, "progressToken": 7, "other": "kept"}}
    assert params_for_handshake(params) == {"name": "t", "arguments": {"a": 1},
                                            "_meta": {"progressToken": 7, "other": "kept"}}
    assert params_for_handshake({"name": "t", "_meta": dict(ENVELOPE)}) == {"name": "t"}
    plain = {"name": "t", "_meta": {"progressToken": 1}}
    assert params_for_handshake(plain) is plain  # nothing to remove: nothing copied
    assert params_for_handshake(None) is None


def test_the_meta_a_2026_backend_gets() -> None:
    meta, stateless_caller = meta_for_stateless(
        {"_meta": {"progressToken": 3}}, capabilities={"roots": {}},
        client_info={"name": "vmcp"}, log_level="warning", backend_capabilities={})
    assert not stateless_caller and meta == {
        "progressToken": 3, "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp"},
        "io.modelcontextprotocol/logLevel": "warning"}
    meta, stateless_caller = meta_for_stateless(
        {"_meta": dict(ENVELOPE)}, capabilities={}, client_info={"name": "vmcp"},
        log_level="debug", backend_capabilities={})
    assert stateless_caller and meta["io.modelcontextprotocol/logLevel"] == "info"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {"sampling": {}}


def test_results_across_the_eras() -> None:
    listed = complete_result("tools/list", {"tools": []}, {"name": "vmcp"})
    assert listed == {"tools": [], "resultType": "complete", "ttlMs": 0,
                      "cacheScope": "private",
                      "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "vmcp"}}}
    called = complete_result("tools/call", {"content": []}, {"name": "vmcp"})
    assert "ttlMs" not in called and called["resultType"] == "complete"
    assert result_for_handshake(listed) == {"tools": [], "_meta": listed["_meta"]}


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}, "com.example/other": {"x": 1}},
         "sampling": {}}


def test_a_tasks_declaration_reaches_only_a_backend_that_declares_the_extension() -> None:
    """SEP-2663: a backend that does not know the extension never hears a client declared it
    (the client's other extensions pass unchanged)."""
    supporting = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    for params, capabilities in (({"_meta": {**ENVELOPE, CAPS: TASKS}}, {}),
                                 ({}, TASKS)):
        meta, _ = meta_for_stateless(params, capabilities=capabilities, client_info={},
                                     log_level=None, backend_capabilities={"tools": {}})
        assert meta[CAPS] == {"extensions": {"com.example/other": {"x": 1}}, "sampling": {}}
        meta, _ = meta_for_stateless(params, capabilities=capabilities, client_info={},
                                     log_level=None, backend_capabilities=supporting)
        assert meta[CAPS] == TASKS
    only_tasks = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    meta, _ = meta_for_stateless({}, capabilities=only_tasks, client_info={}, log_level=None,
                                 backend_capabilities={})
    assert meta[CAPS] == {}


def test_a_create_task_result_reaches_a_handshake_client_whole() -> None:
    created = {"resultType": "task", "taskId": "t1", "status": "working", "ttlMs": 60000,
               "createdAt": "2026-11-24T00:00:00Z", "lastUpdatedAt": "2026-11-24T00:00:00Z"}
    assert result_for_handshake(created) is created
    assert result_for_handshake({"resultType": "complete", "content": []}) == {"content": []}


def test_a_skills_result_keeps_its_cache_fields_for_a_handshake_client() -> None:
    """The Skills extension defines ``ttlMs`` and ``cacheScope`` on every protocol revision:
    only ``resultType`` goes; other lists lose all three."""
    listed = {"resultType": "complete", "skills": [], "ttlMs": 5000, "cacheScope": "public"}
    assert result_for_handshake(listed, "skills/list") == {
        "skills": [], "ttlMs": 5000, "cacheScope": "public"}
    assert result_for_handshake({**listed, "tools": []}, "tools/list") == {
        "skills": [], "tools": []}
