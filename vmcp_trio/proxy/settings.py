"""What one ``vmcp proxy`` process is told (its flags, checked), as plain values.

The command line (:mod:`vmcp_trio.cli`) makes a :class:`ProxySettings`; :mod:`vmcp_trio.app.proxy`
makes the process from it. Secrets are already read (from their flag, file or environment
variable) and kept out of ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..resources.plan import OIDCIncoming, TokenExchangeAuth

__all__ = ["ProxySettings"]


@dataclass(frozen=True)
class ProxySettings:
    server_name: str
    target_uri: str
    host: str = "127.0.0.1"
    port: int = 0
    incoming: OIDCIncoming | None = None
    """Incoming auth (``--oidc-*``); None: every request is forwarded."""
    scopes_supported: tuple[str, ...] = ("openid",)
    """``--oidc-scopes``, advertised in the RFC 9728 document."""
    bearer_token: str | None = field(default=None, repr=False)
    token_exchange: TokenExchangeAuth | None = None
    injected_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """``--remote-forward-headers`` and the values of ``--remote-forward-headers-secret``."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins allowed besides same-origin (``--allowed-origin``)."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    body_timeout: float = 15.0
    idle_connection_seconds: float = 75.0
    drain_delay: float = 5.0
    shutdown_grace: float = 30.0
    debug: bool = False
