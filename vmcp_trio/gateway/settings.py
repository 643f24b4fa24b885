"""The operator's settings of one ``vmcp serve`` process (flags, not resources).

Everything here has a default that suits a single gateway on loopback; the command line
(:mod:`vmcp_trio.cli`) fills it from flags. The resources (:mod:`vmcp_trio.resources`) say *what*
is served; these say *how*: where to listen and the bounds of what a client may hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..auth.incoming.build import AuthSettings

__all__ = ["GatewaySettings"]


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 4483
    diagnostics_host: str = "127.0.0.1"
    diagnostics_port: int | None = None
    """The status view's and probes' own listener (:mod:`vmcp_trio.app.diagnostics`); None:
    none (0: a free port, said at start)."""
    session_idle_ttl: float = 30 * 60.0
    max_sessions: int = 10_000
    max_sessions_per_client: int = 100
    """Sessions one identity (under anonymous auth: one address) may hold; past it the
    client's longest-idle session without an open stream is ended, or 429."""
    max_requests_per_session: int = 64
    max_stdio_calls_per_session: int = 16
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_seconds: float = 15.0
    """How long a request body may take to arrive once its headers did (408 after)."""
    max_batch: int = 64
    """Messages in one 2025-03-26 batch."""
    max_header_bytes: int = 16 * 1024
    drain_delay_seconds: float = 5.0
    """After a shutdown signal, how long new sessions are still served (readiness is already
    503: a load balancer needs a moment to notice)."""
    shutdown_grace_seconds: float = 30.0
    """After a shutdown signal, how long calls in flight have to finish (Kubernetes'
    termination grace); then each left gets an error."""
    idle_connection_seconds: float = 75.0
    """An HTTP connection with no request in progress is closed after this (this also bounds
    how long request headers may take to arrive)."""
    stream_buffer_events: int = 256
    sse_retry_ms: int = 2000
    keepalive_seconds: float = 15.0
    json_window_seconds: float = 1.0
    """How long a request may wait for its backend before the reply switches to SSE."""
    backend_open_seconds: float = 0.75
    """How long a session's opening waits for each backend (all at once); one that has not
    answered by then is left out of the opening and joins the session when it answers."""
    allowed_origins: tuple[str, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)
    token_exchange_cache: bool = True
    """False exchanges tokens on every backend request (ToolHive's behaviour; benchmarks)."""
    trust_forwarded_headers: bool = False
    """Take the resource URL's scheme and host from X-Forwarded-Proto/-Host (behind a trusted
    load balancer that sets them) when no resourceUrl is configured."""
