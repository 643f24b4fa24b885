"""50,000 open streams in one gateway process, over HTTP/2.

Over HTTP/1.1 every open stream is a socket, and a process here may hold 20,000 files; over
HTTP/2 (cleartext, prior knowledge: what an L7 load balancer such as Envoy speaks to its
upstreams) a connection carries 100 concurrent streams (the server's
``SETTINGS_MAX_CONCURRENT_STREAMS``), so 50,000 sessions with their GET streams need 500
connections. The same gateway as ``bench/streams.py`` (one stdio notes backend shared by every
session); this process opens N sessions, each with its standalone stream, then measures:

* that every stream is open (the gateway's ``vmcp_open_streams`` gauge and each stream's 200);
* RSS per session with its stream, over HTTP/2;
* delivery of one notification to every stream: with the first 1,000 streams open, then with
  all N (the ratio shows how fan-out over HTTP/2 scales).

The client side is a small HTTP/2 client on the ``h2`` library (hypercorn's own HTTP/2 engine);
no installable load generator opens tens of thousands of long-lived SSE streams over HTTP/2 and
counts the events on each.

Run: ``python bench/http2_streams.py [--streams 50000]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import trio
from common import emit  # type: ignore[import-not-found]
from streams import MARKER, gauges, notes_gateway, rss_kb, trigger  # type: ignore[import-not-found]

STREAMS_PER_CONNECTION = 100
INITIALIZE = (b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
              b'"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}')
JSON_HEADERS = [(b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream")]


class _Stream:
    __slots__ = ("done", "events", "headers", "opened", "sse")

    def __init__(self, sse: bool) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.sse = sse
        self.events = 0
        self.opened = trio.Event()
        self.done = trio.Event()


class Connection:
    """One HTTP/2 connection: requests on new streams, a reader that counts each event
    stream's notifications (their arrival times in ``received``)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.authority = f"{host}:{port}".encode()
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.streams: dict[int, _Stream] = {}
        self.received: list[float] = []
        self.lock = trio.Lock()
        self.socket: trio.SocketStream | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        self.socket = await trio.open_tcp_stream(self.host, self.port)
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.h2.increment_flow_control_window(1 << 28)
        await self.flush()
        nursery.start_soon(self.read)

    async def flush(self) -> None:
        assert self.socket is not None
        async with self.lock:
            data = self.h2.data_to_send()
            if data:
                await self.socket.send_all(data)

    async def read(self) -> None:
        assert self.socket is not None
        while data := await self.socket.receive_some(65536):
            for event in self.h2.receive_data(data):
                stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
                if isinstance(event, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(event.flow_controlled_length,
                                                      event.stream_id)
                if stream is None:
                    continue
                if isinstance(event, h2.events.ResponseReceived):
                    stream.headers = dict(event.headers)  # type: ignore[arg-type]
                    stream.opened.set()
                elif isinstance(event, h2.events.DataReceived) and stream.sse:
                    count = bytes(event.data or b"").count(MARKER)
                    if count:
                        stream.events += count
                        self.received.extend([time.perf_counter()] * count)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    stream.opened.set()
                    stream.done.set()
            await self.flush()

    async def request(self, method: bytes, headers: list[tuple[bytes, bytes]],
                      body: bytes = b"", *, sse: bool = False) -> _Stream:
        """Send a request on a new stream; an event stream once its head is in, anything
        else once it ended."""
        stream_id = self.h2.get_next_available_stream_id()
        stream = self.streams[stream_id] = _Stream(sse)
        head = [(b":method", method), (b":path", b"/mcp"), (b":scheme", b"http"),
                (b":authority", self.authority), *headers]
        if body:
            head.append((b"content-length", b"%d" % len(body)))
        self.h2.send_headers(stream_id, head, end_stream=not body)
        if body:
            self.h2.send_data(stream_id, body, end_stream=True)
        await self.flush()
        if sse:
            await stream.opened.wait()
        else:
            await stream.done.wait()
            del self.streams[stream_id]
        return stream


async def open_session_with_stream(connection: Connection) -> bool:
    """initialize, then the session's GET stream; True when the stream opened (200)."""
    answer = await connection.request(b"POST", JSON_HEADERS, INITIALIZE)
    session_id = answer.headers.get(b"mcp-session-id")
    if session_id is None:
        return False
    stream = await connection.request(
        b"GET", [(b"accept", b"text/event-stream"), (b"mcp-session-id", session_id),
                 (b"mcp-protocol-version", b"2025-11-25")], sse=True)
    return stream.headers.get(b":status") == b"200" and not stream.done.is_set()


async def delivery(url: str, connections: list[Connection], expected: int
                   ) -> dict[str, float]:
    marks = [len(connection.received) for connection in connections]
    sent = await trigger(url)
    with trio.move_on_after(120):
        while sum(len(c.received) - m for c, m in zip(connections, marks, strict=True)) < expected:
            await trio.sleep(0.05)
    latencies = sorted(at - sent for c, m in zip(connections, marks, strict=True)
                       for at in c.received[m:])
    if not latencies:
        return {"delivered": 0}
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)  # noqa: E731
    return {"delivered": len(latencies), "p50_s": pick(0.5), "p99_s": pick(0.99)}


