"""The audit log (``spec.config.audit``): one JSON line per MCP operation and per authentication
event, in ToolHive's format, written by a task of its own so that no request waits for a disk.

The format is ToolHive's, as its ``pkg/audit`` writes it (stacklok/toolhive ``pkg/audit/
auditor.go``, ``config.go``; the types moved to stacklok/toolhive-core ``audit/event.go``,
``mcp_events.go``, ``delegation.go``, ``logger.go``). ToolHive logs each event through slog's JSON
handler (``AuditEvent.LogTo``), so a line is::

    {"time", "level": "AUDIT", "msg": "audit_event", "audit_id", "type", "logged_at", "outcome",
     "component", "source": {"type", "value", "extra"}, "subjects", "target",
     "metadata": {"extra"}, "data": {"request", "response"}, "delegation"}

(the struct's own JSON tags, ``loggedAt`` and ``metadata.auditId``, are not what reaches the log:
``LogTo`` writes ``logged_at`` and ``audit_id``). Rules kept here, with where they come from:

* Event types: the MCP method names the type, as ``auditor.go:mapMCPMethodToEventType`` does
  (``tools/call`` -> ``mcp_tool_call``, ``initialize`` -> ``mcp_initialize``, ...; any other
  method -> ``mcp_request``). ToolHive has no authentication events; ours are named in the style
  of its vMCP-only ``vmcp_workflow_*`` types: ``vmcp_auth_login``, ``vmcp_auth_token_issued``,
  ``vmcp_auth_token_refreshed``, ``vmcp_auth_token_revoked``, ``vmcp_auth_denied``
  (:data:`AUTH_EVENT_TYPES`).
* Filters (``config.go:ShouldAuditEvent``): an excluded type is never written; when
  ``eventTypes`` is not empty, only the types it names are; unknown names are a configuration
  error (``config.go:Validate``; we also accept ToolHive's ``sse_connection`` and workflow types,
  and our authentication types). Nothing at all is written unless ``enabled``.
* Outcome (``auditor.go:determineOutcome``): from the HTTP status of the reply: 2xx ``success``,
  401/403 ``denied``, other 4xx ``failure``, 5xx ``error``. With ``detectApplicationErrors`` (the
  default), a success whose JSON-RPC reply is an error becomes ``application_error``, with
  ``jsonrpc_error_code`` and ``jsonrpc_error_message`` (cut at 256 characters) in
  ``metadata.extra`` (``logAuditEvent``, ``pkg/mcp/response.go``). ToolHive looks only at the
  ``error`` member; we also count a ``tools/call`` result with ``isError: true`` as an
  ``application_error``, the failure of the tool being the application's. Without it, both are
  ``success``, as the transport succeeded.
* Who (``extractSubjectsFromIdentity``): ``subjects`` holds ``user_id`` (the token's ``sub``),
  ``user`` (name, else preferred_username, else email, else ``anonymous``), ``client_name``,
  ``client_version``; we add ``issuer`` and ``client_id`` (the OAuth client), ToolHive having no
  key for them. An RFC 8693 ``act`` claim becomes ``delegation``: ``chain`` of ``{iss, sub}``
  hops, current actor first, at most ``maxDelegationDepth`` of them, with ``truncated``,
  ``omitted``, ``malformed`` (and ``malformedReason``), as ``ParseDelegationChain`` does.
* Where from: ``source`` is ``{"type": "network", "value": <client address>}`` with ``extra``
  ``user_agent``, ``request_id`` (the HTTP request id), ``session_id`` (``mcp_events.go`` keys).
* What: ``target`` is ``{endpoint, method, name, type}``, the name being the tool, the prompt or
  the resource's URI, the type ``tool`` / ``prompt`` / ``resource`` or ``endpoint``
  (``extractTarget``). ``metadata.extra`` holds ``duration_ms`` (whole milliseconds),
  ``transport`` (``http`` or ``sse``), ``backend_name``, ``response_size_bytes`` and our
  ``jsonrpc_id``.
* Data: ``data.request`` (the JSON-RPC request: method, id, params with the arguments) only with
  ``includeRequestData``, ``data.response`` (its result or error) only with
  ``includeResponseData``; both off by default. ToolHive leaves out a body over ``maxDataSize``
  bytes; we keep its first ``maxDataSize`` bytes of JSON as a string and say so with
  ``request_truncated`` / ``response_truncated``. No token, code or secret is ever written: no
  builder takes one (a caller's claims give only names and ids), and authentication events have
  no ``data``.
* Writing: :meth:`AuditLog.record` never blocks and never raises. It serializes the event at once
  (a snapshot) and queues the line on a bounded memory channel; when the queue is full the event
  is dropped, counted in :attr:`AuditLog.dropped` and reported to ``on_drop``. The writer task
  (:meth:`AuditLog.run`) takes whatever is queued and writes it in one ``write`` from a worker
  thread: to ``logFile`` (appended, created with mode 0600; its directory must exist) or to
  stdout. Each batch reaches the operating system before the next is taken (no fsync). When the
  writer is cancelled it writes what is already queued, for at most five seconds. A file that
  cannot be opened or written raises :class:`AuditLogError`, an expected failure after which the
  supervisor starts the writer again; the lines still queued wait for it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import trio

from ..resources.plan import AUDIT_EVENT_TYPES, AuditSettings
from .supervisor import Retry

__all__ = ["AUTH_EVENT_TYPES", "EVENT_TYPES", "AuditEvent", "AuditLog", "AuditLogError",
           "AuditSettings", "AuthKind", "Caller", "Outcome", "auth_event", "mcp_event",
           "mcp_event_type"]

log = logging.getLogger("vmcp.audit")

AuditEvent = dict[str, Any]
"""One event: the object written as one JSON line."""

Outcome = Literal["success", "failure", "error", "denied", "application_error"]
AuthKind = Literal["login", "token_issued", "token_refreshed", "token_revoked", "denied"]

_MCP_EVENT_TYPES = {
    "initialize": "mcp_initialize",
    "tools/call": "mcp_tool_call",
    "tools/list": "mcp_tools_list",
    "resources/read": "mcp_resource_read",
    "resources/list": "mcp_resources_list",
    "prompts/get": "mcp_prompt_get",
    "prompts/list": "mcp_prompts_list",
    "notifications/message": "mcp_notification",
    "ping": "mcp_ping",
    "logging/setLevel": "mcp_logging",
    "completion/complete": "mcp_completion",
    "notifications/roots/list_changed": "mcp_roots_list_changed",
}
_TARGET_TYPES = {"mcp_tool_call": "tool", "mcp_prompt_get": "prompt",
                 "mcp_resource_read": "resource"}
_TARGET_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

AUTH_EVENT_TYPES: dict[AuthKind, str] = {
    "login": "vmcp_auth_login",  # an end user's login at an upstream identity provider
    "token_issued": "vmcp_auth_token_issued",  # the token endpoint, any grant but refresh
    "token_refreshed": "vmcp_auth_token_refreshed",  # the refresh_token grant
    "token_revoked": "vmcp_auth_token_revoked",  # the revocation endpoint
    "denied": "vmcp_auth_denied",  # a request refused for its credentials, before any method
}
_AUTH_TARGET_TYPES: dict[AuthKind, str] = {
    "login": "login", "token_issued": "token", "token_refreshed": "token",
    "token_revoked": "token", "denied": "endpoint"}

EVENT_TYPES = AUDIT_EVENT_TYPES
"""The names ``eventTypes`` and ``excludeEventTypes`` may use."""
assert {*_MCP_EVENT_TYPES.values(), *AUTH_EVENT_TYPES.values()} <= EVENT_TYPES

_COMPONENT = "toolhive-api"  # ToolHive's own when ``component`` is not set
_MAX_MESSAGE = 256  # characters of a JSON-RPC error message or a reason kept
_FINAL_FLUSH_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made the request, as its verified claims say: names and ids, never a credential."""

    subject: str | None = None
    user: str | None = None
    issuer: str | None = None
    client_id: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    act: Any = None
    """The raw RFC 8693 ``act`` claim: only each hop's ``iss`` and ``sub`` are written."""

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any]) -> Caller:
        """From a verified token's claims (ToolHive's order for the user's name)."""

        def text(key: str) -> str | None:
            value = claims.get(key)
            return value if isinstance(value, str) and value else None

        return cls(subject=text("sub"),
                   user=text("name") or text("preferred_username") or text("email"),
                   issuer=text("iss"), client_id=text("client_id") or text("azp"),
                   client_name=text("client_name"), client_version=text("client_version"),
                   act=claims.get("act"))


