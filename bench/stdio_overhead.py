"""tools/call through `vmcp proxy stdio` (a desktop client's line on stdin, one POST to the
remote, the answer on stdout) vs the same calls straight to the backend over HTTP, in one run.

Same method as bench/gateway_overhead.py. The backend is the raw trio + h11 floor
(bench/floor_backend.py). The process under test runs alone on CPU 0: the floor itself in the
direct phase, `vmcp proxy stdio` in the stdio phase, whose remote (another floor process)
shares CPU 1 with the load generator: this process, which keeps ``--sessions`` calls in flight
on the proxy's stdin (a desktop client's session is one stdio pipe; its calls overlap) and reads
the answers from its stdout. For each phase: calls per second, p50/p99 latency, and CPU
microseconds per call of each process (/proc/PID/stat).

The figure that matters is ``stdio_cpu_per_call_vs_floor``: what the bridge costs per call in
units of the cheapest possible Python HTTP exchange (for scale: the transparent HTTP
`vmcp proxy` is ~1.3x, bench/proxy_overhead.py).

Run: ``python bench/stdio_overhead.py [--sessions 32] [--duration 8] [--rounds 1]``.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from typing import Any

import orjson
import trio
from common import (  # type: ignore[import-not-found]
    ROOT,
    LoadResult,
    cpu_seconds,
    direct_phase,
    emit,
    floor_command,
    load_arguments,
    median_run,
    phase_figures,
    run_workers,
    server_and_load_cpus,
    started,
)


async def stdio_load(url: str, floor_pid: int, *, cpu: int, args: Any
                     ) -> tuple[LoadResult, dict[str, float], dict[str, float]]:
    """Start ``vmcp proxy stdio`` for ``url`` on ``cpu``, initialize, and keep
    ``args.sessions`` calls in flight for ``args.warmup`` + ``args.duration`` seconds: the
    result of the measured part, and the CPU seconds of the proxy and of its remote (the floor
    at ``floor_pid``) before and after."""
    process = await trio.lowlevel.open_process(
        ["taskset", "-c", str(cpu), sys.executable, "-m", "vmcp_trio", "proxy", "stdio",
         "--target-uri", url, "--log-level", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        cwd=ROOT)
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    answers: dict[int, trio.Event] = {}
    result = LoadResult()
    ids = itertools.count(1)
    state = {"measuring": False, "stop": False}
    write_lock = trio.Lock()

    async def send(message: dict[str, Any]) -> None:
        async with write_lock:
            await stdin.send_all(orjson.dumps(message) + b"\n")

    async def read() -> None:
        buffered = b""
        while True:
            chunk = await stdout.receive_some(65536)
            if not chunk:
                return
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                message = orjson.loads(line)
                waiting = answers.pop(message.get("id"), None)
                if waiting is not None:
                    if "result" not in message:
                        result.errors += 1
                    waiting.set()

    async def call(method: str, params: dict[str, Any]) -> None:
        request_id = next(ids)
        done = answers[request_id] = trio.Event()
        await send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await done.wait()

    async def worker() -> None:
        params = {"name": "echo", "arguments": {"text": "hello"}}
        while not state["stop"]:
            began = time.perf_counter()
            await call("tools/call", params)
            if state["measuring"]:
                result.calls += 1
                result.latencies.append(time.perf_counter() - began)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        with trio.fail_after(60):
            await call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "bench", "version": "1"}})
        await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        pids = {"stdio": process.pid, "floor": floor_pid}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await run_workers(worker, sessions=args.sessions, warmup=args.warmup,
                          duration=args.duration, state=state, result=result)
        after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await stdin.aclose()
        with trio.move_on_after(10):
            await process.wait()
        nursery.cancel_scope.cancel()
    if process.returncode is None:
        process.kill()
    return result, before, after


def stdio_phase(args: Any, *, server_cpu: int, load_cpu: int) -> dict[str, float]:
    with started(floor_command(), cpu=load_cpu, ready_line="listening") as (backend, line):
        result, before, after = trio.run(lambda: stdio_load(
            line.split()[-1], backend.pid, cpu=server_cpu, args=args))
    return phase_figures(result, before, after, args)


def main() -> None:
    args = load_arguments(rounds=1)
    server_cpu, load_cpu = server_and_load_cpus()
    rounds: dict[str, list[dict[str, float]]] = {"direct": [], "stdio": []}
    for _ in range(args.rounds):
        rounds["direct"].append(direct_phase(args, server_cpu))
        rounds["stdio"].append(stdio_phase(args, server_cpu=server_cpu, load_cpu=load_cpu))
        print(f"direct: {rounds['direct'][-1]}\nstdio: {rounds['stdio'][-1]}",
              file=sys.stderr)
    direct, stdio = median_run(rounds["direct"]), median_run(rounds["stdio"])
    emit("stdio_overhead", {"sessions": args.sessions, "rounds": args.rounds,
                            "direct": direct, "via_stdio": stdio,
                            "cpus": {"servers": server_cpu, "load": load_cpu}},
         {"stdio_cpu_per_call_vs_floor": round(
             stdio["stdio_cpu_us_per_call"] / direct["floor_cpu_us_per_call"], 2),
          "p99_via_stdio_vs_direct": round(stdio["p99_ms"] / direct["p99_ms"], 2)})


if __name__ == "__main__":
    main()
