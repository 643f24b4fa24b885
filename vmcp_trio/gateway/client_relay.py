"""What a backend sends a session's client, on the right stream, with requests renamed.

:class:`ClientRelay` takes a backend's message for the client and puts it on a stream. The rules
it keeps:

* A message related to a call goes on that call's response stream; once the call is done (late,
  say after a cancel), on the session's standalone stream (2026-07-28 has none: dropped).
  What goes on the standalone stream is also told to the session's peer (another replica may
  hold the client's GET).
* A backend's requests to the client (``sampling/createMessage``, ``elicitation/create``,
  ``roots/list``) need the capability the client declared (at ``initialize``, or per request in
  2026-07-28): without it the backend hears -32601 at once, or, for a 2026-07-28 call, the
  client hears -32021 (roots/list, often asked on spec, is only refused to the backend).
* A handshake client gets such a request under an id unique in the session (``vmcp-<n>``, or
  ``vmcp-<replica>-<n>`` with shared sessions, so that an answer posted to another replica is
  passed here: the peer raises :class:`~.session_peer.NotPassedOn` there when it cannot be),
  and its answer goes back to the backend that asked under the backend's id, once (a repeated
  answer is ignored). At most :data:`~.calls.MAX_WAITING_FOR_CLIENT` wait at once (past it the
  backend hears -32600).
  A 2026-07-28 call gathers them as its input requests instead (:mod:`.parked_calls`).
* A backend's ``notifications/cancelled`` for a request it sent is renamed to the id the client
  saw (or withdraws the input request); one for a request the client never saw is dropped.
* A log message below the level the client asked for is dropped (2026-07-28: the level in the
  request's ``_meta``, or none asked: none sent).
* The gateway's own questions (a composite tool's elicitation) go the same way
  (:meth:`ClientRelay.ask`) and wait for the client's answer.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Protocol

import trio

from ..protocol.jsonrpc import (
    INVALID_REQUEST,
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
from ..protocol.log_levels import level_wanted
from ..protocol.stateless_client import CLIENT_CAPABILITY
from .backends.base import Answerable, BackendError, BackendLink
from .calls import MAX_WAITING_FOR_CLIENT, Call
from .session_peer import SessionPeer
from .streams import EventStream

__all__ = ["ClientRelay", "QuestionRefused"]

log = logging.getLogger("vmcp.session")

class QuestionRefused(Exception):
    """The gateway's own question cannot be asked, or was answered with an error."""


class _ClientAnswer:
    """The client's answer to a question the gateway itself asked."""

    def __init__(self) -> None:
        self.answered = trio.Event()
        self.reply: Response | ErrorResponse | None = None

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        self.reply = message
        self.answered.set()


def _error(request_id: RequestId | None, code: int, message: str) -> ErrorResponse:
    return ErrorResponse(request_id, ErrorObject(code, message))


class RelayHost(Protocol):
    """What the relay reads of its session, when it needs it (the session itself: three
    closures over it cost ~400 bytes a session)."""

    log_level: str
    peer: SessionPeer | None

    def capabilities_for(self, call: Call) -> dict[str, Any]: ...


