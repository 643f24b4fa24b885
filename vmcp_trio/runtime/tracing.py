"""Traces with OpenTelemetry: optional, off by default, and free when off.

Rules it keeps:

* **Off unless asked.** :func:`configure` turns traces on only when the standard variables ask
  for an exporter (``OTEL_TRACES_EXPORTER`` naming ``otlp`` or ``console``, or an
  ``OTEL_EXPORTER_OTLP_ENDPOINT``/``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and
  ``OTEL_SDK_DISABLED`` is not ``true``. The OpenTelemetry packages are the ``otel`` extra
  (``pip install 'vmcp-trio[otel]'``) and are imported only then; asking for traces without
  them, or for an exporter or OTLP protocol we do not ship (``grpc``), is an operator error
  (:class:`TracingUnavailable`, one line). The exporters read the rest of their ``OTEL_*``
  settings (endpoint, headers, timeout, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``)
  themselves.
* **Free when off.** Every span function is one check of a module flag and hands back a shared
  no-op context; nothing is imported, allocated or propagated.
* **One tree across the hop.** A request's parent comes from its ``_meta`` (``traceparent``,
  ``tracestate``, ``baggage``: SEP-414) or else its HTTP headers (:func:`incoming`); a call to a
  backend is a client span whose context travels in the request's ``_meta`` and, for HTTP
  backends, in its headers (:func:`inject_meta`, :func:`inject_headers`), so the backend's own
  span joins the client's trace. ``vmcp proxy`` does the same for what it forwards
  (:func:`forward_span`, :func:`replace_body`, :func:`replace_headers`), reading the body only
  when traces are on.
* **No secrets in spans.** Attributes name methods, tools, backends, outcomes and the first
  eight characters of a session id (as the logs do); never tokens, arguments or results.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["SpanHandle", "TracingUnavailable", "backend_span", "configure", "enabled",
           "forward_span", "incoming", "inject_headers", "inject_meta", "replace_body",
           "replace_headers", "request_span", "shutdown", "use_provider"]

PROPAGATED = ("traceparent", "tracestate", "baggage")
"""The W3C trace-context and baggage keys, in ``_meta`` and as HTTP headers."""


class TracingUnavailable(Exception):
    """Traces were asked for but cannot be exported (the message says what to change)."""


class SpanHandle:
    """What code may do with the span it is in: add attributes, mark it failed. The base class
    does nothing (the span of traces that are off)."""

    def set(self, key: str, value: str | int | bool) -> None:
        """Set one attribute."""

    def fail(self, error_type: str, message: str) -> None:
        """Mark the span failed (``error.type`` and an error status)."""


class _OtelSpan(SpanHandle):
    def __init__(self, span: Span) -> None:
        self._span = span

    def set(self, key: str, value: str | int | bool) -> None:
        self._span.set_attribute(key, value)

    def fail(self, error_type: str, message: str) -> None:
        from opentelemetry.trace import StatusCode
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(StatusCode.ERROR, message[:200])


_OFF: AbstractContextManager[SpanHandle] = nullcontext(SpanHandle())
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def enabled() -> bool:
    return _tracer is not None


def use_provider(provider: TracerProvider | None) -> None:
    """Export vmcp's spans through ``provider`` (None: traces off again). :func:`configure`
    calls it; tests give their own provider."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("vmcp-trio") if provider is not None else None


def configure(environ: Mapping[str, str] = os.environ) -> str | None:
    """Turn traces on if the environment asks (module docstring); what they export to (for
    the startup log), or None when they stay off."""
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
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        if "otlp" in names:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingUnavailable("traces are asked for (OTEL_* variables) but the OpenTelemetry "
                                 "packages are not installed: pip install 'vmcp-trio[otel]'"
                                 ) from None
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "vmcp-trio")})
    provider = TracerProvider(resource=resource)
    for name in names:
        exporter = OTLPSpanExporter() if name == "otlp" else ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    use_provider(provider)
    where = endpoint or "the OTLP default endpoint"
    return ", ".join(f"OTLP ({protocol}) to {where}" if n == "otlp" else "the console"
                     for n in names)


def shutdown() -> None:
    """Flush and stop the exporters (at exit)."""
    provider = _provider
    use_provider(None)
    if provider is not None:
        provider.shutdown()


# --- spans ---------------------------------------------------------------------------------------

