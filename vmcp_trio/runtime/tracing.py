"""Traces: spans of the gateway's and the proxy's requests, exported over OTLP; off by default
and free when off.

Rules it keeps:

* **Off unless asked.** :func:`configure` turns traces on only when the standard variables ask
  for an exporter (``OTEL_TRACES_EXPORTER`` naming ``otlp`` or ``console``, or an
  ``OTEL_EXPORTER_OTLP_ENDPOINT``/``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and
  ``OTEL_SDK_DISABLED`` is not ``true``. Asking for an exporter or OTLP protocol we do not ship
  (``grpc``), a sampler we do not know, or a setting that cannot be read is an operator error
  (:class:`TracingUnavailable`, one line). What the exporters read is in
  :mod:`.span_export`; ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` make the resource.
* **Free when off.** Every span function is one check of a module flag and hands back a shared
  no-op context; nothing is allocated or propagated.
* **Cheap when on.** A span is one small object (:class:`Span`): ids from a PRNG, two clock
  reads, its attributes; finished, it is queued for the export thread (:mod:`.span_export`),
  which encodes it (:mod:`.otlp_encoding`). The OpenTelemetry SDK is not used: its span objects
  and encoder cost ~135 µs per traced gateway call here, these ~15 µs (``bench/tracing.py``).
* **Sampled as the standard says.** ``OTEL_TRACES_SAMPLER``: ``parentbased_always_on`` (the
  default), ``parentbased_always_off``, ``parentbased_traceidratio``, ``always_on``,
  ``always_off``, ``traceidratio``, with ``OTEL_TRACES_SAMPLER_ARG`` (a ratio, 0 to 1). A span
  not sampled is not recorded, but its context still travels (flags ``00``).
* **One tree across the hop** (W3C Trace Context). A request's parent comes from its ``_meta``
  (``traceparent``, ``tracestate``, ``baggage``: SEP-414) or else its HTTP headers
  (:func:`incoming`); a call to a backend is a client span whose context travels in the request's
  ``_meta`` and, for HTTP backends, in its headers (:func:`inject_meta`, :func:`inject_headers`),
  so the backend's own span joins the client's trace. ``tracestate`` and ``baggage`` are passed
  on as they came (bounded: 512 and 8192 characters). ``vmcp proxy`` does the same for what it
  forwards (:func:`forward_span`, :func:`replace_body`, :func:`replace_headers`), reading the
  body only when traces are on.
* **No secrets in spans.** Attributes name methods, tools, backends, outcomes and the first
  eight characters of a session id (as the logs do); never tokens, arguments or results.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from time import time_ns
from typing import Any

import orjson

from .. import __version__
from .otlp_encoding import SPAN_KIND_CLIENT, SPAN_KIND_SERVER
from .span_export import BatchExport, ExportSettingError, exporters, pairs, shown

__all__ = ["PROPAGATED", "Span", "SpanHandle", "TraceContext", "TracingUnavailable",
           "backend_span", "configure", "enabled", "forward_span", "incoming", "inject_headers",
           "inject_meta", "replace_body", "replace_headers", "request_span", "shutdown",
           "use_sink"]

PROPAGATED = ("traceparent", "tracestate", "baggage")
"""The W3C trace-context and baggage keys, in ``_meta`` and as HTTP headers."""
_SCOPE = ("vmcp-trio", __version__)
_TRACEPARENT = re.compile(
    r"^\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*$")
_MAX_TRACESTATE = 512
_MAX_BAGGAGE = 8192
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


class TracingUnavailable(Exception):
    """Traces were asked for but cannot be exported (the message says what to change)."""


class TraceContext:
    """Where a span sits in its trace: what travels to the next hop."""

    __slots__ = ("_carrier", "baggage", "sampled", "span_id", "trace_id", "trace_state")

    def __init__(self, trace_id: bytes, span_id: bytes, sampled: bool,
                 trace_state: str | None, baggage: str | None) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.sampled = sampled
        self.trace_state = trace_state
        self.baggage = baggage
        self._carrier: dict[str, str] | None = None

    def carrier(self) -> dict[str, str]:
        """The context as ``_meta`` entries or HTTP headers (made once: read-only)."""
        if self._carrier is None:
            out = {"traceparent": f"00-{self.trace_id.hex()}-{self.span_id.hex()}-"
                                  f"{'01' if self.sampled else '00'}"}
            if self.trace_state:
                out["tracestate"] = self.trace_state
            if self.baggage:
                out["baggage"] = self.baggage
            self._carrier = out
        return self._carrier


_CURRENT: ContextVar[TraceContext | None] = ContextVar("vmcp_trace_context", default=None)


class SpanHandle:
    """What code may do with the span it is in: add attributes, mark it failed. The base class
    does nothing (the span of traces that are off, or not sampled)."""

    __slots__ = ()

    def set(self, key: str, value: str | int | bool) -> None:
        """Set one attribute."""

    def fail(self, error_type: str, message: str) -> None:
        """Mark the span failed (``error.type`` and an error status)."""


class _InContext(SpanHandle):
    """A context that is the current one while it lasts: a span not recorded, or the parent a
    request's headers name (:func:`incoming`)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: TraceContext) -> None:
        self._context = context
        self._token: Token[TraceContext | None] | None = None

    def __enter__(self) -> SpanHandle:
        self._token = _CURRENT.set(self._context)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _CURRENT.reset(self._token)


