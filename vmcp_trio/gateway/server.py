"""The HTTP face of the gateway: ``/mcp`` (Streamable HTTP) and the operational endpoints.

``/mcp`` for the handshake revisions (2025-03-26, 2025-06-18, 2025-11-25):

* POST ``initialize`` (alone) creates a session; its id comes back in ``Mcp-Session-Id``. Every
  other POST needs that header: missing -> 400, unknown, ended or another identity's -> 404.
  ``MCP-Protocol-Version``, when sent, must name a revision we speak (else 400). Batches are
  accepted only in 2025-03-26.
* Notifications and responses -> 202. A request is answered as JSON when its backend answers
  without sending anything first and within ``json_window_seconds``; otherwise as SSE, where
  the related messages precede the reply. The work belongs to the session, not the connection:
  a client that disconnects can resume the stream by GET with ``Last-Event-ID``.
* GET opens the session's standalone stream (or resumes a stream); DELETE ends the session.
* ``Origin`` must be absent, same-origin or allowed (403); on a loopback bind the ``Host`` header
  must name a loopback host (DNS rebinding, 403). Bodies are bounded (413).

Errors are JSON-RPC error objects (id null when the request could not be read) with the HTTP
status that says what failed.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import orjson
import trio

from .. import __version__
from ..auth.headers import HeaderError, bearer_token
from ..auth.identity import Identity
from ..auth.incoming.authenticator import AuthFailure
from ..auth.metadata import METADATA_PATH, bearer_challenge, resource_metadata, resource_url
from ..auth.outgoing.caller import CALLER, Caller
from ..http.asgi import (
    BodyTooLarge,
    HttpRequest,
    Receive,
    Scope,
    Send,
    lifespan,
    open_stream,
    send_empty,
    send_json,
)
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Message,
    Request,
    Response,
    decode_body,
    encode,
)
from ..protocol.revisions import HANDSHAKE_REVISIONS, negotiate, revision
from ..protocol.sse import encode_comment
from ..resources.plan import AnonymousIncoming, HttpEndpoint
from ..runtime.logs import REQUEST_ID
from ..runtime.metrics import CONTENT_TYPE
from .core import Gateway, TooManySessions
from .session import ClientSession, SessionClosed
from .stateless import StatelessFront
from .streams import EventStream, StreamGap, parse_event_id

__all__ = ["GatewayApp"]

log = logging.getLogger("vmcp.http")

MCP_PATH = "/mcp"
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


def _error_body(code: int, message: str, request_id: Any = None) -> bytes:
    return encode(ErrorResponse(request_id, ErrorObject(code, message)))


def _accepts(header: str | None, *types: str) -> bool:
    if header is None:
        return False
    offered = {part.split(";")[0].strip().lower() for part in header.split(",")}
    return "*/*" in offered or all(t in offered for t in types)


def _request_id(given: str | None) -> str:
    """The caller's ``X-Request-Id`` when it is a sane token (a load balancer's), else a new
    one: every log line of the request carries it."""
    if given and len(given) <= 64 and all(c.isalnum() or c in "-_.:" for c in given):
        return given
    return secrets.token_hex(8)


def _is_stateless(request: HttpRequest) -> bool:
    """A 2026-07-28 request: its MCP-Protocol-Version is not a handshake revision (an unknown
    one too: it then hears which versions we speak) and it names no session."""
    version = request.header("mcp-protocol-version")
    return (version is not None and revision(version) not in HANDSHAKE_REVISIONS
            and request.header("mcp-session-id") is None)


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class GatewayApp:
    """The ASGI application of ``vmcp serve``."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        self.loopback_bind = self.settings.host in ("127.0.0.1", "localhost", "::1")
        self.stateless = StatelessFront(self)
        self.auth = gateway.authenticator
        incoming = gateway.plan.incoming
        self._configured_resource = (None if isinstance(incoming, AnonymousIncoming)
                                     else incoming.resource_url)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if sum(len(k) + len(v) for k, v in scope["headers"]) > self.settings.max_header_bytes:
            # hypercorn bounds only headers that arrive in pieces; a block read at once is not.
            await send_json(send, 431, _error_body(
                INVALID_REQUEST, f"Request header fields are larger than "
                                 f"{self.settings.max_header_bytes} bytes in all"))
            return
        request = HttpRequest(scope, receive)
        REQUEST_ID.set(_request_id(request.header("x-request-id")))
        path = request.path
        if path == MCP_PATH:
            await self.mcp(request, send)
        elif path in (METADATA_PATH, METADATA_PATH + MCP_PATH) and not self.auth.anonymous:
            await self.protected_resource_metadata(request, send)
        elif path == "/health":
            await send_json(send, 200, {"status": "ok"})
        elif path == "/readyz":
            await self.readyz(send)
        elif path == "/api/backends/health":
            await send_json(send, 200, self.backends_health())
        elif path == "/metrics":
            body = self.gateway.metrics.render()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", CONTENT_TYPE.encode()),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        elif self.gateway.authserver is None or not await self.gateway.authserver.handle(
                request, send):
            await send_json(send, 404, {"error": f"no such endpoint: {path[:200]}"})

    # --- incoming auth --------------------------------------------------------------------------

    def resource(self, request: HttpRequest) -> str:
        """The canonical URL of ``/mcp`` (see :mod:`vmcp_trio.auth.metadata`)."""
        return resource_url(
            self._configured_resource, scheme=request.scheme,
            host=request.header("host") or f"{self.settings.host}:{self.settings.port}",
            path=MCP_PATH, forwarded_proto=request.header("x-forwarded-proto"),
            forwarded_host=request.header("x-forwarded-host"),
            trust_forwarded=self.settings.trust_forwarded_headers)

    async def protected_resource_metadata(self, request: HttpRequest, send: Send) -> None:
        """RFC 9728, readable by browser clients from any origin (CORS)."""
        cors = [("access-control-allow-origin", "*"),
                ("access-control-allow-methods", "GET, OPTIONS"),
                ("access-control-allow-headers", "mcp-protocol-version, authorization"),
                ("access-control-max-age", "3600")]
        if request.method == "OPTIONS":
            await send_empty(send, 204, cors)
            return
        if request.method not in ("GET", "HEAD"):
            await send_json(send, 405, {"error": "method not allowed"}, [("allow", "GET")])
            return
        auth = self.auth
        await send_json(send, 200, resource_metadata(
            self.resource(request), auth.authorization_servers, auth.scopes_supported),
            [*cors, ("cache-control", "public, max-age=300")])

    async def _authenticate(self, request: HttpRequest, send: Send) -> Identity | None:
        """The caller's identity, or None after answering 400/401/403/503 with a challenge."""
        auth = self.auth
        if auth.anonymous:
            identity = await auth.authenticate(None)
            CALLER.set(Caller(identity))
            return identity
        try:
            if request.query_string and "access_token" in request.query:
                raise AuthFailure(400, "invalid_request", "tokens in the query string are "
                                  "refused: send it in the Authorization header")
            try:
                token = bearer_token(request.header("authorization"))
            except HeaderError as exc:
                raise AuthFailure(400, "invalid_request", exc.reason) from None
            identity = await auth.authenticate(token)
            CALLER.set(Caller(identity, token))
            return identity
        except AuthFailure as failure:
            self.gateway.metrics.auth_failures.labels(str(failure.status),
                                                      failure.error or "none").inc()
            log.info("refused %s %s: %s", request.method, request.path, failure)
            headers: list[tuple[str, str]] = []
            if failure.status in (400, 401, 403):
                scopes = auth.required_scopes or auth.scopes_supported
                headers.append(("www-authenticate", bearer_challenge(
                    self.resource(request), scopes=scopes, error=failure.error,
                    description=failure.description)))
            if failure.status == 503:
                headers.append(("retry-after", "5"))
            body: dict[str, str] = {"error": failure.error or "unauthorized",
                                    "error_description": failure.description}
            await send_json(send, failure.status, body, headers)
            return None

    # --- /mcp ----------------------------------------------------------------------------------

    def _forbidden_reason(self, request: HttpRequest) -> str | None:
        origin = request.header("origin")
        host = request.header("host") or ""
        if origin is not None and origin not in self.settings.allowed_origins and origin not in (
                f"http://{host}", f"https://{host}"):
            return "Origin is not allowed"
        if self.loopback_bind and _host_name(host).lower() not in _LOOPBACK_HOSTS:
            return "Host must name a loopback address when the gateway listens on loopback"
        return None

    async def mcp(self, request: HttpRequest, send: Send) -> None:
        reason = self._forbidden_reason(request)
        if reason is not None:
            await send_json(send, 403, _error_body(INVALID_REQUEST, f"Forbidden: {reason}"))
            return
        identity = await self._authenticate(request, send)
        if identity is None:
            return
        if request.method in ("GET", "DELETE") and _is_stateless(request):
            await send_json(send, 405, _error_body(
                INVALID_REQUEST, "Method not allowed: protocol revision 2026-07-28 has no GET "
                                 "stream and no sessions"), [("allow", "POST")])
            return
        if request.method == "POST":
            await self.post(request, send, identity)
        elif request.method == "GET":
            await self.get(request, send, identity)
        elif request.method == "DELETE":
            await self.delete(request, send, identity)
        else:
            await send_json(send, 405, _error_body(INVALID_REQUEST, "Method not allowed: use "
                                                   "POST, GET or DELETE"),
                            [("allow", "GET, POST, DELETE")])

    async def _session(self, request: HttpRequest, send: Send,
                       identity: Identity) -> ClientSession | None:
        session_id = request.header("mcp-session-id")
        if session_id is None:
            await send_json(send, 400, _error_body(
                INVALID_REQUEST, "Bad Request: the Mcp-Session-Id header is required"))
            return None
        session = self.gateway.find_session(session_id, identity)
        if session is None:
            await send_json(send, 404, _error_body(
                INVALID_REQUEST, "Session not found: it ended or never existed; initialize a "
                                 "new one"))
            return None
        version = request.header("mcp-protocol-version")
        if version is not None and revision(version) not in HANDSHAKE_REVISIONS:
            await send_json(send, 400, _error_body(
                INVALID_REQUEST, f"Bad Request: unsupported MCP-Protocol-Version "
                                 f"{version[:40]!r}"))
            return None
        session.touch()
        return session

    async def post(self, request: HttpRequest, send: Send, identity: Identity) -> None:
        if not (request.header("content-type") or "").lower().startswith("application/json"):
            await send_json(send, 415, _error_body(
                INVALID_REQUEST, "Unsupported Media Type: Content-Type must be "
                                 "application/json"))
            return
        if not _accepts(request.header("accept"), "application/json", "text/event-stream"):
            await send_json(send, 406, _error_body(
                INVALID_REQUEST, "Not Acceptable: the Accept header must list application/json "
                                 "and text/event-stream"))
            return
        try:
            body = await request.body(self.settings.max_body_bytes)
        except BodyTooLarge as exc:
            await send_json(send, 413, _error_body(INVALID_REQUEST, str(exc)))
            return
        try:
            messages, batch = decode_body(body)
        except JsonRpcError as exc:
            await send_json(send, 400, encode(exc.response()))
            return
        if _is_stateless(request):
            await self.stateless.post(request, send, identity, messages, batch)
            return
        first = messages[0]
        if isinstance(first, Request) and first.method == "initialize":
            if batch:
                await send_json(send, 400, _error_body(
                    INVALID_REQUEST, "initialize must be sent alone, not in a batch"))
                return
            await self.initialize(first, send, identity)
            return
        session = await self._session(request, send, identity)
        if session is None:
            return
        if batch and not session.revision.allows_batches:
            await send_json(send, 400, _error_body(
                INVALID_REQUEST, f"JSON-RPC batches are not allowed in protocol revision "
                                 f"{session.revision}"))
            return
        requests: list[Request] = []
        errors: list[ErrorResponse] = []
        for message in messages:
            if isinstance(message, JsonRpcError):
                errors.append(message.response())
            elif isinstance(message, Request):
                requests.append(message)
            else:
                await session.receive(message)
        if not requests and not errors:
            await send_empty(send, 202)
            return
        if not batch and errors:
            await send_json(send, 400, encode(errors[0]), self._session_headers(session))
            return
        if not batch and requests:
            await self.answer(request, send, session, requests[0])
            return
        replies: list[Message] = [*errors]
        async with trio.open_nursery() as nursery:
            for item in requests:
                nursery.start_soon(self._batch_member, session, item, replies)
        await send_json(send, 200, orjson.dumps([m.to_dict() for m in replies]),
                        self._session_headers(session))

    async def _batch_member(self, session: ClientSession, request: Request,
                            replies: list[Message]) -> None:
        stream = session.streams.open()
        reply = await session.handle(request, stream)
        if reply is not None:
            replies.append(reply)
        stream.finish()

    def _session_headers(self, session: ClientSession) -> list[tuple[str, str]]:
        return [("mcp-session-id", session.id)]

    async def initialize(self, request: Request, send: Send, identity: Identity) -> None:
        params = request.params or {}
        negotiated = negotiate(params.get("protocolVersion"))
        capabilities = params.get("capabilities")
        client_info = params.get("clientInfo")
        try:
            session = await self.gateway.create_session(
                negotiated, capabilities if isinstance(capabilities, dict) else {},
                client_info if isinstance(client_info, dict) else {}, identity)
        except TooManySessions:
            await send_json(send, 503, _error_body(
                INTERNAL_ERROR, "Service Unavailable: too many sessions; try again later",
                request.id), [("retry-after", "5")])
            return
        if (session.failed_backends
                and self.gateway.plan.operational.partial_failure_mode == "fail"):
            session.close()
            failed = "; ".join(f"{name} {detail}" for name, detail in
                               sorted(session.failed_backends.items()))
            await send_json(send, 200, encode(ErrorResponse(request.id, ErrorObject(
                INTERNAL_ERROR, f"backends unavailable (partialFailureMode: fail): {failed}",
                {"backends": sorted(session.failed_backends)}))))
            return
        result: dict[str, Any] = {
            "protocolVersion": negotiated.version,
            "capabilities": {
                "tools": {"listChanged": True},
                "prompts": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
                "logging": {},
                "completions": {},
            },
            "serverInfo": {"name": f"vmcp-trio/{self.gateway.plan.name}",
                           "version": __version__},
        }
        instructions = [f"{name}: {link.instructions}" for name, link in session.links.items()
                        if link.instructions]
        if instructions:
            result["instructions"] = "\n\n".join(instructions)
        log.info("session %s initialized (protocol %s, %d backends%s)", session.id[:8],
                 negotiated, len(session.links),
                 f", unavailable: {', '.join(session.failed_backends)}"
                 if session.failed_backends else "")
        await send_json(send, 200, encode(Response(request.id, result)),
                        self._session_headers(session))

    async def answer(self, http: HttpRequest, send: Send, session: ClientSession,
                     request: Request) -> None:
        """Reply to one request: JSON if it is quick and alone, SSE otherwise."""
        stream = session.streams.open()

        async def work() -> None:
            reply = await session.handle(request, stream)
            if reply is not None:  # None: the client cancelled it, and gets no reply
                stream.push(encode(reply))
            stream.finish()

        try:
            session.spawn(work)
        except SessionClosed:
            await send_json(send, 404, _error_body(INVALID_REQUEST, "Session not found"))
            return
        with trio.move_on_after(self.settings.json_window_seconds):
            await stream.wait_event()
        payload = stream.only_reply()
        if payload is not None:
            await send_json(send, 200, payload, self._session_headers(session))
            return
        if stream.last_seq < 0 and not stream.finished and session.revision.primes_streams:
            stream.prime()  # (a finished empty stream is a cancelled request: nothing to say)
        await self.pump(http, send, session, stream, -1)

    async def pump(self, http: HttpRequest, send: Send, session: ClientSession,
                   stream: EventStream, after: int,
                   headers: list[tuple[str, str]] | None = None) -> None:
        """Write ``stream``'s events after ``after`` until it ends or the client leaves."""
        session.open_connections += 1
        self.gateway.open_streams += 1
        if headers is None:
            headers = self._session_headers(session)
        try:
            async with open_stream(http, send, headers) as (writer,
                                                                                   nursery):
                async def keepalive() -> None:
                    interval = self.settings.keepalive_seconds
                    while True:
                        await trio.sleep(interval)
                        if trio.current_time() - writer.last_write >= interval:
                            await writer.write(encode_comment())

                async def end_with_session() -> None:
                    await session.closed.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(keepalive)
                nursery.start_soon(end_with_session)
                try:
                    async for event in stream.follow(after):
                        await writer.write(event)
                except StreamGap as exc:
                    log.info("session %s: %s", session.id[:8], exc)
        finally:
            session.open_connections -= 1
            self.gateway.open_streams -= 1
            session.touch()

    async def get(self, request: HttpRequest, send: Send, identity: Identity) -> None:
        if not _accepts(request.header("accept"), "text/event-stream"):
            await send_json(send, 406, _error_body(
                INVALID_REQUEST, "Not Acceptable: the Accept header must list "
                                 "text/event-stream"))
            return
        session = await self._session(request, send, identity)
        if session is None:
            return
        stream, after = session.streams.standalone, session.streams.standalone.delivered
        last_event_id = request.header("last-event-id")
        if last_event_id is not None:
            parsed = parse_event_id(last_event_id)
            resumed = session.streams.get(parsed[0]) if parsed else None
            if resumed is not None and parsed is not None:
                stream, after = resumed, parsed[1]
        await self.pump(request, send, session, stream, after)

    async def delete(self, request: HttpRequest, send: Send, identity: Identity) -> None:
        session = await self._session(request, send, identity)
        if session is None:
            return
        session.close()
        await send_empty(send, 204)

    # --- operational endpoints -------------------------------------------------------------------

    def backends_health(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for backend in self.gateway.plan.backends:
            health = self.gateway.health.backends[backend.name]
            entry: dict[str, Any] = {
                "name": backend.name, "status": health.state,
                "consecutiveFailures": health.consecutive_failures,
                "lastError": health.last_error, "lastCheck": health.last_check,
                "latencyMs": health.latency_ms,
            }
            if isinstance(backend.endpoint, HttpEndpoint):
                entry.update(transport=backend.endpoint.transport, url=backend.endpoint.url)
            else:
                process = self.gateway.stdio[backend.name]
                entry.update(transport="stdio", process=process.state,
                             restarts=process.restarts)
            out.append(entry)
        return out

    async def readyz(self, send: Send) -> None:
        """Ready when the backends can serve: all of them under partialFailureMode fail, at
        least one under best_effort (a gateway with no backends is ready)."""
        states = {name: h.state for name, h in self.gateway.health.backends.items()}
        healthy = [name for name, state in states.items() if state == "healthy"]
        if self.gateway.plan.operational.partial_failure_mode == "fail":
            ready = len(healthy) == len(states)
        else:
            ready = bool(healthy) or not states
        body: dict[str, Any] = {"status": "ready" if ready else "not ready", "backends": states}
        auth = self.auth.health()
        if auth:
            body["auth"] = auth  # reported, not gating: cached keys may still serve
        await send_json(send, 200 if ready else 503, body)
