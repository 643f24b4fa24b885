"""The official conformance suite's authorization-server scenarios against the embedded
authorization server.

``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (``tests/peers``) has two scenarios for an
authorization server, run with ``conformance authorization --url ISSUER``:

* ``authorization-server-metadata-endpoint``: the RFC 8414 document at the well-known URLs of
  the issuer (status, JSON, the issuer exactly, ``code``, S256) and, from 2025-11-25 on, a
  WARNING unless ``client_id_metadata_document_supported`` is true;
* ``authorization-code-grant``: with ``--client-id`` (a client registered beforehand, whose
  redirect URI is ``http://127.0.0.1:PORT/callback``), it prints an authorization URL and waits
  for a browser to come back to its callback server on PORT; then it checks the redirect (same
  URI, one ``code``, the ``state``, ``iss`` = the metadata's issuer when present, no ``error``)
  and redeems the code (200, JSON, ``Cache-Control: no-store``, ``access_token`` and
  ``token_type``). It needs the metadata scenario's result, so both run in one invocation
  without ``--scenario``.

Here one ``vmcp serve`` (the embedded authorization server with two ``oidc-provider``
upstreams, as in ``tests/test_authserver.py``) serves every revision the suite has; the
client is registered once (RFC 7591); the browser is headless: it follows the printed URL
through the chained login and delivers the final redirect to the suite's callback server. A
revision passes when no check of either scenario is a FAILURE or a WARNING, read from the
``checks.json`` files of the suite's ``-o`` directory.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from .authserver_helpers import as_docs, chained_upstreams
from .fixtures.idp import _next_step, node
from .helpers import ROOT, free_port, stop_process
from .serve_helpers import Served, serving

SUITE = ROOT / "tests" / "peers" / "node_modules" / "conformance-0.2" / "dist" / "index.js"
SCENARIOS = ("authorization-server-metadata-endpoint", "authorization-code-grant")
REVISIONS = ("2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
"""Every revision the suite runs these scenarios for (pinned: see test_the_suite_has_...)."""
FAILING = ("FAILURE", "WARNING")
RUN_TIMEOUT = 30.0
_RUN_DIR = re.compile(
    r"^authorization-server-(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")
_LISTED = re.compile(r"^\s*-\s*(?P<name>\S+)\s*\[(?P<revisions>[^\]]*)\]\s*$")


@dataclass
class Target:
    served: Served
    issuer: str
    client_id: str
    workdir: Path


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    with chained_upstreams() as (port, corp, hub), \
            tempfile.TemporaryDirectory(prefix="vmcp-as-conformance-") as tmp:
        issuer = f"http://127.0.0.1:{port}"
        with serving(as_docs(issuer, corp, hub), Path(tmp), port=port) as served:
            # Any port of a loopback IP literal matches (RFC 8252 7.3): one registration
            # serves every run, each with a callback port of its own.
            answer = httpx2.post(f"{issuer}/oauth/register", timeout=10, json={
                "redirect_uris": ["http://127.0.0.1:3000/callback"],
                "client_name": "conformance suite", "application_type": "native",
                "token_endpoint_auth_method": "none"})
            assert answer.status_code == 201, answer.text
            yield Target(served, issuer, answer.json()["client_id"], Path(tmp))


def _deliver(authorization_url: str, callback: str) -> None:
    """The headless browser: log in through the chain as alice, then bring the final redirect
    to the suite's callback server (which starts listening just after it prints the URL)."""
    with httpx2.Client(timeout=10, follow_redirects=False) as http:
        response = http.get(authorization_url)
        for _ in range(40):
            action, url, form = _next_step(response, "alice", callback)
            if action == "done":
                break
            response = http.get(url) if action == "get" else http.post(url, data=form)
        else:
            raise AssertionError("the login never came back to the callback")
        deadline = time.monotonic() + 10
        while True:
            try:
                assert http.get(url).status_code == 200
                return
            except httpx2.ConnectError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _run(target: Target, revision: str) -> tuple[int, str, Path]:
    """One run of both scenarios at ``revision``: ``(exit code, output, -o directory)``."""
    out = target.workdir / revision
    callback_port = free_port()
    callback = f"http://127.0.0.1:{callback_port}/callback"
    process = subprocess.Popen(
        [node(), str(SUITE), "authorization", "--url", target.issuer,
         "--client-id", target.client_id, "--port", str(callback_port),
         "--resource", f"{target.issuer}/mcp", "--spec-version", revision, "-o", str(out)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    output: list[str] = []
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                break
            output.append(line)
            if line.startswith(f"{target.issuer}/oauth/authorize?"):
                _deliver(line.strip(), callback)
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except (queue.Empty, subprocess.TimeoutExpired):
        pytest.fail(f"the suite did not finish within {RUN_TIMEOUT:g}s:\n" + "".join(output))
    finally:
        stop_process(process)
    return process.returncode, "".join(output), out


def _results(out: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for checks_file in sorted(out.glob("*/checks.json")):
        match = _RUN_DIR.match(checks_file.parent.name)
        if match is not None:
            checks = json.loads(checks_file.read_text(encoding="utf-8"))
            found[match["name"]] = [c for c in checks if isinstance(c, dict)]
    return found


def test_the_suite_has_these_scenarios_and_revisions() -> None:
    listed = subprocess.run([node(), str(SUITE), "list", "--authorization"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30, check=True).stdout
    scenarios = {m["name"]: tuple(r.strip() for r in m["revisions"].split(","))
                 for m in map(_LISTED.match, listed.splitlines()) if m is not None}
    assert scenarios == dict.fromkeys(SCENARIOS, REVISIONS), listed


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_embedded_authorization_server_passes(target: Target, revision: str) -> None:
    code, output, out = _run(target, revision)
    results = _results(out)
    assert set(results) == set(SCENARIOS), output
    problems = [f"{name} [{c.get('id')}] {c.get('status')}: {c.get('errorMessage')}"
                for name, checks in results.items() for c in checks
                if c.get("status") in FAILING]
    assert not problems, "\n".join(problems) + "\n" + output[-3000:]
    [grant] = results["authorization-code-grant"]
    assert grant["status"] == "SUCCESS", grant  # not SKIPPED
    response = parse_qs(urlsplit(grant["details"]["authorizationResponseUrl"]).query)
    assert response["iss"] == [target.issuer]  # RFC 9207
    ids = {c["id"] for c in results["authorization-server-metadata-endpoint"]}
    assert ("authorization-server-metadata-cimd" in ids) == (revision >= "2025-11-25")
    assert code == 0, output
    target.served.process.poll()
    assert target.served.process.returncode is None, target.served.log()[-3000:]
