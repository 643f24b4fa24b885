"""The in-process storage (``storage.type: memory``, the default): nothing survives a restart,
and replicas do not share it (use Redis for either).

Every table is bounded: when one is full, expired records go first, then the oldest, except in
the tables of what others cannot be allowed to push out (logins in progress, registered
clients): those refuse a new record (:class:`StorageFull`, a 503) while they are full of live
ones. Expiry is checked on every read, so an expired record is never returned even before a
sweep.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from . import (
    MAX_SUCCESSORS,
    MAX_UNUSED_CLIENTS,
    ROTATION_GRACE,
    CodeGrant,
    PendingAuthorization,
    RefreshFamily,
    RegisteredClient,
    StorageFull,
    StoredUpstream,
    UpstreamClient,
)

__all__ = ["MemoryStorage"]

T = TypeVar("T")


class _Table(Generic[T]):
    def __init__(self, limit: int, *, full: str | None = None) -> None:
        self.limit = limit
        self.full = full
        """When set, the table refuses new records while full of live ones (the message)."""
        self.rows: OrderedDict[str, tuple[float, T]] = OrderedDict()

    def put(self, key: str, value: T, expires_at: float) -> None:
        if len(self.rows) >= self.limit and key not in self.rows:
            now = time.time()
            for stale in [k for k, (exp, _) in self.rows.items() if exp <= now]:
                del self.rows[stale]
            if self.full is not None and len(self.rows) >= self.limit:
                raise StorageFull(self.full)
        self.rows[key] = (expires_at, value)
        self.rows.move_to_end(key)
        while len(self.rows) > self.limit:
            self.rows.popitem(last=False)

    def get(self, key: str) -> T | None:
        row = self.rows.get(key)
        if row is None:
            return None
        if row[0] <= time.time():
            del self.rows[key]
            return None
        return row[1]

    def pop(self, key: str) -> T | None:
        value = self.get(key)
        self.rows.pop(key, None)
        return value


class MemoryStorage:
    def __init__(self, *, limit: int = 100_000, pending_limit: int = 10_000,
                 max_unused_clients: int = MAX_UNUSED_CLIENTS) -> None:
        self.clients: _Table[RegisteredClient] = _Table(
            limit, full=f"{limit} clients are registered, the most this server holds; try "
                        "again when unused registrations have expired")
        self.unused: OrderedDict[str, None] = OrderedDict()
        """The registrations without a login yet, oldest first."""
        self.max_unused_clients = max_unused_clients
        self.pending: _Table[PendingAuthorization] = _Table(
            pending_limit, full=f"{pending_limit} logins are in progress, the most this server "
                                "holds; try again shortly")
        self.codes: _Table[CodeGrant] = _Table(limit)
        self.families: _Table[RefreshFamily] = _Table(limit)
        self.upstream: _Table[StoredUpstream] = _Table(limit)
        self.revoked: _Table[bool] = _Table(limit)
        self.locks: _Table[str] = _Table(limit)
        self.upstream_clients: _Table[UpstreamClient] = _Table(1000)
        """By ``<provider> <client id>``; a handful in practice (one per provider and
        settings)."""
        self.registrations: _Table[str] = _Table(1000)
        """``<provider> <fingerprint>`` -> the client id registered for it."""
        self.assertions: _Table[bool] = _Table(
            limit, full=f"{limit} assertions are remembered as used, the most this server "
                        "holds; try again when some have expired")
        """Used RFC 7523 assertions: never pushed out (that would let one be replayed)."""
        self.on_revoked: Callable[[str, float], None] | None = None
        """Unused: nothing outside this process shares this storage."""

    async def unreachable(self) -> str | None:
        return None  # in this process: always there

    async def put_client(self, client: RegisteredClient) -> None:
        self.clients.put(client.client_id, client, client.expires_at)
        if client.used:
            self.unused.pop(client.client_id, None)
            return
        self.unused[client.client_id] = None
        while len(self.unused) > self.max_unused_clients:
            oldest, _ = self.unused.popitem(last=False)
            self.clients.pop(oldest)

    async def get_client(self, client_id: str) -> RegisteredClient | None:
        return self.clients.get(client_id)

    async def put_pending(self, pending: PendingAuthorization) -> None:
        self.pending.put(pending.state, pending, pending.expires_at)

    async def take_pending(self, state: str) -> PendingAuthorization | None:
        return self.pending.pop(state)

    async def put_code(self, grant: CodeGrant) -> None:
        self.codes.put(grant.code_id, grant, grant.expires_at)

    async def redeem_code(self, code_id: str) -> tuple[CodeGrant | None, bool]:
        grant = self.codes.get(code_id)
        if grant is None:
            return None, False
        first = not grant.used
        grant.used = True
        return grant, first

    async def set_code_family(self, code_id: str, family_id: str) -> None:
        grant = self.codes.get(code_id)
        if grant is not None:
            grant.family_id = family_id

    async def put_family(self, family: RefreshFamily) -> None:
        self.families.put(family.family_id, family, family.expires_at)

    async def get_family(self, family_id: str) -> RefreshFamily | None:
        return self.families.get(family_id)

    async def rotate(self, family_id: str, presented_id: str, new_id: str,
                     expires_at: float) -> RefreshFamily | None:
        family = self.families.get(family_id)
        if family is None:
            return None
        retry = (family.previous_id == presented_id and time.time() < family.previous_until)
        if family.revoked or (not family.is_current(presented_id) and not retry):
            family.revoked = True
            return None
        if retry:  # keeps the grace it started with; the unused successors stay valid
            family.successors = (*family.successors, family.current_id)[-(MAX_SUCCESSORS - 1):]
        else:
            family.previous_id = presented_id
            family.previous_until = time.time() + ROTATION_GRACE
            family.successors = ()
        family.current_id = new_id
        family.expires_at = expires_at
        self.families.put(family_id, family, expires_at)
        return family

    async def revoke_family(self, family_id: str) -> None:
        family = self.families.get(family_id)
        if family is not None:
            family.revoked = True

    async def put_upstream(self, tokens: StoredUpstream, expires_at: float) -> None:
        self.upstream.put(f"{tokens.session_id}:{tokens.provider}", tokens, expires_at)

    async def get_upstream(self, session_id: str, provider: str) -> StoredUpstream | None:
        return self.upstream.get(f"{session_id}:{provider}")

    async def drop_session(self, session_id: str, until: float) -> None:
        prefix = f"{session_id}:"
        for key in [k for k in self.upstream.rows if k.startswith(prefix)]:
            del self.upstream.rows[key]
        self.revoked.put(session_id, True, until)

    async def session_revoked(self, session_id: str) -> bool:
        return self.revoked.get(session_id) is not None

    async def due_upstreams(self, before: float, limit: int) -> list[tuple[str, str]]:
        now = time.time()
        due = sorted((stored.expires_at, stored.session_id, stored.provider)
                     for expires, stored in self.upstream.rows.values()
                     if expires > now and stored.refresh_token and stored.expires_at is not None
                     and stored.expires_at < before)
        return [(session, provider) for _, session, provider in due[:limit]]

    async def put_upstream_client(self, client: UpstreamClient, *, as_current: bool) -> None:
        self.upstream_clients.put(f"{client.provider} {client.client_id}", client,
                                  client.kept_until)
        if as_current:
            self.registrations.put(f"{client.provider} {client.fingerprint}", client.client_id,
                                   client.kept_until)

    async def get_upstream_client(self, provider: str, client_id: str) -> UpstreamClient | None:
        return self.upstream_clients.get(f"{provider} {client_id}")

    async def registered_upstream_client(self, provider: str,
                                         fingerprint: str) -> UpstreamClient | None:
        client_id = self.registrations.get(f"{provider} {fingerprint}")
        return None if client_id is None else await self.get_upstream_client(provider, client_id)

    async def consume_assertion(self, key: str, expires_at: float) -> bool:
        if self.assertions.get(key) is not None:
            return False
        self.assertions.put(key, True, expires_at)
        return True

    async def acquire(self, name: str, ttl: float) -> str | None:
        if self.locks.get(name) is not None:
            return None
        token = secrets.token_hex(8)
        self.locks.put(name, token, time.time() + ttl)
        return token

    async def release(self, name: str, token: str) -> None:
        if self.locks.get(name) == token:
            self.locks.pop(name)