class Span(_InContext):
    """A recorded span; queued for export when it ends. (It sets and resets the context itself
    rather than through its base class: two spans a call, and the calls cost ~1 µs a call.)"""

    __slots__ = ("attributes", "end", "error", "kind", "name", "parent_id", "start")

    def __init__(self, name: str, kind: int, context: TraceContext, parent_id: bytes,
                 attributes: dict[str, Any]) -> None:
        self._context = context
        self._token = None
        self.name = name
        self.kind = kind
        self.parent_id = parent_id
        self.attributes = attributes
        self.error: tuple[str, str] | None = None
        self.start = 0
        self.end = 0

    @property
    def trace_id(self) -> bytes:
        return self._context.trace_id

    @property
    def span_id(self) -> bytes:
        return self._context.span_id

    @property
    def trace_state(self) -> str | None:
        return self._context.trace_state

    def set(self, key: str, value: str | int | bool) -> None:
        self.attributes[key] = value

    def fail(self, error_type: str, message: str) -> None:
        self.attributes["error.type"] = error_type
        self.error = (error_type, message[:200])

    def __enter__(self) -> SpanHandle:
        self.start = time_ns()
        self._token = _CURRENT.set(self._context)
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = time_ns()
        assert self._token is not None
        _CURRENT.reset(self._token)
        if _sink is not None:
            _sink(self)


Sampler = Callable[[TraceContext | None, bytes], bool]
"""Whether a span with this parent (None: a root) in this trace is recorded."""

_OFF: AbstractContextManager[SpanHandle] = nullcontext(SpanHandle())
_sink: Callable[[Span], None] | None = None
_export: BatchExport | None = None
_random = random.Random()  # noqa: S311 (ids must be unique, not secret: as the SDKs make them)


def _parent_based(root: bool | float) -> Sampler:
    decide = _ratio(root) if isinstance(root, float) else (lambda trace_id: root)

    def sample(parent: TraceContext | None, trace_id: bytes) -> bool:
        return parent.sampled if parent is not None else decide(trace_id)
    return sample


def _ratio(ratio: float) -> Callable[[bytes], bool]:
    bound = round(ratio * (1 << 64))
    return lambda trace_id: int.from_bytes(trace_id[8:], "big") < bound


_sampler: Sampler = _parent_based(True)


def enabled() -> bool:
    return _sink is not None


def use_sink(sink: Callable[[Span], None] | None, sampler: Sampler | None = None) -> None:
    """Record spans and give each to ``sink`` when it ends (None: traces off again).
    :func:`configure` calls it; tests give their own."""
    global _sink, _sampler
    _sink = sink
    _sampler = sampler or _parent_based(True)


