"""Traces across the hop: the client's span, the gateway's span, its backend call and the
backend's own span form one tree.

The client is the official MCP Python SDK 2.x ``Client`` (it opens an OpenTelemetry span per
request and puts its context in ``_meta``, SEP-414), the backends are SDK 2.x servers (their
``OpenTelemetryMiddleware`` opens a span from the ``_meta`` context), all in this process: the
SDK's spans go to OpenTelemetry's in-memory exporter, vmcp's to a list (:func:`tracing.use_sink`),
and the tree is built from both by their W3C ids. Off (the default), the gateway neither opens
spans nor adds trace context to what it sends. What vmcp exports over OTLP is decoded with the
official protobuf classes (:mod:`tests.fixtures.otlp_receiver`), and the sampler follows
``OTEL_TRACES_SAMPLER``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from vmcp_trio.runtime import tracing
from vmcp_trio.runtime.otlp_encoding import SPAN_KIND_SERVER, export_request
from vmcp_trio.runtime.span_export import BatchExport

from .fixtures.otlp_receiver import otlp_receiver
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import RawClient, StatelessClient, quickstart_docs, running_gateway
from .helpers import ROOT
from .serve_helpers import serving as serving_process

GROUP = "quickstart"
EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@dataclass(frozen=True)
class Seen:
    """A finished span, vmcp's or the MCP SDK's, as the tests compare them."""

    scope: str
    kind: str
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    attributes: dict[str, Any]
    failed: bool


class Traces:
    """Every span this process finished: vmcp's and the SDK's."""

    def __init__(self) -> None:
        self.ours: list[tracing.Span] = []

    def spans(self) -> list[Seen]:
        sdk = [Seen(s.instrumentation_scope.name if s.instrumentation_scope else "",
                    s.kind.name, s.name, s.context.trace_id, s.context.span_id,
                    s.parent.span_id if s.parent is not None else None, dict(s.attributes or {}),
                    s.status.status_code is trace.StatusCode.ERROR)
               for s in EXPORTER.get_finished_spans()]
        ours = [Seen("vmcp-trio", "SERVER" if s.kind == SPAN_KIND_SERVER else "CLIENT", s.name,
                     int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big"),
                     int.from_bytes(s.parent_id, "big") if s.parent_id else None,
                     dict(s.attributes), s.error is not None)
                for s in self.ours]
        return sdk + ours

    def clear(self) -> None:
        EXPORTER.clear()
        self.ours.clear()


@pytest.fixture
def traces() -> Iterator[Traces]:
    """The SDK's spans go to :data:`EXPORTER` through the global provider (set once per
    process), the gateway's to a list through :func:`tracing.use_sink`."""
    if trace.get_tracer_provider() is not _PROVIDER:
        trace.set_tracer_provider(_PROVIDER)
    assert trace.get_tracer_provider() is _PROVIDER, "another test set a tracer provider"
    seen = Traces()
    seen.clear()
    tracing.use_sink(seen.ours.append)
    try:
        yield seen
    finally:
        tracing.use_sink(None)
        seen.clear()


@dataclass
class Stack:
    url: str
    alpha: BackendState
    beta: BackendState


def http_backend(name: str, url: str) -> dict[str, Any]:
    return {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
            "metadata": {"name": name}, "spec": {"groupRef": {"name": GROUP}, "url": url}}


@asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    """vmcp in front of alpha (SDK 2.x speaking 2026-07-28) and beta (SDK 2.x, handshake
    only), with the quickstart's stdio backends."""
    alpha, alpha_state = make_server("alpha")
    beta, beta_state = make_server("beta")
    async with serving(alpha, alpha_state) as alpha_url, \
            serving(beta, beta_state, handshake_only=True) as beta_url:
        docs = [*quickstart_docs(), http_backend("alpha", alpha_url),
                http_backend("beta", beta_url)]
        async with running_gateway(docs) as (url, _):
            yield Stack(url, alpha_state, beta_state)


def _by_id(spans: list[Seen]) -> dict[int, Seen]:
    return {span.span_id: span for span in spans}


def _ancestry(span: Seen, spans: dict[int, Seen]) -> list[Seen]:
    """``span`` and its ancestors up to the root, nearest first."""
    chain = [span]
    while chain[-1].parent_id is not None and chain[-1].parent_id in spans:
        chain.append(spans[chain[-1].parent_id])
    return chain


