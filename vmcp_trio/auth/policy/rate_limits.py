"""Rate limits on tool calls: token buckets, in this process or shared by the fleet in Redis.

One job: say whether a call may go on now (an :class:`Admission`), taking one token from every
bucket the ``rateLimiting`` block of a VirtualMCPServer (``spec.config.rateLimiting``) or an
MCPServer (``spec.rateLimiting``) puts on it, and build the JSON-RPC refusal when not. Reading
the block, choosing which requests to limit and answering HTTP belong to the caller.

The rules kept, as ToolHive keeps them (``stacklok/toolhive``, ``pkg/ratelimit/``):

* A bucket holds at most ``maxTokens`` and refills continuously at ``maxTokens / refillPeriod``
  tokens a second (an empty bucket is full again after ``refillPeriod``); a bucket never seen
  is full. A call needs one token (``internal/bucket/bucket.go``: ``refillRate = maxTokens /
  refillSec``, ``min(maxTokens, tokens + elapsed * refillRate)``, refused below 1).
* The buckets of a call, checked in this order (the first that refuses is named): ``shared``
  (the whole server), the tool's own ``shared``, ``perUser`` (each user's), the tool's own
  ``perUser``. Tool limits apply *in addition to* the server's (``limiter.go``, ``Allow``).
* All or nothing: the call takes one token from every one of its buckets, or from none when any
  is empty, so a call refused by a tool's bucket does not drain the server's
  (``bucket.go``, ``consumeAllScript``: check all, then consume all).
* Per-user buckets key on the caller's identity (ToolHive: ``identity.Subject``). An anonymous
  caller (``user`` None or empty) meets only the shared buckets (``limiter.go``, ``Allow``:
  "per-user buckets are skipped"; ToolHive's CRDs require authentication for ``perUser``).
* ``tool`` is the name of the tool called, None for a request that is not ``tools/call``: then
  only the server-level buckets apply. ToolHive's middleware limits ``tools/call`` alone and lets
  every other request through without asking (``middleware.go``, ``rateLimitHandler``); the
  caller does likewise by asking :meth:`admit` for ``tools/call`` only.
* A refusal is JSON-RPC error ``-32029``, ``"Rate limit exceeded"``, with ``data:
  {"retryAfterSeconds": <int>}`` (``errors.go``: ``CodeRateLimited``, ``ceil``), sent with
  HTTP 429 and a ``Retry-After`` header of the same seconds (``middleware.go``,
  ``writeRateLimited``). Here the message also names the limit and the wait, and the seconds are
  at least 1.
* The wait is the time until the refusing bucket holds one token again, not ToolHive's coarser
  ``1 / refillRate`` (``bucket.go``, ``RetryAfter``): never longer, so never a wasted wait.
* Fail open: Redis unreachable lets the call through (``middleware.go``: "rate limit check
  failed, allowing request"); the caller, told through ``on_unavailable``, counts and warns.

In Redis (:class:`RedisRateLimiter`), one Lua script takes from all the call's buckets
atomically, with the time from Redis's own ``TIME`` (as ToolHive's, so the replicas' clocks do
not matter; Redis 5 or later: scripts replicated by effects). A bucket is a hash ``{tokens,
at}`` (``at`` in microseconds) under ``<prefix>ratelimit:shared``, ``ratelimit:shared-tool:
<tool>``, ``ratelimit:user:<digest>`` and ``ratelimit:user-tool:<digest>:<tool>``; it expires
when it would be full again (full is the same as absent, so a full bucket is deleted). The
user's digest (SHA-256, 32 hex digits) bounds the key and keeps user ids out of key names; its
fixed length keeps ``user-tool`` keys unambiguous whatever the tool name (ToolHive's
``user-tool:<tool>:<user>`` is not). In memory (:class:`LocalRateLimiter`, one process), the
same arithmetic (:func:`take`, which the script mirrors) over at most ``max_keys`` buckets,
the least recently used evicted first and a bucket full again dropped at once.

Bounds: at most four buckets a call. User ids are never logged above debug.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import trio
from coredis.commands.script import Script

from ...protocol.jsonrpc import ErrorObject, ErrorResponse, RequestId
from ...resources.plan import Bucket, RateLimitRules, ToolBuckets
from ...runtime.redis import RedisConnection
from ...runtime.shared_storage import StorageUnavailable

__all__ = [
    "ADMITTED",
    "HTTP_STATUS",
    "RATE_LIMITED",
    "Admission",
    "Bucket",
    "Level",
    "LocalRateLimiter",
    "Outcome",
    "RateLimitRules",
    "RedisRateLimiter",
    "ToolBuckets",
    "refill",
    "refusal",
    "retry_after_seconds",
    "take",
]

log = logging.getLogger("vmcp.ratelimit")

RATE_LIMITED = -32029
"""ToolHive's JSON-RPC error code for a call refused by a rate limit."""
HTTP_STATUS = 429
"""The HTTP status a refusal is sent with (Too Many Requests), with ``Retry-After``."""
MESSAGE = "Rate limit exceeded"


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a call may go on; when not, the wait in seconds and the limit that refused."""

    allowed: bool
    retry_after: float = 0.0
    limit: str | None = None


ADMITTED = Admission(True)


# --- the arithmetic ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Level:
    """A bucket's tokens at time ``at`` (seconds, on the limiter's clock)."""

    tokens: float
    at: float


class Outcome(NamedTuple):
    levels: tuple[Level | None, ...]
    """Each bucket's level after the call; None when full again (no state worth keeping)."""
    refused: int | None
    """The index of the first bucket that had no token (nothing was taken), or None."""
    wait: float
    """Seconds until the refusing bucket holds a token; 0 when allowed."""