def mcp_event_type(method: str) -> str:
    """The event type of an MCP method (``mcp_request`` for one ToolHive does not name)."""
    return _MCP_EVENT_TYPES.get(method, "mcp_request")


def mcp_event(settings: AuditSettings, method: str, *,
              params: Mapping[str, Any] | None = None,
              rpc_id: str | int | None = None,
              result: Mapping[str, Any] | None = None,
              error: tuple[int, str] | None = None,
              status: int = 200,
              caller: Caller | None = None,
              address: str | None = None,
              user_agent: str | None = None,
              request_id: str | None = None,
              session_id: str | None = None,
              endpoint: str = "/mcp",
              backend: str | None = None,
              transport: str = "http",
              duration: float | None = None) -> AuditEvent | None:
    """The event of one MCP request (None when ``settings`` do not want it: nothing is built).

    ``params`` and ``rpc_id`` are the request's; ``result`` or ``error`` (code, message) its
    reply, if any; ``status`` the HTTP status of that reply (a denial by authorization is 403,
    even when the denial travels as a JSON-RPC error). ``request_id`` is the HTTP request id,
    ``duration`` the time taken in seconds, ``backend`` the backend that served it."""
    kind = mcp_event_type(method)
    if not settings.wants(kind):
        return None
    extra: dict[str, Any] = {"transport": transport}
    if duration is not None:
        extra["duration_ms"] = int(duration * 1000)
    outcome = _http_outcome(status)
    if outcome == "success" and settings.detect_application_errors:
        if error is not None:
            outcome = "application_error"
            extra["jsonrpc_error_code"] = error[0]
            extra["jsonrpc_error_message"] = error[1][:_MAX_MESSAGE]
        elif result is not None and result.get("isError") is True:
            outcome = "application_error"
    if backend:
        extra["backend_name"] = backend
    if rpc_id is not None:
        extra["jsonrpc_id"] = rpc_id
    target = {"endpoint": endpoint, "method": method, "type": _TARGET_TYPES.get(kind, "endpoint")}
    name = (params or {}).get(_TARGET_PARAMS.get(method, ""))
    if isinstance(name, str) and name:
        target["name"] = name
    data: dict[str, Any] = {}
    if settings.include_request_data:
        request: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if rpc_id is not None:
            request["id"] = rpc_id
        if params is not None:
            request["params"] = params
        _put(data, "request", request, settings.max_data_size)
    if settings.include_response_data and (result is not None or error is not None):
        response: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id}
        if error is not None:
            response["error"] = {"code": error[0], "message": error[1]}
        else:
            response["result"] = result
        extra["response_size_bytes"] = _put(data, "response", response, settings.max_data_size)
    event = _event(settings, kind, outcome, caller,
                   _source(address, user_agent, request_id, session_id), target, extra)
    if data:
        event["data"] = data
    return event


