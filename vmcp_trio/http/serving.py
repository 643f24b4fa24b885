"""Serving an ASGI app: HTTP/1.1 on the lean server (:mod:`vmcp_trio.http.h1`) and its
WebSocket upgrades (:mod:`vmcp_trio.http.websocket`), HTTP/2 on hypercorn's trio connection,
configured for long-lived MCP streams.

:func:`listen` opens the listening sockets and loads the TLS certificate before anything else
starts, so that an operator's mistake (a port in use or not allowed, a certificate or key that
does not load) is one :class:`ListenError` naming the address or the file, not a traceback from
inside the server; :func:`serve` then serves on those sockets.

Which server speaks on a connection: TLS with ALPN ``h2``, HTTP/2's preface (prior knowledge) and
a first request that asks to ``Upgrade`` to h2c go to hypercorn's connection, given the bytes
already read; a first request that asks for a WebSocket is served by
:func:`~vmcp_trio.http.websocket.serve_asgi` (a WebSocket through hypercorn cost several task
wake-ups a message); everything else is HTTP/1.1 on :class:`~vmcp_trio.http.h1.H1Connection`,
which costs a fraction of hypercorn's HTTP/1.1 per request (docs/benchmarks.md). Both hold the
same bounds: request heads (``max_header_bytes``), the idle timeout, the TLS handshake's
deadline; an error of either's own code ends that connection only
(:func:`~vmcp_trio.http.hypercorn_guard.connection_failed`).

:func:`server_config` sets what every server of this package needs: bounded request headers
(for HTTP/1.1 and HTTP/2), an idle timeout long enough for an MCP session's connection (it also
closes a connection whose request headers never finish) and no cap at hypercorn's 1,000 requests
per connection, a deep accept backlog, no access log (the app logs what it served) and no
``Server`` header.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import parse_socket_addr, repr_socket_addr, wrap_app

from .asgi import ASGIApp
from .h1 import H1Connection, Limits, idle_tick
from .hypercorn_guard import connection_failed
from .socket_stream import LeanSocketStream, adopt
from .websocket import MAX_MESSAGE_BYTES, serve_asgi

if TYPE_CHECKING:
    from hypercorn.typing import Framework

__all__ = ["ListenError", "listen", "serve", "server_config"]


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


async def serve(app: ASGIApp, config: Config, sockets: Sockets, *,
                shutdown_trigger: Callable[[], Awaitable[None]],
                served: trio.Event | None = None,
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``sockets`` (from :func:`listen`) until ``shutdown_trigger`` returns,
    then drain: stop accepting, close idle connections, let requests in flight end for up to
    ``config.graceful_timeout`` seconds, then cancel them. Reports the URLs it listens on, and
    sets ``served`` once the server has stopped, however it ended."""
    try:
        await _Server(app, config).run(sockets, shutdown_trigger, task_status)
    finally:
        if served is not None:
            served.set()


class _Server:
    """The accept loop: HTTP/1.1 on :class:`~vmcp_trio.http.h1.H1Connection` and its WebSocket
    upgrades on :func:`~vmcp_trio.http.websocket.serve_asgi`, HTTP/2 and h2c handed to
    hypercorn's connection (:class:`hypercorn.trio.tcp_server.TCPServer`)."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.config = config
        self.limits = Limits(max_head_bytes=config.h11_max_incomplete_size,
                             idle_seconds=config.keep_alive_timeout)
        self.ssl_context = config.create_ssl_context() if config.ssl_enabled else None
        self.connections: set[H1Connection] = set()
        self.handed_over_app = wrap_app(cast("Framework", app), config.wsgi_max_body_size, None)
        self.handed_over = WorkerContext(None)

    async def run(self, sockets: Sockets, shutdown_trigger: Callable[[], Awaitable[None]],
                  task_status: trio.TaskStatus[list[str]]) -> None:
        bound = [(sock, True) for sock in sockets.secure_sockets] + [
            (sock, False) for sock in sockets.insecure_sockets]
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                     for sock, _ in bound]
        urls = [f"{'https' if secure else 'http'}://"
                f"{repr_socket_addr(sock.family, sock.getsockname())}" for sock, secure in bound]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as accepting:
                for listener, (_, secure) in zip(listeners, bound, strict=True):
                    accepting.start_soon(partial(
                        trio.serve_listeners, partial(self.connection, secure=secure),
                        [listener], handler_nursery=connections))
                accepting.start_soon(self._end_idle_connections)
                task_status.started(urls)
                await shutdown_trigger()
                accepting.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            for connection in list(self.connections):
                connection.drain()
            await self.handed_over.terminated.set()
            connections.cancel_scope.deadline = trio.current_time() + self.config.graceful_timeout

    async def _end_idle_connections(self) -> None:
        """Close the connections that waited too long for a request (until the server stops
        accepting; a drain then closes the idle ones itself)."""
        tick = idle_tick(self.limits.idle_seconds)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            for connection in list(self.connections):
                connection.end_if_idle(now)

    async def connection(self, accepted: trio.SocketStream, *, secure: bool) -> None:
        stream = adopt(accepted)
        try:
            client = parse_socket_addr(stream.socket.family, stream.socket.getpeername())
            server = parse_socket_addr(stream.socket.family, stream.socket.getsockname())
        except OSError:  # the client left before we looked
            await trio.aclose_forcefully(stream)
            return
        try:
            await self.serve_connection(stream, secure, client, server)
        except Exception as error:
            connection_failed(client, error)
        finally:
            await trio.aclose_forcefully(stream)

    async def serve_connection(self, stream: LeanSocketStream, secure: bool,
                               client: Any, server: Any) -> None:
        transport: trio.abc.Stream = stream
        if secure:
            assert self.ssl_context is not None
            tls = trio.SSLStream(stream, self.ssl_context, server_side=True,
                                 https_compatible=True)
            handshaken = False
            with trio.move_on_after(self.config.ssl_handshake_timeout):
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError:
                    return
                handshaken = True
            if not handshaken:
                return
            if tls.selected_alpn_protocol() == "h2":
                await self.hand_over(tls)
                return
            transport = tls
        connection = H1Connection(self.app, transport, self.limits,
                                  scheme="https" if secure else "http",
                                  client=client, server=server)
        self.connections.add(connection)
        try:
            replay = await connection.run()
        finally:
            self.connections.discard(connection)
        if replay is None:
            return
        if connection.upgrade is not None and connection.upgrade[0] == b"websocket":
            await serve_asgi(self.app, transport, replay, connection.upgrade[1],
                             max_message_bytes=self.config.websocket_max_message_size)
        else:
            await self.hand_over(_Replayed(transport, replay))

    async def hand_over(self, stream: Any) -> None:
        """Serve the connection with hypercorn (HTTP/2, or an upgrade to WebSocket or h2c)."""
        await TCPServer(self.handed_over_app, self.config, self.handed_over,
                        ConnectionState({}), stream).run()


class _Replayed:
    """A stream whose first read gives back ``prefix`` (what the lean server read before it
    handed the connection over); everything else is the wrapped stream's."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            data, self._prefix = self._prefix, b""
            return data
        return await self._stream.receive_some(max_bytes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def server_config(host: str, port: int, *, max_header_bytes: int,
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
    config.websocket_max_message_size = MAX_MESSAGE_BYTES  # a tunnel frame is at most 128 KiB
    if tls_cert and tls_key:
        config.certfile = tls_cert
        config.keyfile = tls_key
    return config
