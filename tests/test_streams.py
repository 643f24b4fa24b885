"""The session's SSE streams: ids that name their stream, replay after a position, one follower
at a time, no lost wake-up when events arrive while a follower is busy sending, and events handed
straight to a caught-up follower's connection by whoever pushes them."""

from __future__ import annotations

import pytest
import trio

from vmcp_trio.gateway.streams import EventStream, StreamGap, StreamRegistry, parse_event_id
from vmcp_trio.protocol.sse import SSEParser


def decode(events: list[bytes]) -> list[tuple[str | None, str]]:
    parser = SSEParser()
    return [(e.id, e.data) for chunk in events for e in parser.feed(chunk)]


async def test_follow_replays_after_a_position_and_ends_when_finished() -> None:
    stream = EventStream("r1")
    for payload in (b"a", b"b", b"c"):
        stream.push(payload)
    stream.finish()
    assert decode([e async for e in stream.follow(0)]) == [("r1.1", "b"), ("r1.2", "c")]
    assert stream.drained


async def test_events_pushed_while_the_follower_sends_are_not_lost() -> None:
    stream = EventStream("r1")
    received: list[bytes] = []

    async def slow_reader() -> None:
        async for event in stream.follow():
            received.append(event)
            await trio.sleep(0.01)  # the writer is busy: pushes happen meanwhile

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow_reader)
        await trio.sleep(0)
        stream.push(b"1")
        await trio.sleep(0.005)
        stream.push(b"2")
        stream.finish()
    assert [data for _, data in decode(received)] == ["1", "2"]


async def test_a_new_follower_takes_over() -> None:
    stream = EventStream("g")
    first: list[bytes] = []

    async def follow_into(target: list[bytes]) -> None:
        async for event in stream.follow():
            target.append(event)

    second: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow_into, first)
        await trio.sleep(0.01)
        stream.push(b"x")
        await trio.sleep(0.01)
        nursery.start_soon(follow_into, second)
        await trio.sleep(0.01)
        stream.push(b"y")
        stream.finish()
    assert [d for _, d in decode(first)] == ["x"]
    assert [d for _, d in decode(second)] == ["x", "y"] or [d for _, d in decode(second)] == [
        "y"]


async def test_a_reader_behind_the_buffer_is_told() -> None:
    stream = EventStream("r1", max_events=2)
    for payload in (b"a", b"b", b"c", b"d"):
        stream.push(payload)
    with pytest.raises(StreamGap):
        async for _ in stream.follow(0):
            pass


def test_priming_event_and_registry() -> None:
    registry = StreamRegistry(retry_ms=1500)
    stream = registry.open()
    stream.prime()
    assert stream.key == "r1" and registry.get("r1") is stream and len(registry) == 2
    assert parse_event_id("r12.7") == ("r12", 7)
    assert parse_event_id("nonsense") is None and parse_event_id("a.b") is None


async def _drain(stream: EventStream) -> None:
    stream.finish()
    async for _ in stream.follow():
        pass


async def test_delivered_streams_are_forgotten_and_the_registry_stays_bounded() -> None:
    registry = StreamRegistry(max_streams=64)
    live = [registry.open() for _ in range(10)]  # still being answered: kept
    for _ in range(500):
        stream = registry.open()
        stream.push(b"reply")
        await _drain(stream)
        assert len(registry) <= 2 * (len(live) + 1) + 17
    assert all(registry.get(stream.key) is stream for stream in live)
    for _ in range(100):  # full of undelivered streams: the oldest goes
        registry.open()
    assert len(registry) <= 64 and registry.get(live[0].key) is None


async def test_priming_event_carries_retry() -> None:
    stream = StreamRegistry(retry_ms=1500).open()
    stream.prime()
    stream.finish()
    raw = [e async for e in stream.follow()]
    assert raw == [b"id: r1.0\nretry: 1500\ndata: \n\n"]


class Connection:
    """A follower's connection as the stream sees it (:class:`DirectWriter`): takes what it is
    offered unless ``full``; ``holding`` stands for bytes the socket did not take."""

    def __init__(self) -> None:
        self.taken: list[bytes] = []
        self.full = False
        self.holding = False

    def write_now(self, data: bytes) -> bool:
        if self.full:
            return False
        self.taken.append(data)
        return True


async def test_a_caught_up_follower_is_written_by_the_pusher_and_its_task_only_when_needed(
        ) -> None:
    stream = EventStream("g")
    connection = Connection()
    written_by_task: list[bytes] = []

    async def follower() -> None:
        async for event in stream.follow(-1, connection):
            written_by_task.append(event)
            if event == b"":
                connection.holding = False  # the task flushed what was held

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower)
        await trio.sleep(0.01)
        stream.push(b"1")  # no task runs in between: the push itself wrote it
        assert decode(connection.taken) == [("g.0", "1")]
        connection.full = True
        stream.push(b"2")  # refused: the follower's task writes it
        await trio.sleep(0.01)
        assert decode(written_by_task) == [("g.1", "2")]
        connection.full = False
        connection.holding = True
        stream.push(b"3")  # taken, but part of it is held: the task is woken to flush
        await trio.sleep(0.01)
        assert written_by_task[-1] == b"" and not connection.holding
        stream.push(b"4")
        stream.finish()
    assert decode(connection.taken) == [("g.0", "1"), ("g.2", "3"), ("g.3", "4")]
    assert stream.drained

