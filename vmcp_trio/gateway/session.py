"""One client session of the virtual server: its lifetime, and the dispatch of its requests.

A :class:`ClientSession` is created by ``initialize`` (or, for a 2026-07-28 identity, is that
identity's context) and has no task of its own (see :meth:`ClientSession.open`): the backend
links' GET streams, the requests it is working on and their relays each run in a scope of the
session's, so ending the session (DELETE, idle expiry, shutdown) cancels everything it opened,
and nothing outlives it.

What the client sees is one server. The session is a small owner of collaborators, each handed
what it uses:

* its backend links (:class:`~.session_links.SessionLinks`): connecting, following health and
  reloads, retiring;
* its catalog (:class:`~.session_catalog.SessionCatalog`): the backends' lists merged, and the
  one :meth:`~.session_catalog.SessionCatalog.route` from a request to its backend;
* the relay of what backends send its client (:class:`~.client_relay.ClientRelay`), with
  server-to-client requests renamed and the client's answers sent back;
* its requests in flight (:class:`~.calls.InFlight`);
* 2026-07-28: its listen streams and what they hold (:class:`~.subscriptions.Subscriptions`),
  and its calls parked across retries (:class:`~.stateless_calls.StatelessCalls`);
* with shared sessions, one optional peer (:class:`~.session_peer.SessionPeer`).

The dispatch (:meth:`ClientSession.handle`): lists from the catalog; ``tools/call``,
``prompts/get``, ``resources/*`` and ``completion/complete`` routed to one backend under its own
names (a composite tool run by :mod:`.session_composite`); ``logging/setLevel`` and
``notifications/roots/list_changed`` to every backend; the Tasks extension's methods to the
backend whose task it is. A fault while answering ends that request only (-32603); a fault in
the session's own machinery ends the session only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

import trio

from ..auth.caller import Caller
from ..auth.identity import Identity
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
from ..protocol.log_levels import LOG_LEVELS
from ..protocol.revisions import Revision
from ..protocol.stateless_requests import (
    CLIENT_CAPABILITIES,
    MISSING_CLIENT_CAPABILITY,
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
from ..runtime import tracing
from ..runtime.audit import Caller as AuditCaller
from ..runtime.audit import mcp_event
from ..runtime.logs import ACCESS, REQUEST_ID, note
from ..runtime.supervisor import NEVER_RESTART, Supervisor
from .admission import Refusal
from .backends.base import BackendError, BackendLink, BackendTimedOut, Sink, backend_error
from .backends.http import HttpBackendLink
from .call_log import LOST, LoggedCall
from .calls import Call, InFlight, SessionBusy, SessionClosed
from .client_relay import ClientRelay
from .routing import NotRouted, Routed
from .session_catalog import SessionCatalog
from .session_composite import StepPorts, run_composite
from .session_links import SessionLinks
from .session_methods import KNOWN_METHODS, LIST_CHANGED, LISTS, ROUTED, hints_of
from .session_peer import SessionPeer
from .session_records import BackendSession, SessionRecord
from .session_services import SessionServices
from .session_skills import list_skills, presented, presented_update
from .stateless_calls import StatelessCalls
from .streams import EventStream, StreamRegistry
from .subscriptions import Subscriptions
from .task_ids import owns_tasks_per_caller

__all__ = ["ClientSession"]

log = logging.getLogger("vmcp.session")

_WORK_GRACE = 5.0
"""How long a closing session waits for its cancelled requests at work to leave."""

Reply = Response | ErrorResponse


def _error(request_id: RequestId | None, code: int, message: str) -> ErrorResponse:
    return ErrorResponse(request_id, ErrorObject(code, message))


class ClientSession:
    def __init__(self, services: SessionServices, session_id: str, revision: Revision,
                 client_capabilities: dict[str, Any], client_info: dict[str, Any],
                 caller: Caller, *, joined: SessionRecord | None = None) -> None:
        self.services = services
        self.id = session_id
        self.revision = revision
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.identity: Identity = caller.identity
        self.client_key = joined.client_key if joined is not None else caller.client_key
        """Who the session counts against in the per-client bounds (fixed at creation)."""
        self.caller = caller
        """Who sent the session's latest request (its token is the one its backend
        credentials are computed for)."""
        self.log_level = joined.log_level if joined is not None else "debug"
        """The level a handshake client set with ``logging/setLevel``: vmcp enforces it for
        every backend, also those that do not filter (or have no logging capability)."""
        self.streams = StreamRegistry(
            max_events=services.stream_buffer_events,
            retry_ms=services.sse_retry_ms if revision.primes_streams else None,
            key_prefix=services.stream_key_prefix)
        self.last_active = trio.current_time()
        self.open_connections = 0
        self.closed = trio.Event()
        self.peer: SessionPeer | None = None
        """With shared sessions, the hooks to the other replicas."""
        self._ending = True
        """Closing ends the session (its backend sessions too); False: only this copy."""
        self._record_version = 0
        self._supervisor: Supervisor | None = None
        self._nursery: trio.Nursery | None = None
        """Where the session's machinery, its spawned requests and its end run (the
        gateway's, shared by every session)."""
        self._opening = True
        self._ended = False
        self._working = 0
        self._at_work: dict[trio.CancelScope, None] = {}
        """The scopes of the requests at work: in their own HTTP request's task
        (:meth:`admit_work`) or in a task of the session's (:meth:`spawn`). (A dict: an empty
        set costs 216 bytes.)"""
        self._work_gone: trio.Event | None = None
        """Set when the last request at work has left, once the session is closing."""
        self.links = SessionLinks(services, owner=session_id, capabilities=client_capabilities,
                                  caller=lambda: self.caller, sink=self.unrelated_sink,
                                  changed=self._changed)
        self.links.joined = joined
        self.catalog = SessionCatalog(services, self.links, owner=session_id,
                                      sink=self.unrelated_sink,
                                      lists_changed=self._tell_lists_changed)
        self.in_flight = InFlight()
        prefix = services.stream_key_prefix
        self.relay = ClientRelay(
            owner=session_id, relay_prefix=f"vmcp-{prefix}-" if prefix else "vmcp-",
            stateless=revision.stateless, standalone=self.streams.standalone,
            closed=self.closed, host=self)

    # 2026-07-28 only: made when first used (a handshake session never does)

    @cached_property
    def subscriptions(self) -> Subscriptions:
        return Subscriptions(self.links, self.catalog, self.services.task_ids, owner=self.id,
                             identity=self.identity.key, sink=self.unrelated_sink,
                             not_found_code=self.revision.resource_not_found_code)

    @cached_property
    def stateless_calls(self) -> StatelessCalls:
        return StatelessCalls(self.services.request_states, identity=self.identity.key,
                              id_prefix=self.services.stream_key_prefix,
                              handle=self._handle_call, spawn=self.spawn,
                              peer=lambda: self.peer)

    # --- lifetime ------------------------------------------------------------------------------

    async def open(self, nursery: trio.Nursery) -> None:
        """Connect the backends; the session's work runs in ``nursery`` (the gateway's, shared
        by every session: a task and a nursery of each session's own cost ~4 KB a session).

        In that nursery: the session's machinery (its backend links' long-lived tasks, under
        the session's own supervisor, each in a scope of its own) and the requests it runs in
        tasks (:meth:`spawn`, each in a scope of its own). Closing the session starts its
        teardown there (:meth:`_teardown`). Whatever goes wrong in the session ends it, and only
        it: this never raises but to be cancelled (and a session whose opening was cancelled
        is closed)."""
        self._nursery = nursery
        self._supervisor = Supervisor(nursery, on_restart=self.services.metrics.count_restart)
        self.catalog.supervisor = self._supervisor
        opened = False
        try:
            for name in await self.links.connect_all(self._supervisor):
                # left out of the opening: joins (and the client is told) when it answers,
                # within its own timeout
                self._in_machinery(f"late join of {name}", self._react_to_health, name, True)
            opened = True
        except Exception as exc:
            self.fail("its machinery", exc)
        finally:
            self._opening = False
            if not opened:
                self.closed.set()
            if self.closed.is_set():
                self._end()

    def _end(self) -> None:
        """Start the teardown once (after the opening: the links it closes are connected)."""
        if not self._opening and not self._ended and self._nursery is not None:
            self._ended = True
            self._nursery.start_soon(self._teardown, name=f"end of session {self.id[:8]}")

    async def _teardown(self) -> None:
        """The session's end: its streams' followers and its requests at work are cancelled
        (the requests waited for, up to :data:`_WORK_GRACE`: their links must outlive them),
        its long-lived tasks stopped, its links closed, and the gateway forgets it."""
        try:
            self.streams.end_followers()
            for work in self._at_work:
                work.cancel()
            if self._at_work:
                self._work_gone = trio.Event()
                with trio.move_on_after(_WORK_GRACE):
                    await self._work_gone.wait()
            if self._supervisor is not None:
                await self._supervisor.stop_all()
            await self.links.aclose(ending=self._ending)
        except Exception as exc:  # the end of this session only
            log.error("session %s: its end failed", self.id[:8], exc_info=exc)
            self.services.metrics.faults.labels("session").inc()
        finally:
            self.services.forget(self)

    def fail(self, what: str, error: BaseException) -> None:
        """A fault in the session's own machinery: log it, count it, end this session (its
        client's next request gets 404, as for an expired session)."""
        log.error("session %s: %s failed; ending the session", self.id[:8], what,
                  exc_info=error)
        self.services.metrics.faults.labels("session").inc()
        self.close()

    def close(self) -> None:
        """End the session: its requests, its links, its backend sessions."""
        self.closed.set()
        self._end()

    def release(self) -> None:
        """End this copy only (another replica may serve the session): the backend sessions
        its links joined go on."""
        self._ending = False
        self.closed.set()
        self._end()

    def touch(self) -> None:
        self.last_active = trio.current_time()

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Run the work of a client's request in a task of the session's (it ends with the
        session). Raises :class:`~.calls.SessionClosed` when the session is ending, and
        :class:`~.calls.SessionBusy` when it already has ``max_requests`` at work."""
        work = trio.CancelScope()
        self.admit_work(work)
        assert self._nursery is not None
        self._nursery.start_soon(self._work, fn, args, work)

    def admit_work(self, work: trio.CancelScope) -> None:
        """Count a request whose work runs in its own HTTP request's task (the responder's
        quick path: no task started for it), as :meth:`spawn` does, with the same refusals.
        Closing the session cancels its ``work`` scope and waits for it to
        :meth:`leave_work` before the links it uses close."""
        self._admit()
        self._at_work[work] = None

    def leave_work(self, work: trio.CancelScope) -> None:
        self._working -= 1
        self._at_work.pop(work, None)
        if not self._at_work and self._work_gone is not None:
            self._work_gone.set()

    def _admit(self) -> None:
        if self._nursery is None or self.closed.is_set():
            raise SessionClosed
        if self._working >= self.services.max_requests:
            raise SessionBusy(f"the session has {self._working} requests in flight, the most "
                              "one session may have; wait for some to finish")
        self._working += 1

    async def _work(self, fn: Callable[..., Awaitable[object]], args: tuple[Any, ...],
                    work: trio.CancelScope) -> None:
        try:
            with work:
                await fn(*args)
        except Exception as exc:  # the request's own fault stays the request's
            log.error("session %s: a request's work failed", self.id[:8], exc_info=exc)
            self.services.metrics.faults.labels("request").inc()
        finally:
            self.leave_work(work)

    def _in_machinery(self, name: str, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Work of the session's own (a health change, a reload): a task of its machinery, so
        that whoever tells does not wait."""
        if not self.closed.is_set() and self._supervisor is not None:
            self._supervisor.start_soon(name, fn, *args, policy=NEVER_RESTART)

    def backend_health_changed(self, backend: str, usable: bool) -> None:
        """A backend became unhealthy or healthy again: rebuild the catalog (connecting to it
        if this session never could) and tell the client its lists changed."""
        self._in_machinery(f"health change of {backend}", self._react_to_health, backend, usable)

    async def _react_to_health(self, backend: str, usable: bool) -> None:
        if usable and backend not in self.links and self._supervisor is not None:
            await self.links.connect(backend, self._supervisor)
        self.catalog.invalidate()
        self._tell_lists_changed()

    def backends_changed(self, gone: set[str], new: set[str]) -> None:
        """A reload changed the backends (see :meth:`~.session_links.SessionLinks.change`); the
        client hears its lists changed (with nothing gone or new: the aggregation changed, the
        lists too)."""
        self._in_machinery("reload", self._change_backends, gone, new)

    async def _change_backends(self, gone: set[str], new: set[str]) -> None:
        assert self._supervisor is not None
        self.catalog.invalidate()

        def swapped() -> None:
            self.catalog.invalidate()
            self._tell_lists_changed()

        await self.links.change(self._supervisor, gone, new, swapped)

    def _tell_lists_changed(self) -> None:
        for method in LIST_CHANGED:
            if self.revision.stateless:
                self.subscriptions.publish(Notification(method))
            else:
                self.streams.standalone.push(encode(Notification(method)))

    def stop_calls(self, reason: str) -> None:
        """End every request being answered: each gets a JSON-RPC error saying ``reason``
        (on its stream, like any answer, so a streamed call ends with that event)."""
        self.in_flight.stop(reason)

    # --- shared sessions -------------------------------------------------------------------------

    def _changed(self) -> None:
        if self.peer is not None and self.peer.changed is not None:
            self.peer.changed()

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
        self.links.joined = record
        self.log_level = record.log_level
        for name, state in record.backends.items():
            link = self.links.get(name)
            if isinstance(link, HttpBackendLink) and link.session_id != state.session_id:
                link.session_id = state.session_id

    def next_record(self, owner: str) -> SessionRecord:
        """What another replica needs to serve this session (see :mod:`.session_records`),
        one version after the last this copy wrote or joined."""
        joined = self.links.joined
        self._record_version = max(self._record_version,
                                   joined.version if joined is not None else 0) + 1
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
            owner=joined.owner if joined is not None else owner,
            version=self._record_version)

    # --- the client's requests -------------------------------------------------------------------

    async def refuse(self, request: Request) -> Refusal | None:
        """Why this request may not go on (policies, rate limits), before any work on it; None
        when it may."""
        gate = self.services.gate
        if gate is None:
            return None
        catalog = None
        if request.method == "tools/call" and gate.policies is not None:
            catalog = await self.catalog.get()
        refusal = await gate.refuse(self.identity, request, lambda _: hints_of(catalog, request))
        if refusal is not None:
            self.audit(request, refusal.reply, status=refusal.status)
        return refusal

    def audit(self, request: Request, reply: Reply, *, status: int = 200,
              backend: str | None = None, seconds: float | None = None) -> None:
        """Record the audit event of a request answered (or refused with ``status``)."""
        audit = self.services.audit
        if not audit.settings.enabled or (audit.settings.backends is not None
                                          and backend not in audit.settings.backends):
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
                     routed: Routed | None = None) -> Reply | None:
        """Answer one request; messages related to it go on ``stream`` (``routed``: where it
        goes, when known already). None when the client cancelled it (a cancelled request gets
        no response)."""
        return await self._handle_call(request, Call(stream, stateless, routed=routed))

    async def handle_stateless(self, request: Request, stream: EventStream,
                               context: StatelessContext) -> Reply | None:
        """A 2026-07-28 ``tools/call``, ``prompts/get`` or ``resources/read``: straight to a
        backend that speaks 2026-07-28, else parked across the client's retries
        (:mod:`.stateless_calls`)."""
        routed: Routed | None = None
        with contextlib.suppress(NotRouted):  # the dispatch answers that it is not routed
            routed = await self.catalog.route(request.method, request.params or {},
                                              not_found_code=self.revision.resource_not_found_code)
        link = self.links.get(routed.backend) if routed is not None else None
        if link is not None and link.revision.stateless:
            return await self.handle(request, stream, stateless=context, routed=routed)
        return await self.stateless_calls.answer(request, stream, context, routed)

    async def _handle_call(self, request: Request, call: Call) -> Reply | None:
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

    async def _answer(self, request: Request, call: Call) -> Reply | None:
        started = trio.current_time()
        outcome = "cancelled"
        reply: Reply | None = None
        try:
            with self.in_flight.answering(request.id) as scope:
                call.scope = scope
                with scope:
                    reply = await self._dispatch(request, call)
                stopped = self.in_flight.stopped_because
                if stopped is not None and scope.cancelled_caught:
                    reply = _error(request.id, TOO_BUSY, stopped)
        except BackendError as exc:
            call.backend = exc.backend
            reply = backend_error(request.id, exc.backend, exc.detail)
            if isinstance(exc, BackendTimedOut):
                await self.services.health.call_timed_out(exc.backend, exc.detail)
        except NotRouted as exc:
            reply = ErrorResponse(request.id, exc.error)
        except Exception as exc:  # a fault while answering ends this request only
            reply = self._internal_error(request, exc)
        finally:
            if call.backend is not None:
                note(backend=call.backend)
            seconds = trio.current_time() - started
            if reply is not None:
                outcome = "ok" if isinstance(reply, Response) else "error"
                self.audit(request, reply, backend=call.backend, seconds=seconds)
            method = request.method if request.method in KNOWN_METHODS else "other"
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

    async def _dispatch(self, request: Request, call: Call) -> Reply:
        method = request.method
        params = request.params or {}
        if method == "ping":
            return Response(request.id, {})
        if method == "initialize":
            return _error(request.id, INVALID_REQUEST, "the session is already initialized")
        if method in LISTS:
            return await self._list(request)
        if method in ROUTED:
            if method == "tools/call" and self.services.plan.composite_tools:
                workflow = next((plan for plan in self.services.plan.composite_tools
                                 if plan.name == params.get("name")), None)
                if workflow is not None:
                    ports = StepPorts(self.links, self.refuse, self._forward, self.audit,
                                      self.relay.ask)
                    return await run_composite(ports, await self.catalog.get(), request,
                                               workflow, params, call)
            routed = call.routed or await self.catalog.route(
                method, params, not_found_code=self.revision.resource_not_found_code)
            link = self.links.link(routed.backend)
            reply = await self._forward(link, request, routed.params, call)
            if method == "tools/call":
                return self._sealed(link, request, reply)
            return await presented(self.catalog, request, link.name, reply)
        if method == "skills/list":
            return await list_skills(self.catalog, self.services.gate, self.identity, request)
        if method == "logging/setLevel":
            return await self._set_level(request, params, call)
        if method in TASK_METHODS:
            return await self._task_method(request, params, call)
        return _error(request.id, METHOD_NOT_FOUND, f"Method not found: {method[:100]}")

    async def _list(self, request: Request) -> Reply:
        key, result_key = LISTS[request.method]
        catalog = await self.catalog.get()
        failing = sorted((name, detail) for name, detail in catalog.failures.items()
                         if name not in self.links.left_out
                         and self.services.health.known_up(name))
        if failing and self.services.plan.operational.partial_failure_mode == "fail":
            name, detail = failing[0]
            raise BackendError(name, f"{detail} (partialFailureMode: fail lists nothing "
                                     "while a backend that is up fails)")
        items: list[dict[str, Any]] = list(getattr(catalog, key))
        if self.services.gate is not None:
            items = await self.services.gate.visible(self.identity, request.method, items,
                                                     catalog)
        return Response(request.id, {result_key: items})

    async def _forward(self, link: BackendLink, request: Request, params: dict[str, Any],
                       call: Call) -> Reply:
        call.backend = link.name
        admitted = await self.links.admitted(link.name, request, params,
                                             hints_of(self.catalog.built, request))
        if isinstance(admitted, ErrorResponse):  # what the backend has of its own refused
            return admitted
        params = admitted
        if not link.revision.stateless:
            params = params_for_handshake(params) or {}
        target = params.get("name")
        sink = self._call_sink(link, call)
        with self.links.calling(link), tracing.backend_span(
                request.method, target if isinstance(target, str) else None, link.name) as span:
            if isinstance(link, HttpBackendLink) and self.services.call_log is not None:
                stream = call.stream  # logged: where to resume the backend's stream
                reply = await link.call(
                    request.method, tracing.inject_meta(params), sink,
                    on_position=lambda bid, event_id: stream.note_position(link.name, bid,
                                                                            event_id))
            else:
                reply = await link.call(request.method, tracing.inject_meta(params), sink)
            if isinstance(reply, ErrorResponse):
                span.fail(str(reply.error.code), reply.error.message)
        if isinstance(reply, Response):
            return Response(request.id, reply.result)
        return ErrorResponse(request.id, reply.error)

    def _sealed(self, link: BackendLink, request: Request, reply: Reply) -> Reply:
        """A ``tools/call`` reply with a task's id sealed for this identity; a task from a
        backend that may not hand one out is an error naming it."""
        if not isinstance(reply, Response) or not is_task_result(reply.result):
            return reply
        if not owns_tasks_per_caller(link.revision.stateless, link.server_capabilities):
            return ErrorResponse(request.id, ErrorObject(
                INTERNAL_ERROR, f"backend {link.name!r} answered with a task, which it may not "
                "create here", {"backend": link.name}))
        return Response(reply.id, self.services.task_ids.sealed_result(
            self.identity.key, link.name, reply.result))

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
        try:
            with self.links.calling(link):
                reply = await link.resume(
                    called.backend_request_id, called.backend_event_id,
                    self._call_sink(link, call),
                    on_position=lambda bid, event_id: stream.note_position(link.name, bid,
                                                                            event_id))
            answer: Reply = (Response(called.request_id, reply.result)
                             if isinstance(reply, Response)
                             else ErrorResponse(called.request_id, reply.error))
        except BackendError as exc:
            answer = backend_error(called.request_id, exc.backend, exc.detail)
        stream.push(encode(answer))

    def capabilities_for(self, call: Call) -> dict[str, Any]:
        """What the client of a call declared: in the request (2026-07-28), else at
        ``initialize``."""
        return (call.stateless.client_capabilities if call.stateless is not None
                else self.client_capabilities)

    async def _task_method(self, request: Request, params: dict[str, Any],
                           call: Call) -> Reply:
        """``tasks/get``, ``tasks/update`` or ``tasks/cancel`` (the Tasks extension, see
        :mod:`~.task_ids`): to the backend whose task it is, under the backend's own id."""
        meta = params.get("_meta")
        per_request = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
        if not declares_tasks(per_request) and not declares_tasks(self.capabilities_for(call)):
            return ErrorResponse(request.id, ErrorObject(
                MISSING_CLIENT_CAPABILITY, f"{request.method} needs the {TASKS_EXTENSION} "
                "extension, which the client did not declare", required_capability_data()))
        task_id = params.get("taskId")
        opened = self.services.task_ids.open(self.identity.key, task_id)
        if opened is None:
            return _error(request.id, INVALID_PARAMS, "Unknown task: params.taskId names no "
                                                      "task of this client")
        backend, backend_task = opened
        reply = await self._forward(self.links.link(backend), request,
                                    {**params, "taskId": backend_task}, call)
        if isinstance(reply, Response) and reply.result.get("taskId") == backend_task:
            return Response(reply.id, {**reply.result, "taskId": task_id})
        return reply

    async def _set_level(self, request: Request, params: dict[str, Any], call: Call) -> Reply:
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
        which passed it here). Raises :class:`~.session_peer.NotPassedOn` when an answer for
        another replica did not reach it."""
        if isinstance(message, Response | ErrorResponse):
            await self.relay.answered(message, forwarded=forwarded)
            return
        if not isinstance(message, Notification):
            return
        if message.method == "notifications/cancelled":
            request_id = (message.params or {}).get("requestId")
            if (not self.in_flight.cancel(request_id) and self.peer is not None
                    and self.peer.elsewhere is not None and not forwarded):
                await self.peer.elsewhere(message)  # it may be at work at another replica
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
            if isinstance(message, Notification) and message.method in LIST_CHANGED:
                # About the catalog, not the call (a legacy SSE backend's notification lands
                # on the call in flight): the session's, as if sent apart.
                await self._guarded(link.name, self._unrelated(link.name, message))
                return
            await self._guarded(link.name, self.relay.relay(link, message, call))
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
        message = presented_update(self.catalog, link_name, message)
        if isinstance(message, Notification) and message.method in LIST_CHANGED:
            self.catalog.invalidate()
        if self.revision.stateless:
            await self._unrelated_stateless(link, message)
        elif link is not None or not isinstance(message, Request):
            await self.relay.relay(link, message, Call(self.streams.standalone))

    async def _unrelated_stateless(self, link: BackendLink | None, message: Message) -> None:
        """A stateless client has no back-channel: notifications go to listen streams. A
        backend's request on its own stream (not on a call's) goes to the one call waiting on
        that backend if there is exactly one (as a backend that asks roots/list on its GET
        stream does), else it is refused: it could be anyone's."""
        if isinstance(message, Notification):
            self.subscriptions.publish(message)
            return
        if not isinstance(message, Request) or link is None:
            return
        waiting = self.stateless_calls.waiting_on(link.name)
        if len(waiting) == 1:
            await self.relay.relay(link, message, waiting[0].call)
            return
        await link.answer(message.id, _error(
            message.id, METHOD_NOT_FOUND, "no client to ask: 2026-07-28 clients take questions "
                                          "only as input requests of a call"))

