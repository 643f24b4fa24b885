"""10,000 concurrent open streams in one gateway process.

One vmcp process with one stdio backend (the example notes server, shared by all sessions).
This process opens N client sessions (one keep-alive connection each), then an SSE GET stream on
every one of them, and measures:

* RSS of the gateway per idle session, and per open stream on top of that, over the N - 100
  sessions opened after the first hundred (target: <= 24 KB together);
* delivery latency of a notification to every open stream: a note is added, the backend sends
  ``resources/list_changed``, the gateway fans it out to every session's GET stream; measured
  with 100 sessions, each with its stream open, and then with all N (the ratio shows how
  fan-out scales);
* teardown: after the clients disconnect and DELETE their sessions, the gateway's
  ``vmcp_open_streams`` and ``vmcp_sessions`` gauges return to zero (and how long that takes).

Run: ``python bench/streams.py [--streams 10000]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import trio
from common import (  # type: ignore[import-not-found]
    ROOT,
    _exchange,
    _request,
    cpus,
    emit,
    free_port,
    pin_self,
    started,
)

CONFIG = """
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPGroup
metadata: {name: streams}
---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPServer
metadata: {name: notes}
spec: {groupRef: {name: streams}, command: "%s", args: ["%s"]}
---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: VirtualMCPServer
metadata: {name: streams}
spec:
  groupRef: {name: streams}
  incomingAuth: {type: anonymous}
  aggregation: {conflictResolution: manual}
