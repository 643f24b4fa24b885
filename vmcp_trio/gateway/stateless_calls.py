"""A 2026-07-28 call through a handshake backend: parked across the client's retries.

A ``tools/call``, ``prompts/get`` or ``resources/read`` of a 2026-07-28 client that goes to a
backend speaking 2026-07-28 needs nothing here: the round trip is the client's and the
backend's (its ``InputRequiredResult`` and the client's retry pass through unchanged). One that
goes to a handshake backend is bridged by :class:`StatelessCalls`, with these rules:

* The first request starts the backend call as a request of the context (so a busy context
  refuses it, -32000 and 429) and parks it (:class:`~.parked_calls.ParkedCall`); the call's
  questions to the client come back as an ``InputRequiredResult`` whose ``requestState`` names
  the parked call, signed for this identity, method and params
  (:class:`~.parked_calls.RequestStateSigner`).
* A retry with that ``requestState`` and the client's ``inputResponses`` continues the same
  backend call; a state that does not verify is -32602. With shared sessions a state naming
  another replica's call is passed there (the peer's ``parked_elsewhere``).
* The answer is the backend's reply, under the retry's id; a question that needs a capability
  the client did not declare ends the call with -32021 naming it.
* A client that declared neither ``sampling`` nor ``elicitation`` cannot be asked anything: its
  call runs in the request's own task and is never parked (no task, no state); a question the
  backend asks it ends the call with -32021 as a parked call's would, and a backend's request
  on its own stream finds no call waiting for the client.
* Parked calls expire with their state's lifetime, at most
  :data:`~.calls.MAX_WAITING_FOR_CLIENT` at once (the oldest dropped past it); a client that
  closes the stream of the request that is waiting cancels the call.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..protocol.jsonrpc import (
    INVALID_PARAMS,
    TOO_BUSY,
    ErrorObject,
    ErrorResponse,
    Request,
    Response,
)
from ..protocol.stateless_client import CLIENT_CAPABILITY
from ..protocol.stateless_requests import MISSING_CLIENT_CAPABILITY, StatelessContext
from .calls import MAX_WAITING_FOR_CLIENT, Call, SessionBusy, progress_token
from .parked_calls import ParkedCall, RequestStateSigner, check_input_responses, params_digest
from .routing import Routed
from .session_peer import SessionPeer
from .streams import EventStream

__all__ = ["StatelessCalls"]

_ASKABLE = frozenset(c for c in CLIENT_CAPABILITY.values() if c != "roots")
"""What a client must declare for a backend's call to ask it something (a ``roots/list`` of a
parked call is refused to the backend, never asked)."""

Reply = Response | ErrorResponse
Handle = Callable[[Request, Call], Awaitable[Reply | None]]
"""Answer a request of a call (the session's dispatch)."""


def _error(request: Request, code: int, message: str, data: Any = None) -> ErrorResponse:
    return ErrorResponse(request.id, ErrorObject(code, message, data))


def _missing(request: Request, missing: dict[str, Any]) -> ErrorResponse:
    return _error(request, MISSING_CLIENT_CAPABILITY, "the request needs a client capability "
                  f"that was not declared: {', '.join(missing)}",
                  {"requiredCapabilities": missing})


class StatelessCalls:
    def __init__(self, signer: RequestStateSigner, *, identity: tuple[str, str],
                 id_prefix: str, handle: Handle,
                 spawn: Callable[..., None], peer: Callable[[], SessionPeer | None]) -> None:
        self._signer = signer
        self._identity = identity
        self._id_prefix = id_prefix
        """With shared sessions the replica's id: a parked call's id names where it is."""
        self._handle = handle
        self._spawn = spawn
        self._peer = peer
        self._parked: dict[str, ParkedCall] = {}

    def waiting_on(self, backend: str) -> list[ParkedCall]:
        """The parked calls still waiting for ``backend``'s reply."""
        return [p for p in self._parked.values()
                if p.reply is None and p.call is not None and p.call.backend == backend]

    async def answer(self, request: Request, stream: EventStream, context: StatelessContext,
                     routed: Routed | None) -> Reply | None:
        params = request.params or {}
        if "requestState" in params:
            digest = params_digest(params)
            call_id = self._signer.verify(params["requestState"], self._identity,
                                          request.method, digest)
            parked = self._parked.get(call_id or "")
            peer = self._peer()
            if (parked is None and call_id is not None and peer is not None
                    and peer.parked_elsewhere is not None):
                elsewhere = await peer.parked_elsewhere(call_id, request, context, stream)
                if elsewhere is not None:
                    return elsewhere
            if parked is None:
                return _error(request, INVALID_PARAMS, "params.requestState is invalid, "
                              "altered, expired or for other params")
            responses = params.get("inputResponses") or {}
            problem = check_input_responses(responses)
            if problem is not None:
                return _error(request, INVALID_PARAMS, problem)
            parked.call.stream = stream
            parked.call.progress_token = progress_token(params)
            await parked.answer(responses)
        elif _ASKABLE.isdisjoint(context.client_capabilities):
            return await self._run_here(request, stream, context, routed)
        else:
            digest = params_digest(params)
            self._expire()
            call_id = secrets.token_urlsafe(12)
            parked = ParkedCall(f"{self._id_prefix}.{call_id}" if self._id_prefix else call_id,
                                trio.current_time() + self._signer.ttl,
                                scope=trio.CancelScope())
            parked.call = Call(stream, context, parked, routed=routed)
            try:
                self._spawn(self._run, parked, request)
            except SessionBusy as exc:
                return _error(request, TOO_BUSY, str(exc))
            self._parked[parked.id] = parked
        try:
            await parked.wait()
        except trio.Cancelled:
            self._drop(parked)  # the client closed the stream: the call is cancelled
            raise
        if parked.missing is not None:
            self._drop(parked)
            return _missing(request, parked.missing)
        if parked.reply is not None:
            self._drop(parked)
            if isinstance(parked.reply, Response):
                return Response(request.id, parked.reply.result)
            return ErrorResponse(request.id, parked.reply.error)
        state = self._signer.sign(parked.id, self._identity, request.method, digest)
        return Response(request.id, parked.input_required(state))

    async def _run_here(self, request: Request, stream: EventStream, context: StatelessContext,
                        routed: Routed | None) -> Reply | None:
        """The call of a client that cannot be asked anything, in this task (module)."""
        parked = ParkedCall("", math.inf, in_place=True)
        parked.call = Call(stream, context, parked, routed=routed)
        reply = await self._handle(request, parked.call)
        if parked.missing is not None:
            return _missing(request, parked.missing)
        return reply

    async def _run(self, parked: ParkedCall, request: Request) -> None:
        assert parked.scope is not None  # a parked call has its own
        with parked.scope:
            parked.finish(await self._handle(request, parked.call))

    def _drop(self, parked: ParkedCall) -> None:
        if parked.scope is not None:
            parked.scope.cancel()
        self._parked.pop(parked.id, None)

    def _expire(self) -> None:
        now = trio.current_time()
        for parked in [p for p in self._parked.values() if p.expires < now]:
            self._drop(parked)
        while len(self._parked) >= MAX_WAITING_FOR_CLIENT:
            self._drop(next(iter(self._parked.values())))
