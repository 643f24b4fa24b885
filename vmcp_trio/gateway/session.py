"""One client session of the virtual server: its backend links, catalog, streams and requests.

A :class:`ClientSession` is created by ``initialize`` and lives in its own nursery (see
:meth:`ClientSession.run`): the backend links' GET streams, the requests it is working on and
their relays all run there, so ending the session (DELETE, idle expiry, shutdown) cancels
everything it opened, and nothing outlives it.

What the client sees is one server. Requests are answered from the aggregated catalog or routed
to one backend under the backend's own names; ``logging/setLevel`` and ``notifications/roots/
list_changed`` go to every backend. Messages a backend sends during a call go on that call's
response stream; others go on the session's standalone stream. Server-to-client requests get a
session-unique id (``vmcp-<n>``; with shared sessions ``vmcp-<replica>-<n>``, so that an answer
posted to another replica is sent to this one) on the way out, and the client's answer goes back
to the backend that asked under the backend's id.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ..auth.caller import Caller
from ..auth.identity import Identity
from ..composite.engine import StepFailed, WorkflowPorts, coerce_arguments, run_workflow
from ..protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    TOO_BUSY,
    ErrorObject,
    ErrorResponse,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
    encode_error,
)
from ..protocol.log_levels import LOG_LEVELS, level_wanted
from ..protocol.revisions import Revision, revision
from ..protocol.stateless_requests import (
    CLIENT_CAPABILITIES,
    MISSING_CLIENT_CAPABILITY,
    SUBSCRIPTION_ID,
    StatelessContext,
)
from ..protocol.tasks_extension import (
    STATUS_NOTIFICATION,
    TASK_METHODS,
    TASKS_EXTENSION,
    declares_tasks,
    is_task_result,
    required_capability_data,
)
from ..protocol.translation import params_for_handshake
from ..resources.composite_plan import WorkflowPlan
from ..resources.plan import GatewayPlan
from ..runtime import tracing
from ..runtime.audit import AuditLog, mcp_event
from ..runtime.audit import Caller as AuditCaller
from ..runtime.logs import ACCESS, REQUEST_ID, note
from ..runtime.metrics import Metrics
from ..runtime.supervisor import NEVER_RESTART, Supervisor
from .admission import Gate, Refusal
from .aggregation import BackendListing, Catalog, Route, build_catalog, with_composite_tools
from .backends.base import Answerable, BackendError, BackendLink, Sink, backend_error
from .backends.http import HttpBackendLink
from .backends.links import BackendLinks
from .backends.stateless_link import StatelessBackendLink
from .call_log import LOST, CallLog, LoggedCall
from .health import HealthMonitor
from .parked_calls import (
    ParkedCall,
    RequestStateSigner,
    check_input_responses,
    params_digest,
)
from .session_records import BackendSession, SessionRecord
from .streams import EventStream, StreamRegistry
from .task_ids import TaskIds, owns_tasks_per_caller

__all__ = ["ClientSession", "SessionBusy", "SessionClosed", "SessionServices"]

log = logging.getLogger("vmcp.session")

MAX_PAGES = 50
RETRY_FAILED_AFTER = 2.0
"""Seconds between tries of a backend that failed this session's catalog."""
MAX_PENDING_CLIENT_REQUESTS = 1024
_LIST_CHANGED = {
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
}
# What each capability-gated relay needs the client to have declared.
_CLIENT_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                      "roots/list": "roots"}

