"""``/mcp`` for protocol revision 2026-07-28: stateless requests, on the same endpoint.

A POST whose ``MCP-Protocol-Version`` is not a handshake revision (and that names no session) is
served here. Each request stands alone: it is checked by
:func:`~vmcp_trio.protocol.stateless_requests.check_request`, answered from the caller's context
(its backend links and catalog, :meth:`~.core.Gateway.stateless_context`) by the
:class:`~.responder.Responder`, and its reply is a complete result (``resultType``, and
``ttlMs``/``cacheScope`` on lists and reads, ``serverInfo`` in ``_meta``).

* ``server/discover`` describes the gateway; the handshake-only methods and unknown methods are
  404 with -32601; batches and client responses are refused; a notification is accepted (202)
  and dropped (none is defined for HTTP in this revision).
* ``tools/call``, ``prompts/get`` and ``resources/read`` may return an ``InputRequiredResult``:
  see :mod:`~vmcp_trio.gateway.parked_calls`.
* ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (the Tasks extension) are served when a
  backend offers the extension: see :mod:`~vmcp_trio.gateway.task_ids`.
* ``subscriptions/listen`` answers with a stream that stays open: the acknowledgement first, then
  the notifications its filter asked for, each carrying its ``subscriptionId``.
* Closing a response stream cancels the request, during the JSON window too; there are no
  resumable streams and no priming events.
"""

from __future__ import annotations

from typing import Any

from ..auth.caller import Caller
from ..http.asgi import HttpRequest, Send, send_empty, send_json
from ..protocol.jsonrpc import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
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
from ..protocol.revisions import REVISIONS, STATELESS
from ..protocol.stateless_requests import (
    HEADER_MISMATCH,
    MISSING_CLIENT_CAPABILITY,
    REMOVED_METHODS,
    SUBSCRIPTION_ID,
    UNSUPPORTED_VERSION,
    StatelessContext,
    check_param_headers,
    check_request,
)
from ..protocol.streamable import Rejection
from ..protocol.tasks_extension import (
    TASK_METHODS,
    TASKS_EXTENSION,
    WATCH_FILTER,
    declares_tasks,
    required_capability_data,
)
from ..protocol.translation import complete_result
from ..runtime import tracing
from ..runtime.logs import note
from .calls import SessionBusy, SessionClosed
from .core import SHUTTING_DOWN, Gateway, server_capabilities
from .responder import Responder
from .session import ClientSession
from .skills import SKILL_METHODS
from .streams import EventStream

__all__ = ["StatelessFront"]

SUPPORTED = (STATELESS.version,)
ALL_VERSIONS = [r.version for r in REVISIONS]
SERVED = frozenset({"server/discover", "subscriptions/listen", "tools/list", "tools/call",
                    "prompts/list", "prompts/get", "resources/list", "resources/templates/list",
                    "resources/read", "completion/complete", *TASK_METHODS, *SKILL_METHODS})
MULTI_ROUND = frozenset({"tools/call", "prompts/get", "resources/read"})
MAX_FILTER_ITEMS = 100
"""Resources or tasks one listen stream may watch."""
_FILTERS = {"toolsListChanged": "notifications/tools/list_changed",
            "promptsListChanged": "notifications/prompts/list_changed",
            "resourcesListChanged": "notifications/resources/list_changed"}
_ERROR_STATUS = {METHOD_NOT_FOUND: 404, MISSING_CLIENT_CAPABILITY: 400, HEADER_MISMATCH: 400,
                 UNSUPPORTED_VERSION: 400}


def _strings(listed: object) -> list[str]:
    """The strings of a filter's list (at most :data:`MAX_FILTER_ITEMS`)."""
    if not isinstance(listed, list):
        return []
    return [item for item in listed if isinstance(item, str)][:MAX_FILTER_ITEMS]


def _status(reply: Message | None) -> int:
    if isinstance(reply, ErrorResponse):
        return _ERROR_STATUS.get(reply.error.code, 200)
    return 200


