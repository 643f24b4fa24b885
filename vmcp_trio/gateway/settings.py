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
    session_idle_ttl: float = 30 * 60.0
    max_sessions: int = 10_000
    max_body_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 16 * 1024
    stream_buffer_events: int = 256
    sse_retry_ms: int = 2000
    keepalive_seconds: float = 15.0
    json_window_seconds: float = 1.0
    """How long a request may wait for its backend before the reply switches to SSE."""
    allowed_origins: tuple[str, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)
    token_exchange_cache: bool = True
    """False exchanges tokens on every backend request (ToolHive's behaviour; benchmarks)."""
    trust_forwarded_headers: bool = False
    """Take the resource URL's scheme and host from X-Forwarded-Proto/-Host (behind a trusted
    load balancer that sets them) when no resourceUrl is configured."""
