"""The proxy's test harness: a recording remote (a stand-in: no installable server echoes the
raw headers it received or lets a test pace its SSE events), the proxy run in this process
(``build_proxy`` + ``serve_proxy``, the parts ``vmcp proxy`` runs), settings for it, and one
request through it (:func:`fetch`) or a hand-made one on a socket (:func:`raw_http`); the stdio
bridge run in this process (:func:`stdio_bridge_to`), and how a stdio client starts ``vmcp
proxy stdio`` or mcp-remote (:func:`bridge`)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import hypercorn.trio
import trio
import trio.testing
from hypercorn.config import Config
from mcp.client.stdio import StdioServerParameters

from vmcp_trio.app.proxy import ProxyProcess, build_proxy, serve_proxy
from vmcp_trio.http.asgi import lifespan
from vmcp_trio.http.client import HttpClient
from vmcp_trio.http.serving import listen, serve, server_config
from vmcp_trio.proxy.settings import ProxySettings
from vmcp_trio.proxy.stdio_bridge import StdioBridge

from .fixtures.asgi_body import read_body
from .helpers import ROOT

# --- a recording remote (stand-in) ---------------------------------------------------------------

@dataclass
class Remote:
    """What the recording remote received, and the pace of its SSE answer."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    first_event_read: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)
    """``/quiet`` (an event stream) and ``/hold`` (JSON) answer only once this is set."""


def recording_app(remote: Remote) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        body = await read_body(receive)
        remote.seen.append({"method": scope["method"], "path": scope["path"],
                            "query": scope["query_string"].decode(),
                            "headers": [(k.decode(), v.decode()) for k, v in scope["headers"]],
                            "body": body})
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await send({"type": "http.response.body", "more_body": True,
                        "body": b"event: message\ndata: {\"progress\": 1}\n\n"})
            with trio.fail_after(10):  # the client must have it before the rest is written
                await remote.first_event_read.wait()
            await send({"type": "http.response.body", "more_body": False,
                        "body": b"event: message\ndata: {\"result\": 2}\n\n"})
            return
        if scope["path"] == "/quiet":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            await remote.release.wait()
            await send({"type": "http.response.body", "more_body": False,
                        "body": b"event: message\ndata: {\"late\": 1}\n\n"})
            return
        if scope["path"] == "/hold":
            await remote.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"x-end", b"1"),
            (b"connection", b"x-resp-hop"), (b"x-resp-hop", b"1")]})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})
    return app


@asynccontextmanager
async def recording_remote() -> AsyncIterator[tuple[str, Remote]]:
    remote = Remote()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn.trio.serve, recording_app(remote), config))
        yield f"{binds[0]}/mcp", remote
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running_proxy(proxy: ProxySettings | ProxyProcess) -> AsyncIterator[str]:
    """The proxy of these settings (or these parts) in this process; yields its client URL."""
    stop = trio.Event()
    process = build_proxy(proxy) if isinstance(proxy, ProxySettings) else proxy
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve_proxy, process, shutdown_trigger=stop.wait))
        yield urls[0]
        stop.set()


def base(target: str, **fields: Any) -> ProxySettings:
    return ProxySettings(server_name="remote", target_uri=target, **{"drain_delay": 0.0, **fields})


async def fetch(url: str, *, method: str = "POST", headers: list[tuple[str, str]] | None = None,
                body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    client = HttpClient()
    try:
        with trio.fail_after(20):
            status, raw, data = await client.request(method, url, headers=headers or [],
                                                     body=body)
    finally:
        await client.aclose()
    return status, {k.decode().lower(): v.decode() for k, v in raw}, data


async def raw_http(url: str, data: bytes, *, linger: float = 3.0,
                   answered: bool = False) -> tuple[bytes, bool]:
    """Send hand-made bytes to the server of ``url``; read until it closes the connection or
    ``linger`` seconds pass: what came back, and whether the server closed. With ``answered``,
    stop as soon as one whole answer (its head and its ``Content-Length`` body) is in, for a
    test that looks at the answer only (a server may keep the connection open after it)."""
    host, port = url.split("/")[2].rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(data)
    received = b""
    closed = False
    with trio.move_on_after(linger):
        while chunk := await stream.receive_some(65536):
            received += chunk
            if answered and _whole_answer(received):
                break
        else:
            closed = True
    await stream.aclose()
    return received, closed


def _whole_answer(data: bytes) -> bool:
    head, end, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*\r?$", head)
    return bool(end) and length is not None and len(body) >= int(length.group(1))


@asynccontextmanager
async def stdio_bridge_to(remote: Any, **options: Any) -> AsyncIterator[
        tuple[StdioBridge, trio.abc.SendStream, trio.abc.ReceiveStream]]:
    """``vmcp proxy stdio``'s bridge run in this process (its ``options``), the ASGI app
    ``remote`` served on a loopback port as its target; yields the bridge, its stdin and its
    stdout (memory streams)."""
    config = server_config("127.0.0.1", 0, max_header_bytes=16 * 1024)
    client = HttpClient()
    stdin_writer, stdin = trio.testing.memory_stream_one_way_pair()
    stdout, stdout_reader = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve, remote, config, listen(config),
                                           shutdown_trigger=trio.sleep_forever))
        bridge = StdioBridge(urls[0] + "/mcp", client, **options)
        nursery.start_soon(bridge.run, stdin, stdout)
        yield bridge, stdin_writer, stdout_reader
        nursery.cancel_scope.cancel()
    await client.aclose()


# --- a stdio client's proxy: vmcp proxy stdio, or mcp-remote -----------------------------------

MCP_REMOTE = ROOT / "tests" / "peers" / "node_modules" / "mcp-remote" / "dist" / "proxy.js"


def node() -> str:
    """The Node the test peers run on."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "peers.py"), "--print-node"],
                          check=True, capture_output=True, text=True).stdout.strip()


def bridge(url: str, proxy: str, *flags: str) -> StdioServerParameters:
    """How a stdio client starts ``proxy`` (``vmcp`` or ``mcp-remote``) in front of ``url``."""
    if proxy == "mcp-remote":
        return StdioServerParameters(command=node(), cwd=ROOT, args=[
            str(MCP_REMOTE), url, "--allow-http", *flags])
    return StdioServerParameters(command=sys.executable, cwd=ROOT, args=[
        "-m", "vmcp_trio", "proxy", "stdio", "--target-uri", url, *flags])


def leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """The exceptions of a group, nested groups opened."""
    return [leaf for error in group.exceptions for leaf in (
        leaves(error) if isinstance(error, BaseExceptionGroup) else [error])]
