"""The 2026-07-28 request rules: _meta, version header, Mcp-Method and Mcp-Name."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.protocol.jsonrpc import Request
from vmcp_trio.protocol.stateless_requests import (
    HEADER_MISMATCH,
    UNSUPPORTED_VERSION,
    StatelessContext,
    check_param_headers,
    check_request,
    decode_header_value,
    encode_header_value,
    param_headers,
)
from vmcp_trio.protocol.streamable import Rejection

SUPPORTED = ("2026-07-28",)
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}


def headers(method: str, name: str | None = None, version: str = "2026-07-28") -> dict[str, str]:
    out = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        out["mcp-name"] = name
    return out


def request(method: str, **params: Any) -> Request:
    return Request(7, method, {"_meta": dict(META), **params})


def test_a_valid_request_gives_its_context() -> None:
    meta = {**META, "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/logLevel": "info"}
    context = check_request(Request(1, "tools/call", {"_meta": meta, "name": "echo"}),
                            headers("tools/call", "echo"), SUPPORTED)
    assert context == StatelessContext("2026-07-28", {"sampling": {}},
                                    {"name": "c", "version": "1"}, "info")


@pytest.mark.parametrize("params", [
    {}, {"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}},
    {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
    {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": []}},
])
def test_missing_meta_is_invalid_params(params: dict[str, Any]) -> None:
    result = check_request(Request(1, "server/discover", params), headers("server/discover"),
                           SUPPORTED)
    assert isinstance(result, Rejection)
    assert (result.status, result.error.code) == (400, -32602)


def test_unsupported_version_names_what_is_supported() -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    result = check_request(Request(1, "server/discover", {"_meta": meta}),
                           headers("server/discover", version="v999.0.0"), SUPPORTED)
    assert isinstance(result, Rejection)
    assert (result.status, result.error.code) == (400, UNSUPPORTED_VERSION)
    assert result.error.data == {"supported": ["2026-07-28"], "requested": "v999.0.0"}


@pytest.mark.parametrize(("req", "hdrs", "fragment"), [
    (Request(1, "server/discover", {"_meta": {**META, "io.modelcontextprotocol/protocolVersion":
                                               "v999.0.0"}}),
     headers("server/discover"), "does not match params._meta"),
    (request("tools/list"), headers("prompts/list"), "Mcp-Method header"),
    (request("tools/list"), {"mcp-protocol-version": "2026-07-28"}, "Mcp-Method header is"),
    (request("tools/list"), headers("TOOLS/LIST"), "Mcp-Method header"),
    (request("tools/call", name="echo"), headers("tools/call", "wrong_tool_name"), "Mcp-Name"),
    (request("tools/call", name="echo"), headers("tools/call"), "Mcp-Name header is required"),
    (request("resources/read", uri="a://b"), headers("resources/read", "a://c"), "params.uri"),
    (request("tools/list"), {"mcp-method": "tools/list"}, "MCP-Protocol-Version header"),
])
def test_header_mismatches(req: Request, hdrs: dict[str, str], fragment: str) -> None:
    result = check_request(req, hdrs, SUPPORTED)
    assert isinstance(result, Rejection)
    assert (result.status, result.error.code) == (400, HEADER_MISMATCH)
    assert fragment in result.error.message


def test_name_header_is_trimmed_and_may_be_base64() -> None:
    assert isinstance(check_request(request("tools/call", name="echo"),
                                    headers("tools/call", "  echo  "), SUPPORTED), StatelessContext)
    odd = "héllo wörld "
    encoded = encode_header_value(odd)
    assert encoded.startswith("=?base64?") and encoded.endswith("?=")
    assert isinstance(check_request(request("prompts/get", name=odd),
                                    headers("prompts/get", encoded), SUPPORTED), StatelessContext)
    assert decode_header_value("=?base64?***?=") is None


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_header_values_round_trip(value: str) -> None:
    encoded = encode_header_value(value)
    assert encoded.isascii() and encoded == encoded.strip()
    assert decode_header_value(encoded) == value


SCHEMA = {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"},
    "count": {"type": "integer", "x-mcp-header": "Count"},
    "plain": {"type": "string"}}}


@pytest.mark.parametrize(("arguments", "hdrs", "ok"), [
    ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8=?="}, True),
    ({"region": "Hello"}, {"mcp-param-region": "Hello"}, True),
    ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8?="}, False),  # bad padding
    ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVs!!!bG8=?="}, False),
    ({"region": "Hello"}, {}, False),                                           # missing
    ({"region": "Hello"}, {"mcp-param-region": "Bye"}, False),                  # different
    ({"region": "Hello"}, {"mcp-param-region": "H\u00e9llo"}, False),           # not ASCII
    ({"count": 3}, {"mcp-param-count": "3"}, True),
    ({"plain": "x"}, {}, True),                                                 # not mirrored
    ({}, {}, True),                                                             # absent
])
def test_param_headers(arguments: dict[str, Any], hdrs: dict[str, str], ok: bool) -> None:
    result = check_param_headers(SCHEMA, arguments, hdrs)
    if ok:
        assert result is None
    else:
        assert result is not None and (result.status, result.error.code) == (400, -32020)


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"region": "Hello", "count": 3}, [("Mcp-Param-Region", "Hello"), ("Mcp-Param-Count", "3")]),
    ({"region": "H\u00e9llo"}, [("Mcp-Param-Region", "=?base64?SMOpbGxv?=")]),
    ({"region": " padded "}, [("Mcp-Param-Region", "=?base64?IHBhZGRlZCA=?=")]),
    ({"plain": "x"}, []),
])
def test_the_headers_a_call_sends_pass_the_check(arguments: dict[str, Any],
                                                 expected: list[tuple[str, str]]) -> None:
    """What vmcp sends a 2026-07-28 backend is what a server requires: plain when it can be,
    the base64 form otherwise (non-ASCII, surrounding whitespace)."""
    sent = param_headers(SCHEMA, arguments)
    assert sent == expected
    assert check_param_headers(SCHEMA, arguments, {k.lower(): v for k, v in sent}) is None