def auth_event(settings: AuditSettings, kind: AuthKind, outcome: Outcome, *,
               caller: Caller | None = None,
               address: str | None = None,
               user_agent: str | None = None,
               request_id: str | None = None,
               endpoint: str | None = None,
               grant_type: str | None = None,
               provider: str | None = None,
               reason: str | None = None) -> AuditEvent | None:
    """The event of a login, a token issued, refreshed or revoked, or a request refused for its
    credentials (None when ``settings`` do not want it). ``caller`` names the end user and the
    OAuth client; ``provider`` the upstream identity provider of a login; ``reason`` why it
    failed or was denied, in a few words or an OAuth error code (never a token's contents)."""
    event_type = AUTH_EVENT_TYPES[kind]
    if not settings.wants(event_type):
        return None
    target = {"type": _AUTH_TARGET_TYPES[kind]}
    if endpoint:
        target["endpoint"] = endpoint
    if grant_type:
        target["method"] = grant_type
    if provider:
        target["name"] = provider
    extra = {"reason": reason[:_MAX_MESSAGE]} if reason else {}
    return _event(settings, event_type, outcome, caller,
                  _source(address, user_agent, request_id, None), target, extra)


def _http_outcome(status: int) -> Outcome:
    if status in (401, 403):
        return "denied"
    if 400 <= status < 500:
        return "failure"
    return "error" if status >= 500 else "success"


