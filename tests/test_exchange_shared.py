"""The token-exchange cache the replicas share through Redis: one exchange for the fleet.

Everything here is real: a redis-server (``tests/fixtures/redis_cluster.py``, fresh per test) and
the RFC 8693 grant of the ``oidc-provider`` test peer (``tests/fixtures/idp.py``), which counts
the exchanges it makes and can be made slow or failing. A "replica" is a :class:`TokenExchanger`
with its own HTTP client, its own :class:`RedisConnection` to the one Redis (held by a task in
the test's nursery, as the application would) and its own :class:`SharedExchangeCache`.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.auth.outgoing.exchange import ExchangedToken, ExchangeError, TokenExchanger
from vmcp_trio.auth.outgoing.shared_exchange import SharedExchangeCache
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.durations import Duration
from vmcp_trio.resources.plan import RedisStorage as RedisPlan
from vmcp_trio.runtime.redis import RedisConnection

from .fixtures.idp import DEFAULT_RESOURCE, Idp, running_idp
from .fixtures.redis_cluster import redis_command, running_redis

PREFIX = "vmcp:exchange:{default:quickstart}:"
SEAL_SECRET = secrets.token_bytes(32)


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(token_exchange={"trustedIssuers": [], "audiences": {
            "backend-a": {"accessTokenTTL": 600}, "backend-b": {"accessTokenTTL": 600}}}) as idp:
        yield idp


@pytest.fixture
def provider(idp: Idp) -> Iterator[Idp]:
    """The provider with its counters at zero, put back in mode "ok" after the test."""
    idp.reset_exchange_stats()
    try:
        yield idp
    finally:
        idp.set_exchange_mode("ok")


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    with running_redis(tmp_path) as (_, port):
        yield port


@dataclass
class Replica:
    exchanger: TokenExchanger
    cache: SharedExchangeCache
    connection: RedisConnection


def plan_for(port: int) -> RedisPlan:
    return RedisPlan(key_prefix=PREFIX, addr=f"127.0.0.1:{port}", dial_timeout=Duration.of(
        seconds=1), read_timeout=Duration.of(seconds=1), write_timeout=Duration.of(seconds=1))


def replica(idp: Idp, port: int, **options: Any) -> Replica:
    connection = RedisConnection(plan_for(port), PREFIX)
    cache = SharedExchangeCache(connection, [SEAL_SECRET], **options)
    client = idp.clients["confidential"]
    exchanger = TokenExchanger(HttpClient(), token_url=idp.token_endpoint,
                               client_id=client.client_id, client_secret=client.client_secret,
                               shared=cache)
    return Replica(exchanger, cache, connection)


@contextlib.asynccontextmanager
async def running(replicas: list[Replica], *, connect: bool = True) -> AsyncIterator[None]:
    """Each replica's Redis connection held by a task (as the application would), then shut."""
    async with trio.open_nursery() as nursery:
        if connect:
            for r in replicas:
                await nursery.start(r.connection.run)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()
            for r in replicas:
                await r.exchanger.client.aclose()


async def subject_token(idp: Idp) -> str:
    """An access token of the provider (a JWT), as a client of the gateway would present."""
    answer = await trio.to_thread.run_sync(
        lambda: idp.client_credentials_token(resource=DEFAULT_RESOURCE))
    token: str = answer["access_token"]
    return token


async def stats(idp: Idp) -> dict[str, Any]:
    return await trio.to_thread.run_sync(idp.exchange_stats)


async def ask_concurrently(calls: list[tuple[Replica, str, str]]) -> list[ExchangedToken]:
    """Every (replica, subject, audience) asked at once; the answers in order."""
    answers: list[ExchangedToken | None] = [None] * len(calls)

    async def ask(i: int, r: Replica, subject: str, audience: str) -> None:
        answers[i] = await r.exchanger.exchange(subject, audience=audience)
    async with trio.open_nursery() as nursery:
        for i, (r, subject, audience) in enumerate(calls):
            nursery.start_soon(ask, i, r, subject, audience)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


