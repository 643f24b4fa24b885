"""The translation between the protocol's eras, message by message (no I/O)."""

from __future__ import annotations

from vmcp_trio.protocol.eras import (
    complete_result,
    meta_for_stateless,
    params_for_handshake,
    result_for_handshake,
)

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
        client_info={"name": "vmcp"}, log_level="warning")
    assert not stateless_caller and meta == {
        "progressToken": 3, "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "vmcp"},
        "io.modelcontextprotocol/logLevel": "warning"}
    meta, stateless_caller = meta_for_stateless(
        {"_meta": dict(ENVELOPE)}, capabilities={}, client_info={"name": "vmcp"},
        log_level="debug")
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
