"""Shared pieces of the benchmarks: processes pinned to CPUs, their CPU time, a load generator
of concurrent MCP sessions, and the one-JSON-line result format of CONTRACT.md."""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import trio

ROOT = Path(__file__).resolve().parent.parent


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ACCEPT = "application/json, text/event-stream"


def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def pin_self(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def started(cmd: Sequence[str], *, cpu: int | None, ready_line: str | None = None,
            env: dict[str, str] | None = None, stderr: Any = subprocess.DEVNULL) -> Any:
    """A subprocess pinned to ``cpu``; waits for ``ready_line`` on its stdout (RuntimeError
    when it exits first or does not say it within 60 s). ``stderr``: where its stderr goes
    (an open file, to report a failure)."""
    prefix = ["taskset", "-c", str(cpu)] if cpu is not None else []
    process = subprocess.Popen([*prefix, *cmd], stdout=subprocess.PIPE, stderr=stderr,
                               text=True, env=env, cwd=ROOT)
    try:
        first = ""
        if ready_line is not None:
            assert process.stdout is not None
            deadline = time.time() + 60
            while ready_line not in first and time.time() < deadline:
                first = process.stdout.readline()
                if not first and process.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited: {process.returncode}")
            if ready_line not in first:
                raise RuntimeError(f"{cmd[0]}: no {ready_line!r} within 60 s")
        yield process, first.strip()
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def url_backend(name: str, url: str, group: str = "bench") -> str:
    """An MCPServer document for the backend at ``url`` in ``group`` (YAML, after a ``---``)."""
    return f"""---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPServer
metadata: {{name: {name}}}
spec: {{groupRef: {{name: {group}}}, url: "{url}"}}
"""


def gateway_config(backend_url: str, incoming: str = "{type: anonymous}", *,
                   more: str = "") -> Path:
    """One VirtualMCPServer in front of one URL backend, names unprefixed; ``incoming`` is the
    ``incomingAuth`` block (YAML flow style); ``more``: YAML appended to the gateway's spec
    (more of its fields, indented by two, then further documents)."""
    text = f"""
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPGroup
metadata: {{name: bench}}
{url_backend("floor", backend_url)}---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: VirtualMCPServer
metadata: {{name: bench}}
spec:
  groupRef: {{name: bench}}
  incomingAuth: {incoming}
  aggregation: {{conflictResolution: manual}}
  operational: {{failureHandling: {{healthCheckInterval: 1h, healthCheckTimeout: 10s}}}}
{more}"""
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
    handle.write(text)
    handle.close()
    return Path(handle.name)


@dataclass
class LoadResult:
    calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


STATELESS_HEADERS = (b"mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\n"
                     b"mcp-name: echo\r\n")
"""What a 2026-07-28 client sends with each tools/call of ``echo`` (no session)."""
STATELESS_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}


async def open_session(url: str, auth: bytes = b"", *, stateless: bool = False
                       ) -> tuple[trio.SocketStream, bytes, bytes]:
    """A connection and an initialized session: (stream, host header, session headers);
    ``auth`` is a header line sent with every request (``authorization: Bearer ...\r\n``).
    ``stateless``: a 2026-07-28 client, which opens no session (its headers instead)."""
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    host = f"{parts.hostname}:{parts.port}".encode()
    if stateless:
        return stream, host, auth + STATELESS_HEADERS
    body = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}})
    _, headers, _ = await _exchange(stream, _request(parts.path, host, auth, body))
    session = headers.get(b"mcp-session-id")
    extra = auth + (b"mcp-session-id: " + session + b"\r\nmcp-protocol-version: 2025-11-25\r\n"
                    if session else b"")
    await _exchange(stream, _request(parts.path, host, extra,
                                     b'{"jsonrpc":"2.0","method":"notifications/initialized"}'))
    return stream, host, extra


def _request(path: str, host: bytes, extra: bytes, body: bytes) -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nhost: " + host
            + b"\r\naccept: application/json, text/event-stream\r\n"
            b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\n" + extra + b"\r\n" + body)


