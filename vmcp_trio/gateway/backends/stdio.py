"""A backend that vmcp starts as a stdio process, supervised and shared by all client sessions.

One process per backend, not per client session: a stdio server is a program, often heavy (a
Node runtime), and ToolHive too runs one per server. vmcp initializes it once and multiplexes
every session's requests over it with ids of its own. What this costs, and how it is handled:

* Progress tokens are rewritten per call (``p<id>``) so two sessions' tokens cannot collide, and
  restored on the way back.
* A stdio server's messages carry no link to the request they concern except progress tokens.
  Logging and server-to-client requests (sampling, elicitation, roots) are sent to the one
  session with calls in flight when there is exactly one; with several, a request is refused
  with an error and a log line is dropped (never guessed: that could leak one user's data to
  another). With no call in flight, log lines go to every session.
* One session may hold at most ``max_calls_per_session`` calls in flight on the process (16 by
  default): a session that starts many long calls cannot take the backend from the others.
* ``logging/setLevel`` is one level for the process: it is set to the most verbose level any
  session wants (set again after a restart), and each session filters its own messages, so
  one session turning its logs down does not silence another's.
* ``list_changed`` notifications go to every session; ``resources/updated`` to the sessions that
  subscribed to that URI. The backend sees one subscription per URI, however many sessions hold
  it.

Supervision: :meth:`StdioProcess.run` is one life of the process (started, initialized within
``init_timeout``, the backend's operational timeout, served until it exits), run by the
supervisor. When it ends, every pending call fails with an error naming the backend, and the
supervisor starts it again after an exponential backoff with jitter (reset after a minute of
uptime). A process that cannot start, never answers ``initialize``, exits at once or writes a
line over 4 MiB is that backend's failure alone. Its stderr goes to the log, line by line. It
gets a minimal environment (``PATH``, ``HOME``, locale, temp dir) plus ``spec.env``: the
gateway's own environment may hold secrets.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ...protocol.jsonrpc import (
    INTERNAL_ERROR,
    ErrorObject,
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)
from ...protocol.log_levels import LOG_LEVELS, most_verbose
from ...protocol.revisions import LATEST_HANDSHAKE, Revision
from ...protocol.tasks_extension import STATUS_NOTIFICATION
from ...resources.plan import StdioEndpoint
from ...runtime.supervisor import Retry
from .base import BackendError, BackendTimedOut, Sink, initialize_params, read_initialize
from .pending import PendingCall, PendingCalls

__all__ = ["StdioBackendLink", "StdioProcess"]

log = logging.getLogger("vmcp.backend.stdio")

MAX_LINE = 4 * 1024 * 1024
_BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SYSTEMROOT")
# What vmcp tells a shared stdio server it can relay on a client's behalf.
RELAY_CAPABILITIES: dict[str, Any] = {"roots": {"listChanged": True}, "sampling": {},
                                      "elicitation": {}}


SessionRouter = Callable[[str, str | None, Message], Awaitable[None]]
"""``(backend, session id, message)``: delivers a message of ``backend`` that no call is waiting
for to one session, or to every session when the id is None."""


async def _no_sessions(backend: str, owner: str | None, message: Message) -> None:
    """The router until the owner of the sessions sets one: nobody to deliver to."""


class StdioProcess:
    def __init__(self, name: str, endpoint: StdioEndpoint, *,
                 init_timeout: float = 30.0, max_calls_per_session: int = 16) -> None:
        self.name = name
        self.endpoint = endpoint
        self.max_calls_per_session = max_calls_per_session
        """The share of the process one client session may hold with calls in flight."""
        self.on_restart: Callable[[str], None] | None = None
        """Told the backend's name each time its process is started again (a metric)."""
        self.router: SessionRouter = _no_sessions
        """Set by the owner of the client sessions (:class:`~vmcp_trio.gateway.core.Gateway`)."""
        self.init_timeout = init_timeout
        self.revision: Revision = LATEST_HANDSHAKE
        self.server_capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.instructions: str | None = None
        self.state = "starting"
        self._lives = 0
        self.last_error: str | None = None
        self.ready = trio.Event()
        self._process: trio.Process | None = None
        self._fault: str | None = None
        """Why the gateway stopped the current process, if it did."""
        self._send_lock = trio.Lock()
        self._ids = itertools.count(1)
        self._calls = PendingCalls(name)
        self._tokens: dict[str, PendingCall] = {}
        """Rewritten progress token -> the call it belongs to."""
        self._subscriptions: dict[str, set[str]] = {}
        self._levels: dict[str, str] = {}
        """The log level each session asked for."""
        self._level_sent: str | None = None
        """The log level this life of the process was set to."""
        self._attached: set[str] = set()
        """The sessions with a link to the process."""

    # --- supervision ---------------------------------------------------------------------------

    async def run(self) -> None:
        """One life of the process, for the supervisor (which starts it again after a backoff):
        start it, initialize it, serve until it exits. Ends by raising :class:`Retry` saying
        why (the process is stopped, and every call in flight fails naming the backend)."""
        self._lives += 1
        if self._lives > 1 and self.on_restart is not None:
            self.on_restart(self.name)
        self.state = "starting"
        reason = "stopped"
        try:
            reason = await self._live()
        except OSError as exc:
            reason = f"cannot start: {exc.strerror or exc}"
        finally:
            self.last_error = reason
            self.state = "backoff"
            self.ready = trio.Event()
            self._calls.fail_all(reason)
        raise Retry(f"backend {self.name} {reason}", level=logging.WARNING)

    @property
    def restarts(self) -> int:
        return max(0, self._lives - 1)

    def _environment(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
        env.update(dict(self.endpoint.env))
        return env

    async def _live(self) -> str:
        """Run the process until it ends; why it ended."""
        command = [self.endpoint.command, *self.endpoint.args]
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=self.endpoint.working_dir, env=self._environment(),
            start_new_session=True)  # a Ctrl-C in the terminal is for vmcp, which stops it
        self._process = process
        self._fault = None
        self._level_sent = None
        reason: str | None = None
        try:
            # Nothing is raised out of this nursery's body (trio would wrap it in a group):
            # the outcome is kept in ``reason``.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stdout, process, nursery.cancel_scope)
                nursery.start_soon(self._read_stderr, process)
                try:
                    with trio.fail_after(self.init_timeout):
                        await self._initialize()
                        await self._apply_level(owner="", sink=self._drop)
                except trio.TooSlowError:
                    reason = f"did not answer initialize within {self.init_timeout:g}s"
                except BackendError as exc:
                    reason = exc.detail
                    with trio.move_on_after(1):  # an exit says more than a closed pipe
                        await process.wait()
                    if process.returncode is not None:
                        reason = None
                else:
                    self.state = "running"
                    self.ready.set()
                    log.info("backend %s running (pid %s, protocol %s)", self.name,
                             process.pid, self.revision)
                    await process.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._process = None
            with trio.CancelScope(shield=True):
                await _stop(process)
        if self._fault is not None:
            return self._fault
        if reason is not None:
            return reason
        before = "" if self.ready.is_set() else " before answering initialize"
        return f"exited with status {process.returncode}{before}"

    async def _initialize(self) -> None:
        reply = await self._request_raw(
            "initialize", initialize_params(LATEST_HANDSHAKE.version, RELAY_CAPABILITIES),
            owner="", sink=self._drop)
        (self.revision, self.server_capabilities, self.server_info,
         self.instructions) = read_initialize(self.name, reply)
        await self._send(Notification("notifications/initialized"))

    async def _drop(self, message: Message) -> None:
        log.debug("backend %s: ignored %s during initialize", self.name, type(message).__name__)

    # --- I/O ---------------------------------------------------------------------------------

    async def _send(self, message: Message) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise BackendError(self.name, f"is not running ({self.last_error or 'starting'})")
        async with self._send_lock:
            try:
                await process.stdin.send_all(encode(message) + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise BackendError(self.name, "closed its input") from None

    async def _read_stdout(self, process: trio.Process, scope: trio.CancelScope) -> None:
        """Every line of the process's stdout, each a message, until it ends. A line over
        :data:`MAX_LINE` bytes (counted as it arrives, before it is complete) stops the
        process: the supervisor starts it again."""
        assert process.stdout is not None
        buffer = bytearray()
        too_long = False
        while not too_long and (chunk := await process.stdout.receive_some(65536)):
            searched = len(buffer)  # what was there before holds no newline
            buffer += chunk
            while (newline := buffer.find(b"\n", searched)) != -1:
                if newline > MAX_LINE:
                    break
                line = bytes(buffer[:newline])
                del buffer[:newline + 1]
                searched = 0
                if line.strip():
                    try:
                        await self._dispatch(line)
                    except BackendError as exc:  # answering it failed: the process is going
                        log.info("%s", exc)
            too_long = newline > MAX_LINE or len(buffer) > MAX_LINE
        if too_long:
            self._fault = f"wrote a line over {MAX_LINE} bytes"
            log.error("backend %s %s; restarting it", self.name, self._fault)
        with trio.CancelScope(shield=True):
            await _stop(process)
        scope.cancel()

    async def _read_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        buffer = b""
        while chunk := await process.stderr.receive_some(65536):
            buffer += chunk
            lines = buffer.split(b"\n")
            buffer = lines.pop()[-MAX_LINE:]
            for line in lines:
                if line.strip():
                    log.info("backend %s stderr: %s", self.name,
                             line[:2000].decode("utf-8", errors="replace"))

    async def _dispatch(self, line: bytes) -> None:
        message = self._calls.decode(line)
        if message is None:
            return
        if isinstance(message, Response | ErrorResponse):
            self._calls.deliver(message)
            return
        if isinstance(message, Request):
            await self._server_request(message)
            return
        await self._server_notification(message)

    async def _server_notification(self, message: Notification) -> None:
        params = message.params or {}
        method = message.method
        if method == "notifications/progress":
            pending = self._tokens.get(str(params.get("progressToken")))
            if pending is not None:
                restored = {**params, "progressToken": pending.progress_token}
                await pending.sink(Notification(method, restored))
            return
        if method == "notifications/resources/updated":
            for owner in sorted(self._subscriptions.get(str(params.get("uri")), ())):
                await self.router(self.name, owner, message)
            return
        if method.endswith("/list_changed"):
            await self.router(self.name, None, message)
            return
        if method == STATUS_NOTIFICATION:  # one process for every session: whose task is it?
            log.debug("backend %s: a task status dropped (a shared process hands out no "
                      "tasks)", self.name)
            return
        owners = self._owners()
        if len(owners) == 1:
            owner = next(iter(owners))
            await self._latest_sink(owner)(message)
        elif not owners:
            await self.router(self.name, None, message)
        else:
            log.debug("backend %s: %s dropped, %d sessions have calls in flight", self.name,
                      method, len(owners))

    async def _server_request(self, message: Request) -> None:
        if message.method == "ping":
            await self._send(Response(message.id, {}))
            return
        owners = self._owners()
        if len(owners) != 1:
            why = ("no client session has a call in flight" if not owners else
                   "several client sessions have calls in flight")
            await self._send(ErrorResponse(message.id, ErrorObject(
                INTERNAL_ERROR, f"vmcp cannot route {message.method} from a shared stdio "
                                f"backend: {why}")))
            return
        await self._latest_sink(next(iter(owners)))(message)

    def _owners(self) -> set[str]:
        return self._calls.owners()

    def _latest_sink(self, owner: str) -> Sink:
        for call in reversed(list(self._calls.calls.values())):
            if call.owner == owner:
                return call.sink
        raise AssertionError("owner has no pending call")

    # --- requests ------------------------------------------------------------------------------

    async def _request_raw(self, method: str, params: dict[str, Any] | None, *, owner: str,
                           sink: Sink) -> Response | ErrorResponse:
        request_id = next(self._ids)
        call = PendingCall(owner, sink)
        meta = (params or {}).get("_meta")
        token = f"p{request_id}"
        if isinstance(meta, dict) and "progressToken" in meta:
            call.progress_token = meta["progressToken"]
            params = {**(params or {}), "_meta": {**meta, "progressToken": token}}
            self._tokens[token] = call
        try:
            return await self._calls.exchange(Request(request_id, method, params), call,
                                              self._send)
        finally:
            self._tokens.pop(token, None)

    async def request(self, method: str, params: dict[str, Any] | None, *, owner: str,
                      sink: Sink) -> Response | ErrorResponse:
        if not self.ready.is_set():
            raise BackendError(self.name, f"is not running ({self.last_error or 'starting'})")
        if owner and self._calls.in_flight(owner) >= self.max_calls_per_session:
            raise BackendError(self.name, f"already has {self.max_calls_per_session} calls of "
                                          "this session in flight, the most one session may "
                                          "have on a shared stdio backend; wait for one to "
                                          "finish")
        return await self._request_raw(method, params, owner=owner, sink=sink)

    async def send(self, message: Message) -> None:
        await self._send(message)

    async def subscribe(self, owner: str, uri: str, sink: Sink) -> Response | ErrorResponse:
        holders = self._subscriptions.setdefault(uri, set())
        if holders:
            holders.add(owner)
            return Response(0, {})
        reply = await self.request("resources/subscribe", {"uri": uri}, owner=owner, sink=sink)
        if isinstance(reply, Response):
            holders.add(owner)
        elif not holders:
            del self._subscriptions[uri]
        return reply

    async def unsubscribe(self, owner: str, uri: str, sink: Sink) -> Response | ErrorResponse:
        holders = self._subscriptions.get(uri, set())
        holders.discard(owner)
        if holders:
            return Response(0, {})
        self._subscriptions.pop(uri, None)
        return await self.request("resources/unsubscribe", {"uri": uri}, owner=owner, sink=sink)

    async def set_level(self, owner: str, level: str, sink: Sink) -> Response | ErrorResponse:
        self._levels[owner] = level
        return await self._apply_level(owner=owner, sink=sink)

    async def _apply_level(self, *, owner: str, sink: Sink) -> Response | ErrorResponse:
        """Set the process to the most verbose level its sessions want (once per change), a
        session that never asked counting as wanting all (as the gateway's own filter does);
        until a session asks, the server keeps the level it chose."""
        wanted = most_verbose(self._levels.get(owner, "debug") for owner in self._attached)
        if (not self._levels or wanted is None or wanted == self._level_sent
                or "logging" not in self.server_capabilities):
            return Response(0, {})
        reply = await self._request_raw("logging/setLevel", {"level": wanted}, owner=owner,
                                        sink=sink)
        if isinstance(reply, Response):
            self._level_sent = wanted
        return reply

    @property
    def in_use(self) -> bool:
        """A session's link still uses the process, or a call is in flight on it (what
        retiring it waits for)."""
        return bool(self._attached or self._calls.calls)

    def attach(self, owner: str) -> None:
        self._attached.add(owner)

    def forget(self, owner: str) -> None:
        """A session ended (or let go of its link): drop its subscriptions (the backend keeps
        one if others hold it)."""
        self._attached.discard(owner)
        self._levels.pop(owner, None)
        for holders in self._subscriptions.values():
            holders.discard(owner)


async def _stop(process: trio.Process) -> None:
    """Close stdin, then SIGTERM, then SIGKILL (the spec's stdio shutdown order)."""
    if process.returncode is not None:
        return
    if process.stdin is not None:
        await trio.aclose_forcefully(process.stdin)
    with trio.move_on_after(2):
        await process.wait()
        return
    process.terminate()
    with trio.move_on_after(2):
        await process.wait()
        return
    process.kill()
    await process.wait()


class StdioBackendLink:
    """One client session's view of a shared :class:`StdioProcess`."""

    def __init__(self, process: StdioProcess, owner: str, *, timeout: float = 60.0) -> None:
        self.process = process
        self.owner = owner
        process.attach(owner)
        self.name = process.name
        self.timeout = timeout

    @property
    def revision(self) -> Revision:
        return self.process.revision

    @property
    def server_capabilities(self) -> dict[str, Any]:
        return self.process.server_capabilities

    @property
    def server_info(self) -> dict[str, Any]:
        return self.process.server_info

    @property
    def instructions(self) -> str | None:
        return self.process.instructions

    async def call(self, method: str, params: dict[str, Any] | None,
                   sink: Sink) -> Response | ErrorResponse:
        uri = (params or {}).get("uri")
        try:
            with trio.fail_after(self.timeout):
                if method == "resources/subscribe" and isinstance(uri, str):
                    return await self.process.subscribe(self.owner, uri, sink)
                if method == "resources/unsubscribe" and isinstance(uri, str):
                    return await self.process.unsubscribe(self.owner, uri, sink)
                level = (params or {}).get("level")
                if method == "logging/setLevel" and level in LOG_LEVELS:
                    return await self.process.set_level(self.owner, str(level), sink)
                return await self.process.request(method, params, owner=self.owner, sink=sink)
        except trio.TooSlowError:
            raise BackendTimedOut(self.name, f"answer {method}", self.timeout) from None

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        await self.process.send(Notification(method, params))

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        if isinstance(message, Response):
            await self.process.send(Response(request_id, message.result))
        else:
            await self.process.send(ErrorResponse(request_id, message.error))

    async def aclose(self) -> None:
        self.process.forget(self.owner)
