"""hypercorn with vmcp's keep-alive timer: responses intact, keep-alive connections closed after
the idle timeout (and not before), a connection the client leaves closed at once, and a
graceful shutdown that waits for a request in flight."""

from __future__ import annotations

from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from vmcp_trio.http import hypercorn_tuning
from vmcp_trio.http.asgi import lifespan, send_json

DISCONNECTED: list[str] = []


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["path"] == "/hang":  # answers only when the client is gone (never, then)
        while (await receive())["type"] != "http.disconnect":
            pass
        DISCONNECTED.append(scope["path"])
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/slow":
        await trio.sleep(1.0)
    await send_json(send, 200, {"path": scope["path"]})


async def request(stream: trio.SocketStream, path: str) -> bytes:
    await stream.send_all(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    data = b""
    while not data.endswith(b"}"):
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
    return data


async def start(nursery: trio.Nursery, stop: trio.Event, keep_alive: float) -> int:
    assert hypercorn_tuning.install()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = keep_alive
    config.graceful_timeout = 5
    binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
    return int(binds[0].rsplit(":", 1)[1])


async def test_keep_alive_timeout_is_kept() -> None:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, stop, keep_alive=0.6)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        for i in range(5):  # busy well past the timeout in total: never closed under use
            reply = await request(stream, f"/r{i}")
            assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(f'/r{i}"}}'.encode())
            await trio.sleep(0.3)
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b""  # idle: closed by the server
        stop.set()


async def test_a_connection_the_client_leaves_is_closed_at_once() -> None:
    """Idle or in the middle of a request: when the client closes its side, the server closes
    its own as soon as the request has ended, not when the idle timeout (30 s here) or the
    shutdown comes."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, stop, keep_alive=30)
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        assert (await request(idle, "/one")).startswith(b"HTTP/1.1 200")
        await idle.send_eof()
        with trio.fail_after(2):
            assert await idle.receive_some(100) == b""

        DISCONNECTED.clear()
        busy = await trio.open_tcp_stream("127.0.0.1", port)
        await busy.send_all(b"GET /hang HTTP/1.1\r\nhost: x\r\n\r\n")
        await trio.sleep(0.1)
        await busy.send_eof()
        with trio.fail_after(2):
            assert await busy.receive_some(100) == b""
        assert DISCONNECTED == ["/hang"]
        stop.set()


async def test_shutdown_waits_for_the_request_in_flight() -> None:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, stop, keep_alive=30)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        results: list[bytes] = []

        async def slow() -> None:
            results.append(await request(stream, "/slow"))

        nursery.start_soon(slow)
        await trio.sleep(0.2)
        stop.set()  # shut down while /slow is running
    assert results and results[0].startswith(b"HTTP/1.1 200")
    assert results[0].endswith(b'"/slow"}')