def _describe(chain: list[Seen]) -> list[tuple[str, str, str]]:
    """(instrumentation, kind, name) of each span of a chain, root first."""
    return [(s.scope, s.kind, s.name) for s in reversed(chain)]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_one_tools_call_is_one_tree_from_the_client_to_the_backend(
        traces: Traces, mode: str) -> None:
    """The client's span, the gateway's span of the request, its span of the backend call and
    the backend's span, each the child of the one before, in one trace: for a 2026-07-28
    client (auto) and a handshake client (legacy), to a 2026-07-28 backend and a handshake
    one."""
    tracer = _PROVIDER.get_tracer("the test client")
    async with stack() as running, httpx2.AsyncClient() as http, \
            Client(streamable_http_client(running.url, http_client=http), mode=mode) as client:
        for tool, backend in (("alpha_add", "alpha"), ("beta_add", "beta")):
            with tracer.start_as_current_span(f"the user's work with {tool}") as root:
                result = await client.call_tool(tool, {"a": 2, "b": 3})
                assert not result.is_error
            spans = _by_id(traces.spans())
            backend_span = next(s for s in spans.values()
                                if s.name == "tools/call add" and s.kind == "SERVER"
                                and s.trace_id == root.get_span_context().trace_id)
            chain = _ancestry(backend_span, spans)
            assert _describe(chain) == [
                ("the test client", "INTERNAL", f"the user's work with {tool}"),
                ("mcp-python-sdk", "CLIENT", f"MCP send tools/call {tool}"),
                ("vmcp-trio", "SERVER", f"tools/call {tool}"),
                ("vmcp-trio", "CLIENT", "tools/call add"),
                ("mcp-python-sdk", "SERVER", "tools/call add"),
            ], _describe(chain)
            gateway_request, gateway_call = chain[2], chain[1]
            assert gateway_request.attributes["vmcp.backend"] == backend
            assert gateway_request.attributes["mcp.method.name"] == "tools/call"
            assert len(str(gateway_request.attributes["mcp.session.id"])) == 8
            assert gateway_call.attributes["vmcp.backend"] == backend
            traces.clear()
        # The 2026-07-28 backend also got the context in its HTTP headers.
        assert any(running.alpha.traceparents)


async def test_a_failed_call_marks_the_gateway_span_and_http_headers_give_the_parent(
        traces: Traces) -> None:
    """A client that sends its trace context only in HTTP headers (no ``_meta``) still gets
    the gateway's spans under its own; an error answer marks the span failed with its code."""
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with stack() as running:
        client = StatelessClient(running.url)
        reply = await client.post("tools/call", {"name": "no_such_tool", "arguments": {}},
                                  name="no_such_tool",
                                  headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
        assert reply.body["error"]["code"] == -32602
        request_span = next(s for s in traces.spans() if s.name == "tools/call no_such_tool")
        assert f"{request_span.trace_id:032x}" == trace_id
        assert request_span.parent_id is not None
        assert f"{request_span.parent_id:016x}" == parent_id
        assert request_span.attributes["error.type"] == "-32602"
        assert request_span.failed


async def test_off_by_default_the_gateway_adds_no_trace_context() -> None:
    """With traces off, a backend gets no ``traceparent`` the client did not send, and a
    client's own ``_meta`` context passes through untouched."""
    assert not tracing.enabled()
    async with stack() as running:
        client = RawClient(running.url)
        try:
            assert (await client.initialize()).status == 200
            await client.request("tools/call", {"name": "alpha_add",
                                                 "arguments": {"a": 1, "b": 1}})
            sent = "00-11111111111111111111111111111111-2222222222222222-01"
            await client.request("tools/call", {"name": "alpha_add", "arguments": {"a": 1, "b": 2},
                                                "_meta": {"traceparent": sent}})
        finally:
            await client.aclose()
    calls = [(meta, header) for method, meta, header in zip(
        running.alpha.methods, running.alpha.metas, running.alpha.traceparents, strict=True)
        if method == "tools/call"]
    assert len(calls) == 2
    assert "traceparent" not in calls[0][0] and calls[0][1] == ""
    assert calls[1][0]["traceparent"] == sent and calls[1][1] == ""


# --- configuration from the environment ----------------------------------------------------------

@pytest.mark.parametrize(("environ", "problem"), [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: unknown exporter 'zipkin'"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc'"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_sometimes"},
     "OTEL_TRACES_SAMPLER: unknown sampler 'parentbased_sometimes'"),
])
def test_an_exporter_vmcp_does_not_ship_is_one_line_and_exit_2(
        environ: dict[str, str], problem: str, tmp_path: Path) -> None:
    config = tmp_path / "vmcp.yaml"
    config.write_text((ROOT / "examples" / "quickstart.yaml").read_text())
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "serve", "--config", str(config),
                          "--port", "0"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                         env={**os.environ, **environ})
    assert run.returncode == 2, run.stderr
    assert problem in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("environ", [
    {}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_SDK_DISABLED": "true",
                                           "OTEL_TRACES_EXPORTER": "console"},
    {"OTEL_SERVICE_NAME": "gw"},
])
def test_traces_stay_off_unless_an_exporter_is_asked_for(environ: dict[str, str]) -> None:
    assert tracing.configure(environ) is None
    assert not tracing.enabled()


