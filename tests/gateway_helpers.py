"""Running a real gateway in the test's nursery, and raw clients for it.

* :func:`running_gateway`: ``build_gateway`` + ``serve_gateway`` (what ``vmcp serve`` runs) on a
  free port, on :func:`quickstart_docs` (the quickstart with absolute paths) or any documents;
  :func:`stuck_backend` adds an SDK backend whose tool never returns; :func:`replica_docs` is a
  gateway whose replicas share a Redis (``FLEET_SECRET``);
* :class:`RawClient`: a handshake-era Streamable HTTP client (sessions, the standalone GET
  stream), answering with :class:`Reply` (status, headers, JSON body or SSE events);
  :class:`StatelessClient` and :func:`meta`: the same for 2026-07-28 (no session, the ``_meta``
  envelope on every request); :func:`post_from`: one POST as if from another loopback address.

The raw clients speak the wire protocol directly (status codes, headers, SSE bytes) so tests can
assert exactly what a client sees; the official SDK client is used in the interoperability
tests.
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
import trio

from vmcp_trio.app.gateway import serve_gateway
from vmcp_trio.app.parts import GatewayProcess, build_gateway
from vmcp_trio.gateway.settings import GatewaySettings
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.sse import Event, SSEParser
from vmcp_trio.resources import validate_documents
from vmcp_trio.resources.loading import SourceDocument

from .helpers import EXAMPLES, example_docs

SERVERS = EXAMPLES / "servers"
Running = tuple[str, GatewayProcess]
"""A running gateway's /mcp URL and its process."""
ACCEPT = "application/json, text/event-stream"


def quickstart_docs() -> list[dict[str, Any]]:
    """The quickstart with absolute paths and this interpreter, so cwd does not matter."""
    docs = copy.deepcopy(example_docs("quickstart.yaml"))
    for doc in docs:
        if doc["kind"] == "MCPServer":
            doc["spec"]["command"] = sys.executable
            doc["spec"]["args"] = [str(SERVERS / doc["spec"]["args"][0].split("/")[-1])]
    return docs


@asynccontextmanager
async def stuck_backend() -> AsyncIterator[tuple[list[dict[str, Any]], trio.Event]]:
    """An SDK backend whose tool ``hang`` never returns (and sets the event when cancelled),
    and the quickstart documents with it added as MCPServer ``stuck``."""
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("stuck", log_level="WARNING")
    cancelled = trio.Event()

    @server.tool()
    async def hang() -> str:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.loglevel = "WARNING"
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, server.streamable_http_app(), config,
                                            shutdown_trigger=trio.sleep_forever))
        docs = quickstart_docs()
        docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                        "metadata": {"name": "stuck"},
                        "spec": {"groupRef": {"name": "quickstart"}, "url": binds[0] + "/mcp"}})
        yield docs, cancelled
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running_gateway(docs: list[dict[str, Any]] | None = None, *,
                          tls: tuple[str, str] | None = None,
                          ready: tuple[str, ...] | None = None,
                          **settings: Any) -> AsyncIterator[Running]:
    """A real gateway (hypercorn, trio worker) on a free port; ``tls`` = (cert, key) files.
    Yields once the stdio backends ``ready`` (default: all) run (a broken one never does)."""
    result = validate_documents([SourceDocument("t.yaml", i + 1, d)
                                 for i, d in enumerate(docs or quickstart_docs())])
    assert result.ok, result.problems
    gateway = build_gateway(result.plans[0], GatewaySettings(**{
        "port": 0, "drain_delay_seconds": 0.0, **settings}))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(
            serve_gateway, gateway, shutdown_trigger=stop.wait,
            tls_cert=tls[0] if tls else None, tls_key=tls[1] if tls else None))
        for name, process in gateway.links.stdio.items():
            if ready is None or name in ready:
                with trio.fail_after(20):
                    await process.ready.wait()
        yield urls[0], gateway
        stop.set()


FLEET_SECRET = "replicas-share-this-secret-of-40-bytes!!"


