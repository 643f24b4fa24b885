"""The call log's bounds, as an operator sees them: a call whose log cannot be written (past
the queue's bound, or Redis away) is counted once as ``unlogged`` (it cannot be resumed on
another replica) and nothing blocks. No Redis is needed to see it: an unconnected one is
exactly "Redis away"."""

from __future__ import annotations

import trio

from vmcp_trio.gateway.call_log import CallLog
from vmcp_trio.gateway.fleet import Fleet
from vmcp_trio.resources.plan import RedisStorage
from vmcp_trio.runtime.redis import RedisConnection


def call_log(max_pending: int) -> tuple[CallLog, list[str]]:
    redis = RedisConnection(RedisStorage(key_prefix="t:", addr="127.0.0.1:9"), "t:")
    log = CallLog(redis, Fleet(redis), ttl=60.0, max_pending=max_pending)
    events: list[str] = []
    log.on_event = events.append
    return log, events


def test_a_call_past_the_bound_is_counted_once_as_unlogged() -> None:
    log, events = call_log(max_pending=2)
    log.queue("s", "a", event=(0, b"x", None))
    log.queue("s", "a", event=(1, b"y", None))
    for seq in range(5):  # one call, refused many times: counted once
        log.queue("s", "b", event=(seq, b"z", None))
    log.queue("s", "c", fields={"owner": "r"})
    assert events == ["unlogged", "unlogged"]


async def test_calls_whose_batch_redis_refused_are_counted_as_unlogged() -> None:
    log, events = call_log(max_pending=100)
    log.queue("s", "a", event=(0, b"x", None))
    log.queue("s", "b", event=(0, b"y", None))
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        with trio.fail_after(5):
            while len(events) < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert events == ["unlogged", "unlogged"]
