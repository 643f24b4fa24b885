"""Capacity planning: tools/call through haproxy with 1, 2 and 3 replicas sharing a Redis, the
Redis session cost per call, and memory per session and per open stream, in one run.

Every phase goes through haproxy (``balance roundrobin``, no stickiness, as in production):

* ``1 replica, memory``: one ``vmcp serve`` without ``sessionStorage`` (the baseline);
* ``1 replica, redis``, ``2 replicas, redis``, ``3 replicas, redis``: ``sessionStorage`` on one
  redis-server, so any replica serves any request of the 32 sessions.

The replicas run on CPU 0 and nothing else does; haproxy, Redis, the floor backend
(``bench/floor_backend.py``) and the load generator (32 MCP sessions, this process) share CPU 1.
On a two-CPU machine the replicas therefore share one core: the aggregate rate cannot grow with
the replica count here, and what the table shows is the cost per call of the fleet (CPU
microseconds of every replica together, per call), from which the capacity of a core follows.
Each phase reports requests per second, p50/p99 latency and CPU per call of the replicas,
haproxy and Redis.

Memory: one replica with Redis sessions; its RSS before and after 500 sessions are opened
(``initialize``, connection closed), then with 200 GET streams held open.

Writes ``bench/results/capacity.md`` (the capacity-planning table) and ``capacity.png`` (the
plot; matplotlib from the ``bench`` extra), and prints the JSON line of CONTRACT.md.

Run: ``python bench/capacity.py [--sessions 32] [--duration 8]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import trio
from common import (  # type: ignore[import-not-found]
    ROOT,
    emit,
    floor_command,
    free_port,
    gateway_config,
    load_arguments,
    measure_phase,
    open_session,
    pin_self,
    started,
)

sys.path.insert(0, str(ROOT))
from tests.fixtures.haproxy import running_haproxy
from tests.fixtures.redis_cluster import running_redis

RESULTS = ROOT / "bench" / "results"
FLEET_SECRET = "capacity-bench-fleet-secret-of-40-bytes!"


def config(backend: str, redis_port: int | None) -> Path:
    """The bench's gateway, with ``sessionStorage`` on the Redis at ``redis_port`` if any."""
    shared = "" if redis_port is None else f"""  sessionStorage:
    provider: redis
    address: "127.0.0.1:{redis_port}"
    hmacSecretRefs: [{{name: fleet, key: hmac}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: fleet}}
stringData: {{hmac: "{FLEET_SECRET}"}}
"""
    return gateway_config(backend, more=shared)


@contextmanager
def replicas(count: int, config_path: Path) -> Iterator[list[Any]]:
    """``count`` replicas on CPU 0; yields (process, port) pairs once each is ready."""
    with ExitStack() as stack:
        running = []
        for _ in range(count):
            port = free_port()
            process, _ = stack.enter_context(started(
                [sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                 "--config", str(config_path), "--port", str(port)], cpu=0,
                ready_line="MCP endpoint"))
            running.append((process, port))
        yield running


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def open_sessions(url: str, count: int) -> list[bytes]:
    """``count`` sessions initialized (their connections closed); their header lines."""
    sessions = []
    for _ in range(count):
        stream, _, extra = await open_session(url)
        await stream.aclose()
        sessions.append(extra)
    return sessions


