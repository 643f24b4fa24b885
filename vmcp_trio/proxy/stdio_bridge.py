"""``vmcp proxy stdio``: MCP over stdin/stdout for a local client, forwarded to a remote server
over Streamable HTTP.

Rules it keeps:

* The stdio transport: one JSON-RPC message (or 2025-03-26 batch) per line, UTF-8, on stdin from
  the client and on stdout to it; nothing else is ever written to stdout (logs go to stderr).
  A line longer than ``max_line_bytes`` is answered with a JSON-RPC error (when it has an id)
  and dropped, never buffered without bound.
* Each message is POSTed to the target as it arrives, several at once (a long ``tools/call``
  does not hold the others up), with the session's ``Mcp-Session-Id`` and the negotiated
  ``MCP-Protocol-Version``; a 2026-07-28 message (its ``_meta`` names the revision) carries that
  revision and its ``Mcp-Method``/``Mcp-Name`` headers instead. The answer (JSON, or each event
  of an SSE stream, as it arrives: progress before the result) is written to stdout; so is a
  JSON-RPC body the remote refused a message with. Any other refusal (an OAuth error object, a
  page, nothing) answers each request of the message with an error naming the HTTP status and
  the OAuth error when there is one. (The transport's rules, headers and what an
  answer means, are :mod:`vmcp_trio.protocol.streamable`'s.)
* After ``initialize`` the remote's GET stream is opened for what the server sends unasked
  (requests, notifications), and reopened with ``Last-Event-ID`` when it ends. It is a
  supervised task: the wait before reopening is the remote's ``retry:`` when it sent one, else
  the supervisor's backoff (:data:`~vmcp_trio.runtime.supervisor.RECONNECT`: 1 s doubling to
  30 s, with jitter, starting over after a stream that opened); a server that has none (405)
  is not asked again.
* The session is kept across the remote's restarts: when the remote says the session is gone
  (404 to a message that named it), the client's ``initialize`` and
  ``notifications/initialized`` are replayed (the replayed answer is not shown to the client)
  and the message is sent again, once.
* Outgoing credentials and injected headers are those of ``vmcp proxy`` (a 401 asks a
  credential once for a new value). A request the remote cannot be reached for is answered
  with a JSON-RPC error naming the target, so the client never waits for nothing.
* ``--ignore-tool`` patterns (:mod:`.tool_filter`) hide tools from every ``tools/list`` answer
  and answer a call of one at once, without the remote.
* ``--keep-alive`` (``--ping-interval``): once ``initialize`` is answered, a ``ping`` of the
  proxy's own (its answer never shown) every interval keeps the session, and any idle
  connection on the way, alive; a session the remote forgot is re-initialized by it as by any
  request. A 2026-07-28 client has no session to keep: no pings.
* ``--transport``: ``auto`` (the default) falls back to the legacy HTTP+SSE transport
  (:mod:`.legacy_sse`) when the remote refuses the client's ``initialize`` with 400, 404 or
  405, as the spec says a client finds an older server; ``sse`` uses it from the start;
  ``streamable-http`` never.
* ``--protocol auto``: a handshake client's ``initialize`` first asks the remote
  ``server/discover``; a remote that speaks only 2026-07-28 is then bridged for the client by
  :mod:`.dual_era` (no GET stream, no session), every other remote as above.
* At the end of stdin the requests in flight finish (up to ``shutdown_grace``), the session is
  deleted at the remote, and the process exits 0.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson
import trio

from ..http.client import HttpClient, HttpError, HttpResponse
from ..protocol.jsonrpc import JsonRpcError, Request, parse_message
from ..protocol.sse import SSEError, SSEParser
from ..protocol.stateless_requests import PROTOCOL_VERSION, metadata_headers
from ..protocol.streamable import (
    JSON,
    PostAnswer,
    Resumption,
    Sent,
    StreamAnswer,
    delete_headers,
    media_type,
    post_answer,
    post_headers,
    stream_answer,
    stream_headers,
)
from ..runtime.supervisor import RECONNECT, Retry, Supervisor
from .credentials import LoginPending, RemoteCredential, credential_headers, posted
from .dual_era import DualEraBridge, RemoteFailed
from .legacy_sse import LegacySseSession
from .refusals import refusal
from .tool_filter import ToolFilter

__all__ = ["StdioBridge"]

log = logging.getLogger("vmcp.proxy")

_REPLAY_ID = "vmcp-proxy-reinitialize"
_PING_ID = "vmcp-proxy-keepalive"


@dataclass(frozen=True)
class _Refusal:
    """How the remote refused a client's ``initialize``."""

    status: int
    media: str
    body: bytes