def _parent(carrier: object) -> Any:
    """The context a carrier (``_meta`` or headers) names, or None to use the current one."""
    if not isinstance(carrier, Mapping) or "traceparent" not in carrier:
        return None
    from opentelemetry.propagate import extract
    from opentelemetry.trace import get_current_span
    try:
        context = extract({k: v for k in PROPAGATED
                           if isinstance(v := carrier.get(k), str)})
    except (ValueError, TypeError):
        return None
    return context if get_current_span(context).get_span_context().is_valid else None


@contextlib.contextmanager
def _span(name: str, kind_name: str, parent: Any,
          attributes: dict[str, Any]) -> Iterator[SpanHandle]:
    from opentelemetry.trace import SpanKind
    assert _tracer is not None
    kind = SpanKind.SERVER if kind_name == "server" else SpanKind.CLIENT
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes,
                                       record_exception=False,
                                       set_status_on_exception=False) as span:
        yield _OtelSpan(span)


def request_span(method: str, target: str | None, meta: object,
                 attributes: dict[str, Any]) -> AbstractContextManager[SpanHandle]:
    """The gateway's span of one client request: a child of the trace context in its
    ``_meta``, else of the current one (:func:`incoming`)."""
    if _tracer is None:
        return _OFF
    name = f"{method} {target}" if target else method
    return _span(name, "server", _parent(meta), {"mcp.method.name": method, **attributes})


def backend_span(method: str, target: str | None, backend: str
                 ) -> AbstractContextManager[SpanHandle]:
    """The span of one call to a backend (a child of the current span)."""
    if _tracer is None:
        return _OFF
    name = f"{method} {target}" if target else method
    return _span(name, "client", None, {"mcp.method.name": method, "vmcp.backend": backend})


def forward_span(method: str, path: str, headers: Mapping[str, str], body: bytes,
                 remote: str) -> AbstractContextManager[SpanHandle]:
    """``vmcp proxy``'s span of one forwarded HTTP request: a child of the trace context in the
    ``_meta`` of the JSON-RPC request it carries (SEP-414), else in its headers (lower-case
    names)."""
    if _tracer is None:
        return _OFF
    parent = _parent(_body_meta(body)) or _parent(headers)
    return _span(f"{method} {path}", "server", parent,
                 {"http.request.method": method, "url.path": path, "vmcp.remote": remote})


def _body_meta(body: bytes) -> object:
    """The ``params._meta`` of a JSON-RPC request body, if it is one."""
    if not body.startswith(b"{"):
        return None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    return params.get("_meta") if isinstance(params, dict) else None


def replace_body(body: bytes) -> bytes:
    """A JSON-RPC request body with the current trace context in its ``_meta`` when it carried
    one (the same bytes otherwise, and always when traces are off)."""
    if _tracer is None or not isinstance(_body_meta(body), Mapping):
        return body
    message = orjson.loads(body)
    message["params"] = inject_meta(message["params"])
    return orjson.dumps(message)


def replace_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """An HTTP request's headers with the current trace context instead of the one they
    carry (unchanged when traces are off: a proxy then passes the client's through)."""
    if _tracer is None:
        return headers
    kept = [(k, v) for k, v in headers if k not in PROPAGATED]
    inject_headers(kept)
    return kept


@contextlib.contextmanager
def _attached(context: Any) -> Iterator[None]:
    from opentelemetry import context as otel_context
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def incoming(headers: Mapping[str, str]) -> AbstractContextManager[object]:
    """Make the trace context of a request's HTTP headers (lower-case names) the current one,
    for what the request does (a ``_meta`` trace context still wins)."""
    if _tracer is None:
        return nullcontext()
    parent = _parent(headers)
    return nullcontext() if parent is None else _attached(parent)


def inject_meta(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the current trace context in its ``_meta`` (a copy; the same object when
    traces are off)."""
    if _tracer is None:
        return params
    from opentelemetry.propagate import inject
    meta = params.get("_meta")
    carried: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
    for key in PROPAGATED:
        carried.pop(key, None)
    inject(carried)
    return {**params, "_meta": carried}


def inject_headers(headers: list[tuple[str, str]]) -> None:
    """Add the current trace context to an HTTP request's headers (nothing when off)."""
    if _tracer is None:
        return
    from opentelemetry.propagate import inject
    carrier: dict[str, str] = {}
    inject(carrier)
    headers.extend((k, v) for k, v in carrier.items() if k in PROPAGATED)
