"""Rate limits (``vmcp_trio/auth/policy/rate_limits.py``): the bucket arithmetic, the limiter in
memory on trio's mock clock, and the limiter in a real redis-server shared by two "replicas"
(two :class:`RedisConnection` objects to the one server), down to Redis going away."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from vmcp_trio.auth.policy.rate_limits import (
    ADMITTED,
    Admission,
    Bucket,
    Level,
    LocalRateLimiter,
    RateLimitRules,
    RedisRateLimiter,
    ToolBuckets,
    refill,
    refusal,
    retry_after_seconds,
    take,
)
from vmcp_trio.protocol.jsonrpc import encode
from vmcp_trio.resources.durations import Duration
from vmcp_trio.resources.plan import RedisStorage as RedisPlan
from vmcp_trio.runtime.redis import RedisConnection

from .fixtures.redis_cluster import redis_command, running_redis

PREFIX = "vmcp:{default:quickstart}:"


# --- the arithmetic ------------------------------------------------------------------------------


def test_a_new_bucket_is_full_and_refills_evenly() -> None:
    bucket = Bucket(4, 2.0)  # 2 tokens a second
    assert refill(bucket, None, 100.0) == 4
    assert refill(bucket, Level(0.0, 100.0), 100.5) == 1.0
    assert refill(bucket, Level(0.0, 100.0), 102.0) == 4
    assert refill(bucket, Level(0.0, 100.0), 1_000.0) == 4  # never above maxTokens
    assert refill(bucket, Level(1.0, 100.0), 99.0) == 1.0  # a clock going back adds nothing


def test_take_is_all_or_nothing_and_says_the_wait() -> None:
    wide, narrow = Bucket(10, 10.0), Bucket(1, 4.0)
    allowed = take([wide, narrow], [None, None], 0.0)
    assert allowed.refused is None and allowed.wait == 0
    assert allowed.levels == (Level(9.0, 0.0), Level(0.0, 0.0))
    refused = take([wide, narrow], allowed.levels, 1.0)
    assert refused.refused == 1
    assert refused.wait == pytest.approx(3.0)  # 0.25 of a token held, 0.25 token/s
    # Nothing taken: the wide bucket is full again (no state kept), the narrow one refilled.
    assert refused.levels == (None, Level(0.25, 1.0))


@settings(max_examples=200, deadline=None)
@given(max_tokens=st.integers(1, 20), refill_seconds=st.floats(0.01, 100.0),
       steps=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=200))
def test_never_more_than_max_tokens_plus_the_refill(max_tokens: int, refill_seconds: float,
                                                    steps: list[float]) -> None:
    """Whatever the calls' timing, a bucket admits at most maxTokens + elapsed * rate, and a
    refused call's wait is exactly when it would have been admitted."""
    bucket = Bucket(max_tokens, refill_seconds)
    level: Level | None = None
    now, admitted = 0.0, 0
    for step in steps:
        now += step
        outcome = take([bucket], [level], now)
        if outcome.refused is None:
            admitted += 1
        else:
            later = take([bucket], outcome.levels, now + outcome.wait * (1 + 1e-9) + 1e-12)
            assert later.refused is None
        (level,) = outcome.levels
        assert admitted <= max_tokens + now * bucket.rate + 1e-9


@settings(max_examples=100, deadline=None)
@given(levels=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=4),
       elapsed=st.floats(0.0, 3.0))
def test_a_refused_call_takes_from_no_bucket(levels: list[float], elapsed: float) -> None:
    buckets = [Bucket(5, 5.0)] * len(levels)
    before = [Level(tokens, 0.0) for tokens in levels]
    outcome = take(buckets, before, elapsed)
    for bucket, old, new in zip(buckets, before, outcome.levels, strict=True):
        held = refill(bucket, new, elapsed)
        if outcome.refused is None:
            assert held == pytest.approx(refill(bucket, old, elapsed) - 1)
        else:
            assert held == refill(bucket, old, elapsed)


def test_rules_are_checked() -> None:
    with pytest.raises(ValueError, match="maxTokens"):
        Bucket(0, 1.0)
    with pytest.raises(ValueError, match="refillPeriod"):
        Bucket(1, 0.0)
    with pytest.raises(ValueError, match="refillPeriod"):
        Bucket(1, math.inf)
    with pytest.raises(ValueError, match="max_keys"):
        LocalRateLimiter(RateLimitRules(), max_keys=3)


# --- in memory -----------------------------------------------------------------------------------


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock()


RULES = RateLimitRules(
    shared=Bucket(100, 100.0),
    per_user=Bucket(3, 6.0),  # one token every 2 s
    tools={"search": ToolBuckets(shared=Bucket(2, 10.0)),
           "write": ToolBuckets(per_user=Bucket(1, 60.0))})


