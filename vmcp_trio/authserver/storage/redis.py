"""Redis storage (``storage.type: redis``): survives restarts, shared by replicas, behind Sentinel.

Layout, every key under the VirtualMCPServer's prefix (``vmcp:auth:{ns:name}:`` by default, so
two gateways never read each other's rows) and every key with a TTL:

=============================  ================================================================
``client:<id>``                a registered client (JSON)
``pending:<state>``            a login in progress, sealed (it carries PKCE verifiers and the
                               tokens of finished legs); taken with GETDEL (single use)
``code:<key>``                 an authorization code's grant (JSON); ``code-used:<key>`` set NX
                               on redemption, so exactly one redemption is the first
``family:<id>``                a refresh family's fixed data (JSON); ``family-current:<id>`` the
                               current refresh-token key, ``family-previous:<id>`` the one it
                               replaced (for the retry grace), ``family-revoked:<id>`` when
                               revoked; rotation is one Lua script (compare, move or revoke)
``upstream:<sid>:<provider>``  a session's upstream tokens, sealed; ``upstreams:<sid>`` the set
                               of its providers; ``revoked:<sid>`` a revoked session
``refresh-due``                sorted set of ``<sid> <provider>`` by upstream expiry (the
                               refresh scheduler's queue)
``lock:<name>``                a lock shared by the replicas (SET NX PX, released by CAS)
=============================  ================================================================

Sentinel: the master comes from the sentinels (``masterName``, ``sentinelAddrs``); a watcher
subscribes to ``+switch-master`` on every sentinel and drops the master's connections at once, so
the next command asks the sentinels again (without it the old master stays writable for seconds
and acknowledged writes are lost, REFERENCE.md). After each write that must survive a failover
(codes, refresh rotation, upstream tokens) the storage asks ``WAIT 1`` for one replica's copy
(bounded at 250 ms: a missing replica degrades durability, not service). Redis unreachable,
timing out or failing over: every call raises :class:`~. StorageUnavailable` (the endpoints then
answer 503 with ``Retry-After``), nothing hangs.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import orjson
import trio
from coredis import PureToken, Redis, Sentinel
from coredis.connection import TCPLocation
from coredis.exceptions import RedisError
from coredis.retry import NoRetryPolicy

from ...auth.sealing import STORAGE_INFO, Sealer, SealingError
from ...resources.plan import RedisStorage as RedisPlan
from ...runtime.supervisor import RestartPolicy, Retry, Supervisor
from . import (
    ROTATION_GRACE,
    CodeGrant,
    PendingAuthorization,
    RefreshFamily,
    RegisteredClient,
    StorageUnavailable,
    StoredUpstream,
)

__all__ = ["RedisStorage"]

log = logging.getLogger("vmcp.authserver.redis")

# WAIT is meant here: a bounded, best-effort wait for one replica (ensure_replication raises when
# the replica is missing, and a missing replica must degrade durability, not service).
warnings.filterwarnings("ignore", message=r"Use the :meth:`Redis\.ensure_replication`",
                        category=UserWarning)

T = TypeVar("T")
WAIT_MS = 250
_RESUBSCRIBE = RestartPolicy(initial=0.5, cap=5.0)
"""A lost subscription is renewed fast: a missed ``+switch-master`` loses writes."""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_ROTATE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or redis.call('GET', KEYS[4]) == ARGV[1] then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[4])
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  return 1
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return 0
"""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


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
    def __init__(self, plan: RedisPlan, seal_secrets: Sequence[bytes]) -> None:
        self.plan = plan
        self.prefix = plan.key_prefix
        self.sealer = Sealer(seal_secrets, info=STORAGE_INFO)
        self._client: Redis[str] | None = None
        self._sentinel: Sentinel[str] | None = None
        self.failovers = 0
        self.on_revoked: Callable[[str, float], None] | None = None
        """Told of every session revoked by any replica (the revocations channel)."""
        self.on_task_restart: Callable[[str], None] | None = None
        """Told when a subscription task is renewed (the restarts metric)."""

    # --- connection ----------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        return {"decode_responses": True, "retry_policy": NoRetryPolicy(),
                "connect_timeout": self.plan.dial_timeout.total_seconds(),
                "stream_timeout": max(self.plan.read_timeout.total_seconds(),
                                      self.plan.write_timeout.total_seconds()),
                "username": self.plan.username.value.decode() if self.plan.username else None,
                "password": self.plan.password.value.decode() if self.plan.password else None}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection and its subscriptions (a supervised task: a connection that
        cannot be made is tried again with backoff, every call meanwhile raising
        StorageUnavailable). Each subscription (revocations, every sentinel's
        ``+switch-master``) is a supervised task of its own, renewed when it is lost."""
        async with self._connected() as client:
            self._client = client
            try:
                async with trio.open_nursery() as nursery:
                    supervisor = Supervisor(nursery, on_restart=self.on_task_restart)
                    supervisor.start_soon("Redis revocations subscription",
                                          self._hear_revocations, client, policy=_RESUBSCRIBE)
                    if self._sentinel is not None:
                        for sentinel_client in list(self._sentinel.sentinels):
                            supervisor.start_soon("Redis sentinel subscription",
                                                  self._watch_failovers, sentinel_client, client,
                                                  policy=_RESUBSCRIBE)
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self._client = None

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[Redis[str]]:
        options = self._options()
        if self.plan.master_name:
            timeouts = {"connect_timeout": options["connect_timeout"],
                        "stream_timeout": options["stream_timeout"]}
            locations = []
            for address in self.plan.sentinel_addrs:
                host, _, port = address.rpartition(":")
                locations.append(TCPLocation(host.strip("[]"), int(port)))
            sentinel: Sentinel[str] = Sentinel(locations, sentinel_kwargs=timeouts, **options)
            self._sentinel = sentinel
            async with sentinel:
                primary = sentinel.primary_for(self.plan.master_name)
                async with primary:
                    yield primary
            return
        host, _, port = str(self.plan.addr).rpartition(":")
        async with Redis(host.strip("[]"), int(port), **options) as client:
            yield client

    async def _watch_failovers(self, sentinel_client: Redis[str], primary: Redis[str]) -> None:
        """Drop the master's connections as soon as a sentinel announces a new master."""
        lost: BaseException | None = None
        try:
            async with sentinel_client.pubsub(channels=["+switch-master"],
                                              ignore_subscribe_messages=True) as pubsub:
                async for message in pubsub:
                    if str(message["data"]).split()[0] == self.plan.master_name:
                        self.failovers += 1
                        log.warning("Redis failover: %s", message["data"])
                        primary.connection_pool.disconnect()
        except* Exception as group:  # anyio's ClosedResourceError on shutdown, too
            lost = group.exceptions[0]
        raise Retry(f"sentinel subscription lost ({lost!r})")

    async def _hear_revocations(self, client: Redis[str]) -> None:
        """Sessions revoked by other replicas, so that their cached tokens stop working here
        at once (``revocations`` channel: ``<session id> <until>``)."""
        lost: BaseException | None = None
        try:
            async with client.pubsub(channels=[self._key("revocations")],
                                     ignore_subscribe_messages=True) as pubsub:
                async for message in pubsub:
                    session, _, until = str(message["data"]).partition(" ")
                    if self.on_revoked is not None and until:
                        self.on_revoked(session, float(until))
        except* Exception as group:  # anyio's ClosedResourceError on shutdown, too
            lost = group.exceptions[0]
        raise Retry(f"revocation subscription lost ({lost!r})")

    async def unreachable(self) -> str | None:
        """A PING, bounded by the dial and read timeouts: the master answers, or why not."""
        try:
            await self._do(lambda r: r.ping())
        except StorageUnavailable as exc:
            return str(exc)
        return None

    async def _do(self, operation: Callable[[Redis[str]], Any]) -> Any:
        """Run ``operation`` on the client; every Redis failure becomes StorageUnavailable."""
        client = self._client
        if client is None:
            raise StorageUnavailable("Redis is not connected")
        try:
            with trio.fail_after(self.plan.dial_timeout.total_seconds()
                                 + self.plan.read_timeout.total_seconds()):
                return await operation(client)
        except (RedisError, OSError, TimeoutError, trio.TooSlowError) as exc:
            raise StorageUnavailable(f"Redis: {type(exc).__name__}: "
                                     f"{str(exc)[:200]}") from None

    async def _durable(self, client: Redis[str]) -> None:
        if self.plan.master_name:
            await client.wait(1, WAIT_MS)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # --- clients, pending logins, codes -----------------------------------------------------

    async def put_client(self, client: RegisteredClient) -> None:
        ttl = _ms(client.expires_at - time.time())
        await self._do(lambda r: r.set(self._key("client", client.client_id),
                                       _encode(client).decode(), px=ttl))

    async def get_client(self, client_id: str) -> RegisteredClient | None:
        data = await self._do(lambda r: r.get(self._key("client", client_id)))
        return None if data is None else _decode(RegisteredClient, data)

    async def put_pending(self, pending: PendingAuthorization) -> None:
        key = self._key("pending", pending.state)
        record = dataclasses.asdict(pending)
        sealed = self.sealer.seal(orjson.dumps(record), context=key)
        await self._do(lambda r: r.set(key, sealed, px=_ms(pending.expires_at - time.time())))

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
        ttl = _ms(grant.expires_at - time.time())

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
        ttl = _ms(family.expires_at - time.time())
        fixed = dataclasses.replace(family, current_id="", revoked=False)

        async def put(r: Redis[str]) -> None:
            async with r.pipeline(transaction=True) as tx:
                tx.set(self._key("family", family.family_id), _encode(fixed).decode(), px=ttl)
                tx.set(self._key("family-current", family.family_id), family.current_id,
                       px=ttl)
            await self._durable(r)
        await self._do(put)

    async def get_family(self, family_id: str) -> RefreshFamily | None:
        async def get(r: Redis[str]) -> tuple[str | None, str | None, bool]:
            data = await r.get(self._key("family", family_id))
            current = await r.get(self._key("family-current", family_id))
            revoked = await r.exists([self._key("family-revoked", family_id)])
            return data, current, bool(revoked)
        data, current, revoked = await self._do(get)
        if data is None or current is None:
            return None
        family = _decode(RefreshFamily, data)
        family.current_id, family.revoked = current, revoked
        return family

    async def rotate(self, family_id: str, presented_id: str, new_id: str,
                     expires_at: float) -> RefreshFamily | None:
        keys = [self._key("family-current", family_id), self._key("family-revoked", family_id),
                self._key("family", family_id), self._key("family-previous", family_id)]

        async def rotate(r: Redis[str]) -> int:
            moved = await r.eval(_ROTATE, keys=keys, args=[
                presented_id, new_id, str(_ms(expires_at - time.time())),
                str(_ms(ROTATION_GRACE))])
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
        ttl = _ms(expires_at - time.time())

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
        key = self._key("upstream", session_id, provider)
        sealed = await self._do(lambda r: r.get(key))
        if sealed is None:
            return None
        try:
            return _decode(StoredUpstream, self.sealer.open(sealed, context=key))
        except SealingError as exc:
            log.warning("stored upstream tokens do not open: %s", exc)
            return None

    async def drop_session(self, session_id: str, until: float) -> None:
        async def drop(r: Redis[str]) -> None:
            providers = await r.smembers(self._key("upstreams", session_id))
            keys = [self._key("upstream", session_id, p) for p in providers]
            await r.delete([*keys, self._key("upstreams", session_id)])
            if providers:
                await r.zrem(self._key("refresh-due"), [f"{session_id} {p}" for p in providers])
            await r.set(self._key("revoked", session_id), "1", px=_ms(until - time.time()))
            await r.publish(self._key("revocations"), f"{session_id} {until}")
            await self._durable(r)
        await self._do(drop)

    async def due_upstreams(self, before: float, limit: int) -> list[tuple[str, str]]:
        members = await self._do(lambda r: r.zrangebyscore(
            self._key("refresh-due"), float("-inf"), before, offset=0, count=limit))
        return [tuple(str(m).split(" ", 1)) for m in members]  # type: ignore[misc]

    async def acquire(self, name: str, ttl: float) -> str | None:
        token = secrets.token_hex(8)
        taken = await self._do(lambda r: r.set(self._key("lock", name), token, px=_ms(ttl),
                                               condition=PureToken.NX))
        return token if taken else None

    async def release(self, name: str, token: str) -> None:
        await self._do(lambda r: r.eval(_RELEASE, keys=[self._key("lock", name)], args=[token]))

    async def session_revoked(self, session_id: str) -> bool:
        return bool(await self._do(lambda r: r.exists([self._key("revoked", session_id)])))