async def run(url: str, pid: int, n: int) -> tuple[dict[str, object], dict[str, float]]:
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0])
    limiter = trio.CapacityLimiter(200)
    opened = 0

    async def one(connection: Connection) -> None:
        nonlocal opened
        async with limiter:
            ok = await open_session_with_stream(connection)
        opened += ok  # (not `opened += await ...`: that reads `opened` before the wait)

    async def open_sessions(connections: list[Connection], count: int) -> None:
        async with trio.open_nursery() as openers:
            for index in range(count):
                openers.start_soon(one, connections[index // STREAMS_PER_CONNECTION])

    first = min(1000, n)
    async with trio.open_nursery() as nursery:
        connections = []
        for _ in range(-(-n // STREAMS_PER_CONNECTION)):
            connection = Connection(host, port)
            await connection.start(nursery)
            connections.append(connection)
        few = connections[:-(-first // STREAMS_PER_CONNECTION)]
        await open_sessions(few, first)
        small = await delivery(url, few, first)
        rss_start = rss_kb(pid)
        started_at = time.perf_counter()
        await open_sessions(connections[len(few):], n - first)
        setup_seconds = time.perf_counter() - started_at
        await trio.sleep(1)
        rss_all = rss_kb(pid)
        open_gauges = await gauges(url)
        large = await delivery(url, connections, n)
        nursery.cancel_scope.cancel()
    per_session = (rss_all - rss_start) / max(1, n - first)
    metrics: dict[str, object] = {
        "streams": n, "connections": len(connections), "opened": opened,
        "setup_seconds": round(setup_seconds, 1),
        "rss_kb": {"start": rss_start, "all": rss_all},
        "rss_kb_per_session_with_stream": round(per_session, 1),
        "gauges_open": open_gauges,
        f"delivery_{first}_streams": small, f"delivery_{n}_streams": large,
    }
    ratios = {
        "open_fraction": round(min(opened, open_gauges.get("vmcp_open_streams", 0)) / n, 4),
        "delivered_fraction": round(large.get("delivered", 0) / n, 4),
        "delivery_p99_all_vs_first": round(large.get("p99_s", 0) / max(small.get("p99_s", 1),
                                                                        0.01), 2),
    }
    return metrics, ratios


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=50_000)
    args = parser.parse_args()
    with notes_gateway(args.streams, "http2-streams") as (url, pid):
        metrics, ratios = trio.run(run, url, pid, args.streams)
    print(metrics, file=sys.stderr)
    emit("http2_streams", metrics, ratios)


if __name__ == "__main__":
    main()