async def one_traced_call(url: str) -> None:
    """One session and one tools/call of clock_echo (its span is named after the tool)."""
    client = RawClient(url)
    try:
        assert (await client.initialize()).status == 200
        await client.request("tools/call", {"name": "clock_echo",
                                            "arguments": {"message": "traced"}})
    finally:
        await client.aclose()


def test_the_console_exporter_from_the_standard_variables(tmp_path: Path) -> None:
    """``OTEL_TRACES_EXPORTER=console``: ``vmcp serve`` says so at start and prints the span of
    a call (named after the tool, with the service name of ``OTEL_SERVICE_NAME``)."""
    docs = list(yaml.safe_load_all((ROOT / "examples" / "quickstart.yaml").read_text()))
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "gateway-under-test",
               "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with serving_process(docs, tmp_path, env=environ) as served:
        trio.run(one_traced_call, served.url)
    log = served.log()
    assert "traces: exporting to the console" in log
    assert '"name": "tools/call clock_echo"' in log
    assert '"service.name": "gateway-under-test"' in log


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_vmcp_proxy_puts_its_span_between_the_client_and_the_remote(
        traces: Traces, mode: str) -> None:
    """Through ``vmcp proxy`` the client's span, the proxy's span of the forwarded request and
    the remote's span are one chain: the proxy takes the context from the request's ``_meta``
    and gives the remote its own, in ``_meta`` and in the headers."""
    from vmcp_trio.app.proxy import build_proxy, serve_proxy
    from vmcp_trio.proxy.settings import ProxySettings

    tracer = _PROVIDER.get_tracer("the test client")
    remote, state = make_server("remote")
    async with serving(remote, state) as remote_url, trio.open_nursery() as nursery:
        stop = trio.Event()
        urls = await nursery.start(partial(
            serve_proxy, build_proxy(ProxySettings(server_name="remote", target_uri=remote_url,
                                                   drain_delay=0.0)),
            shutdown_trigger=stop.wait))
        async with httpx2.AsyncClient() as http, Client(streamable_http_client(
                urls[0], http_client=http), mode=mode) as client:
            with tracer.start_as_current_span("the user's work") as root:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
        stop.set()
    spans = _by_id(traces.spans())
    remote_span = next(s for s in spans.values()
                       if s.name == "tools/call add" and s.kind == "SERVER"
                       and s.trace_id == root.get_span_context().trace_id)
    assert _describe(_ancestry(remote_span, spans)) == [
        ("the test client", "INTERNAL", "the user's work"),
        ("mcp-python-sdk", "CLIENT", "MCP send tools/call add"),
        ("vmcp-trio", "SERVER", "POST /mcp"),
        ("mcp-python-sdk", "SERVER", "tools/call add"),
    ]
    assert state.traceparents and all(state.traceparents)


def test_a_telemetry_config_sends_the_gateways_traces_to_its_collector(tmp_path: Path) -> None:
    """``telemetryConfigRef`` to an MCPTelemetryConfig: ``vmcp serve`` exports its spans over
    OTLP to the configured endpoint, with the service name and the headers (one from a
    Secret) the manifest gives, and no OTEL_* variable set by hand."""
    docs = list(yaml.safe_load_all((ROOT / "examples" / "quickstart.yaml").read_text()))
    with otlp_receiver() as (endpoint, received):
        docs += [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "otel"},
             "stringData": {"key": "collector-key"}},
            {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPTelemetryConfig",
             "metadata": {"name": "shared-otel"},
             "spec": {"openTelemetry": {
                 "enabled": True, "endpoint": endpoint, "insecure": True,
                 "tracing": {"enabled": True, "samplingRate": "1.0"},
                 "headers": {"x-tenant": "acme"},
                 "sensitiveHeaders": [{"name": "x-key",
                                       "secretKeyRef": {"name": "otel", "key": "key"}}]}}},
        ]
        vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
        vmcp["spec"]["telemetryConfigRef"] = {"name": "shared-otel", "serviceName": "edge"}
        with serving_process(docs, tmp_path, env={"OTEL_BSP_SCHEDULE_DELAY": "100"}) as served:
            async def call() -> None:
                await one_traced_call(served.url)
                with trio.fail_after(10):
                    while not any(name == "tools/call clock_echo"
                                  for name, _ in received.spans):
                        await trio.sleep(0.05)
            trio.run(call)
        assert f"traces: exporting to OTLP (http/protobuf) to http://{endpoint}" in served.log()
        attributes = next(a for name, a in received.spans if name == "tools/call clock_echo")
        assert attributes["service.name"] == "edge"
        assert received.headers[0]["x-tenant"] == "acme"
        assert received.headers[0]["x-key"] == "collector-key"
        assert "collector-key" not in served.log()


