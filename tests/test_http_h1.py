"""The lean HTTP/1.1 server (``http/h1.py`` under ``http/serving.serve``), on the wire: replies
in one piece, keep-alive and its idle bound, pipelining in order, bounded and refused heads,
bodies chunked both ways, ``100 Continue``, HEAD, HTTP/1.0, an app's failure kept to its request,
a client that leaves seen by an event stream, HTTP/2 with prior knowledge handed to hypercorn,
and a drain that lets a request in flight finish while idle connections close."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import h11
import httpx2
import pytest
import trio

from vmcp_trio.http.asgi import http_request as request_of
from vmcp_trio.http.asgi import open_stream, send_json, send_text
from vmcp_trio.http.serving import listen, serve, server_config

LEFT: list[str] = []


async def app(scope: Any, receive: Any, send: Any) -> None:
    request = await request_of(scope, receive, send)
    if request is None:
        return
    path = request.path
    if path == "/fail":
        raise RuntimeError("the app broke")
    if path == "/fail-late":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("the app broke mid-answer")
    if path == "/stream":
        async with open_stream(request, send) as (writer, _):
            await writer.write(b"data: one\n\n")
            await trio.sleep_forever()
        LEFT.append(path)
        return
    if path == "/flood":  # more than the socket takes at once, written without waiting
        async with open_stream(request, send) as (writer, _):
            sent = 0
            while not writer.holding:
                assert writer.write_now(b"data: %d %b\n\n" % (sent, b"x" * 60_000))
                sent += 1
            assert not writer.write_now(b"data: refused while bytes are held\n\n")
            await writer.write(b"data: last %d\n\n" % sent)  # after the held bytes
        return
    if path == "/chunks":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        for part in (b"a", b"bb", b"ccc"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/slow":
        await trio.sleep(1.0)
    if path == "/bad-header":
        await send_text(send, 200, "x", headers=[("x-injected", "a\r\nset-cookie: b")])
        return
    body = await request.body(1 << 20)
    await send_json(send, 200, {"path": path, "method": request.method, "body": body.decode(),
                                "x": request.header("x-v"),
                                "query": request.query_string.decode()})


@asynccontextmanager
async def server(*, idle: float = 30.0, max_head: int = 16 * 1024) -> AsyncIterator[
        tuple[int, trio.Event]]:
    config = server_config("127.0.0.1", 0, max_header_bytes=max_head, idle_seconds=idle)
    config.graceful_timeout = 3
    sockets = listen(config)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve, app, config, sockets,
                                           shutdown_trigger=stop.wait))
        yield int(urls[0].rsplit(":", 1)[1]), stop
        stop.set()


async def read_until_closed(stream: trio.SocketStream, seconds: float = 5) -> bytes:
    data = b""
    with trio.fail_after(seconds):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def read_answer(stream: trio.SocketStream) -> bytes:
    """One answer with a Content-Length body."""
    data = b""
    with trio.fail_after(5):
        while True:
            head, end, body = data.partition(b"\r\n\r\n")
            if end:
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                if len(body) >= length:
                    return data
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk


async def test_a_json_reply_is_one_write_and_the_connection_is_kept() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        for i in range(3):
            body = b'{"n":%d}' % i
            await stream.send_all(b"POST /p%d?x=%d HTTP/1.1\r\nhost: h\r\ncontent-length: %d"
                                  b"\r\n\r\n%b" % (i, i, len(body), body))
            with trio.fail_after(5):
                first = await stream.receive_some(65536)
            assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(
                b'"body":"{\\"n\\":%d}","x":null,"query":"x=%d"}' % (i, i)), first
            assert b"\r\ndate: " in first and b"connection: close" not in first


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"".join(b"GET /%d HTTP/1.1\r\nhost: h\r\n\r\n" % i
                                       for i in range(5)) + b"GET /last HTTP/1.1\r\nhost: h\r\n"
                                                            b"connection: close\r\n\r\n")
        data = await read_until_closed(stream)
        paths = [part.split(b'"')[0] for part in data.split(b'{"path":"/')[1:]]
        assert paths == [b"0", b"1", b"2", b"3", b"4", b"last"]
        assert data.count(b"HTTP/1.1 200 OK") == 6


@pytest.mark.parametrize(("wire", "status"), [
    (b"GET / HTTP/1.1\r\nhost: h\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n", b"431"),
    (b"GET / HTTP/1.1\r\nhost: h\r\nx-big: " + b"a" * 20_000, b"431"),  # never finished
    (b"POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", b"400"),
    (b"GET /\xff HTTP/1.1\r\nhost: h\r\n\r\n", b"400"),
    (b"GET @127.0.0.1/x HTTP/1.1\r\nhost: h\r\n\r\n", b"400"),
    (b"GET http://other.example/x HTTP/1.1\r\nhost: h\r\n\r\n", b"400"),
    (b"GET / HTTP/1.1\r\nbad header\r\n\r\n", b"400"),
    (b"POST / HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", b"400"),
])
async def test_bad_heads_are_refused_and_the_connection_closed(wire: bytes,
                                                                status: bytes) -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(wire)
        data = await read_until_closed(stream)
        assert data.startswith(b"HTTP/1.1 " + status), data[:200]


async def test_a_chunked_body_in_and_a_chunked_answer_out() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"POST /echo HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked"
                              b"\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        assert (await read_answer(stream)).endswith(b'"body":"abcde","x":null,"query":""}')
        await stream.send_all(b"GET /chunks HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n")
        data = await read_until_closed(stream)
        assert b"transfer-encoding: chunked\r\n" in data
        assert data.endswith(b"\r\n\r\n1\r\na\r\n2\r\nbb\r\n3\r\nccc\r\n0\r\n\r\n")


async def test_continue_head_and_http_1_0() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n"
                              b"expect: 100-continue\r\n\r\n")
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        await stream.send_all(b"ok")
        assert (await read_answer(stream)).endswith(b'"body":"ok","x":null,"query":""}')
        await stream.send_all(b"HEAD /h HTTP/1.1\r\nhost: h\r\n\r\n")
        with trio.fail_after(5):
            head = await stream.receive_some(65536)
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
        old = await trio.open_tcp_stream("127.0.0.1", port)
        await old.send_all(b"GET /chunks HTTP/1.0\r\n\r\n")
        data = await read_until_closed(old)  # no chunks for HTTP/1.0: the body ends with it
        assert b"transfer-encoding" not in data and data.endswith(b"\r\n\r\nabbccc")


async def test_an_app_failure_stays_with_its_request() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /fail HTTP/1.1\r\nhost: h\r\n\r\n")
        assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 500 ")
        late = await trio.open_tcp_stream("127.0.0.1", port)
        await late.send_all(b"GET /fail-late HTTP/1.1\r\nhost: h\r\n\r\n")
        data = await read_until_closed(late)  # cut: no end-of-body chunk
        assert data.startswith(b"HTTP/1.1 200") and not data.endswith(b"0\r\n\r\n")
        injected = await trio.open_tcp_stream("127.0.0.1", port)
        await injected.send_all(b"GET /bad-header HTTP/1.1\r\nhost: h\r\n\r\n")
        data = await read_until_closed(injected)
        assert data.startswith(b"HTTP/1.1 500 ") and b"set-cookie" not in data
        fine = await trio.open_tcp_stream("127.0.0.1", port)
        await fine.send_all(b"GET /ok HTTP/1.1\r\nhost: h\r\n\r\n")
        assert (await read_answer(fine)).startswith(b"HTTP/1.1 200")


async def test_an_event_stream_learns_that_its_client_left() -> None:
    LEFT.clear()
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /stream HTTP/1.1\r\nhost: h\r\n\r\n")
        data = b""
        with trio.fail_after(5):
            while b"data: one" not in data:
                data += await stream.receive_some(65536)
        assert b"content-type: text/event-stream" in data
        await stream.aclose()
        with trio.fail_after(5):
            while not LEFT:
                await trio.sleep(0.01)


async def test_an_event_stream_written_without_waiting_keeps_its_bytes_in_order() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /flood HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n")
        await trio.sleep(0.3)  # the server fills the socket and holds the rest
        data = await read_until_closed(stream, 20)
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("host", "h")]))
    client.receive_data(data)
    body = b""
    while not isinstance(event := client.next_event(), h11.EndOfMessage | h11.NEED_DATA):
        if isinstance(event, h11.Data):
            body += event.data
    assert isinstance(event, h11.EndOfMessage)  # the chunked framing held throughout
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    last = int(events[-1].split()[-1])
    assert last > 2 and b"refused" not in body
    assert [e.split()[1] for e in events[:-1]] == [b"%d" % n for n in range(last)]
    assert all(len(e) == len(b"data: %d " % n) + 60_000 for n, e in enumerate(events[:-1]))


async def test_idle_connections_close_after_the_idle_bound() -> None:
    async with server(idle=0.5) as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /a HTTP/1.1\r\nhost: h\r\n\r\n")
        await read_answer(stream)
        start = trio.current_time()
        assert await read_until_closed(stream) == b""
        assert 0.4 < trio.current_time() - start < 3


async def test_a_drain_finishes_the_request_in_flight_and_closes_idle_ones() -> None:
    async with server() as (port, stop):
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        await idle.send_all(b"GET /a HTTP/1.1\r\nhost: h\r\n\r\n")
        await read_answer(idle)
        busy = await trio.open_tcp_stream("127.0.0.1", port)
        await busy.send_all(b"GET /slow HTTP/1.1\r\nhost: h\r\n\r\n")
        await trio.sleep(0.2)
        stop.set()
        assert await read_until_closed(idle, 2) == b""
        answer = await read_until_closed(busy)
        assert answer.startswith(b"HTTP/1.1 200") and b"connection: close\r\n" in answer
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)


async def test_http2_with_prior_knowledge_is_served_by_hypercorn() -> None:
    async with server() as (port, _):
        async with httpx2.AsyncClient(http1=False, http2=True) as client:
            reply = await client.post(f"http://127.0.0.1:{port}/h2", content=b"two")
        assert reply.http_version == "HTTP/2" and reply.json()["body"] == "two"


async def test_header_values_come_without_surrounding_whitespace() -> None:
    async with server() as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /ws HTTP/1.1\r\nhost: h\r\nx-v: \t spaced out \t\r\n\r\n")
        assert b'"x":"spaced out"' in await read_answer(stream)
