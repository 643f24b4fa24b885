"""`make soak`: a fleet under steady mixed load for minutes or hours while its parts are broken on
a schedule; whether every call outside a fault succeeded, how long each fault took to heal, and
whether memory, descriptors, tasks and sessions stayed flat.

The fleet (every process on 127.0.0.1, in a temporary folder):

* Redis: a master, a replica and three Sentinels (``tests/fixtures/redis_cluster.py``), holding
  the replicas' sessions (``sessionStorage`` through the Sentinels);
* three ``vmcp serve`` replicas behind haproxy (``balance roundrobin``, no stickiness, health
  checks on ``/readyz``: ``tests/fixtures/haproxy.py``), each with its own log;
* backends: ``clock`` (the example stdio server: one process per replica), ``sdk`` (the official
  SDK 2.x server over HTTP, ``bench/soak_backend.py``) and ``floor`` (``bench/floor_backend.py``,
  never faulted: a failure of a ``floor`` call is never excused by a fault).

The load (``bench/soak_load.py``) starts ``--rate`` operations a second of both protocol eras.
Faults, one every ``--fault-every`` after a quiet warm-up, in this order and again:

========================  =======================================================  ===========
fault                     what is done                                             touches
========================  =======================================================  ===========
``stdio-kill``            SIGKILL the ``clock`` process of the first replica       clock
``http-restart``          SIGKILL ``sdk``; start it again on its port after 2 s    sdk
``http-freeze``           SIGSTOP ``sdk`` for 10 s, then SIGCONT                   sdk
``redis-failover``        SIGKILL the Redis master; once a Sentinel promoted the   everything
                          replica, the old master comes back as its replica; it
                          lasts until the Sentinels agree on a master for 5 s
``replica-restart``       SIGKILL the second replica; start it again (same port)   everything
``reload``                the configuration gains (or loses) a backend ``floor2``  nothing
                          and every replica gets SIGHUP
========================  =======================================================  ===========

A fault's window runs from its first action until the fleet has recovered (every replica ready
and reporting every backend the fault touched healthy, and an operation on one of them started
after the fault's last action succeeded) plus two seconds. Recovery time is measured from the
last action. A failed operation overlapping no window, or one on a backend its fault did not
touch, is counted against the targets (both 0).

Every second the soak samples each replica: RSS, open descriptors, and from its ``/metrics`` the
``vmcp_sessions``, ``vmcp_open_streams`` and ``vmcp_tasks`` gauges. After the load stops and
its sessions are deleted it waits 15 s and samples once more: what the clients held should be
back to where it was before they came (sampled 15 s after one operation of each kind, so that
what the first clients start for good, backend connections, is in both).

Writes ``bench/results/soak.jsonl`` (every operation), ``soak-samples.jsonl``,
``soak-faults.json`` (the faults, with when each began, was done and had healed), ``soak.md`` (the
report) and ``soak.png`` (throughput, failures, latency, RSS and descriptors over time, faults
shaded), and prints the JSON line of CONTRACT.md.

Run: ``python bench/soak.py [--minutes 10] [--rate 20] [--fault-every 75]``;
``--report-only`` makes the report again from those files; ``--census 10,40`` has each replica
write a memory census at those minutes (``kill -USR1``), gathered in ``soak-census.txt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import trio
from common import ROOT, emit, free_port, url_backend  # type: ignore[import-not-found]
from soak_load import BACKEND, Load, Outcome  # type: ignore[import-not-found]
from soak_report import FaultRecord, report  # type: ignore[import-not-found]

sys.path.insert(0, str(ROOT))
from tests.fixtures.haproxy import running_haproxy
from tests.fixtures.redis_cluster import RedisCluster, running_redis_cluster

RESULTS = ROOT / "bench" / "results"
FLEET_SECRET = "soak-fleet-secret-of-at-least-32-bytes!!"
REPLICAS = 3
SETTLE = 2.0
"""Seconds a fault's window extends past its recovery."""
QUIET_AFTER = 15.0
"""Seconds between the priming clients leaving and the first sample."""
SESSION_TTL = 120.0
"""The replicas' ``--session-ttl``: a session whose client vanished without a DELETE (a call
that timed out while opening it, a DELETE lost in a fault) is ended after it; the last sample
is taken once it has passed, so "back to the baseline" includes the sessions."""


