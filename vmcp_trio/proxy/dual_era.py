"""``vmcp proxy stdio --protocol auto``: a stdio client of a handshake revision (2025-11-25 and
earlier) reaching a remote that speaks only 2026-07-28, which has no ``initialize``, no
session and no server-to-client requests.

:class:`DualEraBridge` is the client's session, kept by the proxy; what it translates is
:mod:`vmcp_trio.protocol.stateless_client`'s and :mod:`vmcp_trio.protocol.translation`'s. The
rules it keeps:

* **One probe.** The client's ``initialize`` costs one ``server/discover`` (with the client's
  capabilities and info in the ``_meta`` envelope). A remote that answers as a 2026-07-28 server
  gets no ``initialize``: the proxy answers the client itself (the revision it asked for, the
  remote's capabilities, info and instructions). Any other answer (an HTTP 4xx, a JSON-RPC
  error, a result without 2026-07-28) means a handshake server, and the ``initialize`` goes
  out unchanged as without ``--protocol auto``.
* **Every request in the 2026 envelope.** Each later request carries ``_meta`` with the protocol
  version, the client's capabilities and info and the log level, and its ``Mcp-Method``,
  ``Mcp-Name`` and ``Mcp-Param-*`` headers (the last from the tool schemas of the remote's
  ``tools/list`` answers). Results lose the fields a handshake client does not know
  (``resultType``, ``ttlMs``, ``cacheScope``); progress and log notifications on a call's
  stream are passed on as they come; errors as they came.
* **Input requests become server-to-client requests.** An ``input_required`` result's requests
  (sampling, elicitation, roots) go to the client as ordinary requests (ids
  ``vmcp-proxy-input-<n>``, all of a round at once), and the call is sent again with the
  answers and the remote's ``requestState`` echoed unchanged; at most ten rounds. One the
  client cannot be asked (a method with no handshake request, a capability it did not declare,
  URL-mode elicitation without ``elicitation.url``), an error answer of the client, or an
  eleventh round: the call is answered with an error naming it (-32603), never dropped. At
  most :data:`MAX_WAITING` questions wait for the client at once.
* **What the remote retired is kept here.** ``ping`` is a ``server/discover`` (the remote
  answers, or the client hears why not); ``logging/setLevel`` is remembered and sent as the
  ``_meta`` log level (``debug`` until the client sets one, as a handshake server sends
  everything before it is asked for less); ``resources/subscribe``/``unsubscribe`` change the
  filter of one ``subscriptions/listen`` stream, reopened with the new filter, the answer
  waiting for the remote's acknowledgement (an error when it did not honour the URI; at most
  :data:`MAX_SUBSCRIPTIONS`); ``notifications/initialized`` and
  ``notifications/roots/list_changed`` have no 2026 meaning and are dropped;
  ``notifications/cancelled`` closes the cancelled call's response stream (how 2026-07-28
  cancels) and withdraws its questions to the client.
* **The listen stream** (:class:`~vmcp_trio.http.listen_stream.ListenStream`, as the
  gateway's) asks for the list changes the remote declares and the subscribed URIs; what it
  delivers reaches the client without the stream's subscription id. It is a supervised task
  (:data:`~vmcp_trio.runtime.supervisor.RECONNECT`), reopened when it ends.
* A batch (2025-03-26) is taken whole at once; its answers go in one array, once all its
  requests are answered (none for a batch of notifications and answers).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from ..http.client import HttpClient, HttpError
from ..http.listen_stream import ListenStream
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    JsonRpcError,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
    parse_message,
)
from ..protocol.revisions import STATELESS
from ..protocol.sse import SSEError, SSEParser
from ..protocol.stateless_client import (
    Discovered,
    InputRounds,
    ToolSchemas,
    discovered,
    initialize_result,
    unaskable,
)
from ..protocol.stateless_requests import metadata_headers
from ..protocol.streamable import PostAnswer, Sent, media_type, post_answer, post_headers
from ..protocol.translation import meta_for_stateless, result_for_handshake
from .credentials import LoginPending, RemoteCredential, posted
from .refusals import refusal
from .tool_filter import ToolFilter

__all__ = ["MAX_SUBSCRIPTIONS", "MAX_WAITING", "DualEraBridge", "RemoteFailed"]

log = logging.getLogger("vmcp.proxy")

MAX_WAITING = 256
"""Questions to the client waiting for its answer at once."""
MAX_SUBSCRIPTIONS = 1000
"""Resource URIs the listen stream asks for."""
_DROPPED = frozenset({"notifications/initialized", "notifications/roots/list_changed"})


class RemoteFailed(Exception):
    """The remote answered in a way that is no answer (an HTTP failure, a broken stream)."""


@dataclass
class _Question:
    """An input request put to the client, waiting for its answer."""

    reply: Response | ErrorResponse | None = None
    done: trio.Event = field(default_factory=trio.Event)


Write = Callable[[bytes], Awaitable[None]]


class DualEraBridge:
    def __init__(self, target: str, client: HttpClient, write: Write, *,
                 credentials: Sequence[RemoteCredential] = (),
                 injected: Sequence[tuple[str, str]] = (), tools: ToolFilter | None = None,
                 max_body: int = 4 * 1024 * 1024, acknowledgement_wait: float = 30.0) -> None:
        self.target = target
        self.client = client
        self.write = write
        self.credentials = credentials
        self.injected = injected
        self.tools = tools if tools is not None else ToolFilter(())
        self.max_body = max_body
        self.acknowledgement_wait = acknowledgement_wait
        self.server: Discovered | None = None
        """The remote, once it answered ``server/discover`` as a 2026-07-28 server."""
        self._capabilities: dict[str, Any] = {}
        self._client_info: dict[str, Any] = {}
        self._log_level = "debug"
        self._schemas = ToolSchemas()
        self._ids = itertools.count(1)
        self._calls: dict[RequestId, trio.CancelScope] = {}
        self._questions: dict[RequestId, _Question] = {}
        self._waiting = 0
        """Questions asked or about to be (at most :data:`MAX_WAITING`)."""
        self.listen: ListenStream | None = None
        """The one ``subscriptions/listen`` stream, for the supervisor (once ``server`` is
        known)."""

    # --- the handshake ------------------------------------------------------------------------

    async def discover(self, initialize: Request) -> bool:
        """Probe the remote with ``server/discover`` for the client's ``initialize``: True
        when it speaks 2026-07-28 (the client has its answer); False when it is a handshake
        server, or one whose answer is no answer at all (the ``initialize`` is the caller's to
        send). Raises HttpError or LoginPending when the remote cannot be asked."""
        self._learn_client(initialize.params or {})
        try:
            reply = await self._exchange(initialize.id, "server/discover", {}, probing=True)
        except RemoteFailed as exc:
            log.info("the remote %s answered server/discover with no answer (%s): the "
                     "handshake goes out as it is", self.target, exc)
            return False
        server = discovered(reply.result) if isinstance(reply, Response) else None
        if server is None:
            return False
        self.server = server
        self.listen = ListenStream(self._listen_once, self._deliver, server.capabilities,
                                   name="the remote", wait=self.acknowledgement_wait)
        await self.write(self._initialize_answer(initialize))
        return True

    def _learn_client(self, params: dict[str, Any]) -> None:
        capabilities, info = params.get("capabilities"), params.get("clientInfo")
        self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        self._client_info = info if isinstance(info, dict) else {}

    def _initialize_answer(self, initialize: Request) -> bytes:
        assert self.server is not None
        return encode(Response(initialize.id, initialize_result(
            self.server, (initialize.params or {}).get("protocolVersion"))))

    # --- the client's messages ----------------------------------------------------------------

    async def forward(self, message: object) -> None:
        """One message of the client, or a batch (2025-03-26) of them, taken at once and
        answered in one array once all its requests are."""
        if not isinstance(message, list):
            answer = await self._take(message)
            if answer is not None:
                await self.write(answer)
            return
        answers: list[bytes] = []

        async def take(item: object) -> None:
            answer = self.tools.refusal(item) or await self._take(item)
            if answer is not None:
                answers.append(answer)

        async with trio.open_nursery() as nursery:
            for item in message:
                nursery.start_soon(take, item)
        if answers:
            await self.write(b"[" + b",".join(answers) + b"]")

    async def _take(self, message: object) -> bytes | None:
        """One message of the client: its answer (None: it has none, or it was cancelled)."""
        try:
            parsed = parse_message(message)
        except JsonRpcError as exc:
            if isinstance(message, dict) and "method" in message and "id" in message:
                return encode(exc.response())
            return None
        if isinstance(parsed, Response | ErrorResponse):
            self._answered(parsed)
        elif isinstance(parsed, Notification):
            self._notified(parsed)
        else:
            return await self._request(parsed)
        return None

    def _answered(self, message: Response | ErrorResponse) -> None:
        question = self._questions.get(message.id) if message.id is not None else None
        if question is None or question.reply is not None:
            log.info("the client answered request %r, which nothing waits for", message.id)
            return
        question.reply = message
        question.done.set()

    def _notified(self, message: Notification) -> None:
        if message.method == "notifications/cancelled":
            request_id = (message.params or {}).get("requestId")
            scope = self._calls.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                scope.cancel()
        elif message.method not in _DROPPED:
            log.info("%s from the client has no 2026-07-28 meaning: dropped",
                     message.method[:80])

    async def _request(self, request: Request) -> bytes | None:
        params = request.params or {}
        if request.method == "initialize":  # again: the proxy answers it again
            self._learn_client(params)
            return self._initialize_answer(request)
        if request.method == "logging/setLevel":
            level = params.get("level")
            if isinstance(level, str):
                self._log_level = level
            return encode(Response(request.id, {}))
        answer = None
        with trio.CancelScope() as scope:
            self._calls[request.id] = scope
            try:
                answer = await self._answer(request, params)
            except (HttpError, LoginPending, RemoteFailed) as exc:
                answer = _error(request.id, f"the remote {self.target} failed: {exc}")
            finally:
                self._calls.pop(request.id, None)
        return answer

    async def _answer(self, request: Request, params: dict[str, Any]) -> bytes:
        """The client's answer to ``request``."""
        if request.method == "ping":
            reply = await self._exchange(request.id, "server/discover", {})
            return encode(reply if isinstance(reply, ErrorResponse) else
                          Response(request.id, {}))
        if request.method in ("resources/subscribe", "resources/unsubscribe"):
            return encode(await self._subscription(request, params))
        return await self._call(request, params)

    async def _call(self, request: Request, params: dict[str, Any]) -> bytes:
        rounds = InputRounds(params)
        while True:
            reply = await self._exchange(request.id, request.method, rounds.params)
            if isinstance(reply, ErrorResponse):
                return encode(reply)
            assert reply is not None  # only a probe's answer can be none
            result = reply.result
            self._schemas.learn(request.method, result)
            if not rounds.wanted(result):
                answer = encode(Response(request.id, result_for_handshake(
                    result, request.method)))
                return self.tools.listed(answer) if request.method == "tools/list" else answer
            requests = rounds.requests(result)
            if isinstance(requests, str):
                return _error(request.id, f"the remote {requests}")
            refusal = next((why for why in (unaskable(r, self._capabilities)
                                            for r in requests.values()) if why), None)
            if refusal is not None:
                return _error(request.id, f"the remote needs what the client cannot be "
                                          f"asked: {refusal}")
            answers = await self._ask(requests)
            if isinstance(answers, str):
                return _error(request.id, answers)
            rounds.answered(result, answers)

    async def _ask(self, requests: dict[str, dict[str, Any]]) -> dict[str, Any] | str:
        """Put a round's input requests to the client, all at once: its answers by key, or
        why there are none."""
        if self._waiting + len(requests) > MAX_WAITING:
            return f"more than {MAX_WAITING} questions would wait for the client"
        answers: dict[str, Response | ErrorResponse] = {}
        self._waiting += len(requests)
        try:
            async with trio.open_nursery() as nursery:
                for key, request in requests.items():
                    nursery.start_soon(self._ask_one, key, request, answers)
        finally:
            self._waiting -= len(requests)
        for key, answer in answers.items():
            if isinstance(answer, ErrorResponse):
                return (f"the remote needed {requests[key]['method'][:60]} from the client, "
                        f"which answered: {answer.error.message[:200]}")
        return {key: answer.result for key, answer in answers.items()
                if isinstance(answer, Response)}

    async def _ask_one(self, key: str, request: dict[str, Any],
                       answers: dict[str, Response | ErrorResponse]) -> None:
        question_id = f"vmcp-proxy-input-{next(self._ids)}"
        question = self._questions[question_id] = _Question()
        params = request.get("params")
        try:
            await self.write(encode(Request(question_id, request["method"],
                                            params if isinstance(params, dict) else {})))
            await question.done.wait()
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self.write(encode(Notification("notifications/cancelled", {
                    "requestId": question_id, "reason": "the call ended"})))
            raise
        finally:
            del self._questions[question_id]
        assert question.reply is not None
        answers[key] = question.reply

    # --- one POST -----------------------------------------------------------------------------

    async def _exchange(self, request_id: RequestId, method: str, params: dict[str, Any], *,
                        probing: bool = False,
                        on_message: Callable[[Message], Awaitable[None]] | None = None,
                        ) -> Response | ErrorResponse | None:
        """POST one request in the 2026 envelope: the remote's answer to it (None only when
        ``probing`` and the remote answered as a handshake server does: a 4xx without JSON).
        Other messages of its stream go to ``on_message``, else to the client."""
        capabilities = self.server.capabilities if self.server is not None else {}
        meta, _ = meta_for_stateless(params, capabilities=self._capabilities,
                                     client_info=self._client_info, log_level=self._log_level,
                                     backend_capabilities=capabilities)
        sent = {**params, "_meta": meta}
        body = encode(Request(request_id, method, sent))
        transport = [*post_headers(STATELESS.version),
                     *metadata_headers(method, sent, self._schemas.of(method, params))]
        async with posted(self.client, self.target, transport, body, self.credentials,
                          self.injected) as response:
            media = media_type(response.header("content-type"))
            answer = post_answer(response.status, media,
                                 Sent.DISCOVER if probing else Sent.REQUEST, in_session=False)
            if answer is PostAnswer.HANDSHAKE_ERA:
                return None
            if answer is PostAnswer.JSON:
                return _reply(await response.read(self.max_body), request_id)
            if answer is not PostAnswer.STREAM:
                body = await response.read(self.max_body)
                raise RemoteFailed(f"it {refusal(response.status, media, body)} to {method}")
            parser = SSEParser(self.max_body)
            try:
                async for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        reply = await self._event(event.data, request_id, on_message)
                        if reply is not None:
                            return reply
            except SSEError as exc:
                raise RemoteFailed(f"its event stream broke: {exc}") from None
            raise RemoteFailed(f"it closed the stream of {method} before answering")

    async def _event(self, data: str, request_id: RequestId,
                     on_message: Callable[[Message], Awaitable[None]] | None,
                     ) -> Response | ErrorResponse | None:
        """One event of a call's stream: the call's answer, or None (passed on, or empty)."""
        if not data:
            return None
        try:
            message = parse_message(orjson.loads(data))
        except (orjson.JSONDecodeError, JsonRpcError):
            log.info("the remote sent an event that is no JSON-RPC message: dropped")
            return None
        if isinstance(message, Response | ErrorResponse):
            return message if message.id == request_id else None
        if on_message is not None:
            await on_message(message)
        elif isinstance(message, Notification):  # a 2026 server sends no requests
            await self.write(encode(message))
        return None

    # --- subscriptions: the listen stream ------------------------------------------------------

    async def _subscription(self, request: Request,
                            params: dict[str, Any]) -> Response | ErrorResponse:
        assert self.server is not None and self.listen is not None
        resources = self.server.capabilities.get("resources")
        uri, uris = params.get("uri"), self.listen.uris
        if not isinstance(resources, dict) or not resources.get("subscribe"):
            return ErrorResponse(request.id, ErrorObject(
                METHOD_NOT_FOUND, "the remote offers no resource subscriptions"))
        if not isinstance(uri, str):
            return ErrorResponse(request.id, ErrorObject(INVALID_PARAMS,
                                                         "params.uri must be a string"))
        subscribing = request.method == "resources/subscribe"
        if subscribing and uri not in uris and len(uris) >= MAX_SUBSCRIPTIONS:
            return _error_response(request.id, f"more than {MAX_SUBSCRIPTIONS} subscriptions")
        if subscribing:
            uris.add(uri)
        else:
            uris.discard(uri)
        await self.listen.change()
        if subscribing and uri not in self.listen.honored_uris:
            uris.discard(uri)
            return _error_response(request.id, f"the remote did not accept a subscription to "
                                               f"{uri[:200]}")
        return Response(request.id, {})

    async def _listen_once(self, wanted: dict[str, Any],
                           on_message: Callable[[Message], Awaitable[None]]) -> None:
        """One listen stream asking for ``wanted``, until it ends (see
        :class:`~vmcp_trio.http.listen_stream.ListenStream`)."""
        try:
            await self._exchange(f"vmcp-proxy-listen-{next(self._ids)}", "subscriptions/listen",
                                 {"notifications": wanted}, on_message=on_message)
        except (HttpError, LoginPending, RemoteFailed) as exc:
            log.info("the remote's listen stream: %s", exc)

    async def _deliver(self, notification: Notification) -> None:
        await self.write(encode(notification))


def _error_response(request_id: RequestId, message: str) -> ErrorResponse:
    return ErrorResponse(request_id, ErrorObject(INTERNAL_ERROR, f"vmcp proxy: {message}"))


def _error(request_id: RequestId, message: str) -> bytes:
    return encode(_error_response(request_id, message))


def _reply(body: bytes, request_id: RequestId) -> Response | ErrorResponse:
    """A JSON body's answer to ``request_id`` (raises :class:`RemoteFailed`)."""
    try:
        message = parse_message(orjson.loads(body))
    except (orjson.JSONDecodeError, JsonRpcError):
        raise RemoteFailed("its JSON answer is no JSON-RPC message") from None
    if not isinstance(message, Response | ErrorResponse):
        raise RemoteFailed("its JSON answer is no response")
    if message.id is None:  # an error about the request as a whole
        return ErrorResponse(request_id, message.error) \
            if isinstance(message, ErrorResponse) else message
    return message
