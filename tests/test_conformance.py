"""The official MCP conformance server scenarios, against the fixture server and through vmcp.

``@modelcontextprotocol/conformance`` 0.1.16 and 0.2.0-alpha.12 (``tests/peers``, installed by
``scripts/peers.py``) each test an MCP server at a URL, one scenario per fresh client session. Each
suite runs here against the fixture and through each form of vmcp:

* **directly** against ``tests/fixtures/conformance_server.py`` (the MCP Python SDK 2.x with every
  fixture the scenarios expect), which proves the fixture is right: every scenario passes, except
  those listed in ``tests/peers/expected-failures-<version>.yml`` (each with the reason it fails
  directly; a listed scenario that passes is a stale entry and fails the test, as in the suite's
  own ``--expected-failures``);
* **through vmcp** (``vmcp serve`` with that fixture as its only backend and
  ``conflictResolution: manual``, so names are not prefixed), **through ``vmcp proxy``**, and
  **through a tunnel** (``vmcp tunnel relay`` and ``vmcp proxy tunnel``), which proves each is
  transparent: every scenario that passes directly must pass through each of them too.

What runs: the ``active`` suite of each version (the handshake-era scenarios, all on the
2025-11-25 wire), 0.2's ``draft`` suite (protocol revision 2026-07-28: stateless requests,
``server/discover``, header validation, caching fields, ``InputRequiredResult`` round trips; through
vmcp the fixture is then a 2026-07-28 backend, and vmcp passes the round trips through), plus the
*pending* handshake-era scenarios the fixture supports and that say
something about a gateway: ``json-schema-2020-12`` (a tool's JSON Schema 2020-12 input schema must
reach the client unmodified) and, in 0.2, ``server-sse-polling`` (the backend closes its response
stream mid-call and delivers the answer on a ``Last-Event-ID`` GET). 0.1.16's
``server-sse-polling`` is left out: it sends ``MCP-Protocol-Version: 2025-03-26`` on a 2025-11-25
session, so a correct server sends no priming event and the scenario only warns.
Last, 0.2's scenarios of the Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663), also
one by one with ``--scenario`` (no ``--suite`` selects extension scenarios alone): they speak
2026-07-28 with the extension declared in each request's ``_meta`` client capabilities and drive
``tools/call`` to a ``CreateTaskResult`` and ``tasks/get``/``update``/``cancel`` after it; the
fixture serves them with ``tests/fixtures/tasks_extension.py``. Through vmcp they need a gateway
that passes the extension through (its advertisement in ``server/discover``, ``resultType:
"task"`` results, the ``tasks/*`` methods routed by their ``Mcp-Name: <taskId>`` header). And
0.2's scenarios of the Skills extension (``io.modelcontextprotocol/skills``, SEP-2640:
``skills/list``, ``skills/get``, SKILL.md as a resource, ``resources/directory/read``), served
by ``tests/fixtures/skills_extension.py``; through vmcp the gateway merges and routes the
backend's skills itself (:mod:`vmcp_trio.gateway.skills`). On the handshake wire (``--spec-version
2025-11-25 --force``) the fixture cannot declare the extension (the SDK's 2025-11-25
``initialize`` has no ``extensions``) and every check is skipped; vmcp declares it there, and
passes them (:func:`test_the_gateway_offers_skills_on_the_handshake_wire_too`).

A scenario passes when none of its checks is a FAILURE or a WARNING (the suite's own rule once a
baseline is given). Results are read from the ``checks.json`` files of the suite's ``-o``
directory; its stdout (ANSI colours and a ``Total:`` line) is never echoed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from vmcp_trio.tunnel.tokens import new_token_line

from .helpers import free_port, stop_processes

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "tests" / "peers"
SUITE_SCRIPTS = {v: PEERS / "node_modules" / f"conformance-{v}" / "dist" / "index.js"
                 for v in ("0.1", "0.2")}
VERSIONS = tuple(SUITE_SCRIPTS)

_HANDSHAKE_ACTIVE = (
    "server-initialize", "logging-set-level", "ping", "completion-complete", "tools-list",
    "tools-call-simple-text", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-with-logging",
    "tools-call-error", "tools-call-with-progress", "tools-call-sampling",
    "tools-call-elicitation", "elicitation-sep1034-defaults", "server-sse-multiple-streams",
    "elicitation-sep1330-enums", "resources-list", "resources-read-text",
    "resources-read-binary", "resources-templates-read", "resources-subscribe",
    "resources-unsubscribe", "prompts-list", "prompts-get-simple", "prompts-get-with-args",
    "prompts-get-embedded-resource", "prompts-get-with-image", "dns-rebinding-protection",
)
ACTIVE: dict[str, frozenset[str]] = {
    "0.1": frozenset(_HANDSHAKE_ACTIVE),                                   # 30 scenarios
    "0.2": frozenset((*_HANDSHAKE_ACTIVE, "server-session-lifecycle")),    # 31 scenarios
}
"""The ``--suite active`` sets, pinned: a suite that runs something else fails the test."""
DRAFT: dict[str, frozenset[str]] = {
    "0.1": frozenset(),
    "0.2": frozenset((
        "server-stateless", "sep-2164-resource-not-found", "caching", "http-header-validation",
        "http-custom-header-server-validation",
        *(f"input-required-result-{name}" for name in (
            "basic-elicitation", "basic-sampling", "basic-list-roots", "request-state",
            "multiple-input-requests", "multi-round", "missing-input-response",
            "non-tool-request", "result-type", "unsupported-methods", "tampered-state",
            "capability-check", "ignore-extra-params", "validate-input")))),   # 19 scenarios
}
"""The ``--suite draft`` sets (protocol revision 2026-07-28 on the wire), pinned likewise."""
EXTRA: dict[str, tuple[str, ...]] = {
    "0.1": ("json-schema-2020-12",),
    "0.2": ("json-schema-2020-12", "server-sse-polling"),
}
"""Pending scenarios run one by one with ``--scenario`` (see the module docstring)."""
SKILLS_SCENARIOS = tuple(f"sep-2640-skills-{name}"
                         for name in ("enumeration", "manifest", "directory"))
"""The Skills extension's server scenarios (in the suite's ``pending`` set)."""
EXTENSION: dict[str, frozenset[str]] = {
    "0.1": frozenset(),
    "0.2": frozenset((*(f"tasks-{name}" for name in (
        "lifecycle", "capability-negotiation", "wire-fields", "request-state-removal",
        "mrtr-input", "request-headers", "dispatch-and-envelope", "status-notifications",
        "required-task-error", "mrtr-composition")),                       # 10 scenarios
        *SKILLS_SCENARIOS)),                                                # 3 scenarios
}
"""The Tasks and Skills extensions' scenarios, pinned and run one by one with ``--scenario``
(``tasks-status-notifications`` has a single SKIPPED check, and passes with it)."""

FAILING = ("FAILURE", "WARNING")
SUITE_TIMEOUT = 60.0
"""Seconds for one ``--suite`` run (it takes about 3 s)."""
SCENARIO_TIMEOUT = 30.0
START_TIMEOUT = 20.0
_RUN_DIR = re.compile(r"^server-(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- results -------------------------------------------------------------------------------------

@dataclass
class Scenario:
    name: str
    checks: list[dict[str, Any]]

    @property
    def problems(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c.get("status") in FAILING]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.problems

    def describe(self, indent: str = "    ") -> str:
        """One line per failing check: id, status and the suite's error message."""
        if not self.checks:
            return f"{indent}(no checks recorded)"
        lines = []
        for check in self.problems:
            message = check.get("errorMessage") or check.get("description") or ""
            lines.append(f"{indent}[{check.get('id')}] {check.get('status')}: "
                         f"{' '.join(str(message).split())[:400]}")
        return "\n".join(lines)


