"""``vmcp proxy stdio`` against a remote that follows a script: the bridge runs in this process
(its stdin and stdout are memory streams) against a remote written here, a small ASGI app on
hypercorn whose GET answers follow a script (an event stream that ends, breaks off or carries an
event over the bridge's bound, or a refusal), so each reconnection, its ``Last-Event-ID`` and
its timing can be seen. (The remote's faults are stand-ins: no installable server makes them on
purpose.)"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from vmcp_trio.http.asgi import lifespan
from vmcp_trio.proxy.tool_filter import ToolFilter

from .fixtures.asgi_body import read_body
from .proxy_helpers import stdio_bridge_to

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
NOTICE = b'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'


class Remote:
    """A handshake remote: ``initialize`` opens session "s1", any other POST gets 202 (a request
    too: no answer); the n-th GET is answered with ``script[n]`` (bytes: an event stream that
    then ends; an int: that status) and, past the script, held open."""

    def __init__(self, *script: bytes | int) -> None:
        self.script = list(script)
        self.gets: list[tuple[float, str | None]] = []
        """When each GET came, and its Last-Event-ID."""
        self.posted: list[Any] = []
        """Each POST's body, decoded."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["method"] == "GET":
            await self.get(headers.get("last-event-id"), send)
            return
        body = await read_body(receive)
        request = orjson.loads(body) if body else {}
        self.posted.append(request)
        if isinstance(request, list):
            request = {}
        if scope["method"] == "POST" and request.get("method") == "initialize":
            answer = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "serverInfo": {"name": "remote", "version": "1"}}})
            await self.respond(send, 200, answer, [(b"mcp-session-id", b"s1")])
        else:
            await self.respond(send, 202 if scope["method"] == "POST" else 204)

    async def get(self, last_event_id: str | None, send: Any) -> None:
        self.gets.append((trio.current_time(), last_event_id))
        step = self.script.pop(0) if self.script else None
        if isinstance(step, int):
            await self.respond(send, step)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        if step is None:
            await trio.sleep_forever()
        await send({"type": "http.response.body", "body": step, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def respond(send: Any, status: int, body: bytes = b"",
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        kind = [(b"content-type", b"application/json")] if body else []
        await send({"type": "http.response.start", "status": status,
                    "headers": [*kind, *(headers or [])]})
        await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def bridged(remote: Remote, **options: Any) -> AsyncIterator[
        tuple[trio.abc.SendStream, trio.abc.ReceiveStream]]:
    """The bridge to ``remote`` (with ``options``), its handshake done; yields its stdin and
    its stdout (after the answer to ``initialize``)."""
    async with stdio_bridge_to(remote, **options) as (_, stdin, stdout):
        await stdin.send_all(orjson.dumps(INITIALIZE) + b"\n")
        with trio.fail_after(10):
            assert b'"serverInfo"' in await stdout.receive_some()
        await stdin.send_all(orjson.dumps(INITIALIZED) + b"\n")
        yield stdin, stdout


async def test_the_get_stream_reopens_with_the_last_event_id_and_backs_off() -> None:
    """An open stream that ends is reopened after 1 s (the backoff starts over after a stream
    that opened), from its last event id; refusals double the wait (2 s), with +-20% jitter."""
    remote = Remote(b"id: e1\n" + NOTICE, 500)
    async with bridged(remote) as (_, stdout):
        with trio.fail_after(10):
            assert b"list_changed" in await stdout.receive_some()
            while len(remote.gets) < 3:
                await trio.sleep(0.05)
    times = [at for at, _ in remote.gets]
    assert [last for _, last in remote.gets] == [None, "e1", "e1"]
    for gap, nominal in zip([b - a for a, b in itertools.pairwise(times)], (1, 2), strict=True):
        assert nominal * 0.8 <= gap <= nominal * 1.2 + 0.3, times


async def test_a_broken_connection_leaves_nothing_behind_for_the_next(
        caplog: pytest.LogCaptureFixture) -> None:
    """A stream broken off in the middle of an event, then one whose event is over the bridge's
    4 MiB bound: each is reopened (an expected end, not a fault), and the next connection is
    read afresh, so the client gets the next event whole and nothing of the broken ones."""
    caplog.set_level(logging.INFO)
    half = b'id: e1\ndata: {"jsonrpc": "2.0", "method": "notifications/mes'
    huge = b"data: " + b"x" * (4 * 1024 * 1024 + 100)
    remote = Remote(half, huge, b"id: e3\n" + NOTICE)
    async with bridged(remote) as (_, stdout):
        with trio.fail_after(10):
            line = await stdout.receive_some()
    assert line == NOTICE.removeprefix(b"data: ").rstrip(b"\n") + b"\n"
    assert [last for _, last in remote.gets] == [None, "e1", "e1"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_remotes_retry_is_the_wait_before_reopening() -> None:
    """The remote asks for 100 ms (``retry:``) before its stream is reopened: the bridge waits
    that, not its own backoff (the spec's MUST)."""
    remote = Remote(b"retry: 100\nid: e1\n" + NOTICE)
    async with bridged(remote) as (_, stdout):
        with trio.fail_after(10):
            assert b"list_changed" in await stdout.receive_some()
            while len(remote.gets) < 2:
                await trio.sleep(0.01)
    (first, _), (second, last_event_id) = remote.gets
    assert second - first < 0.5 and last_event_id == "e1"


async def test_a_request_the_remote_answers_with_nothing_gets_an_error() -> None:
    """202 without a body is no answer to a request: the client hears so at once, by id."""
    async with bridged(Remote()) as (stdin, stdout):
        await stdin.send_all(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": '
                             b'{"name": "add", "arguments": {}}}\n')
        with trio.fail_after(10):
            error = orjson.loads(await stdout.receive_some())
    assert error["id"] == 5 and error["error"]["code"] == -32603
    assert "answered HTTP 202 (no content type)" in error["error"]["message"]


async def test_a_batch_cannot_call_an_ignored_tool() -> None:
    """A 2025-03-26 batch calling an ignored tool: that call is answered here, the rest of the
    batch goes to the remote without it."""
    remote = Remote()
    async with bridged(remote, tools=ToolFilter(["delete*"])) as (stdin, stdout):
        await stdin.send_all(orjson.dumps([
            {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
             "params": {"name": "Delete_All", "arguments": {}}},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]) + b"\n")
        with trio.fail_after(10):
            refused = orjson.loads(await stdout.receive_some())
            while not isinstance(remote.posted[-1], list):
                await trio.sleep(0.02)
    assert refused["id"] == 8 and refused["error"]["message"] == \
        'Tool "Delete_All" is not available'
    assert remote.posted[-1] == [{"jsonrpc": "2.0",
                                  "method": "notifications/roots/list_changed"}]


async def test_protocol_auto_with_a_remote_whose_probe_answer_is_no_answer() -> None:
    """``--protocol auto`` and a handshake remote that answers the ``server/discover`` probe
    with an empty 202 (no answer at all): the client's own ``initialize`` goes out and the
    session is the usual one."""
    remote = Remote()
    async with bridged(remote, dual_era=True) as (stdin, _):
        await stdin.send_all(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}\n')
        with trio.fail_after(10):
            while len(remote.posted) < 4:
                await trio.sleep(0.02)
    assert [post.get("method") for post in remote.posted] == [
        "server/discover", "initialize", "notifications/initialized", "tools/list"]
