"""2026-07-28 retries that reach a replica other than the one holding their parked call.

A multi-round-trip call on a handshake backend is parked where it began (:mod:`.parked_calls`); with
shared sessions its id, sealed in the ``requestState``, starts with that replica's id. A retry
the balancer sends elsewhere is passed to that replica (fleet message ``parked-retry``), which
continues the call in the caller's context there (its hidden session for that identity) and
sends back, in order, the messages of the call (``parked-event``) and its reply
(``parked-reply``); the replica that got the retry answers its client with them, as if the call
were its own. The retry is checked again where the call is parked (the same keys: the fleet's).

Rules it keeps: no token travels (the parked call goes on with the credentials it began with);
one retry waits at most ``timeout`` seconds for the reply, then its client gets an error; a
holding replica that is gone (no heartbeat) is an error at once, telling the client to start
the call again (its parked call died with it); at most ``max_waiting`` retries wait at once.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

import orjson
import trio

from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    TOO_BUSY,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Request,
    Response,
    decode_message,
)
from ..protocol.stateless_requests import StatelessContext
from ..runtime.shared_storage import StorageUnavailable
from .fleet import Fleet
from .streams import EventStream

__all__ = ["ParkedRelay"]

log = logging.getLogger("vmcp.sessions")

Reply = Response | ErrorResponse
Continue = Callable[[tuple[str, str], Request, StatelessContext, EventStream],
                    Awaitable[Reply | None]]
"""Continue a parked call here: the identity whose call it is, the retry, its context, the
stream its messages go on; the reply (None: no such call here)."""


class _Forward:
    """A call's messages, passed in order to the replica that got the retry."""

    def __init__(self, send: trio.MemorySendChannel[bytes]) -> None:
        self.send = send

    def event(self, seq: int, payload: bytes, retry: int | None) -> None:
        if payload:
            try:
                self.send.send_nowait(payload)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                log.info("a parked call's message was not passed on (too many waiting)")

    def position(self, backend: str, request_id: object, event_id: str) -> None:
        """Not used: the call stays where it is parked."""

    def finished(self) -> None:
        self.send.close()


class ParkedRelay:
    def __init__(self, fleet: Fleet, *, timeout: float = 300.0, max_waiting: int = 1024) -> None:
        self.fleet = fleet
        self.timeout = timeout
        self.max_waiting = max_waiting
        self.continue_here: Continue | None = None
        """Set by the gateway: how a retry sent here is continued."""
        self._waiting: dict[str, trio.MemorySendChannel[tuple[str, Any]]] = {}
        self._nursery: trio.Nursery | None = None
        fleet.on("parked-retry", self._heard_retry)
        fleet.on("parked-event", self._heard_back)
        fleet.on("parked-reply", self._heard_back)

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def holder(self, call_id: str) -> str | None:
        """The replica a parked call's id names, when it is not this one."""
        replica, dot, _ = call_id.partition(".")
        return replica if dot and replica != self.fleet.replica else None

    # --- the replica that got the retry ---------------------------------------------------------

    async def retry(self, replica: str, identity: tuple[str, str], request: Request,
                    context: StatelessContext, stream: EventStream) -> Reply:
        """Pass the retry to ``replica`` and answer with what it sends back."""
        if len(self._waiting) >= self.max_waiting:
            return _error(request, TOO_BUSY, "too many retries wait for other replicas; "
                          "try again")
        try:
            if not await self.fleet.alive(replica):
                return _error(request, INVALID_PARAMS, "params.requestState names a call whose "
                              "replica is gone; call again without requestState")
            correlation = secrets.token_hex(8)
            send, receive = trio.open_memory_channel[tuple[str, Any]](256)
            self._waiting[correlation] = send
            try:
                await self.fleet.tell(replica, "parked-retry", correlation=correlation,
                                      identity=list(identity), request=request.to_dict(),
                                      context=asdict(context))
                with trio.move_on_after(self.timeout):
                    async for kind, value in receive:
                        if kind == "event":
                            stream.push(str(value).encode())
                        else:
                            return _reply(request, value)
            finally:
                del self._waiting[correlation]
        except (StorageUnavailable, ValueError) as exc:
            log.warning("a retry for replica %s could not be passed on: %s", replica, exc)
            return _error(request, INTERNAL_ERROR, "the replica holding this call could not be "
                          "reached; try again")
        return _error(request, INTERNAL_ERROR, f"the replica holding this call did not answer "
                      f"within {self.timeout:g}s")

    def _heard_back(self, message: dict[str, Any]) -> None:
        waiting = self._waiting.get(str(message.get("correlation")))
        if waiting is None:
            return
        kind = "event" if message.get("kind") == "parked-event" else "reply"
        try:
            waiting.send_nowait((kind, message.get("payload")))
        except (trio.WouldBlock, trio.BrokenResourceError):
            log.info("a parked call's message for a waiting retry was dropped")

    # --- the replica holding the call -----------------------------------------------------------

    def _heard_retry(self, message: dict[str, Any]) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(self._continue, message)

    async def _continue(self, message: dict[str, Any]) -> None:
        back = str(message.get("from"))
        correlation = str(message.get("correlation"))
        try:
            identity = tuple(message["identity"])
            request = decode_message(orjson.dumps(message["request"]))
            context = StatelessContext(**message["context"])
            if len(identity) != 2 or not isinstance(request, Request):
                raise ValueError("not a retry")
        except (KeyError, TypeError, ValueError, JsonRpcError):
            log.warning("a retry passed on by replica %s does not decode", back)
            return
        stream = EventStream("parked")
        send, receive = trio.open_memory_channel[bytes](256)
        stream.mirror_to(_Forward(send))
        reply: Reply | None = None
        async with trio.open_nursery() as nursery:

            async def forward_events() -> None:
                async for payload in receive:
                    await self._send(back, "parked-event", correlation, payload.decode())

            nursery.start_soon(forward_events)
            try:
                if self.continue_here is not None:
                    reply = await self.continue_here((identity[0], identity[1]), request,
                                                     context, stream)
            finally:
                stream.finish()
        if reply is None:
            reply = _error(request, INVALID_PARAMS, "params.requestState names no call parked "
                           "here any more; call again without requestState")
        await self._send(back, "parked-reply", correlation, reply.to_dict())

    async def _send(self, replica: str, kind: str, correlation: str, payload: object) -> None:
        try:
            await self.fleet.tell(replica, kind, correlation=correlation, payload=payload)
        except (StorageUnavailable, ValueError) as exc:
            log.warning("a parked call's %s for replica %s was lost: %s", kind, replica, exc)


def _error(request: Request, code: int, text: str) -> ErrorResponse:
    return ErrorResponse(request.id, ErrorObject(code, text))


def _reply(request: Request, value: object) -> Reply:
    """The reply sent back, under the retry's own id."""
    try:
        message = decode_message(orjson.dumps(value))
    except JsonRpcError:
        message = None
    if isinstance(message, Response):
        return Response(request.id, message.result)
    if isinstance(message, ErrorResponse):
        return ErrorResponse(request.id, message.error)
    return _error(request, INTERNAL_ERROR, "the replica holding this call answered nonsense")