def stored(port: int) -> dict[str, str | None]:
    """Every key under the prefix with its value (None for a key that is not a string)."""
    keys: list[str] = []
    cursor = "0"
    while True:
        cursor, batch = redis_command(port, "SCAN", cursor, "MATCH", PREFIX + "*", "COUNT", 1000)
        keys.extend(batch)
        if cursor == "0":
            break
    out: dict[str, str | None] = {}
    for key in keys:
        kind = redis_command(port, "TYPE", key)
        out[key] = redis_command(port, "GET", key) if kind == "string" else None
    return out


async def test_three_replicas_make_one_exchange(provider: Idp, redis_port: int) -> None:
    """30 concurrent requests for one subject and audience over three replicas (the exchange
    made slow, so that they all miss while it runs): ONE exchange at the provider, every caller
    gets the same token, and later requests are answered from the caches."""
    replicas = [replica(provider, redis_port) for _ in range(3)]
    told: list[str] = []
    for each in replicas:
        each.cache.on_outcome = told.append  # what the metrics hear
    subject = await subject_token(provider)
    await trio.to_thread.run_sync(lambda: provider.set_exchange_mode("slow", 0.3))
    async with running(replicas):
        started = time.monotonic()
        answers = await ask_concurrently([(replicas[i % 3], subject, "backend-a")
                                          for i in range(30)])
        elapsed = time.monotonic() - started
        assert (await stats(provider))["total"] == 1
        assert len({a.access_token for a in answers}) == 1
        assert len(set(answers)) == 1  # same type and expiry too
        assert sorted(r.exchanger.exchanges for r in replicas) == [0, 0, 1]
        assert sum(r.cache.hits for r in replicas) == 2  # one Redis read per other replica
        assert all(r.cache.fallbacks == 0 for r in replicas)
        assert told == ["hit", "hit"]
        assert elapsed < 0.3 + 1.0, f"the others waited {elapsed:.2f} s"
        # Warm: 30 more, from the local caches, no exchange and no new Redis hit.
        again = await ask_concurrently([(replicas[i % 3], subject, "backend-a")
                                        for i in range(30)])
        assert {a.access_token for a in again} == {answers[0].access_token}
        assert (await stats(provider))["total"] == 1
        assert sum(r.cache.hits for r in replicas) == 2
        # A replica started later (an empty local cache) reads it from Redis.
        late = replica(provider, redis_port)
        async with running([late]):
            token = await late.exchanger.exchange(subject, audience="backend-a")
        assert token.access_token == answers[0].access_token
        assert (late.exchanger.exchanges, late.cache.hits) == (0, 1)
        assert (await stats(provider))["total"] == 1


async def test_another_audience_or_subject_is_another_exchange(provider: Idp,
                                                               redis_port: int) -> None:
    replicas = [replica(provider, redis_port) for _ in range(3)]
    first, second = await subject_token(provider), await subject_token(provider)
    async with running(replicas):
        a = await replicas[0].exchanger.exchange(first, audience="backend-a")
        b = await replicas[1].exchanger.exchange(first, audience="backend-b")
        c = await replicas[2].exchanger.exchange(second, audience="backend-a")
        assert len({a.access_token, b.access_token, c.access_token}) == 3
        counted = await stats(provider)
        assert counted["total"] == 3
        assert counted["byAudience"] == {"backend-a": 2, "backend-b": 1}
        # Each of the three keys, asked at every replica concurrently: no further exchange,
        # and each key gives its own token everywhere.
        calls = [(r, s, aud) for r in replicas for s, aud in
                 ((first, "backend-a"), (first, "backend-b"), (second, "backend-a"))]
        answers = await ask_concurrently(calls)
        expected = {(first, "backend-a"): a, (first, "backend-b"): b, (second, "backend-a"): c}
        for (_, s, aud), answer in zip(calls, answers, strict=True):
            assert answer.access_token == expected[(s, aud)].access_token
        assert (await stats(provider))["total"] == 3


