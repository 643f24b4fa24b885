"""Redis storage (``storage.type: redis``): survives restarts, shared by replicas, behind Sentinel.

Layout, every key under the VirtualMCPServer's prefix (``vmcp:auth:{ns:name}:`` by default, so
two gateways never read each other's rows) and every key with a TTL:

=============================  ================================================================
``client:<id>``                a registered client (JSON); ``unused-clients`` the sorted set
                               of those without a login yet, by registration time (the
                               newest ``max_unused_clients`` are kept, one Lua script)
``pending:<state>``            a login in progress, sealed (it carries PKCE verifiers and the
                               tokens of finished legs); taken with GETDEL (single use)
``code:<key>``                 an authorization code's grant (JSON); ``code-used:<key>`` set NX
                               on redemption, so exactly one redemption is the first
``family:<id>``                a refresh family's fixed data (JSON); ``family-current:<id>`` the
                               current refresh-token key, ``family-successors:<id>`` the other
                               unused successors of ``family-previous:<id>``, the one they
                               replaced (for the retry grace), ``family-revoked:<id>`` when
                               revoked; rotation is one Lua script (compare, move or revoke)
``upstream:<sid>:<provider>``  a session's upstream tokens, sealed; ``upstreams:<sid>`` the set
                               of its providers; ``revoked:<sid>`` a revoked session
``refresh-due``                sorted set of ``<sid> <provider>`` by upstream expiry (the
                               refresh scheduler's queue)
``upstream-client:<p>:<id>``   vmcp's registration at upstream provider ``<p>``
                               (``dcrConfig``), sealed; ``upstream-registration:<p>:<hash>``
                               the client id registered for those settings
``lock:<name>``                a lock shared by the replicas (SET NX PX, released by CAS)
``assertion:<hash>``           an RFC 7523 assertion accepted (hash of its issuer and jti), set
                               NX until it expires: exactly one replica accepts it
=============================  ================================================================

The connection (single Redis or Sentinel, failover handling, bounded commands, locks,
subscriptions) is :class:`vmcp_trio.runtime.redis.RedisConnection`: after each write that must
survive a failover (codes, refresh rotation, upstream tokens, used assertions) the storage asks
it for one replica's copy; Redis unreachable, timing out or failing over makes every call raise
:class:`~vmcp_trio.runtime.redis.StorageUnavailable` (the endpoints then answer 503 with
``Retry-After``), nothing hangs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson
import trio
from coredis import PureToken, Redis
from coredis.exceptions import RedisClusterError, ResponseError

from ...auth.sealer import STORAGE_INFO, Sealer, SealingError
from ...resources.plan import RedisStorage as RedisPlan
from ...runtime.redis import RedisConnection
from ...runtime.shared_storage import StorageUnavailable, milliseconds
from . import (
    MAX_SUCCESSORS,
    MAX_UNUSED_CLIENTS,
    ROTATION_GRACE,
    CodeGrant,
    PendingAuthorization,
    RefreshFamily,
    RegisteredClient,
    StoredUpstream,
    UpstreamClient,
)

__all__ = ["RedisStorage"]

log = logging.getLogger("vmcp.authserver.redis")

T = TypeVar("T")
UNUSED_WINDOW = 30 * 24 * 3600.0
"""Entries of ``unused-clients`` older than this are dropped (their client expired long ago)."""
_ROTATE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local current = redis.call('GET', KEYS[1])
local successors = redis.call('GET', KEYS[5]) or ''
if current == ARGV[1] or string.find(' ' .. successors .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[4])
  redis.call('DEL', KEYS[5])
elseif redis.call('GET', KEYS[4]) == ARGV[1] and current then
  local kept = {}
  for id in string.gmatch(successors .. ' ' .. current, '%S+') do kept[#kept + 1] = id end
  local first = math.max(1, #kept - tonumber(ARGV[5]) + 1)
  redis.call('SET', KEYS[5], table.concat(kept, ' ', first), 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1
"""
"""Rotate a family: a current token (``family-current`` or one of ``family-successors``) makes
the new one current alone and starts the grace of the one it replaced; the replaced one, within
that grace, adds a successor, the unused ones staying valid (the grace is not extended);
anything else revokes the family."""


_PUT_UNUSED = """
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[6])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[5])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #oldest, 2 do redis.call('DEL', ARGV[7] .. oldest[i]) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return over
"""
"""Keep an unused registration among the newest ``limit`` (those that expired go first)."""


