"""The rules of the storage blocks: the authorization server's ``storage`` and the Redis
connection details it shares with ``sessionStorage``.

One job: turn those blocks into :class:`~.plan.RedisStorage` (or memory), each problem reported
at its field. Rules kept here:

* exactly one of ``sentinelConfig`` (production) and ``addr`` (a single Redis); a Sentinel
  block lists ``sentinelAddrs`` or names the Kubernetes Service in front of the sentinels
  (``sentinelService``: reached at ``<name>.<namespace>.svc:<port>``, the namespace the
  resource's unless given, port 26379 unless given), never both;
* ``tls`` (to Redis) and ``sentinelTls`` (to the sentinels, only with ``sentinelConfig``) are on
  when present: verified against ``caCertSecretRef`` (PEM certificates; the system's roots
  without it), or not at all with ``insecureSkipVerify``;
* timeouts between :data:`REDIS_TIMEOUT_RANGE`; one ``db``.

``clusterMode``: ``addr`` is a Redis Cluster's discovery endpoint (database 0 only).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import authserver_models as am
from .durations import Duration
from .plan import MemoryStorage, RedisStorage, RedisTlsPlan, StoragePlan
from .problems import PathPart
from .report import Resource
from .resolver import Resolver

__all__ = ["REDIS_TIMEOUT_RANGE", "redis_tls", "resolve_auth_storage", "sentinel_addresses"]

SPEC = ("spec", "authServerConfig")
REDIS_TIMEOUT_RANGE = (Duration.of(ms=100), Duration.of(minutes=1))


def sentinel_addresses(resolver: Resolver, owner: Resource, path: Sequence[PathPart],
                       sentinel: am.SentinelConfig | None) -> tuple[str, ...]:
    """The sentinels' ``host:port`` addresses of a Sentinel block (listed, or its Service's)."""
    if sentinel is None:
        return ()
    service = sentinel.sentinel_service
    if bool(sentinel.sentinel_addrs) == (service is not None):
        resolver.report.error(owner, path, "one-of",
                              "needs exactly one of sentinelAddrs and sentinelService")
        return ()
    if service is None:
        return sentinel.sentinel_addrs
    return (f"{service.name}.{service.namespace or owner.namespace}.svc:{service.port}",)


def redis_tls(resolver: Resolver, owner: Resource, path: Sequence[PathPart],
              config: am.RedisTLS | None) -> RedisTlsPlan | None:
    """A ``tls``/``sentinelTls`` block: None when absent (plain TCP)."""
    if config is None:
        return None
    certificates = None
    if config.ca_cert_secret_ref is not None:
        certificates = resolver.ca_certificates(owner, (*path, "caCertSecretRef"),
                                                config.ca_cert_secret_ref)
    if config.insecure_skip_verify and certificates is not None:
        resolver.report.warn(owner, (*path, "caCertSecretRef"), "unused-field",
                             "is ignored: insecureSkipVerify turns verification off")
    return RedisTlsPlan(certificates, verify=not config.insecure_skip_verify)


def resolve_auth_storage(resolver: Resolver, owner: Resource,
                         config: am.Storage | None) -> StoragePlan | None:
    """``authServerConfig.storage``, or None when it is wrong (reported)."""
    path = (*SPEC, "storage")
    report = resolver.report
    if config is None:
        report.warn(owner, path, "memory-storage",
                    "is not set: upstream tokens are held in memory and lost on restart, and "
                    "replicas do not share them (use type: redis for production)")
        return MemoryStorage()
    if config.type == "memory":
        if config.redis is not None:
            report.error(owner, (*path, "redis"), "unused-field",
                         "must not be set when type is memory")
            return None
        return MemoryStorage()
    redis = config.redis
    if redis is None:
        report.error(owner, (*path, "redis"), "required", "is required when type is redis")
        return None
    here = (*path, "redis")
    errors_before = report.error_count
    if (redis.sentinel_config is None) == (redis.addr is None):
        report.error(owner, here, "one-of",
                     "needs exactly one of sentinelConfig (production) or addr (a single "
                     "Redis, for development)")
    db = redis.db
    sentinel_db = redis.sentinel_config.db if redis.sentinel_config else None
    if db is not None and sentinel_db is not None and db != sentinel_db:
        report.error(owner, (*here, "sentinelConfig", "db"), "conflict",
                     f"is {sentinel_db} but storage.redis.db is {db}; set one of them")
    username = password = None
    if redis.acl_user_config is not None:
        acl = redis.acl_user_config
        if acl.username_secret_ref is not None:
            username = resolver.secret(owner, (*here, "aclUserConfig", "usernameSecretRef"),
                                       acl.username_secret_ref)
        password = resolver.secret(owner, (*here, "aclUserConfig", "passwordSecretRef"),
                                   acl.password_secret_ref)
    timeouts: dict[str, Duration] = {}
    for alias, value, default in (("dialTimeout", redis.dial_timeout, Duration.of(seconds=5)),
                                  ("readTimeout", redis.read_timeout, Duration.of(seconds=3)),
                                  ("writeTimeout", redis.write_timeout, Duration.of(seconds=3))):
        low, high = REDIS_TIMEOUT_RANGE
        if value is not None and not low <= value <= high:
            report.error(owner, (*here, alias), "duration-range",
                         f"must be between {low} and {high} (got {value})")
        timeouts[alias] = value if value is not None else default
    sentinel = redis.sentinel_config
    addresses = sentinel_addresses(resolver, owner, (*here, "sentinelConfig"), sentinel)
    tls = redis_tls(resolver, owner, (*here, "tls"), redis.tls)
    sentinel_tls = redis_tls(resolver, owner, (*here, "sentinelTls"), redis.sentinel_tls)
    if sentinel_tls is not None and sentinel is None:
        report.error(owner, (*here, "sentinelTls"), "unused-field",
                     "applies to sentinels only: set sentinelConfig, or tls for addr")
    if redis.cluster_mode and redis.addr is None:
        report.error(owner, (*here, "clusterMode"), "requires",
                     "needs addr, the cluster's discovery endpoint (not sentinelConfig)")
    if redis.cluster_mode and db:
        report.error(owner, (*here, "db"), "cluster-db",
                     "must be 0 with clusterMode: a Redis Cluster has database 0 only")
    if report.error_count != errors_before:
        return None
    return RedisStorage(
        key_prefix=redis.key_prefix or f"vmcp:auth:{{{owner.namespace}:{owner.name}}}:",
        master_name=sentinel.master_name if sentinel else None,
        sentinel_addrs=addresses,
        addr=redis.addr,
        db=db if db is not None else (sentinel_db or 0),
        username=username,
        password=password,
        dial_timeout=timeouts["dialTimeout"],
        read_timeout=timeouts["readTimeout"],
        write_timeout=timeouts["writeTimeout"],
        tls=tls,
        sentinel_tls=sentinel_tls,
        cluster_mode=redis.cluster_mode,
    )
