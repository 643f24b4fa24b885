"""The embedded authorization server's tables cannot be filled from many addresses: the
registration and login budgets (per address and for every address together), and the bound on
registrations that never complete a login (memory and a real Redis)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from vmcp_trio.authserver.rates import AddressRate
from vmcp_trio.authserver.storage import RegisteredClient
from vmcp_trio.authserver.storage.memory import MemoryStorage
from vmcp_trio.authserver.storage.redis import RedisStorage
from vmcp_trio.resources.plan import RedisStorage as RedisPlan

from .authserver_helpers import Stack
from .fixtures.redis_cluster import running_redis
from .gateway_helpers import post_from

MAXIMAL = {
    "redirect_uris": [f"http://127.0.0.1:9/cb/{i}/" + "a" * 1970 for i in range(10)],
    "client_name": "n" * 200,
    "scope": " ".join(f"scope-{i:04d}" for i in range(360)),
    "token_endpoint_auth_method": "none",
}


async def test_registrations_from_many_addresses_are_bounded_together(
        authserver_stack: Stack) -> None:
    """150 maximal registrations, each from its own address (under the 20 a minute one address
    may make): past the 120 a minute of every address together, 429 with Retry-After."""
    statuses: list[int] = []
    waits: list[str] = []
    for n in range(150):
        status, headers = await post_from(f"{authserver_stack.issuer}/oauth/register",
                                          f"127.0.{n // 200 + 1}.{n % 200 + 2}", MAXIMAL)
        statuses.append(status)
        if status == 429:
            waits.append(headers["retry-after"])
    assert set(statuses) == {201, 429}
    assert 120 <= statuses.count(201) <= 130 and statuses[-1] == 429
    assert all(int(wait) >= 1 for wait in waits)


def test_the_rate_is_per_address_and_for_everyone() -> None:
    rate = AddressRate(2, 3)
    assert rate.retry_after("a", 0.0) is None and rate.retry_after("a", 0.0) is None
    refused = rate.retry_after("a", 0.0)
    assert refused is not None and refused[1] == "address"
    assert rate.retry_after("b", 0.0) is None  # a's refusal took nothing from everyone's
    refused = rate.retry_after("c", 0.0)
    assert refused is not None and refused[1] == "all" and refused[0] == 21  # 3 a minute
    assert rate.retry_after("c", 20.5) is None  # one token back for everyone


def _client(client_id: str, *, used: bool = False) -> RegisteredClient:
    now = time.time()
    return RegisteredClient(client_id=client_id, redirect_uris=("http://127.0.0.1:9/cb",),
                            token_endpoint_auth_method="none",
                            grant_types=("authorization_code",), client_name=None, scope=None,
                            secret_sha256=None, created_at=now, expires_at=now + 3600,
                            used=used)


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_registrations_never_used_are_bounded_and_a_used_one_stays(
        kind: str, tmp_path: Path) -> None:
    async def check(storage: MemoryStorage | RedisStorage) -> None:
        await storage.put_client(_client("first"))
        await storage.put_client(_client("first", used=True))  # its login completed
        for n in range(5):
            await storage.put_client(_client(f"unused-{n}"))
        kept = [n for n in range(5) if await storage.get_client(f"unused-{n}") is not None]
        assert kept == [2, 3, 4]  # the newest three unused
        stored = await storage.get_client("first")
        assert stored is not None and stored.used

    if kind == "memory":
        await check(MemoryStorage(max_unused_clients=3))
        return
    with running_redis(tmp_path) as (host, port):
        storage = RedisStorage(RedisPlan(key_prefix="t:", addr=f"{host}:{port}"), [b"k" * 32],
                               max_unused_clients=3)
        async with trio.open_nursery() as nursery:
            await nursery.start(storage.run)
            await check(storage)
            nursery.cancel_scope.cancel()
