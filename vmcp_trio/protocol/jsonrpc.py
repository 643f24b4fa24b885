"""JSON-RPC 2.0 messages as MCP uses them: parsing, validation and encoding, with no I/O.

Rules kept here (JSON-RPC 2.0 and MCP's "Base Protocol"):

* A message is a JSON object with ``"jsonrpc": "2.0"``. A *request* has a ``method`` and an
  ``id``; a *notification* has a ``method`` and no ``id``; a *response* has an ``id`` and exactly
  one of ``result`` or ``error``.
* MCP narrows ids to strings or integers, never null, never booleans or fractions.
* ``params`` and ``result`` are objects when present (MCP never uses positional params).
* A body that is not JSON is ``-32700``; JSON that is not a valid message is ``-32600``, answered
  with the request's id when one can be read, else ``null``.
* A message nested deeper than :data:`MAX_DEPTH` levels is ``-32600`` too, naming where: orjson
  reads 1,024 levels but writes only 254, and a message the gateway accepted must be one it can
  send on (with room for the envelopes it adds, such as a batch or an ``InputRequiredResult``).
  The check costs nothing for a message with fewer containers than the limit (counted in C) and
  about as much as parsing for a large one.

Parsing returns frozen message objects; ``params``/``result`` stay plain dicts (the gateway mostly
forwards them). Encoding uses orjson: the body of every request on the hot path goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_DEPTH",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RESOURCE_NOT_FOUND",
    "TOO_BUSY",
    "ErrorObject",
    "ErrorResponse",
    "JsonRpcError",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "check_depth",
    "decode_body",
    "decode_message",
    "encode",
    "encode_error",
    "parse_message",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002
TOO_BUSY = -32000
"""JSON-RPC's first implementation-defined server error: refused for now, try again later."""

RequestId = str | int
_MAX_ID_LENGTH = 256
MAX_DEPTH = 128
"""The deepest nesting of objects and arrays accepted in a message (the envelope counts)."""


@dataclass(frozen=True, slots=True)
class ErrorObject:
    code: int
    message: str
    data: Any = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class JsonRpcError(Exception):
    """A message that cannot be accepted; ``id`` is the request's id when it could be read."""

    def __init__(self, code: int, message: str, id: RequestId | None = None,
                 data: Any = None) -> None:
        super().__init__(message)
        self.error = ErrorObject(code, message, data)
        self.id = id
        self.answer = False
        """The message was shaped as a response (no ``method``): a peer answering ``id``."""

    def response(self) -> ErrorResponse:
        return ErrorResponse(self.id, self.error)


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonrpc": "2.0", "id": self.id, "method": self.method}
        if self.params is not None:
            out["params"] = self.params
        return out


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonrpc": "2.0", "method": self.method}
        if self.params is not None:
            out["params"] = self.params
        return out


@dataclass(frozen=True, slots=True)
class Response:
    id: RequestId
    result: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "result": self.result}


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    id: RequestId | None
    error: ErrorObject

    def to_dict(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "error": self.error.to_dict()}


Message = Request | Notification | Response | ErrorResponse


def _id_of(obj: dict[str, Any]) -> RequestId | None:
    """The message's id if it is a valid MCP id, else None (for error replies)."""
    value = obj.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and len(value) <= _MAX_ID_LENGTH):
        return value
    return None


def parse_message(obj: Any) -> Message:
    """Validate one decoded JSON value as a JSON-RPC message (raises :class:`JsonRpcError`)."""
    if not isinstance(obj, dict):
        raise JsonRpcError(INVALID_REQUEST, "a JSON-RPC message must be a JSON object")
    msg_id = _id_of(obj)
    if obj.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'field "jsonrpc" must be "2.0"', msg_id)
    has_id = "id" in obj
    null_error = obj.get("id", 0) is None and "error" in obj and "method" not in obj
    if has_id and msg_id is None and not null_error:  # only an error may have a null id
        raise JsonRpcError(INVALID_REQUEST,
                           'field "id" must be a string (at most 256 characters) or an integer')
    method = obj.get("method")
    if method is not None:
        if not isinstance(method, str) or not method:
            raise JsonRpcError(INVALID_REQUEST, 'field "method" must be a non-empty string',
                               msg_id)
        params = obj.get("params")
        if params is not None and not isinstance(params, dict):
            raise JsonRpcError(INVALID_REQUEST, 'field "params" must be an object', msg_id)
        if "result" in obj or "error" in obj:
            raise JsonRpcError(INVALID_REQUEST,
                               'a message with "method" must not have "result" or "error"',
                               msg_id)
        if has_id:
            assert msg_id is not None
            return Request(msg_id, method, params)
        return Notification(method, params)
    if not has_id:
        raise JsonRpcError(INVALID_REQUEST,
                           'a JSON-RPC message needs "method" (request or notification) or '
                           '"id" with "result" or "error" (response)')
    if ("result" in obj) == ("error" in obj):
        raise JsonRpcError(INVALID_REQUEST, 'a response needs exactly one of "result" or "error"',
                           msg_id)
    if "result" in obj:
        assert msg_id is not None
        result = obj["result"]
        if not isinstance(result, dict):
            raise JsonRpcError(INVALID_REQUEST, 'field "result" must be an object', msg_id)
        return Response(msg_id, result)
    error = obj["error"]
    if (not isinstance(error, dict) or not isinstance(error.get("code"), int)
            or isinstance(error.get("code"), bool) or not isinstance(error.get("message"), str)):
        raise JsonRpcError(INVALID_REQUEST,
                           'field "error" must be an object with integer "code" and string '
                           '"message"', msg_id)
    return ErrorResponse(msg_id, ErrorObject(error["code"], error["message"], error.get("data")))


