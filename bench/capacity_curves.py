"""Capacity curves: how one ``vmcp serve`` replica's throughput, latency, CPU per call and memory
move with what an operator controls, and a worked sizing example that follows from them.

One gateway, alone on the first CPU; the floor backend (``bench/floor_backend.py``) and the load
generator (this process: MCP sessions calling ``tools/call`` back to back) on the last. Sweeps:

* ``active``: concurrent sessions calling back to back (1 to 256): where the core saturates and
  what queueing does to p99 past that point;
* ``idle``: sessions held open but quiet (0 to 10,000) beside 32 active ones: what a session that
  exists costs (memory, and nothing per call);
* ``backends``: backends behind the gateway (1 to 50, each the floor under its own name): a
  session's ``initialize`` (it opens every backend), memory per session, a call's CPU;
* ``size``: the tool call's argument (64 B to 512 KiB): CPU per call and per MiB.

Each point is a phase of ``--warmup`` + ``--duration`` seconds (CPU time from /proc for the
gateway). Writes ``bench/results/capacity_curves.md`` (the tables and the worked example) and
``capacity_curves.png`` (a plot per sweep), and prints the JSON line of CONTRACT.md. The worked
example multiplies the curve's cost of a call by the ratios ``bench/auth_hot_path.py`` (OIDC,
Cedar) and ``bench/capacity.py`` (Redis, three replicas) recorded in ``bench/results/``, and
takes a session's memory with its stream from ``bench/streams.py``'s result.

Run: ``python bench/capacity_curves.py [--warmup 2] [--duration 6]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio
from common import (  # type: ignore[import-not-found]
    ROOT,
    cpu_seconds,
    cpus,
    emit,
    floor_command,
    free_port,
    generate_load,
    open_session,
    pin_self,
    started,
    url_backend,
)

RESULTS = ROOT / "bench" / "results"
ACTIVE = (1, 4, 16, 64, 256)
IDLE = (0, 1_000, 5_000, 10_000)
BACKENDS = (1, 10, 50)
SIZES = (64, 4_096, 65_536, 524_288)
EXAMPLE_USERS, EXAMPLE_RATE, TARGET_UTILISATION = 5_000, 1.0, 0.6
"""The worked example: 5,000 concurrent users, one call a second each, replicas kept at 60%
of a core (headroom for bursts, a replica lost, and the machine's own work)."""


def config(backend_url: str, backends: int) -> Path:
    """A gateway over ``backends`` MCPServers, all the floor under their own names (tools
    ``floorN_echo``)."""
    servers = "".join(url_backend(f"floor{index}", backend_url) for index in range(backends))
    text = f"""apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPGroup
metadata: {{name: bench}}
{servers}---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: VirtualMCPServer
metadata: {{name: bench}}
spec:
  groupRef: {{name: bench}}
  incomingAuth: {{type: anonymous}}
  operational: {{failureHandling: {{healthCheckInterval: 1h, healthCheckTimeout: 10s}}}}
"""
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
    handle.write(text)
    handle.close()
    return Path(handle.name)


@contextmanager
def gateway(backend_url: str, backends: int = 1) -> Iterator[tuple[str, int]]:
    """``(url, pid)`` of a gateway on the first CPU, allowed 20,000 sessions from one address."""
    path = config(backend_url, backends)
    port = free_port()
    try:
        with started([sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                      "--config", str(path), "--port", str(port), "--max-sessions", "20000",
                      "--max-sessions-per-client", "20000", "--max-body-bytes",
                      str(4 * 1024 * 1024)], cpu=cpus()[0],
                     ready_line="MCP endpoint") as (process, _):
            yield f"http://127.0.0.1:{port}/mcp", process.pid
    finally:
        path.unlink()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(url: str, pid: int, args: argparse.Namespace, *, sessions: int = 32,
            text: str = "hello", tool: str = "floor0_echo") -> dict[str, float]:
    """One load phase: rate, latency and the gateway's CPU per call."""
    before = cpu_seconds(pid)
    result = trio.run(lambda: generate_load(url, sessions=sessions, warmup=args.warmup,
                                            duration=args.duration, text=text, tool=tool))
    calls = result.calls * (args.warmup + args.duration) / args.duration
    return {"rps": round(result.rate, 1), "p50_ms": round(result.percentile(0.5) * 1e3, 2),
            "p99_ms": round(result.percentile(0.99) * 1e3, 2), "errors": result.errors,
            "cpu_us_per_call": round((cpu_seconds(pid) - before) / max(calls, 1) * 1e6, 1),
            "cpu_share": round((cpu_seconds(pid) - before) / (args.warmup + args.duration), 3)}


async def hold_sessions(url: str, count: int) -> list[float]:
    """Open ``count`` sessions (connections closed: they stay, idle); each ``initialize``'s
    seconds."""
    took = []
    for _ in range(count):
        began = time.perf_counter()
        stream, _, _ = await open_session(url)
        took.append(time.perf_counter() - began)
        await stream.aclose()
    return took


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def sweep_active(backend: str, args: argparse.Namespace) -> list[dict[str, float]]:
    points = []
    with gateway(backend) as (url, pid):
        for sessions in ACTIVE:
            points.append({"sessions": sessions, **measure(url, pid, args, sessions=sessions)})
            print("active", points[-1], file=sys.stderr, flush=True)
    return points


def sweep_idle(backend: str, args: argparse.Namespace) -> list[dict[str, float]]:
    points = []
    with gateway(backend) as (url, pid):
        trio.run(hold_sessions, url, 50)  # first allocations
        base = rss_mib(pid)
        held = 0
        for idle in IDLE:
            trio.run(hold_sessions, url, idle - held)
            held = idle
            time.sleep(1)
            rss = rss_mib(pid)
            points.append({"idle": idle, "rss_mib": round(rss, 1),
                           "kib_per_session": round((rss - base) * 1024 / idle, 1) if idle else 0,
                           **measure(url, pid, args)})
            print("idle", points[-1], file=sys.stderr, flush=True)
    return points


def sweep_backends(backend: str, args: argparse.Namespace) -> list[dict[str, float]]:
    points = []
    for count in BACKENDS:
        with gateway(backend, count) as (url, pid):
            trio.run(hold_sessions, url, 10)
            base = rss_mib(pid)
            took = trio.run(hold_sessions, url, 100)
            time.sleep(1)
            per_session = (rss_mib(pid) - base) * 1024 / 100
            points.append({"backends": count,
                           "initialize_p50_ms": round(percentile(took, 0.5) * 1e3, 2),
                           "initialize_p99_ms": round(percentile(took, 0.99) * 1e3, 2),
                           "kib_per_session": round(per_session, 1), **measure(url, pid, args)})
            print("backends", points[-1], file=sys.stderr, flush=True)
    return points


def sweep_size(backend: str, args: argparse.Namespace) -> list[dict[str, float]]:
    points = []
    with gateway(backend) as (url, pid):
        for size in SIZES:
            point = measure(url, pid, args, text="x" * size)
            point["cpu_us_per_mib"] = round(point["cpu_us_per_call"] / (size / 2**20), 1)
            points.append({"bytes": size, **point})
            print("size", points[-1], file=sys.stderr, flush=True)
    return points


def recorded_ratio(name: str, ratio: str, default: float = 1.0) -> float:
    """A ratio another benchmark recorded in ``bench/results/<name>.json`` (else ``default``)."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return default
    return float(json.loads(path.read_text())["ratios"].get(ratio, default))


def worked_example(curves: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Replicas, CPU and memory for EXAMPLE_USERS making EXAMPLE_RATE calls a second each,
    with OIDC, ten Cedar policies and sessions shared through Redis over three replicas: the
    curve's cost of a call times the ratios the other benchmarks recorded (those of
    ``auth_hot_path``, ``capacity`` and ``streams`` results, when present)."""
    reference = next(p for p in curves["active"] if p["sessions"] == 16)
    cpu_us = reference["cpu_us_per_call"]
    factors = {"oidc": recorded_ratio("auth_hot_path", "oidc_vs_anonymous_cpu_per_call"),
               "cedar": recorded_ratio("auth_hot_path", "cedar_vs_oidc_cpu_per_call"),
               "redis": recorded_ratio("capacity", "redis_vs_memory_cpu_per_call"),
               "three_replicas": recorded_ratio("capacity", "three_vs_one_replica_cpu_per_call")}
    shared_cpu_us = cpu_us * math.prod(factors.values())
    offered = EXAMPLE_USERS * EXAMPLE_RATE
    per_core = 1e6 / shared_cpu_us
    replicas = max(2, math.ceil(offered / (per_core * TARGET_UTILISATION)))
    base_mib = curves["idle"][0]["rss_mib"]
    streams = RESULTS / "streams.json"
    per_user_kib = (json.loads(streams.read_text())["metrics"]["rss_kb_per_session_with_stream"]
                    if streams.exists() else SESSION_WITH_STREAM_KIB)
    users_each = math.ceil(EXAMPLE_USERS / replicas)
    return {"users": EXAMPLE_USERS, "calls_per_second": offered, "cpu_us_per_call": cpu_us,
            "factors": factors, "cpu_us_per_call_deployed": round(shared_cpu_us, 1),
            "calls_per_core": round(per_core), "replicas": replicas,
            "utilisation": round(offered / (replicas * per_core), 2),
            "users_per_replica": users_each, "base_rss_mib": base_mib,
            "kib_per_user": per_user_kib,
            "memory_mib_per_replica": round(base_mib + users_each * per_user_kib / 1024)}


SESSION_WITH_STREAM_KIB = 20.9
"""RSS of a session with its open GET stream, as ``bench/streams.py`` measured it (10,000 at
once), when its result is not at hand."""


def write_report(curves: dict[str, list[dict[str, float]]], example: dict[str, Any]) -> None:
    lines = ["| active sessions | req/s | p50 ms | p99 ms | CPU µs/call | gateway CPU share |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['sessions']} | {p['rps']:,.0f} | {p['p50_ms']} | {p['p99_ms']} | "
              f"{p['cpu_us_per_call']:.0f} | {p['cpu_share']:.0%} |" for p in curves["active"]]
    lines += ["", "| idle sessions (+32 active) | RSS MiB | KiB per session | req/s | p99 ms | "
              "CPU µs/call |", "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['idle']:,} | {p['rss_mib']} | {p['kib_per_session']} | {p['rps']:,.0f} | "
              f"{p['p99_ms']} | {p['cpu_us_per_call']:.0f} |" for p in curves["idle"]]
    lines += ["", "| backends | initialize p50 / p99 ms | KiB per session | req/s | p99 ms | "
              "CPU µs/call |", "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['backends']} | {p['initialize_p50_ms']} / {p['initialize_p99_ms']} | "
              f"{p['kib_per_session']} | {p['rps']:,.0f} | {p['p99_ms']} | "
              f"{p['cpu_us_per_call']:.0f} |" for p in curves["backends"]]
    lines += ["", "| argument bytes | req/s | p99 ms | CPU µs/call | CPU µs per MiB |",
              "|---:|---:|---:|---:|---:|"]
    lines += [f"| {p['bytes']:,} | {p['rps']:,.0f} | {p['p99_ms']} | "
              f"{p['cpu_us_per_call']:.0f} | {p['cpu_us_per_mib']:,.0f} |"
              for p in curves["size"]]
    e = example
    factors = " x ".join(f"{v:.3f} ({k})" for k, v in e["factors"].items())
    lines += ["", f"Worked example: {e['users']:,} concurrent users, one call a second each "
              f"({e['calls_per_second']:,.0f} calls/s), OIDC, ten Cedar policies, sessions "
              f"shared through Redis. A call costs {e['cpu_us_per_call']:.0f} µs of a core at 16 "
              f"active sessions, x {factors} = {e['cpu_us_per_call_deployed']:.0f} µs: "
              f"{e['calls_per_core']:,} calls/s per core. At {TARGET_UTILISATION:.0%} of a core: "
              f"**{e['replicas']} replicas of 1 CPU** ({e['utilisation']:.0%} busy each), each "
              f"holding ~{e['users_per_replica']:,} users' sessions with their streams: "
              f"**~{e['memory_mib_per_replica']} MiB** ({e['base_rss_mib']:.0f} MiB at rest + "
              f"{e['kib_per_user']} KiB a session with its stream)."]
    (RESULTS / "capacity_curves.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot(curves: dict[str, list[dict[str, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels = (("active", "sessions", "active sessions", True),
              ("idle", "idle", "idle sessions (+32 active)", False),
              ("backends", "backends", "backends behind the gateway", False),
              ("size", "bytes", "tool argument bytes", True))
    for axis, (name, key, label, log_x) in zip(axes.flat, panels, strict=True):
        xs = [p[key] for p in curves[name]]
        axis.plot(xs, [p["cpu_us_per_call"] for p in curves[name]], marker="o",
                  color="#4c72b0")
        axis.set_xlabel(label)
        axis.set_ylabel("gateway CPU µs per call", color="#4c72b0")
        axis.set_ylim(bottom=0)
        if log_x:
            axis.set_xscale("log", base=2 if name == "active" else 10)
        twin = axis.twinx()
        twin.plot(xs, [p["p99_ms"] for p in curves[name]], marker="s", color="#dd8452")
        twin.set_ylabel("p99 ms", color="#dd8452")
        twin.set_ylim(bottom=0)
    figure.suptitle("one vmcp replica on one core (floor backend and load on the other)")
    figure.tight_layout()
    figure.savefig(RESULTS / "capacity_curves.png", dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=6.0)
    args = parser.parse_args()
    pin_self(cpus()[-1])
    RESULTS.mkdir(exist_ok=True)
    with started(floor_command(), cpu=cpus()[-1], ready_line="listening") as (_, line):
        backend = line.split()[-1]
        curves = {"active": sweep_active(backend, args), "idle": sweep_idle(backend, args),
                  "backends": sweep_backends(backend, args), "size": sweep_size(backend, args)}
    example = worked_example(curves)
    write_report(curves, example)
    plot(curves)
    active = {p["sessions"]: p for p in curves["active"]}
    idle = {p["idle"]: p for p in curves["idle"]}
    backends = {p["backends"]: p for p in curves["backends"]}
    emit("capacity_curves", {**curves, "example": example}, {
        "cpu_per_call_256_vs_16_active": round(active[256]["cpu_us_per_call"]
                                               / active[16]["cpu_us_per_call"], 3),
        "cpu_per_call_10000_idle_vs_none": round(idle[10_000]["cpu_us_per_call"]
                                                 / idle[0]["cpu_us_per_call"], 3),
        "initialize_50_vs_1_backend": round(backends[50]["initialize_p50_ms"]
                                            / backends[1]["initialize_p50_ms"], 2)})


if __name__ == "__main__":
    main()