def _sampler_from(environ: Mapping[str, str]) -> Sampler:
    name = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    ratio = 1.0
    if name.endswith("traceidratio") and raw:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise TracingUnavailable(f"OTEL_TRACES_SAMPLER_ARG: {raw[:40]!r} is not a ratio "
                                     "from 0 to 1")
    roots: dict[str, bool | float] = {"always_on": True, "always_off": False,
                                      "traceidratio": ratio}
    kind, _, root = name.partition("parentbased_")
    if not kind and root in roots:
        return _parent_based(roots[root])
    if name in roots:
        decide = roots[name]
        if isinstance(decide, float):
            by_ratio = _ratio(decide)
            return lambda parent, trace_id: by_ratio(trace_id)
        return lambda parent, trace_id: bool(decide)
    raise TracingUnavailable(f"OTEL_TRACES_SAMPLER: unknown sampler {name[:40]!r}")


def configure(environ: Mapping[str, str] = os.environ) -> str | None:
    """Turn traces on if the environment asks (module docstring); what they export to (for
    the startup log), or None when they stay off."""
    global _export
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    endpoint = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    asked = environ.get("OTEL_TRACES_EXPORTER")
    if asked is None and not endpoint:
        return None
    names = [n.strip() for n in (asked or "otlp").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names:
        return None
    unknown = [n for n in names if n not in ("otlp", "console")]
    if unknown:
        raise TracingUnavailable(f"OTEL_TRACES_EXPORTER: unknown exporter {unknown[0][:40]!r} "
                                 "(vmcp ships otlp, console and none)")
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if "otlp" in names and protocol != "http/protobuf":
        raise TracingUnavailable(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol[:40]!r} is not "
                                 "supported (vmcp exports OTLP as http/protobuf)")
    sampler = _sampler_from(environ)
    try:
        resource = {"telemetry.sdk.name": "vmcp-trio", "telemetry.sdk.language": "python",
                    "telemetry.sdk.version": __version__,
                    **pairs(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""),
                            "OTEL_RESOURCE_ATTRIBUTES")}
        resource["service.name"] = (environ.get("OTEL_SERVICE_NAME")
                                    or resource.get("service.name") or "vmcp-trio")
        export = BatchExport(exporters(names, environ, resource, _SCOPE), environ)
    except ExportSettingError as exc:
        raise TracingUnavailable(str(exc)) from None
    shutdown()
    _export = export
    use_sink(export.add, sampler)
    where = shown(endpoint) if endpoint else "the OTLP default endpoint"
    return ", ".join(f"OTLP ({protocol}) to {where}" if n == "otlp" else "the console"
                     for n in names)


def shutdown() -> None:
    """Send the spans that wait and stop exporting (at exit)."""
    global _export
    export, _export = _export, None
    use_sink(None)
    if export is not None:
        export.shutdown()


# --- spans ---------------------------------------------------------------------------------------

def _parent(carrier: object) -> TraceContext | None:
    """The context a carrier (``_meta`` or headers) names, or None when it names none."""
    if not isinstance(carrier, dict):  # _meta as decoded, or a request's headers
        return None
    header = carrier.get("traceparent")
    if not isinstance(header, str):
        return None
    found = _TRACEPARENT.match(header)
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = bytes.fromhex(trace_hex), bytes.fromhex(span_hex)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    state = carrier.get("tracestate")
    baggage = carrier.get("baggage")
    return TraceContext(
        trace_id, span_id, bool(int(flags, 16) & 1),
        state if isinstance(state, str) and len(state) <= _MAX_TRACESTATE else None,
        baggage if isinstance(baggage, str) and len(baggage) <= _MAX_BAGGAGE else None)


