"""``spec.sessionStorage``: the Redis a gateway's replicas share, and the secrets they share.

Rules it keeps:

* ``provider: memory`` (or no block) is one process: sessions live where they were made, so a
  load balancer in front of several replicas needs sticky sessions (the README says so). Redis
  fields given with ``memory`` are ignored with a warning.
* ``provider: redis`` needs exactly one of ``address`` (one Redis: development) or
  ``sentinelConfig`` (production), a ``db`` that does not contradict the Sentinel block's, and
  secrets the replicas derive their common keys from (``hmacSecretRefs`` here, else
  ``authServerConfig.hmacSecretRefs``; at least 32 bytes each): without them each replica would
  make its own, and a ``requestState`` or task id made by one would not open on another.
* Keys live under ``keyPrefix`` (default ``vmcp:session:{<namespace>:<name>}:``, a Redis Cluster
  hash tag), apart from the authorization server's.
"""

from __future__ import annotations

from . import models as m
from .authserver_rules import hmac_secret_problem, secret_list
from .plan import RedisStorage, SecretValue
from .problems import PathPart
from .report import Resource
from .resolver import Resolver

__all__ = ["resolve_session_storage"]



def resolve_session_storage(
        resolver: Resolver, gateway: Resource, config: m.SessionStorage | None,
        auth_server_secrets: tuple[SecretValue, ...],
        path: tuple[PathPart, ...] = ("spec", "sessionStorage"),
) -> tuple[RedisStorage | None, tuple[SecretValue, ...]] | None:
    """The shared Redis (None: memory) and the fleet's secrets; None when the block is wrong
    (each problem reported at its field under ``path``, where the block was written)."""
    report = resolver.report
    if config is None:
        return None, auth_server_secrets
    errors_before = report.error_count
    secrets = secret_list(resolver, gateway, (*path, "hmacSecretRefs"),
                          config.hmac_secret_refs, None, "hmac-secret", hmac_secret_problem)
    fleet = secrets or auth_server_secrets
    if config.provider == "memory":
        for alias, value in (("address", config.address), ("sentinelConfig",
                                                            config.sentinel_config),
                             ("passwordRef", config.password_ref)):
            if value is not None:
                report.warn(gateway, (*path, alias), "unused-field",
                            "is ignored when provider is memory")
        return (None, fleet) if report.error_count == errors_before else None
    if (config.address is None) == (config.sentinel_config is None):
        report.error(gateway, path, "one-of",
                     "needs exactly one of address (a single Redis, for development) or "
                     "sentinelConfig (production) when provider is redis")
    sentinel = config.sentinel_config
    sentinel_db = sentinel.db if sentinel else None
    if config.db is not None and sentinel_db is not None and config.db != sentinel_db:
        report.error(gateway, (*path, "sentinelConfig", "db"), "conflict",
                     f"is {sentinel_db} but sessionStorage.db is {config.db}; set one of them")
    password = (resolver.secret(gateway, (*path, "passwordRef"), config.password_ref)
                if config.password_ref is not None else None)
    if not fleet and not config.hmac_secret_refs:
        report.error(gateway, (*path, "hmacSecretRefs"), "required",
                     "is required with provider redis (unless authServerConfig.hmacSecretRefs "
                     "is set): the replicas derive the keys of requestState and task ids from "
                     "it, so that what one replica hands out opens on every other")
    if report.error_count != errors_before:
        return None
    return RedisStorage(
        key_prefix=config.key_prefix or f"vmcp:session:{{{gateway.namespace}:{gateway.name}}}:",
        master_name=sentinel.master_name if sentinel else None,
        sentinel_addrs=sentinel.sentinel_addrs if sentinel else (),
        addr=config.address,
        db=config.db if config.db is not None else (sentinel_db or 0),
        password=password,
    ), fleet