_KNOWN_METHODS = frozenset({
    "ping", "initialize", "tools/list", "tools/call", "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "completion/complete", "logging/setLevel", *TASK_METHODS})
"""Methods that get their own metrics label (others are "other": bounded cardinality)."""


class SessionClosed(Exception):
    """The session ended while a request was using it."""


class SessionBusy(Exception):
    """The session has as many requests at work as it may (the message says so)."""


class Workload:
    """The requests being answered now, across all sessions, from their arrival until their
    answer is on its way (pushed on its stream, or in its batch): what a drain waits for."""

    def __init__(self) -> None:
        self.active = 0
        self._idle = trio.Event()
        self._idle.set()

    def enter(self) -> None:
        if self.active == 0:
            self._idle = trio.Event()
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


@dataclass
class SessionServices:
    """What a session uses of the process: the same for every session (a reload changes the
    plan here, for all of them at once)."""

    plan: GatewayPlan
    links: BackendLinks
    health: HealthMonitor
    metrics: Metrics
    request_states: RequestStateSigner
    """Signs and checks 2026-07-28 ``requestState`` values."""
    task_ids: TaskIds
    """Seals the backends' task ids into the ids clients see."""
    forget: Callable[[ClientSession], None]
    """Told when a session ended, to drop it from the table."""
    stream_buffer_events: int = 256
    sse_retry_ms: int = 2000
    max_requests: int = 64
    """Requests of one session at work at once."""
    workload: Workload = field(default_factory=Workload)
    call_log: CallLog | None = None
    """Shared sessions: where calls answered over SSE are logged (:mod:`.call_log`)."""
    stream_key_prefix: str = ""
    """Shared sessions: the replica's id, before each response stream's key."""
    gate: Gate | None = None
    """Authorization policies and rate limits (:mod:`.admission`); None: neither."""
    audit: AuditLog = field(default_factory=AuditLog.disabled)
    """Where an event per request is recorded (``config.audit``)."""


class _ClientAnswer:
    """The client's answer to a question the gateway itself asked (see ``_ask_client``)."""

    def __init__(self) -> None:
        self.answered = trio.Event()
        self.reply: Response | ErrorResponse | None = None

    async def answer(self, request_id: RequestId, message: Response | ErrorResponse) -> None:
        self.reply = message
        self.answered.set()


@dataclass
class Call:
    """One request being answered: where its related messages go and, for a 2026-07-28
    request, the client's per-request context and the parked call that gathers the backend's
    questions for it."""

    stream: EventStream
    stateless: StatelessContext | None = None
    parked: ParkedCall | None = None
    backend: str | None = None
    """The backend the request went to, once routed."""
    progress_token: str | int | None = None
    """The client's ``progressToken`` for the gateway's own progress (a composite tool's):
    a 2026-07-28 retry brings its own, and progress goes under the latest."""


def _progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


@dataclass
class Subscription:
    """A 2026-07-28 ``subscriptions/listen`` stream and what it asked for."""

    id: RequestId
    stream: EventStream
    methods: frozenset[str]
    uris: frozenset[str]
    task_ids: frozenset[str] = frozenset()
    """The watched tasks, by the ids the client sees."""

    def wants(self, message: Notification) -> bool:
        if message.method == "notifications/resources/updated":
            uri = (message.params or {}).get("uri")
            return isinstance(uri, str) and uri in self.uris
        if message.method == STATUS_NOTIFICATION:
            return (message.params or {}).get("taskId") in self.task_ids
        return message.method in self.methods


def _error(request_id: RequestId | None, code: int, message: str) -> ErrorResponse:
    return ErrorResponse(request_id, ErrorObject(code, message))


class ClientSession:
    def __init__(self, services: SessionServices, session_id: str, revision: Revision,
                 client_capabilities: dict[str, Any], client_info: dict[str, Any],
                 caller: Caller) -> None:
        self.services = services
        self.id = session_id
        self.revision = revision
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.identity: Identity = caller.identity
        self.client_key = caller.client_key
        """Who the session counts against in the per-client bounds (fixed at creation)."""
        self.caller = caller
        """Who sent the session's latest request (its token is the one its backend
        credentials are computed for)."""
        self.links: dict[str, BackendLink] = {}
        self._calls_on: Counter[BackendLink] = Counter()
        """Calls in flight on each link (what retiring a link waits for)."""
        self.failed_backends: dict[str, str] = {}
        self.streams = StreamRegistry(
            max_events=services.stream_buffer_events,
            retry_ms=services.sse_retry_ms if revision.primes_streams else None,
            key_prefix=services.stream_key_prefix)
        self.last_active = trio.current_time()
        self.open_connections = 0
        self.closed = trio.Event()
        self._supervisor: Supervisor | None = None
        self._requests: trio.Nursery | None = None
        self._working = 0
        """Request tasks at work (:meth:`spawn`)."""
        self._catalog: Catalog | None = None
        self._catalog_retry_at = 0.0
        """When a catalog with failures is next rebuilt (trio clock)."""
        self._catalog_generation = 0
        self._catalog_lock = trio.Lock()
        self._relay_ids = itertools.count(1)
        self._relayed: dict[str, tuple[Answerable, RequestId]] = {}
        self._in_flight: dict[RequestId, trio.CancelScope] = {}
        """The scope of each request being answered, by the id the client gave it."""
        self._scopes: set[trio.CancelScope] = set()
        """Every request being answered (ids may collide)."""
        self._stopped_because: str | None = None
        """Set when the gateway stops the calls in flight (its shutdown deadline)."""
        # 2026-07-28 only: calls waiting for the client's answers, and listen streams.
        self.parked: dict[str, ParkedCall] = {}
        self.subscriptions: list[Subscription] = []
        self._uri_refs: dict[str, int] = {}
        self._task_refs: dict[str, int] = {}
        """Listen streams watching each task (by the id the client sees)."""
        """Listen streams holding each subscribed URI."""
        self._subscriptions_lock = trio.Lock()
        self.log_level = "debug"
        """The level a handshake client set with ``logging/setLevel``: vmcp enforces it for
        every backend, also those that do not filter (or have no logging capability)."""
        # Shared sessions (sessionStorage: redis, see .sharing): what this copy joined, and who
        # hears that the session changed.
        self.joined: SessionRecord | None = None
        """The record this copy was made from (another replica created the session): its
        links join the backend sessions it names."""
        self.on_changed: Callable[[], None] | None = None
        """Told when something the session record holds changed here."""
        self._ending = True
        """Closing ends the session (its backend sessions too); False: only this copy."""
        self.relay_prefix = (f"vmcp-{services.stream_key_prefix}-" if services.stream_key_prefix
                             else "vmcp-")
        """Before the ids of the requests this copy relays to the client (with shared sessions
        they name the replica, where the client's answer must go)."""
        self.on_note: Callable[[bytes], None] | None = None
        """Shared sessions: told each backend message this copy put on the standalone stream
        (the client's GET may be at another replica)."""
        self.parked_elsewhere: Callable[[str, Request, StatelessContext, EventStream],
                                        Awaitable[Response | ErrorResponse | None]] | None = None
        """Shared sessions, 2026-07-28: a retry whose parked call another replica holds goes
        there (None back: the call id names this replica)."""
        self.on_elsewhere: Callable[[Message], None] | None = None
        """Shared sessions: told a client's answer, or cancellation, of a request this copy
        does not hold (another replica relayed or answers it)."""
        self._record_version = 0

    # --- lifetime ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect the backends, report started, and hold the session until closed.

        Two nurseries: the session's machinery (its backend links' long-lived tasks, under the
        session's own supervisor) and, inside it, the client's requests (:meth:`spawn`), so
        that closing the session stops the requests before the links they use. Whatever goes
        wrong in the session ends it, and only it (it never raises but to be cancelled)."""
        started = False
        try:
            async with trio.open_nursery() as machinery:
                self._supervisor = Supervisor(machinery,
                                              on_restart=self.services.metrics.count_restart)
                async with trio.open_nursery() as requests:
                    self._requests = requests
                    await self._connect_backends(self._supervisor)
                    task_status.started()
                    started = True
                    await self.closed.wait()
                    requests.cancel_scope.cancel()
                machinery.cancel_scope.cancel()
        except Exception as exc:
            self.fail("its machinery", exc)
        finally:
            self.closed.set()
            with trio.CancelScope(shield=True):
                for link in self.links.values():
                    if not self._ending and isinstance(link, HttpBackendLink):
                        link.release()  # the backend session goes on for the other copies
                        continue
                    with contextlib.suppress(Exception):
                        await link.aclose()
            self.services.forget(self)
            if not started:
                task_status.started()  # whoever waits for it finds it closed

    def fail(self, what: str, error: BaseException) -> None:
        """A fault in the session's own machinery: log it, count it, end this session (its
        client's next request gets 404, as for an expired session)."""
        log.error("session %s: %s failed; ending the session", self.id[:8], what,
                  exc_info=error)
        self.services.metrics.faults.labels("session").inc()
        self.close()

    async def _connect(self, name: str, supervisor: Supervisor) -> None:
        """Connect to a backend (a link to it, or why not in ``failed_backends``)."""
        await self._open(name, supervisor, self.links)

    async def _open(self, name: str, supervisor: Supervisor,
                    into: dict[str, BackendLink]) -> None:
        try:
            health = self.services.health
            if not health.usable(name):
                raise BackendError(name, f"is unhealthy ({health.backends[name].last_error})")
            joined = self.joined.backends.get(name) if self.joined is not None else None
            link = None
            if joined is not None and (negotiated := revision(joined.revision)) is not None:
                link = self.services.links.join(
                    name, (joined.session_id, negotiated, joined.server_capabilities,
                           joined.server_info, joined.instructions),
                    capabilities=self.client_capabilities, sink=self.unrelated_sink(name),
                    caller=lambda: self.caller, supervisor=supervisor)
            if link is None:
                link = await self.services.links.open(
                    name, owner=self.id, capabilities=self.client_capabilities,
                    sink=self.unrelated_sink(name), caller=lambda: self.caller,
                    supervisor=supervisor)
                if self.joined is not None:
                    self._changed()  # a backend session the record did not name
            if isinstance(link, HttpBackendLink):
                link.on_new_session = self._changed
            into[name] = link
            self.failed_backends.pop(name, None)
        except BackendError as exc:
            self.failed_backends[name] = exc.detail
            log.warning("session %s: %s", self.id[:8], exc)

    async def _connect_backends(self, supervisor: Supervisor) -> None:
        async with trio.open_nursery() as connecting:
            for backend in self.services.plan.backends:
                connecting.start_soon(self._connect, backend.name, supervisor)

    def backend_health_changed(self, backend: str, usable: bool) -> None:
        """A backend became unhealthy or healthy again: rebuild the catalog (connecting to it if
        this session never could) and tell the client its lists changed. The work is the
        session's (a task of its machinery): the health checker that tells does not wait."""
        if self.closed.is_set() or self._supervisor is None:
            return
        self._supervisor.start_soon(f"health change of {backend}", self._react_to_health,
                                    self._supervisor, backend, usable, policy=NEVER_RESTART)

    async def _react_to_health(self, supervisor: Supervisor, backend: str,
                               usable: bool) -> None:
        if usable and backend not in self.links:
            await self._connect(backend, supervisor)
        self.invalidate_catalog()
        self._tell_lists_changed()

    def backends_changed(self, gone: set[str], new: set[str]) -> None:
        """A reload changed the backends: links to those in ``gone`` are retired (no new call
        goes to them; the calls in flight finish, within the backend's timeout, then the link
        is closed), those in ``new`` are connected, and the client hears its lists changed
        (with nothing gone or new: the aggregation changed, the lists too)."""
        if self.closed.is_set() or self._supervisor is None:
            return
        self._supervisor.start_soon("reload", self._change_backends, self._supervisor, gone,
                                    new, policy=NEVER_RESTART)

    async def _change_backends(self, supervisor: Supervisor, gone: set[str],
                               new: set[str]) -> None:
        """Removed backends leave at once; a changed one is connected anew first and then
        swapped in, so that no call finds it missing meanwhile (the old link serves until
        then)."""
        retired = [self.links.pop(name) for name in sorted(gone - new) if name in self.links]
        for name in gone - new:
            self.failed_backends.pop(name, None)
        self.invalidate_catalog()
        fresh: dict[str, BackendLink] = {}
        async with trio.open_nursery() as connecting:
            for name in sorted(new):
                connecting.start_soon(self._open, name, supervisor, fresh)
        for name in sorted(new):
            old = self.links.pop(name, None)
            if old is not None:
                retired.append(old)
            if name in fresh:
                self.links[name] = fresh[name]
        self.invalidate_catalog()
        self._tell_lists_changed()
        async with trio.open_nursery() as retiring:
            for link in retired:
                retiring.start_soon(self._retire, link)

    async def _retire(self, link: BackendLink) -> None:
        with trio.move_on_after(self.services.links.timeout(link.name)):
            while self._calls_on[link]:
                await trio.sleep(0.05)
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await link.aclose()

    def _tell_lists_changed(self) -> None:
        for method in sorted(_LIST_CHANGED):
            if self.revision.stateless:
                self.publish(Notification(method))
            else:
                self.streams.standalone.push(encode(Notification(method)))

    def close(self) -> None:
        """End the session: its requests, its links, its backend sessions."""
        self.closed.set()

    def release(self) -> None:
        """End this copy only (another replica may serve the session): the backend sessions
        its links joined go on."""
        self._ending = False
        self.closed.set()

    def _changed(self) -> None:
        if self.on_changed is not None:
            self.on_changed()

    def listen_to_backends(self) -> None:
        """Listen on the GET streams of the backend sessions this copy joined (the replica
        that listened is gone)."""
        if self._supervisor is None or self.closed.is_set():
            return
        for link in self.links.values():
            if isinstance(link, HttpBackendLink):
                link.listen(self._supervisor)

    def take(self, record: SessionRecord) -> None:
        """Another replica changed the session: its log level, and the backend sessions it
        made anew (this copy's links follow, rather than meet a 404 and make yet another)."""
        self.joined = record
        self.log_level = record.log_level
        for name, state in record.backends.items():
            link = self.links.get(name)
            if isinstance(link, HttpBackendLink) and link.session_id != state.session_id:
                link.session_id = state.session_id

    def next_record(self, owner: str) -> SessionRecord:
        """What another replica needs to serve this session (see :mod:`.session_records`),
        one version after the last this copy wrote or joined."""
        self._record_version = max(self._record_version,
                                   self.joined.version if self.joined is not None else 0) + 1
        backends = {name: BackendSession(link.session_id, link.revision.version,
                                         link.server_capabilities, link.server_info,
                                         link.instructions)
                    for name, link in self.links.items()
                    if isinstance(link, HttpBackendLink) and link.session_id is not None}
        return SessionRecord(
            id=self.id, issuer=self.identity.key[0], subject=self.identity.key[1],
            client_key=self.client_key, revision=self.revision.version,
            client_capabilities=self.client_capabilities, client_info=self.client_info,
            log_level=self.log_level, backends=backends,
            owner=self.joined.owner if self.joined is not None else owner,
            version=self._record_version)

    def stop_calls(self, reason: str) -> None:
        """End every request being answered: each gets a JSON-RPC error saying ``reason``
        (on its stream, like any answer, so a streamed call ends with that event)."""
        self._stopped_because = reason
        for scope in self._scopes:
            scope.cancel()

    def instructions(self) -> str | None:
        """The backends' instructions, each under its name."""
        parts = [f"{name}: {link.instructions}" for name, link in self.links.items()
                 if link.instructions]
        return "\n\n".join(parts) if parts else None

    def touch(self) -> None:
        self.last_active = trio.current_time()

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Run the work of a client's request in the session's request nursery (it ends with
        the session). Raises :class:`SessionClosed` when the session is ending, and
        :class:`SessionBusy` when it already has ``max_requests`` at work."""
        if self._requests is None or self.closed.is_set():
            raise SessionClosed
        if self._working >= self.services.max_requests:
            raise SessionBusy(f"the session has {self._working} requests in flight, the most "
                              "one session may have; wait for some to finish")
        self._working += 1
        self._requests.start_soon(self._work, fn, args)

    async def _work(self, fn: Callable[..., Awaitable[object]], args: tuple[Any, ...]) -> None:
        try:
            await fn(*args)
        except Exception as exc:  # the request's own fault stays the request's
            log.error("session %s: a request's work failed", self.id[:8], exc_info=exc)
            self.services.metrics.faults.labels("request").inc()
        finally:
            self._working -= 1

    # --- the client's requests -------------------------------------------------------------------

    async def refuse(self, request: Request) -> Refusal | None:
        """Why this request may not go on (policies, rate limits), before any work on it; None
        when it may."""
        gate = self.services.gate
        if gate is None:
            return None
        catalog = None
        if request.method == "tools/call" and gate.policies is not None:
            catalog = await self.catalog()

        def annotations(name: str) -> dict[str, Any]:
            tool = catalog.tool(name) if catalog is not None else None
            hints = tool.get("annotations") if tool is not None else None
            return hints if isinstance(hints, dict) else {}

        refusal = await gate.refuse(self.identity, request, annotations)
        if refusal is not None:
            self.audit(request, refusal.reply, status=refusal.status)
        return refusal

    def audit(self, request: Request, reply: Response | ErrorResponse, *, status: int = 200,
              backend: str | None = None, seconds: float | None = None) -> None:
        """Record the audit event of a request answered (or refused with ``status``)."""
        audit = self.services.audit
        if not audit.settings.enabled:
            return
        access = ACCESS.get()
        audit.record(mcp_event(
            audit.settings, request.method, params=request.params, rpc_id=request.id,
            result=reply.result if isinstance(reply, Response) else None,
            error=(reply.error.code, reply.error.message)
            if isinstance(reply, ErrorResponse) else None,
            status=status, caller=AuditCaller.from_claims(self.identity.claims),
            address=access.address if access else None,
            user_agent=access.user_agent if access else None, request_id=REQUEST_ID.get(),
            session_id=None if self.revision.stateless else self.id, backend=backend,
            duration=seconds))

    async def handle(self, request: Request, stream: EventStream, *,
                     stateless: StatelessContext | None = None,
                     parked: ParkedCall | None = None) -> Response | ErrorResponse | None:
        """Answer one request; messages related to it go on ``stream``. None when the client
        cancelled it (a cancelled request gets no response)."""
        call = parked.call if parked is not None else Call(stream, stateless)
        params = request.params or {}
        target = params.get("name")
        with tracing.request_span(request.method, target if isinstance(target, str) else None,
                                  params.get("_meta"), {"mcp.session.id": self.id[:8]}) as span:
            reply = await self._answer(request, call)
            if call.backend is not None:
                span.set("vmcp.backend", call.backend)
            if isinstance(reply, ErrorResponse):
                span.fail(str(reply.error.code), reply.error.message)
        return reply

    async def _answer(self, request: Request, call: Call) -> Response | ErrorResponse | None:
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        self._scopes.add(scope)
        started = trio.current_time()
        outcome = "cancelled"
        reply: Response | ErrorResponse | None = None
        try:
            with scope:
                reply = await self._dispatch(request, call)
            if self._stopped_because is not None and scope.cancelled_caught:
                reply = _error(request.id, TOO_BUSY, self._stopped_because)
        except BackendError as exc:
            call.backend = exc.backend
            reply = backend_error(request.id, exc.backend, exc.detail)
        except Exception as exc:  # a fault while answering ends this request only
            reply = self._internal_error(request, exc)
        finally:
            self._scopes.discard(scope)
            if call.backend is not None:
                note(backend=call.backend)
            if self._in_flight.get(request.id) is scope:
                del self._in_flight[request.id]
            seconds = trio.current_time() - started
            if reply is not None:
                outcome = "ok" if isinstance(reply, Response) else "error"
                self.audit(request, reply, backend=call.backend, seconds=seconds)
            method = request.method if request.method in _KNOWN_METHODS else "other"
            self.services.metrics.observe(method, call.backend or "vmcp", outcome, seconds)
        return reply

    def _internal_error(self, request: Request, error: Exception) -> ErrorResponse:
        """-32603 for a request the gateway failed to answer: logged once with the traceback
        (the log line carries the HTTP request id, which the client is told), and counted."""
        log.error("session %s: %s (id %r) failed", self.id[:8], request.method[:100],
                  request.id, exc_info=error)
        self.services.metrics.faults.labels("request").inc()
        where = REQUEST_ID.get()
        return _error(request.id, INTERNAL_ERROR, "Internal error: the gateway failed to "
                      "answer this request" + (f" (logged as request {where})" if where else ""))

    async def _dispatch(self, request: Request, call: Call) -> Response | ErrorResponse:
        method = request.method
        params = request.params or {}
        if method == "ping":
            return Response(request.id, {})
        if method == "initialize":
            return _error(request.id, INVALID_REQUEST, "the session is already initialized")
        if method in _LISTS:
            key, result_key = _LISTS[method]
            catalog = await self.catalog()
            if catalog.failures and self.services.plan.operational.partial_failure_mode == "fail":
                name, detail = sorted(catalog.failures.items())[0]
                raise BackendError(name, f"{detail} (partialFailureMode: fail lists nothing "
                                         "while a backend is unavailable)")
            items: list[dict[str, Any]] = list(getattr(catalog, key))
            if self.services.gate is not None:
                items = await self.services.gate.visible(self.identity, method, items)
            return Response(request.id, {result_key: items})
        if method in ("tools/call", "prompts/get"):
            return await self._call_named(request, params, call)
        if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
            return await self._call_resource(request, params, call)
        if method == "completion/complete":
            return await self._complete(request, params, call)
        if method == "logging/setLevel":
            return await self._set_level(request, params, call)
        if method in TASK_METHODS:
            return await self._task_method(request, params, call)
        return _error(request.id, METHOD_NOT_FOUND, f"Method not found: {method[:100]}")

    async def _forward(self, link: BackendLink, request: Request, params: dict[str, Any],
                       call: Call) -> Response | ErrorResponse:
        call.backend = link.name
        if not link.revision.stateless:
            params = params_for_handshake(params) or {}
        target = params.get("name")
        self._calls_on[link] += 1
        try:
            with tracing.backend_span(request.method, target if isinstance(target, str)
                                      else None, link.name) as span:
                if isinstance(link, HttpBackendLink) and self.services.call_log is not None:
                    stream = call.stream  # logged: where to resume the backend's stream
                    reply = await link.call(
                        request.method, tracing.inject_meta(params), self._call_sink(link, call),
                        on_position=lambda bid, event_id: stream.note_position(link.name, bid,
                                                                                event_id))
                else:
                    reply = await link.call(request.method, tracing.inject_meta(params),
                                            self._call_sink(link, call))
                if isinstance(reply, ErrorResponse):
                    span.fail(str(reply.error.code), reply.error.message)
        finally:
            self._calls_on[link] -= 1
            if not self._calls_on[link]:
                del self._calls_on[link]
        if isinstance(reply, Response):
            return Response(request.id, reply.result)
        return ErrorResponse(request.id, reply.error)

    async def resume_call(self, stream: EventStream, called: LoggedCall) -> None:
        """Finish a call another replica was answering when it died (:mod:`.call_log`): the
        rest of the backend's stream from where that replica left it, onto ``stream`` (the
        reply under the client's id); the error when it cannot be had."""
        link = self.links.get(called.backend or "")
        if (not isinstance(link, HttpBackendLink) or called.backend_request_id is None
                or not called.backend_event_id):
            stream.push(encode_error(INTERNAL_ERROR, LOST, called.request_id))
            return
        call = Call(stream, backend=link.name)
        self._calls_on[link] += 1
        try:
            reply = await link.resume(
                called.backend_request_id, called.backend_event_id, self._call_sink(link, call),
                on_position=lambda bid, event_id: stream.note_position(link.name, bid,
                                                                        event_id))
            answer: Response | ErrorResponse = (
                Response(called.request_id, reply.result) if isinstance(reply, Response)
                else ErrorResponse(called.request_id, reply.error))
        except BackendError as exc:
            answer = backend_error(called.request_id, exc.backend, exc.detail)
        finally:
            self._calls_on[link] -= 1
            if not self._calls_on[link]:
                del self._calls_on[link]
        stream.push(encode(answer))

    def _link(self, backend: str) -> BackendLink:
        link = self.links.get(backend)
        if link is None:
            reason = self.failed_backends.get(backend, "is not connected")
            raise BackendError(backend, reason)
        return link

    async def _call_named(self, request: Request, params: dict[str, Any],
                          call: Call) -> Response | ErrorResponse:
        name = params.get("name")
        kind = "tool" if request.method == "tools/call" else "prompt"
        if not isinstance(name, str):
            return _error(request.id, INVALID_PARAMS, 'params.name must be a string')
        catalog = await self.catalog()
        if kind == "tool" and self.services.plan.composite_tools:
            workflow = next((plan for plan in self.services.plan.composite_tools
                             if plan.name == name), None)
            if workflow is not None:
                return await self._run_composite(request, workflow, params, call, catalog)
        routes = catalog.tool_routes if kind == "tool" else catalog.prompt_routes
        route = routes.get(name)
        if route is None:
            if catalog.failures:  # it may be one of theirs: say who could not be asked
                unavailable = "; ".join(f"backend {backend!r} {detail}" for backend, detail
                                        in sorted(catalog.failures.items()))
                return ErrorResponse(request.id, ErrorObject(
                    INVALID_PARAMS, f"Unknown {kind}: {name[:200]} (unavailable now: "
                                    f"{unavailable[:500]})",
                    {"unavailable": sorted(catalog.failures)}))
            return _error(request.id, INVALID_PARAMS, f"Unknown {kind}: {name[:200]}")
        link = self._link(route.backend)
        reply = await self._forward(link, request, {**params, "name": route.name}, call)
        if isinstance(reply, Response) and is_task_result(reply.result):
            if not owns_tasks_per_caller(link.revision.stateless, link.server_capabilities):
                return ErrorResponse(request.id, ErrorObject(
                    INTERNAL_ERROR, f"backend {route.backend!r} answered with a task, which "
                    "it may not create here", {"backend": route.backend}))
            return Response(reply.id, self.services.task_ids.sealed_result(
                self.identity.key, route.backend, reply.result))
        return reply

    async def _run_composite(self, request: Request, workflow: WorkflowPlan,
                             params: dict[str, Any], call: Call,
                             catalog: Catalog) -> Response:
        """A composite tool (:mod:`vmcp_trio.composite.engine`): its steps call the backends with
        this caller's credentials, each authorized, rate limited and audited as a call of its own;
        its elicitation steps ask this client; progress is told per step when the client
        asked for it; cancelling the call cancels every step."""
        call.progress_token = _progress_token(params)

        async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            route = catalog.tool_routes.get(name)
            backend, _, tool = name.partition(".")
            if route is None and tool and backend in self.links:
                route = Route(backend, tool)  # ToolHive's "<workload>.<tool>"
            if route is None:
                raise StepFailed(f"no tool {name[:100]!r} (a step names a tool as clients see "
                                 "it, or as <backend>.<tool>)")
            listed = catalog.tool(name) or next(
                (tool for tool in catalog.tools
                 if catalog.tool_routes.get(str(tool.get("name"))) == route), None)
            if listed is not None:
                arguments = coerce_arguments(arguments, listed.get("inputSchema"))
            step = Request(request.id, "tools/call", {"name": name, "arguments": arguments})
            refusal = await self.refuse(step)
            if refusal is not None:
                raise StepFailed(f"tool {name[:100]!r}: {refusal.reply.error.message}")
            started = trio.current_time()
            try:
                reply = await self._forward(self._link(route.backend), step,
                                            {"name": route.name, "arguments": arguments},
                                            Call(call.stream, call.stateless, call.parked))
            except BackendError as exc:
                raise StepFailed(f"backend {exc.backend!r} {exc.detail}") from None
            self.audit(step, reply, backend=route.backend,
                       seconds=trio.current_time() - started)
            if isinstance(reply, ErrorResponse):
                raise StepFailed(reply.error.message[:500])
            return reply.result

        async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
            return await self._ask_client(call, "elicitation/create",
                                          {"message": message, "requestedSchema": schema})

        async def progress(done: int, total: int, message: str) -> None:
            if call.progress_token is not None:
                call.stream.push(encode(Notification("notifications/progress", {
                    "progressToken": call.progress_token, "progress": done, "total": total,
                    "message": message})))

        result = await run_workflow(workflow, params.get("arguments"),
                                    WorkflowPorts(call_tool, elicit, progress))
        return Response(request.id, result)

    async def _ask_client(self, call: Call, method: str,
                          params: dict[str, Any]) -> dict[str, Any]:
        """Ask the client something on the call's stream (the gateway's own question, as a
        backend's would be relayed) and wait for its answer's result."""
        needed = _CLIENT_CAPABILITY[method]
        if needed not in self._capabilities(call):
            raise StepFailed(f"the client did not declare the {needed} capability")
        asker = _ClientAnswer()
        if call.parked is not None:  # 2026-07-28: an input request of the call
            call.parked.ask(asker, 0, method, params)
        else:
            if len(self._relayed) >= MAX_PENDING_CLIENT_REQUESTS:
                raise StepFailed("too many requests are waiting for the client")
            relay_id = f"{self.relay_prefix}{next(self._relay_ids)}"
            self._relayed[relay_id] = (asker, relay_id)
            call.stream.push(encode(Request(relay_id, method, params)))
        try:
            await asker.answered.wait()
        finally:
            if call.parked is None:
                self._relayed.pop(relay_id, None)
        if isinstance(asker.reply, ErrorResponse) or asker.reply is None:
            raise StepFailed(f"the client answered {method} with an error")
        return asker.reply.result

    def _capabilities(self, call: Call) -> dict[str, Any]:
        """What the client of a call declared: in the request (2026-07-28), else at
        ``initialize``."""
        return (call.stateless.client_capabilities if call.stateless is not None
                else self.client_capabilities)

    async def _task_method(self, request: Request, params: dict[str, Any],
                           call: Call) -> Response | ErrorResponse:
        """``tasks/get``, ``tasks/update`` or ``tasks/cancel`` (the Tasks extension, see
        :mod:`~.task_ids`): to the backend whose task it is, under the backend's own id."""
        meta = params.get("_meta")
        per_request = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
        if not declares_tasks(per_request) and not declares_tasks(self._capabilities(call)):
            return ErrorResponse(request.id, ErrorObject(
                MISSING_CLIENT_CAPABILITY, f"{request.method} needs the {TASKS_EXTENSION} "
                "extension, which the client did not declare", required_capability_data()))
        task_id = params.get("taskId")
        opened = self.services.task_ids.open(self.identity.key, task_id)
        if opened is None:
            return _error(request.id, INVALID_PARAMS, "Unknown task: params.taskId names no "
                                                      "task of this client")
        backend, backend_task = opened
        reply = await self._forward(self._link(backend), request,
                                    {**params, "taskId": backend_task}, call)
        if isinstance(reply, Response) and reply.result.get("taskId") == backend_task:
            return Response(reply.id, {**reply.result, "taskId": task_id})
        return reply

    async def _call_resource(self, request: Request, params: dict[str, Any],
                             call: Call) -> Response | ErrorResponse:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return _error(request.id, INVALID_PARAMS, "params.uri must be a string")
        backend = (await self.catalog()).resource_backend(uri)
        if backend is None:
            return ErrorResponse(request.id, ErrorObject(
                self.revision.resource_not_found_code, f"Resource not found: {uri[:500]}",
                {"uri": uri}))
        return await self._forward(self._link(backend), request, params, call)

    async def _complete(self, request: Request, params: dict[str, Any],
                        call: Call) -> Response | ErrorResponse:
        ref = params.get("ref")
        if not isinstance(ref, dict):
            return _error(request.id, INVALID_PARAMS, "params.ref must be an object")
        catalog = await self.catalog()
        if ref.get("type") == "ref/prompt":
            route = catalog.prompt_routes.get(str(ref.get("name")))
            if route is None:
                return _error(request.id, INVALID_PARAMS, "Unknown prompt in params.ref.name")
            params = {**params, "ref": {**ref, "name": route.name}}
            backend = route.backend
        elif ref.get("type") == "ref/resource":
            uri = str(ref.get("uri"))
            backend = catalog.template_owners.get(uri) or catalog.resource_backend(uri) or ""
            if not backend:
                return _error(request.id, INVALID_PARAMS, "Unknown resource in params.ref.uri")
        else:
            return _error(request.id, INVALID_PARAMS,
                          "params.ref.type must be ref/prompt or ref/resource")
        return await self._forward(self._link(backend), request, params, call)

    async def _set_level(self, request: Request, params: dict[str, Any],
                         call: Call) -> Response | ErrorResponse:
        if params.get("level") not in LOG_LEVELS:
            return _error(request.id, INVALID_PARAMS,
                          f"params.level must be one of {', '.join(LOG_LEVELS)}")
        self.log_level = params["level"]
        self._changed()
        async with trio.open_nursery() as nursery:
            for link in self.links.values():
                # A 2026-07-28 backend has no logging capability: the level goes in _meta.
                if "logging" in link.server_capabilities or link.revision.stateless:
                    nursery.start_soon(self._quietly, link, request, params, call)
        return Response(request.id, {})

    async def _quietly(self, link: BackendLink, request: Request, params: dict[str, Any],
                       call: Call) -> None:
        try:
            await self._forward(link, request, params, call)
        except BackendError as exc:
            log.info("session %s: %s", self.id[:8], exc)

    # --- the client's notifications and answers --------------------------------------------------

    async def receive(self, message: Message, *, forwarded: bool = False) -> None:
        """A notification or response POSTed by the client (``forwarded``: at another replica,
        which passed it here)."""
        if isinstance(message, Response | ErrorResponse):
            target = self._relayed.pop(str(message.id), None)
            if target is None:
                relayed_elsewhere = (str(message.id).startswith("vmcp-")
                                     and not str(message.id).startswith(self.relay_prefix))
                if relayed_elsewhere and self.on_elsewhere is not None and not forwarded:
                    self.on_elsewhere(message)
                    return
                log.info("session %s: answer to unknown request %r ignored", self.id[:8],
                         message.id)
                return
            link, backend_id = target
            try:
                await link.answer(backend_id, message)
            except BackendError as exc:
                log.info("session %s: %s", self.id[:8], exc)
            return
        if not isinstance(message, Notification):
            return
        if message.method == "notifications/cancelled":
            request_id = (message.params or {}).get("requestId")
            scope = self._in_flight.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                scope.cancel()
            elif self.on_elsewhere is not None and not forwarded:
                self.on_elsewhere(message)  # it may be at work at another replica
        elif message.method == "notifications/roots/list_changed":
            for link in list(self.links.values()):
                try:
                    await link.notify(message.method, message.params)
                except BackendError as exc:
                    log.info("session %s: %s", self.id[:8], exc)

    # --- messages from backends -------------------------------------------------------------------

    # A sink is called by a backend's machinery (a link's stream reader, a shared stdio
    # process): what goes wrong in this session while taking the message is this session's
    # fault, never the backend's or the other sessions'.

    def _call_sink(self, link: BackendLink, call: Call) -> Sink:
        async def sink(received: Message) -> None:
            message = self._with_task_sealed(link.name, received)
            if message is None:
                return
            if isinstance(message, Notification) and message.method in _LIST_CHANGED:
                # About the catalog, not the call (a legacy SSE backend's notification lands
                # on the call in flight): the session's, as if sent apart.
                await self._guarded(link.name, self._unrelated(link.name, message))
                return
            await self._guarded(link.name, self._relay(link, message, call))
        return sink

    def unrelated_sink(self, link_name: str) -> Sink:
        async def sink(message: Message) -> None:
            sealed = self._with_task_sealed(link_name, message)
            if sealed is not None:
                await self._guarded(link_name, self._unrelated(link_name, sealed))
        return sink

    def _with_task_sealed(self, link_name: str, message: Message) -> Message | None:
        """A backend's message with a task status's id sealed for this session's identity;
        None (dropped) for a task status from a backend that may not hand out tasks
        (:func:`~.task_ids.owns_tasks_per_caller`)."""
        if not isinstance(message, Notification) or message.method != STATUS_NOTIFICATION:
            return message
        link = self.links.get(link_name)
        if link is None or not owns_tasks_per_caller(link.revision.stateless,
                                                     link.server_capabilities):
            log.debug("session %s: a task status from backend %r dropped: it may not hand "
                      "out tasks", self.id[:8], link_name)
            return None
        return self.services.task_ids.sealed_notification(self.identity.key, link_name,
                                                          message)

    async def _guarded(self, backend: str, delivery: Awaitable[None]) -> None:
        try:
            await delivery
        except BackendError as exc:  # answering the backend failed: it is going away
            log.info("session %s: %s", self.id[:8], exc)
        except Exception as exc:
            self.fail(f"taking a message of backend {backend!r}", exc)

    async def _unrelated(self, link_name: str, message: Message) -> None:
        link = self.links.get(link_name)
        if isinstance(message, Notification) and message.method in _LIST_CHANGED:
            self.invalidate_catalog()
        if self.revision.stateless:
            await self._unrelated_stateless(link, message)
        elif link is not None or not isinstance(message, Request):
            await self._relay(link, message, Call(self.streams.standalone))

    async def _relay(self, link: BackendLink | None, message: Message, call: Call) -> None:
        if self.closed.is_set() or isinstance(message, Response | ErrorResponse):
            return  # a backend's answers are to the gateway's calls, never the client's
        stream = call.stream
        if stream.finished:  # late for its request (say, after a cancel): the session's stream
            if self.revision.stateless:
                return
            stream = self.streams.standalone
        if isinstance(message, Request):
            if link is None:
                return
            needed = _CLIENT_CAPABILITY.get(message.method)
            if needed is not None and needed not in self._capabilities(call):
                if call.parked is not None and needed != "roots":
                    # 2026-07-28: the client hears -32021. (roots/list is often asked on
                    # spec, not because the call needs it: the backend just hears no.)
                    call.parked.lacks(needed)
                    return
                await link.answer(message.id, _error(
                    message.id, METHOD_NOT_FOUND,
                    f"the client did not declare the {needed} capability"))
                return
            if call.parked is not None:
                call.parked.ask(link, message.id, message.method, message.params)
                return
            if len(self._relayed) >= MAX_PENDING_CLIENT_REQUESTS:
                await link.answer(message.id, _error(
                    message.id, INVALID_REQUEST, "too many requests are waiting for the client"))
                return
            relay_id = f"{self.relay_prefix}{next(self._relay_ids)}"
            self._relayed[relay_id] = (link, message.id)
            message = Request(relay_id, message.method, message.params)
        elif (isinstance(message, Notification) and message.method == "notifications/cancelled"
              and link is not None):
            # The backend gave up on a request it sent us: name it by the id the client saw.
            backend_id = (message.params or {}).get("requestId")
            if call.parked is not None:
                if isinstance(backend_id, str | int):
                    call.parked.withdraw(link, backend_id)
                return
            cancelled = next((rid for rid, (owner, bid) in self._relayed.items()
                              if owner is link and bid == backend_id), None)
            if cancelled is None:
                return
            del self._relayed[cancelled]
            message = Notification(message.method, {**(message.params or {}),
                                                    "requestId": cancelled})
        elif isinstance(message, Notification) and message.method == "notifications/message":
            level = call.stateless.log_level if call.stateless is not None else self.log_level
            if not level_wanted((message.params or {}).get("level"), level):
                return  # below the level the client asked for (2026-07-28: or none asked)
        payload = encode(message)
        stream.push(payload)
        if stream is self.streams.standalone and self.on_note is not None:
            self.on_note(payload)

    # --- 2026-07-28 ----------------------------------------------------------------------------

    async def _unrelated_stateless(self, link: BackendLink | None, message: Message) -> None:
        """A stateless client has no back-channel: notifications go to listen streams. A
        backend's request on its own stream (not on a call's) goes to the one call waiting on
        that backend if there is exactly one (as a backend that asks roots/list on its GET
        stream does), else it is refused: it could be anyone's."""
        if isinstance(message, Notification):
            self.publish(message)
            return
        if not isinstance(message, Request) or link is None:
            return
        waiting = [p for p in self.parked.values()
                   if p.reply is None and p.call is not None and p.call.backend == link.name]
        if len(waiting) == 1:
            await self._relay(link, message, waiting[0].call)
            return
        await link.answer(message.id, _error(
            message.id, METHOD_NOT_FOUND, "no client to ask: 2026-07-28 clients take questions "
                                          "only as input requests of a call"))

    def publish(self, message: Notification) -> None:
        for subscription in self.subscriptions:
            if subscription.wants(message):
                params = dict(message.params or {})
                meta = params.get("_meta")
                params["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                                   SUBSCRIPTION_ID: subscription.id}
                subscription.stream.push(encode(Notification(message.method, params)))

    async def subscribe_uris(self, uris: list[str]) -> list[str]:
        """Subscribe to resources at their backends (once per URI for all listen streams);
        the URIs that could be subscribed. Listen streams opening and closing at once take
        turns here, so the count of holders of a URI is always right. What a backend says
        while (un)subscribing belongs to no client call: it goes where it asks to go."""
        catalog = await self.catalog()
        honored = []
        async with self._subscriptions_lock:
            for uri in uris:
                if self._uri_refs.get(uri):
                    self._uri_refs[uri] += 1
                    honored.append(uri)
                    continue
                backend = catalog.resource_backend(uri)
                link = self.links.get(backend or "")
                if link is None or not link.server_capabilities.get("resources", {}).get(
                        "subscribe"):
                    continue
                try:
                    reply = await link.call("resources/subscribe", {"uri": uri},
                                            self.unrelated_sink(link.name))
                except BackendError as exc:
                    log.info("session %s: %s", self.id[:8], exc)
                    continue
                if isinstance(reply, Response):
                    self._uri_refs[uri] = 1
                    honored.append(uri)
        return honored

    async def unsubscribe_uris(self, uris: frozenset[str]) -> None:
        catalog = await self.catalog()
        async with self._subscriptions_lock:
            for uri in uris:
                holders = self._uri_refs.get(uri, 0) - 1
                if holders > 0:
                    self._uri_refs[uri] = holders
                    continue
                self._uri_refs.pop(uri, None)
                link = self.links.get(catalog.resource_backend(uri) or "")
                if link is not None:
                    try:
                        await link.call("resources/unsubscribe", {"uri": uri},
                                        self.unrelated_sink(link.name))
                    except BackendError as exc:
                        log.info("session %s: %s", self.id[:8], exc)

    async def watch_tasks(self, task_ids: list[str]) -> list[str]:
        """Ask the backends whose tasks these are (by the ids the client sees) to announce
        their status changes, once per task for all listen streams; the ids that will be
        announced. An id this identity was not given is not (as ``tasks/get`` would not know
        it)."""
        honored: list[str] = []
        asked: dict[str, dict[str, str]] = {}
        async with self._subscriptions_lock:
            for sealed in dict.fromkeys(task_ids):
                if self._task_refs.get(sealed):
                    self._task_refs[sealed] += 1
                    honored.append(sealed)
                    continue
                opened = self.services.task_ids.open(self.identity.key, sealed)
                if opened is not None:
                    asked.setdefault(opened[0], {})[opened[1]] = sealed
            for backend, sealed_by_id in asked.items():
                link = self.links.get(backend)
                if not isinstance(link, StatelessBackendLink):
                    continue
                for task_id in await link.watch_tasks(sealed_by_id.keys(), True):
                    self._task_refs[sealed_by_id[task_id]] = 1
                    honored.append(sealed_by_id[task_id])
        return honored

    async def unwatch_tasks(self, task_ids: frozenset[str]) -> None:
        released: dict[str, list[str]] = {}
        async with self._subscriptions_lock:
            for sealed in task_ids:
                holders = self._task_refs.get(sealed, 0) - 1
                if holders > 0:
                    self._task_refs[sealed] = holders
                    continue
                self._task_refs.pop(sealed, None)
                opened = self.services.task_ids.open(self.identity.key, sealed)
                if opened is not None:
                    released.setdefault(opened[0], []).append(opened[1])
            for backend, backend_ids in released.items():
                link = self.links.get(backend)
                if isinstance(link, StatelessBackendLink):
                    await link.watch_tasks(backend_ids, False)

    async def handle_stateless(self, request: Request, stream: EventStream,
                            context: StatelessContext) -> Response | ErrorResponse | None:
        """A 2026-07-28 ``tools/call``, ``prompts/get`` or ``resources/read`` with
        multi-round-trip support. Routed to a backend that speaks 2026-07-28, the round trip is
        the client's and the backend's (its ``InputRequiredResult`` and the client's retry pass
        through unchanged). Routed to a handshake backend, the backend's questions come back
        as an ``InputRequiredResult`` and its retry continues the same backend call."""
        link = await self._route(request)
        if link is not None and link.revision.stateless:
            return await self.handle(request, stream, stateless=context)
        params = request.params or {}
        signer = self.services.request_states
        digest = params_digest(params)
        if "requestState" in params:
            call_id = signer.verify(params["requestState"], self.identity.key, request.method,
                                    digest)
            parked = self.parked.get(call_id or "")
            if parked is None and call_id is not None and self.parked_elsewhere is not None:
                elsewhere = await self.parked_elsewhere(call_id, request, context, stream)
                if elsewhere is not None:
                    return elsewhere
            if parked is None:
                return _error(request.id, INVALID_PARAMS, "params.requestState is invalid, "
                              "altered, expired or for other params")
            responses = params.get("inputResponses") or {}
            problem = check_input_responses(responses)
            if problem is not None:
                return _error(request.id, INVALID_PARAMS, problem)
            parked.call.stream = stream
            parked.call.progress_token = _progress_token(params)
            await parked.answer(responses)
        else:
            self._expire_parked()
            prefix = self.services.stream_key_prefix  # shared: the id names this replica
            parked = ParkedCall(f"{prefix}.{secrets.token_urlsafe(12)}" if prefix
                                else secrets.token_urlsafe(12), trio.current_time() + signer.ttl)
            parked.call = Call(stream, context, parked)
            try:
                self.spawn(self._run_parked, parked, request)
            except SessionBusy as exc:
                return _error(request.id, TOO_BUSY, str(exc))
            self.parked[parked.id] = parked
        try:
            await parked.wait()
        except trio.Cancelled:
            self._drop_parked(parked)  # the client closed the stream: the call is cancelled
            raise
        if parked.missing is not None:
            self._drop_parked(parked)
            return ErrorResponse(request.id, ErrorObject(
                MISSING_CLIENT_CAPABILITY, "the request needs a client capability that was not "
                f"declared: {', '.join(parked.missing)}",
                {"requiredCapabilities": parked.missing}))
        if parked.reply is not None:
            self._drop_parked(parked)
            if isinstance(parked.reply, Response):
                return Response(request.id, parked.reply.result)
            return ErrorResponse(request.id, parked.reply.error)
        state = signer.sign(parked.id, self.identity.key, request.method, digest)
        return Response(request.id, parked.input_required(state))

    async def _route(self, request: Request) -> BackendLink | None:
        """The link a ``tools/call``, ``prompts/get`` or ``resources/read`` goes to, if any."""
        params = request.params or {}
        catalog = await self.catalog()
        if request.method == "resources/read":
            backend = catalog.resource_backend(str(params.get("uri")))
        else:
            routes = catalog.tool_routes if request.method == "tools/call" else \
                catalog.prompt_routes
            route = routes.get(str(params.get("name")))
            backend = route.backend if route is not None else None
        return self.links.get(backend or "")

    async def _run_parked(self, parked: ParkedCall, request: Request) -> None:
        with parked.scope:
            reply = await self.handle(request, parked.call.stream, stateless=parked.call.stateless,
                                      parked=parked)
            parked.finish(reply)

    def _drop_parked(self, parked: ParkedCall) -> None:
        parked.scope.cancel()
        self.parked.pop(parked.id, None)

    def _expire_parked(self) -> None:
        now = trio.current_time()
        for parked in [p for p in self.parked.values() if p.expires < now]:
            self._drop_parked(parked)
        while len(self.parked) >= MAX_PENDING_CLIENT_REQUESTS:
            self._drop_parked(next(iter(self.parked.values())))

    # --- the catalog -----------------------------------------------------------------------------

    def invalidate_catalog(self) -> None:
        self._catalog_generation += 1
        self._catalog = None

    async def catalog(self) -> Catalog:
        """What the client sees: the backends' lists, merged. Kept until something changes
        (a list_changed, a backend's health). A catalog built while a backend failed (a
        listing, or this session's connection to it: a credential that could not be read,
        say) is rebuilt in the background every :data:`RETRY_FAILED_AFTER` seconds while
        requests go on with it, since no health change may ever come to say the backend is
        back; when it is, the client hears that its lists changed."""
        catalog = self._catalog
        if catalog is not None:  # the common case: no lock, no checkpoint
            if catalog.failures and trio.current_time() >= self._catalog_retry_at:
                self._catalog_retry_at = trio.current_time() + RETRY_FAILED_AFTER
                if self._supervisor is not None:
                    self._supervisor.start_soon("catalog retry", self._retry_failed,
                                                policy=NEVER_RESTART)
            return catalog
        async with self._catalog_lock:
            if self._catalog is not None:
                return self._catalog
            return await self._build_catalog()

    async def _build_catalog(self) -> Catalog:
        """List every usable backend (under the catalog lock) and keep the result unless the
        catalog was invalidated meanwhile."""
        generation = self._catalog_generation
        listings: list[BackendListing] = []
        failures: dict[str, str] = {}
        async with trio.open_nursery() as nursery:
            for link in self.links.values():
                if not self.services.health.usable(link.name):
                    failures[link.name] = "is unhealthy"
                    continue
                listing = BackendListing(link.name)
                listings.append(listing)
                nursery.start_soon(self._fill_listing, link, listing, failures)
        failures.update(self.failed_backends)
        catalog = build_catalog(listings, self.services.plan.aggregation, failures)
        if self.services.plan.composite_tools:
            catalog = with_composite_tools(catalog, self.services.plan.composite_tools)
        for conflict in catalog.conflicts:
            log.warning("session %s: %s", self.id[:8], conflict)
        if generation == self._catalog_generation:
            self._catalog = catalog
            self._catalog_retry_at = trio.current_time() + RETRY_FAILED_AFTER
        return catalog

    async def _retry_failed(self) -> None:
        async with self._catalog_lock:
            before = self._catalog
            if before is None or not before.failures or self._supervisor is None:
                return
            await self._reconnect_failed(self._supervisor)
            after = await self._build_catalog()
        if set(after.failures) != set(before.failures):
            self._tell_lists_changed()

    async def _reconnect_failed(self, supervisor: Supervisor) -> None:
        """Try again the usable backends this session could not connect to."""
        async with trio.open_nursery() as nursery:
            for name in list(self.failed_backends):
                if self.services.health.usable(name):
                    nursery.start_soon(self._connect, name, supervisor)

    async def _fill_listing(self, link: BackendLink, listing: BackendListing,
                            failures: dict[str, str]) -> None:
        capabilities = link.server_capabilities
        wanted = [(method, key, target) for method, key, target, capability in _LISTINGS
                  if capability in capabilities]
        try:
            for method, key, target in wanted:
                getattr(listing, target).extend(await self._list_all(link, method, key))
        except BackendError as exc:
            failures[link.name] = exc.detail
            log.warning("session %s: listing %s failed: %s", self.id[:8], link.name, exc)

    async def _list_all(self, link: BackendLink, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor else None
            reply = await link.call(method, params, self.unrelated_sink(link.name))
            if isinstance(reply, ErrorResponse):
                log.info("session %s: %s %s failed: %s", self.id[:8], link.name, method,
                         reply.error.message[:200])
                return items
            page = reply.result.get(key)
            if isinstance(page, list):
                items.extend(item for item in page if isinstance(item, dict))
            next_cursor = reply.result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return items
            cursor = next_cursor
        return items


_LISTS = {
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("templates", "resourceTemplates"),
}
_LISTINGS = (
    ("tools/list", "tools", "tools", "tools"),
    ("prompts/list", "prompts", "prompts", "prompts"),
    ("resources/list", "resources", "resources", "resources"),
    ("resources/templates/list", "resourceTemplates", "templates", "resources"),
)
