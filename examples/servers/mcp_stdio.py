"""A tiny MCP server runtime over stdio, using only the standard library.

The example servers next to this file (``notes_server.py`` and ``clock_server.py``) are started by
the gateway as stdio backends, in the quickstart and in tests. They must run with any system
``python3 >= 3.11`` and no third-party packages, so this module implements just enough of the
Model Context Protocol to be a faithful backend:

* newline-delimited JSON-RPC 2.0 on stdin/stdout; nothing else is ever written to stdout
  (``sys.stdout`` is pointed at stderr while a server runs, so a stray ``print`` cannot corrupt
  the stream), diagnostics go to stderr;
* lines are bounded (:data:`MAX_LINE_BYTES`): a longer line is discarded and answered with a
  -32700 parse error, without ever being held in memory;
* the main thread reads; every request runs in its own worker thread, so a tool can block on a
  server-to-client request (sampling, elicitation, roots) while the reader keeps routing
  responses, cancellations and further requests;
* ``initialize`` with version negotiation, ``ping``, ``logging/setLevel`` (log notifications are
  only sent at or above the level set), ``notifications/cancelled`` (the worker's cancel flag is
  set, no response is sent), JSON-RPC batches when the 2025-03-26 revision was negotiated;
* ``tools/list`` and ``tools/call`` for :class:`Tool` objects, with argument checking against a
  small subset of JSON Schema; argument errors are tool execution errors (``isError: true``),
  as the 2025-11-25 revision asks, while unknown tools and malformed requests are -32602.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TypeGuard

SUPPORTED_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = "2025-11-25"

MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_IN_FLIGHT = 64
CLIENT_REQUEST_TIMEOUT = 300.0
SHUTDOWN_GRACE = 5.0

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_BUSY = -32000
RESOURCE_NOT_FOUND = -32002

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

JsonObject = dict[str, Any]
RequestId = str | int


def warn(message: str) -> None:
    """A diagnostic line on stderr: never on stdout, which carries only protocol messages."""
    print(message, file=sys.stderr, flush=True)


class RpcError(Exception):
    """A JSON-RPC error response: raise it from a handler to answer with ``error``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> JsonObject:
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class Cancelled(Exception):
    """The request being served was cancelled by the client: no response will be sent."""


class ToolError(Exception):
    """Raise from a tool handler to return ``isError: true`` with this text."""