async def admitted(limiter: LocalRateLimiter | RedisRateLimiter, user: str | None,
                   tool: str | None, times: int) -> list[bool]:
    return [(await limiter.admit(user, tool)).allowed for _ in range(times)]


async def test_local_refuses_after_max_tokens_and_refills(
        mock_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(RULES)
    assert await admitted(limiter, "alice", "echo", 3) == [True] * 3
    refused = await limiter.admit("alice", "echo")
    assert refused == Admission(False, 2.0, "perUser")
    mock_clock.jump(0.5)
    assert (await limiter.admit("alice", "echo")).retry_after == pytest.approx(1.5)
    mock_clock.jump(1.5)
    assert await admitted(limiter, "alice", "echo", 2) == [True, False]
    mock_clock.jump(6.0)  # the whole period: full again, no more
    assert await admitted(limiter, "alice", "echo", 4) == [True] * 3 + [False]


async def test_local_users_are_apart_and_anonymous_meets_only_shared_limits(
        mock_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(RULES)
    assert await admitted(limiter, "alice", None, 4) == [True] * 3 + [False]
    assert await admitted(limiter, "bob", None, 4) == [True] * 3 + [False]
    assert await admitted(limiter, None, None, 10) == [True] * 10
    assert await admitted(limiter, "", None, 10) == [True] * 10  # no subject: anonymous


async def test_local_tool_limits_add_to_the_server_limits(
        mock_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(RULES)
    assert await admitted(limiter, "alice", "search", 2) == [True, True]
    assert await limiter.admit("bob", "search") == Admission(False, 5.0, "tool search shared")
    assert (await limiter.admit("bob", "write")).allowed
    assert await limiter.admit("bob", "write") == Admission(False, 60.0, "tool write perUser")
    # The refused calls took nothing from bob's perUser bucket: two more are allowed.
    assert await admitted(limiter, "bob", "other", 3) == [True, True, False]
    # Only the tool's own name counts.
    assert (await limiter.admit("carol", "search-more")).allowed


async def test_local_shared_bucket_is_one_for_everyone(
        mock_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(RateLimitRules(shared=Bucket(5, 1.0)))
    answers = [await limiter.admit(f"user-{i}", "echo") for i in range(6)]
    assert [a.allowed for a in answers] == [True] * 5 + [False]
    assert answers[-1] == Admission(False, pytest.approx(0.2), "shared")


async def test_local_holds_at_most_max_keys_least_recently_used_out(
        mock_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(RateLimitRules(per_user=Bucket(1, 60.0)), max_keys=4)
    for user in ["a", "b", "c", "d"]:
        assert (await limiter.admit(user, None)).allowed
    assert not (await limiter.admit("a", None)).allowed  # "a" used most recently now
    assert (await limiter.admit("e", None)).allowed  # "b" evicted
    assert len(limiter) == 4
    assert (await limiter.admit("b", None)).allowed  # forgotten: full again
    assert not (await limiter.admit("a", None)).allowed  # kept
    mock_clock.jump(60.0)  # everyone full again: nothing worth keeping
    assert (await limiter.admit("z", None)).allowed
    assert len(limiter) == 1


async def test_nothing_configured_allows_everything() -> None:
    limiter = LocalRateLimiter(RateLimitRules())
    assert await limiter.admit("alice", "echo") is ADMITTED
    assert len(limiter) == 0


# --- the refusal ---------------------------------------------------------------------------------


def test_refusal_json() -> None:
    answer = refusal(7, Admission(False, 2.1, "tool search perUser"))
    assert orjson.loads(encode(answer)) == {
        "jsonrpc": "2.0", "id": 7,
        "error": {"code": -32029,
                  "message": "Rate limit exceeded: the tool search perUser limit; "
                             "retry after 3 s",
                  "data": {"retryAfterSeconds": 3}}}
    assert refusal("x", Admission(False, 0.01, "shared")).error.data == {"retryAfterSeconds": 1}
    assert retry_after_seconds(Admission(False, 5.0, "shared")) == 5
    with pytest.raises(ValueError):
        refusal(1, ADMITTED)


# --- in Redis ------------------------------------------------------------------------------------


def plan_for(port: int) -> RedisPlan:
    second = Duration.of(seconds=1)
    return RedisPlan(key_prefix=PREFIX, addr=f"127.0.0.1:{port}", dial_timeout=second,
                     read_timeout=second, write_timeout=second)


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    with running_redis(tmp_path) as (_, port):
        yield port


@contextlib.asynccontextmanager
async def connected(*connections: RedisConnection) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        for connection in connections:
            await nursery.start(connection.run)
        yield
        nursery.cancel_scope.cancel()


def never() -> None:
    raise AssertionError("Redis is up")


async def test_two_replicas_share_the_buckets(redis_port: int) -> None:
    rules = RateLimitRules(shared=Bucket(10, 1000.0), per_user=Bucket(3, 300.0),
                           tools={"search": ToolBuckets(shared=Bucket(2, 200.0),
                                                        per_user=Bucket(5, 50.0))})
    one, two = RedisConnection(plan_for(redis_port), PREFIX), \
        RedisConnection(plan_for(redis_port), PREFIX)
    a = RedisRateLimiter(one, rules, on_unavailable=never)
    b = RedisRateLimiter(two, rules, on_unavailable=never)
    async with connected(one, two):
        assert await admitted(a, "alice", None, 2) == [True, True]
        assert (await b.admit("alice", None)).allowed
        refused = await a.admit("alice", None)
        assert (refused.allowed, refused.limit) == (False, "perUser")
        assert 99.0 < refused.retry_after <= 100.0  # 100 s a token
        assert (await b.admit("bob", "search")).allowed
        assert (await a.admit("carol", "search")).allowed
        refused = await b.admit("dave", "search")
        assert (refused.allowed, refused.limit) == (False, "tool search shared")
        assert 99.0 < refused.retry_after <= 100.0
        # Five tokens taken from the shared bucket (the refused calls took none): 5 left.
        assert await admitted(b, None, None, 6) == [True] * 5 + [False]
        assert (await a.admit(None, None)).limit == "shared"

        keys = sorted(redis_command(redis_port, "KEYS", f"{PREFIX}ratelimit:*"))
        assert f"{PREFIX}ratelimit:shared" in keys
        assert f"{PREFIX}ratelimit:shared-tool:search" in keys
        assert not any("alice" in key or "bob" in key for key in keys)
        ttl = redis_command(redis_port, "PTTL", f"{PREFIX}ratelimit:shared")
        assert 999_000 < ttl <= 1_000_000  # until full again: all 10 tokens taken
        ttl = redis_command(redis_port, "PTTL", f"{PREFIX}ratelimit:shared-tool:search")
        assert 199_000 < ttl <= 200_000


async def test_redis_all_or_nothing_and_refill(redis_port: int) -> None:
    rules = RateLimitRules(shared=Bucket(100, 10_000.0), per_user=Bucket(2, 1.0),
                           tools={"write": ToolBuckets(per_user=Bucket(1, 60.0))})
    connection = RedisConnection(plan_for(redis_port), PREFIX)
    limiter = RedisRateLimiter(connection, rules, on_unavailable=never)
    async with connected(connection):
        assert (await limiter.admit("alice", "write")).allowed
        for _ in range(2):
            refused = await limiter.admit("alice", "write")
            assert (refused.allowed, refused.limit) == (False, "tool write perUser")
            assert 59.0 < refused.retry_after <= 60.0
            await trio.sleep(0.55)  # alice's perUser bucket is full again meanwhile
        # The refused calls took nothing from alice's perUser bucket: two calls, not zero.
        assert await admitted(limiter, "alice", "read", 3) == [True, True, False]
        await trio.sleep(0.55)  # 2 tokens/s: one token again
        assert await admitted(limiter, "alice", "read", 2) == [True, False]
        # Of the shared bucket: 1 + 2 + 1 taken, none by the refused calls.
        tokens = float(redis_command(redis_port, "HGET", f"{PREFIX}ratelimit:shared", "tokens"))
        assert 96.0 <= tokens < 96.05  # 0.01 token/s refilled meanwhile


async def test_redis_down_allows_and_says_so(tmp_path: Path) -> None:
    unavailable: list[None] = []
    rules = RateLimitRules(shared=Bucket(1, 100.0))
    with contextlib.ExitStack() as redis:
        _, port = redis.enter_context(running_redis(tmp_path))
        connection = RedisConnection(plan_for(port), PREFIX)
        limiter = RedisRateLimiter(connection, rules,
                                   on_unavailable=lambda: unavailable.append(None))
        async with connected(connection):
            assert await admitted(limiter, None, "echo", 2) == [True, False]
            await trio.to_thread.run_sync(redis.close)  # redis-server stopped
            assert await admitted(limiter, None, "echo", 3) == [True] * 3
            assert len(unavailable) == 3
    not_connected = RedisRateLimiter(RedisConnection(plan_for(port), PREFIX), rules,
                                     on_unavailable=lambda: unavailable.append(None))
    assert (await not_connected.admit("alice", "echo")).allowed
    assert len(unavailable) == 4
