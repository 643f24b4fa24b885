"""The soak's clients: one operation of each kind a gateway serves, each checked end to end and
recorded as an :class:`Outcome`, and the load that starts them at a steady rate.

Operations (the backend each one needs in brackets; ``floor`` is never faulted):

* ``call`` / ``call-2026``: one ``tools/call`` of ``floor_echo`` in a pooled handshake session
  (each of ``call``, ``progress`` and ``elicit`` has a pool of its own), or with no session
  (2026-07-28) [floor];
* ``progress``: ``clock_countdown`` with a progress token, three progress notifications then the
  result [clock, stdio]; ``progress-2026``: ``sdk_slow`` likewise [sdk, HTTP];
* ``elicit``: ``sdk_ask``; the client answers the ``elicitation/create`` that arrives on the
  call's stream with a POST of its own (which the balancer may send to another replica; a 503
  with ``Retry-After`` means the replica that asked could not be told, and the answer is sent
  again) [sdk];
  ``elicit-2026``: the same answered through an input request and a retry carrying
  ``inputResponses`` and the ``requestState`` [sdk]. (Not ``clock_ask_user``: a stdio backend
  is one process shared by every session, and its questions cannot be routed while several
  sessions have calls on it; the gateway refuses them, as docs/protocol.md says.)
* ``subscribe``: a new session subscribes to ``sdk://static`` and opens its GET stream,
  ``sdk_touch`` is called, the ``notifications/resources/updated`` must arrive on the stream;
  then the session is deleted [sdk];
* ``churn``: a new session, two calls, DELETE (also when a call failed) [floor].

Every operation has a deadline (``OPERATION_TIMEOUT``); what goes wrong becomes the outcome's
``cause`` (``http 503``, ``jsonrpc -32603``, ``tool error``, ``timeout``, ``connection``,
``unexpected ...``), never an exception out of the load.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import trio

from vmcp_trio.http.client import HttpClient, HttpError
from vmcp_trio.protocol.sse import SSEParser

OPERATION_TIMEOUT = 25.0
"""Longer than the freeze fault (10 s) plus a backend's answer, shorter than a hang."""
VERSION = "2025-11-25"
STATELESS = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
MIX = {"call": 28, "call-2026": 18, "progress": 10, "progress-2026": 6, "elicit": 8,
       "elicit-2026": 7, "subscribe": 5, "churn": 18}
"""Relative frequency of each operation."""
BACKEND = {"call": "floor", "call-2026": "floor", "churn": "floor", "progress": "clock",
           "elicit": "sdk", "progress-2026": "sdk", "elicit-2026": "sdk", "subscribe": "sdk"}
"""The backend each operation depends on."""
EVERY = "every"
"""The backend of an operation whose ``initialize`` failed: under ``partialFailureMode: fail``
(the default) a session's opening fails when a backend that was up fails in it."""
POOL = 12
"""Long-lived handshake sessions each of the ``call``, ``progress`` and ``elicit`` operations
shares."""
POOLED = ("call", "progress", "elicit")
ANSWER_ATTEMPTS = 5
"""An answer to the gateway's question refused with 503 (the replica that asked could not be
told: Redis switching masters) is sent again after the ``Retry-After`` second, this often."""


@dataclass
class Outcome:
    started: float
    ended: float
    kind: str
    backend: str
    ok: bool
    cause: str = ""

    def json(self) -> bytes:
        return orjson.dumps(asdict(self))


class Failed(Exception):
    """An operation's answer was not what it should be; the message is the cause."""