def test_a_telemetry_ca_bundle_is_given_to_the_exporter_as_a_private_file() -> None:
    from vmcp_trio.app.serve import telemetry_environment
    from vmcp_trio.resources.plan import TelemetryPlan

    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    variables = telemetry_environment(TelemetryPlan((("OTEL_TRACES_EXPORTER", "otlp"),),
                                                     ca_bundle=pem))
    path = Path(variables["OTEL_EXPORTER_OTLP_CERTIFICATE"])
    assert path.read_text() == pem and path.stat().st_mode & 0o777 == 0o600
    assert variables["OTEL_TRACES_EXPORTER"] == "otlp"


# --- sampling, the OTLP encoding and the export queue ------------------------------------------

def _console_spans(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_the_sampler_of_the_standard_variables(capsys: pytest.CaptureFixture[str]) -> None:
    """``parentbased_traceidratio`` at 0: a root span is not recorded but its context travels
    (flags 00); a span whose parent was sampled is recorded in the parent's trace, one whose
    parent was not is not."""
    sampled_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    unsampled_parent = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    assert tracing.configure({"OTEL_TRACES_EXPORTER": "console",
                              "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                              "OTEL_TRACES_SAMPLER_ARG": "0"}) == "the console"
    try:
        with tracing.request_span("tools/call", "root", None, {}):
            carried = tracing.inject_meta({})["_meta"]["traceparent"]
        with tracing.request_span("tools/call", "child", {"traceparent": sampled_parent,
                                                          "tracestate": "vendor=1"}, {}):
            pass
        with tracing.request_span("tools/call", "ignored", {"traceparent": unsampled_parent},
                                  {}):
            pass
    finally:
        tracing.shutdown()
    assert carried.startswith("00-") and carried.endswith("-00")
    spans = _console_spans(capsys.readouterr().out)
    assert [s["name"] for s in spans] == ["tools/call child"]
    assert spans[0]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert spans[0]["parent_id"] == "00f067aa0ba902b7"


@pytest.mark.parametrize(("environ", "problem"), [
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER: unknown sampler 'sometimes'"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
     "OTEL_TRACES_SAMPLER_ARG: '2' is not a ratio"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "many"}, "OTEL_BSP_MAX_QUEUE_SIZE: 'many' is not a whole"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "x-key"}, "OTEL_EXPORTER_OTLP_HEADERS: 'x-key' has no"),
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_COMPRESSION: 'zstd'"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "is not an http(s) URL"),
])
def test_a_setting_that_cannot_be_used_is_named(environ: dict[str, str], problem: str) -> None:
    with pytest.raises(tracing.TracingUnavailable) as raised:
        tracing.configure({"OTEL_TRACES_EXPORTER": "otlp", **environ})
    assert problem in str(raised.value)
    assert not tracing.enabled()


def test_what_vmcp_encodes_is_what_the_official_otlp_messages_read() -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    finished: list[tracing.Span] = []
    tracing.use_sink(finished.append)
    try:
        with tracing.request_span("tools/call", "échec", {"traceparent": parent,
                                                          "tracestate": "a=1"},
                                  {"vmcp.backend": "notes", "retries": -3,
                                   "cached": True}) as span:
            span.fail("-32602", "no such tool")
            with tracing.backend_span("tools/call", "add", "notes"):
                pass
    finally:
        tracing.use_sink(None)
    body = export_request(finished, {"service.name": "edge"}, ("vmcp-trio", "9.9"))
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    resource_spans = request.resource_spans[0]
    assert resource_spans.resource.attributes[0].value.string_value == "edge"
    scope_spans = resource_spans.scope_spans[0]
    assert (scope_spans.scope.name, scope_spans.scope.version) == ("vmcp-trio", "9.9")
    call, served = scope_spans.spans  # the backend call ends first
    assert served.name == "tools/call échec" and served.kind == 2 and call.kind == 3
    assert served.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert served.parent_span_id.hex() == "00f067aa0ba902b7" and served.trace_state == "a=1"
    assert call.parent_span_id == served.span_id and call.trace_id == served.trace_id
    assert 0 < served.start_time_unix_nano <= call.start_time_unix_nano
    assert call.end_time_unix_nano <= served.end_time_unix_nano
    values = {a.key: a.value for a in served.attributes}
    assert values["vmcp.backend"].string_value == "notes"
    assert values["retries"].int_value == -3 and values["cached"].bool_value is True
    assert values["error.type"].string_value == "-32602"
    assert served.status.code == 2 and served.status.message == "no such tool"
    assert not call.HasField("status")