def replica_docs(backend_url: str, redis_port: int | None = None, *,
                 storage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A gateway ``team/gw`` over one backend ``numbers`` whose replicas share the Redis on
    ``redis_port`` (or the ``sessionStorage`` connection block ``storage``: a Sentinel, say;
    anonymous incoming auth: loopback only)."""
    connection = storage or {"address": f"127.0.0.1:{redis_port}"}
    meta = {"namespace": "team"}
    return [
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPGroup",
         "metadata": {"name": "g", **meta}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
         "metadata": {"name": "numbers", **meta},
         "spec": {"groupRef": {"name": "g"}, "url": backend_url}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet", **meta},
         "stringData": {"hmac": FLEET_SECRET}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "VirtualMCPServer",
         "metadata": {"name": "gw", **meta},
         "spec": {"groupRef": {"name": "g"}, "incomingAuth": {"type": "anonymous"},
                  "sessionStorage": {"provider": "redis", **connection,
                                     "hmacSecretRefs": [{"name": "fleet", "key": "hmac"}]}}},
    ]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any = None
    """The JSON body (for application/json)."""
    events: list[Event] = field(default_factory=list)
    """The SSE events (for text/event-stream)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        if self.events:
            return [orjson.loads(e.data) for e in self.events if e.data]
        return [self.body] if isinstance(self.body, dict) else list(self.body or [])

    @property
    def result(self) -> dict[str, Any]:
        final = self.messages[-1]
        assert "result" in final, final
        return final["result"]


class RawClient:
    def __init__(self, url: str, version: str = "2025-11-25") -> None:
        self.url = url
        self.version = version
        self.http = HttpClient()
        self.session_id: str | None = None
        self.token: str | None = None
        """A bearer token to send with every request (incoming auth)."""
        self._ids = itertools.count(1)

    def headers(self, **extra: str) -> list[tuple[str, str]]:
        out = [("accept", ACCEPT), ("content-type", "application/json")]
        if self.session_id:
            out.append(("mcp-session-id", self.session_id))
        if self.version >= "2025-06-18" and self.session_id:
            out.append(("mcp-protocol-version", self.version))
        if self.token is not None:
            out.append(("authorization", f"Bearer {self.token}"))
        out += [(k.replace("_", "-"), v) for k, v in extra.items()]
        return out

    async def post(self, payload: Any, *, headers: list[tuple[str, str]] | None = None,
                   raw: bytes | None = None, stop_after: int | None = None,
                   timeout: float = 15) -> Reply:
        body = raw if raw is not None else orjson.dumps(payload)
        with trio.fail_after(timeout):
            async with self.http.stream("POST", self.url, headers=headers or self.headers(),
                                        body=body) as response:
                return await self._read(response, stop_after)

    async def _read(self, response: Any, stop_after: int | None = None) -> Reply:
        headers = {k.decode(): v.decode() for k, v in response.headers}
        reply = Reply(response.status, headers)
        if headers.get("content-type", "").startswith("text/event-stream"):
            parser = SSEParser()
            async for chunk in response.iter_bytes():
                reply.events += parser.feed(chunk)
                if stop_after is not None and len(reply.events) >= stop_after:
                    break
        else:
            data = await response.read(1 << 24)
            reply.body = orjson.loads(data) if data else None
        return reply

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> Reply:
        reply = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": self.version, "capabilities": capabilities or {},
            "clientInfo": {"name": "raw-test-client", "version": "1"}}})
        self.session_id = reply.headers.get("mcp-session-id")
        await self.notify("notifications/initialized")
        return reply

    async def request(self, method: str, params: dict[str, Any] | None = None,
                      **kwargs: Any) -> Reply:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return await self.post(message, **kwargs)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> Reply:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return await self.post(message)

    async def get(self, *, last_event_id: str | None = None, stop_after: int | None = None,
                  timeout: float = 10) -> Reply:
        headers = [("accept", "text/event-stream")] + [
            h for h in self.headers()
            if h[0] in ("mcp-session-id", "mcp-protocol-version", "authorization")]
        if last_event_id:
            headers.append(("last-event-id", last_event_id))
        with trio.fail_after(timeout):
            async with self.http.stream("GET", self.url, headers=headers) as response:
                return await self._read(response, stop_after)

    async def delete(self) -> int:
        status, _, _ = await self.http.request("DELETE", self.url, headers=self.headers())
        return status

    async def aclose(self) -> None:
        await self.http.aclose()


# --- protocol revision 2026-07-28 ----------------------------------------------------------------

VERSION = "2026-07-28"
CAPS = {"sampling": {}, "elicitation": {}, "roots": {}}


def meta(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": CAPS if capabilities is None
            else capabilities, **extra}


class StatelessClient:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = HttpClient()
        self.ids = 0

    async def post(self, method: str, params: dict[str, Any] | None = None, *,
                   headers: dict[str, str] | None = None, name: str | None = None,
                   stop_after: int | None = None) -> Reply:
        self.ids += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.ids, "method": method,
                                "params": {"_meta": meta(), **(params or {})}}
        wire = {"accept": "application/json, text/event-stream",
                "content-type": "application/json", "mcp-protocol-version": VERSION,
                "mcp-method": method}
        if name is not None:
            wire["mcp-name"] = name
        wire.update(headers or {})
        with trio.fail_after(15):
            async with self.http.stream("POST", self.url, headers=list(wire.items()),
                                        body=orjson.dumps(body)) as response:
                reply = Reply(response.status,
                              {k.decode(): v.decode() for k, v in response.headers})
                if reply.headers.get("content-type", "").startswith("text/event-stream"):
                    parser = SSEParser()
                    async for chunk in response.iter_bytes():
                        reply.events += parser.feed(chunk)
                        if stop_after is not None and len(
                                [e for e in reply.events if e.data]) >= stop_after:
                            break
                else:
                    reply.body = orjson.loads(await response.read(1 << 22))
        return reply

    async def call(self, tool: str, arguments: dict[str, Any], **params: Any) -> Reply:
        return await self.post("tools/call", {"name": tool, "arguments": arguments, **params},
                               name=tool)


async def post_from(url: str, source: str, payload: Any, session: str | None = None,
                    version: str = "2025-11-25") -> tuple[int, dict[str, str]]:
    """POST ``payload`` as JSON to ``url`` from the loopback address ``source`` (each address
    is another client under anonymous auth, and for the authorization server's limits): the
    status and the headers of the answer."""
    host, port = url.split("/")[2].rsplit(":", 1)
    path = "/" + url.split("/", 3)[3]
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    body = orjson.dumps(payload)
    extra = f"Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {version}\r\n" \
        if session else ""
    await stream.send_all(
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{extra}Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    received = b""
    with trio.fail_after(15):
        while chunk := await stream.receive_some(65536):
            received += chunk
    await stream.aclose()
    head = received.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    pairs = (line.split(": ", 1) for line in head[1:] if ": " in line)
    return int(head[0].split()[1]), {name.lower(): value for name, value in pairs}