def _start(name: str, kind: int, parent: TraceContext | None,
           attributes: dict[str, Any]) -> _InContext:
    if parent is None:
        parent = _CURRENT.get()
    trace_id = (parent.trace_id if parent is not None
                else (_random.getrandbits(128) or 1).to_bytes(16, "big"))
    context = TraceContext(trace_id, (_random.getrandbits(64) or 1).to_bytes(8, "big"),
                           _sampler(parent, trace_id),
                           parent.trace_state if parent is not None else None,
                           parent.baggage if parent is not None else None)
    if not context.sampled:
        return _InContext(context)
    return Span(name, kind, context, parent.span_id if parent is not None else b"", attributes)


def request_span(method: str, target: str | None, meta: object,
                 attributes: dict[str, Any]) -> AbstractContextManager[SpanHandle]:
    """The gateway's span of one client request: a child of the trace context in its
    ``_meta``, else of the current one (:func:`incoming`)."""
    if _sink is None:
        return _OFF
    name = f"{method} {target}" if target else method
    return _start(name, SPAN_KIND_SERVER, _parent(meta), {"mcp.method.name": method,
                                                          **attributes})


def backend_span(method: str, target: str | None, backend: str
                 ) -> AbstractContextManager[SpanHandle]:
    """The span of one call to a backend (a child of the current span)."""
    if _sink is None:
        return _OFF
    name = f"{method} {target}" if target else method
    return _start(name, SPAN_KIND_CLIENT, None, {"mcp.method.name": method,
                                                 "vmcp.backend": backend})


def forward_span(method: str, path: str, headers: Mapping[str, str], body: bytes,
                 remote: str) -> AbstractContextManager[SpanHandle]:
    """``vmcp proxy``'s span of one forwarded HTTP request: a child of the trace context in the
    ``_meta`` of the JSON-RPC request it carries (SEP-414), else in its headers (lower-case
    names)."""
    if _sink is None:
        return _OFF
    parent = _parent(_body_meta(body)) or _parent(headers)
    return _start(f"{method} {path}", SPAN_KIND_SERVER, parent,
                  {"http.request.method": method, "url.path": path, "vmcp.remote": remote})


def _body_params(body: bytes) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A JSON-RPC request body's message and its ``params``, if it is one with params."""
    if not body.startswith(b"{"):
        return None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    return (message, params) if isinstance(params, dict) else None


def _body_meta(body: bytes) -> object:
    """The ``params._meta`` of a JSON-RPC request body, if it is one."""
    parsed = _body_params(body)
    return parsed[1].get("_meta") if parsed is not None else None


def replace_body(body: bytes) -> bytes:
    """A JSON-RPC request body with the current trace context in its ``_meta`` when it carried
    one (the same bytes otherwise, and always when traces are off)."""
    parsed = _body_params(body) if _sink is not None else None
    if parsed is None or not isinstance(parsed[1].get("_meta"), dict):
        return body
    message, params = parsed
    message["params"] = inject_meta(params)
    return orjson.dumps(message)


def replace_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """An HTTP request's headers with the current trace context instead of the one they
    carry (unchanged when traces are off: a proxy then passes the client's through)."""
    if _sink is None:
        return headers
    kept = [(k, v) for k, v in headers if k not in PROPAGATED]
    inject_headers(kept)
    return kept


def incoming(headers: Mapping[str, str]) -> AbstractContextManager[object]:
    """Make the trace context of a request's HTTP headers (lower-case names) the current one,
    for what the request does (a ``_meta`` trace context still wins)."""
    if _sink is None:
        return nullcontext()
    parent = _parent(headers)
    return nullcontext() if parent is None else _InContext(parent)


def inject_meta(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the current trace context in its ``_meta`` (a copy; the same object when
    traces are off or no span is current)."""
    current = _CURRENT.get() if _sink is not None else None
    if current is None:
        return params
    meta = params.get("_meta")
    carried: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
    for key in PROPAGATED:
        carried.pop(key, None)
    carried.update(current.carrier())
    return {**params, "_meta": carried}


def inject_headers(headers: list[tuple[str, str]]) -> None:
    """Add the current trace context to an HTTP request's headers (nothing when off)."""
    current = _CURRENT.get() if _sink is not None else None
    if current is not None:
        headers.extend(current.carrier().items())