@dataclass
class SuiteRun:
    version: str
    target: str
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    """Diagnostics of the CLI runs (exit codes, stderr), shown only when something is off."""

    @property
    def passing(self) -> set[str]:
        return {name for name, s in self.scenarios.items() if s.passed}

    @property
    def failing(self) -> set[str]:
        return set(self.scenarios) - self.passing


def read_results(output_dir: Path) -> dict[str, Scenario]:
    """The scenarios of a ``-o`` directory, from their ``checks.json`` files."""
    found: dict[str, Scenario] = {}
    for checks_file in sorted(output_dir.glob("*/checks.json")):
        match = _RUN_DIR.match(checks_file.parent.name)
        if match is None:
            continue
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        if isinstance(checks, list):
            found[match["name"]] = Scenario(match["name"], [c for c in checks
                                                            if isinstance(c, dict)])
    return found


def load_expected_failures(version: str) -> dict[str, str]:
    """``tests/peers/expected-failures-<version>.yml`` as ``{scenario: reason}``.

    The file is in the suite's own format (a mapping with a ``server:`` list), and every entry
    must say why it fails directly, in a comment on its line or on the lines just above it."""
    path = PEERS / f"expected-failures-{version}.yml"
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    document = yaml.safe_load(text) or {}
    assert isinstance(document, dict), f"{path.name}: the top level must be a mapping"
    listed = document.get("server") or []
    assert isinstance(listed, list) and all(isinstance(s, str) for s in listed), (
        f"{path.name}: server: must be a list of scenario names")
    reasons: dict[str, str] = {}
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        entry = re.match(r"^-\s*([^\s#]+)\s*(?:#\s*(.*))?$", stripped)
        if entry is not None:
            reasons[entry[1]] = " ".join(filter(None, [*comment, entry[2] or ""]))
        comment = []
    for scenario in listed:
        assert reasons.get(scenario), f"{path.name}: {scenario} needs a comment saying why"
    return {scenario: reasons[scenario] for scenario in listed}


