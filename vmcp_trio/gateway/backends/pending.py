"""Requests sent to a backend whose answers arrive out of band, by id (stdio, legacy SSE).

Both transports write a request, then read every message of the backend on one channel and
hand each response to the call waiting for its id. What they share lives here: the table of
calls in flight, reading a message (a malformed answer fails its call), delivering a response,
failing every call when the backend goes away, and
the cancel rule (a call cancelled by the client sends ``notifications/cancelled`` so the backend
can stop, within a bound, and never waits for an answer).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ...protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    decode_message,
)
from .base import BackendError, Sink

__all__ = ["PendingCall", "PendingCalls"]

log = logging.getLogger("vmcp.backend")


@dataclass
class PendingCall:
    owner: str
    """The client session that made the call ("" for the gateway's own calls)."""
    sink: Sink
    """Where the backend's messages related to this call go."""
    progress_token: Any = None
    reply: Response | ErrorResponse | None = None
    done: trio.Event = field(default_factory=trio.Event)


class PendingCalls:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.calls: dict[RequestId, PendingCall] = {}
        self._per_owner: Counter[str] = Counter()

    def decode(self, data: bytes | str) -> Message | None:
        """A message of the backend, or None when it is not a valid one (logged). A malformed
        answer to a call in flight (too deep, a wrong field) fails that call at once, saying
        what was wrong, rather than leave it waiting."""
        try:
            return decode_message(data)
        except JsonRpcError as exc:
            log.warning("backend %s sent something that is not a valid JSON-RPC message: %s",
                        self.backend, exc)
            if exc.answer and exc.id is not None:
                self.deliver(ErrorResponse(exc.id, ErrorObject(
                    INTERNAL_ERROR, f"backend {self.backend!r} sent an invalid answer: {exc}",
                    {"backend": self.backend})))
            return None

    def deliver(self, message: Response | ErrorResponse) -> bool:
        """Hand a response to its call; False when no call waits for that id."""
        call = self.calls.get(message.id) if message.id is not None else None
        if call is None:
            return False
        call.reply = message
        call.done.set()
        return True

    def fail_all(self, reason: str) -> None:
        for request_id, call in self.calls.items():
            call.reply = ErrorResponse(request_id, ErrorObject(
                INTERNAL_ERROR, f"backend {self.backend!r} {reason}", {"backend": self.backend}))
            call.done.set()

    def owners(self) -> set[str]:
        return {call.owner for call in self.calls.values() if call.owner}

    def in_flight(self, owner: str) -> int:
        """Calls of ``owner`` waiting for their answer."""
        return self._per_owner[owner]

    async def exchange(self, request: Request, call: PendingCall,
                       send: Callable[[Message], Awaitable[None]]) -> Response | ErrorResponse:
        """Send ``request`` and wait for its answer."""
        self.calls[request.id] = call
        self._per_owner[call.owner] += 1
        try:
            await send(request)
            await call.done.wait()
        except trio.Cancelled:
            with trio.move_on_after(2) as scope:
                scope.shield = True
                with contextlib.suppress(BackendError):
                    await send(Notification("notifications/cancelled", {
                        "requestId": request.id, "reason": "cancelled by the client"}))
            raise
        finally:
            del self.calls[request.id]
            self._per_owner[call.owner] -= 1
            if not self._per_owner[call.owner]:
                del self._per_owner[call.owner]
        assert call.reply is not None
        return call.reply
