"""JSON-RPC 2.0 as MCP narrows it: what parses, what is refused, and with which code."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.protocol.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Notification,
    Request,
    Response,
    decode_body,
    encode,
    parse_message,
)


def test_the_four_kinds() -> None:
    assert parse_message({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == Request(1, "ping")
    assert parse_message({"jsonrpc": "2.0", "method": "notifications/initialized"}) == (
        Notification("notifications/initialized"))
    assert parse_message({"jsonrpc": "2.0", "id": "a", "result": {}}) == Response("a", {})
    assert parse_message({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "m"}}) == (
        ErrorResponse(2, ErrorObject(-1, "m")))
    # An error about a request whose id could not be read has a null id (JSON-RPC 2.0 s5).
    assert parse_message({"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "m"}}) \
        == ErrorResponse(None, ErrorObject(-1, "m"))


@pytest.mark.parametrize(("obj", "fragment", "echoed_id"), [
    ([], "JSON object", None),
    ({"id": 1, "method": "x"}, '"jsonrpc" must be "2.0"', 1),
    ({"jsonrpc": "2.0", "id": None, "method": "x"}, '"id" must be a string', None),
    ({"jsonrpc": "2.0", "id": True, "method": "x"}, '"id" must be a string', None),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "x"}, '"id" must be a string', None),
    ({"jsonrpc": "2.0", "id": "x" * 300, "method": "x"}, '"id" must be a string', None),
    ({"jsonrpc": "2.0", "id": 3, "method": ""}, '"method" must be a non-empty string', 3),
    ({"jsonrpc": "2.0", "id": 3, "method": "x", "params": [1]}, '"params" must be an object', 3),
    ({"jsonrpc": "2.0", "id": 3, "method": "x", "result": {}}, 'must not have "result"', 3),
    ({"jsonrpc": "2.0"}, 'needs "method"', None),
    ({"jsonrpc": "2.0", "id": 4}, "exactly one of", 4),
    ({"jsonrpc": "2.0", "id": 4, "result": {}, "error": {}}, "exactly one of", 4),
    ({"jsonrpc": "2.0", "id": 4, "result": 5}, '"result" must be an object', 4),
    ({"jsonrpc": "2.0", "id": None, "result": {}}, '"id" must be a string', None),
    ({"jsonrpc": "2.0", "id": 4, "error": {"code": "x", "message": "m"}}, 'integer "code"', 4),
])
def test_invalid_messages(obj: Any, fragment: str, echoed_id: object) -> None:
    with pytest.raises(JsonRpcError) as info:
        parse_message(obj)
    assert info.value.error.code == INVALID_REQUEST
    assert fragment in info.value.error.message
    assert info.value.id == echoed_id
    assert info.value.response().to_dict()["id"] == echoed_id


def test_bodies() -> None:
    with pytest.raises(JsonRpcError) as info:
        decode_body(b"{not json")
    assert info.value.error.code == PARSE_ERROR
    with pytest.raises(JsonRpcError) as info:
        decode_body(b"[]")
    assert info.value.error.code == INVALID_REQUEST
    messages, batch = decode_body(b'[{"jsonrpc":"2.0","method":"a"}, 7]')
    assert batch and isinstance(messages[0], Notification)
    assert isinstance(messages[1], JsonRpcError)
    messages, batch = decode_body(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    assert not batch and messages == [Request(1, "ping")]


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params",
                                                       "result", "error", "code", "message"]),
                                      inner, max_size=6), max_leaves=12))
def test_any_json_parses_or_gives_a_json_rpc_error(value: Any) -> None:
    try:
        message = parse_message(value)
    except JsonRpcError as exc:
        assert exc.error.code == INVALID_REQUEST
        return
    assert parse_message(orjson.loads(encode(message))) == message