class ClientRelay:
    def __init__(self, *, owner: str, relay_prefix: str, stateless: bool,
                 standalone: EventStream, closed: trio.Event, host: RelayHost) -> None:
        self.owner = owner
        self.relay_prefix = relay_prefix
        """Before the ids of the requests this copy relays to the client."""
        self._stateless = stateless
        self._standalone = standalone
        self._closed = closed
        self._host = host
        self._ids = itertools.count(1)
        self._relayed: dict[str, tuple[Answerable, RequestId]] = {}

    def _rename(self, asker: Answerable, backend_id: RequestId) -> str | None:
        """A session-unique id for a request to the client (None: too many wait already)."""
        if len(self._relayed) >= MAX_WAITING_FOR_CLIENT:
            return None
        relay_id = f"{self.relay_prefix}{next(self._ids)}"
        self._relayed[relay_id] = (asker, backend_id)
        return relay_id

    async def relay(self, link: BackendLink | None, message: Message, call: Call) -> None:
        if self._closed.is_set() or isinstance(message, Response | ErrorResponse):
            return  # a backend's answers are to the gateway's calls, never the client's
        stream = call.stream
        if stream.finished:
            if self._stateless:
                return
            stream = self._standalone
        if isinstance(message, Request):
            if link is None:
                return
            renamed = await self._request(link, message, call)
            if renamed is None:
                return
            message = renamed
        elif (isinstance(message, Notification) and message.method == "notifications/cancelled"
              and link is not None):
            renamed_cancel = self._cancelled(link, message, call)
            if renamed_cancel is None:
                return
            message = renamed_cancel
        elif isinstance(message, Notification) and message.method == "notifications/message":
            level = call.stateless.log_level if call.stateless is not None else self._host.log_level
            if not level_wanted((message.params or {}).get("level"), level):
                return
        payload = encode(message)
        stream.push(payload)
        peer = self._host.peer
        if stream is self._standalone and peer is not None and peer.noted is not None:
            peer.noted(payload)

    async def _request(self, link: BackendLink, message: Request, call: Call) -> Request | None:
        """The backend's request as the client gets it (None: answered or gathered here)."""
        needed = CLIENT_CAPABILITY.get(message.method)
        if needed is not None and needed not in self._host.capabilities_for(call):
            if call.parked is not None and needed != "roots":
                call.parked.lacks(needed)  # 2026-07-28: the client hears -32021
                return None
            await link.answer(message.id, _error(
                message.id, METHOD_NOT_FOUND,
                f"the client did not declare the {needed} capability"))
            return None
        if call.parked is not None:
            call.parked.ask(link, message.id, message.method, message.params)
            return None
        relay_id = self._rename(link, message.id)
        if relay_id is None:
            await link.answer(message.id, _error(
                message.id, INVALID_REQUEST, "too many requests are waiting for the client"))
            return None
        return Request(relay_id, message.method, message.params)

    def _cancelled(self, link: BackendLink, message: Notification,
                   call: Call) -> Notification | None:
        """The backend gave up on a request it sent: named by the id the client saw."""
        backend_id = (message.params or {}).get("requestId")
        if call.parked is not None:
            if isinstance(backend_id, str | int):
                call.parked.withdraw(link, backend_id)
            return None
        cancelled = next((rid for rid, (owner, bid) in self._relayed.items()
                          if owner is link and bid == backend_id), None)
        if cancelled is None:
            return None
        del self._relayed[cancelled]
        return Notification(message.method, {**(message.params or {}), "requestId": cancelled})

    async def ask(self, call: Call, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The gateway's own question on the call's stream; the result of the client's answer
        (raises :class:`QuestionRefused`)."""
        needed = CLIENT_CAPABILITY[method]
        if needed not in self._host.capabilities_for(call):
            raise QuestionRefused(f"the client did not declare the {needed} capability")
        asker = _ClientAnswer()
        relay_id = None
        if call.parked is not None:  # 2026-07-28: an input request of the call
            call.parked.ask(asker, 0, method, params)
        else:
            relay_id = self._rename(asker, "")
            if relay_id is None:
                raise QuestionRefused("too many requests are waiting for the client")
            call.stream.push(encode(Request(relay_id, method, params)))
        try:
            await asker.answered.wait()
        finally:
            if relay_id is not None:
                self._relayed.pop(relay_id, None)
        if isinstance(asker.reply, ErrorResponse) or asker.reply is None:
            raise QuestionRefused(f"the client answered {method} with an error")
        return asker.reply.result

    async def answered(self, message: Response | ErrorResponse, *, forwarded: bool) -> None:
        """The client's answer to a request relayed to it: to the backend that asked, under
        its id (an answer to a request another replica relayed is passed there; raises
        :class:`~.session_peer.NotPassedOn` when that replica did not get it)."""
        target = self._relayed.pop(str(message.id), None)
        if target is None:
            relayed_elsewhere = (str(message.id).startswith("vmcp-")
                                 and not str(message.id).startswith(self.relay_prefix))
            peer = self._host.peer
            if relayed_elsewhere and peer is not None and peer.elsewhere is not None \
                    and not forwarded:
                await peer.elsewhere(message)
                return
            log.info("session %s: answer to unknown request %r ignored", self.owner[:8],
                     message.id)
            return
        asker, backend_id = target
        try:
            await asker.answer(backend_id, message)
        except BackendError as exc:
            log.info("session %s: %s", self.owner[:8], exc)
