"""The link policy: how a client session, or a health check, reaches one backend.

:class:`BackendLinks` is the one place that knows how to open a :class:`~.base.BackendLink`:

* A backend reached by URL is asked in the newest revision first: 2026-07-28 when it answers
  ``server/discover``, else a handshake revision over Streamable HTTP, else the legacy HTTP+SSE
  transport (when the resource says ``transport: sse``, or the backend refused ``initialize``
  with 400, 404 or 405, as the spec says a client then falls back). What a backend turned out
  not to speak is remembered for the life of the process, so later sessions go straight to what
  it does.
* A stdio backend is one shared, supervised :class:`~.stdio.StdioProcess`; a session's link to it
  is a view that tags the session's calls.
* Every HTTP link carries the backend's outgoing credentials (boundary 2) for the caller the
  session holds now (:class:`SessionCredentials`), given the request they go with (a signing
  strategy, ``awsSts``'s SigV4, signs it); a credential that cannot be had is that backend's
  error for that call. The caller's ``passthroughHeaders`` go with its requests (never the
  credentials' names: refused at load). A backend's static headers (an MCPServerEntry's or
  MCPRemoteProxy's ``headerForward``, checked at load so that none collides with the
  credentials or the transport's own headers) go with every request, health checks included
  (:class:`StaticHeaders`).

The health of a backend is not decided here: callers check it before opening a link.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from ...auth.caller import Caller
from ...auth.outgoing.strategies import (
    BackendStrategy,
    CredentialError,
    OutgoingRequest,
    RequestSigner,
)
from ...http.client import HttpClient
from ...protocol.revisions import Revision
from ...resources.plan import GatewayPlan, HttpEndpoint, StdioEndpoint
from ...runtime.supervisor import Supervisor
from .base import (
    BackendError,
    BackendLink,
    CredentialHook,
    FallbackToLegacy,
    NoCredentials,
    Sink,
)
from .http import HttpBackendLink
from .legacy_sse import LegacySseBackendLink
from .stateless_link import StatelessBackendLink
from .stdio import StdioBackendLink, StdioProcess

__all__ = ["BackendLinks", "HttpLink", "SessionCredentials", "StaticHeaders"]

log = logging.getLogger("vmcp.gateway")

HttpLink = StatelessBackendLink | HttpBackendLink | LegacySseBackendLink
"""The links to a backend reached by URL."""


class SessionCredentials:
    """A backend's outgoing strategy as one client session's link sees it.

    The credential is computed for the session's latest caller (``caller()``), so that the
    link's long-lived work (a GET or listen stream reconnecting long after the request that
    opened it) uses the token the client sends now, not the one it sent then (every caller of
    a session is the same identity). A failure to get one is that backend's error (a JSON-RPC
    error naming it)."""

    def __init__(self, backend: str, strategy: BackendStrategy,
                 caller: Callable[[], Caller | None]) -> None:
        self.backend = backend
        self.strategy = strategy
        self.caller = caller
        # Told apart once: an isinstance() of a runtime-checkable Protocol costs ~4% of a
        # call's CPU on every request (bench/gateway_overhead.py, py-spy).
        self._sign = strategy.sign if isinstance(strategy, RequestSigner) else None

    async def headers(self, request: OutgoingRequest) -> list[tuple[str, str]]:
        caller = self.caller()
        try:
            if self._sign is not None:
                found = await self._sign(caller, request)
            else:
                found = await self.strategy.headers(caller)  # type: ignore[union-attr]
        except CredentialError as exc:
            raise BackendError(self.backend, f"has no credential for this caller: {exc}") \
                from None
        if caller is not None and caller.forwarded:  # passthroughHeaders
            return [*caller.forwarded, *found]
        return found


class StaticHeaders:
    """A backend's static headers, then its credentials' (their names never overlap)."""

    def __init__(self, endpoint: HttpEndpoint, credentials: CredentialHook | None) -> None:
        self.static = [(header.name, header.text()) for header in endpoint.headers]
        self.credentials = credentials or NoCredentials()

    async def headers(self, request: OutgoingRequest) -> list[tuple[str, str]]:
        return [*self.static, *await self.credentials.headers(request)]


def _with_static(endpoint: HttpEndpoint,
                 credentials: CredentialHook | None) -> CredentialHook | None:
    return StaticHeaders(endpoint, credentials) if endpoint.headers else credentials


class BackendLinks:
    def __init__(self, plan: GatewayPlan, client: HttpClient,
                 strategies: Mapping[str, BackendStrategy],
                 stdio: Mapping[str, StdioProcess]) -> None:
        self.plan = plan
        self.client = client
        self.strategies = strategies
        """Boundary 2: each backend's outgoing strategy."""
        self.stdio = stdio
        """The shared process of each stdio backend."""
        self.endpoints = {backend.name: backend.endpoint for backend in plan.backends}
        self.handshake_backends: set[str] = set()
        """Streamable HTTP backends found not to speak 2026-07-28."""
        self.legacy_backends: set[str] = set()
        """Streamable HTTP backends found to speak only the legacy HTTP+SSE transport."""
        self._trusting: dict[str, HttpClient] = {}
        """A client per CA bundle of an endpoint (``caBundleRef``), at most one per bundle."""

    def client_for(self, endpoint: HttpEndpoint) -> HttpClient:
        """The HTTP client of ``endpoint``: the shared one, or one that also trusts the
        endpoint's CA bundle (kept, so its connections are pooled as the shared one's)."""
        if endpoint.ca_bundle is None:
            return self.client
        client = self._trusting.get(endpoint.ca_bundle)
        if client is None:
            client = self._trusting[endpoint.ca_bundle] = HttpClient.trusting(
                endpoint.ca_bundle)
        return client

    def update(self, plan: GatewayPlan, strategies: Mapping[str, BackendStrategy],
               stdio: Mapping[str, StdioProcess], changed: set[str]) -> None:
        """A reload: the new plan's backends, strategies and processes; what was learnt of the
        ``changed`` backends (which revision they speak) is forgotten."""
        self.plan = plan
        self.strategies = strategies
        self.stdio = stdio
        self.endpoints = {backend.name: backend.endpoint for backend in plan.backends}
        self.handshake_backends -= changed
        self.legacy_backends -= changed

    def timeout(self, name: str) -> float:
        return self.plan.operational.timeout_for(name).total_seconds()

    async def open(self, name: str, *, owner: str, capabilities: dict[str, Any], sink: Sink,
                   caller: Callable[[], Caller | None], supervisor: Supervisor) -> BackendLink:
        """A started link of the client session ``owner``: its long-lived streams run under
        ``supervisor``, unrelated messages go to ``sink``. Raises :class:`BackendError`."""
        endpoint = self.endpoints[name]
        timeout = self.timeout(name)
        if isinstance(endpoint, HttpEndpoint):
            return await self.connect_http(
                name, endpoint, supervisor, capabilities, sink, timeout,
                credentials=SessionCredentials(name, self.strategies[name], caller))
        assert isinstance(endpoint, StdioEndpoint)
        process = self.stdio[name]
        with trio.move_on_after(timeout):
            await process.ready.wait()
        if not process.ready.is_set():
            raise BackendError(name, f"is not running ({process.last_error or 'starting'})")
        return StdioBackendLink(process, owner, timeout=timeout)

    def join(self, name: str, joined: tuple[str, Revision, dict[str, Any], dict[str, Any],
                                            str | None], *,
             capabilities: dict[str, Any], sink: Sink, caller: Callable[[], Caller | None],
             supervisor: Supervisor) -> BackendLink | None:
        """A link of a client session's copy that joins the backend session another replica
        made (``joined``: its id, revision, capabilities, server info, instructions); None
        when the backend cannot be joined so (not a Streamable HTTP backend now: connect
        anew)."""
        endpoint = self.endpoints.get(name)
        if (not isinstance(endpoint, HttpEndpoint) or endpoint.transport != "streamable-http"
                or name in self.legacy_backends):
            return None
        credentials = SessionCredentials(name, self.strategies[name], caller)
        link = HttpBackendLink(name, endpoint.url, self.client_for(endpoint), session_sink=sink,
                               credentials=_with_static(endpoint, credentials),
                               timeout=self.timeout(name))
        link.join(supervisor, capabilities, joined)
        return link

    async def connect_http(self, name: str, endpoint: HttpEndpoint, supervisor: Supervisor,
                           capabilities: dict[str, Any], sink: Sink, timeout: float, *,
                           listen: bool = True,
                           credentials: CredentialHook | None = None) -> HttpLink:
        """A started link to an HTTP backend, in the newest revision it speaks (see the module
        docstring)."""
        credentials = _with_static(endpoint, credentials)
        if endpoint.transport == "streamable-http" and name not in self.handshake_backends:
            stateless = StatelessBackendLink(name, endpoint.url, self.client_for(endpoint),
                                             session_sink=sink,
                                             credentials=credentials, timeout=timeout)
            if await stateless.start(supervisor, capabilities, listen=listen):
                return stateless
            self.handshake_backends.add(name)
        refused: FallbackToLegacy | None = None
        if endpoint.transport == "streamable-http" and name not in self.legacy_backends:
            link = HttpBackendLink(name, endpoint.url, self.client_for(endpoint),
                                   session_sink=sink,
                                   credentials=credentials, timeout=timeout)
            try:
                await link.start(supervisor, capabilities, listen=listen)
                return link
            except FallbackToLegacy as exc:
                refused = exc
        legacy = LegacySseBackendLink(name, endpoint.url, self.client_for(endpoint),
                                      session_sink=sink,
                                      credentials=credentials, timeout=timeout)
        try:
            await legacy.start(supervisor.nursery, capabilities)
        except BackendError:
            if refused is not None:
                raise refused from None
            raise
        if refused is not None:
            log.info("backend %s speaks the legacy HTTP+SSE transport (%s)", name,
                     refused.detail)
            self.legacy_backends.add(name)
        return legacy
