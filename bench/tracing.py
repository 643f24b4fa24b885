"""What traces cost: tools/call through vmcp with traces off and on, in one run; and the off
path alone.

Three measurements:

* **off**: ``vmcp serve`` as shipped (no ``OTEL_*`` variables): CPU microseconds per call;
* **on**: the same with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, exporting every span (two per
  call: the request and its backend call) over OTLP http/protobuf to a local sink (a stdlib
  server in a thread of this process, answering 200 to every batch);
* **off path**: the calls a request makes into ``vmcp_trio.runtime.tracing`` when traces are
  off (``incoming``, ``request_span``, ``backend_span``, ``inject_meta``, ``inject_headers``),
  timed in this process, in nanoseconds per request: what "off" adds to a call compared with a
  gateway without tracing code at all.

The setting is bench/gateway_overhead.py's (the floor backend, 32 sessions, vmcp alone on CPU
0). Ratios: ``vmcp_cpu_on_vs_off`` and ``off_path_share_of_call`` (off-path time over the CPU
time of a whole call with traces off).

Run: ``python bench/tracing.py [--sessions 32] [--duration 8]``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from common import (  # type: ignore[import-not-found]
    emit,
    floor_command,
    free_port,
    gateway_config,
    load_arguments,
    measure_phase,
    serve_in_thread,
    server_and_load_cpus,
    started,
)

from vmcp_trio.runtime import tracing


@contextmanager
def otlp_sink() -> Iterator[tuple[str, list[int]]]:
    """A local OTLP/HTTP endpoint that accepts every export; yields its URL and a one-item list
    counting the batches received."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            received[0] += 1
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serve_in_thread(Handler) as url:
        yield url, received


def off_path_ns(rounds: int = 200_000) -> float:
    """Nanoseconds per request of the tracing calls a request makes when traces are off."""
    assert not tracing.enabled()
    headers = {"content-type": "application/json", "mcp-session-id": "x" * 32}
    params: dict[str, Any] = {"name": "add", "arguments": {"a": 1}, "_meta": {"progressToken": 1}}
    outgoing: list[tuple[str, str]] = []
    started_at = time.perf_counter_ns()
    for _ in range(rounds):
        with tracing.incoming(headers), \
                tracing.request_span("tools/call", "add", params["_meta"], {}) as span, \
                tracing.backend_span("tools/call", "add", "floor") as call:
            tracing.inject_meta(params)
            tracing.inject_headers(outgoing)
            span.set("vmcp.backend", "floor")
            call.set("vmcp.backend", "floor")
    return (time.perf_counter_ns() - started_at) / rounds


def main() -> None:
    args = load_arguments()
    server_cpu, load_cpu = server_and_load_cpus()
    python = sys.executable
    floor = floor_command()
    phases: dict[str, dict[str, float]] = {}
    batches = 0
    with started(floor, cpu=load_cpu, ready_line="listening") as (_, line), \
            otlp_sink() as (sink, received):
        config = gateway_config(line.split()[-1])
        environments = {
            "off": dict(os.environ),
            "on": {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
                   "OTEL_SERVICE_NAME": "vmcp-bench"},
        }
        for name, environ in environments.items():
            port = free_port()
            with started([python, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                          "--config", str(config), "--port", str(port)], cpu=server_cpu,
                         ready_line="MCP endpoint", env=environ) as (gateway, _):
                phases[name] = measure_phase(f"http://127.0.0.1:{port}/mcp",
                                             {"vmcp": gateway.pid}, args)
        batches = received[0]
        config.unlink()
    off_ns = off_path_ns()
    off_cpu, on_cpu = phases["off"]["vmcp_cpu_us_per_call"], phases["on"]["vmcp_cpu_us_per_call"]
    metrics = {"sessions": args.sessions, "off": phases["off"], "on": phases["on"],
               "otlp_batches_received": batches, "off_path_ns_per_request": round(off_ns, 1)}
    ratios = {"vmcp_cpu_on_vs_off": round(on_cpu / off_cpu, 3),
              "rps_on_vs_off": round(phases["on"]["rps"] / phases["off"]["rps"], 3),
              "off_path_share_of_call": round(off_ns / 1000 / off_cpu, 5)}
    print(f"off: {phases['off']}\non: {phases['on']}\noff path: {off_ns:.0f} ns/request",
          file=sys.stderr)
    emit("tracing", metrics, ratios)


if __name__ == "__main__":
    main()
