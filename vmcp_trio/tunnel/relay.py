"""``vmcp tunnel relay``: the public side of a tunnel, an ASGI app for hypercorn.

* Agents connect a WebSocket to ``/tunnel/{name}`` with ``Authorization: Bearer <token>``; the
  token must be the name's (:mod:`.tokens`, constant time), else the handshake is refused
  (403) and nothing is said about which part was wrong. A name is held by one agent at a time: a
  second agent with the name's token *replaces* the first (the first's connection is closed and
  its exchanges in flight get 502), so an agent restarted while its old connection is half-dead
  is back at once.
* Clients reach a tunnel at ``/t/{name}/...`` (the prefix is stripped), or with ``domain`` at
  the host ``{name}.{domain}`` (the whole path): the path, query, end-to-end headers and body
  are a stream to the agent; the response streams back as the agent
  sends it (SSE events as they are produced), read only as fast as the client takes it (the
  window). A name the tokens file does not list is 404; a tunnel with no agent connected is
  503 with ``Retry-After``; an exchange in flight
  when the agent goes is 502 (or, once the response started, the response ends there); a client
  that leaves resets its stream, so the agent stops the request at the target (noticed at once
  from :data:`WATCH_AFTER` seconds into the exchange; an answer quicker than that is written
  whole).
* The relay pings each agent every ``ping_interval`` seconds and closes a connection that has not
  answered within two intervals: a dead agent is noticed in bounded time.
* With an authenticator (the ``--oidc-*`` flags of ``vmcp proxy``), every client request must
  carry a valid token (:mod:`vmcp_trio.auth.boundary`: 401 with a challenge otherwise); the
  protected resource is the public URL of the tunnel path asked for, its RFC 9728 document at
  ``/.well-known/oauth-protected-resource/t/{name}/...``; the token is the relay's and never
  reaches the agent.
* Each client request gets a request id and an access record naming its tunnel, and a fault
  ends that request only (:mod:`vmcp_trio.proxy.served`).
* The probes (:mod:`vmcp_trio.http.probes`: ``/health``, ``/healthz``, ``/livez``, ``/readyz``
  (ready while it listens; it counts the tunnels connected) and ``/metrics`` (agents connected,
  exchanges in flight, body bytes each way, agent connections by outcome, and every vmcp
  process's own series) are the relay's own, not forwarded, and answered without a token: they
  count tunnels but never name one (the names are the relay's customers).
* A request the agent would refuse (its method, path or headers:
  :func:`~vmcp_trio.protocol.tunnel.check_request_head`) is answered 400 or 431 here, before
  its body is read, and never reaches the tunnel.
* Bounded: request bodies (``max_body_bytes``, 413; and their sum, per client and in all:
  :class:`~vmcp_trio.http.body_budget.BodyBudget`, 503 past it), exchanges in flight per tunnel
  (the protocol's stream limit: one more waits up to ``slot_wait`` seconds for a stream to
  finish, then gets 503), frames (the protocol's payload limit), heads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from ..auth.boundary import IncomingBoundary
from ..auth.headers import HeaderError, bearer_token
from ..auth.incoming.authenticator import Authenticator
from ..auth.metadata import METADATA_PATH
from ..http.asgi import (
    HttpRequest,
    Receive,
    Scope,
    Send,
    http_request,
    lifespan,
    send_json,
    until_client_leaves,
)
from ..http.body_budget import BodyBudget
from ..http.origin import host_of
from ..http.probes import PROBE_PATHS, Probes
from ..http.websocket import WEBSOCKET_EXTENSION, WebSocket
from ..protocol.tunnel import (
    DataReceived,
    HeadReceived,
    HeadRefused,
    ProtocolError,
    TunnelProtocol,
    check_request_head,
)
from ..proxy.headers import request_headers
from ..proxy.served import serve_contained
from ..runtime.logs import note
from ..runtime.metrics import TunnelMetrics
from .link import StreamEvent, StreamInbox, TunnelClosed, TunnelLink
from .tokens import TunnelTokens

__all__ = ["TunnelRelay"]

log = logging.getLogger("vmcp.tunnel")

CONNECT_PREFIX = "/tunnel/"
PUBLIC_PREFIX = "/t/"
_PING = b"vmcp-rly"
WATCH_AFTER = 0.5
"""Seconds into an exchange after which the relay watches its client for leaving."""


@dataclass
class _Agent:
    name: str
    link: TunnelLink
    slots: trio.Semaphore
    """One per stream the protocol allows: an exchange past them waits for one."""
    token: str = field(repr=False, default="")
    """The token it connected with (checked again when the tokens file is reloaded; never
    logged)."""
    gone: trio.Event = field(default_factory=trio.Event)


class TunnelRelay:
    def __init__(self, tokens: TunnelTokens, *, ping_interval: float = 20.0,
                 max_body_bytes: int = 4 * 1024 * 1024, max_streams: int = 100,
                 slot_wait: float = 10.0, domain: str | None = None,
                 authenticator: Authenticator | None = None, public_url: str | None = None,
                 scopes: tuple[str, ...] = ("openid",)) -> None:
        self.tokens = tokens
        self.authenticator = authenticator
        self.public_url = public_url.rstrip("/") if public_url else None
        self.scopes = scopes
        self.domain = domain.lower().strip(".") if domain else None
        self.metrics = TunnelMetrics()
        self.metrics.agents.set_function(lambda: len(self.agents))
        self.probes = Probes(self._ready, self.metrics)
        self.slot_wait = slot_wait
        self.ping_interval = ping_interval
        self.max_body_bytes = max_body_bytes
        self.max_streams = max_streams
        self.agents: dict[str, _Agent] = {}
        self.bodies = BodyBudget(wait=slot_wait)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
        elif scope["type"] == "websocket":
            await self._agent(scope, receive, send)
        elif scope["type"] == "http":
            request = await http_request(scope, receive, send)
            if request is not None:
                await serve_contained(request, send, self._client, what="relay", log=log,
                                      quiet_paths=PROBE_PATHS)

    # --- agents --------------------------------------------------------------------------------

    async def _agent(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        name = path[len(CONNECT_PREFIX):] if path.startswith(CONNECT_PREFIX) else ""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        try:
            token = bearer_token(headers.get("authorization"))
        except HeaderError:
            token = None
        if (await receive())["type"] != "websocket.connect":
            return
        if not name or token is None or not self.tokens.allows(name, token):
            log.info("tunnel agent refused for %r", name[:63])
            self.metrics.connections.labels("refused").inc()
            await send({"type": "websocket.close", "code": 1008})
            return
        self.metrics.connections.labels("accepted").inc()
        await send({"type": "websocket.accept"})

        protocol = TunnelProtocol("relay", max_streams=self.max_streams)
        session = scope.get("extensions", {}).get(WEBSOCKET_EXTENSION)
        socket: WebSocket | None = getattr(session, "socket", None)
        if socket is not None:  # the lean server's WebSocket: its messages without ASGI's
            link = TunnelLink.over(protocol, socket)
            receive_frame = socket.receive
        else:  # hypercorn's (HTTP/2)

            async def send_frame(frame: bytes) -> None:
                await send({"type": "websocket.send", "bytes": frame})

            async def receive_frame() -> bytes | str | None:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return None
                frame: bytes | str | None = message.get("bytes")
                return frame if frame is not None else message.get("text", "")

            link = TunnelLink(protocol, send_frame)
        agent = _Agent(name, link, trio.Semaphore(self.max_streams), token)
        previous = self.agents.get(name)
        self.agents[name] = agent
        if previous is not None:
            log.info("tunnel %s: a new agent replaces the connected one", name)
            self.metrics.connections.labels("replaced").inc()
            previous.link.close()
            previous.gone.set()
        log.info("tunnel %s: agent connected", name)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ping, agent, nursery.cancel_scope)

                async def stop_when_replaced() -> None:
                    await agent.gone.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(stop_when_replaced)
                while (frame := await receive_frame()) is not None:
                    if isinstance(frame, str):
                        raise ProtocolError("a text message on the tunnel")
                    await link.take(frame)
                nursery.cancel_scope.cancel()
        except ProtocolError as exc:
            log.warning("tunnel %s: the agent broke the protocol: %s", name, exc)
            with trio.move_on_after(1):
                await send({"type": "websocket.close", "code": 1002})
        finally:
            agent.link.close()
            agent.gone.set()
            if self.agents.get(name) is agent:
                del self.agents[name]
            log.info("tunnel %s: agent disconnected", name)

    def reload(self, tokens: TunnelTokens) -> list[str]:
        """Use ``tokens`` from now on (a SIGHUP with a changed tokens file): an agent whose
        tunnel is gone from it, or whose token it no longer holds, is disconnected (its
        exchanges in flight get 502). The names of those disconnected."""
        self.tokens = tokens
        cut = sorted(name for name, agent in self.agents.items()
                     if not tokens.allows(name, agent.token))
        for name in cut:
            agent = self.agents[name]
            agent.link.close()
            agent.gone.set()
        return cut

    def stop(self) -> None:
        """The relay is stopping: every agent's connection is closed now (its exchanges in
        flight get 502), so that the server's drain does not wait on the agents' WebSockets,
        which never end by themselves."""
        for agent in list(self.agents.values()):
            agent.link.close()
            agent.gone.set()

    async def _ping(self, agent: _Agent, scope: trio.CancelScope) -> None:
        while True:
            await trio.sleep(self.ping_interval)
            if trio.current_time() - agent.link.last_pong > 2 * self.ping_interval:
                log.warning("tunnel %s: the agent stopped answering pings", agent.name)
                scope.cancel()
                return
            await agent.link.send(TunnelProtocol.ping(_PING))

    # --- clients -------------------------------------------------------------------------------

    def _boundary(self, request: HttpRequest) -> IncomingBoundary | None:
        """Incoming auth for this request, when the relay has it: the protected resource is the
        public URL of the request's path (its RFC 9728 document at the path-suffixed
        well-known URL); the client's token is for the relay and never forwarded."""
        if self.authenticator is None:
            return None
        path = request.path
        if path.startswith(METADATA_PATH + "/"):
            path = path[len(METADATA_PATH):]
        return IncomingBoundary(
            self.authenticator, path=path, default_host=request.header("host") or "",
            configured_resource=f"{self.public_url}{path}" if self.public_url else None,
            scopes_supported=self.scopes)

    def _tunnel_of(self, request: HttpRequest) -> tuple[str, str] | None:
        """The tunnel a client request is for and the path to forward, as the client encoded
        it: ``{name}.{domain}`` hosts keep the whole path, ``/t/{name}/...`` loses the
        prefix."""
        if self.domain is not None:
            host = (host_of(request.header("host") or "") or "").lower().strip(".")
            if host.endswith("." + self.domain):
                name = host[: -len(self.domain) - 1]
                if name and "." not in name:
                    return name, request.raw_path
        if request.path.startswith(PUBLIC_PREFIX):
            name = request.path[len(PUBLIC_PREFIX):].partition("/")[0]
            encoded = request.raw_path[len(PUBLIC_PREFIX):].partition("/")[2]
            return name, "/" + encoded
        return None

    async def _ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready while it serves (agents connect to it whether or not others are connected)."""
        return True, {"status": "ready", "tunnels": len(self.agents)}

    async def _client(self, request: HttpRequest, send: Send) -> None:
        if not (self.domain and (request.header("host") or "").endswith(self.domain)) and (
                await self.probes.answer(request.path, send)):
            return
        boundary = self._boundary(request)
        if boundary is not None:
            if request.path.startswith(METADATA_PATH + "/"):
                await boundary.serve_metadata(request, send)
                return
            if await boundary.authenticate(request, send) is None:
                return
        found = self._tunnel_of(request)
        if found is None:
            await send_json(send, 404, {"error": "not_found", "error_description":
                                        "tunnels are at /t/{name}/..."})
            return
        name, rest = found
        note(backend=name[:63])
        if name not in self.tokens.names:
            await send_json(send, 404, {"error": "not_found", "error_description":
                                        f"no tunnel named {name[:63]!r}"})
            return
        query = request.query_string.decode("latin-1")
        headers = request_headers(request.scope["headers"],
                                  forward_authorization=self.authenticator is None)
        try:
            check_request_head(request.method, rest, query, headers)
        except HeadRefused as exc:
            await send_json(send, exc.status, {"error": "invalid_request",
                                               "error_description": str(exc)})
            return
        agent = self.agents.get(name)
        if agent is None:
            await send_json(send, 503, {"error": "tunnel_not_connected", "error_description":
                                        f"no agent is connected for tunnel {name[:63]!r}"},
                            [("retry-after", "5")])
            return
        async with self.bodies.body(request, send, self.max_body_bytes,
                                    server="relay") as body:
            if body is None:
                return
            if not await self._slot(agent):
                await send_json(send, 503, {"error": "tunnel_busy", "error_description":
                                            f"tunnel {name!r} has {self.max_streams} exchanges "
                                            f"in flight"}, [("retry-after", "1")])
                return
            try:
                self.metrics.streams.inc()
                self.metrics.to_target.inc(len(body))
                await self._exchange(request, send, name, rest, agent.link, headers, body)
            finally:
                self.metrics.streams.dec()
                agent.slots.release()

    async def _slot(self, agent: _Agent) -> bool:
        """One of the agent's stream slots, waiting up to ``slot_wait`` seconds for one."""
        try:
            agent.slots.acquire_nowait()
        except trio.WouldBlock:
            with trio.move_on_after(self.slot_wait):
                await agent.slots.acquire()
                return True
            return False
        return True

    async def _exchange(self, request: HttpRequest, send: Send, name: str, rest: str,
                        link: TunnelLink, headers: list[tuple[str, str]], body: bytes) -> None:
        try:
            stream_id, opening = link.protocol.open_stream(
                request.method, rest, request.query_string.decode("latin-1"), headers,
                end=not body)
        except HeadRefused as exc:  # a head larger than the protocol carries
            await send_json(send, exc.status, {"error": "invalid_request",
                                               "error_description": str(exc)})
            return
        except ValueError as exc:  # the agent went between the lookup and now
            await send_json(send, 503, {"error": "tunnel_busy", "error_description": str(exc)},
                            [("retry-after", "1")])
            return
        inbox = link.track(stream_id)
        answer = _Answer(send, link, stream_id, self.metrics)
        try:
            await link.send(opening)
            if body:
                await link.send_body(stream_id, body, end=True)
            await answer.relay(request, inbox)
        except TunnelClosed:
            pass
        link.forget(stream_id)
        if answer.ended:
            return
        with trio.CancelScope(shield=True):
            if stream_id in link.protocol.streams and not link.closed:
                with trio.move_on_after(1):  # the client left: the agent stops the request
                    await link.reset(stream_id, "the client left")
            if answer.started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await send_json(send, 502, {
                    "error": "bad_gateway", "error_description":
                        f"tunnel {name!r}: the agent did not answer (it went away or the "
                        "target failed)"})


