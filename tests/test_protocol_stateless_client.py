"""The rules a handshake caller of a 2026-07-28 server keeps (``protocol/stateless_client.py``):
discovery, the handshake answer, input rounds, what a client can be asked, the listen filter."""

from __future__ import annotations

from typing import Any

from vmcp_trio.protocol.stateless_client import (
    MAX_INPUT_REQUESTS,
    MAX_ROUNDS,
    InputRounds,
    ToolSchemas,
    acknowledged,
    discovered,
    initialize_result,
    listen_filter,
    listened,
    unaskable,
)

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {"listChanged": True}},
            "instructions": "be kind",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "remote", "version": "2"}}}


def test_only_a_server_that_names_2026_07_28_is_discovered() -> None:
    server = discovered(DISCOVER)
    assert server is not None and server.server_info["name"] == "remote"
    assert discovered({**DISCOVER, "supportedVersions": ["2025-11-25"]}) is None
    assert discovered({"capabilities": {}}) is None
    assert discovered("no") is None


def test_the_handshake_answer_is_at_the_clients_revision_or_the_latest_handshake_one() -> None:
    server = discovered(DISCOVER)
    assert server is not None
    answer = initialize_result(server, "2025-06-18")
    assert answer == {"protocolVersion": "2025-06-18", "capabilities": DISCOVER["capabilities"],
                      "serverInfo": {"name": "remote", "version": "2"},
                      "instructions": "be kind"}
    assert initialize_result(server, "2026-07-28")["protocolVersion"] == "2025-11-25"
    assert initialize_result(server, "1999-01-01")["protocolVersion"] == "2025-11-25"


def test_a_retry_carries_the_answers_and_the_request_state_as_it_came() -> None:
    state = "opaque \u00e9t\u00e0t \\u00e9 ==/+"  # any string, escapes and all, unchanged
    rounds = InputRounds({"name": "ask", "_meta": {"progressToken": 7}})
    result: dict[str, Any] = {"resultType": "input_required", "requestState": state,
                              "inputRequests": {"q": {"method": "elicitation/create"}}}
    assert rounds.wanted(result)
    assert rounds.requests(result) == {"q": {"method": "elicitation/create"}}
    params = rounds.answered(result, {"q": {"action": "accept"}})
    assert params["requestState"] is state
    assert params == {"name": "ask", "_meta": {"progressToken": 7},
                      "inputResponses": {"q": {"action": "accept"}}, "requestState": state}
    # The next round without state sends none of the last one's.
    again = rounds.answered({"inputRequests": {}}, {"r": {}})
    assert "requestState" not in again and again["inputResponses"] == {"r": {}}


def test_request_state_alone_is_a_retry_with_no_question() -> None:
    rounds = InputRounds({})
    assert rounds.requests({"resultType": "input_required", "requestState": "s"}) == {}


def test_rounds_are_at_most_ten_and_malformed_input_requests_are_refused() -> None:
    rounds = InputRounds({})
    asking = {"resultType": "input_required", "inputRequests": {"q": {"method": "roots/list"}}}
    for _ in range(MAX_ROUNDS):
        assert isinstance(rounds.requests(asking), dict)
    assert rounds.requests(asking) == \
        f"asked for client input more than {MAX_ROUNDS} times in one call"
    for broken in ({}, {"inputRequests": []}, {"inputRequests": {"q": {"params": {}}}},
                   {"inputRequests": {str(n): {"method": "roots/list"}
                                      for n in range(MAX_INPUT_REQUESTS + 1)}}):
        assert InputRounds({}).requests(broken) == \
            "sent an InputRequiredResult without valid inputRequests"


def test_what_a_handshake_client_can_be_asked() -> None:
    declared = {"sampling": {}, "elicitation": {}}
    assert unaskable({"method": "sampling/createMessage"}, declared) is None
    assert unaskable({"method": "roots/list"}, declared) == \
        "the client did not declare the roots capability"
    assert unaskable({"method": "tasks/get"}, declared) == \
        "tasks/get has no handshake-era request to put to the client"
    url_mode = {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}}
    assert unaskable(url_mode, declared) == "the client did not declare URL-mode elicitation"
    assert unaskable(url_mode, {"elicitation": {"url": {}}}) is None


def test_tool_schemas_are_learnt_from_tool_lists_only() -> None:
    schemas = ToolSchemas()
    schema = {"type": "object", "properties": {"region": {"x-mcp-header": "Region"}}}
    schemas.learn("prompts/list", {"tools": [{"name": "t", "inputSchema": {}}]})
    schemas.learn("tools/list", {"tools": [{"name": "t", "inputSchema": schema}, "junk"]})
    assert schemas.of("tools/call", {"name": "t"}) == schema
    assert schemas.of("prompts/get", {"name": "t"}) is None


def test_the_listen_filter_and_what_it_delivers() -> None:
    capabilities = {"tools": {"listChanged": True}, "prompts": {}, "resources": {
        "listChanged": False, "subscribe": True}}
    assert listen_filter(capabilities, ()) == {"toolsListChanged": True}
    assert listen_filter({}, {"b://x", "a://y"}, {"t1"}) == {
        "resourceSubscriptions": ["a://y", "b://x"], "taskIds": ["t1"]}
    assert acknowledged({"notifications": {"resourceSubscriptions": ["a://y", 3]}},
                        "resourceSubscriptions") == {"a://y"}
    assert acknowledged({}, "resourceSubscriptions") == frozenset()
    subscription = "io.modelcontextprotocol/subscriptionId"
    assert listened({"uri": "a://y", "_meta": {subscription: "s1"}}) == {"uri": "a://y"}
    assert listened({"_meta": {subscription: "s1", "k": 1}}) == {"_meta": {"k": 1}}
    assert listened({"_meta": {subscription: "s1"}}) is None