def _source(address: str | None, user_agent: str | None, request_id: str | None,
            session_id: str | None) -> dict[str, Any]:
    extra = {key: value for key, value in (("user_agent", user_agent),
                                           ("request_id", request_id),
                                           ("session_id", session_id)) if value}
    if address is None:
        return {"type": "local", "value": "", "extra": extra}
    return {"type": "network", "value": address, "extra": extra}


def _event(settings: AuditSettings, event_type: str, outcome: Outcome, caller: Caller | None,
           source: dict[str, Any], target: dict[str, str],
           extra: dict[str, Any]) -> AuditEvent:
    now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    caller = caller or Caller()
    subjects = {key: value for key, value in (
        ("user_id", caller.subject), ("issuer", caller.issuer), ("client_id", caller.client_id),
        ("client_name", caller.client_name), ("client_version", caller.client_version))
        if value}
    subjects["user"] = caller.user or "anonymous"
    event: AuditEvent = {
        "time": now, "level": "AUDIT", "msg": "audit_event", "audit_id": str(uuid.uuid4()),
        "type": event_type, "logged_at": now, "outcome": outcome,
        "component": settings.component or _COMPONENT, "source": source, "subjects": subjects,
        "target": target}
    if extra:
        event["metadata"] = {"extra": extra}
    delegation = _delegation(caller.act, settings.max_delegation_depth)
    if delegation is not None:
        event["delegation"] = delegation
    return event


def _delegation(act: Any, max_depth: int) -> dict[str, Any] | None:
    """The delegation chain of an ``act`` claim, as toolhive-core's ``ParseDelegationChain``."""
    if act is None:
        return None
    chain: list[dict[str, str]] = []
    omitted = 0
    reason = None if isinstance(act, Mapping) else "act_not_object"
    node = act if reason is None else None
    while isinstance(node, Mapping):
        if len(chain) == max_depth:
            while isinstance(node, Mapping):
                omitted += 1
                node = node.get("act")
            break
        hop: dict[str, str] = {}
        for claim in ("iss", "sub"):
            if claim in node:
                if isinstance(node[claim], str):
                    hop[claim] = node[claim]
                else:
                    reason = reason or f"{claim}_not_string"
        chain.append(hop)
        node = node.get("act")
    if node is not None and reason is None:
        reason = "nested_act_not_object"
    out: dict[str, Any] = {"chain": chain, "truncated": omitted > 0, "omitted": omitted,
                           "malformed": reason is not None}
    if reason is not None:
        out["malformedReason"] = reason
    return out