# --- processes -----------------------------------------------------------------------------------

def _wait_for_http(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    """Until ``url`` answers at all (any HTTP status), within START_TIMEOUT."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode} before it was ready")
        try:
            with opener.open(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"{what} did not answer {url} within {START_TIMEOUT:g}s")


def _wait_for_tunnel(url: str, processes: list[subprocess.Popen[bytes]]) -> None:
    """Until the relay forwards ``url`` (any status but its 503 for a tunnel with no agent)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"the tunnel exited with {process.returncode} before it was ready")
        try:
            with opener.open(url, timeout=2):
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"the tunnel did not forward {url} within {START_TIMEOUT:g}s")


def _gateway_config(backend_url: str) -> str:
    documents = [
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPGroup",
         "metadata": {"name": "conformance"}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
         "metadata": {"name": "fixture"},
         "spec": {"groupRef": {"name": "conformance"}, "url": backend_url}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "VirtualMCPServer",
         "metadata": {"name": "conformance-gateway"},
         "spec": {"groupRef": {"name": "conformance"}, "incomingAuth": {"type": "anonymous"},
                  "aggregation": {"conflictResolution": "manual"}}},
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)


@dataclass
class Targets:
    node: str
    urls: dict[str, str]
    """``direct`` (the fixture), each form of vmcp in front of it (``THROUGH``), and the
    tunnel agent's own ``/readyz`` and ``/metrics`` (``tunnel agent``)."""
    workdir: Path
    runs: dict[tuple[str, str], SuiteRun] = field(default_factory=dict)

    def results(self, version: str, target: str) -> SuiteRun:
        """The suite ``version`` against ``target``, run once per module.

        The first call for a version runs it against the fixture and each form of vmcp at the
        same time, one thread each: a run spends most of its time waiting for the scenarios'
        own pauses (a task's seconds of work, a stream's retry), each run is a client of its
        own, with its own sessions and its own output directory, and each target is a process
        of its own."""
        if (version, target) not in self.runs:
            names = ["direct", *THROUGH]
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                runs = pool.map(lambda name: run_suite(
                    self.node, version, self.urls[name], name,
                    self.workdir / f"{name}-{version}"), names)
                self.runs.update({(version, name): run for name, run in zip(names, runs,
                                                                            strict=True)})
        return self.runs[(version, target)]


def _node() -> str:
    if not all(script.exists() for script in SUITE_SCRIPTS.values()):
        pytest.fail("the conformance suites are not installed: run "
                    "`.venv/bin/python scripts/peers.py` (make test does)")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers.py"), "--print-node"],
                         capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def targets() -> Iterator[Targets]:
    """The fixture server, and a ``vmcp serve`` and a ``vmcp proxy`` in front of it, all
    subprocesses on 127.0.0.1."""
    node = _node()
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="vmcp-conformance-") as tmp:
        workdir = Path(tmp)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            fixture_port = free_port()
            direct = f"http://127.0.0.1:{fixture_port}/mcp"
            with (workdir / "fixture.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.fixtures.conformance_server",
                     "--port", str(fixture_port)],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
            _wait_for_http(direct, processes[-1], "the fixture server")

            config = workdir / "gateway.yaml"
            config.write_text(_gateway_config(direct), encoding="utf-8")
            gateway_port = free_port()
            with (workdir / "gateway.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
                     "--config", str(config),
                     "--host", "127.0.0.1", "--port", str(gateway_port)],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
            _wait_for_http(f"http://127.0.0.1:{gateway_port}/health", processes[-1], "vmcp")

            proxy_port = free_port()
            with (workdir / "proxy.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "vmcp_trio", "proxy", "--drain-delay", "0s",
                     "--target-uri", direct, "--port", str(proxy_port), "fixture"],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
            proxied = f"http://127.0.0.1:{proxy_port}/mcp"
            _wait_for_http(proxied, processes[-1], "vmcp proxy")

            token, line = new_token_line("fixture")
            (workdir / "tokens").write_text(line + "\n", encoding="utf-8")
            (workdir / "token").write_text(token, encoding="utf-8")
            relay_port, agent_port = free_port(), free_port()
            with (workdir / "tunnel.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "vmcp_trio", "tunnel", "relay", "--port",
                     str(relay_port), "--tokens", str(workdir / "tokens"),
                     "--log-format", "json"],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "vmcp_trio", "proxy", "tunnel", "--relay-url",
                     f"ws://127.0.0.1:{relay_port}", "--tunnel-token-file",
                     str(workdir / "token"), "--target-uri", direct, "--log-format", "json",
                     "--metrics-port", str(agent_port), "fixture"],
                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
            tunneled = f"http://127.0.0.1:{relay_port}/t/fixture/mcp"
            _wait_for_tunnel(tunneled, processes[-2:])
            yield Targets(node, {"direct": direct,
                                 "vmcp": f"http://127.0.0.1:{gateway_port}/mcp",
                                 "proxy": proxied, "tunnel": tunneled,
                                 "tunnel agent": f"http://127.0.0.1:{agent_port}"}, workdir)
        finally:
            stop_processes(processes)