async def _exchange(stream: trio.SocketStream,
                    request: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request/response on a keep-alive connection (Content-Length bodies, or a chunked
    event stream read to its end, undecoded). Deliberately minimal, so the load generator costs
    little and the servers, not it, are what saturates."""
    await stream.send_all(request)
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("closed")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":  # an SSE reply
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("closed")
            rest += chunk
        return status, headers, rest
    length = int(headers.get(b"content-length", b"0"))
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return status, headers, rest


async def generate_load(url: str, *, sessions: int, warmup: float, duration: float,
                        text: str = "hello", auth: bytes = b"", tool: str = "echo",
                        stateless: bool = False) -> LoadResult:
    """``sessions`` concurrent MCP sessions (one connection each) calling tools/call of
    ``tool`` back to back; ``stateless``: 2026-07-28 clients (a connection each, no
    session)."""
    result = LoadResult()
    ids = itertools.count(1)
    state = {"measuring": False, "stop": False}
    path = urlsplit(url).path

    async def worker() -> None:
        stream, host, extra = await open_session(url, auth, stateless=stateless)
        params: dict[str, Any] = {"name": tool, "arguments": {"text": text}}
        if stateless:
            params["_meta"] = STATELESS_META
        while not state["stop"]:
            body = orjson.dumps({"jsonrpc": "2.0", "id": next(ids), "method": "tools/call",
                                 "params": params})
            started_at = time.perf_counter()
            try:
                status, _, data = await _exchange(stream, _request(path, host, extra, body))
            except (ConnectionError, trio.BrokenResourceError):
                # The server recycled the connection (keep-alive limit): reconnect, same session.
                await stream.aclose()
                parts = urlsplit(url)
                stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1",
                                                    parts.port or 80)
                continue
            elapsed = time.perf_counter() - started_at
            if state["measuring"]:
                if status == 200 and b'"result"' in data:
                    result.calls += 1
                    result.latencies.append(elapsed)
                else:
                    result.errors += 1
        await stream.aclose()

    await run_workers(worker, sessions=sessions, warmup=warmup, duration=duration,
                      state=state, result=result)
    return result


async def run_workers(worker: Callable[[], Awaitable[None]], *, sessions: int, warmup: float,
                      duration: float, state: dict[str, bool], result: LoadResult) -> None:
    """``sessions`` copies of ``worker`` for ``warmup`` + ``duration`` seconds:
    ``state["measuring"]`` is true during the measured part (its length in
    ``result.seconds``), ``state["stop"]`` once it is over; back when every worker is."""
    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(worker)
        await trio.sleep(warmup)
        state["measuring"] = True
        began = time.perf_counter()
        await trio.sleep(duration)
        state["measuring"] = False
        result.seconds = time.perf_counter() - began
        state["stop"] = True


def emit(name: str, metrics: dict[str, Any], ratios: dict[str, float]) -> None:
    """The last line of every benchmark (CONTRACT.md)."""
    print(json.dumps({"bench": name, "metrics": metrics, "ratios": ratios}))


@contextmanager
def serve_in_thread(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A stdlib HTTP server with ``handler`` on a free loopback port, in a thread of this
    process; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@contextmanager
def jwks_server(document: dict[str, Any]) -> Iterator[str]:
    """A local JWKS endpoint; yields its URL."""
    body = json.dumps(document).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("cache-control", "max-age=3600")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serve_in_thread(Handler) as base:
        yield base + "/jwks"


def rsa_jwk(public: Any, kid: str) -> dict[str, Any]:
    """The public JWK (RS256) of an RSA public key."""
    numbers = public.public_numbers()

    def b64(value: int) -> str:
        raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return {"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64(numbers.n),
            "e": b64(numbers.e)}


async def fixed_calls(url: str, *, auths: Sequence[bytes], calls: int) -> LoadResult:
    """``calls`` tools/call spread evenly over one MCP session per entry of ``auths`` (each an
    ``authorization: ...\r\n`` header line, or b""), all sessions concurrent. Each session is
    opened and makes one unmeasured call first, one session at a time, so that no reply in the
    measured part is slow enough to turn into an event stream (this load generator reads only
    JSON replies)."""
    result = LoadResult()
    ids = itertools.count(1)
    path = urlsplit(url).path
    per_client = calls // len(auths)

    def call_body() -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": next(ids), "method": "tools/call",
                             "params": {"name": "echo", "arguments": {"text": "x"}}})

    sessions = []
    for auth in auths:
        stream, host, extra = await open_session(url, auth)
        await _exchange(stream, _request(path, host, extra, call_body()))
        sessions.append((stream, host, extra))

    async def worker(stream: trio.SocketStream, host: bytes, extra: bytes) -> None:
        for _ in range(per_client):
            started_at = time.perf_counter()
            status, _, data = await _exchange(stream, _request(path, host, extra, call_body()))
            if status == 200 and b'"result"' in data:
                result.calls += 1
                result.latencies.append(time.perf_counter() - started_at)
            else:
                result.errors += 1
        await stream.aclose()

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(worker, *session)
    result.seconds = time.perf_counter() - began
    return result


def load_arguments(description: str | None = None, *, rounds: int = 1) -> argparse.Namespace:
    """The options of a benchmark that loads a gateway with MCP sessions: ``--sessions``,
    ``--warmup`` and ``--duration`` (seconds per phase), and ``--rounds`` (of every phase,
    alternated, for :func:`median_run`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args()


def median_run(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Rounds of one phase as one: the median of each figure, and each figure's range
    (``<name>_range``: the lowest and highest round) when there were several."""
    merged: dict[str, Any] = {}
    for name in runs[0]:
        values = sorted(run[name] for run in runs)
        merged[name] = statistics.median(values)
        if len(values) > 1:
            merged[f"{name}_range"] = [values[0], values[-1]]
    return merged


def measure_phase(url: str, pids: dict[str, int], args: argparse.Namespace, *,
                  stateless: bool = False) -> dict[str, float]:
    """Load ``url`` with ``args.sessions`` MCP sessions (``args.warmup`` + ``args.duration``
    seconds; ``stateless``: 2026-07-28 clients): requests per second, p50/p99 latency, errors,
    and CPU microseconds per call of each process of ``pids`` (from /proc/PID/stat)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    result = trio.run(lambda: generate_load(url, sessions=args.sessions, warmup=args.warmup,
                                            duration=args.duration, stateless=stateless))
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    return phase_figures(result, before, after, args)


def phase_figures(result: LoadResult, before: dict[str, float], after: dict[str, float],
                  args: argparse.Namespace) -> dict[str, float]:
    """A phase's requests per second, p50/p99 latency, errors, and CPU microseconds per call of
    each process from its CPU seconds ``before`` and ``after`` the load (warm-up included:
    divided by all the calls made while it was counted)."""
    total_calls = result.calls * (args.warmup + args.duration) / args.duration
    out = {"rps": round(result.rate, 1), "p50_ms": round(result.percentile(0.5) * 1e3, 3),
           "p99_ms": round(result.percentile(0.99) * 1e3, 3), "errors": result.errors}
    for name in before:
        out[f"{name}_cpu_us_per_call"] = round(
            (after[name] - before[name]) / max(total_calls, 1) * 1e6, 1)
    return out


def gateway_phase(args: argparse.Namespace, *, server_cpu: int, load_cpu: int,
                  stateless: bool = False) -> dict[str, float]:
    """``measure_phase`` through ``vmcp serve`` (alone on ``server_cpu``) in front of a floor
    backend (on ``load_cpu``, with the load generator); ``stateless``: 2026-07-28 clients."""
    python = sys.executable
    with started(floor_command(), cpu=load_cpu, ready_line="listening") as (backend, line):
        port = free_port()
        config = gateway_config(line.split()[-1])
        with started([python, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                      "--config", str(config), "--port",
                      str(port)], cpu=server_cpu, ready_line="MCP endpoint") as (gateway, _):
            via = measure_phase(f"http://127.0.0.1:{port}/mcp",
                                {"vmcp": gateway.pid, "floor": backend.pid}, args,
                                stateless=stateless)
        config.unlink()
    return via


def server_and_load_cpus() -> tuple[int, int]:
    """The CPU the process under test gets alone (the first), and the load generator's (the
    last), to which this process is pinned."""
    available = cpus()
    pin_self(available[-1])
    return available[0], available[-1]


def floor_command() -> list[str]:
    """The raw trio + h11 backend (``bench/floor_backend.py``) on a free port."""
    return [sys.executable, "bench/floor_backend.py", "--port", "0"]


@contextmanager
def logged(cmd: Sequence[str], *, cpu: int, ready_line: str | None,
           log: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """:func:`started` with the process's stderr in ``log``, so a failure can be reported."""
    with log.open("w") as errors, started(cmd, cpu=cpu, ready_line=ready_line,
                                           stderr=errors) as running:
        yield running


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log (empty when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def direct_phase(args: argparse.Namespace, server_cpu: int) -> dict[str, float]:
    """``measure_phase`` straight to a floor backend alone on ``server_cpu``: the yardstick."""
    with started(floor_command(), cpu=server_cpu, ready_line="listening") as (backend, line):
        return measure_phase(line.split()[-1], {"floor": backend.pid}, args)