def text_result(
    text: str, *, is_error: bool = False, structured: JsonObject | None = None
) -> JsonObject:
    """A ``CallToolResult`` with one text block."""
    result: JsonObject = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    if is_error:
        result["isError"] = True
    return result


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_int,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def schema_errors(schema: Mapping[str, Any], value: Any, where: str = "arguments") -> list[str]:
    """What is wrong with ``value`` under ``schema``: the subset of JSON Schema the tools use.

    Understood: ``type`` (a name or a list), ``properties``, ``required``,
    ``additionalProperties: false``, ``enum``, ``minimum``/``maximum``,
    ``minLength``/``maxLength``.
    """
    errors: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPE_CHECKS[name](value) for name in names):
            return [f"{where} must be of type {' or '.join(names)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where} must be one of {', '.join(map(str, schema['enum']))}")
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be at most {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{where} must be at least {schema['minLength']} characters long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where} must be at most {schema['maxLength']} characters long")
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}.{name} is required")
        for name, item in value.items():
            if name in properties:
                errors.extend(schema_errors(properties[name], item, f"{where}.{name}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where}.{name} is not a known argument")
    return errors


ToolHandler = Callable[["RequestContext", JsonObject], "JsonObject | str"]


@dataclass(frozen=True)
class Tool:
    """A tool: its description as ``tools/list`` shows it, and the function that runs it.

    The handler gets the request context and the checked arguments. It returns a text (a
    successful result with one text block) or a whole ``CallToolResult``; it raises
    :class:`ToolError` for a failed call and :class:`Cancelled` when it notices cancellation.
    """

    name: str
    description: str
    input_schema: JsonObject
    handler: ToolHandler
    output_schema: JsonObject | None = None
    title: str | None = None

    def describe(self, protocol_version: str) -> JsonObject:
        described: JsonObject = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if protocol_version >= "2025-06-18":
            if self.title is not None:
                described["title"] = self.title
            if self.output_schema is not None:
                described["outputSchema"] = self.output_schema
        return described


@dataclass(eq=False)
class _Pending:
    """A server-to-client request waiting for its response."""

    done: threading.Event = field(default_factory=threading.Event)
    response: JsonObject | None = None


class RequestContext:
    """One client request being served: its params, cancel flag and ways to talk back."""

    def __init__(self, server: Server, request_id: RequestId, method: str, params: JsonObject):
        self.server = server
        self.request_id = request_id
        self.method = method
        self.params = params
        self.cancelled = threading.Event()
        self._waiting: set[_Pending] = set()
        self._lock = threading.Lock()

    @property
    def progress_token(self) -> str | int | None:
        meta = self.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        return token if isinstance(token, str) or _is_int(token) else None

    def cancel(self) -> None:
        """Set the cancel flag and wake whatever this request is waiting for."""
        with self._lock:
            self.cancelled.set()
            waiting = list(self._waiting)
        for pending in waiting:
            pending.done.set()

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled

    def sleep(self, seconds: float) -> None:
        """Sleep, waking at once (with :class:`Cancelled`) if the request is cancelled."""
        if self.cancelled.wait(seconds):
            raise Cancelled

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """``notifications/progress``, if the request asked for it with a progress token."""
        token = self.progress_token
        if token is None:
            return
        params: JsonObject = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self.server.notify("notifications/progress", params)

    def log(self, level: str, data: Any) -> None:
        self.server.log(level, data)

    def request(
        self, method: str, params: JsonObject, timeout: float = CLIENT_REQUEST_TIMEOUT
    ) -> JsonObject:
        """A server-to-client request made on behalf of this one; returns its ``result``.

        Raises :class:`RpcError` for an error response (or a timeout, or a closed connection)
        and :class:`Cancelled` if this request is cancelled while waiting; in both of the last
        two cases the client is told, with ``notifications/cancelled``, to stop working on it.
        """
        pending = _Pending()
        with self._lock:
            if self.cancelled.is_set():
                raise Cancelled
            self._waiting.add(pending)
        try:
            return self.server.call_client(method, params, pending, timeout, self.cancelled)
        finally:
            with self._lock:
                self._waiting.discard(pending)


Handler = Callable[[RequestContext], JsonObject]
NotificationHandler = Callable[[JsonObject], None]


class Server:
    """An MCP server on stdin/stdout. Register handlers, then call :meth:`run`."""

    def __init__(
        self,
        name: str,
        version: str,
        capabilities: JsonObject,
        instructions: str | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.capabilities = capabilities
        self.instructions = instructions
        self.protocol_version = LATEST_VERSION
        self.client_capabilities: JsonObject = {}
        self.client_info: JsonObject = {}
        self.initialized = threading.Event()
        self.log_level = "debug"
        self.handlers: dict[str, Handler] = {
            "initialize": self._initialize,
            "ping": lambda ctx: {},
        }
        if "logging" in capabilities:
            self.handlers["logging/setLevel"] = self._set_level
        self.notification_handlers: dict[str, NotificationHandler] = {
            "notifications/initialized": lambda params: self.initialized.set(),
            "notifications/cancelled": self._cancelled,
        }
        self.tools: dict[str, Tool] = {}
        self._out: IO[bytes] | None = None
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._in_flight: dict[RequestId, RequestContext] = {}
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._idle = threading.Condition(self._state_lock)
        self._input_closed = False
        self._closed = False

    # -- registration --------------------------------------------------------------------

    def method(self, name: str) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(ctx) -> result`` answers requests for ``name``."""

        def register(handler: Handler) -> Handler:
            self.handlers[name] = handler
            return handler

        return register

    def add_tools(self, *tools: Tool) -> None:
        for tool in tools:
            self.tools[tool.name] = tool
        self.handlers["tools/list"] = self._list_tools
        self.handlers["tools/call"] = self._call_tool

    def client_supports(self, capability: str) -> bool:
        return isinstance(self.client_capabilities.get(capability), dict)

    # -- sending -------------------------------------------------------------------------

    def send(self, message: JsonObject | list[JsonObject]) -> None:
        line = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        data = line.encode("utf-8") + b"\n"
        with self._write_lock:
            if self._out is None or self._closed:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._closed = True

    def notify(self, method: str, params: JsonObject | None = None) -> None:
        message: JsonObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """``notifications/message``, only at or above the level set by the client."""
        if LOG_LEVELS.index(level) < LOG_LEVELS.index(self.log_level):
            return
        self.notify(
            "notifications/message", {"level": level, "logger": logger or self.name, "data": data}
        )

    def call_client(
        self,
        method: str,
        params: JsonObject,
        pending: _Pending,
        timeout: float,
        cancelled: threading.Event,
    ) -> JsonObject:
        """Send a request to the client and block until its response (see RequestContext)."""
        request_id = next(self._ids)
        with self._state_lock:
            if self._input_closed:
                raise RpcError(INTERNAL_ERROR, "the connection to the client is closed")
            self._pending[request_id] = pending
        try:
            self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            answered = pending.done.wait(timeout)
        finally:
            with self._state_lock:
                self._pending.pop(request_id, None)
        response = pending.response
        if response is None:
            if self._input_closed:
                raise RpcError(INTERNAL_ERROR, "the connection to the client is closed")
            reason = "the request was cancelled" if cancelled.is_set() else "no answer in time"
            self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})
            if cancelled.is_set():
                raise Cancelled
            if not answered:
                raise RpcError(INTERNAL_ERROR, f"the client did not answer {method} in time")
            raise RpcError(INTERNAL_ERROR, f"no response to {method}")
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            code = error.get("code")
            raise RpcError(
                code if _is_int(code) else INTERNAL_ERROR,
                str(error.get("message", "error")),
                error.get("data"),
            )
        result = response.get("result")
        if not isinstance(result, dict):
            raise RpcError(INTERNAL_ERROR, f"the client's answer to {method} is not an object")
        return result

    # -- built-in methods ----------------------------------------------------------------

    def _initialize(self, ctx: RequestContext) -> JsonObject:
        requested = ctx.params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, "initialize: protocolVersion must be a string")
        capabilities = ctx.params.get("capabilities", {})
        if not isinstance(capabilities, dict):
            raise RpcError(INVALID_PARAMS, "initialize: capabilities must be an object")
        client_info = ctx.params.get("clientInfo", {})
        self.protocol_version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
        self.client_capabilities = capabilities
        self.client_info = client_info if isinstance(client_info, dict) else {}
        result: JsonObject = {
            "protocolVersion": self.protocol_version,
            "capabilities": self.capabilities,
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _set_level(self, ctx: RequestContext) -> JsonObject:
        level = ctx.params.get("level")
        if level not in LOG_LEVELS:
            raise RpcError(
                INVALID_PARAMS, f"logging/setLevel: level must be one of {', '.join(LOG_LEVELS)}"
            )
        self.log_level = level
        return {}

    def _cancelled(self, params: JsonObject) -> None:
        request_id = params.get("requestId")
        with self._state_lock:
            ctx = self._in_flight.get(request_id) if _hashable_id(request_id) else None
        if ctx is not None and ctx.method != "initialize":
            ctx.cancel()

    def _list_tools(self, ctx: RequestContext) -> JsonObject:
        check_no_cursor(ctx)
        return {"tools": [tool.describe(self.protocol_version) for tool in self.tools.values()]}

    def _call_tool(self, ctx: RequestContext) -> JsonObject:
        name = ctx.params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call: name must be a string")
        tool = self.tools.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = ctx.params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "tools/call: arguments must be an object")
        errors = schema_errors(tool.input_schema, arguments)
        if errors:
            return text_result(f"invalid arguments for {name}: {'; '.join(errors)}", is_error=True)
        try:
            outcome = tool.handler(ctx, arguments)
        except ToolError as error:
            return text_result(str(error), is_error=True)
        result = text_result(outcome) if isinstance(outcome, str) else outcome
        if self.protocol_version < "2025-06-18":
            result.pop("structuredContent", None)
        return result

    # -- receiving -----------------------------------------------------------------------

    def run(self, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> int:
        """Serve until stdin closes; returns the exit status."""
        source = stdin if stdin is not None else sys.stdin.buffer
        self._out = stdout if stdout is not None else sys.stdout.buffer
        saved_stdout, sys.stdout = sys.stdout, sys.stderr
        try:
            while True:
                line = source.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    self._discard_rest_of_line(source)
                    warn(f"{self.name}: discarded a message longer than {MAX_LINE_BYTES} bytes")
                    self._send_error(None, PARSE_ERROR, "message too long")
                    continue
                if line.strip():
                    self._receive_line(line)
        except KeyboardInterrupt:
            return 130
        finally:
            sys.stdout = saved_stdout
            self._shut_down()
        return 0

    @staticmethod
    def _discard_rest_of_line(source: IO[bytes]) -> None:
        while True:
            chunk = source.readline(MAX_LINE_BYTES)
            if not chunk or chunk.endswith(b"\n"):
                return

    def _shut_down(self) -> None:
        """Stdin is closed: let running requests finish (briefly), then cancel the rest.

        Requests waiting for the client fail at once, since no answer can come any more.
        """
        with self._state_lock:
            self._input_closed = True
            pending = list(self._pending.values())
        for waiter in pending:
            waiter.done.set()
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight, timeout=SHUTDOWN_GRACE)
            contexts = list(self._in_flight.values())
        for ctx in contexts:
            ctx.cancel()
        with self._write_lock:
            self._closed = True

    def _send_error(self, request_id: RequestId | None, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def _receive_line(self, line: bytes) -> None:
        try:
            message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            self._send_error(None, PARSE_ERROR, f"Parse error: {error}")
            return
        if isinstance(message, list):
            self._receive_batch(message)
            return
        invalid = self._receive(message, batch=None)
        if invalid is not None:
            self.send(invalid)

    def _receive_batch(self, messages: list[Any]) -> None:
        if self.protocol_version != "2025-03-26":
            self._send_error(
                None,
                INVALID_REQUEST,
                f"JSON-RPC batches are not supported in protocol version {self.protocol_version}",
            )
            return
        if not messages:
            self._send_error(None, INVALID_REQUEST, "empty batch")
            return
        batch = _Batch(self)
        for message in messages:
            invalid = self._receive(message, batch=batch)
            if invalid is not None:
                batch.started()
                batch.finished(invalid)
        batch.seal()

    def _receive(self, message: Any, batch: _Batch | None) -> JsonObject | None:
        """Handle one message; returns an error response to send for an invalid one."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
        if "method" not in message:
            if "result" in message or "error" in message:
                self._receive_response(message)  # a response is never answered, even if bad
                return None
            return _error(None, INVALID_REQUEST, "Invalid Request: no method")
        method = message["method"]
        params = message.get("params", {})
        if "id" not in message:
            handler = self.notification_handlers.get(method) if isinstance(method, str) else None
            if handler is not None and isinstance(params, dict):
                try:
                    handler(params)
                except Exception:
                    traceback.print_exc(file=sys.stderr)
            return None
        request_id = message["id"]
        if not _hashable_id(request_id):
            return _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or integer")
        if not isinstance(method, str):
            return _error(request_id, INVALID_REQUEST, "Invalid Request: method must be a string")
        if not isinstance(params, dict):
            return _error(request_id, INVALID_PARAMS, f"{method}: params must be an object")
        ctx = RequestContext(self, request_id, method, params)
        with self._state_lock:
            if request_id in self._in_flight:
                return _error(request_id, INVALID_REQUEST, f"request id {request_id!r} is in use")
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                return _error(request_id, SERVER_BUSY, "too many requests in progress")
            self._in_flight[request_id] = ctx
        if batch is not None:
            batch.started()
        threading.Thread(
            target=self._serve, args=(ctx, batch), name=f"request-{request_id}", daemon=True
        ).start()
        return None

    def _receive_response(self, message: JsonObject) -> None:
        request_id = message.get("id")
        with self._state_lock:
            pending = self._pending.get(request_id) if _is_int(request_id) else None
        if pending is None:
            warn(f"{self.name}: ignored a response to unknown request {request_id!r}")
            return
        pending.response = message
        pending.done.set()

    def _serve(self, ctx: RequestContext, batch: _Batch | None) -> None:
        response: JsonObject | None
        try:
            handler = self.handlers.get(ctx.method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {ctx.method}")
            response = {"jsonrpc": "2.0", "id": ctx.request_id, "result": handler(ctx)}
        except Cancelled:
            response = None
        except RpcError as error:
            response = {"jsonrpc": "2.0", "id": ctx.request_id, "error": error.to_json()}
        except Exception as error:
            traceback.print_exc(file=sys.stderr)
            response = _error(ctx.request_id, INTERNAL_ERROR, f"Internal error: {error}")
        if ctx.cancelled.is_set():
            response = None
        if batch is not None:
            batch.finished(response)
        elif response is not None:
            self.send(response)
        # Only now, once answered, does the request stop holding up shutdown.
        with self._state_lock:
            self._in_flight.pop(ctx.request_id, None)
            self._idle.notify_all()


class _Batch:
    """The responses to one 2025-03-26 batch, sent together once every request is done."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.responses: list[JsonObject] = []
        self._lock = threading.Lock()
        self._running = 0
        self._sealed = False

    def started(self) -> None:
        with self._lock:
            self._running += 1

    def finished(self, response: JsonObject | None) -> None:
        with self._lock:
            if response is not None:
                self.responses.append(response)
            self._running -= 1
        self._flush_if_done()

    def seal(self) -> None:
        with self._lock:
            self._sealed = True
        self._flush_if_done()

    def _flush_if_done(self) -> None:
        with self._lock:
            if not self._sealed or self._running:
                return
            responses, self.responses = self.responses, []
            self._sealed = False  # flush once only
        if responses:
            self.server.send(responses)


def _error(request_id: RequestId | None, code: int, message: str) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _hashable_id(value: Any) -> TypeGuard[RequestId]:
    return isinstance(value, str) or _is_int(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def check_no_cursor(ctx: RequestContext) -> None:
    """The lists here are never paginated, so any cursor is one this server did not issue."""
    if "cursor" in ctx.params:
        raise RpcError(INVALID_PARAMS, f"{ctx.method}: unknown cursor")


def require_string(ctx: RequestContext, name: str) -> str:
    value = ctx.params.get(name)
    if not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, f"{ctx.method}: {name} must be a string")
    return value