def _run_cli(node: str, version: str, args: list[str], timeout: float) -> str:
    """Run the suite's CLI; a short diagnostic (exit code, stderr tail) for the logs."""
    command = [node, str(SUITE_SCRIPTS[version]), "server", *args]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, cwd=PEERS,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{' '.join(args)}: timed out after {timeout:g}s"
    stderr = "\n".join(line for line in _ANSI.sub("", done.stderr.decode(errors="replace"))
                       .strip().splitlines() if not line.lstrip().startswith("Total:"))
    # Exit 1 only means "some check failed"; the checks say which.
    return f"{' '.join(args)}: exit {done.returncode}" + (f"; stderr: {stderr[-800:]}"
                                                         if stderr else "")


def run_suite(node: str, version: str, url: str, target: str, output_dir: Path) -> SuiteRun:
    """The active and draft suites plus the extra and extension scenarios of ``version``
    against ``url``."""
    run = SuiteRun(version, target)
    base = ["--url", url, "-o", str(output_dir)]
    if version != "0.1":
        base += ["--timeout", str(int(SCENARIO_TIMEOUT * 1000))]  # per scenario (0.2 only)
    run.logs.append(_run_cli(node, version, [*base, "--suite", "active"], SUITE_TIMEOUT))
    if DRAFT[version]:
        run.logs.append(_run_cli(node, version, [*base, "--suite", "draft"], SUITE_TIMEOUT))
    for scenario in (*EXTRA[version], *sorted(EXTENSION[version])):
        run.logs.append(_run_cli(node, version, [*base, "--scenario", scenario],
                                 SCENARIO_TIMEOUT + 10))
    run.scenarios = read_results(output_dir)
    expected = ACTIVE[version] | DRAFT[version] | set(EXTRA[version]) | EXTENSION[version]
    for name in expected - set(run.scenarios):
        run.scenarios[name] = Scenario(name, [])  # it crashed or never ran: a failure
    unexpected = set(run.scenarios) - expected
    assert not unexpected, (f"conformance {version} ran scenarios this test does not know "
                            f"(update ACTIVE): {sorted(unexpected)}")
    return run


def _report(title: str, run: SuiteRun, names: set[str]) -> str:
    lines = [title]
    for name in sorted(names):
        lines.append(f"  {name}")
        lines.append(run.scenarios[name].describe())
    lines.append("  suite runs: " + " | ".join(run.logs))
    return "\n".join(lines)


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_fixture_passes_the_conformance_suite_directly(targets: Targets, version: str) -> None:
    """The fixture server passes every scenario it is run (active, draft, extras, extension) on
    its own, except the scenarios its expected-failures file lists with a reason; a listed
    scenario that passes is a stale entry. This is what makes the fixture a valid reference for
    the gateway test."""
    run = targets.results(version, "direct")
    expected_failures = load_expected_failures(version)
    unexpected = run.failing - set(expected_failures)
    stale = set(expected_failures) & run.passing
    unknown = set(expected_failures) - set(run.scenarios)
    message = []
    if unexpected:
        message.append(_report(f"conformance {version}: scenarios failing directly against the "
                               "fixture (fix the fixture, or list them with a reason in "
                               f"tests/peers/expected-failures-{version}.yml):", run,
                               unexpected))
    if stale:
        message.append(f"conformance {version}: stale expected failures (they pass): "
                       f"{sorted(stale)}")
    if unknown:
        message.append(f"conformance {version}: expected failures naming scenarios that did not "
                       f"run: {sorted(unknown)}")
    if message:
        pytest.fail("\n".join(message), pytrace=False)


