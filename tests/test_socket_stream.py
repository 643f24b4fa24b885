"""The lean socket stream keeps trio's stream contract: bytes whole and in order, cancellation
before any byte moves, reads that let other tasks run, trio's errors, TCP_NODELAY."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import pytest
import trio

from vmcp_trio.http.socket_stream import LeanSocketStream, adopt


def _pair() -> tuple[LeanSocketStream, LeanSocketStream]:
    left, right = socket.socketpair()
    return LeanSocketStream(left), LeanSocketStream(right)


async def test_a_write_larger_than_the_socket_takes_arrives_whole_and_in_order() -> None:
    writer, reader = _pair()
    payload = bytes(range(256)) * 16384  # 4 MiB: many times what the socket holds
    received = bytearray()

    async def read_slowly() -> None:
        while len(received) < len(payload):
            received.extend(await reader.receive_some(7000))
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_slowly)
        await writer.send_all(payload)
    assert bytes(received) == payload


async def test_a_cancelled_task_moves_no_byte() -> None:
    writer, reader = _pair()
    with trio.CancelScope() as scope:
        scope.cancel()
        await writer.send_all(b"never")
    assert scope.cancelled_caught
    with pytest.raises(BlockingIOError):
        reader.socket.recv(10)
    with trio.CancelScope() as scope:
        scope.cancel()
        await reader.receive_some(10)
    assert scope.cancelled_caught


async def _ticks_meanwhile(operations: int, operation: Callable[[], Awaitable[object]]) -> int:
    """How often another task ran while ``operation`` ran ``operations`` times."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.sleep(0)
        before = ticks
        for _ in range(operations):
            await operation()
        nursery.cancel_scope.cancel()
    return ticks - before


async def test_a_peer_that_keeps_the_socket_full_does_not_hold_the_loop() -> None:
    writer, reader = _pair()
    writer.socket.sendall(b"x" * 2000)  # everything the reader will ask for is already there
    assert await _ticks_meanwhile(1000, lambda: reader.receive_some(2)) >= 900
    with pytest.raises(BlockingIOError):  # the 1,000 reads took the 2,000 bytes, no more
        reader.socket.recv(10)


async def test_writes_yield_too() -> None:
    writer, reader = _pair()
    assert await _ticks_meanwhile(100, lambda: writer.send_all(b"y")) >= 90
    assert reader.socket.recv(1000) == b"y" * 100


async def test_trio_errors_for_a_closed_stream_and_a_broken_connection() -> None:
    writer, reader = _pair()
    await reader.aclose()
    await reader.aclose()  # twice is fine, as with trio's
    with pytest.raises(trio.ClosedResourceError):
        await reader.receive_some(10)
    with pytest.raises(trio.BrokenResourceError) as raised:
        for _ in range(100):  # the first write may still be taken before the peer's reset
            await writer.send_all(b"z" * 65536)
    assert isinstance(raised.value.__cause__, OSError)
    await writer.aclose()


async def test_closing_a_stream_another_task_waits_on_ends_that_wait() -> None:
    _, reader = _pair()
    outcome: list[BaseException] = []

    async def wait_for_data() -> None:
        try:
            await reader.receive_some(10)
        except trio.ClosedResourceError as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_data)
        await trio.sleep(0.05)
        await reader.aclose()
    assert len(outcome) == 1


async def test_send_eof_ends_the_peers_reads_and_the_stream_still_reads() -> None:
    writer, reader = _pair()
    await writer.send_all(b"last")
    await writer.send_eof()
    assert await reader.receive_some(10) == b"last"
    assert await reader.receive_some(10) == b""
    await reader.send_all(b"back")
    assert await writer.receive_some(10) == b"back"


async def test_tcp_connections_are_adopted_with_no_delay() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    stream = adopt(await trio.open_tcp_stream("127.0.0.1", port))
    accepted = await listener.accept()
    assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    await stream.send_all(b"hello")
    assert await accepted.receive_some(10) == b"hello"
    for closing in (stream, accepted, listener):
        await closing.aclose()