def config_text(sdk_url: str, floor_url: str, cluster: RedisCluster, *, extra: bool) -> str:
    """The gateway's configuration; ``extra`` adds the backend ``floor2`` (the reload fault)."""
    sentinels = ", ".join(f'"{address}"' for address in cluster.sentinel_addrs())
    floor2 = url_backend("floor2", floor_url, "soak") if extra else ""
    return f"""apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPGroup
metadata: {{name: soak}}
---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPServer
metadata: {{name: clock}}
spec:
  groupRef: {{name: soak}}
  command: "{sys.executable}"
  args: ["{ROOT / 'examples/servers/clock_server.py'}"]
{url_backend("sdk", sdk_url, "soak")}{url_backend("floor", floor_url, "soak")}{floor2}---
apiVersion: v1
kind: Secret
metadata: {{name: fleet}}
stringData: {{hmac: "{FLEET_SECRET}"}}
---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: VirtualMCPServer
metadata: {{name: soak}}
spec:
  groupRef: {{name: soak}}
  incomingAuth: {{type: anonymous}}
  operational:
    failureHandling: {{healthCheckInterval: 2s, healthCheckTimeout: 1s, unhealthyThreshold: 1}}
  sessionStorage:
    provider: redis
    sentinelConfig: {{masterName: "{cluster.master_name}", sentinelAddrs: [{sentinels}]}}
    hmacSecretRefs: [{{name: fleet, key: hmac}}]
"""


@dataclass
class Child:
    """A process of the fleet that the soak kills and starts again."""

    name: str
    command: list[str]
    log: Path
    ready: Callable[[], bool]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    environment: dict[str, str] | None = None

    def start(self, timeout: float = 180) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=ROOT,
                                            env=self.environment)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} was not ready within {timeout:.0f} s")
            time.sleep(0.1)

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)
        if number == signal.SIGKILL:
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class Fleet:
    workdir: Path
    cluster: RedisCluster
    sdk: Child
    floor: Child
    replicas: list[Child]
    ports: list[int]
    config: Path
    texts: tuple[str, str]
    """The configuration without and with ``floor2``."""
    url: str = ""
    sdk_port: int = 0
    floor_port: int = 0
    extra: bool = False
    faults: list[FaultRecord] = field(default_factory=list)

    def clock_pid(self, replica: int) -> int | None:
        """The pid of the ``clock`` process the replica started."""
        parent = str(self.replicas[replica].pid)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if stat[1] == parent and b"clock_server.py" in cmdline:
                return int(entry.name)
        return None


@contextmanager
def fleet(workdir: Path, replica_environment: dict[str, str]) -> Iterator[Fleet]:
    with ExitStack() as stack:
        cluster = stack.enter_context(running_redis_cluster(workdir))
        sdk_port, floor_port = free_port(), free_port()
        sdk_url = f"http://127.0.0.1:{sdk_port}/mcp"
        floor_url = f"http://127.0.0.1:{floor_port}/mcp"

        def backend(name: str, command: list[str], port: int) -> Child:
            child = Child(name, command, workdir / f"{name}.log",
                          lambda: answers(f"http://127.0.0.1:{port}/mcp") or port_open(port))
            child.start()
            stack.callback(child.stop)
            return child

        sdk = backend("sdk", [sys.executable, "bench/soak_backend.py", "--port",
                              str(sdk_port)], sdk_port)
        floor = backend("floor", [sys.executable, "bench/floor_backend.py", "--port",
                                  str(floor_port)], floor_port)
        texts = (config_text(sdk_url, floor_url, cluster, extra=False),
                 config_text(sdk_url, floor_url, cluster, extra=True))
        config = workdir / "gateway.yaml"
        config.write_text(texts[0])
        ports = [free_port() for _ in range(REPLICAS)]
        replicas = []
        for index, port in enumerate(ports):
            replica = Child(f"replica-{index}", [
                sys.executable, "-m", "vmcp_trio", "serve", "--config", str(config),
                "--port", str(port), "--drain-delay", "0s", "--session-ttl",
                str(SESSION_TTL)], workdir / f"replica-{index}.log",
                lambda port=port: answers(f"http://127.0.0.1:{port}/readyz"),  # type: ignore[misc]
                environment={**os.environ, **replica_environment})
            replica.start()
            stack.callback(replica.stop)
            replicas.append(replica)
        balancer = stack.enter_context(running_haproxy(workdir, ports))
        yield Fleet(workdir, cluster, sdk, floor, replicas, ports, config, texts,
                    url=balancer.base + "/mcp", sdk_port=sdk_port, floor_port=floor_port)