def test_the_export_queue_is_bounded_and_drops_what_does_not_fit() -> None:
    release = threading.Event()
    exported: list[int] = []

    class Blocked:
        def export(self, spans: Any, *, retry: bool) -> None:
            release.wait(5)
            exported.append(len(spans))

    export = BatchExport([Blocked()], {"OTEL_BSP_MAX_QUEUE_SIZE": "3",  # type: ignore[list-item]
                                       "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    for _ in range(3):
        export.add(object())  # type: ignore[arg-type]
    deadline = time.monotonic() + 5
    while export._queue and time.monotonic() < deadline:  # the thread took the full batch
        time.sleep(0.01)
    for _ in range(4):  # three wait while the collector is stuck; the fourth is dropped
        export.add(object())  # type: ignore[arg-type]
    assert export.dropped == 1
    release.set()
    export.shutdown()
    assert exported == [3, 3]


@pytest.mark.parametrize(("traceparent", "joined"), [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", True),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", True),  # a later version
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),  # upper case
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", False),
])
def test_a_traceparent_is_joined_only_when_valid(traceparent: str, joined: bool) -> None:
    finished: list[tracing.Span] = []
    tracing.use_sink(finished.append)
    try:
        with tracing.request_span("ping", None, {"traceparent": traceparent}, {}):
            pass
    finally:
        tracing.use_sink(None)
    (span,) = finished
    assert (span.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736") is joined
    assert bool(span.parent_id) is joined


def test_a_collector_that_never_answers_holds_neither_a_span_nor_the_exit() -> None:
    """Spans are queued whatever the collector does; at exit the export gets
    ``OTEL_BSP_EXPORT_TIMEOUT`` at most, not the exporter's own (much longer) timeout."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts (the kernel does), never answers
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "60000", "OTEL_BSP_EXPORT_TIMEOUT": "500"}
    try:
        assert tracing.configure(environ) is not None
        started = time.monotonic()
        for _ in range(100):
            with tracing.request_span("tools/call", "x", None, {}):
                pass
        assert time.monotonic() - started < 0.5
        started = time.monotonic()
        tracing.shutdown()
        assert time.monotonic() - started < 2.0
    finally:
        silent.close()


def test_tracestate_and_baggage_pass_on_bounded() -> None:
    """A context's tracestate and baggage travel to the backend as they came, within the W3C
    bounds (512 and 8192 characters); past them they are dropped, the trace still joined."""
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    finished: list[tracing.Span] = []
    tracing.use_sink(finished.append)
    try:
        carried = []
        for state, baggage in (("a=1", "user=x"), ("a=" + "1" * 600, "k=" + "v" * 9000)):
            with tracing.request_span("tools/call", "x", {"traceparent": parent,
                                                          "tracestate": state,
                                                          "baggage": baggage}, {}):
                carried.append(tracing.inject_meta({})["_meta"])
    finally:
        tracing.use_sink(None)
    assert carried[0]["tracestate"] == "a=1" and carried[0]["baggage"] == "user=x"
    assert "tracestate" not in carried[1] and "baggage" not in carried[1]
    assert all(meta["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
               for meta in carried)


def test_a_password_in_the_collector_url_is_never_shown(
        caplog: pytest.LogCaptureFixture) -> None:
    """What is logged of the endpoint (where traces go, a batch that could not be sent, a URL
    that cannot be used) leaves out a user and password written into it."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    silent.close()  # nothing listens: the export fails at once
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://trace-user:s3cr3t-pw@127.0.0.1:{port}",
               "OTEL_BSP_EXPORT_TIMEOUT": "2000"}
    where = tracing.configure(environ)
    assert where == f"OTLP (http/protobuf) to http://127.0.0.1:{port}"
    with tracing.request_span("tools/call", "x", None, {}):
        pass
    tracing.shutdown()
    assert "could not be exported" in caplog.text and "s3cr3t-pw" not in caplog.text
    with pytest.raises(tracing.TracingUnavailable) as refused:
        tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://u:s3cr3t-pw@host/"})
    assert "s3cr3t-pw" not in str(refused.value)
