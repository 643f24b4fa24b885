"""Who a request is for, as the outgoing strategies need it.

The HTTP layer makes a :class:`Caller` once it authenticated a request and passes it along the
call path: a client session keeps its latest caller, and its backend links compute their
credentials for it. The raw token is here only for the token exchange (it is the subject
token); it is never logged, cached or sent to a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .identity import ANONYMOUS, Identity

__all__ = ["Caller"]


@dataclass(frozen=True)
class Caller:
    identity: Identity
    token: str | None = field(default=None, repr=False)
    address: str = ""
    """The client's network address, an IPv6 one as its /64 (what tells anonymous callers
    apart for bounds: :attr:`~vmcp_trio.http.asgi.HttpRequest.client_group`)."""
    forwarded: tuple[tuple[str, str], ...] = ()
    """The request's headers that ``passthroughHeaders`` names, as they came: sent on to every
    backend with this caller's requests."""

    @property
    def client_key(self) -> tuple[str, ...]:
        """Who the per-client bounds count: the identity, and for the one anonymous identity
        every request shares, the address too."""
        if self.identity == ANONYMOUS:
            return (*self.identity.key, self.address)
        return self.identity.key
