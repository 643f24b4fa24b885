"""The status view as a page for a person: the document of :mod:`.status` rendered as HTML.

Rules it keeps:

* Rendered on the server, no script: the page works with JavaScript off and under a
  Content-Security-Policy that allows no script at all (:data:`PAGE_HEADERS`); it asks the
  browser to load it again every :data:`REFRESH_SECONDS`.
* Every value is escaped (:func:`html.escape`): client names and backend errors are text from
  outside.
* The chart is an inline SVG of the document's ``recentRequests``: requests a second (bars) and
  the 99th percentile latency (line), each scaled to its own maximum.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

__all__ = ["PAGE_HEADERS", "REFRESH_SECONDS", "duration_text", "status_page", "when_text"]

REFRESH_SECONDS = 5
PAGE_HEADERS = (
    ("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'; "
     "img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
)

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em 2em;color:#1d232b;background:#f6f7f9}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40em}
th,td{text-align:left;padding:.3em .8em;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef0f3;font-weight:600}.muted{color:#66707c}
.badge{display:inline-block;padding:.1em .6em;border-radius:1em;font-weight:600;color:#fff}
.ready,.healthy{background:#1a7f37}.degraded,.unknown{background:#b7791f}
.not-ready,.unhealthy{background:#c62828}
.facts span{margin-right:1.6em}code{font-size:.95em}
svg{background:#fff;border:1px solid #e3e6ea}
"""


def status_page(document: dict[str, Any]) -> str:
    gateway = document["gateway"]
    return "".join([
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">',
        f"<title>vmcp {_e(gateway['name'])}: {_e(gateway['status'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        _header(document),
        _chart(document["recentRequests"]),
        _backends(document["backends"]),
        _sessions(document["sessions"]),
        _catalog(document["catalog"]),
        _fleet(document["fleet"]),
        '<p class=muted>The same as JSON: <a href="/status.json">/status.json</a>; metrics: '
        '<a href="/metrics">/metrics</a></p></body></html>',
    ])


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _badge(state: str) -> str:
    return f'<span class="badge {_e(state.replace(" ", "-"))}">{_e(state)}</span>'


def when_text(unix: float | None) -> str:
    if not unix:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def circuit_text(backend: dict[str, Any]) -> str:
    """``circuit open until <when>`` (or half-open) for a backend whose circuit breaker is not
    closed, else ""."""
    circuit = backend.get("circuit")
    if circuit in (None, "closed"):
        return ""
    until = backend.get("circuitReopensAt")
    return f"circuit {circuit}" + (f" until {when_text(until)}" if until else "")


def _header(document: dict[str, Any]) -> str:
    gateway, config = document["gateway"], document["configuration"]
    reload = config["lastReload"]
    reloaded = ("none since start" if reload is None
                else f"{_e(reload['outcome'])} at {when_text(reload['at'])}")
    return (f"<h1>{_e(gateway['name'])} {_badge(gateway['status'])}</h1><p class=facts>"
            f"<span>vmcp {_e(gateway['version'])} (<code>{_e(gateway['revision'])}</code>)</span>"
            f"<span>up {duration_text(gateway['uptimeSeconds'])}</span>"
            f"<span>incoming auth: {_e(gateway['incomingAuth'])}</span></p><p class=facts>"
            f"<span>configuration <code>{_e(config['hash'] or 'unknown')}</code> loaded "
            f"{when_text(config['loadedAt'])}</span><span>last reload: {reloaded}</span></p>")


