"""A client's request being answered, and the requests of one session in flight.

* :class:`Call`: where a request's related messages go (its response stream), and for a
  2026-07-28 request the client's per-request context and the parked call that gathers the
  backend's questions for it; which backend it went to, once routed; the client's
  ``progressToken`` for the gateway's own progress (a 2026-07-28 retry brings its own, and
  progress goes under the latest).
* :class:`InFlight`: the requests of one session being answered, each under a cancel scope: a
  client's ``notifications/cancelled`` cancels the one it names (ids may collide: the latest
  holds the id), and the gateway's shutdown deadline stops every one with a reason that each
  then answers with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from ..protocol.jsonrpc import RequestId
from ..protocol.stateless_requests import StatelessContext
from .parked_calls import ParkedCall
from .routing import Routed
from .streams import EventStream

__all__ = ["MAX_WAITING_FOR_CLIENT", "Call", "InFlight", "SessionBusy", "SessionClosed",
           "progress_token"]

MAX_WAITING_FOR_CLIENT = 1024
"""Requests of one session waiting for the client's answer at once (relayed to a handshake
client, or parked 2026-07-28 calls)."""


class SessionClosed(Exception):
    """The session ended while a request was using it."""


class SessionBusy(Exception):
    """The session has as many requests at work as it may (the message says so)."""


@dataclass
class Call:
    stream: EventStream
    stateless: StatelessContext | None = None
    parked: ParkedCall | None = None
    backend: str | None = None
    """The backend the request went to, once routed."""
    progress_token: str | int | None = None
    """The client's ``progressToken`` for the gateway's own progress (a composite tool's)."""
    routed: Routed | None = None
    """Where the request goes, when already known (a 2026-07-28 call is routed once, to
    choose how it is answered)."""
    scope: trio.CancelScope | None = None
    """The scope the request is being answered in (:meth:`InFlight.answering`), once it is:
    what ends a call run in place whose question the client cannot answer."""


def progress_token(params: dict[str, Any]) -> str | int | None:
    """The ``progressToken`` in a request's ``_meta``, if it is a string or an integer."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


class InFlight:
    def __init__(self) -> None:
        self._by_id: dict[RequestId, trio.CancelScope] = {}
        self._scopes: dict[trio.CancelScope, None] = {}
        """The scopes of the requests in flight (a dict: an empty set costs 216 bytes, on
        every session)."""
        self.stopped_because: str | None = None
        """Set when the gateway stops the calls in flight (its shutdown deadline)."""

    def answering(self, request_id: RequestId) -> _Answering:
        """``with in_flight.answering(request_id) as scope``: the cancel scope of one request
        for the block (the caller enters it)."""
        return _Answering(self, request_id)

    def cancel(self, request_id: object) -> bool:
        """Cancel the request the client gave this id; False when none is in flight here."""
        scope = self._by_id.get(request_id) if isinstance(request_id, str | int) else None
        if scope is None:
            return False
        scope.cancel()
        return True

    def stop(self, reason: str) -> None:
        """Stop every request in flight; each answers with ``reason``."""
        self.stopped_because = reason
        for scope in self._scopes:
            scope.cancel()


class _Answering:
    """:meth:`InFlight.answering`'s block (a class, not a generator: it is on every call's
    path, where a generator-based context manager costs three times as much)."""

    __slots__ = ("_in_flight", "_request_id", "_scope")

    def __init__(self, in_flight: InFlight, request_id: RequestId) -> None:
        self._in_flight = in_flight
        self._request_id = request_id
        self._scope = trio.CancelScope()

    def __enter__(self) -> trio.CancelScope:
        in_flight, scope = self._in_flight, self._scope
        in_flight._by_id[self._request_id] = scope
        in_flight._scopes[scope] = None
        return scope

    def __exit__(self, *exc_info: object) -> None:
        in_flight, scope = self._in_flight, self._scope
        del in_flight._scopes[scope]
        if in_flight._by_id.get(self._request_id) is scope:
            del in_flight._by_id[self._request_id]