"""
MARKER = b"resources/list_changed"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Client:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        self.host_header = f"{self.host}:{self.port}".encode()
        self.stream: trio.SocketStream | None = None
        self.extra = b""
        self.session_id = b""
        self.seen = 0
        self.received: list[float] = []

    async def connect_and_initialize(self) -> None:
        self.stream = await trio.open_tcp_stream(self.host, self.port)
        body = (b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
                b'"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}')
        _, headers, _ = await _exchange(self.stream, _request(self.path, self.host_header, b"",
                                                              body))
        self.session_id = headers[b"mcp-session-id"]
        self.extra = (b"mcp-session-id: " + self.session_id
                      + b"\r\nmcp-protocol-version: 2025-11-25\r\n")

    async def open_stream(self, opened: trio.Semaphore) -> None:
        """GET the standalone stream and count notifications until cancelled."""
        assert self.stream is not None
        await self.stream.send_all(
            b"GET " + self.path.encode() + b" HTTP/1.1\r\nhost: " + self.host_header
            + b"\r\naccept: text/event-stream\r\n" + self.extra + b"\r\n")
        buffer = b""
        released = False
        while True:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return
            if not released:
                opened.release()
                released = True
            buffer = buffer[-64:] + chunk
            count = buffer.count(MARKER)
            if count:
                now = time.perf_counter()
                self.received.extend([now] * count)
                buffer = buffer[buffer.rfind(MARKER) + len(MARKER):]


async def trigger(url: str) -> float:
    """Add a note through a fresh session; returns when the call was sent."""
    client = Client(url)
    await client.connect_and_initialize()
    assert client.stream is not None
    body = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add_note",'
            b'"arguments":{"title":"t","text":"x"}}}')
    sent = time.perf_counter()
    await _exchange(client.stream, _request(client.path, client.host_header, client.extra, body))
    await client.stream.aclose()
    return sent


async def measure_delivery(url: str, clients: list[Client], expected: int) -> dict[str, float]:
    marks = [len(c.received) for c in clients]
    sent = await trigger(url)
    with trio.move_on_after(60):
        while sum(len(c.received) - m for c, m in zip(clients, marks, strict=True)) < expected:
            await trio.sleep(0.01)
    latencies = sorted(c.received[m] - sent for c, m in zip(clients, marks, strict=True)
                       if len(c.received) > m)
    if not latencies:
        return {"delivered": 0}
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 2)  # noqa: E731
    return {"delivered": len(latencies), "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "max_ms": round(latencies[-1] * 1e3, 2)}


async def gauges(url: str) -> dict[str, float]:
    base = url.removesuffix("/mcp")
    parts = urlsplit(base)
    stream = await trio.open_tcp_stream(parts.hostname or "", parts.port or 80)
    await stream.send_all(b"GET /metrics HTTP/1.1\r\nhost: " + parts.netloc.encode()
                          + b"\r\nconnection: close\r\n\r\n")
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    await stream.aclose()
    out = {}
    for line in data.decode().splitlines():
        for name in ("vmcp_open_streams", "vmcp_sessions"):
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


async def run(url: str, pid: int, n: int) -> tuple[dict[str, object], dict[str, float]]:
    limiter = trio.CapacityLimiter(200)
    clients = [Client(url) for _ in range(n)]

    async def init(client: Client) -> None:
        async with limiter:
            await client.connect_and_initialize()

    async def initialize(group: list[Client]) -> None:
        async with trio.open_nursery() as nursery:
            for client in group:
                nursery.start_soon(init, client)

    warm = Client(url)
    await warm.connect_and_initialize()
    first = min(100, n)
    few, rest = clients[:first], clients[first:]
    await initialize(few)
    async with trio.open_nursery() as nursery:
        opened = trio.Semaphore(0, max_value=n)
        for client in few:
            nursery.start_soon(client.open_stream, opened)
        for _ in range(first):
            await opened.acquire()
        small = await measure_delivery(url, few, first)  # 100 sessions, each with its stream

        rss_start = rss_kb(pid)
        started_at = time.perf_counter()
        await initialize(rest)
        setup_seconds = time.perf_counter() - started_at
        rss_sessions = rss_kb(pid)
        for client in rest:
            nursery.start_soon(client.open_stream, opened)
        with trio.fail_after(300):
            for _ in range(n - first):
                await opened.acquire()
        await trio.sleep(1)
        rss_streams = rss_kb(pid)
        open_gauges = await gauges(url)
        large = await measure_delivery(url, clients, n)
        nursery.cancel_scope.cancel()

    teardown_started = time.perf_counter()
    for client in clients:
        assert client.stream is not None
        await client.stream.aclose()

    async def delete(client: Client) -> None:
        async with limiter:
            stream = await trio.open_tcp_stream(client.host, client.port)
            await stream.send_all(b"DELETE " + client.path.encode() + b" HTTP/1.1\r\nhost: "
                                  + client.host_header + b"\r\n" + client.extra
                                  + b"connection: close\r\n\r\n")
            while await stream.receive_some(4096):
                pass
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(delete, client)
    final: dict[str, float] = {}
    with trio.move_on_after(60):
        while True:
            final = await gauges(url)
            # Left: the warm-up session and the two trigger sessions, never deleted.
            if final.get("vmcp_open_streams") == 0 and final.get("vmcp_sessions", 9) <= 3:
                break
            await trio.sleep(0.2)
    teardown_seconds = time.perf_counter() - teardown_started

    per_session = (rss_sessions - rss_start) / max(1, n - first)
    per_stream = (rss_streams - rss_sessions) / max(1, n - first)
    metrics: dict[str, object] = {
        "streams": n, "setup_seconds": round(setup_seconds, 1),
        "rss_kb": {"start": rss_start, "sessions": rss_sessions, "streams": rss_streams},
        "rss_kb_per_session": round(per_session, 1), "rss_kb_per_stream": round(per_stream, 1),
        "rss_kb_per_session_with_stream": round(per_session + per_stream, 1),
        "gauges_open": open_gauges, "gauges_after_teardown": final,
        "teardown_seconds": round(teardown_seconds, 2),
        "delivery_100_streams": small, f"delivery_{n}_streams": large,
    }
    ratios = {
        "delivery_p99_all_vs_100": round(large.get("p99_ms", 0) / max(small.get("p99_ms", 1),
                                                                       0.01), 2),
        "rss_per_stream_vs_per_session": round(per_stream / per_session, 2) if per_session
        else 0.0,
        "delivered_fraction": round(large.get("delivered", 0) / n, 4),
    }
    return metrics, ratios


@contextmanager
def notes_gateway(streams: int, name: str) -> Iterator[tuple[str, int]]:
    """``(url, pid)`` of a gateway over one stdio notes backend, pinned to the first CPU (this
    process to the last), allowed ``streams`` sessions (and a hundred more) from one address;
    the file limit raised to its hard bound."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    available = cpus()
    pin_self(available[-1])
    config = Path(ROOT / "bench" / "results" / f"{name}-config.yaml")
    config.parent.mkdir(exist_ok=True)
    config.write_text(CONFIG % (sys.executable, ROOT / "examples/servers/notes_server.py"))
    port = free_port()
    # Every session of the bench comes from one address (one anonymous client, as far as the
    # per-client bound can tell): lift that bound with the global one.
    sessions = str(streams + 100)
    try:
        with started([sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                      "--config", str(config), "--port", str(port), "--max-sessions", sessions,
                      "--max-sessions-per-client", sessions],
                     cpu=available[0], ready_line="MCP endpoint") as (gateway, _):
            yield f"http://127.0.0.1:{port}/mcp", gateway.pid
    finally:
        config.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=10_000)
    args = parser.parse_args()
    with notes_gateway(args.streams, "streams") as (url, pid):
        metrics, ratios = trio.run(run, url, pid, args.streams)
    print(metrics, file=sys.stderr)
    emit("streams", metrics, ratios)


if __name__ == "__main__":
    main()
