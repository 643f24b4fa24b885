"""``vmcp status [URL]``: a running gateway's status view, printed in a terminal.

It reads ``/status.json`` from the gateway's diagnostics listener (``vmcp serve
--diagnostics-port``; the URL of the page, of the JSON, or of the listener all work) and prints
the same facts as the page, one short line each (``--json``: the document as it came).

Rules it keeps: one request, bounded by ``--timeout``; a gateway that cannot be reached, or an
answer that is not the status document, is one line on standard error and exit 1; it sends
nothing but the request (no token: the listener asks for none).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..defaults import DEFAULT_STATUS_URL, EXIT_INVALID, EXIT_OK
from .status_page import circuit_text, duration_text, when_text

__all__ = ["configure_parser", "run", "status_text", "status_url"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", default=DEFAULT_STATUS_URL, metavar="URL",
                        help="the gateway's status page (default: %(default)s, where make run "
                             "serves it)")
    parser.add_argument("--json", action="store_true", help="print the JSON document instead")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for the answer (default: %(default)s)")


def status_url(url: str) -> str:
    """The ``/status.json`` of the listener ``url`` names (its page, JSON or root)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url[:100]}: not an http(s) URL")
    path = parts.path.rstrip("/")
    if path.endswith("/status.json"):
        pass
    elif path.endswith("/status"):
        path += ".json"
    else:
        path += "/status.json"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def run(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    try:
        url = status_url(args.url)
    except ValueError as exc:
        return _failed(str(exc))
    try:
        request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310
        with urllib.request.urlopen(request, timeout=args.timeout) as answer:  # noqa: S310
            document = json.loads(answer.read(8 * 1024 * 1024))
        if not isinstance(document, dict) or "gateway" not in document:
            raise ValueError("the answer is not a vmcp status document")
    except urllib.error.HTTPError as exc:
        return _failed(f"{url}: HTTP {exc.code}")
    except urllib.error.URLError as exc:
        return _failed(f"{url}: cannot reach the gateway: {exc.reason}")
    except (OSError, ValueError) as exc:
        return _failed(f"{url}: {exc}")
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(status_text(document))
    return EXIT_OK


def _failed(message: str) -> int:
    print(f"vmcp status: {message}", file=sys.stderr)
    return EXIT_INVALID


def status_text(document: dict[str, Any]) -> str:
    """The document as lines for a terminal."""
    gateway, config = document["gateway"], document["configuration"]
    reload = config.get("lastReload")
    reloaded = ("none since start" if not reload
                else f"{reload['outcome']} at {when_text(reload['at'])}")
    lines = [
        f"{gateway['name']}: {gateway['status']}   vmcp {gateway['version']} "
        f"({gateway['revision']}), up {duration_text(gateway['uptimeSeconds'])}, incoming auth "
        f"{gateway['incomingAuth']}",
        f"configuration {config.get('hash') or 'unknown'} loaded "
        f"{when_text(config.get('loadedAt'))}; last reload: {reloaded}",
        _requests(document.get("recentRequests") or []),
        "backends:",
    ]
    for backend in document["backends"]:
        where = backend.get("url") or backend.get("process") or ""
        latency = backend.get("latencyMs")
        line = (f"  {backend['name']:<20} {backend['status']:<10} "
                f"{backend.get('transport', ''):<6} {where:<30} ping "
                f"{f'{latency:.1f} ms' if latency is not None else '-'}")
        if circuit := circuit_text(backend):
            line += f"  {circuit}"
        if backend.get("lastError"):
            line += f"  last error: {backend['lastError']}"
        lines.append(line)
    sessions = document["sessions"]
    revisions = ", ".join(f"{rev}: {n}" for rev, n in sessions["byRevision"].items())
    lines.append(f"sessions: {sessions['total']} handshake" + (f" ({revisions})" if revisions
                                                                else "")
                 + f", {sessions['statelessIdentities']} identities on 2026-07-28, "
                 f"{sessions['openStreams']} open streams")
    for holder in sessions["largestHolders"]:
        lines.append(f"  {holder['subject']} ({holder['issuer']}): {holder['sessions']} "
                     f"session(s), {holder['openConnections']} open connection(s)")
    lines.append(_catalog(document["catalog"]))
    lines.append(_fleet(document.get("fleet")))
    return "\n".join(lines)


def _requests(series: list[dict[str, Any]]) -> str:
    if not series:
        return "requests: none yet"
    last = series[-1]
    total = sum(point["perSecond"] * 10 for point in series[:-1])
    failed = sum(point["failed"] for point in series)
    p99 = last["p99Ms"]
    return (f"requests: {last['perSecond']:g}/s now, p99 "
            f"{f'{p99:g} ms' if p99 is not None else '-'}; last 10 minutes: about "
            f"{round(total):,} ended, {failed:,} failed")


def _catalog(catalog: dict[str, Any]) -> str:
    if not catalog["seen"]:
        return "catalog: not listed yet (a client has not asked)"
    parts = []
    for name, entry in catalog["backends"].items():
        part = f"{name} {len(entry['tools'])} tools"
        if entry["renamed"]:
            renamed = ", ".join(f"{old}->{new}" for old, new in entry["renamed"].items())
            part += f" (renamed: {renamed})"
        if entry["filter"] is not None:
            part += f" (filter keeps {len(entry['filter'])})"
        parts.append(part)
    return "catalog: " + "; ".join(parts)


def _fleet(fleet: dict[str, Any] | None) -> str:
    if fleet is None:
        return "fleet: this process only (no sessionStorage)"
    if "error" in fleet:
        return f"fleet: {fleet['error']}"
    members = ", ".join(f"{r['id']}{' (this one)' if r['id'] == fleet['self'] else ''} "
                        f"{r['secondsSinceHeartbeat']:g} s ago" for r in fleet["replicas"])
    return f"fleet: {len(fleet['replicas'])} replica(s): {members}"

