"""tools/call through `vmcp proxy` vs directly to the same backend, in one run.

Same method as bench/gateway_overhead.py. The backend is the raw trio + h11 floor
(bench/floor_backend.py). The process under test runs alone on CPU 0: the floor itself in the
direct phase, `vmcp proxy` (the transparent HTTP proxy) in the proxy phase, `vmcp serve` in the
gateway phase and, when ``nginx`` is on PATH, nginx as a plain keep-alive reverse proxy (one
process: no master, one worker) in the nginx phase. In every phase but the direct one the
backend, another floor process, shares CPU 1 with the load generator (32 concurrent MCP
sessions in this process), so nothing else runs on the measured CPU. For each phase: requests
per second, p50/p99 latency, and CPU microseconds per call of each process (/proc/PID/stat).

The figures that matter are ``proxy_cpu_vs_floor`` (the proxy's CPU per call in units of the
cheapest possible Python HTTP exchange) and ``proxy_vs_gateway_cpu`` = proxy CPU per call /
vmcp serve CPU per call (target: <= 1.5, the proxy costs no more than 1.5x the gateway hop).
``nginx_cpu_vs_floor`` puts a C reverse proxy on the same scale; without nginx the metrics say
``"nginx": "not installed"``.

Run: ``python bench/proxy_overhead.py [--sessions 32] [--duration 8]``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (  # type: ignore[import-not-found]
    direct_phase,
    emit,
    floor_command,
    free_port,
    gateway_phase,
    load_arguments,
    logged,
    measure_phase,
    server_and_load_cpus,
    started,
    tail,
)


def wait_for_port(port: int, process: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """Until something accepts connections on 127.0.0.1:``port`` (nginx prints no banner)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited: {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port} after {timeout} s")


def nginx_config(directory: Path, port: int, backend_port: int) -> Path:
    """A plain transparent reverse proxy: one process, keep-alive both ways, no buffering;
    pid, logs and temporary files in ``directory``."""
    text = f"""
daemon off;
master_process off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {directory}/access.log;
    client_body_temp_path {directory}/client_body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    upstream floor {{
        server 127.0.0.1:{backend_port};
        keepalive 64;
        keepalive_requests 1000000;
        keepalive_timeout 300s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://floor;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_set_header Host $http_host;
            proxy_set_header Connection "";
        }}
    }}
}}
"""
    path = directory / "nginx.conf"
    path.write_text(text)
    return path


def main() -> None:
    args = load_arguments()
    server_cpu, load_cpu = server_and_load_cpus()
    python = sys.executable
    floor = floor_command()
    scratch = Path(tempfile.mkdtemp(prefix="proxy_overhead-"))
    metrics: dict[str, Any] = {"sessions": args.sessions,
                               "cpus": {"servers": server_cpu, "load": load_cpu}}
    ratios: dict[str, float] = {}

    direct = direct_phase(args, server_cpu)
    metrics["direct"] = direct
    floor_cpu = direct["floor_cpu_us_per_call"]

    proxy_log = scratch / "proxy.stderr"
    via_proxy: dict[str, Any] | None = None
    try:
        with started(floor, cpu=load_cpu, ready_line="listening") as (backend, line):
            port = free_port()
            with logged([python, "-m", "vmcp_trio", "proxy", "--target-uri", line.split()[-1],
                         "--port", str(port), "--drain-delay", "0s", "floor"],
                        cpu=server_cpu, ready_line="vmcp proxy:", log=proxy_log) as (proxy, _):
                via_proxy = measure_phase(f"http://127.0.0.1:{port}/mcp",
                                          {"proxy": proxy.pid, "floor": backend.pid}, args)
    except Exception as failure:  # reported; the other phases still run
        metrics["via_proxy"] = {"failed": f"{type(failure).__name__}: {failure}",
                                "stderr": tail(proxy_log)}
        print(f"vmcp proxy failed: {failure!r}\n--- its stderr:\n{tail(proxy_log)}",
              file=sys.stderr)
    else:
        assert via_proxy is not None
        metrics["via_proxy"] = via_proxy
        if via_proxy["errors"]:
            print(f"vmcp proxy: {via_proxy['errors']} failed calls\n--- its stderr:\n"
                  f"{tail(proxy_log)}", file=sys.stderr)

    via_vmcp = gateway_phase(args, server_cpu=server_cpu, load_cpu=load_cpu)
    metrics["via_vmcp"] = via_vmcp

    nginx = shutil.which("nginx")
    if nginx is None:
        metrics["nginx"] = "not installed"
    else:
        with started(floor, cpu=load_cpu, ready_line="listening") as (backend, line):
            port = free_port()
            backend_port = int(line.split()[-1].rsplit(":", 1)[1].split("/", 1)[0])
            config = nginx_config(scratch, port, backend_port)
            with logged([nginx, "-p", str(scratch), "-e", str(scratch / "error.log"),
                         "-c", str(config)], cpu=server_cpu, ready_line=None,
                        log=scratch / "nginx.stderr") as (server, _):
                wait_for_port(port, server)
                via_nginx = measure_phase(f"http://127.0.0.1:{port}/mcp",
                                          {"nginx": server.pid, "floor": backend.pid}, args)
        metrics["via_nginx"] = via_nginx
        metrics["nginx"] = subprocess.run([nginx, "-v"], capture_output=True, text=True,
                                          check=False).stderr.strip()
        if via_nginx["errors"]:
            print(f"nginx: {via_nginx['errors']} failed calls\n--- error.log:\n"
                  f"{tail(scratch / 'error.log')}", file=sys.stderr)

    vmcp_cpu = via_vmcp["vmcp_cpu_us_per_call"]
    if via_proxy is not None:
        proxy_cpu = via_proxy["proxy_cpu_us_per_call"]
        ratios["proxy_cpu_vs_floor"] = round(proxy_cpu / floor_cpu, 2)
        ratios["proxy_vs_gateway_cpu"] = round(proxy_cpu / vmcp_cpu, 2)
        ratios["rps_via_proxy_vs_direct"] = round(via_proxy["rps"] / direct["rps"], 3)
        ratios["p50_via_proxy_vs_direct"] = round(via_proxy["p50_ms"] / direct["p50_ms"], 2)
    ratios["vmcp_cpu_per_call_vs_floor"] = round(vmcp_cpu / floor_cpu, 2)
    if "via_nginx" in metrics:
        metrics["nginx_cpu_us_per_call"] = metrics["via_nginx"]["nginx_cpu_us_per_call"]
        ratios["nginx_cpu_vs_floor"] = round(metrics["nginx_cpu_us_per_call"] / floor_cpu, 2)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"direct: {direct}\nvia proxy: {metrics['via_proxy']}\nvia vmcp: {via_vmcp}"
          + (f"\nvia nginx: {metrics['via_nginx']}" if "via_nginx" in metrics else ""),
          file=sys.stderr)
    emit("proxy_overhead", metrics, ratios)


if __name__ == "__main__":
    main()
