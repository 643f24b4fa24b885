"""Subscriptions across a Sentinel failover: each is renewed on the new master as soon as a
sentinel announces it, even when its connection survived (a graceful failover leaves the old
master up as a replica). A real Redis master, replica and three Sentinels."""

from __future__ import annotations

from pathlib import Path

import trio

from vmcp_trio.resources.plan import RedisStorage
from vmcp_trio.runtime.redis import RedisConnection

from .fixtures.redis_cluster import running_redis_cluster


async def test_a_failover_renews_every_subscription_on_the_new_master(tmp_path: Path) -> None:
    with running_redis_cluster(tmp_path) as cluster:
        redis = RedisConnection(RedisStorage(key_prefix="t:", master_name=cluster.master_name,
                                             sentinel_addrs=tuple(cluster.sentinel_addrs())),
                                "t:")
        heard: list[str] = []
        renewed: list[str] = []
        redis.subscribe("test messages", "news", heard.append)
        redis.on_task_restart = renewed.append
        async with trio.open_nursery() as nursery:
            await nursery.start(redis.run)

            async def delivered(text: str) -> None:
                with trio.fail_after(10):
                    while text not in heard:
                        await redis.publish("news", text)
                        await trio.sleep(0.1)

            await delivered("before")
            old = cluster.current_master()
            cluster.command(cluster.sentinel_ports[0], "SENTINEL", "FAILOVER",
                            cluster.master_name)
            with trio.fail_after(30):
                while redis.failovers == 0:
                    await trio.sleep(0.05)
            assert cluster.current_master() != old
            with trio.fail_after(5):  # renewed at once, not when its connection happens to break
                while "test messages" not in renewed:
                    await trio.sleep(0.05)
            await delivered("after")
            nursery.cancel_scope.cancel()