def duration_text(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def _chart(series: list[dict[str, Any]]) -> str:
    width, height, pad = 720, 160, 24
    rate_top = max((point["perSecond"] for point in series), default=0) or 1
    p99s = [point["p99Ms"] for point in series if point["p99Ms"] is not None]
    p99_top = max(p99s, default=0) or 1
    step = (width - 2 * pad) / max(len(series), 1)
    bars, line = [], []
    for i, point in enumerate(series):
        x = pad + i * step
        bar = (height - 2 * pad) * point["perSecond"] / rate_top
        if bar:
            fill = "#c62828" if point["failed"] else "#4a7bd0"
            bars.append(f'<rect x="{x:.1f}" y="{height - pad - bar:.1f}" '
                        f'width="{max(step - 1, 1):.1f}" height="{bar:.1f}" fill="{fill}"/>')
        if point["p99Ms"] is not None:
            y = height - pad - (height - 2 * pad) * point["p99Ms"] / p99_top
            line.append(f"{x + step / 2:.1f},{y:.1f}")
    polyline = (f'<polyline points="{" ".join(line)}" fill="none" stroke="#b7791f" '
                'stroke-width="2"/>' if line else "")
    polyline += "".join(f'<circle cx="{point.split(",")[0]}" cy="{point.split(",")[1]}" '
                        'r="2.5" fill="#b7791f"/>' for point in line)
    last = series[-1] if series else {"perSecond": 0, "p99Ms": None}
    return ("<h2>Requests, last 10 minutes</h2>"
            f'<svg role="img" aria-label="requests a second and p99 latency" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}">{"".join(bars)}{polyline}'
            f'<text x="{pad}" y="16" font-size="12" fill="#4a7bd0">max {rate_top:g}/s</text>'
            f'<text x="{width - pad}" y="16" font-size="12" fill="#b7791f" '
            f'text-anchor="end">p99 max {p99_top:g} ms</text></svg>'
            f"<p class=muted>now: {_e(last['perSecond'])} requests/s, p99 "
            f"{_e(last['p99Ms'] if last['p99Ms'] is not None else '-')} ms "
            "(bars: requests a second, red when some failed; line: p99 latency)</p>")


def _backends(backends: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_e(b['name'])}</td><td>{_badge(b['status'])} {_e(circuit_text(b))}</td>"
        f"<td>{_e(b.get('transport', ''))}</td>"
        f"<td><code>{_e(b.get('url') or b.get('process') or '')}</code></td>"
        f"<td>{_e(b['latencyMs']) if b.get('latencyMs') is not None else '-'}</td>"
        f"<td>{_e(b.get('lastError') or '')}</td></tr>" for b in backends)
    return ("<h2>Backends</h2><table><tr><th>name</th><th>health</th><th>transport</th>"
            "<th>where</th><th>ping ms</th><th>last error</th></tr>"
            f"{rows or '<tr><td colspan=6>none</td></tr>'}</table>")


def _sessions(sessions: dict[str, Any]) -> str:
    revisions = ", ".join(f"{_e(rev)}: {count}" for rev, count in
                          sessions["byRevision"].items()) or "none"
    holders = "".join(
        f"<tr><td>{_e(h['subject'])}</td><td class=muted>{_e(h['issuer'])}</td>"
        f"<td>{h['sessions']}</td><td>{h['openConnections']}</td></tr>"
        for h in sessions["largestHolders"])
    clients = ", ".join(f"{_e(name)}: {count}" for name, count in
                        sessions["clients"].items()) or "none"
    return (f"<h2>Sessions</h2><p class=facts><span>{sessions['total']} handshake sessions "
            f"({revisions})</span><span>{sessions['statelessIdentities']} identities on "
            f"2026-07-28</span><span>{sessions['openStreams']} open streams</span></p>"
            f"<p>Clients: {clients}</p>"
            "<table><tr><th>identity</th><th>issuer</th><th>sessions</th>"
            f"<th>open connections</th></tr>{holders or '<tr><td colspan=4>none</td></tr>'}"
            "</table>")


def _catalog(catalog: dict[str, Any]) -> str:
    rows = []
    for name, entry in catalog["backends"].items():
        tools = ", ".join(_e(tool) for tool in entry["tools"]) or "-"
        renamed = ", ".join(f"{_e(old)} → {_e(new)}" for old, new in entry["renamed"].items())
        kept = "all" if entry["filter"] is None else ", ".join(_e(t) for t in entry["filter"])
        rows.append(f"<tr><td>{_e(name)}</td><td>{len(entry['tools'])}</td><td>{tools}</td>"
                    f"<td>{renamed or '-'}</td><td>{kept}</td></tr>")
    note = ("" if catalog["seen"] else
            "<p class=muted>No session has listed the tools yet: the lists appear once a "
            "client has asked.</p>")
    left_out = "".join(f"<p>Left out: {_e(name)}: {_e(why)}</p>"
                       for name, why in catalog["leftOut"].items())
    return (f"<h2>Catalog</h2>{note}{left_out}<p class=muted>conflict resolution: "
            f"{_e(catalog['conflictResolution'])}; composite tools: "
            f"{', '.join(_e(t) for t in catalog['compositeTools']) or 'none'}</p>"
            "<table><tr><th>backend</th><th>tools</th><th>as clients see them</th>"
            f"<th>renamed</th><th>filter keeps</th></tr>{''.join(rows)}</table>")


def _fleet(fleet: dict[str, Any] | None) -> str:
    if fleet is None:
        return ("<h2>Fleet</h2><p class=muted>Sessions are held in this process only "
                "(no sessionStorage).</p>")
    if "error" in fleet:
        return f"<h2>Fleet</h2><p>{_e(fleet['error'])}</p>"
    rows = "".join(
        f"<tr><td><code>{_e(r['id'])}</code>{' (this one)' if r['id'] == fleet['self'] else ''}"
        f"</td><td>{_e(r['secondsSinceHeartbeat'])} s ago</td></tr>" for r in fleet["replicas"])
    return ("<h2>Fleet</h2><table><tr><th>replica</th><th>last heartbeat</th></tr>"
            f"{rows}</table>")
