"""Prometheus metrics of one gateway process, in a registry of its own.

Kept small on purpose: per request one counter increment and one histogram observation
(labels: method, backend, outcome), gauges read on scrape for sessions, open streams, trio tasks
and backend health, and counters of what went wrong and was contained. ``/metrics`` renders the
text format.

Conventions (Prometheus'): a counter's series ends in ``_total`` (the client library adds it to
the names given here) and has no ``_created`` twin; every label's values are bounded (method
names outside the MCP ones are "other", backends and tasks come from the configuration).

Every vmcp process that serves HTTP (``vmcp serve``, ``vmcp proxy``, ``vmcp tunnel relay``, the
tunnel agent) exports, from :class:`ProcessMetrics`, the same two things first:
``vmcp_build_info{version,revision}`` (:mod:`.build`) and the ``process_*`` series (CPU seconds,
resident memory, open and maximum descriptors: the client library's process collector, read
from ``/proc`` on scrape). docs/operations.md lists every metric with its labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from .build import VERSION, revision
from .recent_calls import RecentCalls

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide: _created doubles it

__all__ = ["CONTENT_TYPE", "Metrics", "ProcessMetrics", "TunnelMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4"
_MAX_CACHED_LABEL_SETS = 4096
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0)


class ProcessMetrics:
    """A registry of one process's metrics, holding what every vmcp process exports: the
    ``process_*`` series and ``vmcp_build_info{version,revision}`` (1)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, _open_fds, ...
        Gauge("vmcp_build_info", "1, labelled with the running version and the source "
              "revision it was built from", ["version", "revision"],
              registry=self.registry).labels(VERSION, revision()).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Metrics(ProcessMetrics):
    """The metrics of ``vmcp serve``."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = Counter("vmcp_requests", "MCP requests answered, by method, backend "
                                "(vmcp: answered by the gateway) and outcome",
                                ["method", "backend", "outcome"], registry=self.registry)
        self._observed: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self.recent = RecentCalls()
        """The last minutes of requests, for the status page's chart."""
        """:meth:`observe`'s metric children by label values."""
        self.latency = Histogram("vmcp_request_duration_seconds", "Time to answer MCP requests",
                                 ["method", "backend"], buckets=_BUCKETS,
                                 registry=self.registry)
        self.sessions = Gauge("vmcp_sessions", "Live client sessions", registry=self.registry)
        self.open_streams = Gauge("vmcp_open_streams", "Open SSE connections to clients",
                                  registry=self.registry)
        self.tasks = Gauge("vmcp_tasks", "Trio tasks alive in the process (steady under a "
                           "steady load; a climb that does not come back down is a leak)",
                           registry=self.registry)
        self.backend_healthy = Gauge("vmcp_backend_healthy",
                                     "1 when the backend is usable (healthy or not yet checked)",
                                     ["backend"], registry=self.registry)
        self.backend_circuit_open = Gauge(
            "vmcp_backend_circuit_open", "1 while the backend's circuit breaker is open or "
            "half-open (circuitBreaker.enabled): its requests are refused without trying it",
            ["backend"], registry=self.registry)
        self.anonymous_mode = Gauge("vmcp_anonymous_mode",
                                    "1 when incoming auth is anonymous (no checks at all)",
                                    registry=self.registry)
        self.auth_failures = Counter("vmcp_auth_failures", "Requests refused by incoming auth, "
                                     "by HTTP status and RFC 6750 error",
                                     ["status", "error"], registry=self.registry)
        self.auth_keys_healthy = Gauge("vmcp_auth_keys_healthy",
                                       "1 when the issuer's signing keys were fetched at the last "
                                       "attempt (0: never loaded, or serving stale keys)",
                                       registry=self.registry)
        self.upstream_refreshes = Counter("vmcp_upstream_refreshes",
                                          "Refreshes of stored upstream tokens by this process, "
                                          "by provider and outcome (ok, refused, failed)",
                                          ["provider", "outcome"], registry=self.registry)
        self.backend_restarts = Counter("vmcp_backend_restarts",
                                        "Restarts of a stdio backend's process", ["backend"],
                                        registry=self.registry)
        self.reloads = Counter("vmcp_reloads", "Configuration reloads, by outcome (ok, "
                               "unchanged, invalid, failed)", ["outcome"],
                               registry=self.registry)
        self.config_info = Gauge("vmcp_config_info", "1, labelled with a short sha256 of the "
                                 "configuration loaded last", ["hash"], registry=self.registry)
        self.config_loaded = Gauge("vmcp_config_loaded_timestamp_seconds", "When the "
                                   "configuration in use was loaded (at start, and at each "
                                   "reload that accepted it), in seconds since the epoch",
                                   registry=self.registry)
        self.task_restarts = Counter("vmcp_task_restarts", "Restarts of supervised tasks after "
                                     "a failure or crash, by task", ["task"],
                                     registry=self.registry)
        self.faults = Counter("vmcp_faults", "Unexpected errors contained where they happened, "
                              "by what they ended: request, session or connection",
                              ["scope"], registry=self.registry)
        self.sessions_evicted = Counter("vmcp_sessions_evicted", "Sessions ended to make room "
                                        "for another client's when the gateway held "
                                        "--max-sessions", registry=self.registry)
        self.client_disconnects = Counter("vmcp_client_disconnects", "Clients that left before "
                                          "their request was read or answered",
                                          registry=self.registry)
        self.shared_sessions = Counter("vmcp_shared_session_events", "What replicas sharing "
                                       "sessions did, by event: adopted (a copy of another "
                                       "replica's session), taken_over (a call whose replica "
                                       "died, resumed here), lost (such a call ended with an "
                                       "error), unlogged (a call's log could not be written: it "
                                       "cannot be resumed elsewhere)", ["event"],
                                       registry=self.registry)
        self.exchange_shared = Counter("vmcp_token_exchange_shared", "Token exchanges answered "
                                       "through the replicas' shared cache, by outcome: hit "
                                       "(another replica's token), fallback (Redis away: "
                                       "exchanged alone)", ["outcome"], registry=self.registry)
        self.authz_decisions = Counter("vmcp_authz_decisions", "Requests checked against the "
                                       "authorization policies, by decision (allowed, denied)",
                                       ["decision"], registry=self.registry)
        self.rate_limited = Counter("vmcp_rate_limited", "Tool calls refused by a rate limit, "
                                    "by the limit that refused", ["limit"],
                                    registry=self.registry)
        self.audit_dropped = Counter("vmcp_audit_events_dropped", "Audit events dropped "
                                     "because the audit log's queue was full (the writer "
                                     "cannot keep up)", registry=self.registry)
        self.rate_limit_unavailable = Counter("vmcp_rate_limit_unavailable", "Tool calls let "
                                              "through unlimited because the shared rate limits' "
                                              "Redis could not be asked (fail open)",
                                              registry=self.registry)
        self.webhook_calls = Counter("vmcp_webhook_calls", "Calls to a backend's webhooks, by "
                                     "webhook (namespace/config/name) and outcome (allowed, "
                                     "patched, denied, failed_closed, failed_open)",
                                     ["webhook", "outcome"], registry=self.registry)

    def observe(self, method: str, backend: str, outcome: str, seconds: float) -> None:
        children = self._observed.get((method, backend, outcome))
        if children is None:  # prometheus_client's labels() costs ~2 µs: once per label set
            children = (self.requests.labels(method, backend, outcome),
                        self.latency.labels(method, backend))
            if len(self._observed) < _MAX_CACHED_LABEL_SETS:
                self._observed[method, backend, outcome] = children
        children[0].inc()
        children[1].observe(seconds)
        self.recent.record(seconds, outcome != "ok")

    def count_restart(self, task: str) -> None:
        self.task_restarts.labels(task).inc()

    def watch(self, gauge: Gauge, read: Callable[[], float], *labels: str) -> None:
        (gauge.labels(*labels) if labels else gauge).set_function(read)

    def config_loaded_now(self, digest: str) -> None:
        """A configuration was loaded now (at start, or by a reload that accepted it);
        ``digest``: its short hash (``ValidationResult.digest``)."""
        self.config_info.clear()
        self.config_info.labels(digest).set(1)
        self.config_loaded.set_to_current_time()


class TunnelMetrics(ProcessMetrics):
    """The metrics of one side of a tunnel, under the same names on both: the relay's
    ``/metrics``, and the agent's (``vmcp proxy tunnel --metrics-port``)."""

    def __init__(self) -> None:
        super().__init__()
        self.agents = Gauge("vmcp_tunnel_agents_connected", "Tunnels with an agent connected",
                            registry=self.registry)
        self.streams = Gauge("vmcp_tunnel_streams_open", "Exchanges in flight through tunnels",
                             registry=self.registry)
        self.bytes = Counter("vmcp_tunnel_bytes", "Body bytes through tunnels, by direction "
                             "(to_target, to_client)", ["direction"], registry=self.registry)
        self.to_target = self.bytes.labels("to_target")
        self.to_client = self.bytes.labels("to_client")
        self.connections = Counter("vmcp_tunnel_connections", "Agent connections, by outcome "
                                   "(relay: accepted, refused, replaced; agent: connected, "
                                   "refused, failed)", ["outcome"], registry=self.registry)
