"""Serving an ASGI app with hypercorn's trio worker, configured for long-lived MCP streams.

:func:`hypercorn_config` sets what every server of this package needs: bounded request headers
(hypercorn's own limits, for both HTTP/1.1 and HTTP/2), an idle timeout long enough for an MCP
session's connection (it also closes a connection whose request headers never finish) and no cap
at hypercorn's 1,000 requests per connection, a deep accept backlog, no
access log (the app logs what it served) and no ``Server`` header.
"""

from __future__ import annotations

import logging

from hypercorn.config import Config

__all__ = ["hypercorn_config"]


def hypercorn_config(host: str, port: int, *, max_header_bytes: int,
                     idle_seconds: float = 75.0, tls_cert: str | None = None,
                     tls_key: str | None = None) -> Config:
    config = Config()
    bind_host = f"[{host}]" if ":" in host else host
    config.bind = [f"{bind_host}:{port}"]
    config.h11_max_incomplete_size = max_header_bytes
    config.h2_max_header_list_size = max_header_bytes
    config.keep_alive_timeout = idle_seconds  # also bounds slow request headers
    # hypercorn closes a connection after 1000 requests by default (and sends GOAWAY on
    # HTTP/2); an MCP client keeps one busy for its whole session, so allow far more.
    config.keep_alive_max_requests = 100_000
    config.backlog = 2048  # bursts of new clients (a load balancer reconnecting many at once)
    config.graceful_timeout = 5
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.include_server_header = False
    if tls_cert and tls_key:
        config.certfile = tls_cert
        config.keyfile = tls_key
    return config
