"""MCP protocol revisions and what differs between them (no I/O).

Four revisions are in use. Three share the *handshake* model (``initialize``, a session id,
a GET stream, resumable SSE); 2026-07-28 is *stateless* (no session, ``server/discover``,
per-request ``_meta``, ``subscriptions/listen``, ``InputRequiredResult`` instead of server-to-
client requests). Each rule the transport depends on is a property here, so code asks
``revision.allows_batches`` rather than comparing date strings.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HANDSHAKE_REVISIONS",
    "LATEST_HANDSHAKE",
    "REVISIONS",
    "STATELESS",
    "Revision",
    "negotiate",
    "revision",
]


@dataclass(frozen=True, slots=True)
class Revision:
    version: str

    @property
    def stateless(self) -> bool:
        return self.version >= "2026-07-28"

    @property
    def allows_batches(self) -> bool:
        """JSON-RPC batches: only in 2025-03-26 (removed in 2025-06-18)."""
        return self.version == "2025-03-26"

    @property
    def has_version_header(self) -> bool:
        """``MCP-Protocol-Version`` on every request after initialize (2025-06-18 and later)."""
        return self.version >= "2025-06-18"

    @property
    def primes_streams(self) -> bool:
        """Priming event, ``retry:`` and polling on SSE streams (2025-11-25 only: 2026-07-28
        streams are not resumable)."""
        return self.version == "2025-11-25"

    @property
    def has_elicitation(self) -> bool:
        return self.version >= "2025-06-18"

    @property
    def resource_not_found_code(self) -> int:
        return -32602 if self.stateless else -32002

    def __str__(self) -> str:
        return self.version


REVISIONS = tuple(Revision(v) for v in ("2025-03-26", "2025-06-18", "2025-11-25",
                                        "2026-07-28"))
HANDSHAKE_REVISIONS = REVISIONS[:3]
LATEST_HANDSHAKE = REVISIONS[2]
STATELESS = REVISIONS[3]
_BY_VERSION = {r.version: r for r in REVISIONS}


def revision(version: str) -> Revision | None:
    """The revision for a version string, or None if we do not speak it."""
    return _BY_VERSION.get(version)


def negotiate(requested: object) -> Revision:
    """The server's answer to ``initialize``: the requested handshake revision if supported,
    else the latest handshake revision (the spec's rule; the client decides whether to go on)."""
    if isinstance(requested, str):
        found = _BY_VERSION.get(requested)
        if found is not None and not found.stateless:
            return found
    return LATEST_HANDSHAKE
