"""What the gateway needs from a backend, whatever its transport.

A :class:`BackendLink` is one client session's view of one backend: it has been initialized
(so it knows the backend's revision, capabilities and identity), forwards requests and
notifications, and hands every message the backend sends back to a *sink*:

* messages related to a forwarded request (progress, logging, sampling requests during a
  ``tools/call``) go to the sink given to :meth:`BackendLink.call`;
* unrelated messages (list changes, resource updates, logging outside any call) go to the
  session sink given when the link was made.

Server-to-client requests arrive at a sink as :class:`~vmcp_trio.protocol.jsonrpc.Request` with
the backend's own id; the client's answer comes back through :meth:`BackendLink.answer`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ... import __version__
from ...auth.outgoing.strategies import OutgoingRequest
from ...protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorObject,
    ErrorResponse,
    Message,
    RequestId,
    Response,
)
from ...protocol.revisions import Revision, revision
from ...protocol.tasks_extension import capabilities_for_backend

__all__ = ["BackendAuthRequired", "BackendError", "BackendLink", "BackendTimedOut",
           "CredentialHook", "FallbackToLegacy", "Sink", "backend_error"]

Sink = Callable[[Message], Awaitable[None]]


class CredentialHook(Protocol):
    """Outgoing authentication (boundary 2): headers to add to each request to one backend
    (``request``: the request they go with, which a signature covers)."""

    async def headers(self, request: OutgoingRequest) -> list[tuple[str, str]]: ...


class NoCredentials:
    async def headers(self, request: OutgoingRequest) -> list[tuple[str, str]]:
        return []


class BackendError(Exception):
    """The backend failed at the transport level (down, reset, timed out, protocol error)."""

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"backend {backend!r} {detail}")
        self.backend = backend
        self.detail = detail


class BackendTimedOut(BackendError):
    """The backend took a request and gave no answer within its timeout (it may be hung: the
    circuit breaker counts these). ``what`` it did not do: ``answer tools/call``, say."""

    def __init__(self, backend: str, what: str, seconds: float) -> None:
        super().__init__(backend, f"did not {what} within {seconds:g}s")


class BackendAuthRequired(BackendError):
    """The backend answered 401 or 403: it is up, but wants a credential this request did not
    carry (a health probe has no caller to get one for)."""


class FallbackToLegacy(BackendError):
    """A Streamable HTTP backend answered ``initialize`` with 400, 404 or 405: per the spec
    (2025-11-25) the client tries the legacy HTTP+SSE transport at the same URL."""


CLIENT_INFO = {"name": "vmcp-trio", "version": __version__}
"""How vmcp introduces itself to backends."""


def initialize_params(version: str, capabilities: dict[str, Any]) -> dict[str, Any]:
    """A handshake backend's ``initialize``: the client's capabilities, but no Tasks extension
    declaration (the backend's own capabilities are not known yet; the gateway offers tasks of
    2026-07-28 backends only)."""
    return {"protocolVersion": version,
            "capabilities": capabilities_for_backend(capabilities, None),
            "clientInfo": CLIENT_INFO}


def read_initialize(backend: str, reply: Response | ErrorResponse, *,
                    fallback: Revision | None = None
                    ) -> tuple[Revision, dict[str, Any], dict[str, Any], str | None]:
    """``(revision, capabilities, serverInfo, instructions)`` of an ``initialize`` answer.

    A version we do not speak is an error, unless ``fallback`` says which revision to treat it
    as (the legacy transport's 2024-11-05, whose messages are 2025-03-26's)."""
    if isinstance(reply, ErrorResponse):
        raise BackendError(backend, f"refused initialize: {reply.error.message[:200]}")
    result = reply.result
    version = str(result.get("protocolVersion"))
    negotiated = revision(version)
    if negotiated is None or negotiated.stateless:
        if fallback is None:
            raise BackendError(backend, "answered initialize with an unsupported protocol "
                                        f"version {version[:40]!r}")
        negotiated = fallback
    capabilities, info = result.get("capabilities"), result.get("serverInfo")
    instructions = result.get("instructions")
    return (negotiated, capabilities if isinstance(capabilities, dict) else {},
            info if isinstance(info, dict) else {},
            instructions if isinstance(instructions, str) else None)


def backend_error(request_id: RequestId | None, backend: str, detail: str) -> ErrorResponse:
    """The JSON-RPC error a client gets when ``backend`` failed its request."""
    return ErrorResponse(request_id, ErrorObject(INTERNAL_ERROR, f"backend {backend!r} {detail}",
                                                 {"backend": backend}))


class Answerable(Protocol):
    """Whoever asked the client something and takes its answer: a backend's link, or the
    gateway itself (a composite tool's elicitation step)."""

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None: ...


class BackendLink(Protocol):
    name: str

    @property
    def revision(self) -> Revision: ...

    @property
    def server_capabilities(self) -> dict[str, Any]: ...

    @property
    def server_info(self) -> dict[str, Any]: ...

    @property
    def instructions(self) -> str | None: ...

    async def call(self, method: str, params: dict[str, Any] | None,
                   sink: Sink) -> Response | ErrorResponse:
        """Forward a request; related messages go to ``sink``. Raises :class:`BackendError`."""
        ...

    async def notify(self, method: str, params: dict[str, Any] | None) -> None: ...

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        """The client's answer to the backend's request ``request_id``."""
        ...

    async def aclose(self) -> None: ...
