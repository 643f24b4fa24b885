"""WebSockets on the lean server and from :func:`open_websocket` (``http/websocket.py``), against
each other and against trio-websocket, a WebSocket implementation written by others: messages
of both kinds and every size arrive whole and in order, pings are answered, the bounds hold,
a refused or broken handshake is a clear error, and a peer that stops reading cannot hold a
writer for ever."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketRequest,
    open_websocket_url,
    serve_websocket,
)

from vmcp_trio.http import websocket as websocket_module
from vmcp_trio.http.serving import listen, serve, server_config
from vmcp_trio.http.websocket import WebSocketError, WebSocketRejected, open_websocket

from .proxy_helpers import raw_http


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes every message; refuses ``/refused``; closes with 4000 on the text ``bye``."""
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    if scope["path"] == "/refused":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") == "bye":
            await send({"type": "websocket.close", "code": 4000, "reason": "asked"})
            return
        await send({"type": "websocket.send", **{k: v for k, v in message.items()
                                                   if k in ("bytes", "text") and v is not None}})


@asynccontextmanager
async def lean_server(app: Any = echo_app) -> AsyncIterator[str]:
    config = server_config("127.0.0.1", 0, max_header_bytes=16 * 1024)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve, app, config, listen(config),
                                           shutdown_trigger=trio.sleep_forever))
        yield urls[0].replace("http://", "ws://")
        nursery.cancel_scope.cancel()


async def test_messages_of_every_size_and_kind_come_back_whole_and_in_order() -> None:
    sizes = [0, 1, 125, 126, 65535, 65536, 300_000]
    async with lean_server() as url, open_websocket(url + "/echo") as socket:
        for size in sizes:
            await socket.send(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        await socket.send("héllo")
        for size in sizes:
            message = await socket.receive()
            assert isinstance(message, bytes) and len(message) == size
        assert await socket.receive() == "héllo"
        await socket.send("bye")
        assert await socket.receive() is None
        assert (socket.close_code, socket.close_reason) == (4000, "asked")


async def test_many_tasks_sending_at_once_never_interleave_frames() -> None:
    """Messages large enough to fill the socket, sent by many tasks while the echo reads
    them: every one arrives intact, each task's in its own order."""
    async with lean_server() as url, open_websocket(url + "/echo") as socket:
        async def sender(tag: int) -> None:
            for n in range(5):
                await socket.send(bytes([tag, n]) * 40_000)

        received: list[bytes] = []
        async with trio.open_nursery() as nursery:
            for tag in range(8):
                nursery.start_soon(sender, tag)
            with trio.fail_after(20):
                while len(received) < 40:
                    message = await socket.receive()
                    assert isinstance(message, bytes)
                    received.append(message)
        for message in received:
            assert message == message[:2] * 40_000
        for tag in range(8):
            assert [m[1] for m in received if m[0] == tag] == list(range(5))


async def test_trio_websocket_as_the_client_of_the_lean_server() -> None:
    """Another implementation's client: fragmented and whole messages, pings, the close."""
    async with lean_server() as url, open_websocket_url(url + "/echo") as socket:
        await socket.send_message(b"a" * 70_000)
        assert await socket.get_message() == b"a" * 70_000
        await socket.ping(b"12345678")  # answered, or trio-websocket would wait
        await socket.send_message("bye")
        with pytest.raises(ConnectionClosed) as closed:
            await socket.get_message()
        assert closed.value.reason.code == 4000


async def test_open_websocket_against_a_trio_websocket_server() -> None:
    async def handler(request: WebSocketRequest) -> None:
        if request.headers and dict(request.headers).get(b"authorization") != b"Bearer t":
            await request.reject(401)
            return
        socket = await request.accept()
        await socket.ping(b"ping")
        message = await socket.get_message()
        await socket.send_message(message)
        await socket.aclose(4001, "done")

    async with trio.open_nursery() as nursery:
        servers = await nursery.start(partial(serve_websocket, handler, "127.0.0.1", 0,
                                              ssl_context=None))
        url = f"ws://127.0.0.1:{servers.port}/x"
        async with open_websocket(url, [(b"authorization", b"Bearer t")]) as socket:
            await socket.send(b"hi")
            assert await socket.receive() == b"hi"
            assert await socket.receive() is None
            assert socket.close_code == 4001
        with pytest.raises(WebSocketRejected) as refused:
            async with open_websocket(url, [(b"authorization", b"Bearer x")]):
                pass
        assert refused.value.status == 401
        nursery.cancel_scope.cancel()


async def test_a_refusal_is_403_and_a_bad_handshake_400() -> None:
    async with lean_server() as url:
        with pytest.raises(WebSocketRejected) as refused:
            async with open_websocket(url + "/refused"):
                pass
        assert refused.value.status == 403
        http_url = url.replace("ws://", "http://")
        reply, _ = await raw_http(http_url, b"GET /echo HTTP/1.1\r\nHost: x\r\n"
                                            b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                                  answered=True)
        assert reply.startswith(b"HTTP/1.1 400"), reply[:100]


async def test_a_message_past_the_bound_closes_with_1009() -> None:
    async with lean_server() as url, open_websocket(url + "/echo",
                                                    max_message_bytes=1000) as socket:
        await socket.send(b"x" * 1001)  # echoed: too big for this side
        assert await socket.receive() is None
        assert socket.close_code == 1009


async def test_handshake_and_connection_failures_are_clear_errors() -> None:
    with pytest.raises(WebSocketError, match="not a ws://"):
        async with open_websocket("http://127.0.0.1:1/x"):
            pass
    with pytest.raises(WebSocketError,
                       match=r"^cannot connect to 127\.0\.0\.1:1: connection refused$"):
        async with open_websocket("ws://127.0.0.1:1/x"):
            pass
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts, never answers
    port = listener.getsockname()[1]
    with pytest.raises(WebSocketError, match=r"within 0\.5 s"):
        async with open_websocket(f"ws://127.0.0.1:{port}/x", timeout=0.5):
            pass
    listener.close()


async def test_a_peer_that_stops_reading_cannot_hold_a_writer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that accepts and then never reads: the client's writes fill the socket, and
    the write that cannot finish ends the connection after the write limit, even though the
    writer's own task was cancelled meanwhile (a half-written frame is never left behind)."""
    monkeypatch.setattr(websocket_module, "WRITE_LIMIT", 0.5)
    accepted = trio.Event()

    async def deaf(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        accepted.set()
        await trio.sleep_forever()

    async with lean_server(deaf) as url, open_websocket(url + "/") as socket:
        await accepted.wait()
        with trio.fail_after(10), pytest.raises(WebSocketError, match="took nothing"):
            with trio.move_on_after(0.1):  # cancelled mid-write: the write still finishes
                while True:
                    await socket.send(b"x" * 60_000)
            while True:
                await socket.send(b"x" * 60_000)
        assert socket.close_code == 1006
