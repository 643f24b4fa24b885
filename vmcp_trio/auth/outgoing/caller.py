"""Who the current request is for, as the outgoing strategies need it.

The HTTP layer sets :data:`CALLER` once it authenticated a request; everything the request
starts (its backend calls, in the session's nursery) inherits it, because trio copies the
context into the tasks a request spawns. The raw token is here only for the token exchange
(it is the subject token); it is never logged, cached or sent to a backend.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from ..identity import Identity

__all__ = ["CALLER", "Caller"]


@dataclass(frozen=True)
class Caller:
    identity: Identity
    token: str | None = field(default=None, repr=False)


CALLER: ContextVar[Caller | None] = ContextVar("vmcp_caller", default=None)
