"""The upstream HTTP client against a real hypercorn server: keep-alive reuse, streamed bodies
abandoned early, limits, and the retry of a request whose idle connection the server closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from vmcp_trio.http.client import HttpClient, HttpError

from .fixtures.asgi_body import read_body

connections: set[tuple[str, int]] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    connections.add(tuple(scope["client"]))
    body = await read_body(receive)
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(1000):
            await send({"type": "http.response.body", "body": b"data: %d\n\n" % i,
                        "more_body": True})
            await trio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"x-echo", path.encode())]})
    await send({"type": "http.response.body", "body": b'{"got":' + str(len(body)).encode()
                + b"}" + (b" " * 1000 if path == "/big" else b"")})


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[str]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 0.5
    binds = await nursery.start(serve, app, config)
    yield binds[0]


async def test_requests_reuse_one_connection(server: str) -> None:
    connections.clear()
    client = HttpClient()
    for _ in range(5):
        status, headers, body = await client.request("POST", server + "/x?y=1", body=b"hello")
        assert status == 201 and body == b'{"got":5}'
        assert (b"x-echo", b"/x") in headers
    assert len(connections) == 1
    await client.aclose()


async def test_abandoned_stream_closes_its_connection(server: str) -> None:
    connections.clear()
    client = HttpClient()
    async with client.stream("GET", server + "/stream") as response:
        assert response.header("Content-Type") == "text/event-stream"
        async for chunk in response.iter_bytes():
            assert chunk.startswith(b"data: 0")
            break
    status, _, _ = await client.request("GET", server + "/after")
    assert status == 201
    assert len(connections) == 2  # the abandoned one was not reused
    await client.aclose()


async def test_body_limit(server: str) -> None:
    client = HttpClient()
    with pytest.raises(HttpError, match="larger than 100 bytes"):
        await client.request("GET", server + "/big", limit=100)
    await client.aclose()


async def test_idle_connection_closed_by_the_server_is_retried(server: str) -> None:
    connections.clear()
    client = HttpClient()
    await client.request("GET", server + "/one")
    await trio.sleep(1.0)  # past the server's keep-alive timeout: it closes the idle socket
    status, _, body = await client.request("POST", server + "/two", body=b"abc")
    assert status == 201 and body == b'{"got":3}'
    assert len(connections) == 2
    await client.aclose()


async def test_connection_refused_is_an_http_error() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # a port nobody listens on
    client = HttpClient()
    with pytest.raises(HttpError, match=f"cannot connect to 127.0.0.1:{port}"):
        await client.request("GET", f"http://127.0.0.1:{port}/")
    with pytest.raises(HttpError, match="not an absolute"):
        await client.request("GET", "ftp://x/")


async def test_idle_connections_are_bounded_in_all(server: str) -> None:
    """Many origins (here the same server under three names) cannot pile up idle connections
    past ``max_idle``: the one over it is closed instead of kept."""
    connections.clear()
    client = HttpClient(max_idle=2)
    port = server.rsplit(":", 1)[1]
    for host in ("127.0.0.1", "localhost", "127.0.0.1"):
        await client.request("GET", f"http://{host}:{port}/a")
    await client.request("GET", f"http://[::ffff:127.0.0.1]:{port}/a")
    assert sum(len(idle) for idle in client._idle.values()) == 2
    await client.aclose()


async def test_a_guarded_request_never_reuses_an_unguarded_connection(server: str) -> None:
    """A connection made to whatever a name resolved to is never taken for a request that
    must go through a guard (which chose its address itself)."""

    class Loopback:
        async def addresses(self, host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

    connections.clear()
    client = HttpClient()
    await client.request("GET", server + "/plain")
    await client.request("GET", server + "/guarded", guard=Loopback())
    await client.request("GET", server + "/guarded-again", guard=Loopback())
    assert len(connections) == 2  # one plain, one guarded (reused by the second)
    await client.aclose()
