"""Multi-round-trip requests (2026-07-28): a backend's questions to the client, across retries.

In 2026-07-28 a server cannot send requests to the client; a ``tools/call``, ``prompts/get`` or
``resources/read`` whose handler needs something from the client answers with an
``InputRequiredResult`` (``inputRequests`` keyed by the server, an opaque ``requestState``), and
the client calls again with the same params plus ``inputResponses`` and the ``requestState``.

A backend that speaks a handshake revision asks the old way: it sends ``sampling/createMessage``
(or ``elicitation/create``, ``roots/list``) in the middle of the call and waits. The gateway
bridges the two: the backend call keeps running in the session (a :class:`ParkedCall`); its
questions are returned to the client as ``inputRequests``; the client's retry carries the
answers, which go to the backend under its own request ids, and the call waits again for its
reply or its next questions.

``requestState`` is sealed (AES-256-GCM, :mod:`vmcp_trio.auth.sealer`) with the caller's
identity as associated data: it names the parked call, the method, a digest of the params
(without ``_meta``, ``inputResponses`` and ``requestState``) and an expiry, so it cannot be forged,
read, altered, replayed by someone else, moved to other params, or used after it expires. The key
derives from the gateway's fleet secrets (``GatewayPlan.fleet_secrets``: every replica opens what
another sealed, and a restart keeps them) or, without any, is random per process. A parked call
itself lives in one process: a retry must reach the same replica.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from ..auth.sealer import Sealer, SealingError
from ..protocol.jsonrpc import ErrorObject, ErrorResponse, RequestId, Response
from ..protocol.translation import ROUND_TRIP_FIELDS
from .backends.base import Answerable, BackendError

__all__ = ["ParkedCall", "PendingInput", "RequestStateSigner", "check_input_responses",
           "params_digest"]

_INFO = b"vmcp-trio requestState v1"
MRTR_FIELDS = ("_meta", *ROUND_TRIP_FIELDS)
"""What a retry adds to the params it repeats (left out of their digest)."""


def params_digest(params: dict[str, Any]) -> str:
    """What binds a requestState to the call's params (those the client repeats verbatim)."""
    kept = {k: v for k, v in params.items() if k not in MRTR_FIELDS}
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


class RequestStateSigner:
    def __init__(self, fleet_secrets: Sequence[bytes] = (), ttl: float = 300.0) -> None:
        self._sealer = Sealer(list(fleet_secrets) or [secrets.token_bytes(32)], info=_INFO)
        self.ttl = ttl

    def sign(self, call_id: str, identity: tuple[str, str], method: str, digest: str) -> str:
        body = {"c": call_id, "m": method, "d": digest, "e": int(time.time() + self.ttl)}
        return self._sealer.seal(orjson.dumps(body), context="\0".join(identity))

    def verify(self, state: object, identity: tuple[str, str], method: str,
               digest: str) -> str | None:
        """The parked call's id when ``state`` is genuine, current and for these params."""
        if not isinstance(state, str) or len(state) > 1024 or not state.isascii():
            return None
        try:
            body = orjson.loads(self._sealer.open(state, context="\0".join(identity)))
        except (SealingError, orjson.JSONDecodeError, ValueError):
            return None
        if (not isinstance(body, dict) or body.get("m") != method or body.get("d") != digest
                or not isinstance(body.get("e"), int) or body["e"] < time.time()):
            return None
        call_id = body.get("c")
        return call_id if isinstance(call_id, str) else None


def check_input_responses(responses: object) -> str | None:
    """What is wrong with a retry's ``inputResponses`` (its field path and the rule), or None:
    an object mapping each input key to a result object, or to ``{"error": {"code": <integer>,
    "message": <string>}}``."""
    if not isinstance(responses, dict):
        return "params.inputResponses must be an object"
    for key, value in responses.items():
        where = f"params.inputResponses[{str(key)[:64]!r}]"
        if not isinstance(value, dict):
            return f"{where} must be a result object"
        if "error" not in value:
            continue
        error = value["error"]
        if not isinstance(error, dict):
            return f"{where}.error must be an object"
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            return f"{where}.error.code must be an integer"
        if not isinstance(error.get("message"), str):
            return f"{where}.error.message must be a string"
    return None


@dataclass
class PendingInput:
    link: Answerable
    backend_id: RequestId
    method: str
    params: dict[str, Any] | None


@dataclass
class ParkedCall:
    id: str
    expires: float
    new: dict[str, PendingInput] = field(default_factory=dict)
    """Asked by the backend, not yet passed to the client."""
    asked: dict[str, PendingInput] = field(default_factory=dict)
    """Passed to the client, waiting for its answers."""
    reply: Response | ErrorResponse | None = None
    missing: dict[str, Any] | None = None
    """Client capabilities a question needed and the client did not declare."""
    scope: trio.CancelScope | None = None
    """What a parked call runs in (a call in place runs in its request's scope)."""
    call: Any = None
    """The session's ``Call`` of this request: its stream follows the latest retry."""
    in_place: bool = False
    """Run in the request's own task, never parked (its client cannot be asked anything): a
    question that needs a capability it lacks ends the call at once."""
    _changed: trio.Event | None = None
    """What :meth:`wait` waits on (made when something waits: most calls run in place)."""
    _keys: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def ask(self, link: Answerable, backend_id: RequestId, method: str,
            params: dict[str, Any] | None) -> None:
        self.new[f"{method.split('/')[0]}-{next(self._keys)}"] = PendingInput(
            link, backend_id, method, params)
        self._wake()

    def withdraw(self, link: Answerable, backend_id: RequestId) -> None:
        """The backend cancelled one of its questions."""
        for table in (self.new, self.asked):
            for key, pending in list(table.items()):
                if pending.link is link and pending.backend_id == backend_id:
                    del table[key]

    def lacks(self, capability: str) -> None:
        self.missing = {capability: {}}
        if self.in_place:  # the call ends at once: the request's own scope (no scope of its
            scope = getattr(self.call, "scope", None)  # own: entering one cost ~5 us a call)
            if scope is not None:
                scope.cancel()
        self._wake()

    def finish(self, reply: Response | ErrorResponse | None) -> None:
        self.reply = reply
        self._wake()

    @property
    def settled(self) -> bool:
        """Something to tell the client: the reply, new questions, or a missing capability."""
        return self.reply is not None or bool(self.new) or self.missing is not None

    async def wait(self) -> None:
        while not self.settled:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()

    async def answer(self, responses: dict[str, dict[str, Any]]) -> None:
        """Send the client's answers (checked by :func:`check_input_responses`) to the
        backend; unknown keys are ignored (the spec's SHOULD), questions left unanswered are
        asked again."""
        for key, value in responses.items():
            pending = self.asked.pop(key, None)
            if pending is None:
                continue
            reply: Response | ErrorResponse
            error = value.get("error")
            if isinstance(error, dict):
                reply = ErrorResponse(pending.backend_id, ErrorObject(
                    error["code"], error["message"], error.get("data")))
            else:
                reply = Response(pending.backend_id, value)
            with contextlib.suppress(BackendError):  # the call itself will fail and say so
                await pending.link.answer(pending.backend_id, reply)

    def input_required(self, state: str) -> dict[str, Any]:
        """The ``InputRequiredResult`` asking everything still unanswered."""
        self.asked.update(self.new)
        self.new.clear()
        return {"resultType": "input_required", "requestState": state,
                "inputRequests": {key: {"method": p.method, "params": p.params or {}}
                                  for key, p in self.asked.items()}}
