"""The upstream HTTP client against a real hypercorn server: keep-alive reuse, streamed bodies
abandoned early, limits, and the retry of a request whose idle connection the server closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from vmcp_trio.http.asgi import lifespan
from vmcp_trio.http.client import HttpClient, HttpError

from .fixtures.asgi_body import read_body

connections: set[tuple[str, int]] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
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


async def test_idle_connections_expire_oldest_first(server: str, nursery: trio.Nursery) -> None:
    """A burst leaves as many idle connections as it had requests at once; those left unused
    for the expiry are closed (the pool shrinks back after a peak), the ones still in use
    stay."""
    connections.clear()
    client = HttpClient()
    async with trio.open_nursery() as burst:
        for _ in range(5):
            burst.start_soon(partial(client.request, "GET", server + "/a"))
    assert client._idle_count == 5 and len(connections) == 5
    await trio.sleep(0.3)
    await client.request("GET", server + "/a")  # the newest idle one, used again
    assert await client.close_idle(0.2) == 4
    assert client._idle_count == 1
    assert await client.close_idle(0.2) == 0
    nursery.start_soon(client.expire_idle_forever, 0.2)
    with trio.fail_after(2):
        while client._idle_count:
            await trio.sleep(0.05)
    assert not client._idle
    await client.request("GET", server + "/a")  # a fresh connection
    assert len(connections) == 6
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


async def answering(nursery: trio.Nursery, answer: bytes, seen: list[bytes]) -> int:
    """A raw server (a stand-in: no installable server answers with chosen bytes) that reads
    one request head, records it, answers ``answer`` and closes; its port."""
    listeners = await nursery.start(partial(trio.serve_tcp, partial(_answer, answer, seen), 0,
                                            host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def _answer(answer: bytes, seen: list[bytes], stream: trio.SocketStream) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    seen.append(data)
    await stream.send_all(answer)
    await stream.aclose()


async def test_a_body_without_length_ends_with_the_connection(nursery: trio.Nursery) -> None:
    seen: list[bytes] = []
    port = await answering(nursery, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                                    b"x-v:  padded \r\n\r\nuntil the end", seen)
    client = HttpClient()
    async with client.stream("GET", f"http://127.0.0.1:{port}/x") as response:
        assert (response.status, response.header("x-v")) == (200, "padded")
        assert await response.read(1000) == b"until the end"
    assert client._idle == {}  # not reusable: it ended with the connection
    assert seen[0].startswith(b"GET /x HTTP/1.1\r\nhost: 127.0.0.1:")
    await client.aclose()


@pytest.mark.parametrize(("answer", "problem"), [
    (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "closed the connection before"),
    (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", "larger than 65536 bytes"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
     "cannot be parsed"),
    (b"NOT HTTP\r\n\r\n", "cannot be parsed"),
])
async def test_a_broken_response_is_an_http_error(nursery: trio.Nursery, answer: bytes,
                                                  problem: str) -> None:
    port = await answering(nursery, answer, [])
    client = HttpClient()
    with pytest.raises(HttpError, match=problem):
        await client.request("GET", f"http://127.0.0.1:{port}/")
    await client.aclose()


@pytest.mark.parametrize(("name", "value"), [
    ("authorization", "Bearer token\r\nx-injected: 1"), ("authorization", "Bearer token\n"),
    ("bad name", "x"), ("x-nul", "a\0b"),
])
async def test_a_header_that_would_break_the_framing_is_never_sent(
        nursery: trio.Nursery, name: str, value: str) -> None:
    seen: list[bytes] = []
    port = await answering(nursery, b"HTTP/1.1 204 No Content\r\n\r\n", seen)
    client = HttpClient()
    with pytest.raises(HttpError, match="not a valid header"):
        await client.request("GET", f"http://127.0.0.1:{port}/", headers=[(name, value)])
    assert seen == []
    await client.aclose()


async def test_a_body_that_came_with_its_head_is_whole_at_once(nursery: trio.Nursery,
                                                               server: str) -> None:
    port = await answering(nursery, b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nwhole", [])
    client = HttpClient()
    async with client.stream("GET", f"http://127.0.0.1:{port}/") as response:
        assert response.arrived_whole() == b"whol" and response.complete
    assert client._idle == {}  # a byte more than its length: the connection is not reused
    async with client.stream("GET", server + "/stream") as response:
        assert response.arrived_whole() is None  # an event stream is still coming
    await client.aclose()


async def _in_two_parts(answer: bytes, stream: trio.SocketStream) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    cut = answer.index(b"content-length") + 4  # a whole header in the first part
    await stream.send_all(answer[:cut])
    await trio.sleep(0.1)
    await stream.send_all(answer[cut:])
    await stream.aclose()


async def test_a_head_within_the_bound_is_taken_when_it_comes_in_parts(
        nursery: trio.Nursery) -> None:
    answer = b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 700 + b"\r\ncontent-length: 2\r\n\r\nok"
    listeners = await nursery.start(partial(trio.serve_tcp, partial(_in_two_parts, answer), 0,
                                            host="127.0.0.1"))
    client = HttpClient(max_header_bytes=1000)
    port = listeners[0].socket.getsockname()[1]
    status, _, body = await client.request("GET", f"http://127.0.0.1:{port}/")
    assert (status, body) == (200, b"ok")
    await client.aclose()


async def _stalling(head: bytes, stream: trio.SocketStream) -> None:
    """Read a request, send ``head`` (maybe nothing, maybe a head and part of a body), then
    say nothing more until the client leaves."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    if head:
        await stream.send_all(head)
    await trio.sleep_forever()


async def test_each_phase_has_its_deadline(nursery: trio.Nursery) -> None:
    """:class:`Deadlines`: a server that never answers is an error naming the head's wait,
    one that stops in the middle of a body names the body's, and a connection that cannot be
    made in time names the connect; none is tried again, and none waits longer."""
    from vmcp_trio.http.client import Deadlines

    ports = []
    for head in (b"", b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789"):
        listeners = await nursery.start(partial(trio.serve_tcp, partial(_stalling, head), 0,
                                                host="127.0.0.1"))
        ports.append(int(listeners[0].socket.getsockname()[1]))
    client = HttpClient(deadlines=Deadlines(connect=0.3, head=0.3, body_idle=0.3))

    class Unanswering:
        async def addresses(self, host: str, port: int) -> list[str]:
            await trio.sleep_forever()
            return []

    with trio.fail_after(5):
        with pytest.raises(HttpError, match=r"sent no response head within 0\.3s"):
            await client.request("POST", f"http://127.0.0.1:{ports[0]}/mcp", body=b"{}")
        with pytest.raises(HttpError, match=r"sent no more of the response within 0\.3s"):
            await client.request("GET", f"http://127.0.0.1:{ports[1]}/")
        with pytest.raises(HttpError, match=r"took longer than 0\.3s"):
            await client.request("GET", f"http://127.0.0.1:{ports[0]}/",
                                 guard=Unanswering())
    await client.aclose()