def _depth_exceeded(value: Any, limit: int) -> list[str | int] | None:
    """The path to a container nested deeper than ``limit`` (the value itself is level 1), or
    None. Iterative: the depth of the input cannot exhaust the stack."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            return list(path)
        pairs = node.items() if type(node) is dict else enumerate(node)
        for key, child in pairs:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1, (*path, key) if len(path) < 6 else path))
    return None


def _describe_path(path: list[str | int]) -> str:
    text = ""
    for part in path[:5]:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text + ("..." if len(path) > 5 else "")


def check_depth(value: Any, raw: bytes | str | None = None) -> None:
    """Raise :class:`JsonRpcError` (-32600, naming where and the limit) when ``value`` nests
    deeper than :data:`MAX_DEPTH`. ``raw``, the text it was parsed from, lets a message with
    fewer containers than the limit skip the walk."""
    if isinstance(raw, bytes) and raw.count(b"{") + raw.count(b"[") <= MAX_DEPTH:
        return
    if isinstance(raw, str) and raw.count("{") + raw.count("[") <= MAX_DEPTH:
        return
    if not isinstance(value, dict | list):
        return
    path = _depth_exceeded(value, MAX_DEPTH)
    if path is not None:
        where = f' at "{_describe_path(path)}"' if path else ""
        raise JsonRpcError(INVALID_REQUEST, f"the message is nested deeper than {MAX_DEPTH} "
                                            f"levels{where}",
                           _id_of(value) if isinstance(value, dict) else None)


def decode_message(data: bytes | str) -> Message:
    """One message from JSON text (a line of a stdio backend, an SSE event, a JSON body):
    raises :class:`JsonRpcError` (-32700 not JSON, -32600 not a message or too deep)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise JsonRpcError(PARSE_ERROR, "not valid JSON") from None
    try:
        check_depth(value, data)
        return parse_message(value)
    except JsonRpcError as exc:
        exc.answer = isinstance(value, dict) and "method" not in value
        raise


def decode_body(body: bytes, *, max_batch: int = 64) -> tuple[list[Message | JsonRpcError], bool]:
    """Parse an HTTP body: ``(messages, was_batch)``.

    Invalid members of a batch (too deep ones too) come back as :class:`JsonRpcError` in their
    place so that the valid ones can still be served. A body that is not JSON raises ``-32700``;
    an empty batch, a batch of more than ``max_batch`` messages, or a body that is neither
    object nor array raises ``-32600``.
    """
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise JsonRpcError(PARSE_ERROR, "the body is not valid JSON") from None
    if isinstance(value, list):
        if not value:
            raise JsonRpcError(INVALID_REQUEST, "an empty JSON array is not a valid batch")
        if len(value) > max_batch:
            raise JsonRpcError(INVALID_REQUEST, f"a batch may hold at most {max_batch} "
                                                f"messages; this one holds {len(value)}")
        shallow = body.count(b"{") + body.count(b"[") <= MAX_DEPTH
        out: list[Message | JsonRpcError] = []
        for item in value:
            try:
                if not shallow:
                    check_depth(item)
                out.append(parse_message(item))
            except JsonRpcError as exc:
                out.append(exc)
        return out, True
    check_depth(value, body)
    return [parse_message(value)], False


def encode(message: Message | dict[str, Any]) -> bytes:
    """One message as JSON bytes."""
    if isinstance(message, dict):
        return orjson.dumps(message)
    return orjson.dumps(message.to_dict())


def encode_error(code: int, message: str, request_id: RequestId | None = None) -> bytes:
    """An error response as JSON bytes (id null when the request's could not be read)."""
    return encode(ErrorResponse(request_id, ErrorObject(code, message)))
