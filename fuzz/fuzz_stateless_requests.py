"""Fuzz the 2026-07-28 request rules (vmcp_trio/protocol/stateless_requests.py) and the
requestState signer (vmcp_trio/gateway/parked_calls.py): nothing raises. A header value encoded
by encode_header_value is printable ASCII without surrounding whitespace and decodes to itself;
decode_header_value of anything is a string or None. check_request gives a StatelessContext or a
Rejection (400, -32602, -32020 or -32022), and a context only when the rules hold (the header
version supported and equal to _meta's, Mcp-Method and Mcp-Name matching the body), as
check_param_headers passes only headers that match the arguments. The client's side agrees with
the server's: a well-formed request (a method that can travel in a header, the schema's header
names RFC 9110 tokens unique without regard to case: SEP-2243) with the headers post_headers and
metadata_headers give passes both checks, and with one of them changed it passes exactly when the
changed header still says what the body says. A signed requestState verifies to its call for its
identity, method and digest (and under a rotation of the secrets) and for nothing else: another
identity, method or digest, another key, a changed character (unless it only spells the same
sealed bytes another way: base64 that decodes alike), or any text of the input.

The input: a byte choosing the method (low nibble) and the header to change (bits 4-5), a byte
placing the character changed in the state, then fields separated by NUL: a method, the target
(name, uri or taskId), the arguments (JSON), the tool's input schema (JSON), a changed header's
value, an issuer, a subject, a call id, a state to verify."""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

from vmcp_trio.gateway.parked_calls import RequestStateSigner, params_digest
from vmcp_trio.protocol.jsonrpc import INVALID_PARAMS, Request
from vmcp_trio.protocol.revisions import REVISIONS, STATELESS
from vmcp_trio.protocol.stateless_requests import (
    CLIENT_CAPABILITIES,
    HEADER_MISMATCH,
    NAMED_METHODS,
    PROTOCOL_VERSION,
    UNSUPPORTED_VERSION,
    StatelessContext,
    check_param_headers,
    check_request,
    decode_header_value,
    encode_header_value,
    metadata_headers,
)
from vmcp_trio.protocol.streamable import Rejection, post_headers

METHODS = [*NAMED_METHODS, "tools/list", "resources/list", "server/discover",
           "subscriptions/listen", "ping", "notifications/cancelled", "completion/complete"]
SUPPORTED = (STATELESS.version,)
CHANGED = ("mcp-protocol-version", "mcp-method", "mcp-name", "mcp-param-p0")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
SECRET, OTHER_SECRET = b"fuzz requestState secret", b"another fleet secret"
SIGNER = RequestStateSigner([SECRET])
OTHERS = RequestStateSigner([OTHER_SECRET])
ROTATED = RequestStateSigner([OTHER_SECRET, SECRET])


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def check_codec(text: str) -> None:
    encoded = encode_header_value(text)
    check(encoded.isascii() and encoded.isprintable() and encoded == encoded.strip()
          and decode_header_value(encoded) == text, f"{text!r} encoded as {encoded!r}")
    decoded = decode_header_value(text)
    check(decoded is None or isinstance(decoded, str), f"{text!r} decoded to {decoded!r}")


def header_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_decision(request: Request, headers: dict[str, str], schema: object) -> bool:
    """Check what check_request and check_param_headers decide; True when both accept."""
    params = request.params or {}
    decided = check_request(request, headers, SUPPORTED)
    what = f"{request!r} with {headers!r}: {decided!r}"
    if isinstance(decided, Rejection):
        check(decided.status == 400 and decided.error.code in (
            INVALID_PARAMS, HEADER_MISMATCH, UNSUPPORTED_VERSION), what)
        decided.body(request.id)
        return False
    meta = params["_meta"]
    named = NAMED_METHODS.get(request.method)
    check(isinstance(decided, StatelessContext) and decided.version in SUPPORTED
          and headers["mcp-protocol-version"] == meta[PROTOCOL_VERSION] == decided.version
          and decided.client_capabilities == meta[CLIENT_CAPABILITIES]
          and headers["mcp-method"].strip() == request.method
          and (named is None or decode_header_value(headers["mcp-name"]) == params[named]), what)
    if request.method != "tools/call":
        return True
    arguments = params.get("arguments")
    refused = check_param_headers(schema, arguments, headers)
    if refused is not None:
        check((refused.status, refused.error.code) == (400, HEADER_MISMATCH), f"{refused!r}")
        return False
    properties = schema.get("properties") if isinstance(schema, dict) else None
    for prop, spec in properties.items() if isinstance(properties, dict) else []:
        suffix = spec.get("x-mcp-header") if isinstance(spec, dict) else None
        value = arguments.get(prop) if isinstance(arguments, dict) else None
        if isinstance(suffix, str) and value is not None:
            raw = headers.get(f"mcp-param-{suffix}".lower(), "")
            check(decode_header_value(raw) == header_text(value), f"{prop} in {headers!r}")
    return True


