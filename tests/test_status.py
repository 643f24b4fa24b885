"""The operator's status view: ``vmcp serve --diagnostics-port`` serves it as HTML and JSON,
``vmcp status`` prints it, a real Chromium renders it, and nothing secret is ever on it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from vmcp_trio.app.status_command import status_url
from vmcp_trio.http.client import HttpClient
from vmcp_trio.runtime.recent_calls import BUCKETS, SAMPLE, RecentCalls

from .gateway_helpers import RawClient, quickstart_docs
from .serve_helpers import ROOT, free_port, serving

SECRET_PASSWORD = "hunter2-in-the-url"
SECRET_QUERY = "s3cr3t-api-key"
HOSTILE_NAME = "<script>alert(1)</script><b>bold</b>"


def status_docs(down_port: int) -> list[dict[str, Any]]:
    """The quickstart plus a URL backend that is down, whose URL carries a password and a
    key in its query; ``clock_now`` renamed to ``what_time``; ``notes`` filtered."""
    docs = quickstart_docs()
    docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
                    "metadata": {"name": "faraway"},
                    "spec": {"groupRef": {"name": "quickstart"},
                             "url": f"http://ops:{SECRET_PASSWORD}@127.0.0.1:{down_port}/mcp"
                                    f"?api_key={SECRET_QUERY}"}})
    spec = docs[-1]["spec"]
    spec["operational"] = {"failureHandling": {
        "healthCheckInterval": "1s", "healthCheckTimeout": "500ms", "unhealthyThreshold": 1,
        "partialFailureMode": "best_effort"}}
    spec["aggregation"] = {"tools": [
        {"workload": "clock", "overrides": {"now": {"name": "what_time"}}},
        {"workload": "notes", "filter": ["add_note", "list_notes"]}]}
    return docs


async def fetch(http: HttpClient, url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    status, got, body = await http.request("GET", url, headers=list(headers.items()))
    return status, {name.decode().lower(): value.decode() for name, value in got}, body


@dataclass
class Gateway:
    url: str
    """``/mcp``"""
    status: str
    """The status page."""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    workdir = tmp_path_factory.mktemp("status")
    port = free_port()
    with serving(status_docs(free_port()), workdir, "--diagnostics-port", str(port)) as served:
        yield Gateway(served.url, f"http://127.0.0.1:{port}/")


async def use_the_gateway(url: str) -> RawClient:
    client = RawClient(url)
    reply = await client.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": HOSTILE_NAME, "version": "1"}}})
    client.session_id = reply.headers.get("mcp-session-id")
    await client.notify("notifications/initialized")
    await client.request("tools/list")
    for _ in range(5):
        await client.request("tools/call", {"name": "clock_what_time", "arguments": {}})
    await client.request("tools/call", {"name": "no_such_tool", "arguments": {}})
    return client


async def test_the_json_says_what_the_gateway_is_doing(gateway: Gateway) -> None:
    client = await use_the_gateway(gateway.url)
    http = HttpClient()
    try:
        with trio.fail_after(15):  # the down backend's first check has failed
            while True:
                status, headers, body = await fetch(http, gateway.status + "status.json")
                document = orjson.loads(body)
                faraway = next(b for b in document["backends"] if b["name"] == "faraway")
                if faraway["status"] == "unhealthy":
                    break
                await trio.sleep(0.2)
    finally:
        await client.aclose()
        await http.aclose()
    assert status == 200 and headers["content-type"] == "application/json"
    assert document["gateway"]["name"] == "default/quickstart"
    assert document["gateway"]["status"] == "ready"  # best_effort: one healthy backend will do
    assert len(document["gateway"]["revision"]) == 12 and document["configuration"]["hash"]
    assert document["configuration"]["lastReload"] is None
    assert faraway["url"].startswith("http://127.0.0.1:") and faraway["url"].endswith("/mcp")
    assert "connection refused" in faraway["lastError"]
    sessions = document["sessions"]
    assert sessions["total"] >= 1 and sessions["byRevision"]["2025-11-25"] >= 1
    assert sessions["largestHolders"][0]["subject"] == "anonymous"
    assert HOSTILE_NAME in sessions["clients"]
    catalog = document["catalog"]["backends"]
    assert "clock_what_time" in catalog["clock"]["tools"]
    assert "clock_now" not in catalog["clock"]["tools"]
    assert catalog["clock"]["renamed"] == {"now": "what_time"}
    assert sorted(catalog["notes"]["tools"]) == ["notes_add_note", "notes_list_notes"]
    assert catalog["notes"]["filter"] == ["add_note", "list_notes"]
    assert document["fleet"] is None
    recent = document["recentRequests"]
    assert len(recent) == BUCKETS
    assert sum(point["failed"] for point in recent) >= 1  # the unknown tool
    assert any(point["perSecond"] > 0 and point["p99Ms"] is not None for point in recent)


async def test_nothing_secret_is_on_the_page_the_json_or_the_terminal(gateway: Gateway) -> None:
    client = await use_the_gateway(gateway.url)
    http = HttpClient()
    try:
        _, headers, page = await fetch(http, gateway.status)
        _, _, data = await fetch(http, gateway.status + "status.json")
    finally:
        await client.aclose()
        await http.aclose()
    printed = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", gateway.status],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    session = client.session_id
    assert session
    for text in (page.decode(), data.decode(), printed):
        assert SECRET_PASSWORD not in text and SECRET_QUERY not in text
        assert session not in text and session[:8] not in text
    html = page.decode()
    assert HOSTILE_NAME not in html and "&lt;script&gt;" in html  # client input is escaped
    assert "script-src" not in headers["content-security-policy"]  # no script may run
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-store"


async def test_a_rebound_host_another_origin_or_a_write_is_refused(gateway: Gateway) -> None:
    http = HttpClient()
    try:
        rebound, _, _ = await fetch(http, gateway.status + "status.json",
                                    host="attacker.example:80")
        other_origin, _, _ = await fetch(http, gateway.status + "status.json",
                                         origin="http://attacker.example")
        status, _, _ = await http.request("POST", gateway.status + "status.json", body=b"{}")
        missing, _, body = await fetch(http, gateway.status + "admin")
        metrics, _, text = await fetch(http, gateway.status + "metrics")
        ready, _, _ = await fetch(http, gateway.status + "readyz")
    finally:
        await http.aclose()
    assert (rebound, other_origin, status, missing) == (403, 403, 405, 404)
    assert b"status.json" in body
    assert metrics == 200 and b"vmcp_build_info" in text and ready == 200


def test_vmcp_status_prints_it_in_a_terminal(gateway: Gateway) -> None:
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", gateway.status],
                         capture_output=True, text=True, timeout=30, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("default/quickstart: ")
    assert any(line.split()[:2] == ["clock", "healthy"] for line in lines)
    assert any(line.split()[:2] == ["faraway", "unhealthy"] for line in lines)
    assert any(line.startswith("sessions: ") for line in lines)
    assert "fleet: this process only" in run.stdout
    as_json = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", "--json",
                              gateway.status.rstrip("/") + "/status"], capture_output=True,
                             text=True, timeout=30, check=True)
    assert json.loads(as_json.stdout)["gateway"]["name"] == "default/quickstart"


def test_vmcp_status_of_a_gateway_that_is_not_there_is_one_line_and_exit_1() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", url],
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "cannot reach the gateway" in run.stderr
    wrong = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", "file:///etc/passwd"],
                           capture_output=True, text=True, timeout=30, check=False)
    assert wrong.returncode == 1 and "not an http(s) URL" in wrong.stderr


def test_status_urls_name_the_json() -> None:
    assert status_url("http://127.0.0.1:4484/") == "http://127.0.0.1:4484/status.json"
    assert status_url("127.0.0.1:4484") == "http://127.0.0.1:4484/status.json"
    assert status_url("http://h:1/status") == "http://h:1/status.json"
    assert status_url("http://h:1/status.json?x=1") == "http://h:1/status.json"


def test_chromium_renders_the_page(gateway: Gateway, tmp_path: Path) -> None:
    trio.run(use_the_gateway, gateway.url)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1100,1400"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", gateway.status],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "<h1>default/quickstart" in dom
    assert "clock_what_time" in dom and "faraway" in dom
    assert "<svg" in dom and "<rect" in dom  # the chart's bars
    assert "<script" not in dom.split("<body", 1)[1].replace("&lt;script", "")
    shot = tmp_path / "status.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", gateway.status],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_a_reload_shows_on_the_status(tmp_path: Path) -> None:
    port = free_port()
    with serving(quickstart_docs(), tmp_path, "--diagnostics-port", str(port)) as served:
        served.process.send_signal(signal.SIGHUP)
        status = f"http://127.0.0.1:{port}/status.json"
        document: dict[str, Any] = {}
        for _ in range(100):
            run = subprocess.run([sys.executable, "-m", "vmcp_trio", "status", "--json", status],
                                 capture_output=True, text=True, timeout=30, check=True)
            document = json.loads(run.stdout)
            if document["configuration"]["lastReload"]:
                break
        assert document["configuration"]["lastReload"]["outcome"] == "unchanged"


def test_recent_calls_are_bounded_and_their_percentile_is_the_tail() -> None:
    now = [1000.0]
    recent = RecentCalls(clock=lambda: now[0])
    for i in range(10_000):
        recent.record(0.010 if i % 100 else 1.0, failed=i % 1000 == 0)
    series = recent.series()
    assert len(series) == BUCKETS
    last = series[-1]
    assert last["failed"] == 10
    assert last["p99Ms"] in (10.0, 1000.0)  # a sample of 512 of which ~1% are slow
    assert len(recent._buckets[-1].latencies) == SAMPLE
    now[0] += 10 * 60 * 2  # twenty minutes on: all of it has aged out
    recent.record(0.002, failed=False)
    assert [p["perSecond"] for p in recent.series()[:-1]] == [0.0] * (BUCKETS - 1)
    assert recent.series()[-1]["p99Ms"] == 2.0