class _Answer:
    """The agent's answer to one exchange, written to its client."""

    __slots__ = ("ended", "link", "metrics", "send", "started", "stream_id")

    def __init__(self, send: Send, link: TunnelLink, stream_id: int,
                 metrics: TunnelMetrics) -> None:
        self.send = send
        self.link = link
        self.stream_id = stream_id
        self.metrics = metrics
        self.started = False
        self.ended = False
        """The response was written to its end (its last body part said so)."""

    async def relay(self, request: HttpRequest, inbox: StreamInbox) -> None:
        """Write the agent's answer to the client as it comes. The client is watched for
        leaving (which resets the stream) once the answer has taken :data:`WATCH_AFTER`
        seconds: most answers are whole before that, and a watch from the start cost a task
        and three wake-ups an exchange."""
        deadline = trio.current_time() + WATCH_AFTER
        while trio.current_time() < deadline:
            events = await inbox.take(deadline)
            if not events:
                break
            if await self.write(events):
                return
        async with until_client_leaves(request):
            while not await self.write(await inbox.take()):
                pass

    async def write(self, events: list[StreamEvent]) -> bool:
        """Write these events; whether the stream ended (or was reset). The last body part
        of a stream that ends here ends the response too (with the head still held, the
        lean server then writes the whole response at once)."""
        for event in events:
            if isinstance(event, HeadReceived):
                await self.send({"type": "http.response.start", "status": event.status,
                                 "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                                             for k, v in event.headers]})
                self.started = True
                if event.end_stream:
                    await self.send({"type": "http.response.body", "body": b"",
                                     "more_body": False})
                    self.ended = True
                    return True
            elif isinstance(event, DataReceived):
                await self.send({"type": "http.response.body", "body": event.data,
                                 "more_body": not event.end_stream})
                self.metrics.to_client.inc(len(event.data))
                if event.end_stream:
                    self.ended = True
                    return True
                await self.link.consumed(self.stream_id, len(event.data))
            else:
                return True
        return False
