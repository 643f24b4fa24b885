"""Errors of the HTTP server library end the connection they happened on, nothing more.

hypercorn runs each connection as a task of trio's ``serve_listeners`` handler nursery, and an
exception its protocol code raises there (hypercorn 0.18's HTTP/2 protocol raises
``UnboundLocalError`` on a HEADERS frame with ``:method CONNECT`` and no ``:path``, REFERENCE.md)
unwinds through that nursery and stops the whole server: one request of a few bytes, from anyone,
before any authentication. :func:`install` wraps the connection task so that such an error
closes that connection (hypercorn's own cleanup has run by then), is logged as one line naming
the client, and is counted through ``on_fault``. Exceptions of the application never get here:
hypercorn catches those itself (and the gateway's app catches its own).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hypercorn.trio import tcp_server

__all__ = ["connection_failed", "install"]

log = logging.getLogger("vmcp.http")

_hooks: list[Callable[[], None]] = []


def install(on_fault: Callable[[], None] | None = None) -> None:
    """Guard every hypercorn connection of this process (once); ``on_fault`` is told of each
    connection ended this way."""
    if on_fault is not None and on_fault not in _hooks:
        _hooks.append(on_fault)
    if getattr(tcp_server.TCPServer, "_vmcp_guarded", False):
        return
    original = tcp_server.TCPServer.run

    async def run(self: Any) -> None:
        peer = _peer(self)  # before the connection closes
        try:
            await original(self)
        except* Exception as group:
            connection_failed(peer, group.exceptions[0])

    tcp_server.TCPServer.run = run  # type: ignore[method-assign]
    tcp_server.TCPServer._vmcp_guarded = True  # type: ignore[attr-defined]


def connection_failed(peer: object, error: BaseException) -> None:
    """One connection ended by an error of the HTTP server's code (hypercorn's or the lean
    server's): one line naming the client, and the hooks told."""
    if isinstance(peer, tuple):
        peer = f"{peer[0]}:{peer[1]}"
    log.info("HTTP connection%s closed: the HTTP server failed on its input (%s: %s)",
             f" from {peer}" if peer else "", type(error).__name__, str(error)[:200])
    for hook in _hooks:
        hook()


def _peer(server: Any) -> str:
    try:
        stream = getattr(server.stream, "transport_stream", server.stream)
        host, port = stream.socket.getpeername()[:2]
    except (AttributeError, OSError, ValueError):
        return ""
    return f"{host}:{port}"