async def hold_streams(url: str, sessions: list[bytes], pid: int) -> int:
    """RSS growth (KiB) while one GET stream per session is open."""
    host = url.split("/")[2].encode()
    streams = []
    before = rss_kib(pid)
    for extra in sessions:
        stream = await trio.open_tcp_stream("127.0.0.1", int(host.split(b":")[1]))
        await stream.send_all(b"GET /mcp HTTP/1.1\r\nhost: " + host
                              + b"\r\naccept: text/event-stream\r\n" + extra + b"\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(4096)
        streams.append(stream)
    await trio.sleep(1)
    grown = rss_kib(pid) - before
    for stream in streams:
        await stream.aclose()
    return grown


def memory_phase(workdir: Path, backend: str, redis_port: int) -> dict[str, float]:
    sessions, streams = 500, 200
    with replicas(1, config(backend, redis_port)) as [(process, port)]:
        url = f"http://127.0.0.1:{port}/mcp"
        trio.run(open_sessions, url, 20)  # warm: first allocations, imports
        time.sleep(1)
        before = rss_kib(process.pid)
        opened = trio.run(open_sessions, url, sessions)
        time.sleep(1)
        per_session = (rss_kib(process.pid) - before) / sessions
        grown = trio.run(hold_streams, url, opened[:streams], process.pid)
    return {"kib_per_session": round(per_session, 1),
            "kib_per_open_stream": round(grown / streams, 1)}


def load_phase(workdir: Path, args: Any, backend: str, count: int,
               redis_port: int | None) -> dict[str, float]:
    with replicas(count, config(backend, redis_port)) as running, \
            running_haproxy(workdir, [port for _, port in running], cpu=1) as balancer:
        pids = {f"vmcp{index}": process.pid for index, (process, _) in enumerate(running)}
        pids["haproxy"] = balancer.pid
        measured = measure_phase(f"{balancer.base}/mcp", pids, args)
    vmcp_cpu = sum(v for k, v in measured.items() if k.startswith("vmcp") and
                   k.endswith("_cpu_us_per_call"))
    return {"replicas": count, "redis": redis_port is not None, "rps": measured["rps"],
            "p50_ms": measured["p50_ms"], "p99_ms": measured["p99_ms"],
            "errors": measured["errors"], "vmcp_cpu_us_per_call": round(vmcp_cpu, 1),
            "haproxy_cpu_us_per_call": measured["haproxy_cpu_us_per_call"]}


def write_table(phases: list[dict[str, float]], memory: dict[str, float]) -> str:
    lines = ["| replicas | sessions in | req/s | p50 ms | p99 ms | vmcp CPU µs/call | "
             "haproxy CPU µs/call | calls/s per core (1e6 / vmcp µs) |",
             "|---|---|---|---|---|---|---|---|"]
    for phase in phases:
        per_core = 1e6 / phase["vmcp_cpu_us_per_call"] if phase["vmcp_cpu_us_per_call"] else 0
        lines.append(f"| {phase['replicas']} | {'Redis' if phase['redis'] else 'memory'} | "
                     f"{phase['rps']:,.0f} | {phase['p50_ms']:.1f} | {phase['p99_ms']:.1f} | "
                     f"{phase['vmcp_cpu_us_per_call']:.0f} | "
                     f"{phase['haproxy_cpu_us_per_call']:.0f} | {per_core:,.0f} |")
    lines.append("")
    lines.append(f"Memory: {memory['kib_per_session']:.1f} KiB per session, "
                 f"{memory['kib_per_open_stream']:.1f} KiB per open GET stream (one replica, "
                 "Redis sessions).")
    table = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "capacity.md").write_text(table, encoding="utf-8")
    return table


def plot(phases: list[dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{p['replicas']}x{'redis' if p['redis'] else 'mem'}" for p in phases]
    figure, rate_axis = plt.subplots(figsize=(7, 4))
    rate_axis.bar(labels, [p["rps"] for p in phases], color="#4c72b0")
    rate_axis.set_ylabel("tools/call per second (bars)")
    latency_axis = rate_axis.twinx()
    latency_axis.plot(labels, [p["p99_ms"] for p in phases], color="#dd8452", marker="o")
    latency_axis.set_ylabel("p99 latency, ms (line)")
    rate_axis.set_title("vmcp behind haproxy (replicas share one CPU here)")
    figure.tight_layout()
    figure.savefig(RESULTS / "capacity.png", dpi=100)


def main() -> None:
    args = load_arguments(__doc__.split("\n", 1)[0] if __doc__ else None)
    pin_self(1)  # the load generator, with haproxy, Redis and the backend
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        workdir = Path(scratch)
        _, redis_port = stack.enter_context(running_redis(workdir))
        _, line = stack.enter_context(started(floor_command(), cpu=1, ready_line="listening"))
        backend = line.split()[-1]
        phases = []
        for count, redis in ((1, None), (1, redis_port), (2, redis_port), (3, redis_port)):
            phase_dir = workdir / f"{count}-{'redis' if redis else 'memory'}"
            phase_dir.mkdir()
            phases.append(load_phase(phase_dir, args, backend, count, redis))
            print(phases[-1], file=sys.stderr)
        memory_dir = workdir / "memory"
        memory_dir.mkdir()
        memory = memory_phase(memory_dir, backend, redis_port)
    print(write_table(phases, memory), file=sys.stderr)
    plot(phases)
    memory_one, redis_one, _, redis_three = phases
    ratios = {
        "redis_vs_memory_cpu_per_call": round(redis_one["vmcp_cpu_us_per_call"]
                                              / memory_one["vmcp_cpu_us_per_call"], 3),
        "three_vs_one_replica_cpu_per_call": round(redis_three["vmcp_cpu_us_per_call"]
                                                   / redis_one["vmcp_cpu_us_per_call"], 3),
        "three_vs_one_replica_rps": round(redis_three["rps"] / redis_one["rps"], 3),
    }
    emit("capacity", {"sessions": args.sessions, "phases": phases, "memory": memory}, ratios)


if __name__ == "__main__":
    main()
