"""Serving an ASGI app with hypercorn's trio worker, configured for long-lived MCP streams.

:func:`listen` opens the listening sockets and loads the TLS certificate before anything else
starts, so that an operator's mistake (a port in use or not allowed, a certificate or key that
does not load) is one :class:`ListenError` naming the address or the file, not a traceback from
inside the server; :func:`serve` then serves on those sockets.

:func:`hypercorn_config` sets what every server of this package needs: bounded request headers
(hypercorn's own limits, for both HTTP/1.1 and HTTP/2), an idle timeout long enough for an MCP
session's connection (it also closes a connection whose request headers never finish) and no cap
at hypercorn's 1,000 requests per connection, a deep accept backlog, no
access log (the app logs what it served) and no ``Server`` header.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

if TYPE_CHECKING:
    from hypercorn.typing import Framework

__all__ = ["ListenError", "hypercorn_config", "listen", "serve"]


class ListenError(Exception):
    """The server cannot listen as configured (the message names the address or the file)."""


def listen(config: Config) -> Sockets:
    """The configuration's listening sockets, bound and listening; raises ListenError."""
    if config.ssl_enabled:
        try:
            config.create_ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise ListenError(f"--tls-cert {config.certfile} / --tls-key {config.keyfile}: "
                              f"cannot load the certificate and key: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        raise ListenError(f"cannot listen on {', '.join(config.bind)}: "
                          f"{exc.strerror or exc}") from None
    try:
        for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
            sock.listen(config.backlog)
    except OSError as exc:
        for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
            sock.close()
        raise ListenError(f"cannot listen on {', '.join(config.bind)}: "
                          f"{exc.strerror or exc}") from None
    return sockets


async def serve(app: object, config: Config, sockets: Sockets, *,
                shutdown_trigger: Callable[[], Awaitable[None]],
                served: trio.Event | None = None,
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``sockets`` (from :func:`listen`) until ``shutdown_trigger`` returns;
    reports the URLs it listens on, and sets ``served`` once the server has stopped (its
    connections drained), however it ended."""
    try:
        await worker_serve(wrap_app(cast("Framework", app), config.wsgi_max_body_size, None),
                           config, sockets=sockets, shutdown_trigger=shutdown_trigger,
                           task_status=task_status)
    finally:
        if served is not None:
            served.set()


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
