"""One connection to the Redis a gateway shares with its replicas: single or behind Sentinel.

The authorization server's storage and the fleet's shared state (sessions, the token-exchange
cache, notifications between replicas) each hold a :class:`RedisConnection` with their own key
prefix. Rules it keeps:

* Every command runs through :meth:`RedisConnection.do`, bounded by the dial and read timeouts:
  Redis unreachable, timing out or failing over raises :class:`StorageUnavailable` (the message
  says why; the caller answers 503, or degrades), nothing hangs, nothing is retried here.
* Sentinel: the master comes from the sentinels (``masterName``, ``sentinelAddrs``); a watcher
  subscribes to ``+switch-master`` on every sentinel and drops the master's connections at once,
  so the next command asks the sentinels again (without it the old master stays writable for
  seconds and acknowledged writes are lost, REFERENCE.md). :meth:`RedisConnection.durable`
  asks ``WAIT 1`` for one replica's copy after a write that must survive a failover (bounded
  at 250 ms: a missing replica degrades durability, not service).
* Subscriptions (:meth:`RedisConnection.subscribe`, before :meth:`RedisConnection.run`) and the
  sentinel watchers are supervised tasks of their own, renewed fast when lost, and renewed at
  once on ``+switch-master``: a subscription's connection may outlive a failover on a node that
  is no longer the master (a replica, or the old master back before the sentinels make it one),
  where the new master's messages do not reach it until the sentinels disconnect its clients,
  seconds later.
* A Redis Cluster (``clusterMode``, at ``addr``, a discovery endpoint): the cluster client routes
  each command; every key of a storage carries its prefix's hash tag, so a script's keys are in
  one slot.
* Locks shared by the replicas: ``SET NX PX`` with a random token, released by compare-and-delete.
* TLS (``tls`` to Redis, ``sentinelTls`` to the sentinels): verified against the configured CA
  certificates or the system's roots, with the host name checked, or not verified at all when
  the configuration says ``insecureSkipVerify``.
"""

from __future__ import annotations

import logging
import secrets
import ssl
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
from coredis import PureToken, Redis, RedisCluster, Sentinel
from coredis.connection import TCPLocation
from coredis.exceptions import RedisError
from coredis.retry import NoRetryPolicy

from ..resources.plan import RedisStorage as RedisPlan
from ..resources.plan import RedisTlsPlan
from .shared_storage import StorageUnavailable, milliseconds
from .supervisor import RestartPolicy, Retry, Supervisor

__all__ = ["RedisConnection"]

log = logging.getLogger("vmcp.redis")

# WAIT is meant here: a bounded, best-effort wait for one replica (ensure_replication raises when
# the replica is missing, and a missing replica must degrade durability, not service).
warnings.filterwarnings("ignore", message=r"Use the :meth:`Redis\.ensure_replication`",
                        category=UserWarning)