def _dumps(value: Any) -> bytes:
    """JSON of ``value``: orjson's, or the standard library's (in ASCII) for what orjson refuses:
    an integer beyond 64 bits, a lone surrogate; any other object as its ``str``."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, default=str).encode()


def _put(data: dict[str, Any], key: str, value: Any, limit: int) -> int:
    """Put ``value`` in ``data`` as it is, or as the first ``limit`` bytes of its JSON with
    ``<key>_truncated``; return the size of its JSON."""
    raw = _dumps(value)
    if len(raw) <= limit:
        data[key] = value
    else:
        data[key] = raw[:limit].decode("utf-8", "ignore")
        data[f"{key}_truncated"] = True
    return len(raw)


class AuditLogError(Retry):
    """The audit log cannot be written: its file cannot be opened, or a write failed. The
    supervisor logs it as a warning and starts the writer again after its backoff."""

    def __init__(self, message: str) -> None:
        super().__init__(message, level=logging.WARNING)


class _Sink:
    """Where lines go: the log file (a descriptor opened for appending), or stdout. Its methods
    block, so they run in a worker thread."""

    def __init__(self, fd: int | None, name: str) -> None:
        self.fd = fd
        self.name = name

    @classmethod
    def open(cls, path: str | None) -> _Sink:
        if not path:
            return cls(None, "stdout")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as err:
            parent = Path(path).parent
            why = (f"its directory {parent} does not exist" if not parent.is_dir()
                   else err.strerror or str(err))
            raise AuditLogError(f"audit logFile {path} cannot be opened: {why}") from err
        return cls(fd, path)

    def write(self, data: bytes) -> None:
        if self.fd is None:
            sys.stdout.write(data.decode())
            sys.stdout.flush()
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write_and_close(self, data: bytes) -> None:
        try:
            self.write(data)
        finally:
            self.close()


class AuditLog:
    """The audit log of a process: :meth:`record` from anywhere in the trio thread, :meth:`run`
    as one supervised task."""

    def __init__(self, settings: AuditSettings, *, queue_size: int = 4096,
                 on_drop: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.dropped = 0
        """Events lost because the queue was full (or the event could not be serialized)."""
        self._on_drop = on_drop
        self._send, self._receive = trio.open_memory_channel[bytes](queue_size)

    @classmethod
    def disabled(cls) -> AuditLog:
        """A log that writes nothing (audit not enabled)."""
        return cls(AuditSettings(), queue_size=0)

    def record(self, event: AuditEvent | None) -> None:
        """Queue ``event`` for writing, if the settings want its type; never blocks or raises."""
        if event is None:
            return
        try:
            if self.settings.wants(event["type"]):
                self._send.send_nowait(_dumps(event) + b"\n")
        except Exception:  # a full queue (trio.WouldBlock), or an event that is not JSON
            self.dropped += 1
            if self._on_drop is not None:
                with contextlib.suppress(Exception):
                    self._on_drop()

    async def run(self, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the queued events until cancelled, then what is still queued (a long-lived
        task; started once its file is open). Returns at once when audit is not enabled."""
        if not self.settings.enabled:
            task_status.started()
            return
        sink = await trio.to_thread.run_sync(_Sink.open, self.settings.log_file)
        task_status.started()
        lines: list[bytes] = []  # taken from the queue, not yet written
        try:
            while True:
                lines = [await self._receive.receive(), *self._queued()]
                try:
                    await trio.to_thread.run_sync(sink.write, b"".join(lines))
                except OSError as err:
                    sink.close()
                    raise AuditLogError(f"audit log {sink.name}: {len(lines)} events lost: "
                                        f"{err.strerror or err}") from err
                lines = []
        except trio.Cancelled:
            lines += self._queued()
            with trio.CancelScope(shield=True,
                                  deadline=trio.current_time() + _FINAL_FLUSH_SECONDS):
                try:
                    await trio.to_thread.run_sync(sink.write_and_close, b"".join(lines),
                                                  abandon_on_cancel=True)
                except OSError as err:
                    log.warning("audit log %s: %d events lost at shutdown: %s", sink.name,
                                len(lines), err.strerror or err)
            raise

    def _queued(self) -> list[bytes]:
        lines: list[bytes] = []
        while True:
            try:
                lines.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                return lines
