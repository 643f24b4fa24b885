"""The HTTP face of the gateway: routing, incoming authentication, and the operational endpoints.

* ``/mcp``: ``Origin`` must be absent, same-origin or allowed (403); on a loopback bind the
  ``Host`` header must name a loopback host (DNS rebinding, 403); then the caller is
  authenticated (401/403 with an RFC 6750 challenge). The method (405) and a POST's media types
  (415, 406) are checked (:mod:`vmcp_trio.protocol.streamable`), its body is bounded (413) and
  parsed as JSON-RPC (400), then it goes to the front of its era
  (:func:`~vmcp_trio.protocol.streamable.is_stateless`): 2026-07-28 (:mod:`.stateless_front`),
  else the handshake revisions (:mod:`.handshake_front`), which also serve GET and DELETE.
* ``/.well-known/oauth-protected-resource[/mcp]``: RFC 9728 metadata (with incoming auth;
  :mod:`vmcp_trio.auth.boundary`, shared with ``vmcp proxy``, also authenticates ``/mcp``).
* The probes (:mod:`vmcp_trio.http.probes`): ``/health``, ``/healthz`` and ``/livez``
  (liveness: the event loop answers), ``/readyz`` (readiness: serving can succeed; its JSON
  names the parts that cannot and why: :meth:`GatewayApp.ready`), ``/metrics``; and
  ``/api/backends/health``: unauthenticated.
* Anything else goes to ``extra_endpoints`` (the embedded authorization server), else 404.

Errors are JSON-RPC error objects (id null when the request could not be read) with the HTTP
status that says what failed. A fault while serving one HTTP request ends that request only
(500 with a JSON-RPC error, when nothing was sent yet; logged with its request id); a client
that leaves before its body arrived is a debug line and a counter, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..auth.boundary import IncomingBoundary
from ..auth.caller import Caller
from ..auth.incoming.authenticator import Authenticator, AuthFailure
from ..http.asgi import (
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    HttpRequest,
    Receive,
    Scope,
    Send,
    StatusSend,
    http_request,
    send_json,
)
from ..http.origin import OriginGuard
from ..http.probes import PROBE_PATHS, Probes
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JsonRpcError,
    decode_body,
    encode,
    encode_error,
)
from ..protocol.streamable import check_method, check_post, is_stateless
from ..resources.plan import AnonymousIncoming
from ..runtime.audit import auth_event
from ..runtime.logs import ACCESS, REQUEST_ID, AccessRecord, adopt_request_id, log_access
from .core import Gateway
from .handshake_front import HandshakeFront
from .responder import Responder
from .stateless_front import StatelessFront

__all__ = ["MCP_PATH", "ExtraEndpoints", "GatewayApp"]

log = logging.getLogger("vmcp.http")

MCP_PATH = "/mcp"


def _is_stateless(request: HttpRequest) -> bool:
    """The request is of the 2026-07-28 era (:func:`is_stateless`)."""
    return is_stateless(request.header("mcp-protocol-version"),
                        request.header("mcp-session-id"))


class _GuardedSend(StatusSend):
    """The ASGI ``send`` of one request (:class:`~vmcp_trio.http.asgi.StatusSend`), which also
    closes an HTTP/1.1 connection whose request body was not read (a refusal sent before it:
    the unread body would otherwise be taken for the next request, or a pooled client would
    reuse a connection the server is about to drop)."""

    __slots__ = ("_close", "request")

    def __init__(self, send: Send, request: HttpRequest, http_version: str) -> None:
        super().__init__(send)
        self.request = request
        self._close = http_version in ("1.0", "1.1")

    async def __call__(self, message: dict[str, Any]) -> None:
        if not self.status and self._close and self.request.body_unread:
            message = {**message, "headers": [*message.get("headers", ()),
                                              (b"connection", b"close")]}
        await super().__call__(message)


ExtraEndpoints = Callable[[HttpRequest, Send], Awaitable[bool]]
"""Serves a request if it is one of its endpoints; False otherwise."""
ReadinessCheck = Callable[[], Awaitable[str | None]]
"""Why a part of the process cannot serve now, or None."""


class GatewayApp:
    """The ASGI application of ``vmcp serve``."""

    def __init__(self, gateway: Gateway, authenticator: Authenticator, *,
                 extra_endpoints: ExtraEndpoints | None = None,
                 readiness: Mapping[str, ReadinessCheck] | None = None) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        self.metrics = gateway.metrics
        self.boundary = self._boundary(authenticator)
        self.extra_endpoints = extra_endpoints
        self.readiness = dict(readiness or {})
        """More parts that ``/readyz`` asks (the authorization server's storage)."""
        self.was_ready = False
        """``/readyz`` answered ready once (a reload keeps it): see :meth:`readyz`."""
        self.responder = Responder(self.settings)
        self.handshake = HandshakeFront(gateway, self.responder)
        self.stateless = StatelessFront(gateway, self.responder)
        self.guard = OriginGuard(self.settings.host, self.settings.allowed_origins)
        self.probes = Probes(self.ready, self.metrics)

    def update(self, authenticator: Authenticator, *,
               extra_endpoints: ExtraEndpoints | None,
               readiness: Mapping[str, ReadinessCheck] | None) -> None:
        """A reload: new requests use these (requests being served finish with the old)."""
        self.boundary = self._boundary(authenticator)
        self.extra_endpoints = extra_endpoints
        self.readiness = dict(readiness or {})

    @property
    def auth(self) -> Authenticator:
        return self.boundary.authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = await http_request(scope, receive, send,
                                     body_timeout=self.settings.body_timeout_seconds)
        if request is None:
            return
        guarded = _GuardedSend(send, request, scope.get("http_version", "1.1"))
        record = AccessRecord(address=request.client or None,
                              user_agent=(request.header("user-agent") or "")[:200] or None)
        ACCESS.set(record)
        started = trio.current_time()
        try:
            await self.route(request, guarded)
        except ClientGone as exc:
            self.metrics.client_disconnects.inc()
            log.debug("%s %s: %s", request.method, request.path[:200], exc)
        except BodyTimeout as exc:
            log.info("%s %s: %s", request.method, request.path[:200], exc)
            if not guarded.started:
                await send_json(guarded, 408, encode_error(INVALID_REQUEST, f"Request Timeout: "
                                                                           f"{exc}"))
        except Exception as exc:
            # A fault while serving this HTTP request ends this request only (the MCP work
            # it started has its own containment, with the JSON-RPC id).
            log.error("%s %s failed", request.method, request.path[:200], exc_info=exc)
            self.metrics.faults.labels("request").inc()
            if not guarded.started:
                await send_json(guarded, 500, encode_error(
                    INTERNAL_ERROR, "Internal error: the gateway failed to serve this request "
                                    f"(logged as request {REQUEST_ID.get()})"))
        finally:
            if request.path not in PROBE_PATHS:
                log_access(request.method, request.path[:200], guarded.status,
                           trio.current_time() - started, record)

    async def route(self, request: HttpRequest, send: Send) -> None:
        if request.scope.get("http_version") == "2" and sum(
                len(k) + len(v) for k, v in request.scope["headers"]
        ) > self.settings.max_header_bytes:
            # HTTP/1.1 heads are bounded as they are read (http/h1.py); hypercorn's HTTP/2
            # does not bound a header block, so it is bounded here.
            await send_json(send, 431, encode_error(
                INVALID_REQUEST, f"Request header fields are larger than "
                                 f"{self.settings.max_header_bytes} bytes in all"))
            return
        adopt_request_id(request.header("x-request-id"))
        path = request.path
        if path == MCP_PATH:
            await self.mcp(request, send)
        elif path in self.boundary.metadata_paths and not self.auth.anonymous:
            await self.boundary.serve_metadata(request, send)
        elif path == "/api/backends/health":
            await send_json(send, 200, self.gateway.health.report())
        elif not await self.probes.answer(path, send) and (
                self.extra_endpoints is None or not await self.extra_endpoints(request, send)):
            await send_json(send, 404, {"error": f"no such endpoint: {path[:200]}"})

    # --- incoming auth --------------------------------------------------------------------------

    def _boundary(self, authenticator: Authenticator) -> IncomingBoundary:
        settings = self.settings
        incoming = self.gateway.plan.incoming
        return IncomingBoundary(
            authenticator, path=MCP_PATH, default_host=f"{settings.host}:{settings.port}",
            configured_resource=None if isinstance(incoming, AnonymousIncoming)
            else incoming.resource_url,
            trust_forwarded=settings.trust_forwarded_headers,
            on_refusal=self._refused, passthrough=self.gateway.plan.passthrough_headers)

    def _refused(self, failure: AuthFailure) -> None:
        """Count a request incoming auth refused, and audit it."""
        self.metrics.auth_failures.labels(str(failure.status), failure.error or "none").inc()
        audit = self.gateway.services.audit
        if audit.settings.enabled:
            access = ACCESS.get()
            audit.record(auth_event(
                audit.settings, "denied", "denied" if failure.status in (401, 403) else "error",
                address=access.address if access else None,
                user_agent=access.user_agent if access else None, request_id=REQUEST_ID.get(),
                endpoint=MCP_PATH, reason=failure.error or "no token"))

    # --- /mcp ----------------------------------------------------------------------------------

    async def mcp(self, request: HttpRequest, send: Send) -> None:
        reason = self.guard.refusal(request)
        if reason is not None:
            await send_json(send, 403, encode_error(INVALID_REQUEST, f"Forbidden: {reason}"))
            return
        caller = await self.boundary.authenticate(request, send)
        if caller is None:
            return
        stateless = _is_stateless(request)
        rejection = check_method(request.method, stateless=stateless)
        if rejection is not None:
            await send_json(send, rejection.status, rejection.body(), rejection.headers)
        elif request.method == "POST":
            await self.post(request, send, caller, stateless=stateless)
        elif request.method == "GET":
            await self.handshake.get(request, send, caller)
        else:
            await self.handshake.delete(request, send, caller)

    async def post(self, request: HttpRequest, send: Send, caller: Caller, *,
                   stateless: bool) -> None:
        rejection = check_post(request.header("content-type"), request.header("accept"))
        if rejection is not None:
            await send_json(send, rejection.status, rejection.body(), rejection.headers)
            return
        try:
            body = await request.body(self.settings.max_body_bytes)
        except BodyTooLarge as exc:
            await send_json(send, 413, encode_error(INVALID_REQUEST, str(exc)))
            return
        try:
            messages, batch = decode_body(body, max_batch=self.settings.max_batch)
        except JsonRpcError as exc:
            await send_json(send, 400, encode(exc.response()))
            return
        if stateless:
            await self.stateless.post(request, send, caller, messages, batch)
        else:
            await self.handshake.post(request, send, caller, messages, batch)

    # --- operational endpoints -------------------------------------------------------------------

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: ready when serving can succeed; ``notReady`` says which part is not,
        and why.

        Until this process was ready once, every part decides: a replica whose backends,
        issuer keys or storage cannot be reached never joins the balancer (a rollout with a
        wrong URL stalls on its first pod). From then on only draining does; a part that fails
        later (a backend, Redis, the issuer) is reported under ``degraded`` with the status
        still 200, because every replica shares it: taking them all out of the balancer routes
        around nothing and turns one part's outage into a 503 for every client, those of the
        parts still working included."""
        health = self.gateway.health
        problems: dict[str, str] = {}
        if self.gateway.draining:
            problems["draining"] = "the gateway is shutting down"
        backends = health.not_ready()
        if backends is not None:
            problems["backends"] = backends
        auth = self.auth.health()
        if auth.get("keys") == "unknown":
            problems["auth"] = ("the issuer's signing keys were never fetched"
                                + (f" ({auth['lastError']})" if auth.get("lastError") else ""))
        for part, check in self.readiness.items():
            with trio.move_on_after(2) as waited:
                problem = await check()
            if waited.cancelled_caught:
                problem = "did not answer within 2s"
            if problem is not None:
                problems[part] = problem
        if not problems:
            self.was_ready = True
        blocking = problems if not self.was_ready else {
            part: why for part, why in problems.items() if part == "draining"}
        body: dict[str, Any] = {
            "status": "not ready" if blocking else "degraded" if problems else "ready",
            "backends": {n: h.state for n, h in health.backends.items()}}
        if auth:
            body["auth"] = auth
        if self.gateway.draining:
            body["draining"] = True
        if blocking:
            body["notReady"] = problems
        elif problems:
            body["degraded"] = problems
        return not blocking, body