WAIT_MS = 250
_RESUBSCRIBE = RestartPolicy(initial=0.5, cap=5.0)
"""A lost subscription is renewed fast: a missed ``+switch-master`` loses writes."""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def tls_context(plan: RedisTlsPlan) -> ssl.SSLContext:
    """The client TLS context of a ``tls``/``sentinelTls`` block."""
    if plan.ca_certificates is not None:
        context = ssl.create_default_context(cadata=plan.ca_certificates.value.decode("ascii"))
    else:
        context = ssl.create_default_context()
    if not plan.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class RedisConnection:
    def __init__(self, plan: RedisPlan, prefix: str) -> None:
        self.plan = plan
        self.prefix = prefix
        self._client: Redis[str] | None = None
        self._sentinel: Sentinel[str] | None = None
        self._subscriptions: list[tuple[str, str, Callable[[str], None]]] = []
        self.failovers = 0
        self._failed_over = trio.Event()
        """Set on ``+switch-master`` (then replaced): the subscriptions renew themselves."""
        self.on_task_restart: Callable[[str], None] | None = None
        """Told when a subscription task is renewed (the restarts metric)."""

    @property
    def connected(self) -> bool:
        """Whether the connection was made (commands may still fail: Redis may be down)."""
        return self._client is not None

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def subscribe(self, name: str, channel: str, handler: Callable[[str], None]) -> None:
        """Hear every message published on ``channel`` (a key under the prefix) while
        running; ``name`` names the supervised task. Call before :meth:`run`."""
        self._subscriptions.append((name, self.key(channel), handler))

    # --- the connection ------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        plan = self.plan
        return {"decode_responses": True, "retry_policy": NoRetryPolicy(), "db": plan.db,
                "connect_timeout": plan.dial_timeout.total_seconds(),
                "stream_timeout": max(plan.read_timeout.total_seconds(),
                                      plan.write_timeout.total_seconds()),
                "username": plan.username.value.decode() if plan.username else None,
                "password": plan.password.value.decode() if plan.password else None,
                "ssl_context": tls_context(plan.tls) if plan.tls else None}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection and its subscriptions (a supervised task: a connection that
        cannot be made is tried again with backoff, every command meanwhile raising
        StorageUnavailable)."""
        async with self._connected() as client:
            self._client = client
            try:
                async with trio.open_nursery() as nursery:
                    supervisor = Supervisor(nursery, on_restart=self.on_task_restart)
                    for name, channel, handler in self._subscriptions:
                        supervisor.start_soon(name, self._listen, client, channel, handler,
                                              policy=_RESUBSCRIBE)
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
                        "stream_timeout": options["stream_timeout"],
                        "ssl_context": tls_context(self.plan.sentinel_tls)
                        if self.plan.sentinel_tls else None}
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
        if self.plan.cluster_mode:
            del options["db"]  # a cluster has database 0 only
            async with RedisCluster(host.strip("[]"), int(port), **options) as cluster:
                # The commands the storages send have the same API on a cluster client; their
                # keys share one hash tag (the prefix's {namespace:name}), so one slot.
                yield cast("Redis[str]", cluster)
            return
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
                        self._failed_over.set()
                        self._failed_over = trio.Event()
        except* Exception as group:  # anyio's ClosedResourceError on shutdown, too
            lost = group.exceptions[0]
        raise Retry(f"sentinel subscription lost ({lost!r})")

    async def _listen(self, client: Redis[str], channel: str,
                      handler: Callable[[str], None]) -> None:
        lost: BaseException | str | None = None
        failed_over = self._failed_over
        with trio.CancelScope() as scope:
            try:
                async with trio.open_nursery() as nursery:

                    async def renew_on_failover() -> None:
                        await failed_over.wait()
                        scope.cancel()

                    nursery.start_soon(renew_on_failover)
                    async with client.pubsub(channels=[channel],
                                             ignore_subscribe_messages=True) as pubsub:
                        async for message in pubsub:
                            handler(str(message["data"]))
                    nursery.cancel_scope.cancel()
            except* Exception as group:  # anyio's ClosedResourceError on shutdown, too
                lost = group.exceptions[0]
        if scope.cancelled_caught:
            lost = "the master changed"
        raise Retry(f"subscription to {channel} lost ({lost!r})")

    # --- commands ------------------------------------------------------------------------------

    async def do(self, operation: Callable[[Redis[str]], Any]) -> Any:
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

    async def durable(self, client: Redis[str]) -> None:
        """Inside an operation: wait (bounded) for one replica to hold what was written (with
        Sentinel; a cluster's replication is its own, and WAIT cannot be routed there)."""
        if self.plan.master_name:
            await client.wait(1, WAIT_MS)

    async def unreachable(self) -> str | None:
        """A PING, bounded by the dial and read timeouts: the master answers, or why not."""
        try:
            await self.do(lambda r: r.ping())
        except StorageUnavailable as exc:
            return str(exc)
        return None

    async def publish(self, channel: str, data: str) -> int:
        """Publish on ``channel``: how many subscribers received it (Redis's count)."""
        return int(await self.do(lambda r: r.publish(self.key(channel), data)))

    async def acquire(self, name: str, ttl: float) -> str | None:
        """A lock the replicas share for ``ttl`` seconds: its token, or None when taken."""
        token = secrets.token_hex(8)
        taken = await self.do(lambda r: r.set(self.key("lock", name), token,
                                              px=milliseconds(ttl), condition=PureToken.NX))
        return token if taken else None

    async def release(self, name: str, token: str) -> None:
        await self.do(lambda r: r.eval(_RELEASE, keys=[self.key("lock", name)], args=[token]))