def refill(bucket: Bucket, level: Level | None, now: float) -> float:
    """The tokens in ``bucket`` at ``now``: a bucket without a level is full."""
    if level is None:
        return float(bucket.max_tokens)
    elapsed = max(0.0, now - level.at)
    return min(float(bucket.max_tokens), level.tokens + elapsed * bucket.rate)


def take(buckets: Sequence[Bucket], levels: Sequence[Level | None], now: float) -> Outcome:
    """One token from every bucket, or from none if any has less than one (the Lua script
    below does the same in microseconds)."""
    tokens = [refill(bucket, level, now) for bucket, level in zip(buckets, levels, strict=True)]
    refused = next((i for i, held in enumerate(tokens) if held < 1), None)
    wait = 0.0
    if refused is None:
        tokens = [held - 1 for held in tokens]
    else:
        wait = (1 - tokens[refused]) / buckets[refused].rate
    after = tuple(None if held >= bucket.max_tokens else Level(held, now)
                  for bucket, held in zip(buckets, tokens, strict=True))
    return Outcome(after, refused, wait)


# KEYS: the call's buckets; ARGV: maxTokens and refillPeriod (microseconds) of each, in turn.
# Returns {0, 0} when allowed, else {the 1-based index of the refusing bucket, the wait in µs}.
_TAKE: Script[str] = Script(script="""
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local maxes, rates, levels = {}, {}, {}
local refused = 0
for i = 1, #KEYS do
  local max = tonumber(ARGV[2 * i - 1])
  local rate = max / tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local tokens, at = tonumber(state[1]), tonumber(state[2])
  if tokens == nil or at == nil then
    tokens = max
  else
    tokens = math.min(max, tokens + math.max(0, now - at) * rate)
  end
  maxes[i], rates[i], levels[i] = max, rate, tokens
  if refused == 0 and tokens < 1 then refused = i end
end
local wait = 0
if refused == 0 then
  for i = 1, #KEYS do levels[i] = levels[i] - 1 end
else
  wait = math.ceil((1 - levels[refused]) / rates[refused])
end
for i = 1, #KEYS do
  if levels[i] >= maxes[i] then
    redis.call('DEL', KEYS[i])
  else
    redis.call('HSET', KEYS[i], 'tokens', levels[i], 'at', now)
    redis.call('PEXPIRE', KEYS[i], math.ceil((maxes[i] - levels[i]) / rates[i] / 1000))
  end
end
return {refused, wait}
""")


# --- which buckets a call meets ------------------------------------------------------------------


class _Check(NamedTuple):
    key: tuple[str, ...]
    bucket: Bucket
    limit: str


def _checks(rules: RateLimitRules, user: str | None, tool: str | None) -> list[_Check]:
    """The call's buckets in ToolHive's order: shared, tool shared, perUser, tool perUser."""
    name = tool or ""  # as in ToolHive, an empty name is no tool
    own = rules.tools.get(name) if name else None
    checks = []
    if rules.shared is not None:
        checks.append(_Check(("shared",), rules.shared, "shared"))
    if own is not None and own.shared is not None:
        checks.append(_Check(("shared-tool", name), own.shared, f"tool {name} shared"))
    if user:
        digest = hashlib.sha256(user.encode()).hexdigest()[:32]
        if rules.per_user is not None:
            checks.append(_Check(("user", digest), rules.per_user, "perUser"))
        if own is not None and own.per_user is not None:
            checks.append(_Check(("user-tool", digest, name), own.per_user,
                                 f"tool {name} perUser"))
    return checks


