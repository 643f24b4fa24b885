"""The 2026-07-28 (stateless) request rules, with no I/O.

In 2026-07-28 there is no session: every POST carries what a session used to hold. A request is
acceptable only if (spec: basic/index, transports/streamable-http, SEP-2575 and SEP-2243):

* ``params._meta`` holds ``io.modelcontextprotocol/protocolVersion`` and
  ``io.modelcontextprotocol/clientCapabilities`` (``clientInfo`` and ``logLevel`` are optional):
  else -32602, HTTP 400;
* the ``MCP-Protocol-Version`` header names a version we speak (else -32022
  UnsupportedProtocolVersion with ``data.supported``/``data.requested``, HTTP 400) and equals the
  ``_meta`` version (else -32020 HeaderMismatch, HTTP 400);
* ``Mcp-Method`` equals the body's method, exactly (case-sensitive), else -32020;
* ``Mcp-Name`` equals ``params.name`` (tools/call, prompts/get), ``params.uri``
  (resources/read) or ``params.taskId`` (tasks/get, tasks/update, tasks/cancel: SEP-2663)
  after trimming surrounding whitespace and decoding the ``=?base64?...?=`` form, else -32020.

A client mirrors its request in those headers with :func:`metadata_headers` (the rest of a
POST's headers are :func:`~.streamable.post_headers`). Error responses carry the request's id
(never null when the id could be read).
:func:`check_request` applies all of this and returns the request's :class:`StatelessContext` or a
:class:`~.streamable.Rejection` saying which HTTP status and JSON-RPC error to answer with.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .jsonrpc import INVALID_PARAMS, ErrorObject, Request
from .streamable import Rejection

__all__ = [
    "CLIENT_CAPABILITIES",
    "CLIENT_INFO",
    "HEADER_MISMATCH",
    "LOG_LEVEL",
    "MISSING_CLIENT_CAPABILITY",
    "NAMED_METHODS",
    "PROTOCOL_VERSION",
    "REMOVED_METHODS",
    "SERVER_INFO",
    "SUBSCRIPTION_ID",
    "UNSUPPORTED_VERSION",
    "StatelessContext",
    "check_param_headers",
    "check_request",
    "decode_header_value",
    "encode_header_value",
    "metadata_headers",
    "param_headers",
]

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

NAMED_METHODS: Mapping[str, str] = {"tools/call": "name", "prompts/get": "name",
                                    "resources/read": "uri", "tasks/get": "taskId",
                                    "tasks/update": "taskId", "tasks/cancel": "taskId"}
"""Methods whose target travels in the ``Mcp-Name`` header, and the param it mirrors."""
REMOVED_METHODS = frozenset({"initialize", "ping", "logging/setLevel", "resources/subscribe",
                             "resources/unsubscribe", "notifications/initialized"})
"""Methods of the handshake revisions that 2026-07-28 removed: 404 with -32601."""

_SENTINEL_PREFIX, _SENTINEL_SUFFIX = "=?base64?", "?="


@dataclass(frozen=True)
class StatelessContext:
    """What a 2026-07-28 request says about its client."""

    version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None



def encode_header_value(value: str) -> str:
    """A value as it must travel in an ``Mcp-Name``-style header: plain when it is printable
    ASCII without surrounding whitespace (and not itself sentinel-shaped), else base64."""
    plain = (value.isascii() and value.isprintable() and value == value.strip()
             and not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX)))
    if plain and value:
        return value
    return _SENTINEL_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + \
        _SENTINEL_SUFFIX


def decode_header_value(raw: str) -> str | None:
    """The value a header carries: surrounding whitespace trimmed, the base64 form decoded.
    None when the base64 form is malformed."""
    value = raw.strip()
    if value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX):
        encoded = value[len(_SENTINEL_PREFIX):-len(_SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except ValueError:  # not base64 (non-ASCII text too), or not UTF-8 inside
            return None
    return value


def _header_params(schema: object, arguments: object) -> Iterator[tuple[str, str, str]]:
    """``(property, header name, the value's string form)`` of each argument that a tool's
    input schema marks with ``"x-mcp-header": "Name"`` (SEP-2243) and the call sets."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return
    args = arguments if isinstance(arguments, dict) else {}
    for prop, spec in properties.items():
        suffix = spec.get("x-mcp-header") if isinstance(spec, dict) else None
        value = args.get(prop)
        if isinstance(suffix, str) and value is not None:
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            yield prop, f"Mcp-Param-{suffix}", text


def param_headers(schema: object, arguments: object) -> list[tuple[str, str]]:
    """The ``Mcp-Param-{Name}`` headers a client sends with a ``tools/call``."""
    return [(header, encode_header_value(text))
            for _, header, text in _header_params(schema, arguments)]


def metadata_headers(method: str, params: Mapping[str, Any],
                     schema: object = None) -> list[tuple[str, str]]:
    """The headers a client's request mirrors its body in: ``Mcp-Method``, ``Mcp-Name`` (when
    the method names a target and the params hold it as a string) and, for a ``tools/call``,
    the ``Mcp-Param-{Name}`` headers of the tool's input ``schema`` (none when unknown)."""
    headers = [("mcp-method", method)]
    named = NAMED_METHODS.get(method)
    target = params.get(named) if named is not None else None
    if isinstance(target, str):
        headers.append(("mcp-name", encode_header_value(target)))
    if method == "tools/call":
        headers.extend(param_headers(schema, params.get("arguments")))
    return headers


def check_param_headers(schema: object, arguments: object,
                        headers: Mapping[str, str]) -> Rejection | None:
    """SEP-2243 ``Mcp-Param-{Name}`` headers: every input property a tool marks with
    ``"x-mcp-header": "Name"`` travels in that header too (its string form; base64 form
    allowed), and the header must match the body. Missing, undecodable or different: -32020."""
    for prop, header, expected in _header_params(schema, arguments):
        raw = headers.get(header.lower())
        if raw is None:
            return _reject(400, HEADER_MISMATCH, f"the {header} header is required: "
                                                 f"arguments.{prop} is set")
        if not raw.isascii() or not raw.isprintable():
            return _reject(400, HEADER_MISMATCH, f"the {header} header has characters a "
                                                 "header may not carry (use the base64 form)")
        decoded = decode_header_value(raw)
        if decoded is None or decoded != expected:
            return _reject(400, HEADER_MISMATCH, f"the {header} header does not match "
                                                 f"arguments.{prop}")
    return None


def _reject(status: int, code: int, message: str, data: Any = None) -> Rejection:
    return Rejection(status, ErrorObject(code, message, data))


def check_request(request: Request, headers: Mapping[str, str],
                  supported: tuple[str, ...]) -> StatelessContext | Rejection:
    """Apply the rules of the module docstring. ``headers`` has lower-case names."""
    params = request.params or {}
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return _reject(400, INVALID_PARAMS, "params._meta is required in protocol 2026-07-28")
    version = meta.get(PROTOCOL_VERSION)
    if not isinstance(version, str):
        return _reject(400, INVALID_PARAMS, f"params._meta[{PROTOCOL_VERSION!r}] is required")
    capabilities = meta.get(CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        return _reject(400, INVALID_PARAMS,
                       f"params._meta[{CLIENT_CAPABILITIES!r}] is required (an object)")
    header_version = headers.get("mcp-protocol-version")
    if header_version is None:
        return _reject(400, HEADER_MISMATCH, "the MCP-Protocol-Version header is required")
    if header_version not in supported:
        return _reject(400, UNSUPPORTED_VERSION,
                       f"unsupported protocol version {header_version[:40]!r}",
                       {"supported": list(supported), "requested": header_version[:100]})
    if header_version != version:
        return _reject(400, HEADER_MISMATCH,
                       f"the MCP-Protocol-Version header ({header_version[:40]!r}) does not "
                       f"match params._meta protocol version ({version[:40]!r})")
    method_header = headers.get("mcp-method")
    if method_header is None:
        return _reject(400, HEADER_MISMATCH, "the Mcp-Method header is required")
    if method_header.strip() != request.method:
        return _reject(400, HEADER_MISMATCH,
                       f"the Mcp-Method header ({method_header[:80]!r}) does not match the "
                       f"body's method ({request.method[:80]!r})")
    named = NAMED_METHODS.get(request.method)
    if named is not None:
        raw_name = headers.get("mcp-name")
        if raw_name is None:
            return _reject(400, HEADER_MISMATCH,
                           f"the Mcp-Name header is required for {request.method}")
        name = decode_header_value(raw_name)
        if name is None or name != params.get(named):
            return _reject(400, HEADER_MISMATCH,
                           f"the Mcp-Name header does not match params.{named}")
    info = meta.get(CLIENT_INFO)
    level = meta.get(LOG_LEVEL)
    return StatelessContext(version, capabilities, info if isinstance(info, dict) else {},
                         level if isinstance(level, str) else None)