THROUGH = {
    "vmcp": ("vmcp serve with the fixture as its only backend (manual conflict resolution, so "
             "nothing is renamed)", "gateway.log"),
    "proxy": ("vmcp proxy in front of the fixture", "proxy.log"),
    "tunnel": ("vmcp tunnel relay and vmcp proxy tunnel in front of the fixture", "tunnel.log"),
}
"""Each way to the fixture, said in words, and its log."""


@pytest.mark.parametrize("through", list(THROUGH))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_scenario_the_fixture_passes_passes_through(targets: Targets, version: str,
                                                          through: str) -> None:
    """vmcp is transparent to the conformance suite in each of its forms (``THROUGH``): each
    scenario that passes against the fixture itself also passes through it. A difference is a
    bug of that form; the failure lists each such scenario with the ids and messages of its
    failing checks, and the end of its log."""
    direct = targets.results(version, "direct")
    result = targets.results(version, through)
    regressed = direct.passing - result.passing
    assert direct.passing, "nothing passed directly: see the direct test"
    if regressed:
        what, log_name = THROUGH[through]
        path = targets.workdir / log_name
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        kept = [line for line in text.splitlines() if " initialized (protocol " not in line]
        pytest.fail(_report(f"conformance {version}: scenarios that pass against the fixture but "
                            f"fail through {what}:", result, regressed)
                    + f"\n  {log_name} (tail):\n" + "\n".join(f"    {line}"
                                                              for line in kept[-40:]),
                    pytrace=False)


def test_both_sides_of_the_tunnel_log_json_and_count_what_they_carry(targets: Targets) -> None:
    """``--log-format json`` on the relay and the agent: every line either writes is one JSON
    object; the relay's access record of a request names its tunnel and carries the caller's
    ``X-Request-Id``; the agent's ``/metrics`` counted the exchange, its ``/readyz`` is 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(
        targets.urls["tunnel"], method="POST", data=json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
        headers={"content-type": "application/json", "x-request-id": "tunnel-json-1",
                 "accept": "application/json, text/event-stream",
                 "mcp-protocol-version": "2025-11-25"})
    try:
        opener.open(request, timeout=10).read()
    except urllib.error.HTTPError as exc:  # no session: the fixture's 400, through the tunnel
        assert exc.code == 400
    log = targets.workdir / "tunnel.log"
    deadline = time.monotonic() + 5
    while True:
        lines = log.read_text(encoding="utf-8").splitlines()
        entries = [json.loads(line) for line in lines]  # every line is JSON
        access = [e for e in entries if e.get("request_id") == "tunnel-json-1"
                  and e.get("logger") == "vmcp.access"]
        if access or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert access and access[0]["backend"] == "fixture" and access[0]["path"] == "/t/fixture/mcp"
    assert any("tunnel fixture: connected" in e.get("msg", "") for e in entries)
    agent = targets.urls["tunnel agent"]
    with opener.open(f"{agent}/readyz", timeout=5) as response:
        assert json.loads(response.read())["connected"] is True
    with opener.open(f"{agent}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert "vmcp_tunnel_agents_connected 1.0" in metrics
    to_target = re.search(r'vmcp_tunnel_bytes_total\{direction="to_target"\} (\S+)', metrics)
    assert to_target and float(to_target.group(1)) > 0


def test_the_gateway_offers_skills_on_the_handshake_wire_too(targets: Targets) -> None:
    """On the 2025-11-25 wire the fixture's skills go unseen (its ``initialize`` cannot declare
    the extension), but vmcp declares it in its own ``initialize``: each Skills scenario runs
    its checks through vmcp (the listing answered, not skipped) and none fails."""
    for scenario in SKILLS_SCENARIOS:
        output = targets.workdir / f"skills-handshake-{scenario}"
        log = _run_cli(targets.node, "0.2", [
            "--url", targets.urls["vmcp"], "-o", str(output), "--timeout", "30000",
            "--scenario", scenario, "--spec-version", "2025-11-25", "--force"],
            SCENARIO_TIMEOUT + 10)
        run = read_results(output).get(scenario)
        assert run is not None, log
        assert not run.problems, run.describe()
        skipped = [check["id"] for check in run.checks if check["status"] == "SKIPPED"]
        assert all("cache-attributes" in check for check in skipped), skipped  # 2026-07-28 only
