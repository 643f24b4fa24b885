"""A backend that speaks protocol revision 2026-07-28, as one client session's link.

There is no handshake and no backend session: :meth:`StatelessBackendLink.start` POSTs
``server/discover`` (the answer says whether the backend speaks 2026-07-28 at all, and gives its
capabilities), and every request is a POST that stands alone, carrying what a session used to
hold: the ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*`` headers
(the last from the backend's own tool schemas, learnt from its ``tools/list``), and ``_meta``
with the protocol version, the caller's client capabilities, vmcp's client info and the log
level.

The link translates for callers that speak a handshake revision, so that one client works with
both kinds of backend:

* ``ping`` becomes ``server/discover``; ``logging/setLevel`` is remembered and sent as
  ``_meta`` log level on every later request; ``notifications/cancelled`` and
  ``notifications/roots/list_changed`` have no 2026 meaning (closing a response stream cancels;
  roots are asked per request) and are dropped.
* ``resources/subscribe``/``unsubscribe`` change the filter of the link's one
  ``subscriptions/listen`` stream (:class:`~vmcp_trio.http.listen_stream.ListenStream`:
  reopened with the new filter; the call returns once the backend acknowledged it), as
  :meth:`StatelessBackendLink.watch_tasks` does for the tasks whose status notifications a
  client wants. That stream also asks for the list changes the backend declares; what it
  delivers goes to the session sink, like a GET stream's messages.
* An ``InputRequiredResult`` is answered by the link itself: each input request goes to the
  call's sink as a server-to-client request (so the session relays it to the client, with
  the capability checks of any relay), and the call is retried with the client's answers and
  the backend's ``requestState``, for at most ten rounds (the rules of
  :mod:`vmcp_trio.protocol.stateless_client`).

A caller that speaks 2026-07-28 itself (its params carry the 2026 ``_meta``) gets the backend's
``InputRequiredResult`` unchanged, and its retry's ``inputResponses``/``requestState`` go to
the backend verbatim: the round trip is between the client and the backend.

Cancelling a call (the client's cancel, the link's timeout) closes its response stream, which
is how 2026-07-28 tells a server to stop.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import trio

from ...auth.outgoing.strategies import OutgoingRequest
from ...http.client import HttpClient, HttpError
from ...http.listen_stream import ListenStream
from ...protocol.jsonrpc import (
    METHOD_NOT_FOUND,
    ErrorObject,
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)
from ...protocol.revisions import STATELESS, Revision
from ...protocol.sse import SSEParser
from ...protocol.stateless_client import (
    InputRounds,
    ToolSchemas,
    discovered,
)
from ...protocol.stateless_requests import CLIENT_CAPABILITIES, metadata_headers
from ...protocol.streamable import PostAnswer, Sent, media_type, post_answer, post_headers
from ...protocol.tasks_extension import WATCH_FILTER, declares_tasks, with_tasks_declared
from ...protocol.translation import meta_for_stateless, result_for_handshake
from ...runtime import tracing
from ...runtime.supervisor import Supervisor
from .base import (
    CLIENT_INFO,
    BackendAuthRequired,
    BackendError,
    BackendTimedOut,
    CredentialHook,
    Sink,
)
from .replies import HttpLinkFields, consume_sse, read_json_reply

__all__ = ["StatelessBackendLink"]

log = logging.getLogger("vmcp.backend.stateless")

@dataclass
class _Question:
    """An input request of the backend, waiting for the client's answer."""

    reply: Response | ErrorResponse | None = None
    done: trio.Event = field(default_factory=trio.Event)