class Client:
    """One HTTP client of the balancer's ``/mcp``: JSON-RPC requests in either era, their
    streamed answers, and the server's requests on those streams."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = HttpClient()
        self.ids = itertools.count(1)

    def headers(self, session: str | None, *, method: str | None = None,
                name: str | None = None) -> list[tuple[str, str]]:
        out = [("accept", ACCEPT), ("content-type", "application/json")]
        if method is not None:  # 2026-07-28
            out += [("mcp-protocol-version", STATELESS), ("mcp-method", method)]
            if name is not None:
                out.append(("mcp-name", name))
        elif session is not None:
            out += [("mcp-session-id", session), ("mcp-protocol-version", VERSION)]
        return out

    async def post(self, message: dict[str, Any], session: str | None = None, *,
                   stateless: bool = False,
                   on_request: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
                   ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """POST one message; (response headers, every JSON-RPC message of the answer). Server
        requests on the answer's stream go to ``on_request`` as they arrive."""
        if stateless:
            meta = {"io.modelcontextprotocol/protocolVersion": STATELESS,
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
            params = message.setdefault("params", {})
            params["_meta"] = {**meta, **params.get("_meta", {})}
            name = params.get("name") if message["method"] == "tools/call" else None
            headers = self.headers(None, method=message["method"], name=name)
        else:
            headers = self.headers(session)
        async with self.http.stream("POST", self.url, headers=headers,
                                    body=orjson.dumps(message)) as response:
            answer = {k.decode(): v.decode() for k, v in response.headers}
            if response.status not in (200, 202):
                raise Failed(f"http {response.status}")
            messages: list[dict[str, Any]] = []
            if answer.get("content-type", "").startswith("text/event-stream"):
                parser = SSEParser()
                async for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        if not event.data:
                            continue
                        got = orjson.loads(event.data)
                        messages.append(got)
                        if "method" in got and "id" in got and on_request is not None:
                            await on_request(got)
            else:
                body = await response.read(1 << 22)
                if body:
                    messages.append(orjson.loads(body))
        return answer, messages

    async def request(self, method: str, params: dict[str, Any], session: str | None = None,
                      *, seen: list[dict[str, Any]] | None = None,
                      **options: Any) -> dict[str, Any]:
        """The result of one request (Failed on a JSON-RPC error or a tool error); ``seen``
        gets every message of the answer."""
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method,
                   "params": params}
        _, messages = await self.post(message, session, **options)
        if seen is not None:
            seen += messages
        final = [m for m in messages if m.get("id") == message["id"]]
        if not final:
            raise Failed("unexpected: no answer on the stream")
        if "error" in final[-1]:
            error = final[-1]["error"]
            raise Failed(f"jsonrpc {error.get('code')} ({str(error.get('message'))[:70]})")
        result: dict[str, Any] = final[-1]["result"]
        if result.get("isError"):
            raise Failed(f"tool error: {text_of(result)[:100]}")
        return result

    async def initialize(self) -> str:
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "soak", "version": "1"}}}
        headers, messages = await self.post(message)
        session = headers.get("mcp-session-id")
        if messages and "error" in messages[-1]:
            error = messages[-1]["error"]
            raise Failed(f"jsonrpc {error.get('code')} (initialize: "
                         f"{str(error.get('message'))[:80]})")
        if not session or not messages or "result" not in messages[-1]:
            raise Failed("unexpected: initialize without a session")
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        return session

    async def delete(self, session: str) -> None:
        status, _, _ = await self.http.request("DELETE", self.url, headers=self.headers(session))
        if status not in (200, 204):
            raise Failed(f"http {status} (DELETE)")


