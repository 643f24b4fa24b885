"""``/mcp`` for the handshake revisions (2025-03-26, 2025-06-18, 2025-11-25): sessions.

* POST ``initialize`` (alone) creates a session; its id comes back in ``Mcp-Session-Id``. Every
  other request needs that header: missing -> 400, unknown, ended or another identity's -> 404.
  ``MCP-Protocol-Version``, when sent, must name a handshake revision (else 400); a GET must
  accept an event stream (else 406). (These are :mod:`vmcp_trio.protocol.streamable`'s checks.)
  Batches are accepted only in 2025-03-26.
* Notifications and responses -> 202; 503 with ``Retry-After`` when a client's answer for a
  request another replica relayed could not be handed to it (the client sends it again; of a
  batch, the answers and notifications before it were taken, no request was run). A request is
  answered by the :class:`~.responder.Responder`: JSON when quick, else SSE. The work belongs
  to the session, not the connection: a client that disconnects can resume the stream by GET
  with ``Last-Event-ID``.
* GET opens the session's standalone stream (or resumes a stream: this replica's, or with shared
  sessions one another replica logged); DELETE ends the session.

What comes before (Origin and Host checks, authentication, the body's size and JSON-RPC
syntax) is done by :class:`~.server.GatewayApp`.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import trio

from ..auth.caller import Caller
from ..http.asgi import HttpRequest, Send, send_empty, send_json
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    TOO_BUSY,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Message,
    Notification,
    Request,
    Response,
    encode,
    encode_error,
)
from ..protocol.revisions import negotiate
from ..protocol.streamable import SESSION_NOT_FOUND, SESSION_REQUIRED, check_get, check_version
from ..runtime import tracing
from ..runtime.logs import note
from .calls import SessionBusy, SessionClosed
from .core import SHUTTING_DOWN, Gateway, TooManySessions, server_capabilities
from .responder import Responder
from .session import ClientSession
from .session_peer import NotPassedOn
from .streams import EventStream, parse_event_id

__all__ = ["HandshakeFront"]

log = logging.getLogger("vmcp.http")


def _method_of(message: Message | JsonRpcError) -> str | None:
    return message.method[:100] if isinstance(message, Request | Notification) else None


def _named(request: Request) -> str | None:
    """The tool or prompt a request names (for the access record)."""
    name = (request.params or {}).get("name")
    return name[:100] if isinstance(name, str) else None


def _session_headers(session: ClientSession) -> list[tuple[str, str]]:
    return [("mcp-session-id", session.id)]


class HandshakeFront:
    def __init__(self, gateway: Gateway, responder: Responder) -> None:
        self.gateway = gateway
        self.responder = responder

    async def _session(self, request: HttpRequest, send: Send,
                       caller: Caller) -> ClientSession | None:
        session_id = request.header("mcp-session-id")
        if session_id is None:
            await send_json(send, SESSION_REQUIRED.status, SESSION_REQUIRED.body())
            return None
        try:
            session = await self.gateway.find_session(session_id, caller)
        except TooManySessions as exc:
            await send_json(send, exc.status, encode_error(TOO_BUSY, str(exc)),
                            [("retry-after", "5")])
            return None
        rejection = (SESSION_NOT_FOUND if session is None
                     else check_version(request.header("mcp-protocol-version")))
        if rejection is not None:
            await send_json(send, rejection.status, rejection.body())
            return None
        assert session is not None
        session.touch()
        return session

    async def post(self, http: HttpRequest, send: Send, caller: Caller,
                   messages: list[Message | JsonRpcError], batch: bool) -> None:
        first = messages[0]
        if isinstance(first, Request) and first.method == "initialize":
            if batch:
                await send_json(send, 400, encode_error(
                    INVALID_REQUEST, "initialize must be sent alone, not in a batch"))
                return
            await self.initialize(first, send, caller)
            return
        session = await self._session(http, send, caller)
        if session is None:
            return
        note(session=session.id[:8], rpc="batch" if batch else _method_of(first))
        if batch and not session.revision.allows_batches:
            await send_json(send, 400, encode_error(
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
                try:
                    await session.receive(message)
                except NotPassedOn as exc:
                    await send_json(send, 503, encode_error(TOO_BUSY, str(exc)),
                                    [*_session_headers(session), ("retry-after", "1")])
                    return
        if not requests and not errors:
            await send_empty(send, 202)
            return
        if not batch and errors:
            await send_json(send, 400, encode(errors[0]), _session_headers(session))
            return
        if not batch:
            await self.answer(http, send, session, requests[0])
            return
        replies: list[Message] = [*errors]
        with tracing.incoming(http.headers):
            async with trio.open_nursery() as nursery:
                for item in requests:
                    nursery.start_soon(self._batch_member, session, item, replies)
        await send_json(send, 200, orjson.dumps([m.to_dict() for m in replies]),
                        _session_headers(session))

    async def _batch_member(self, session: ClientSession, request: Request,
                            replies: list[Message]) -> None:
        refusal = await session.refuse(request)
        if refusal is not None:
            replies.append(refusal.reply)
            return
        stream = session.streams.open()
        workload = session.services.workload
        workload.enter()
        try:
            reply = await session.handle(request, stream)
            if reply is not None:
                replies.append(reply)
        finally:
            stream.finish()
            workload.leave()

    async def initialize(self, request: Request, send: Send, caller: Caller) -> None:
        if self.gateway.refusing:
            await send_json(send, 503, encode_error(TOO_BUSY, SHUTTING_DOWN, request.id),
                            [("retry-after", "5")])
            return
        params = request.params or {}
        negotiated = negotiate(params.get("protocolVersion"))
        capabilities = params.get("capabilities")
        client_info = params.get("clientInfo")
        try:
            session = await self.gateway.create_session(
                negotiated, capabilities if isinstance(capabilities, dict) else {},
                client_info if isinstance(client_info, dict) else {}, caller)
        except TooManySessions as exc:
            await send_json(send, exc.status, encode_error(TOO_BUSY, str(exc), request.id),
                            [("retry-after", "5")])
            return
        failing = {name: detail for name, detail in session.links.failed.items()
                   if name not in session.links.left_out}
        if failing and self.gateway.plan.operational.partial_failure_mode == "fail":
            await self.gateway.end_session(session)
            failed = "; ".join(f"{name} {detail}" for name, detail in sorted(failing.items()))
            await send_json(send, 200, encode(ErrorResponse(request.id, ErrorObject(
                INTERNAL_ERROR, f"backends unavailable (partialFailureMode: fail): {failed}",
                {"backends": sorted(failing)}))))
            return
        result: dict[str, Any] = {
            "protocolVersion": negotiated.version,
            "capabilities": server_capabilities(session),
            "serverInfo": self.gateway.server_info,
        }
        instructions = session.links.instructions()
        if instructions:
            result["instructions"] = instructions
        note(session=session.id[:8], rpc="initialize")
        session.audit(request, Response(request.id, result))
        log.info("session %s initialized (protocol %s, %d backends%s)", session.id[:8],
                 negotiated, len(session.links),
                 f", unavailable: {', '.join(session.links.failed)}"
                 if session.links.failed else "")
        await send_json(send, 200, encode(Response(request.id, result)),
                        _session_headers(session))

    async def answer(self, http: HttpRequest, send: Send, session: ClientSession,
                     request: Request) -> None:
        note(tool=_named(request))
        refusal = await session.refuse(request)
        if refusal is not None:
            await send_json(send, refusal.status, encode(refusal.reply),
                            [*_session_headers(session), *refusal.headers])
            return

        async def compute(stream: EventStream) -> Response | ErrorResponse | None:
            return await session.handle(request, stream)

        try:
            with tracing.incoming(http.headers):
                await self.responder.answer(http, send, session, request.id, compute,
                                            headers=_session_headers(session))
        except SessionClosed:
            await send_json(send, SESSION_NOT_FOUND.status, SESSION_NOT_FOUND.body())
        except SessionBusy as exc:
            await send_json(send, 429, encode_error(TOO_BUSY, str(exc), request.id),
                            [*_session_headers(session), ("retry-after", "1")])

    async def get(self, request: HttpRequest, send: Send, caller: Caller) -> None:
        rejection = check_get(request.header("accept"))
        if rejection is not None:
            await send_json(send, rejection.status, rejection.body())
            return
        session = await self._session(request, send, caller)
        if session is None:
            return
        note(session=session.id[:8])
        stream, after = session.streams.standalone, session.streams.standalone.delivered
        last_event_id = request.header("last-event-id")
        parsed = parse_event_id(last_event_id) if last_event_id is not None else None
        if parsed is not None:
            resumed = (session.streams.get(parsed[0])
                       or await self.gateway.continue_logged(session, *parsed))
            if resumed is not None:
                stream, after = resumed, parsed[1]
        await self.responder.pump(request, send, session, stream, after,
                                  _session_headers(session))

    async def delete(self, request: HttpRequest, send: Send, caller: Caller) -> None:
        session = await self._session(request, send, caller)
        if session is None:
            return
        await self.gateway.end_session(session)
        await send_empty(send, 204)