def port_open(port: int) -> bool:
    import socket
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- faults --------------------------------------------------------------------------------------

async def stdio_kill(fleet: Fleet) -> list[str]:
    pid = fleet.clock_pid(0)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    return ["clock"]


async def http_restart(fleet: Fleet) -> list[str]:
    fleet.sdk.signal(signal.SIGKILL)
    await trio.sleep(2)
    await trio.to_thread.run_sync(fleet.sdk.start)
    return ["sdk"]


async def http_freeze(fleet: Fleet) -> list[str]:
    fleet.sdk.signal(signal.SIGSTOP)
    await trio.sleep(10)
    fleet.sdk.signal(signal.SIGCONT)
    return ["sdk"]


async def redis_failover(fleet: Fleet) -> list[str]:
    """Kill the master; once a replica was promoted, the old master returns as its replica.
    The fault lasts until the Sentinels agreed on one master for 5 s (they may switch once
    more when the old master comes back)."""
    old = await trio.to_thread.run_sync(fleet.cluster.kill_master)
    await trio.to_thread.run_sync(fleet.cluster.wait_for_failover, old)
    await trio.to_thread.run_sync(fleet.cluster.restart_killed)
    master, since = None, trio.current_time()
    with trio.move_on_after(60):
        while trio.current_time() - since < 5:
            now = await trio.to_thread.run_sync(fleet.cluster.current_master)
            if now != master:
                master, since = now, trio.current_time()
            await trio.sleep(0.5)
    return list(set(BACKEND.values()))


async def replica_restart(fleet: Fleet) -> list[str]:
    fleet.replicas[1].signal(signal.SIGKILL)
    await trio.sleep(2)
    await trio.to_thread.run_sync(fleet.replicas[1].start)
    return list(set(BACKEND.values()))


async def reload(fleet: Fleet) -> list[str]:
    fleet.extra = not fleet.extra
    fleet.config.write_text(fleet.texts[fleet.extra])
    for replica in fleet.replicas:
        replica.signal(signal.SIGHUP)
    return []


FAULTS = {"stdio-kill": stdio_kill, "http-restart": http_restart, "http-freeze": http_freeze,
          "redis-failover": redis_failover, "replica-restart": replica_restart,
          "reload": reload}


# --- sampling ------------------------------------------------------------------------------------

