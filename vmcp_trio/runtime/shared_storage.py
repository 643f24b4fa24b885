"""What every user of the storage the replicas share (Redis) has in common, without the client.

One job: the failure a storage call ends in and the unit of its expiry times, importable by code
that may run without Redis at all (``vmcp proxy``, which never shares anything, imports the
token-exchange cache that can): the Redis client itself loads with
:mod:`vmcp_trio.runtime.redis` only.
"""

from __future__ import annotations

__all__ = ["StorageUnavailable", "milliseconds"]


class StorageUnavailable(Exception):
    """The storage cannot be reached (Redis down or failing over); the message says so."""


def milliseconds(seconds: float) -> int:
    """A TTL for PX/PEXPIRE: at least 1 ms."""
    return max(1, int(seconds * 1000))
