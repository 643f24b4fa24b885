"""tools/call through the tunnel (`vmcp tunnel relay` + `vmcp proxy tunnel`) vs directly to the
same backend, in one run.

Same method as bench/gateway_overhead.py and bench/proxy_overhead.py. The backend is the raw
trio + h11 floor (bench/floor_backend.py). In the direct phase the floor runs alone on CPU 0. In
the tunnel phase the process pair under test, the relay and the agent (connected to it over a
WebSocket on loopback), shares CPU 0, and the backend, another floor process, shares CPU 1 with
the load generator (32 concurrent MCP sessions in this process, at
``http://127.0.0.1:PORT/t/bench/mcp`` on the relay). For each phase: requests per second,
p50/p99 latency, errors, and CPU microseconds per call of each process (/proc/PID/stat).

The figures that matter are ``tunnel_cpu_vs_floor`` = (relay + agent CPU per call) / floor CPU
per call in the direct phase, what the tunnel costs per call in units of the cheapest possible
Python HTTP exchange, and its two parts ``relay_cpu_vs_floor`` and ``agent_cpu_vs_floor``. On a
failure of the tunnel phase the metrics say why, with the tails of the relay's and the agent's
stderr.

Run: ``python bench/tunnel_overhead.py [--sessions 32] [--duration 8]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import (  # type: ignore[import-not-found]
    ACCEPT,
    direct_phase,
    emit,
    floor_command,
    free_port,
    load_arguments,
    logged,
    measure_phase,
    server_and_load_cpus,
    started,
    tail,
)

from vmcp_trio.tunnel.tokens import new_token_line

TUNNEL = "bench"


def wait_for_agent(url: str, processes: dict[str, subprocess.Popen[Any]],
                   timeout: float = 30.0) -> None:
    """Until the relay answers ``url`` with anything but 503 (no agent connected yet)."""
    body = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    deadline = time.time() + timeout
    status = None
    while time.time() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited: {process.returncode}")
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "content-type": "application/json", "accept": ACCEPT})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError:
            status = None
        if status is not None and status != 503:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the tunnel did not answer {url} within {timeout} s (last: {status})")


def main() -> None:
    args = load_arguments()
    server_cpu, load_cpu = server_and_load_cpus()
    python = sys.executable
    floor = floor_command()
    scratch = Path(tempfile.mkdtemp(prefix="tunnel_overhead-"))
    metrics: dict[str, Any] = {"sessions": args.sessions,
                               "cpus": {"servers": server_cpu, "load": load_cpu}}
    ratios: dict[str, float] = {}

    direct = direct_phase(args, server_cpu)
    metrics["direct"] = direct
    floor_cpu = direct["floor_cpu_us_per_call"]

    token, token_line = new_token_line(TUNNEL)
    tokens_file, token_file = scratch / "tokens", scratch / "token"
    tokens_file.write_text(token_line + "\n")
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    relay_log, agent_log = scratch / "relay.stderr", scratch / "agent.stderr"
    via_tunnel: dict[str, Any] | None = None
    try:
        with started(floor, cpu=load_cpu, ready_line="listening") as (backend, line):
            port = free_port()
            with (
                logged([python, "-m", "vmcp_trio", "tunnel", "relay", "--port", str(port),
                        "--tokens", str(tokens_file)], cpu=server_cpu,
                       ready_line="vmcp tunnel relay:", log=relay_log) as (relay, _),
                logged([python, "-m", "vmcp_trio", "proxy", "tunnel",
                        "--relay-url", f"ws://127.0.0.1:{port}",
                        "--tunnel-token-file", str(token_file),
                        "--target-uri", line.split()[-1], TUNNEL],
                       cpu=server_cpu, ready_line=None, log=agent_log) as (agent, _),
            ):
                url = f"http://127.0.0.1:{port}/t/{TUNNEL}/mcp"
                wait_for_agent(url, {"relay": relay, "agent": agent})
                via_tunnel = measure_phase(url, {"relay": relay.pid, "agent": agent.pid,
                                                 "floor": backend.pid}, args)
    except Exception as failure:  # reported in the result
        metrics["via_tunnel"] = {"failed": f"{type(failure).__name__}: {failure}",
                                 "relay_stderr": tail(relay_log),
                                 "agent_stderr": tail(agent_log)}
        print(f"tunnel failed: {failure!r}\n--- relay stderr:\n{tail(relay_log)}\n"
              f"--- agent stderr:\n{tail(agent_log)}", file=sys.stderr)
    else:
        assert via_tunnel is not None
        via_tunnel["tunnel_cpu_us_per_call"] = round(
            via_tunnel["relay_cpu_us_per_call"] + via_tunnel["agent_cpu_us_per_call"], 1)
        metrics["via_tunnel"] = via_tunnel
        if via_tunnel["errors"]:
            print(f"tunnel: {via_tunnel['errors']} failed calls\n--- relay stderr:\n"
                  f"{tail(relay_log)}\n--- agent stderr:\n{tail(agent_log)}", file=sys.stderr)

    if via_tunnel is not None:
        ratios["tunnel_cpu_vs_floor"] = round(via_tunnel["tunnel_cpu_us_per_call"] / floor_cpu,
                                              2)
        ratios["relay_cpu_vs_floor"] = round(via_tunnel["relay_cpu_us_per_call"] / floor_cpu, 2)
        ratios["agent_cpu_vs_floor"] = round(via_tunnel["agent_cpu_us_per_call"] / floor_cpu, 2)
        ratios["rps_via_tunnel_vs_direct"] = round(via_tunnel["rps"] / direct["rps"], 3)
        ratios["p50_via_tunnel_vs_direct"] = round(via_tunnel["p50_ms"] / direct["p50_ms"], 2)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"direct: {direct}\nvia tunnel: {metrics['via_tunnel']}", file=sys.stderr)
    emit("tunnel_overhead", metrics, ratios)


if __name__ == "__main__":
    main()
