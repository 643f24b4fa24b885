"""OTLP trace export requests, written in the protobuf wire format by hand.

One job: :func:`export_request` turns finished spans (:class:`FinishedSpan`) and a resource into
the bytes of an ``ExportTraceServiceRequest`` (opentelemetry-proto ``collector/trace/v1``), as an
OTLP/HTTP collector takes them (``application/x-protobuf``).

Why by hand: the OpenTelemetry SDK's encoder builds a protobuf message object per span and per
attribute, ~47 µs a span on the benchmark machine, more than the whole share of a gateway call
that traces may cost; writing the wire format directly takes ~3 µs a span (an attribute seen
before comes from a bounded cache of its encoding). The tests decode what this writes with the
official generated classes.

The messages and fields written (opentelemetry-proto 1.x): ExportTraceServiceRequest
{resource_spans=1}; ResourceSpans {resource=1, scope_spans=2}; Resource {attributes=1};
ScopeSpans {scope=1, spans=2}; InstrumentationScope {name=1, version=2}; Span {trace_id=1,
span_id=2, trace_state=3, parent_span_id=4, name=5, kind=6, start_time_unix_nano=7 (fixed64),
end_time_unix_nano=8 (fixed64), attributes=9, status=15}; Status {message=2, code=3};
KeyValue {key=1, value=2}; AnyValue {string_value=1, bool_value=2, int_value=3}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["SPAN_KIND_CLIENT", "SPAN_KIND_SERVER", "STATUS_CODE_ERROR", "FinishedSpan",
           "export_request"]

SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
STATUS_CODE_ERROR = 2
_ATTRIBUTE_CACHE_SIZE = 4096

AttributeValue = str | int | bool


class FinishedSpan(Protocol):
    """A span as it is exported (:class:`vmcp_trio.runtime.tracing.Span`)."""

    @property
    def trace_id(self) -> bytes: ...
    @property
    def span_id(self) -> bytes: ...
    @property
    def parent_id(self) -> bytes: ...
    @property
    def trace_state(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, AttributeValue]: ...
    @property
    def error(self) -> tuple[str, str] | None: ...


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _key_value(key: str, value: AttributeValue) -> bytes:
    """A KeyValue message's body."""
    if isinstance(value, bool):
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, int):
        any_value = b"\x18" + _varint(value & 0xFFFF_FFFF_FFFF_FFFF)  # int64, two's complement
    else:
        any_value = _field(1, str(value).encode("utf-8"))
    return _field(1, key.encode("utf-8")) + _field(2, any_value)


_span_attributes: dict[tuple[str, AttributeValue, type], bytes] = {}


def _span_attribute(key: str, value: AttributeValue) -> bytes:
    """Span.attributes field 9 holding one KeyValue (cached: names and values repeat)."""
    cache_key = (key, value, type(value))
    encoded = _span_attributes.get(cache_key)
    if encoded is None:
        encoded = _field(9, _key_value(key, value))
        if len(_span_attributes) < _ATTRIBUTE_CACHE_SIZE:
            _span_attributes[cache_key] = encoded
    return encoded


def _span(span: FinishedSpan) -> bytes:
    name = span.name.encode("utf-8")
    parts = [b"\x0a\x10", span.trace_id, b"\x12\x08", span.span_id]
    if span.trace_state:
        parts.append(_field(3, span.trace_state.encode("utf-8")))
    if span.parent_id:
        parts += (b"\x22\x08", span.parent_id)
    parts += (b"\x2a", _varint(len(name)), name, b"\x30", _varint(span.kind),
              b"\x39", span.start.to_bytes(8, "little"), b"\x41", span.end.to_bytes(8, "little"))
    parts += [_span_attribute(key, value) for key, value in span.attributes.items()]
    if span.error is not None:
        parts.append(_field(15, _field(2, span.error[1].encode("utf-8"))
                            + b"\x18" + _varint(STATUS_CODE_ERROR)))
    return _field(2, b"".join(parts))


def export_request(spans: Iterable[FinishedSpan], resource: Mapping[str, str],
                   scope: tuple[str, str]) -> bytes:
    """One ExportTraceServiceRequest: ``spans`` of one ``resource`` (attributes) and one
    instrumentation ``scope`` (name, version)."""
    resource_message = _field(1, b"".join(_field(1, _key_value(key, value))
                                          for key, value in resource.items()))
    scope_message = _field(1, _field(1, scope[0].encode("utf-8"))
                           + _field(2, scope[1].encode("utf-8")))
    scope_spans = _field(2, scope_message + b"".join(_span(span) for span in spans))
    return _field(1, resource_message + scope_spans)
