"""What the status view says about one running ``vmcp serve``: a JSON document assembled, when
asked, from the state its parts keep anyway (backend health, the sessions, a session's catalog,
the configuration's hash and reloads, the fleet's heartbeats, the last minutes of requests).

Rules it keeps:

* Read-only: assembling it changes nothing. The only wait is the fleet's listing in Redis,
  bounded by :data:`FLEET_TIMEOUT`; a failure there is said in the document, never raised.
* Nothing secret, ever: no token, header value, session id or claim. A backend URL is shown
  without its user-info and query (``scheme://host:port/path``). Identities are their issuer
  and subject (what the access log shows); client names are the ``clientInfo`` the clients
  sent, cut to :data:`MAX_TEXT` characters (the page escapes them: they are client input).
* Bounded: the :data:`TOP` identities holding the most sessions, at most :data:`MAX_TOOLS`
  tool names per backend, at most :data:`~vmcp_trio.gateway.fleet.MAX_LISTED` replicas.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import trio

from ..gateway.aggregation import Catalog
from ..gateway.session import ClientSession
from ..runtime.build import VERSION, revision
from ..runtime.shared_storage import StorageUnavailable
from .parts import GatewayProcess

__all__ = ["FLEET_TIMEOUT", "status_document"]

TOP = 10
MAX_TOOLS = 200
MAX_TEXT = 80
FLEET_TIMEOUT = 2.0


async def status_document(process: GatewayProcess) -> dict[str, Any]:
    """The status of ``process`` now (the JSON of ``/status.json``)."""
    plan = process.plan
    ready, readiness = await process.app.ready()
    return {
        "gateway": {
            "name": f"{plan.namespace}/{plan.name}", "group": plan.group,
            "version": VERSION, "revision": revision(),
            "status": readiness.get("status", "ready" if ready else "not ready"),
            "startedAt": round(process.started_at, 3),
            "uptimeSeconds": round(time.time() - process.started_at, 1),
            "incomingAuth": "anonymous" if process.authenticator.anonymous else "oidc",
        },
        "configuration": _configuration(process),
        "backends": [_backend(entry) for entry in process.gateway.health.report()],
        "sessions": _sessions(process),
        "catalog": _catalog(process),
        "fleet": await _fleet(process),
        "recentRequests": process.metrics.recent.series(),
    }


def _configuration(process: GatewayProcess) -> dict[str, Any]:
    reload = process.last_reload
    return {
        "hash": process.config_digest,
        "loadedAt": process.config_loaded_at and round(process.config_loaded_at, 3),
        "lastReload": None if reload is None else {"at": round(reload[0], 3),
                                                   "outcome": reload[1]},
    }


def _backend(entry: dict[str, Any]) -> dict[str, Any]:
    shown = dict(entry)
    if "url" in shown:
        shown["url"] = shown_url(shown["url"])
    return shown


def shown_url(url: str) -> str:
    """``url`` without user-info, query or fragment: what may be shown of a backend's URL."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _live(process: GatewayProcess) -> list[ClientSession]:
    gateway = process.gateway
    return [session for session in (*gateway.sessions.values(),
                                    *gateway.stateless_contexts.values())
            if not session.closed.is_set()]


def _sessions(process: GatewayProcess) -> dict[str, Any]:
    gateway = process.gateway
    handshake = [s for s in gateway.sessions.values() if not s.closed.is_set()]
    by_revision = Counter(session.revision.version for session in handshake)
    holders = Counter(session.identity.key for session in handshake)
    connections = Counter[tuple[str, str]]()
    clients = Counter[str]()
    for session in handshake:
        connections[session.identity.key] += session.open_connections
        name = session.client_info.get("name")
        clients[_text(name) if isinstance(name, str) else "(unnamed)"] += 1
    return {
        "total": len(handshake),
        "byRevision": dict(sorted(by_revision.items())),
        "statelessIdentities": len(gateway.stateless_contexts),
        "openStreams": process.app.responder.open_streams,
        "largestHolders": [
            {"issuer": _text(issuer), "subject": _text(subject), "sessions": count,
             "openConnections": connections[issuer, subject]}
            for (issuer, subject), count in holders.most_common(TOP)],
        "clients": dict(clients.most_common(TOP)),
    }


def _catalog(process: GatewayProcess) -> dict[str, Any]:
    """The tools a live session lists, by backend, and the configuration's renames and
    filters (the catalog of the most recently active session: with per-user credentials two
    users may see different lists)."""
    catalog: Catalog | None = None
    for session in sorted(_live(process), key=lambda s: s.last_active, reverse=True):
        catalog = session.catalog.built
        if catalog is not None:
            break
    aggregation = process.plan.aggregation
    rules = {rule.workload: rule for rule in (*aggregation.backend_tools, *aggregation.tools)}
    backends: dict[str, dict[str, Any]] = {}
    for backend in process.plan.backends:
        rule = rules.get(backend.name)
        backends[backend.name] = {
            "tools": [], "renamed": {o.tool: o.name for o in rule.overrides if o.name}
            if rule else {},
            "filter": list(rule.filter) if rule and rule.filter is not None else None,
        }
    if catalog is not None:
        for visible, route in catalog.tool_routes.items():
            entry = backends.get(route.backend)
            if entry is not None and len(entry["tools"]) < MAX_TOOLS:
                entry["tools"].append(visible)
    return {
        "seen": catalog is not None,
        "conflictResolution": aggregation.conflict_resolution,
        "backends": backends,
        "compositeTools": [tool.name for tool in process.plan.composite_tools],
        "leftOut": dict(catalog.failures) if catalog is not None else {},
    }


async def _fleet(process: GatewayProcess) -> dict[str, Any] | None:
    shared = process.shared
    if shared is None:
        return None
    fleet = shared.fleet
    try:
        with trio.fail_after(FLEET_TIMEOUT):
            members = await fleet.members()
    except (StorageUnavailable, trio.TooSlowError) as exc:
        why = str(exc) or f"no answer within {FLEET_TIMEOUT:g}s"
        return {"self": fleet.replica, "error": f"the replicas could not be listed: {why}"}
    return {"self": fleet.replica, "heartbeatSeconds": fleet.heartbeat,
            "replicas": [{"id": replica, "secondsSinceHeartbeat": round(age, 1)}
                         for replica, age in members]}


def _text(value: str) -> str:
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT - 1] + "…"
