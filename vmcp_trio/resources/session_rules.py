"""``spec.sessionStorage``: the Redis a gateway's replicas share, and the secrets they share.

Rules it keeps:

* ``provider: memory`` (or no block) is one process: sessions live where they were made, so a load
  balancer in front of several replicas needs sticky sessions (docs/operations.md says so). Redis
  fields given with ``memory`` are ignored with a warning.
* ``provider: redis`` needs exactly one of ``address`` (one Redis: development) or
  ``sentinelConfig`` (production), a ``db`` that does not contradict the Sentinel block's, and
  secrets the replicas derive their common keys from (``hmacSecretRefs`` here, else
  ``authServerConfig.hmacSecretRefs``; at least 32 bytes each; else derived, with a warning, from
  the Redis ``passwordRef`` every replica holds, when it has at least 16 bytes): without them
  each replica would make its own, and a ``requestState`` or task id made by one would not open
  on another.
* Keys live under ``keyPrefix`` (default ``vmcp:session:{<namespace>:<name>}:``, a Redis Cluster
  hash tag), apart from the authorization server's.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from . import models as m
from .authserver_rules import hmac_secret_problem, secret_list
from .plan import RedisStorage, SecretValue
from .problems import PathPart
from .report import Resource
from .resolver import Resolver
from .storage_rules import sentinel_addresses

__all__ = ["resolve_session_storage"]

MIN_DERIVING_PASSWORD = 16
"""Bytes of a Redis password the fleet's secret may be derived from (shorter: too guessable)."""


def _derived(password: SecretValue, key_prefix: str) -> SecretValue:
    """The fleet's secret when none is given: HKDF-SHA256 of the Redis password every replica
    holds, bound to the sessions' key prefix (so two gateways sharing a Redis differ)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"vmcp fleet secret\0" + key_prefix.encode()).derive(password.value)
    return SecretValue(f"derived from {password.source}", key)



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
    key_prefix = config.key_prefix or f"vmcp:session:{{{gateway.namespace}:{gateway.name}}}:"
    if not fleet and not config.hmac_secret_refs:
        if password is not None and len(password.value) >= MIN_DERIVING_PASSWORD:
            fleet = (_derived(password, key_prefix),)
            report.warn(gateway, (*path, "hmacSecretRefs"), "derived-secret",
                        "is not set: the replicas derive their shared keys from the Redis "
                        "password (passwordRef), which they all have; set hmacSecretRefs to "
                        "rotate the two apart")
        else:
            report.error(gateway, (*path, "hmacSecretRefs"), "required",
                         "is required with provider redis (unless authServerConfig."
                         "hmacSecretRefs is set, or a passwordRef of at least "
                         f"{MIN_DERIVING_PASSWORD} bytes to derive it from): the replicas derive "
                         "the keys of requestState and task ids from it, so that what one "
                         "replica hands out opens on every other")
    addresses = sentinel_addresses(resolver, gateway, (*path, "sentinelConfig"), sentinel)
    if report.error_count != errors_before:
        return None
    return RedisStorage(
        key_prefix=key_prefix,
        master_name=sentinel.master_name if sentinel else None,
        sentinel_addrs=addresses,
        addr=config.address,
        db=config.db if config.db is not None else (sentinel_db or 0),
        password=password,
    ), fleet
