"""``vmcp proxy tunnel``: the agent next to an internal MCP server, connected out to a relay.

* It connects a WebSocket (:func:`~vmcp_trio.http.websocket.open_websocket`) to
  ``{relay-url}/tunnel/{name}`` with its token (``Authorization: Bearer``), so the internal
  side needs no inbound port, and serves each stream the relay opens: the request (its head,
  then its body, to the end) goes to the target (``--target-uri``'s origin, the stream's path
  and query) with the outgoing credentials and injected headers of ``vmcp proxy``; the
  response head and body go back as they arrive, as fast as the relay's window allows. A
  stream the relay resets (its client left) cancels the request to the target. Many streams
  at once, each in its own task.
* It answers the relay's pings, takes a connection that stays silent for ``silence_limit``
  seconds (three of the relay's ping intervals) for dead, and reconnects after that, a relay
  restart or a network break: each connection is one run of a supervised task, restarted with
  the supervisor's backoff (:data:`~vmcp_trio.runtime.supervisor.RECONNECT`: 1 s doubling to
  30 s, with jitter, starting over after a connection made). A connection that fails is logged
  with its cause in one line (``cannot connect to HOST:PORT: connection refused``).
* A refused token (the relay's 401 or 403) is logged and retried the same way (the relay's
  tokens may be changing), but only ``max_refusals`` times in a row (:data:`MAX_REFUSALS`; a
  connection made starts the count over): then :meth:`TunnelAgent.run` raises
  :class:`TokenRefused`, and ``vmcp proxy tunnel`` exits 1 with one line saying so, rather
  than knock on the relay for ever with a token it will not take. Any other status from the
  relay (a load balancer's 502 while it restarts) is a failed connection, retried.
* It counts what it does in :class:`~vmcp_trio.runtime.metrics.TunnelMetrics` (connected or
  not, exchanges in flight, body bytes each way, connections by outcome); :func:`status_app`
  serves them and the probes (:mod:`vmcp_trio.http.probes`: ``/readyz`` is 503 while the agent
  is not connected to the relay) for ``--metrics-port``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import trio

from ..auth.outgoing.strategies import CredentialError
from ..http.asgi import Receive, Scope, Send, http_request, send_json
from ..http.client import HttpClient, HttpError, Origin
from ..http.probes import Probes
from ..http.websocket import WebSocket, WebSocketError, WebSocketRejected, open_websocket
from ..protocol.targets import forwarded_url
from ..protocol.tunnel import (
    DataReceived,
    ProtocolError,
    StreamEnded,
    StreamOpened,
    StreamRefused,
    StreamReset,
    TunnelProtocol,
)
from ..proxy.credentials import RemoteCredential, credential_headers
from ..proxy.headers import request_headers, response_headers
from ..runtime.metrics import TunnelMetrics
from ..runtime.supervisor import RECONNECT, Retry, Supervisor
from .link import StreamInbox, TunnelClosed, TunnelLink

__all__ = ["MAX_REFUSALS", "TokenRefused", "TunnelAgent", "status_app"]

log = logging.getLogger("vmcp.tunnel")

MAX_REFUSALS = 3
"""Refusals of the token in a row after which the agent stops (about 3 s of backoff)."""
_TOKEN_REFUSED = (401, 403)


class TokenRefused(Exception):
    """The relay refused the tunnel's token ``max_refusals`` times in a row."""


