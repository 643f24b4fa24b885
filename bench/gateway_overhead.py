"""tools/call through vmcp vs directly to the same backend, in one run.

The backend is the raw trio + h11 floor (bench/floor_backend.py). The process under test runs
alone on CPU 0: the floor itself in the direct phase, vmcp in the gateway phase (whose backend,
another floor process, shares CPU 1 with the load generator: 32 concurrent MCP sessions in this
process). Nothing else runs on the measured CPU, so a send to a process on the same CPU cannot
switch into it and blur the accounting. For each phase: requests per second, p50/p99 latency,
and CPU microseconds per call of each process (from /proc/PID/stat).

The figures that matter are ``vmcp_cpu_per_call / floor_cpu_per_call``, for handshake sessions
and for 2026-07-28 clients (no session; each call carries its own headers and ``_meta``): what
the gateway costs per call in units of the cheapest possible Python HTTP exchange (target: <=
2), and the p99 latency through vmcp over the floor's at the same concurrency (target: <= 2).

The phases are run in ``--rounds`` alternating rounds (3 by default: direct, gateway,
2026-07-28, then again), and each figure kept is the median round's, with its range beside it:
a neighbour that slows the machine for a while slows every phase alike, and one slow round
does not decide the ratio.

Run: ``python bench/gateway_overhead.py [--sessions 32] [--duration 8] [--rounds 3]``.
"""

from __future__ import annotations

import sys

from common import (  # type: ignore[import-not-found]
    direct_phase,
    emit,
    gateway_phase,
    load_arguments,
    median_run,
    server_and_load_cpus,
)


def main() -> None:
    args = load_arguments(rounds=3)
    server_cpu, load_cpu = server_and_load_cpus()
    rounds: dict[str, list[dict[str, float]]] = {"direct": [], "via": [], "stateless": []}
    for _ in range(args.rounds):
        rounds["direct"].append(direct_phase(args, server_cpu))
        rounds["via"].append(gateway_phase(args, server_cpu=server_cpu, load_cpu=load_cpu))
        rounds["stateless"].append(gateway_phase(args, server_cpu=server_cpu,
                                                 load_cpu=load_cpu, stateless=True))
    direct, via, stateless = (median_run(rounds[phase])
                              for phase in ("direct", "via", "stateless"))
    floor_cpu = direct["floor_cpu_us_per_call"]
    metrics = {"sessions": args.sessions, "rounds": args.rounds, "direct": direct,
               "via_vmcp": via,
               "via_vmcp_2026": stateless, "cpus": {"servers": server_cpu, "load": load_cpu}}
    ratios = {
        "vmcp_cpu_per_call_vs_floor": round(via["vmcp_cpu_us_per_call"] / floor_cpu, 2),
        "vmcp_2026_cpu_per_call_vs_floor": round(
            stateless["vmcp_cpu_us_per_call"] / floor_cpu, 2),
        "p99_via_vmcp_vs_direct": round(via["p99_ms"] / direct["p99_ms"], 2),
        "p99_via_vmcp_2026_vs_direct": round(stateless["p99_ms"] / direct["p99_ms"], 2),
        "rps_via_vmcp_vs_direct": round(via["rps"] / direct["rps"], 3),
        "p50_via_vmcp_vs_direct": round(via["p50_ms"] / direct["p50_ms"], 2),
    }
    print(f"direct: {direct}\nvia vmcp: {via}\nvia vmcp, 2026-07-28: {stateless}",
          file=sys.stderr)
    emit("gateway_overhead", metrics, ratios)


if __name__ == "__main__":
    main()
