"""The hooks between one session's copy and the other replicas (``sessionStorage: redis``).

A session's copy in this process tells the fleet what the others need to know, and is told what
they did, through :class:`SessionPeer`, set by :mod:`.sharing` on a handshake session it shares
and by the gateway on a 2026-07-28 context; a session without one (``sessionStorage`` memory)
keeps everything to itself. Every hook is a plain callable, so the session needs nothing of the
fleet but this object. A client's answer for another replica is handed there before its POST is
answered: when that cannot be confirmed the hook raises :class:`NotPassedOn` (the POST is 503,
the client sends the answer again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..protocol.jsonrpc import ErrorResponse, Message, Request, Response
from ..protocol.stateless_requests import StatelessContext
from .streams import EventStream

__all__ = ["NotPassedOn", "ParkedElsewhere", "SessionPeer"]

ParkedElsewhere = Callable[[str, Request, StatelessContext, EventStream],
                           Awaitable[Response | ErrorResponse | None]]
"""``(call id, retry, context, stream)``: the reply of a retry whose parked call another replica
holds, or None when the call id names this replica."""


class NotPassedOn(Exception):
    """A client's message for another replica was not confirmed there (the message, for the
    client, says to send it again)."""


@dataclass
class SessionPeer:
    changed: Callable[[], None] | None = None
    """Told when something the session record holds changed here."""
    noted: Callable[[bytes], None] | None = None
    """Told each backend message this copy put on the standalone stream (the client's GET may
    be at another replica)."""
    elsewhere: Callable[[Message], Awaitable[None]] | None = None
    """Told a client's answer, or cancellation, of a request this copy does not hold (another
    replica relayed or answers it); raises :class:`NotPassedOn` when an answer did not reach
    the replica that relayed its request."""
    parked_elsewhere: ParkedElsewhere | None = None
    """2026-07-28: where a retry goes whose parked call another replica holds."""