def _encode(record: Any) -> bytes:
    return orjson.dumps(dataclasses.asdict(record))


def _decode(cls: type[T], data: str | bytes) -> T:
    """A record from its JSON, lists back to the tuples the dataclass declares."""
    fields = orjson.loads(data)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if isinstance(fields.get(field.name), list) and "tuple" in str(field.type):
            fields[field.name] = tuple(fields[field.name])
    return cls(**fields)


class RedisStorage:
    def __init__(self, plan: RedisPlan, seal_secrets: Sequence[bytes], *,
                 max_unused_clients: int = MAX_UNUSED_CLIENTS) -> None:
        self.redis = RedisConnection(plan, plan.key_prefix)
        self.max_unused_clients = max_unused_clients
        self.sealer = Sealer(seal_secrets, info=STORAGE_INFO)
        self.on_revoked: Callable[[str, float], None] | None = None
        """Told of every session revoked by any replica (the revocations channel)."""
        self.redis.subscribe("Redis revocations subscription", "revocations", self._revoked)

    @property
    def failovers(self) -> int:
        return self.redis.failovers

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection and the revocations subscription (a supervised task); once
        connected, warn when Redis may evict this storage's keys (:meth:`_check_eviction`)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.redis.run)
            task_status.started()
            await self._check_eviction()

    async def _check_eviction(self) -> None:
        """Redis under memory pressure evicts keys unless its ``maxmemory-policy`` is
        ``noeviction`` (every key here has a TTL, so the ``volatile-*`` policies take them
        too): registered clients, logins in progress, codes and refresh tokens would vanish,
        and clients get ``invalid_client`` or ``invalid_grant`` for grants that were valid.
        Said once per connection, as a warning naming the policy. A Redis that refuses
        ``CONFIG GET`` (managed services rename it) is not second-guessed."""
        async def policy(r: Redis[str]) -> str | None:
            try:
                found = await r.config_get(["maxmemory-policy"])
            except (ResponseError, RedisClusterError):  # renamed, or not routable (a cluster)
                return None
            return found.get("maxmemory-policy")
        while True:
            try:
                current = await self._do(policy)
                break
            except StorageUnavailable:
                await trio.sleep(5)
        if current is not None and current != "noeviction":
            log.warning("Redis may evict the authorization server's keys (maxmemory-policy %s): "
                        "under memory pressure clients would lose their registrations, logins "
                        "and refresh tokens (invalid_client, invalid_grant); set "
                        "maxmemory-policy noeviction on this Redis", current)

    def _revoked(self, data: str) -> None:
        """A session revoked by another replica, so that its cached tokens stop working here
        at once (``revocations`` channel: ``<session id> <until>``)."""
        session, _, until = data.partition(" ")
        if self.on_revoked is not None and until:
            self.on_revoked(session, float(until))

    async def unreachable(self) -> str | None:
        return await self.redis.unreachable()

    async def _do(self, operation: Callable[[Redis[str]], Any]) -> Any:
        return await self.redis.do(operation)

    async def _durable(self, client: Redis[str]) -> None:
        await self.redis.durable(client)

    def _key(self, *parts: str) -> str:
        return self.redis.key(*parts)

    # --- clients, pending logins, codes -----------------------------------------------------

    async def put_client(self, client: RegisteredClient) -> None:
        now = time.time()
        ttl = milliseconds(client.expires_at - now)
        key, unused = self._key("client", client.client_id), self._key("unused-clients")
        if client.used:
            async def put(r: Redis[str]) -> None:
                async with r.pipeline(transaction=True) as tx:
                    tx.set(key, _encode(client).decode(), px=ttl)
                    tx.zrem(unused, [client.client_id])
            await self._do(put)
            return
        await self._do(lambda r: r.eval(_PUT_UNUSED, keys=[unused, key], args=[
            _encode(client).decode(), ttl, now, client.client_id, self.max_unused_clients,
            now - UNUSED_WINDOW, self._key("client", "")]))

    async def get_client(self, client_id: str) -> RegisteredClient | None:
        data = await self._do(lambda r: r.get(self._key("client", client_id)))
        return None if data is None else _decode(RegisteredClient, data)

    async def put_pending(self, pending: PendingAuthorization) -> None:
        key = self._key("pending", pending.state)
        record = dataclasses.asdict(pending)
        sealed = self.sealer.seal(orjson.dumps(record), context=key)
        ttl = milliseconds(pending.expires_at - time.time())
        await self._do(lambda r: r.set(key, sealed, px=ttl))

    async def take_pending(self, state: str) -> PendingAuthorization | None:
        key = self._key("pending", state)
        sealed = await self._do(lambda r: r.getdel(key))
        if sealed is None:
            return None
        try:
            fields = orjson.loads(self.sealer.open(sealed, context=key))
        except SealingError as exc:
            log.warning("a pending login does not open: %s", exc)
            return None
        fields["providers"] = tuple(fields["providers"])
        fields["scopes"] = tuple(fields["scopes"])
        fields["upstream"] = [StoredUpstream(**u) for u in fields["upstream"]]
        return PendingAuthorization(**fields)

    async def put_code(self, grant: CodeGrant) -> None:
        ttl = milliseconds(grant.expires_at - time.time())

        async def put(r: Redis[str]) -> None:
            await r.set(self._key("code", grant.code_id), _encode(grant).decode(), px=ttl)
            await self._durable(r)
        await self._do(put)

    async def redeem_code(self, code_id: str) -> tuple[CodeGrant | None, bool]:
        async def redeem(r: Redis[str]) -> tuple[str | None, bool]:
            data = await r.get(self._key("code", code_id))
            if data is None:
                return None, False
            ttl = await r.pttl(self._key("code", code_id))
            first = await r.set(self._key("code-used", code_id), "1",
                                px=max(int(ttl), 1000), condition=PureToken.NX)
            family = await r.get(self._key("code-family", code_id))
            await self._durable(r)
            return (data if family is None else f"{family}\0{data}"), bool(first)
        data, first = await self._do(redeem)
        if data is None:
            return None, False
        family, _, body = data.rpartition("\0")
        grant = _decode(CodeGrant, body)
        grant.used = True
        grant.family_id = family or None
        return grant, first

    async def set_code_family(self, code_id: str, family_id: str) -> None:
        async def link(r: Redis[str]) -> None:
            ttl = await r.pttl(self._key("code", code_id))
            await r.set(self._key("code-family", code_id), family_id, px=max(int(ttl), 1000))
        await self._do(link)

    # --- refresh families ------------------------------------------------------------------------

    async def put_family(self, family: RefreshFamily) -> None:
        ttl = milliseconds(family.expires_at - time.time())
        fixed = dataclasses.replace(family, current_id="", revoked=False)

        async def put(r: Redis[str]) -> None:
            async with r.pipeline(transaction=True) as tx:
                tx.set(self._key("family", family.family_id), _encode(fixed).decode(), px=ttl)
                tx.set(self._key("family-current", family.family_id), family.current_id,
                       px=ttl)
            await self._durable(r)
        await self._do(put)

    async def get_family(self, family_id: str) -> RefreshFamily | None:
        async def get(r: Redis[str]) -> tuple[str | None, str | None, str | None, str | None,
                                              bool]:
            data = await r.get(self._key("family", family_id))
            current = await r.get(self._key("family-current", family_id))
            previous = await r.get(self._key("family-previous", family_id))
            successors = await r.get(self._key("family-successors", family_id))
            revoked = await r.exists([self._key("family-revoked", family_id)])
            return data, current, previous, successors, bool(revoked)
        data, current, previous, successors, revoked = await self._do(get)
        if data is None or current is None:
            return None
        family = _decode(RefreshFamily, data)
        family.current_id, family.previous_id, family.revoked = current, previous, revoked
        family.successors = tuple((successors or "").split())
        return family

    async def rotate(self, family_id: str, presented_id: str, new_id: str,
                     expires_at: float) -> RefreshFamily | None:
        keys = [self._key("family-current", family_id), self._key("family-revoked", family_id),
                self._key("family", family_id), self._key("family-previous", family_id),
                self._key("family-successors", family_id)]

        async def rotate(r: Redis[str]) -> int:
            moved = await r.eval(_ROTATE, keys=keys, args=[
                presented_id, new_id, str(milliseconds(expires_at - time.time())),
                str(milliseconds(ROTATION_GRACE)), str(MAX_SUCCESSORS - 1)])
            await self._durable(r)
            return 1 if moved == 1 else 0
        if not await self._do(rotate):
            return None
        return await self.get_family(family_id)

    async def revoke_family(self, family_id: str) -> None:
        async def revoke(r: Redis[str]) -> None:
            ttl = await r.pttl(self._key("family", family_id))
            await r.set(self._key("family-revoked", family_id), "1", px=max(int(ttl), 1000))
            await self._durable(r)
        await self._do(revoke)

    # --- upstream tokens and sessions -------------------------------------------------------

    async def put_upstream(self, tokens: StoredUpstream, expires_at: float) -> None:
        key = self._key("upstream", tokens.session_id, tokens.provider)
        sealed = self.sealer.seal(_encode(tokens), context=key)
        ttl = milliseconds(expires_at - time.time())

        async def put(r: Redis[str]) -> None:
            async with r.pipeline(transaction=True) as tx:
                tx.set(key, sealed, px=ttl)
                tx.sadd(self._key("upstreams", tokens.session_id), [tokens.provider])
                tx.pexpire(self._key("upstreams", tokens.session_id), ttl)
                member = f"{tokens.session_id} {tokens.provider}"
                if tokens.refresh_token and tokens.expires_at is not None:
                    tx.zadd(self._key("refresh-due"), {member: tokens.expires_at})
                else:
                    tx.zrem(self._key("refresh-due"), [member])
            await self._durable(r)
        await self._do(put)

    async def get_upstream(self, session_id: str, provider: str) -> StoredUpstream | None:
        return await self._get_sealed(self._key("upstream", session_id, provider),
                                      StoredUpstream, "stored upstream tokens")

    async def _get_sealed(self, key: str, cls: type[T], what: str) -> T | None:
        """The record sealed under ``key``; None when there is none or it does not open (the
        sealing secrets changed: logged, as ``what``)."""
        sealed = await self._do(lambda r: r.get(key))
        if sealed is None:
            return None
        try:
            return _decode(cls, self.sealer.open(sealed, context=key))
        except SealingError as exc:
            log.warning("%s do not open: %s", what, exc)
            return None

    async def drop_session(self, session_id: str, until: float) -> None:
        async def drop(r: Redis[str]) -> None:
            providers = await r.smembers(self._key("upstreams", session_id))
            keys = [self._key("upstream", session_id, p) for p in providers]
            await r.delete([*keys, self._key("upstreams", session_id)])
            if providers:
                await r.zrem(self._key("refresh-due"), [f"{session_id} {p}" for p in providers])
            await r.set(self._key("revoked", session_id), "1", px=milliseconds(until - time.time()))
            await r.publish(self._key("revocations"), f"{session_id} {until}")
            await self._durable(r)
        await self._do(drop)

    async def due_upstreams(self, before: float, limit: int) -> list[tuple[str, str]]:
        members = await self._do(lambda r: r.zrange(
            self._key("refresh-due"), "-inf", before, sortby=PureToken.BYSCORE, offset=0,
            count=limit))
        return [tuple(str(m).split(" ", 1)) for m in members]  # type: ignore[misc]

    async def put_upstream_client(self, client: UpstreamClient, *, as_current: bool) -> None:
        key = self._key("upstream-client", client.provider, client.client_id)
        sealed = self.sealer.seal(_encode(client), context=key)
        ttl = milliseconds(client.kept_until - time.time())

        async def put(r: Redis[str]) -> None:
            async with r.pipeline(transaction=True) as tx:
                tx.set(key, sealed, px=ttl)
                if as_current:
                    tx.set(self._key("upstream-registration", client.provider,
                                     client.fingerprint), client.client_id, px=ttl)
            await self._durable(r)
        await self._do(put)

    async def get_upstream_client(self, provider: str, client_id: str) -> UpstreamClient | None:
        return await self._get_sealed(self._key("upstream-client", provider, client_id),
                                      UpstreamClient, "stored upstream client registrations")

    async def registered_upstream_client(self, provider: str,
                                         fingerprint: str) -> UpstreamClient | None:
        client_id = await self._do(lambda r: r.get(
            self._key("upstream-registration", provider, fingerprint)))
        return None if client_id is None else await self.get_upstream_client(provider, client_id)

    async def consume_assertion(self, key: str, expires_at: float) -> bool:
        async def consume(r: Redis[str]) -> bool:
            first = await r.set(self._key("assertion", key), "1",
                                px=milliseconds(expires_at - time.time()),
                                condition=PureToken.NX)
            await self._durable(r)
            return bool(first)
        return bool(await self._do(consume))

    async def acquire(self, name: str, ttl: float) -> str | None:
        return await self.redis.acquire(name, ttl)

    async def release(self, name: str, token: str) -> None:
        await self.redis.release(name, token)

    async def session_revoked(self, session_id: str) -> bool:
        return bool(await self._do(lambda r: r.exists([self._key("revoked", session_id)])))
