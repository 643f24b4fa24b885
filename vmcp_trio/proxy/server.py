"""The HTTP face of ``vmcp proxy``: its own few endpoints, incoming auth, then the forwarder.

* ``Origin`` and, on a loopback listener, ``Host`` are checked first (403;
  :mod:`vmcp_trio.http.origin`): a web page must not use the proxy's remote login through DNS
  rebinding.
* With incoming auth (``--oidc-issuer``), the RFC 9728 document is served at
  ``/.well-known/oauth-protected-resource`` and its path-suffixed form for the target's path,
  and every other request must carry a valid token (:mod:`vmcp_trio.auth.boundary`, the same
  validators, caches and challenges as ``vmcp serve``); without it, every request is forwarded.
* The probes (:mod:`vmcp_trio.http.probes`: ``/health``, ``/healthz``, ``/livez``,
  ``/readyz``, ``/metrics``) are the proxy's own, answered without a token and never
  forwarded: ``/readyz`` is 503 while a remote login (``--remote-auth``) has no token to send
  (not yet, or it failed: a static token or a token exchange is always ready) and once
  draining began; ``/metrics`` holds the process's own series.
* Everything else is forwarded (:mod:`.forwarder`): the proxy claims no other path of the
  remote's.
* Draining (SIGTERM): ``/readyz`` is 503 at once; requests still arrive for ``drain_delay`` (a
  load balancer notices the listener going away), then new ones get 503 with ``Retry-After``;
  those in flight run to their end within the grace period (:mod:`vmcp_trio.app.proxy`).
* A fault while serving one request ends that request only (:mod:`.served`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..auth.boundary import IncomingBoundary
from ..auth.incoming.authenticator import AuthFailure
from ..http.asgi import (
    HttpRequest,
    Receive,
    Scope,
    Send,
    http_request,
    send_json,
)
from ..http.origin import OriginGuard
from ..http.probes import PROBE_PATHS, Probes
from ..runtime.metrics import ProcessMetrics
from .forwarder import Forwarder, RemoteRefused
from .remote_login import RemoteLogin
from .served import serve_contained

__all__ = ["ProxyApp"]

log = logging.getLogger("vmcp.proxy")


class ProxyApp:
    def __init__(self, forwarder: Forwarder, boundary: IncomingBoundary | None,
                 guard: OriginGuard, *, body_timeout: float = 15.0) -> None:
        self.forwarder = forwarder
        self.boundary = boundary
        self.guard = guard
        self.body_timeout = body_timeout
        self.draining = False
        """Shutting down: ``/readyz`` says 503 (requests are served until :attr:`refusing`)."""
        self.refusing = False
        """Draining: new requests get 503."""
        self.probes = Probes(self.ready, ProcessMetrics())
        self.active = 0
        """Requests being forwarded."""
        self.idle = trio.Event()
        self.idle.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = await http_request(scope, receive, send, body_timeout=self.body_timeout)
        if request is None:
            return
        self.active += 1
        self.idle = trio.Event() if self.active == 1 else self.idle
        try:
            await serve_contained(request, send, self.route, what="proxy", log=log,
                                  quiet_paths=PROBE_PATHS)
        finally:
            self.active -= 1
            if not self.active:
                self.idle.set()

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: ``notReady`` names what keeps the proxy from serving, and why."""
        problems: dict[str, str] = {}
        if self.draining:
            problems["draining"] = "the proxy is shutting down"
        for credential in self.forwarder.credentials:
            login = credential.not_ready() if isinstance(credential, RemoteLogin) else None
            if login is not None:
                problems["remoteLogin"] = login
        body: dict[str, Any] = {"status": "not ready" if problems else "ready"}
        if problems:
            body["notReady"] = problems
        return not problems, body

    async def route(self, request: HttpRequest, send: Send) -> None:
        reason = self.guard.refusal(request)
        if reason is not None:
            await send_json(send, 403, {"error": "forbidden", "error_description": reason})
            return
        if await self.probes.answer(request.path, send):
            return
        if self.refusing:
            await send_json(send, 503, {"error": "shutting_down", "error_description":
                                        "the proxy is shutting down; try again"},
                            [("retry-after", "5"), ("connection", "close")])
            return
        boundary = self.boundary
        caller = None
        if boundary is not None:
            if request.path in boundary.metadata_paths:
                await boundary.serve_metadata(request, send)
                return
            caller = await boundary.authenticate(request, send)
            if caller is None:
                return
        try:
            await self.forwarder.forward(request, send, caller)
        except RemoteRefused as refused:
            if refused.status == 401 and boundary is not None:
                await boundary.refuse(request, send, AuthFailure(401, "invalid_token",
                                                                 str(refused)))
                return
            headers = [("retry-after", "5")] if refused.status == 503 else []
            await send_json(send, refused.status, {
                "error": "remote_credential_unavailable", "error_description": str(refused)},
                headers)