class StatelessFront:
    def __init__(self, gateway: Gateway, responder: Responder) -> None:
        self.gateway = gateway
        self.responder = responder

    def _complete(self, method: str, reply: Response | ErrorResponse) -> Response | ErrorResponse:
        """A handshake backend's result made a complete 2026-07-28 result."""
        if isinstance(reply, ErrorResponse):
            return reply
        return Response(reply.id, complete_result(method, reply.result,
                                                  self.gateway.server_info))

    async def post(self, http: HttpRequest, send: Send, caller: Caller,
                   messages: list[Message | JsonRpcError], batch: bool) -> None:
        if batch:
            await send_json(send, 400, encode(ErrorResponse(None, ErrorObject(
                INVALID_REQUEST, "JSON-RPC batches are not allowed in protocol revision "
                                 "2026-07-28"))))
            return
        message = messages[0]
        if isinstance(message, JsonRpcError):
            await send_json(send, 400, encode(message.response()))
            return
        if isinstance(message, Notification):
            await send_empty(send, 202)
            return
        if not isinstance(message, Request):
            await send_json(send, 400, encode(ErrorResponse(message.id, ErrorObject(
                INVALID_REQUEST, "clients send no responses in protocol revision 2026-07-28"))))
            return
        request = message
        if request.method in REMOVED_METHODS or request.method not in SERVED:
            await send_json(send, 404, encode(ErrorResponse(request.id, ErrorObject(
                METHOD_NOT_FOUND, f"Method not found: {request.method[:100]}"))))
            return
        name = (request.params or {}).get("name")
        note(rpc=request.method[:100], tool=name[:100] if isinstance(name, str) else None)
        checked = check_request(request, http.headers, SUPPORTED)
        if isinstance(checked, Rejection):
            await send_json(send, checked.status, checked.body(request.id))
            return
        if self.gateway.refusing and request.method == "subscriptions/listen":
            # A stream that would be cut at the end of the drain: open it elsewhere. (Other
            # requests are served: each is short, and its client may be in the middle of a
            # call that needs it.)
            await send_json(send, 503, encode_error(TOO_BUSY, SHUTTING_DOWN, request.id),
                            [("retry-after", "5")])
            return
        session = await self.gateway.stateless_context(caller)
        session.touch()
        if request.method == "tools/call":
            rejection = await self._check_param_headers(session, request, http.headers)
            if rejection is not None:
                await send_json(send, rejection.status, rejection.body(request.id))
                return
        refusal = await session.refuse(request)
        if refusal is not None:
            await send_json(send, refusal.status, encode(refusal.reply), list(refusal.headers))
            return
        if request.method == "server/discover":
            await send_json(send, 200, encode(self._complete(request.method, Response(
                request.id, self._discover(session)))))
        elif request.method == "subscriptions/listen":
            await self.listen(http, send, session, request, checked)
        else:
            await self.answer(http, send, session, request, checked)

    async def _check_param_headers(self, session: ClientSession, request: Request,
                                   headers: dict[str, str]) -> Rejection | None:
        params = request.params or {}
        catalog = await session.catalog.get()
        tool = catalog.tool(params.get("name"))
        if tool is None:
            return None  # the call itself answers "Unknown tool"
        return check_param_headers(tool.get("inputSchema"), params.get("arguments"), headers)

    def _discover(self, session: ClientSession) -> dict[str, Any]:
        result: dict[str, Any] = {"supportedVersions": ALL_VERSIONS,
                                  "capabilities": server_capabilities(session)}
        instructions = session.links.instructions()
        if instructions:
            result["instructions"] = instructions
        return result

    async def answer(self, http: HttpRequest, send: Send, session: ClientSession,
                     request: Request, context: StatelessContext) -> None:
        async def compute(stream: EventStream) -> Response | ErrorResponse | None:
            if request.method in MULTI_ROUND:
                reply = await session.handle_stateless(request, stream, context)
            else:
                reply = await session.handle(request, stream, stateless=context)
            return None if reply is None else self._complete(request.method, reply)

        try:
            with tracing.incoming(http.headers):
                await self.responder.answer(http, send, session, request.id, compute,
                                            headers=[], cancel_on_close=True, status=_status)
        except SessionClosed:
            await send_json(send, 503, encode_error(
                INVALID_REQUEST, "the gateway is shutting down", request.id),
                [("retry-after", "5")])
        except SessionBusy as exc:
            await send_json(send, 429, encode_error(TOO_BUSY, str(exc), request.id),
                            [("retry-after", "1")])

    async def listen(self, http: HttpRequest, send: Send, session: ClientSession,
                     request: Request, context: StatelessContext) -> None:
        wanted = (request.params or {}).get("notifications")
        wanted = wanted if isinstance(wanted, dict) else {}
        watched = _strings(wanted.get(WATCH_FILTER))
        if watched and not declares_tasks(context.client_capabilities):
            await send_json(send, 400, encode(ErrorResponse(request.id, ErrorObject(
                MISSING_CLIENT_CAPABILITY, f"notifications.{WATCH_FILTER} needs the "
                f"{TASKS_EXTENSION} extension, which the client did not declare",
                required_capability_data()))))
            return
        honored: dict[str, Any] = {key: True for key in _FILTERS if wanted.get(key) is True}
        stream = session.streams.open()
        try:
            async with session.subscriptions.listen(
                    request.id, stream, frozenset(_FILTERS[k] for k in honored),
                    _strings(wanted.get("resourceSubscriptions")), watched) as granted:
                if granted.uris:
                    honored["resourceSubscriptions"] = list(granted.uris)
                if granted.task_ids:
                    honored[WATCH_FILTER] = list(granted.task_ids)
                stream.push(encode(Notification("notifications/subscriptions/acknowledged", {
                    "_meta": {SUBSCRIPTION_ID: request.id}, "notifications": honored})))
                await self.responder.pump(http, send, session, stream, -1, [])
        finally:
            stream.finish()