async def test_redis_holds_no_token_in_clear(provider: Idp, redis_port: int) -> None:
    replicas = [replica(provider, redis_port) for _ in range(3)]
    subject = await subject_token(provider)
    async with running(replicas):
        answers = await ask_concurrently([(r, subject, aud) for r in replicas
                                          for aud in ("backend-a", "backend-b")])
    access_tokens = {a.access_token for a in answers}
    assert len(access_tokens) == 2
    rows = await trio.to_thread.run_sync(stored, redis_port)
    entries = [k for k in rows if k.startswith(PREFIX + "exchange:")]
    assert len(entries) == 2, rows  # one entry per key; the locks are released
    assert all(k.startswith(PREFIX) for k in rows)
    secrets_in_clear = [subject, *access_tokens]
    # Neither whole nor any JWT part (header, claims, signature) appears in a key or a value.
    fragments = {part for token in secrets_in_clear for part in token.split(".")}
    for key, value in rows.items():
        for fragment in fragments | set(secrets_in_clear):
            assert fragment not in key
            assert value is not None and fragment not in value
    for key in entries:
        ttl = await trio.to_thread.run_sync(redis_command, redis_port, "PTTL", key)
        assert 0 < ttl <= 600_000  # as long as the token may be reused, no longer


async def test_redis_down_means_local_exchanges_and_one_warning(
        provider: Idp, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Redis stopped under running replicas: every request still gets a token (each replica
    exchanges on its own), each replica counts its fallbacks and logs one warning for the
    outage, however many requests meet it, even after it asks Redis again."""
    caplog.set_level(logging.INFO, logger="vmcp.exchange")
    with contextlib.ExitStack() as redis:
        _, port = redis.enter_context(running_redis(tmp_path))
        replicas = [replica(provider, port, retry_after=0.2) for _ in range(3)]
        before, during = await subject_token(provider), await subject_token(provider)
        async with running(replicas):
            await ask_concurrently([(r, before, "backend-a") for r in replicas])
            assert (await stats(provider))["total"] == 1
            await trio.to_thread.run_sync(redis.close)  # redis-server stopped

            answers = await ask_concurrently([(r, during, "backend-a") for r in replicas
                                              for _ in range(5)])
            assert (await stats(provider))["total"] == 1 + 3  # one per replica: no fleet
            assert all(r.cache.fallbacks == 1 for r in replicas)
            assert len({a.access_token for a in answers}) == 3
            # Cached tokens are still answered locally, without Redis.
            for r in replicas:
                await r.exchanger.exchange(before, audience="backend-a")
            # After retry_after Redis is asked again, still down: no second warning.
            await trio.sleep(0.3)
            for r in replicas:
                await r.exchanger.exchange(during, audience="backend-b")
            assert all(r.cache.fallbacks == 2 for r in replicas)
            assert (await stats(provider))["total"] == 1 + 3 + 3
    warnings = [r for r in caplog.records
                if r.name == "vmcp.exchange" and r.levelno == logging.WARNING]
    assert len(warnings) == 3, [w.getMessage() for w in warnings]  # one per replica
    assert all("unavailable" in w.getMessage() for w in warnings)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert before not in logged and during not in logged
    assert not any(a.access_token in logged for a in answers)


async def test_a_connection_that_comes_up_later_falls_back_then_shares(
        provider: Idp, redis_port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A replica whose Redis connection is not up yet exchanges on its own (one fallback, one
    warning); once it is up and ``retry_after`` has passed, it reads from the fleet again."""
    caplog.set_level(logging.INFO, logger="vmcp.exchange")
    sharing = replica(provider, redis_port)
    late = replica(provider, redis_port, retry_after=0.2)
    first, second = await subject_token(provider), await subject_token(provider)
    async with running([sharing]):
        await sharing.exchanger.exchange(first, audience="backend-a")
        await sharing.exchanger.exchange(second, audience="backend-a")
        async with trio.open_nursery() as nursery:
            await late.exchanger.exchange(first, audience="backend-a")  # not connected
            assert (late.cache.fallbacks, late.exchanger.exchanges) == (1, 1)
            await nursery.start(late.connection.run)
            await trio.sleep(0.3)
            token = await late.exchanger.exchange(second, audience="backend-a")
            assert (late.cache.fallbacks, late.exchanger.exchanges, late.cache.hits) == (1, 1, 1)
            nursery.cancel_scope.cancel()
        await late.exchanger.client.aclose()
    assert token.access_token == (await sharing.exchanger.exchange(
        second, audience="backend-a")).access_token
    assert (await stats(provider))["total"] == 3
    messages = [r.getMessage() for r in caplog.records if r.name == "vmcp.exchange"]
    assert sum("unavailable" in m for m in messages) == 1
    assert sum("answers again" in m for m in messages) == 1


async def test_an_entry_opens_only_under_its_own_key(redis_port: int,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The sealing context is the Redis key: an entry copied under another key does not open
    there (it is treated as absent); nor does it open with another secret."""
    caplog.set_level(logging.WARNING, logger="vmcp.exchange")
    connection = RedisConnection(plan_for(redis_port), PREFIX)
    cache = SharedExchangeCache(connection, [SEAL_SECRET])
    other_secret = SharedExchangeCache(connection, [secrets.token_bytes(32)])
    token = ExchangedToken("the-access-token", "Bearer", time.time() + 600)
    key_a, key_b = "a" * 64, "b" * 64
    async with trio.open_nursery() as nursery:
        await nursery.start(connection.run)
        await cache.put(key_a, token, 60)
        found = await cache.get(key_a)
        assert found is not None and found.token == token
        assert time.time() + 55 < found.until <= time.time() + 60
        sealed = redis_command(redis_port, "GET", f"{PREFIX}exchange:{key_a}")
        assert "the-access-token" not in sealed
        assert redis_command(redis_port, "SET", f"{PREFIX}exchange:{key_b}", sealed) == "OK"
        assert await cache.get(key_b) is None
        assert await other_secret.get(key_a) is None
        assert await cache.get("c" * 64) is None  # absent
        assert (cache.hits, cache.fallbacks) == (1, 0)
        nursery.cancel_scope.cancel()
    unreadable = [r.getMessage() for r in caplog.records if "does not open" in r.getMessage()]
    assert len(unreadable) == 2
    assert all("the-access-token" not in m for m in unreadable)


async def test_failures_are_not_shared_and_free_the_others_at_once(provider: Idp,
                                                                    redis_port: int) -> None:
    """The exchange fails: the lock's holder leaves without a token, another replica takes the
    lock at once (not after its TTL) and tries for itself: one attempt per replica, each
    remembering its own failure, nothing stored."""
    replicas = [replica(provider, redis_port, lock_ttl=5.0) for _ in range(3)]
    subject = await subject_token(provider)
    await trio.to_thread.run_sync(lambda: provider.set_exchange_mode("fail"))
    failed = 0

    async def ask(r: Replica) -> None:
        nonlocal failed
        for _ in range(5):
            with contextlib.suppress(ExchangeError):
                await r.exchanger.exchange(subject, audience="backend-a")
                continue
            failed += 1
    async with running(replicas):
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for r in replicas:
                for _ in range(2):
                    nursery.start_soon(ask, r)
        elapsed = time.monotonic() - started
    assert failed == 30
    counted = await stats(provider)
    assert counted["attempts"] == counted["failed"] == 3  # one per replica: its back-off
    assert elapsed < 2.0, f"the others waited {elapsed:.2f} s for a failed holder"
    rows = await trio.to_thread.run_sync(stored, redis_port)
    assert rows == {}  # no entry, no lock left behind


async def test_a_holder_slower_than_the_lock_does_not_hold_the_others(provider: Idp,
                                                                      redis_port: int) -> None:
    """The exchange takes longer than the lock lasts: the others stop waiting once it has
    passed and exchange themselves (bounded, never forever); every caller gets a token."""
    replicas = [replica(provider, redis_port, lock_ttl=0.3) for _ in range(3)]
    subject = await subject_token(provider)
    await trio.to_thread.run_sync(lambda: provider.set_exchange_mode("slow", 1.0))
    async with running(replicas):
        started = time.monotonic()
        answers = await ask_concurrently([(r, subject, "backend-a") for r in replicas])
        elapsed = time.monotonic() - started
    assert all(a.access_token for a in answers)
    total = (await stats(provider))["total"]
    assert 2 <= total <= 3
    assert elapsed < 1.0 + 2 * 0.3 + 1.0, f"took {elapsed:.2f} s"