class StatelessBackendLink(HttpLinkFields):
    revision: Revision = STATELESS

    def __init__(self, name: str, url: str, client: HttpClient, *,
                 session_sink: Sink, credentials: CredentialHook | None = None,
                 timeout: float = 60.0) -> None:
        super().__init__(name, url, client, session_sink=session_sink,
                         credentials=credentials, timeout=timeout)
        self._client_capabilities: dict[str, Any] = {}
        self._log_level: str | None = "debug"
        """The level a handshake caller set; until it sets one, everything (a handshake server
        sends every log message before ``logging/setLevel``, a 2026-07-28 one none without a
        level)."""
        self._ids = itertools.count(1)
        self._schemas = ToolSchemas()
        self._questions: dict[RequestId, _Question] = {}
        self._listen: ListenStream | None = None
        """The one ``subscriptions/listen`` stream, once started."""

    # --- setup --------------------------------------------------------------------------------

    async def start(self, supervisor: Supervisor, client_capabilities: dict[str, Any], *,
                    listen: bool = True) -> bool:
        """``server/discover``: True when the backend speaks 2026-07-28 (the link is then
        ready, listening unless ``listen`` is false); False when it answered as a server of
        an older revision does (an HTTP 4xx, an error, or a result without 2026-07-28).
        Raises :class:`BackendError` when it is unreachable or failing (5xx)."""
        self._client_capabilities = client_capabilities
        try:
            with trio.fail_after(self.timeout):
                reply = await self._post(next(self._ids), "server/discover",
                                         {"_meta": self._meta({})[0]}, self._ignore,
                                         probing=True)
        except trio.TooSlowError:
            raise BackendError(self.name, f"did not answer server/discover within "
                                          f"{self.timeout:g}s") from None
        server = discovered(reply.result) if isinstance(reply, Response) else None
        if server is None:
            return False
        self.server_capabilities = server.capabilities
        self.server_info = server.server_info
        self.instructions = server.instructions
        if listen:
            self._listen = ListenStream(self._listen_once, self.session_sink,
                                        self.server_capabilities, name=f"backend {self.name}",
                                        wait=self.timeout)
            supervisor.start_soon(f"backend {self.name} listen stream", self._listen.run)
        return True

    @staticmethod
    async def _ignore(message: Message) -> None:
        """What a backend sends while being discovered is nobody's."""

    # --- one POST -------------------------------------------------------------------------------

    def _meta(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The ``_meta`` to send, and whether the caller speaks 2026-07-28 itself (see
        :func:`~vmcp_trio.protocol.translation.meta_for_stateless`)."""
        return meta_for_stateless(params, capabilities=self._client_capabilities,
                                  client_info=CLIENT_INFO, log_level=self._log_level,
                                  backend_capabilities=self.server_capabilities)

    async def _headers(self, method: str, params: dict[str, Any],
                       body: bytes) -> list[tuple[str, str]]:
        transport = [*post_headers(STATELESS.version),
                     *metadata_headers(method, params, self._schemas.of(method, params))]
        headers = [*transport, *await self.credentials.headers(
            OutgoingRequest("POST", self.url, transport, body))]
        tracing.inject_headers(headers)
        return headers

    async def _post(self, request_id: RequestId, method: str, params: dict[str, Any],
                    sink: Sink, *, probing: bool = False) -> Response | ErrorResponse | None:
        """POST one request; its response (None only when ``probing`` and the backend answered
        as a server of the handshake revisions does: a 4xx without JSON)."""
        body = encode(Request(request_id, method, params))
        headers = await self._headers(method, params, body)
        try:
            async with self.client.stream("POST", self.url, headers=headers,
                                          body=body) as response:
                media = media_type(response.header("content-type"))
                answer = post_answer(response.status, media,
                                     Sent.DISCOVER if probing else Sent.REQUEST,
                                     in_session=False)
                if answer is PostAnswer.UNAUTHORIZED:
                    raise BackendAuthRequired(self.name, f"refused the credential (HTTP "
                                                         f"{response.status})")
                if answer is PostAnswer.JSON:
                    return await read_json_reply(self.name, response, self.max_body)
                if answer is PostAnswer.HANDSHAKE_ERA:
                    return None
                if answer is PostAnswer.FAILED:
                    raise BackendError(self.name, f"answered {method} with HTTP "
                                                  f"{response.status}")
                if answer is not PostAnswer.STREAM:
                    raise BackendError(self.name, f"answered with unexpected content type "
                                                  f"{media[:60]!r} (HTTP {response.status})")
                reply = await consume_sse(self.name, response, SSEParser(self.max_event_bytes),
                                          request_id, sink)
        except HttpError as exc:
            raise BackendError(self.name, f"is unreachable: {exc}") from None
        if reply is None:
            raise BackendError(self.name, "closed the response stream before answering")
        return reply

    # --- the link's operations -----------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any] | None,
                   sink: Sink) -> Response | ErrorResponse:
        params = params or {}
        if method == "logging/setLevel":
            level = params.get("level")
            self._log_level = level if isinstance(level, str) else None
            return Response(0, {})
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return await self._subscription(method, str(params.get("uri")))
        try:
            with trio.fail_after(self.timeout):
                if method == "ping":
                    reply = await self._round(method="server/discover", params={}, sink=sink)
                    return reply if isinstance(reply, ErrorResponse) else Response(reply.id, {})
                return await self._call(method, params, sink)
        except trio.TooSlowError:
            raise BackendTimedOut(self.name, f"answer {method}", self.timeout) from None

    async def _round(self, *, method: str, params: dict[str, Any],
                     sink: Sink) -> Response | ErrorResponse:
        meta, _ = self._meta(params)
        reply = await self._post(next(self._ids), method, {**params, "_meta": meta}, sink)
        assert reply is not None
        return reply

    async def _call(self, method: str, params: dict[str, Any],
                    sink: Sink) -> Response | ErrorResponse:
        stateless_caller = self._meta(params)[1]
        rounds = InputRounds(params)
        while True:
            reply = await self._round(method=method, params=rounds.params, sink=sink)
            if isinstance(reply, ErrorResponse):
                return reply
            result = reply.result
            self._schemas.learn(method, result)
            if stateless_caller:
                return reply
            if not rounds.wanted(result):
                return Response(reply.id, result_for_handshake(result, method))
            requests = rounds.requests(result)
            if isinstance(requests, str):
                raise BackendError(self.name, f"{requests} ({method})")
            answers = await self._ask_client(requests, sink)
            if isinstance(answers, ErrorResponse):
                return answers
            rounds.answered(result, answers)

    async def _ask_client(self, requests: dict[str, dict[str, Any]],
                          sink: Sink) -> dict[str, Any] | ErrorResponse:
        """Put the backend's input requests to the client (through ``sink``, all at once) and
        gather its answers by key; the first error the client answered with, if any."""
        answers: dict[str, Response | ErrorResponse] = {}
        async with trio.open_nursery() as nursery:
            for key, request in requests.items():
                nursery.start_soon(self._ask_one, key, request, sink, answers)
        for key, answer in answers.items():
            if isinstance(answer, ErrorResponse):
                method = requests[key]["method"]
                return ErrorResponse(answer.id, ErrorObject(
                    answer.error.code, f"backend {self.name!r} needed {method[:60]} from the "
                    f"client, which answered: {answer.error.message[:200]}",
                    {"backend": self.name}))
        return {key: answer.result for key, answer in answers.items()
                if isinstance(answer, Response)}

    async def _ask_one(self, key: str, request: dict[str, Any], sink: Sink,
                       answers: dict[str, Response | ErrorResponse]) -> None:
        question_id = f"input-{next(self._ids)}"
        question = self._questions[question_id] = _Question()
        params = request.get("params")
        try:
            await sink(Request(question_id, request["method"],
                               params if isinstance(params, dict) else {}))
            await question.done.wait()
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await sink(Notification("notifications/cancelled", {
                    "requestId": question_id, "reason": "the call ended"}))
            raise
        finally:
            del self._questions[question_id]
        assert question.reply is not None
        answers[key] = question.reply

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        """Nothing to send: 2026-07-28 has no client notifications over HTTP (cancelling is
        closing the response stream, and roots are asked per request)."""

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        question = self._questions.get(request_id)
        if question is not None and question.reply is None:
            question.reply = message
            question.done.set()

    # --- the listen stream ------------------------------------------------------------------------

    async def _subscription(self, method: str, uri: str) -> Response | ErrorResponse:
        resources = self.server_capabilities.get("resources")
        listen = self._listen
        if listen is None or not isinstance(resources, dict) or not resources.get("subscribe"):
            return ErrorResponse(0, ErrorObject(METHOD_NOT_FOUND, f"backend {self.name!r} "
                                                "offers no resource subscriptions"))
        if method == "resources/subscribe":
            listen.uris.add(uri)
        else:
            listen.uris.discard(uri)
        await listen.change()
        if method == "resources/subscribe" and uri not in listen.honored_uris:
            return ErrorResponse(0, ErrorObject(METHOD_NOT_FOUND, f"backend {self.name!r} did "
                                                f"not accept a subscription to {uri[:200]}"))
        return Response(0, {})

    async def watch_tasks(self, task_ids: Collection[str], watching: bool) -> frozenset[str]:
        """Add some of the backend's tasks to what the listen stream asks for (``taskIds``, so
        their ``notifications/tasks`` reach the session), or take them out; those of them the
        backend acknowledged watching. Nothing, at once, from a backend without the Tasks
        extension."""
        listen = self._listen
        if listen is None or not declares_tasks(self.server_capabilities):
            return frozenset()
        if watching:
            listen.task_ids.update(task_ids)
        else:
            listen.task_ids.difference_update(task_ids)
        await listen.change()
        return listen.honored_task_ids.intersection(task_ids)

    async def _listen_once(self, wanted: dict[str, Any],
                           on_message: Sink) -> None:
        """One listen stream asking for ``wanted``, until it ends (see
        :class:`~vmcp_trio.http.listen_stream.ListenStream`)."""
        try:
            params: dict[str, Any] = {"notifications": wanted}
            if WATCH_FILTER in wanted:  # only watched for a client that declared the extension
                params["_meta"] = {CLIENT_CAPABILITIES: with_tasks_declared(
                    self._client_capabilities)}
            reply = await self._round(method="subscriptions/listen", params=params,
                                      sink=on_message)
            log.info("backend %s ended its listen stream: %s", self.name,
                     reply.error.message[:200] if isinstance(reply, ErrorResponse) else "done")
        except BackendError as exc:
            log.info("backend %s listen stream: %s", self.name, exc.detail)

    async def aclose(self) -> None:
        """Nothing to end at the backend (no session); stop listening."""
        if self._listen is not None:
            self._listen.close()
