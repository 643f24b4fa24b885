"""Fuzz the JSON-RPC body decoder (vmcp_trio/protocol/jsonrpc.py): any bytes decode to messages
and JsonRpcError entries or raise JsonRpcError, nothing else, with -32700 exactly when the body is
not JSON and -32600 otherwise; a batch is never empty nor longer than max_batch; nothing nested
deeper than MAX_DEPTH is accepted, and only that is refused for its depth; a body that is one
message decodes the same through decode_body and decode_message; and every message decoded
(request, notification, response, error response, and the error answering a refused entry),
encoded again, decodes to itself, alone and, in the revision that allows batches, in a batch.

The input: a byte of flags (bits 0-1: the protocol revision the body is sent in; bits 2-4:
max_batch, 1 to 7, or 64 when 0), then the body."""

from __future__ import annotations

from typing import Any

import orjson

from vmcp_trio.protocol.jsonrpc import (
    INVALID_REQUEST,
    MAX_DEPTH,
    PARSE_ERROR,
    ErrorResponse,
    JsonRpcError,
    Message,
    Request,
    Response,
    decode_body,
    decode_message,
    encode,
    encode_error,
    parse_message,
)
from vmcp_trio.protocol.revisions import REVISIONS, Revision

_NO_VALUE = object()


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def depth(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays (a scalar: 0), counted up to MAX_DEPTH + 1
    (iteratively: orjson reads 1,024 levels, more than Python's recursion limit)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if not isinstance(node, dict | list):
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            stack.extend((child, level + 1)
                         for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def check_round_trip(message: Message) -> None:
    """Encoded again, the message decodes to itself: alone, through both decoders."""
    encoded = encode(message)
    check(decode_message(encoded) == message, f"{encoded!r} decoded to another message")
    check(decode_body(encoded) == ([message], False), f"{encoded!r} as a body")
    check(depth(message.to_dict()) <= MAX_DEPTH, f"{encoded[:200]!r} is too deep")


def check_refusal(exc: JsonRpcError, item: Any) -> None:
    """A refused entry: -32600, refused for its depth only when too deep, and its answer (with
    the request's id when it could be read) encodes and decodes to itself."""
    check(exc.error.code == INVALID_REQUEST, f"entry refused with {exc.error!r}")
    too_deep = depth(item) > MAX_DEPTH
    check(("nested deeper" in exc.error.message) == too_deep,
          f"{exc.error.message!r} for an entry of depth {depth(item)}")
    id_in = item.get("id", _NO_VALUE) if isinstance(item, dict) else _NO_VALUE
    check(exc.id is None or exc.id == id_in, f"answered with id {exc.id!r}, not {id_in!r}")
    answer = exc.response()
    check(decode_message(encode(answer)) == answer, f"the answer {answer!r}")
    check(decode_message(encode_error(exc.error.code, exc.error.message, exc.id)) == answer,
          f"encode_error of {answer!r}")


def check_revision(revision: Revision, messages: list[Message], batch: bool) -> None:
    """What a client of ``revision`` sends for these messages: one batch in the revision that
    allows batches (2025-03-26), else each message alone (checked by check_round_trip)."""
    check(revision.allows_batches == (revision.version == "2025-03-26"), f"{revision} batches")
    if not (batch and revision.allows_batches and messages):
        return
    body = orjson.dumps([m.to_dict() for m in messages])
    again, was_batch = decode_body(body, max_batch=len(messages))
    check(was_batch and again == messages, f"the batch {body[:200]!r} decoded to {again!r}")


def check_single(body: bytes, decoded: Message | JsonRpcError) -> None:
    """A body that is not an array decodes the same way as one message (and its text too)."""
    try:
        alone: Message | JsonRpcError = decode_message(body)
    except JsonRpcError as exc:
        alone = exc
    for got in (alone, *_as_text(body)):
        if isinstance(decoded, JsonRpcError):
            check(isinstance(got, JsonRpcError) and got.error.code == decoded.error.code
                  and got.id == decoded.id, f"decode_message: {got!r}, decode_body: {decoded!r}")
        else:
            check(got == decoded, f"decode_message: {got!r}, decode_body: {decoded!r}")


def _as_text(body: bytes) -> list[Message | JsonRpcError]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return []
    try:
        return [decode_message(text)]
    except JsonRpcError as exc:
        return [exc]


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    revision = REVISIONS[data[0] & 3]
    max_batch = (data[0] >> 2) & 7 or 64
    body = data[1:]
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = _NO_VALUE
    try:
        messages, batch = decode_body(body, max_batch=max_batch)
    except JsonRpcError as exc:
        if value is _NO_VALUE:
            check(exc.error.code == PARSE_ERROR, f"not JSON, refused with {exc.error!r}")
            return
        check(exc.error.code == INVALID_REQUEST, f"JSON refused with {exc.error!r}")
        if isinstance(value, list):
            check(not value or len(value) > max_batch, f"a batch of {len(value)} refused")
        else:
            check_refusal(exc, value)
            check_single(body, exc)
        return
    check(value is not _NO_VALUE, "a body that is not JSON was accepted")
    items = value if isinstance(value, list) else [value]
    check(batch == isinstance(value, list) and len(messages) == len(items)
          and 0 < len(messages) <= (max_batch if batch else 1),
          f"{len(messages)} entries (batch: {batch}) of max_batch {max_batch}")
    if not batch:
        check_single(body, messages[0])
    accepted: list[Message] = []
    for item, entry in zip(items, messages, strict=True):
        if isinstance(entry, JsonRpcError):
            check_refusal(entry, item)
            continue
        check(parse_message(item) == entry, f"{item!r} parses to another message alone")
        if isinstance(entry, Request | Response | ErrorResponse):
            check(entry.id == item["id"], f"the id of {entry!r}")
        check_round_trip(entry)
        accepted.append(entry)
    check_revision(revision, accepted, batch)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