def well_formed_schema(schema: object, arguments: dict[str, Any]) -> object:
    """``schema`` when its header names follow SEP-2243, else one naming each argument's."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        names = [spec["x-mcp-header"] for spec in properties.values()
                 if isinstance(spec, dict) and isinstance(spec.get("x-mcp-header"), str)]
        if all(_TOKEN.fullmatch(n) for n in names) and len({n.lower() for n in names}) == len(
                names):
            return schema
    return {"type": "object",
            "properties": {key: {"x-mcp-header": f"P{i}"} for i, key in enumerate(arguments)}}


def check_agreement(method: str, target: str, arguments: dict[str, Any], schema: object,
                    changed: str, value: str) -> None:
    params: dict[str, Any] = {"_meta": {PROTOCOL_VERSION: STATELESS.version,
                                        CLIENT_CAPABILITIES: {}}, "arguments": arguments}
    if method in NAMED_METHODS:
        params[NAMED_METHODS[method]] = target
    schema = well_formed_schema(schema, arguments)
    sent = [*post_headers(STATELESS.version, None), *metadata_headers(method, params, schema)]
    check(all(v.isascii() and v.isprintable() for _, v in sent), f"headers {sent!r}")
    headers = {name.lower(): v for name, v in sent}
    request = Request(1, method, params)
    check(check_decision(request, headers, schema), f"{request!r} refused with {headers!r}")
    if changed not in headers:
        return
    was = headers[changed]
    same = {"mcp-protocol-version": value == was, "mcp-method": value.strip() == method}.get(
        changed, decode_header_value(value) == decode_header_value(was))
    if changed.startswith("mcp-param-"):  # printable ASCII (not asked of Mcp-Name)
        same = same and value.isascii() and value.isprintable()
    headers[changed] = value
    check(check_decision(request, headers, schema) == same, f"{changed}: {value!r} for {was!r}")


def check_signer(state_bytes: int, identity: tuple[str, str], method: str, digest: str,
                 call_id: str, forged: str) -> None:
    state = SIGNER.sign(call_id, identity, method, digest)
    check(SIGNER.verify(state, identity, method, digest) == call_id, f"{state!r} refused")
    check(ROTATED.verify(state, identity, method, digest) == call_id, "refused after rotation")
    issuer, subject = identity
    for other in [((issuer + "x", subject), method, digest), ((issuer, subject + "x"), method,
                  digest), (identity, method + "x", digest), (identity, method, digest + "0")]:
        check(SIGNER.verify(state, *other) is None, f"{state!r} verified for {other!r}")
    check(OTHERS.verify(state, identity, method, digest) is None, "verified under another key")
    check(SIGNER.verify(forged, identity, method, digest) is None, f"{forged!r} verified")
    position = state_bytes % len(state)
    for char in "A-_.=+/!":
        changed = state[:position] + char + state[position + 1:]
        if changed == state or SIGNER.verify(changed, identity, method, digest) is None:
            continue
        key, _, body = state.partition(".")
        key_changed, _, body_changed = changed.partition(".")
        check(key == key_changed and base64.urlsafe_b64decode(body)
              == base64.urlsafe_b64decode(body_changed), f"{changed!r} verified ({state!r})")


def load(field: bytes) -> Any:
    try:
        return orjson.loads(field)
    except orjson.JSONDecodeError:
        return None


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    fields = [*data[2:].split(b"\0"), *[b""] * 9]
    texts = [f.decode("utf-8", errors="replace") for f in fields[:9]]
    method_text, target, _, _, value, issuer, subject, call_id, forged = texts
    arguments, schema = load(fields[2]), load(fields[3])
    choice = data[0] & 15
    method = METHODS[choice] if choice < len(METHODS) else method_text
    for text in texts:
        check_codec(text)
    headers = {"mcp-protocol-version": REVISIONS[data[1] & 3].version, "mcp-method": method_text,
               "mcp-name": target, "mcp-param-p0": value}
    params = arguments if isinstance(arguments, dict) else {"arguments": arguments}
    if method:
        check_decision(Request(2, method, params), headers, schema)
    if method and method.isascii() and method.isprintable() and method == method.strip():
        check_agreement(method, target, arguments if isinstance(arguments, dict) else {},
                        schema, CHANGED[(data[0] >> 4) & 3], value)
    check_signer(data[1], (issuer, subject), method[:64], params_digest(params), call_id[:64],
                 forged)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