def _error_line(request_id: object, code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id,
                         "error": {"code": code, "message": message}})


def _is_request(message: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(message, dict) and "method" in message and "id" in message


def _is_jsonrpc(body: bytes) -> bool:
    """Whether a JSON body is a JSON-RPC message or a batch of them: what the client may be
    shown (an OAuth error object, say, is not: it would leave the client waiting)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    items = value if isinstance(value, list) and value else [value]
    return all(isinstance(item, dict) and item.get("jsonrpc") == "2.0" for item in items)


def _sent(message: object) -> Sent:
    """What a line carries, as far as the meaning of its answer goes."""
    if isinstance(message, dict) and message.get("method") == "initialize":
        return Sent.INITIALIZE
    if _is_request(message) or (isinstance(message, list) and any(map(_is_request, message))):
        return Sent.REQUEST
    return Sent.NO_REQUEST


def _stateless_version(message: object) -> str | None:
    """The revision a 2026-07-28 message names in its ``_meta`` (None: a handshake one)."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


class StdioBridge:
    def __init__(self, target: str, client: HttpClient, *,
                 credentials: Sequence[RemoteCredential] = (),
                 injected: Sequence[tuple[str, str]] = (),
                 max_line_bytes: int = 4 * 1024 * 1024, shutdown_grace: float = 30.0,
                 tools: ToolFilter | None = None, ping_interval: float | None = None,
                 dual_era: bool = False, transport: str = "auto") -> None:
        self.target = target
        self.tools = tools if tools is not None else ToolFilter(())
        self.ping_interval = ping_interval
        self.client = client
        self.credentials = credentials
        self.injected = injected
        self.max_line_bytes = max_line_bytes
        self.shutdown_grace = shutdown_grace
        self.session_id: str | None = None
        self.version: str | None = None
        """The protocol revision ``initialize`` agreed on."""
        self._initialize: bytes | None = None
        self._initialized: bytes | None = None
        self._out_lock = trio.Lock()
        self._stdout: trio.abc.SendStream | None = None
        self._stream_started = trio.Event()
        self._stream = Resumption(SSEParser())
        """The GET stream's place: its last event id and ``retry:`` outlive a reconnect."""
        self._reinitializing = trio.Lock()
        self.dual_era = DualEraBridge(target, client, self.write, credentials=credentials,
                                      injected=injected, tools=self.tools,
                                      max_body=max_line_bytes) if dual_era else None
        """``--protocol auto``: the client's session with a 2026-07-28 remote, once its
        ``server`` is known."""
        self._supervisor: Supervisor | None = None
        self.transport = transport
        """``--transport``: ``auto`` (Streamable HTTP, HTTP+SSE when the remote refuses it as
        an older server does), ``streamable-http`` or ``sse``."""
        self.legacy: LegacySseSession | None = None
        """The session on the HTTP+SSE transport, once it is the one."""
        self._legacy_opening = trio.Lock()

    # --- stdout --------------------------------------------------------------------------------

    async def write(self, line: bytes) -> None:
        assert self._stdout is not None
        async with self._out_lock:
            await self._stdout.send_all(line.rstrip(b"\n") + b"\n")

    # --- the run ----------------------------------------------------------------------------

    async def run(self, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream) -> None:
        """Until stdin ends; then the requests in flight finish and the session is deleted."""
        self._stdout = stdout
        async with trio.open_nursery() as background:
            supervisor = self._supervisor = Supervisor(background)
            supervisor.start_soon("the remote's GET stream", self._listen, policy=RECONNECT)
            if self.ping_interval is not None:
                supervisor.start_soon("keep-alive pings", self._keep_alive, policy=RECONNECT)
            async with trio.open_nursery() as requests:
                async for line in self._lines(stdin):
                    requests.start_soon(self._forward, line)
                requests.cancel_scope.deadline = trio.current_time() + self.shutdown_grace
            background.cancel_scope.cancel()
        await self._delete_session()

    async def _lines(self, stdin: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
        buffered = b""
        skipping = False
        while True:
            chunk = await stdin.receive_some(65536)
            if not chunk:
                break
            buffered += chunk
            while True:
                end = buffered.find(b"\n")
                if end < 0:
                    break
                line, buffered = buffered[:end], buffered[end + 1:]
                if skipping:
                    skipping = False
                    continue
                if line.strip():
                    yield line
            if len(buffered) > self.max_line_bytes:
                log.warning("a line from the client is longer than %d bytes: dropped",
                            self.max_line_bytes)
                buffered, skipping = b"", True
                await self.write(_error_line(None, -32600, f"message larger than "
                                                           f"{self.max_line_bytes} bytes"))
        if buffered.strip() and not skipping:
            yield buffered

    # --- one message -------------------------------------------------------------------------

    def _headers(self, message: object, sent: Sent) -> tuple[list[tuple[str, str]], str | None]:
        """A POST's transport headers for ``message``, and the session id they name."""
        version = _stateless_version(message)
        if version is not None and isinstance(message, dict):  # 2026-07-28: no session
            params = message.get("params")
            return [*post_headers(version), *metadata_headers(
                str(message.get("method", "")), params if isinstance(params, dict) else {})], None
        if sent is Sent.INITIALIZE:
            return post_headers(), None
        return post_headers(self.version, self.session_id), self.session_id

    async def _forward(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            await self.write(_error_line(None, -32700, "Parse error: the line is not JSON"))
            return
        request_id = message.get("id") if isinstance(message, dict) else None
        refused = self.tools.refusal(message)
        if refused is not None:
            await self.write(refused)
            return
        if isinstance(message, list) and self.tools and not (
                self.dual_era is not None and self.dual_era.server is not None):
            message, refusals = self.tools.split(message)
            for refusal in refusals:
                await self.write(refusal)
            if not message:
                return
            line = orjson.dumps(message)
        if isinstance(message, dict) and message.get("method") == "initialize":
            self._initialize = line
        elif isinstance(message, dict) and message.get("method") == "notifications/initialized":
            self._initialized = line
        try:
            if self.legacy is not None or self.transport == "sse":
                await self._legacy_forward(line, message)
                return
            if self.dual_era is not None and await self._bridged(message):
                return
            await self._post(line, message, replay_on_404=True)
        except (HttpError, LoginPending, RemoteFailed) as exc:
            log.warning("forwarding to %s failed: %s", self.target, exc)
            if _is_request(message):
                await self.write(_error_line(request_id, -32603, f"vmcp proxy: the remote "
                                                                  f"{self.target} failed: {exc}"))

    async def _bridged(self, message: object) -> bool:
        """``--protocol auto``: whether ``message`` is the dual-era bridge's (the remote
        speaks 2026-07-28 only and the client a handshake revision), which then took it. The
        client's ``initialize`` decides, with one ``server/discover``."""
        assert self.dual_era is not None and self._supervisor is not None
        if self.dual_era.server is not None:
            await self.dual_era.forward(message)
            return True
        if _sent(message) is not Sent.INITIALIZE or _stateless_version(message) is not None:
            return False
        try:
            initialize = parse_message(message)
        except JsonRpcError:
            return False
        if not isinstance(initialize, Request) or not await self.dual_era.discover(initialize):
            return False
        log.info("the remote %s speaks only 2026-07-28: bridging the client's session",
                 self.target)
        assert self.dual_era.listen is not None
        self._supervisor.start_soon("the remote's listen stream", self.dual_era.listen.run,
                                    policy=RECONNECT)
        return True

    async def _post(self, line: bytes, message: object, *, replay_on_404: bool,
                    show: bool = True) -> None:
        sent = _sent(message)
        transport, session_id = self._headers(message, sent)
        async with posted(self.client, self.target, transport, line, self.credentials,
                          self.injected) as response:
            answer = post_answer(response.status, media_type(response.header(
                "content-type")), sent, in_session=session_id is not None)
            if answer is PostAnswer.SESSION_GONE and replay_on_404 and session_id:
                await response.read(1 << 16)
                await self._reinitialize(session_id)
                await self._post(line, message, replay_on_404=False, show=show)
                return
            if answer is not PostAnswer.NOT_STREAMABLE or self.transport != "auto" \
                    or not show:
                await self._take(response, answer, message, show=show)
                return
            refused = _Refusal(response.status, media_type(response.header(
                "content-type")), await response.read(self.max_line_bytes))
        await self._fall_back(line, message, refused)

    async def _fall_back(self, line: bytes, message: object, refused: _Refusal) -> None:
        """The remote refused the client's ``initialize`` as a server of the HTTP+SSE transport
        does: that transport (:mod:`.legacy_sse`); when it has no SSE stream either, the client
        gets what the remote answered."""
        try:
            await self._legacy_forward(line, message)
        except RemoteFailed as exc:
            if refused.media == JSON and _is_jsonrpc(refused.body):
                await self._deliver(refused.body, message, show=True)
            else:
                await self._refuse(message, refusal(refused.status, refused.media,
                                                       refused.body)
                                   + f" to initialize and has no SSE stream either: {exc}")
            return
        log.info("the remote %s refused Streamable HTTP (HTTP %d): the HTTP+SSE transport",
                 self.target, refused.status)

    async def _legacy_forward(self, line: bytes, message: object) -> None:
        """A message on the HTTP+SSE transport, its stream opened first (raises
        :class:`RemoteFailed` when it cannot be)."""
        if self.legacy is None:
            async with self._legacy_opening:
                if self.legacy is None:
                    assert self._supervisor is not None
                    session = LegacySseSession(
                        self.target, self.client, self.write, credentials=self.credentials,
                        injected=self.injected, max_event_bytes=self.max_line_bytes)
                    if await session.open(self._supervisor) is None:
                        raise RemoteFailed(session.failure)
                    self.legacy = session
        await self.legacy.forward(line, message)

    async def _take(self, response: HttpResponse, answer: PostAnswer, message: object, *,
                    show: bool) -> None:
        """The remote's answer to one POST, to stdout (or, for a replay, read and dropped):
        the events of a stream, a JSON body (the answer, or what the remote refused the message
        with), or for a request an error saying what came instead."""
        session = response.header("mcp-session-id")
        if session is not None and isinstance(message, dict) and message.get(
                "method") == "initialize":
            self.session_id = session
        if answer is PostAnswer.STREAM:
            parser = SSEParser()
            async for chunk in response.iter_bytes():
                for event in parser.feed(chunk):
                    if event.data:
                        await self._deliver(event.data.encode(), message, show=show)
            return
        if answer is PostAnswer.ACCEPTED:
            return
        body = await response.read(self.max_line_bytes)
        media = media_type(response.header("content-type"))
        if media == JSON and _is_jsonrpc(body):
            await self._deliver(body, message, show=show)
        elif show:  # the client must not wait for nothing
            await self._refuse(message, refusal(response.status, media, body))

    async def _refuse(self, message: object, why: str) -> None:
        """Each request of ``message`` (one, or a batch's) answered with an error saying
        ``why``."""
        for request in message if isinstance(message, list) else [message]:
            if _is_request(request):
                await self.write(_error_line(request.get("id"), -32603,
                                             f"vmcp proxy: the remote {why}"))

    async def _deliver(self, data: bytes, message: object, *, show: bool) -> None:
        if isinstance(message, dict) and message.get("method") == "initialize":
            try:
                answer = orjson.loads(data)
            except orjson.JSONDecodeError:
                answer = None
            result = answer.get("result") if isinstance(answer, dict) else None
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self.version = result["protocolVersion"]
                self._stream_started.set()
        if show and self.tools and isinstance(message, dict) \
                and message.get("method") == "tools/list":
            data = self.tools.listed(data)
        if show:
            await self.write(data)

    async def _reinitialize(self, expired: str) -> None:
        """The remote forgot the session: replay the client's handshake (once per expiry)."""
        async with self._reinitializing:
            if self.session_id != expired or self._initialize is None:
                return
            log.info("the remote's session %s... expired: initializing again", expired[:8])
            self.session_id = None
            replay = orjson.loads(self._initialize)
            replay["id"] = _REPLAY_ID
            await self._post(orjson.dumps(replay), replay, replay_on_404=False, show=False)
            if self._initialized is not None:
                await self._post(self._initialized, orjson.loads(self._initialized),
                                 replay_on_404=False, show=False)

    # --- the GET stream ----------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        """A ``ping`` every ``ping_interval`` seconds once the session is open."""
        assert self.ping_interval is not None
        await self._stream_started.wait()
        count = 0
        while True:
            await trio.sleep(self.ping_interval)
            count += 1
            ping = {"jsonrpc": "2.0", "id": f"{_PING_ID}-{count}", "method": "ping"}
            try:
                await self._post(orjson.dumps(ping), ping, replay_on_404=True, show=False)
            except (HttpError, LoginPending) as exc:
                log.info("keep-alive ping to %s failed: %s", self.target, exc)

    async def _listen(self) -> None:
        """What the server sends unasked, from ``initialize`` on: one GET stream, for the
        supervisor. It always ends in :class:`Retry` (told that the backoff starts over when
        the stream opened, and the wait the remote asked for with ``retry:``), except when the
        remote has no GET stream (405)."""
        await self._stream_started.wait()
        stream = self._stream
        parser = stream.next_connection()
        opened = False
        try:
            headers = stream_headers(self.version, self.session_id, stream.last_event_id)
            headers += await credential_headers(self.credentials, None, self.injected)
            async with self.client.stream("GET", self.target, headers=headers) as response:
                answer = stream_answer(response.status,
                                       media_type(response.header("content-type")))
                if answer is StreamAnswer.NONE:
                    log.info("the remote has no GET stream")
                    return
                if answer is StreamAnswer.REFUSED:
                    raise Retry(f"HTTP {response.status}", after=stream.retry_delay)
                opened = True
                async for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        if event.data:
                            await self.write(event.data.encode())
        except (HttpError, LoginPending, SSEError) as exc:
            raise Retry(str(exc), reset=opened, after=stream.retry_delay) from None
        raise Retry("ended", reset=True, after=stream.retry_delay)

    async def _delete_session(self) -> None:
        if self.session_id is None:
            return
        headers = delete_headers(self.version, self.session_id)
        with trio.move_on_after(5):
            try:
                headers += await credential_headers(self.credentials, None, self.injected)
                await self.client.request("DELETE", self.target, headers=headers)
            except (HttpError, LoginPending):
                pass


def standard_streams() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """The process's stdin and stdout as trio streams (duplicated descriptors)."""
    return trio.lowlevel.FdStream(os.dup(0)), trio.lowlevel.FdStream(os.dup(1))
