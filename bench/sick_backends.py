"""A session opening over ten backends when two are sick, against ten healthy ones, in one run.

Three gateways in turn, each over ten backends: all healthy (ten names for one raw trio + h11
floor backend); then eight healthy, one that takes connections and never answers (a listening
socket nobody accepts from: the kernel completes the handshake, nothing reads), and one stdio
process that exits at once, under ``partialFailureMode: best_effort`` and then ``fail``. For
each, ``--sessions`` clients one after the other (the first ones arrive before any health check
ran) time ``initialize`` + ``tools/list``: p50, p99, max, and whether every one was answered
with the healthy backends' tools.

Target: p99 <= 1 s with the sick backends, in both modes.

Run: ``python bench/sick_backends.py [--sessions 30]``.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import trio
from common import (  # type: ignore[import-not-found]
    _exchange,
    _request,
    emit,
    floor_command,
    free_port,
    started,
)

HEALTHY = 8


def config(floor_url: str, hung_url: str | None, mode: str) -> Path:
    names = [f"ok{i}" for i in range(HEALTHY + (0 if hung_url else 2))]
    docs = ["apiVersion: toolhive.stacklok.dev/v1alpha1\nkind: MCPGroup\nmetadata: {name: b}"]
    docs += [f"apiVersion: toolhive.stacklok.dev/v1alpha1\nkind: MCPServer\n"
             f"metadata: {{name: {name}}}\nspec: {{groupRef: {{name: b}}, url: \"{floor_url}\"}}"
             for name in names]
    if hung_url:
        docs.append(f"apiVersion: toolhive.stacklok.dev/v1alpha1\nkind: MCPServer\n"
                    f"metadata: {{name: hung}}\nspec: {{groupRef: {{name: b}}, "
                    f"url: \"{hung_url}\"}}")
        docs.append(f"apiVersion: toolhive.stacklok.dev/v1alpha1\nkind: MCPServer\n"
                    f"metadata: {{name: gone}}\nspec: {{groupRef: {{name: b}}, "
                    f"command: \"{sys.executable}\", args: [\"-c\", \"raise SystemExit(3)\"]}}")
    docs.append(f"""apiVersion: toolhive.stacklok.dev/v1alpha1
kind: VirtualMCPServer
metadata: {{name: b}}
spec:
  groupRef: {{name: b}}
  incomingAuth: {{type: anonymous}}
  operational:
    timeouts: {{default: 30s}}
    failureHandling: {{healthCheckInterval: 1s, healthCheckTimeout: 500ms,
                      unhealthyThreshold: 1, partialFailureMode: {mode}}}""")
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
    handle.write("\n---\n".join(docs))
    handle.close()
    return Path(handle.name)


async def open_sessions(url: str, count: int, healthy: int) -> dict[str, float | int]:
    parts = urlsplit(url)
    host = f"{parts.hostname}:{parts.port}".encode()
    times: list[float] = []
    complete = 0
    for i in range(count):
        stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
        began = time.perf_counter()
        _, headers, _ = await _exchange(stream, _request(parts.path, host, b"", orjson.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}})))
        extra = (b"mcp-session-id: " + headers.get(b"mcp-session-id", b"") +
                 b"\r\nmcp-protocol-version: 2025-11-25\r\n")
        _, _, body = await _exchange(stream, _request(parts.path, host, extra, orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})))
        times.append(time.perf_counter() - began)
        tools = orjson.loads(body).get("result", {}).get("tools", [])
        complete += len(tools) == healthy
        await stream.aclose()
        if i < count - 1:
            await trio.sleep(0.05)
    times.sort()
    return {"p50_ms": round(times[len(times) // 2] * 1e3, 1),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3, 1),
            "max_ms": round(times[-1] * 1e3, 1), "with_every_healthy_backend": complete,
            "sessions": count}


def phase(floor_url: str, hung_url: str | None, mode: str, sessions: int) -> dict[str, float]:
    path = config(floor_url, hung_url, mode)
    port = free_port()
    with started([sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                  "--config", str(path), "--port", str(port)], cpu=None,
                 ready_line="MCP endpoint"):
        result = trio.run(open_sessions, f"http://127.0.0.1:{port}/mcp", sessions,
                          HEALTHY if hung_url else HEALTHY + 2)
    path.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=30)
    args = parser.parse_args()
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(1024)  # never accepted: connections complete, nobody reads or answers
    hung_url = f"http://127.0.0.1:{hung.getsockname()[1]}/mcp"
    with started(floor_command(), cpu=None, ready_line="listening") as (_, line):
        floor_url = line.split()[-1]
        healthy = phase(floor_url, None, "fail", args.sessions)
        best_effort = phase(floor_url, hung_url, "best_effort", args.sessions)
        fail = phase(floor_url, hung_url, "fail", args.sessions)
    hung.close()
    metrics = {"healthy": healthy, "sick_best_effort": best_effort, "sick_fail": fail}
    ratios = {
        "sick_vs_healthy_p99_best_effort": round(best_effort["p99_ms"] / healthy["p99_ms"], 2),
        "sick_vs_healthy_p99_fail": round(fail["p99_ms"] / healthy["p99_ms"], 2),
        "sick_p99_seconds_best_effort": round(best_effort["p99_ms"] / 1e3, 3),
        "sick_p99_seconds_fail": round(fail["p99_ms"] / 1e3, 3),
    }
    print(metrics, file=sys.stderr)
    emit("sick_backends", metrics, ratios)


if __name__ == "__main__":
    main()
