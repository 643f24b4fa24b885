"""JSON-RPC 2.0 as MCP narrows it: what parses, what is refused, and with which code."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.protocol.jsonrpc import (
    INVALID_REQUEST,
    MAX_DEPTH,
    PARSE_ERROR,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Notification,
    Request,
    Response,
    decode_body,
    decode_message,
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


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_a_message_too_deep_to_send_on_is_refused_naming_where() -> None:
    """orjson reads 1,024 levels and writes 254: what is accepted must be writable."""
    deep = (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x", '
            b'"arguments": {"a": ' + b"[" * 300 + b"1" + b"]" * 300 + b"}}}")
    with pytest.raises(JsonRpcError) as caught:
        decode_body(deep)
    assert caught.value.error.code == INVALID_REQUEST and caught.value.id == 7
    assert str(MAX_DEPTH) in caught.value.error.message
    assert '"params.arguments.a[0][0]...' in caught.value.error.message
    fine = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "x", "arguments": {"a": _nested(MAX_DEPTH - 4)}}}
    [message], _ = decode_body(orjson.dumps(fine))
    assert isinstance(message, Request)
    orjson.dumps(message.to_dict())  # and it can be sent on


def test_a_deep_batch_member_is_refused_alone_and_batches_are_bounded() -> None:
    good = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    deep = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"x": _nested(200)}}
    messages, batch = decode_body(orjson.dumps([good, deep]))
    assert batch and isinstance(messages[0], Request)
    assert isinstance(messages[1], JsonRpcError) and messages[1].id == 2
    with pytest.raises(JsonRpcError, match="at most 3 messages; this one holds 4"):
        decode_body(orjson.dumps([good] * 4), max_batch=3)


def test_a_peer_s_malformed_answer_is_known_as_an_answer() -> None:
    """A backend's answer too deep (or with a wrong field) still names the call it answers."""
    with pytest.raises(JsonRpcError) as caught:
        decode_message(orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": {"x": _nested(200)}}))
    assert caught.value.answer and caught.value.id == 5
    with pytest.raises(JsonRpcError) as caught:
        decode_message(b'{"jsonrpc": "2.0", "id": 6, "method": "x", "params": [1]}')
    assert not caught.value.answer