class TunnelAgent:
    def __init__(self, relay_url: str, name: str, token: str, target: str, client: HttpClient,
                 *, credentials: Sequence[RemoteCredential] = (),
                 injected: Sequence[tuple[str, str]] = (),
                 max_body_bytes: int = 4 * 1024 * 1024, max_streams: int = 100,
                 silence_limit: float = 60.0, max_refusals: int = MAX_REFUSALS) -> None:
        self.url = relay_url.rstrip("/") + "/tunnel/" + name
        self.silence_limit = silence_limit
        """Seconds without a message (the relay pings every 20 s) after which the connection
        is taken for dead and made again."""
        self.name = name
        self._token = token
        origin, _ = Origin.of(target)
        self.origin = f"{origin.scheme}://{origin.host_header.decode('ascii')}"
        self.client = client
        self.credentials = credentials
        self.injected = injected
        self.max_body_bytes = max_body_bytes
        self.max_streams = max_streams
        self.connected = trio.Event()
        self.max_refusals = max_refusals
        self._refusals = 0
        """Refusals of the token since the last connection made."""
        self._refused_with = 0
        """The HTTP status of the last refusal."""
        self._given_up = trio.Event()
        self.metrics = TunnelMetrics()
        self.metrics.agents.set_function(lambda: int(self.connected.is_set()))

    async def run(self) -> None:
        """Connected to the relay, again and again, until cancelled; raises
        :class:`TokenRefused` once the relay refused the token ``max_refusals`` times in a
        row."""
        async with trio.open_nursery() as nursery:
            Supervisor(nursery).start_soon(f"tunnel {self.name}", self._connect,
                                           policy=RECONNECT)
            await self._given_up.wait()
            nursery.cancel_scope.cancel()
        raise TokenRefused(f"the relay refused the token of tunnel {self.name} "
                           f"{self._refusals} times in a row (HTTP {self._refused_with}): is "
                           "the tunnel in its --tokens file, with this token?")

    async def _connect(self) -> None:
        """One connection to the relay, to its end, for the supervisor: it always ends in
        :class:`Retry` (the next connection after the backoff), told that the backoff starts
        over when the connection was made. (This logs and counts the outcome itself; the
        supervisor's line is a debug one.)"""
        outcome = Retry("the connection ended", reset=True, level=logging.DEBUG)
        try:
            await self._connection()
        except* (OSError, WebSocketError, ProtocolError) as failures:
            failure = failures.exceptions[0]
            if isinstance(failure, WebSocketRejected) and failure.status in _TOKEN_REFUSED:
                self._refused(failure.status)
                outcome = Retry("the relay refused the token", level=logging.DEBUG)
            else:
                self.metrics.connections.labels("failed").inc()
                log.warning("tunnel %s: the connection to the relay failed: %s", self.name,
                            str(failure)[:300] or type(failure).__name__)
                outcome = Retry("the connection failed", level=logging.DEBUG)
        finally:
            self.connected = trio.Event()
        raise outcome

    def _refused(self, status: int) -> None:
        """Count a refusal of the token; the last one allowed gives up."""
        self.metrics.connections.labels("refused").inc()
        self._refusals += 1
        self._refused_with = status
        log.warning("tunnel %s: the relay refused the token (HTTP %d; %d of %d in a row)",
                    self.name, status, self._refusals, self.max_refusals)
        if self._refusals >= self.max_refusals:
            self._given_up.set()

    async def _connection(self) -> None:
        headers = [(b"authorization", f"Bearer {self._token}".encode())]
        async with open_websocket(self.url, headers) as socket:
            self.metrics.connections.labels("connected").inc()
            log.info("tunnel %s: connected to %s", self.name, self.url)
            self._refusals = 0
            self.connected.set()
            link = TunnelLink.over(TunnelProtocol("agent", max_streams=self.max_streams),
                                   socket)
            try:
                async with trio.open_nursery() as streams:
                    try:
                        await self._read(socket, link, streams)
                    except ProtocolError as exc:
                        log.warning("tunnel %s: the relay broke the protocol: %s", self.name,
                                    exc)
                        await socket.close(1002)
                    streams.cancel_scope.cancel()
            finally:
                link.close()

    async def _read(self, socket: WebSocket, link: TunnelLink, streams: trio.Nursery) -> None:
        """Take the relay's messages until the connection ends (one cancel scope whose deadline
        moves on with each message bounds the silence: one per message cost more)."""
        bodies: dict[int, tuple[StreamOpened, bytearray]] = {}
        """The requests whose bodies are still coming."""
        with trio.CancelScope() as silence:
            while True:
                silence.deadline = trio.current_time() + self.silence_limit
                message = await socket.receive()
                if message is None:
                    log.info("tunnel %s: the relay closed the connection (%s %s)", self.name,
                             socket.close_code, socket.close_reason[:200])
                    return
                if isinstance(message, str):
                    raise ProtocolError("a text message on the tunnel")
                event = await link.take(message)
                if isinstance(event, StreamOpened):
                    if event.end_stream:
                        self._start(streams, link, event, b"")
                    else:
                        bodies[event.stream_id] = (event, bytearray())
                elif isinstance(event, StreamRefused):  # that request alone: the others go on
                    log.warning("tunnel %s: stream %d refused: %s", self.name,
                                event.stream_id, event.reason)
                    await link.send(link.protocol.send_reset(event.stream_id, event.reason))
                elif isinstance(event, DataReceived | StreamEnded | StreamReset):
                    await self._gather(link, streams, bodies, event)
        # the relay pings: this long without a word, it is gone
        log.warning("tunnel %s: nothing from the relay for %gs: reconnecting", self.name,
                    self.silence_limit)

    async def _gather(self, link: TunnelLink, streams: trio.Nursery,
                      bodies: dict[int, tuple[StreamOpened, bytearray]],
                      event: DataReceived | StreamEnded | StreamReset) -> None:
        """A part of a request's body: the request is served once its body is whole (gathered
        here, by the reader, so that the stream's own task wakes once); a body past
        ``max_body_bytes`` resets its stream. Events of a stream not gathering are late ones
        (its task ended): ignored."""
        pending = bodies.get(event.stream_id)
        if pending is None:
            return
        opened, body = pending
        if isinstance(event, DataReceived):
            body += event.data
            if len(body) > self.max_body_bytes:
                del bodies[event.stream_id]
                await link.reset(event.stream_id, "the request body is too large")
                return
            await link.consumed(event.stream_id, len(event.data))
            if not event.end_stream:
                return
        del bodies[event.stream_id]
        if not isinstance(event, StreamReset):
            self._start(streams, link, opened, bytes(body))

    def _start(self, streams: trio.Nursery, link: TunnelLink, opened: StreamOpened,
               body: bytes) -> None:
        streams.start_soon(self._serve, link, opened, body, link.track(opened.stream_id))

    async def _serve(self, link: TunnelLink, opened: StreamOpened, body: bytes,
                     inbox: StreamInbox) -> None:
        """One exchange: the request to the target, its answer back; cancelled when the relay
        resets the stream (its client left) or the tunnel goes: nobody to answer then."""
        stream_id = opened.stream_id
        self.metrics.to_target.inc(len(body))
        self.metrics.streams.inc()
        try:
            with trio.CancelScope() as scope:
                inbox.serve_in(scope)
                await self._forward(link, opened, body)
        except TunnelClosed:
            pass
        except Exception as exc:  # this stream's fault: it ends here, the tunnel goes on
            log.error("tunnel %s: stream %d failed", self.name, stream_id, exc_info=exc)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await link.reset(stream_id, "the agent failed")
        finally:
            self.metrics.streams.dec()
            link.forget(stream_id)

    async def _forward(self, link: TunnelLink, opened: StreamOpened, body: bytes) -> None:
        stream_id = opened.stream_id
        try:
            added = await credential_headers(self.credentials, None, self.injected)
        except CredentialError as exc:
            await self._answer(link, stream_id, 502, f"no credential for the target: {exc}")
            return
        wire = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in opened.headers]
        headers = request_headers(wire, forward_authorization=not self.credentials,
                                  injected=added)
        try:
            url = forwarded_url(self.origin, opened.path, opened.query)
        except ValueError as exc:
            await self._answer(link, stream_id, 400, str(exc))
            return
        try:
            async with self.client.stream(opened.method, url, headers=headers,
                                          body=body) as response:
                kept = [(k.decode("latin-1"), v.decode("latin-1"))
                        for k, v in response_headers(response.headers)]
                length = _content_length(response.headers)
                if (opened.method == "HEAD" or response.status in (204, 304)
                        or length == 0):  # no body follows: the head ends the stream
                    await link.send(link.protocol.send_head(stream_id, response.status, kept,
                                                            end=True))
                    return
                whole = response.arrived_whole()
                if whole is not None:
                    self.metrics.to_client.inc(len(whole))
                    await self._send_whole(link, stream_id, response.status, kept, whole)
                    return
                await link.send(link.protocol.send_head(stream_id, response.status, kept))
                sent = 0
                ended = False
                try:
                    async for chunk in response.iter_bytes():  # read to its end: the
                        sent += len(chunk)  # connection then goes back to the pool
                        ended = length is not None and sent >= length
                        await link.send_body(stream_id, chunk, end=ended)
                        self.metrics.to_client.inc(len(chunk))
                except HttpError as exc:
                    log.info("tunnel %s: the target's response broke off: %s", self.name, exc)
        except HttpError as exc:
            await self._answer(link, stream_id, 502, f"the target did not answer: {exc}")
            return
        if not ended:  # the declared length ended the stream with the last DATA
            await link.send(link.protocol.send_end(stream_id))

    async def _answer(self, link: TunnelLink, stream_id: int, status: int, reason: str) -> None:
        body = orjson.dumps({"error": "invalid_request" if status == 400 else "bad_gateway",
                             "error_description": reason[:500]})
        await self._send_whole(link, stream_id, status, [("content-type", "application/json")],
                               body)

    @staticmethod
    async def _send_whole(link: TunnelLink, stream_id: int, status: int,
                          headers: list[tuple[str, str]], body: bytes) -> None:
        """A whole answer: its head and body in one write when the window takes the body."""
        head = link.protocol.send_head(stream_id, status, headers, end=not body)
        if body and len(body) <= link.protocol.sendable(stream_id):
            await link.send_frames([head, link.protocol.send_data(stream_id, body, end=True)])
            return
        await link.send(head)
        if body:
            await link.send_body(stream_id, body, end=True)


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    """The target's declared body length (None: read to its end)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def status_app(agent: TunnelAgent) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The agent's own small HTTP server (``--metrics-port``): the probes, ``/readyz`` ready
    while the agent is connected to the relay."""

    async def ready() -> tuple[bool, dict[str, Any]]:
        connected = agent.connected.is_set()
        return connected, {"status": "ready" if connected else "connecting",
                           "tunnel": agent.name, "connected": connected}

    probes = Probes(ready, agent.metrics)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = await http_request(scope, receive, send)
        if request is not None and not await probes.answer(request.path, send):
            await send_json(send, 404, {"error": f"no such endpoint: {request.path[:200]}"})

    return app