def cause_of(exc: BaseException) -> str:
    """What went wrong, in a few words (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    if isinstance(exc, Failed):
        return str(exc)
    if isinstance(exc, trio.TooSlowError):
        return "timeout"
    if isinstance(exc, (HttpError, OSError, trio.BrokenResourceError)):
        return f"connection ({type(exc).__name__})"
    return f"unexpected {type(exc).__name__}"


def text_of(result: dict[str, Any]) -> str:
    content = result.get("content") or [{}]
    return str(content[0].get("text", ""))


class Load:
    """Starts operations at ``rate`` a second, each in its own task, and records each outcome
    with ``record``. A pool of handshake sessions is shared; a session the gateway no longer
    knows (404) is opened again."""

    def __init__(self, url: str, rate: float, record: Callable[[Outcome], None]) -> None:
        self.url = url
        self.rate = rate
        self.record = record
        self.client = Client(url)
        self.answers = Client(url)
        """Answers to server requests go on connections of their own."""
        self.pools: dict[str, list[str | None]] = {kind: [None] * POOL for kind in POOLED}
        self.free = {kind: trio.Semaphore(POOL) for kind in POOLED}
        self.kinds = list(MIX)
        self.weights = list(MIX.values())
        self.random = random.Random(2026)
        self.running = 0
        self.resent = 0
        """Answers sent again after a 503."""
        self.reopened = 0
        """Pooled sessions the gateway answered 404 for, opened again (the operation sent
        again in the new one)."""

    async def run(self, until: float) -> None:
        """Start operations until trio's clock reads ``until``; then wait for those running."""
        interval = 1.0 / self.rate
        async with trio.open_nursery() as nursery:
            next_start = trio.current_time()
            while next_start < until:
                await trio.sleep_until(next_start)
                kind = self.random.choices(self.kinds, self.weights)[0]
                nursery.start_soon(self.one, kind)
                next_start += interval

    async def one(self, kind: str) -> None:
        started = time.time()
        cause = ""
        self.running += 1
        try:
            with trio.fail_after(OPERATION_TIMEOUT):
                await OPERATIONS[kind](self)
        except Exception as exc:  # every failure is an outcome; none stops the load
            cause = cause_of(exc)
        finally:
            self.running -= 1
        # Opening a session needs every backend under partialFailureMode fail.
        backend = EVERY if "(initialize" in cause else BACKEND[kind]
        self.record(Outcome(started, time.time(), kind, backend, not cause, cause))

    async def prime(self) -> None:
        """One operation of each kind, one after the other (what the first clients start that
        stays: backend connections, the pool's sessions), then the clients leave."""
        for kind in self.kinds:
            await self.one(kind)
        await self.close()

    async def pooled(self, kind: str, operation: Callable[[str], Awaitable[None]]) -> None:
        """Run ``operation`` in a session of ``kind``'s pool (one operation per session at a
        time; each kind its own pool, so that calls waiting on a frozen backend hold no
        session another kind's calls wait for)."""
        pool = self.pools[kind]
        async with self.free[kind]:
            slot = next(i for i, s in enumerate(pool) if s != "busy")
            session = pool[slot]
            pool[slot] = "busy"
            try:
                if session is None:
                    session = await self.client.initialize()
                try:
                    await operation(session)
                except Failed as exc:
                    if str(exc) != "http 404":
                        raise
                    # The gateway no longer knows the session (idle past the TTL, or lost in
                    # a fault): as the MCP spec says, the client opens another, sends again.
                    self.reopened += 1
                    session = None
                    session = await self.client.initialize()
                    await operation(session)
            except Failed as exc:
                if str(exc) == "http 404":
                    session = None  # lost again: the next user opens another
                raise
            finally:
                pool[slot] = session

    async def close(self) -> None:
        """Delete the pooled sessions (the clients leave)."""
        for kind, pool in self.pools.items():
            for session in pool:
                if session not in (None, "busy"):
                    with trio.move_on_after(5), contextlib.suppress(Failed, HttpError, OSError):
                        await self.client.delete(session)
            self.pools[kind] = [None] * POOL
        await self.client.http.aclose()
        await self.answers.http.aclose()
        self.client, self.answers = Client(self.url), Client(self.url)

    # --- the operations ----------------------------------------------------------------------

    async def call(self) -> None:
        async def echo(session: str) -> None:
            result = await self.client.request(
                "tools/call", {"name": "floor_echo", "arguments": {"text": "soak"}}, session)
            if "soak" not in text_of(result) and not result.get("content"):
                raise Failed("unexpected: echo")
        await self.pooled("call", echo)

    async def call_2026(self) -> None:
        result = await self.client.request(
            "tools/call", {"name": "floor_echo", "arguments": {"text": "soak"}},
            stateless=True)
        if not result.get("content"):
            raise Failed("unexpected: echo")

    async def progress(self) -> None:
        async def countdown(session: str) -> None:
            seen: list[dict[str, Any]] = []
            result = await self.client.request("tools/call", {
                "name": "clock_countdown", "arguments": {"steps": 3, "delay_ms": 30},
                "_meta": {"progressToken": "p"}}, session, seen=seen)
            progressed = [m for m in seen
                          if m.get("method") == "notifications/progress"]
            if len(progressed) != 3 or text_of(result) != "done after 3 steps":
                raise Failed(f"unexpected: {len(progressed)} progress notifications")
        await self.pooled("progress", countdown)

    async def progress_2026(self) -> None:
        seen: list[dict[str, Any]] = []
        result = await self.client.request("tools/call", {
            "name": "sdk_slow", "arguments": {"steps": 2},
            "_meta": {"progressToken": "p"}}, stateless=True, seen=seen)
        progressed = [m for m in seen if m.get("method") == "notifications/progress"]
        if len(progressed) != 2 or "finished 2 steps" not in text_of(result):
            raise Failed(f"unexpected: {len(progressed)} progress notifications")

    async def elicit(self) -> None:
        async def ask(session: str) -> None:
            async def answer(request: dict[str, Any]) -> None:
                if request.get("method") != "elicitation/create":
                    raise Failed(f"unexpected: {request.get('method')}")
                reply = {"jsonrpc": "2.0", "id": request["id"], "result": {
                    "action": "accept", "content": {"answer": "blue"}}}
                for attempt in range(ANSWER_ATTEMPTS):  # 503 + Retry-After: not passed on
                    try:
                        await self.answers.post(reply, session)
                        return
                    except Failed as exc:
                        if str(exc) != "http 503" or attempt == ANSWER_ATTEMPTS - 1:
                            raise
                        self.resent += 1
                    await trio.sleep(1)
            result = await self.client.request("tools/call", {
                "name": "sdk_ask", "arguments": {"question": "colour?"}}, session,
                on_request=answer)
            if text_of(result) != "accept:blue":
                raise Failed("unexpected: the answer did not come back")
        await self.pooled("elicit", ask)

    async def elicit_2026(self) -> None:
        params = {"name": "sdk_ask", "arguments": {"question": "colour?"}}
        first = await self.client.request("tools/call", dict(params), stateless=True)
        if first.get("resultType") != "input_required":
            raise Failed("unexpected: no input request")
        (key, _), = first["inputRequests"].items()
        done = await self.client.request("tools/call", {
            **params, "inputResponses": {key: {"action": "accept",
                                               "content": {"answer": "blue"}}},
            "requestState": first["requestState"]}, stateless=True)
        if text_of(done) != "accept:blue":
            raise Failed("unexpected: the answer did not come back")

    async def subscribe(self) -> None:
        client = Client(self.url)
        session = await client.initialize()
        try:
            await client.request("resources/subscribe", {"uri": "sdk://static"}, session)
            updated = trio.Event()
            async with trio.open_nursery() as nursery:
                opened = trio.Event()
                nursery.start_soon(self._listen, client, session, opened, updated)
                await opened.wait()
                await client.request("tools/call", {
                    "name": "sdk_touch", "arguments": {"uri": "sdk://static"}}, session)
                with trio.move_on_after(5):
                    await updated.wait()
                nursery.cancel_scope.cancel()
            if not updated.is_set():
                raise Failed("unexpected: no resources/updated on the GET stream")
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await client.delete(session)
                finally:
                    await client.http.aclose()

    @staticmethod
    async def _listen(client: Client, session: str, opened: trio.Event,
                      updated: trio.Event) -> None:
        headers = [("accept", "text/event-stream"), ("mcp-session-id", session),
                   ("mcp-protocol-version", VERSION)]
        async with client.http.stream("GET", client.url, headers=headers) as response:
            if response.status != 200:
                raise Failed(f"http {response.status} (GET stream)")
            opened.set()
            parser = SSEParser()
            async for chunk in response.iter_bytes():
                for event in parser.feed(chunk):
                    if "notifications/resources/updated" in event.data:
                        updated.set()

    async def churn(self) -> None:
        client = Client(self.url)
        session = None
        try:
            session = await client.initialize()
            for _ in range(2):
                await client.request("tools/call", {
                    "name": "floor_echo", "arguments": {"text": "churn"}}, session)
            await client.delete(session)
            session = None
        finally:  # a failed call does not leave its session behind (a client that vanished
            # would: its session lives until the idle TTL)
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                if session is not None:
                    with contextlib.suppress(Failed, HttpError, OSError):
                        await client.delete(session)
                await client.http.aclose()


OPERATIONS: dict[str, Callable[[Load], Awaitable[None]]] = {
    "call": Load.call, "call-2026": Load.call_2026, "progress": Load.progress,
    "progress-2026": Load.progress_2026, "elicit": Load.elicit,
    "elicit-2026": Load.elicit_2026, "subscribe": Load.subscribe, "churn": Load.churn}
