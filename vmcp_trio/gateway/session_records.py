"""The records of client sessions that every replica of a gateway can read (Redis).

A handshake session is created on one replica; its record lets any other replica take its next
request: :meth:`~vmcp_trio.gateway.core.Gateway.find_session` *adopts* it, making a local copy
with the same identity, revision, client capabilities and log level, whose links to the
backends join the backend sessions the record names (no second ``initialize``).

Rules it keeps:

* A record is sealed (AES-256-GCM under a key derived from the fleet secrets, with the storage
  key as associated data): Redis never holds a backend's session id or what the client said
  about itself in clear, and a record copied under another key does not open.
* It expires after the session idle TTL; a replica whose copy is used renews it at most every
  quarter of that TTL, so an active session costs no Redis round trip per request.
* A change (the log level, a backend session replaced) is written whole, with a version one
  higher than the one it replaces.
* Redis failing raises :class:`~vmcp_trio.runtime.redis.StorageUnavailable`; the caller decides
  what that costs (:class:`~vmcp_trio.gateway.core.Gateway`: the session goes on where it is).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from ..auth.sealer import Sealer, SealingError
from ..runtime.redis import RedisConnection
from ..runtime.shared_storage import milliseconds

__all__ = ["BackendSession", "SessionRecord", "SessionRecords"]

log = logging.getLogger("vmcp.sessions")

_INFO = b"vmcp-trio session records v1"
MAX_RECORD_BYTES = 256 * 1024


@dataclass(frozen=True)
class BackendSession:
    """A backend session a copy's link may join: what its ``initialize`` settled."""

    session_id: str
    revision: str
    server_capabilities: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None


@dataclass(frozen=True)
class SessionRecord:
    id: str
    issuer: str
    subject: str
    client_key: tuple[str, ...]
    revision: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    log_level: str = "debug"
    backends: dict[str, BackendSession] = field(default_factory=dict)
    """The backend sessions a copy joins (backends whose sessions cannot be shared, stdio ones
    and the legacy SSE transport, are connected anew by each replica)."""
    owner: str = ""
    """The replica that created the session (it listens on the backends' GET streams)."""
    version: int = 1

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> SessionRecord:
        fields = orjson.loads(data)
        fields["client_key"] = tuple(fields["client_key"])
        fields["backends"] = {name: BackendSession(**state)
                              for name, state in fields["backends"].items()}
        return cls(**fields)


class SessionRecords:
    def __init__(self, redis: RedisConnection, fleet_secrets: Sequence[bytes], *,
                 ttl: float) -> None:
        self.redis = redis
        self.sealer = Sealer(list(fleet_secrets), info=_INFO)
        self.ttl = ttl

    def _key(self, session_id: str) -> str:
        return self.redis.key("session", session_id)

    async def put(self, record: SessionRecord) -> None:
        key = self._key(record.id)
        data = record.to_json()
        if len(data) > MAX_RECORD_BYTES:
            raise ValueError(f"session record of {len(data)} bytes is too large")
        sealed = self.sealer.seal(data, context=key)
        ttl = milliseconds(self.ttl)

        async def put(r: Any) -> None:
            await r.set(key, sealed, px=ttl)
            await self.redis.durable(r)

        await self.redis.do(put)

    async def get(self, session_id: str) -> SessionRecord | None:
        """The record (None: no such session, it expired, or it does not open)."""
        key = self._key(session_id)
        sealed = await self.redis.do(lambda r: r.get(key))
        if sealed is None:
            return None
        try:
            return SessionRecord.from_json(self.sealer.open(str(sealed), context=key))
        except (SealingError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("session record %s does not open; ignored", session_id[:8])
            return None

    async def renew(self, session_id: str) -> None:
        key = self._key(session_id)
        await self.redis.do(lambda r: r.pexpire(key, milliseconds(self.ttl)))

    async def delete(self, session_id: str) -> None:
        key = self._key(session_id)
        await self.redis.do(lambda r: r.delete([key]))