def gauges(port: int) -> dict[str, float]:
    """The soak's gauges from a replica's /metrics (empty when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("vmcp_sessions", "vmcp_open_streams", "vmcp_tasks") \
                or name.startswith("vmcp_backend_healthy{"):
            found[name] = float(value)
    return found


def process_sample(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open descriptors) of a process; (0, 0) when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0.0, 0
    rss = next(int(line.split()[1]) for line in status.splitlines()
               if line.startswith("VmRSS:"))
    return rss / 1024, fds


def sample(fleet: Fleet, phase: str) -> dict[str, Any]:
    replicas: list[dict[str, Any]] = []
    for child, port in zip(fleet.replicas, fleet.ports, strict=True):
        rss, fds = process_sample(child.pid)
        replicas.append({"rss_mib": rss, "fds": fds, **gauges(port)})
        if phase != "load":
            replicas[-1]["descriptors"] = descriptors(fleet, child.pid)
    return {"t": time.time(), "phase": phase, "replicas": replicas}


def descriptors(fleet: Fleet, pid: int) -> dict[str, int]:
    """What a process's descriptors are: TCP connections by the part of the fleet at their
    other end, and everything else by kind (pipe, anon_inode, ...)."""
    names = {fleet.sdk_port: "sdk", fleet.floor_port: "floor",
             **dict.fromkeys(fleet.ports, "replica")}
    names.update({fleet.cluster.master_port: "redis", fleet.cluster.replica_port: "redis",
                  **dict.fromkeys(fleet.cluster.sentinel_ports, "sentinel")})
    inodes = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(fields[i].split(":")[1], 16) for i in (1, 2))
        listening = fields[3] == "0A"
        inodes[fields[9]] = ("listening" if listening else
                             names.get(remote, "client" if local in fleet.ports else
                                       f"other ({remote})"))
    kinds: dict[str, int] = {}
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return kinds
    for link in links:
        if link.startswith("socket:["):
            kind = "tcp " + inodes.get(link[8:-1], "unix or udp")
        else:
            kind = link.split(":")[0] if ":" in link else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def recovered(fleet: Fleet, touched: list[str]) -> bool:
    for port in fleet.ports:
        if not answers(f"http://127.0.0.1:{port}/readyz"):
            return False
        seen = gauges(port)
        if any(seen.get(f'vmcp_backend_healthy{{backend="{name}"}}') != 1.0
               for name in touched):
            return False
    return True


# --- the run -------------------------------------------------------------------------------------

async def soak(fleet: Fleet, args: argparse.Namespace
               ) -> tuple[list[Outcome], list[dict[str, Any]], dict[str, Any]]:
    """The run: (every operation's outcome, the samples, counts of the load's own)."""
    outcomes: list[Outcome] = []
    samples: list[dict[str, Any]] = []
    primed: list[Outcome] = []
    await Load(fleet.url, args.rate, primed.append).prime()
    if not all(outcome.ok for outcome in primed):
        raise RuntimeError(f"the fleet does not serve every operation: {primed}")
    await trio.sleep(QUIET_AFTER)
    samples.append(await trio.to_thread.run_sync(sample, fleet, "before"))
    load = Load(fleet.url, args.rate, outcomes.append)
    start = trio.current_time()
    until = start + args.minutes * 60
    warmup = min(60.0, args.minutes * 6)
    quiet_end = until - min(60.0, args.minutes * 6)

    async def sampler() -> None:
        while True:
            samples.append(await trio.to_thread.run_sync(sample, fleet, "load"))
            await trio.sleep(1)

    async def census() -> None:
        for minute in sorted(args.census):
            await trio.sleep_until(start + minute * 60)
            for replica in fleet.replicas:
                replica.signal(signal.SIGUSR1)

    async def chaos() -> None:
        await trio.sleep_until(start + warmup)
        names = list(FAULTS)
        index = 0
        while trio.current_time() + args.fault_every / 2 < quiet_end:
            name = names[index % len(names)]
            index += 1
            began = time.time()
            print(f"fault {name} at {began - fleet_start:.0f} s", flush=True)
            touched = await FAULTS[name](fleet)
            acted = time.time()
            with trio.move_on_after(120):
                while not (await trio.to_thread.run_sync(recovered, fleet, touched)
                           and any(o.ok and o.started > acted and o.backend in touched
                                   for o in outcomes[-200:])) and touched:
                    await trio.sleep(0.2)
                while touched and not await trio.to_thread.run_sync(recovered, fleet, touched):
                    await trio.sleep(0.2)
            fleet.faults.append(FaultRecord(name, touched, began, acted, time.time()))
            await trio.sleep_until(start + warmup + index * args.fault_every)

    fleet_start = time.time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler)
        nursery.start_soon(chaos)
        if args.census:
            nursery.start_soon(census)
        await load.run(until)
        nursery.cancel_scope.cancel()
    await load.close()
    left = await trio.to_thread.run_sync(sample, fleet, "left")
    samples.append(left)
    before = next(s for s in samples if s["phase"] == "before")
    held = max(r.get("vmcp_sessions", 0) for r in before["replicas"])
    with trio.move_on_after(SESSION_TTL + 45):  # the reaper looks every 10 s
        await trio.sleep(QUIET_AFTER)
        while any(r.get("vmcp_sessions", 0) > held for r in left["replicas"]):
            await trio.sleep(5)
            left = await trio.to_thread.run_sync(sample, fleet, "left")
    samples.append(await trio.to_thread.run_sync(sample, fleet, "after"))
    return outcomes, samples, {"answers_resent_after_503": load.resent,
                               "sessions_reopened_after_404": load.reopened}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="operations a second")
    parser.add_argument("--fault-every", type=float, default=75.0, help="seconds")
    parser.add_argument("--keep", action="store_true", help="keep the fleet's folder and logs")
    parser.add_argument("--census", type=lambda text: [float(m) for m in text.split(",")],
                        default=[], metavar="MINUTES,...",
                        help="at these minutes, a memory census of each replica (kill -USR1); "
                        "their lines in bench/results/soak-census.txt")
    parser.add_argument("--replica-env", action="append", default=[], metavar="NAME=VALUE",
                        type=lambda text: tuple(text.split("=", 1)),
                        help="in the replicas' environment, e.g. PYTHONTRACEMALLOC=10 for the "
                        "census's source lines or MALLOC_ARENA_MAX=2")
    parser.add_argument("--report-only", action="store_true",
                        help="make the report again from the last run's files in bench/results")
    args = parser.parse_args()
    if args.report_only:
        outcomes, samples, faults, counts = last_run(args)
    else:
        outcomes, samples, faults, counts = run(args)
    metrics, ratios = report(outcomes, samples, faults, args, RESULTS, settle=SETTLE,
                             counts=counts)
    (RESULTS / "soak-faults.json").write_bytes(orjson.dumps(
        {"faults": [dataclasses.asdict(fault) for fault in faults], "counts": counts,
         "minutes": args.minutes, "rate": args.rate}))
    emit("soak", metrics, ratios)


def run(args: argparse.Namespace) -> tuple[list[Outcome], list[dict[str, Any]],
                                           list[FaultRecord], dict[str, Any]]:
    """A soak; its outcomes and samples written to bench/results."""
    for tool in ("haproxy", "redis-server", "redis-sentinel"):
        if shutil.which(tool) is None:
            sys.exit(f"soak: {tool} is not installed (make test installs it)")
    workdir = Path(tempfile.mkdtemp(prefix="vmcp-soak-"))
    RESULTS.mkdir(exist_ok=True)
    with fleet(workdir, dict(args.replica_env)) as running:
        outcomes, samples, counts = trio.run(soak, running, args)
        faults = running.faults
        if args.census:
            (RESULTS / "soak-census.txt").write_text("".join(
                f"== {replica.name}\n" + "".join(
                    line + "\n" for line in replica.log.read_text(errors="replace").splitlines()
                    if "vmcp.memory" in line or "SIGUSR1" in line)
                for replica in running.replicas))
    with (RESULTS / "soak.jsonl").open("wb") as out:
        for outcome in outcomes:
            out.write(outcome.json() + b"\n")
    (RESULTS / "soak-samples.jsonl").write_bytes(
        b"".join(orjson.dumps(s) + b"\n" for s in samples))
    if args.keep:
        print(f"the fleet's folder: {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcomes, samples, faults, counts


def last_run(args: argparse.Namespace) -> tuple[list[Outcome], list[dict[str, Any]],
                                                list[FaultRecord], dict[str, Any]]:
    """The outcomes, samples, faults and counts a run left in bench/results (and its
    ``--minutes`` and ``--rate`` into ``args``)."""
    outcomes = [Outcome(**orjson.loads(line))
                for line in (RESULTS / "soak.jsonl").read_bytes().splitlines()]
    samples = [orjson.loads(line)
               for line in (RESULTS / "soak-samples.jsonl").read_bytes().splitlines()]
    recorded = orjson.loads((RESULTS / "soak-faults.json").read_bytes())
    args.minutes, args.rate = recorded["minutes"], recorded["rate"]
    return (outcomes, samples, [FaultRecord(**fault) for fault in recorded["faults"]],
            recorded["counts"])


if __name__ == "__main__":
    main()