def _admission(checks: Sequence[_Check], refused: int | None, wait: float) -> Admission:
    if refused is None:
        return ADMITTED
    log.debug("rate limit %s refused a call for %.3f s", checks[refused].limit, wait)
    return Admission(False, wait, checks[refused].limit)


# --- the limiters --------------------------------------------------------------------------------


class LocalRateLimiter:
    """The buckets in this process (one replica, or no Redis); clock: ``trio.current_time()``."""

    def __init__(self, rules: RateLimitRules, *, max_keys: int = 10_000) -> None:
        if max_keys < 4:
            raise ValueError("max_keys must hold at least the four buckets of one call")
        self.rules = rules
        self.max_keys = max_keys
        self._levels: OrderedDict[tuple[str, ...], tuple[Bucket, Level]] = OrderedDict()

    def __len__(self) -> int:
        """The buckets held (those neither full nor evicted)."""
        return len(self._levels)

    async def admit(self, user: str | None, tool: str | None) -> Admission:
        checks = _checks(self.rules, user, tool)
        if not checks:
            return ADMITTED
        now = trio.current_time()
        held = [self._levels.get(check.key) for check in checks]
        outcome = take([check.bucket for check in checks],
                       [entry[1] if entry is not None else None for entry in held], now)
        for check, level in zip(checks, outcome.levels, strict=True):
            if level is None:
                self._levels.pop(check.key, None)
            else:
                self._levels[check.key] = (check.bucket, level)
                self._levels.move_to_end(check.key)
        self._trim(now)
        return _admission(checks, outcome.refused, outcome.wait)

    def _trim(self, now: float) -> None:
        """Drop the least recently used buckets past ``max_keys``, and those full again."""
        while self._levels:
            bucket, level = next(iter(self._levels.values()))
            if (len(self._levels) <= self.max_keys
                    and refill(bucket, level, now) < bucket.max_tokens):
                return
            self._levels.popitem(last=False)


class RedisRateLimiter:
    """The buckets in Redis, shared by every replica; fails open when Redis is unavailable
    (``on_unavailable`` is told, for the metric and the warning)."""

    def __init__(self, connection: RedisConnection, rules: RateLimitRules, *,
                 on_unavailable: Callable[[], None], scope: tuple[str, ...] = ()) -> None:
        self.connection = connection
        self.rules = rules
        self.on_unavailable = on_unavailable
        self.scope = scope
        """Key parts before the buckets' (a backend's own limits: ``backend``, its name), so
        that two sets of limits in one Redis never share a bucket."""

    async def admit(self, user: str | None, tool: str | None) -> Admission:
        checks = _checks(self.rules, user, tool)
        if not checks:
            return ADMITTED
        keys = [self.connection.key("ratelimit", *self.scope, *check.key) for check in checks]
        args: list[str | int] = []
        for check in checks:
            args += [check.bucket.max_tokens, repr(check.bucket.refill_seconds * 1_000_000)]
        try:
            refused, wait = await self.connection.do(
                lambda r: _TAKE(keys=keys, args=args, client=r))
        except StorageUnavailable as exc:
            log.debug("rate limits not checked, call allowed: %s", exc)
            self.on_unavailable()
            return ADMITTED
        return _admission(checks, int(refused) - 1 if refused else None, int(wait) / 1_000_000)


# --- the refusal ---------------------------------------------------------------------------------


def retry_after_seconds(admission: Admission) -> int:
    """The wait in whole seconds, rounded up, at least 1: ``retryAfterSeconds`` and the HTTP
    ``Retry-After`` header."""
    return max(1, math.ceil(admission.retry_after))


def refusal(request_id: RequestId, admission: Admission) -> ErrorResponse:
    """The JSON-RPC error answering a refused call (sent with :data:`HTTP_STATUS`)."""
    if admission.allowed:
        raise ValueError("an allowed call is not refused")
    seconds = retry_after_seconds(admission)
    return ErrorResponse(request_id, ErrorObject(
        RATE_LIMITED, f"{MESSAGE}: the {admission.limit} limit; retry after {seconds} s",
        {"retryAfterSeconds": seconds}))
