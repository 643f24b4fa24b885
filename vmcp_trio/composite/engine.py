"""The engine of composite tools: runs one :class:`~vmcp_trio.resources.composite_plan.WorkflowPlan`
for one ``tools/call`` and returns the MCP ``CallToolResult``.

Rules it keeps (ToolHive's ``pkg/vmcp/composer`` unless said otherwise):

* **Scheduling**: a step starts as soon as every step it ``dependsOn`` has finished (ToolHive waits
  for whole DAG levels; the order constraints are the same), at most :data:`MAX_PARALLEL_STEPS`
  at once, all in one trio nursery: cancelling the caller's scope cancels every step.
* **A step** first evaluates its ``condition`` (rendered ``true``/``false`` in any of Go's three
  spellings, or a boolean); false records it ``skipped`` with ``defaultResults`` as its output.
  Tool steps call ``ports.call_tool`` with the expanded arguments; the output is the result's
  ``structuredContent`` or, failing that, its content as ``{text, text_1, image_0, resource…}``;
  ``.steps.<id>.content`` always holds the latter. ``isError`` results and :class:`StepFailed`
  are failures (any other exception is a bug and propagates).
* **Failures** follow ``onError``: ``abort`` ends the workflow with ``isError: true`` and a message
  naming the step; ``continue`` records the step ``failed`` with ``defaultResults`` as output and
  goes on; ``retry`` makes ``retryCount`` more attempts, waiting ``retryDelay`` then 1.5 times
  longer each time, at most 60 times the first delay (ToolHive's backoff without the jitter).
* **Timeouts**: the step timeout covers the condition, every attempt and the waits; the workflow
  timeout covers all steps. A timed-out elicitation counts as a cancel, as in ToolHive.
* **Elicitation**: accept gives output ``{action, content}``; decline/cancel follow
  ``onDecline``/``onCancel``: ``abort`` fails, ``continue`` gives ``{action}``, ``skip_remaining``
  gives ``{action, skipped: true}`` and, unlike ToolHive today (which only logs it), records every
  step not yet started as skipped and completes the workflow.
* **forEach** evaluates ``collection`` to a list (or a JSON text of one), refuses more than
  ``maxIterations`` items, runs the inner tool step for each with ``.forEach.<itemVar>`` and
  ``.forEach.index`` at most ``maxParallel`` at once, and outputs ``{iterations, count,
  completed, failed}``; an iteration failure aborts the step unless its ``onError`` is continue.
* **Result**: with ``output`` declared, each property's value template is evaluated and coerced
  to its type (a string is parsed for number/boolean/object/array), falling back to ``default``;
  a missing required property is an error. Without it, the output of the step that completed
  last. Either way ``structuredContent`` plus its JSON as text (mcp-go's
  ``NewToolResultStructuredOnly``).
* **Bounds**: every step output and the final output at most :data:`MAX_OUTPUT_BYTES` of JSON.
* ``arguments`` are checked against ``parameters`` (required names, declared primitive types)
  after applying the schema's defaults; a mismatch is an ``isError`` result.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import trio

from ..resources.composite_plan import OutputProperty, OutputSpec, Step, WorkflowPlan
from .templates import (
    MISSING,
    TemplateError,
    expand_value,
    go_str,
)

__all__ = ["MAX_OUTPUT_BYTES", "MAX_PARALLEL_STEPS", "StepFailed", "WorkflowPorts",
           "coerce_arguments", "run_workflow"]

MAX_PARALLEL_STEPS = 10
MAX_OUTPUT_BYTES = 10 * 1024 * 1024
_BACKOFF = 1.5
_MAX_BACKOFF_FACTOR = 60


class StepFailed(Exception):
    """A port could not do what a step asked (transport error, no elicitation support...)."""


async def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class WorkflowPorts:
    """What the gateway session supplies: the only ways the engine reaches the world."""

    call_tool: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
    elicit: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    progress: Callable[[int, int, str], Awaitable[None]] = _nothing
    step_started: Callable[[str], Awaitable[None]] = _nothing
    step_finished: Callable[[str, str, float], Awaitable[None]] = _nothing


class _Failure(Exception):
    """A step failed; the message names the step."""


@dataclass
class _Record:
    status: str
    output: Any = None
    content: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    finished_at: int = 0  # order of completion, for the "last step" output


class _Run:
    def __init__(self, plan: WorkflowPlan, params: dict[str, Any], ports: WorkflowPorts) -> None:
        self.plan = plan
        self.params = params
        self.ports = ports
        self.records: dict[str, _Record] = {}
        self.done = {s.id: trio.Event() for s in plan.steps}
        self.limiter = trio.CapacityLimiter(MAX_PARALLEL_STEPS)
        self.failure: str | None = None
        self.skip_rest = False
        self.finished = 0
        self.completions = 0
        self.started = time.monotonic()
        self.workflow_id = str(uuid.uuid4())
        self.start_time = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.status = "running"

    # --- the template context
    def context(self, for_each: dict[str, Any] | None = None) -> dict[str, Any]:
        steps = {}
        for step_id, rec in self.records.items():
            entry: dict[str, Any] = {"status": rec.status, "output": rec.output,
                                     "content": rec.content}  # fmt: skip
            if rec.error is not None:
                entry["error"] = rec.error
            steps[step_id] = entry
        ctx: dict[str, Any] = {
            "params": self.params, "steps": steps, "vars": {},
            "workflow": {
                "id": self.workflow_id, "start_time": self.start_time, "status": self.status,
                "duration_ms": int((time.monotonic() - self.started) * 1000),
                "step_count": sum(r.status == "completed" for r in self.records.values()),
            },
        }  # fmt: skip
        if for_each is not None:
            ctx["forEach"] = for_each
        return ctx

    # --- scheduling
    async def run_all(self, nursery: trio.Nursery) -> None:
        for step in self.plan.steps:
            nursery.start_soon(self.schedule, step, nursery)

    async def schedule(self, step: Step, nursery: trio.Nursery) -> None:
        for dep in step.depends_on:
            await self.done[dep].wait()
        try:
            async with self.limiter:
                await self.execute(step)
        except _Failure as exc:
            self.failure = str(exc)
            nursery.cancel_scope.cancel()
        finally:
            self.done[step.id].set()

    async def execute(self, step: Step) -> None:
        began = time.monotonic()
        outcome, failure = "skipped", None
        if self.skip_rest:
            self.finish(step, "skipped", step.default_results)
        else:
            await self.ports.step_started(step.id)
            with trio.move_on_after(step.timeout) as scope:
                try:
                    outcome = await self.attempt(step)
                except _Failure as exc:
                    outcome, failure = "failed", exc
            if scope.cancelled_caught:
                try:
                    outcome = await self.timed_out(step)
                except _Failure as exc:
                    outcome, failure = "timed_out", exc
        await self.ports.step_finished(step.id, outcome, time.monotonic() - began)
        self.finished += 1
        await self.ports.progress(self.finished, len(self.plan.steps), f"step {step.id} {outcome}")
        if failure is not None:
            raise failure

    async def attempt(self, step: Step) -> str:
        try:
            if step.condition is not None and not _truth(step.condition.evaluate(self.context())):
                self.finish(step, "skipped", step.default_results)
                return "skipped"
            if step.kind == "tool":
                output, content = await self.call_with_retry(step, self.context())
                self.finish(step, "completed", output, content)
            elif step.kind == "elicitation":
                await self.elicit(step)
            else:
                await self.for_each(step)
        except _StepError as exc:
            return self.failed(step, str(exc))
        return self.records[step.id].status

    async def timed_out(self, step: Step) -> str:
        if step.kind == "elicitation":
            return self.elicitation_action(step, step.on_cancel, "timeout")
        return self.failed(step, f"timed out after {_seconds(step.timeout)}")

    def failed(self, step: Step, message: str) -> str:
        if step.on_error.action == "continue":
            self.finish(step, "failed", step.default_results, error=message)
            return "failed"
        self.finish(step, "failed", None, error=message)
        what = f" (tool {step.tool!r})" if step.kind == "tool" else ""
        raise _Failure(f"step {step.id!r}{what}: {message}")

    def finish(self, step: Step, status: str, output: Any, content: dict[str, Any] | None = None,
               error: str | None = None) -> None:  # fmt: skip
        self.completions += status == "completed"
        order = self.completions if status == "completed" else 0
        self.records[step.id] = _Record(status, output, content or {}, error, order)

    # --- tool calls
    async def call_with_retry(self, step: Step, ctx: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        try:
            arguments = expand_value(step.arguments, ctx)
        except TemplateError as exc:
            raise _StepError(f"failed to expand arguments: {exc}") from None
        retries = step.on_error.retry_count if step.on_error.action == "retry" else 0
        delay, attempt = step.on_error.retry_delay, 0
        while True:
            try:
                return await self.call_once(step.tool, arguments)
            except _StepError:
                if attempt >= retries:
                    raise
            await trio.sleep(min(delay * _BACKOFF**attempt, delay * _MAX_BACKOFF_FACTOR))
            attempt += 1

    async def call_once(self, tool: str, arguments: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        try:
            result = await self.ports.call_tool(tool, arguments)
        except StepFailed as exc:
            raise _StepError(str(exc) or "tool call failed") from None
        content = _content_map(result.get("content"))
        if result.get("isError"):
            raise _StepError(_error_message(result, content))
        structured = result.get("structuredContent")
        output = structured if isinstance(structured, dict) else content
        _check_size(output, "step output")
        return output, content

    # --- elicitation
    async def elicit(self, step: Step) -> None:
        if self.ports.elicit is None:
            raise _StepError("elicitation is not available in this session")
        try:
            message = step.message.render(self.context()) if step.message else ""
        except TemplateError as exc:
            raise _StepError(f"failed to expand the message: {exc}") from None
        try:
            answer = await self.ports.elicit(message, dict(step.schema))
        except StepFailed as exc:
            raise _StepError(f"elicitation failed: {exc}") from None
        action = answer.get("action")
        if action == "accept":
            self.finish(step, "completed", {"action": "accept", "content": answer.get("content")})
        elif action in ("decline", "cancel"):
            handler = step.on_decline if action == "decline" else step.on_cancel
            self.elicitation_action(step, handler, action)
        else:
            raise _StepError(f"invalid elicitation response action {str(action)[:32]!r}")

    def elicitation_action(self, step: Step, handler: str, reason: str) -> str:
        if handler == "abort":
            what = {"decline": "declined", "cancel": "cancelled", "timeout": "timed out"}[reason]
            self.finish(step, "failed", None, error=f"elicitation {what}")
            raise _Failure(f"step {step.id!r}: elicitation {what}")
        output: dict[str, Any] = {"action": reason}
        if handler == "skip_remaining":
            output["skipped"] = True
            self.skip_rest = True
        self.finish(step, "completed", output)
        return "completed"

    # --- forEach
    async def for_each(self, step: Step) -> None:
        inner = step.inner
        assert inner is not None and step.collection is not None
        try:
            items = _collection(step.collection.evaluate(self.context()))
        except TemplateError as exc:
            raise _StepError(f"failed to expand the collection: {exc}") from None
        if len(items) > step.max_iterations:
            raise _StepError(
                f"collection size {len(items)} exceeds maxIterations {step.max_iterations}"
            )
        results: list[dict[str, Any]] = [{} for _ in items]
        limiter = trio.CapacityLimiter(step.max_parallel)
        keep_going = step.on_error.action == "continue"
        first_error: list[str] = []

        async def one(index: int, item: Any, nursery: trio.Nursery) -> None:
            async with limiter:
                ctx = self.context({step.item_var: item, "index": index})
                entry: dict[str, Any] = {"index": index, "item": item}
                try:
                    entry["output"], _ = await self.call_with_retry(inner, ctx)
                    entry["status"] = "completed"
                except _StepError as exc:
                    entry.update(status="failed", output=None, error=str(exc))
                    if not keep_going and not first_error:
                        first_error.append(f"iteration {index}: {exc}")
                        nursery.cancel_scope.cancel()
                results[index] = entry

        async with trio.open_nursery() as nursery:
            for index, item in enumerate(items):
                nursery.start_soon(one, index, item, nursery)
        completed = sum(r.get("status") == "completed" for r in results)
        output = {"iterations": results, "count": len(items), "completed": completed,
                  "failed": len(items) - completed}  # fmt: skip
        if first_error:
            self.records[step.id] = _Record("failed", output, {}, first_error[0])
            raise _Failure(f"step {step.id!r} (forEach): {first_error[0]}")
        _check_size(output, "step output")
        self.finish(step, "completed", output)

    # --- the result
    def result(self) -> dict[str, Any]:
        self.status = "completed"
        if self.plan.output is None:
            done = [r for r in self.records.values() if r.status == "completed"]
            output = max(done, key=lambda r: r.finished_at).output if done else None
        else:
            output = _construct(self.plan.output, self.context())
        _check_size(output, "workflow output")
        result: dict[str, Any] = {"content": [{"type": "text", "text": _dumps(output)}]}
        if isinstance(output, dict):
            result["structuredContent"] = output
        return result


class _StepError(Exception):
    """A step's own failure, before its onError decides what it means."""


async def run_workflow(plan: WorkflowPlan, arguments: Any, ports: WorkflowPorts) -> dict[str, Any]:
    """Run ``plan`` with the caller's ``arguments``; the MCP ``CallToolResult`` (a dict)."""
    try:
        params = _check_arguments(plan.parameters, {} if arguments is None else arguments)
    except ValueError as exc:
        return _error(f"Invalid arguments: {exc}")
    run = _Run(plan, params, ports)
    with trio.move_on_after(plan.timeout) as workflow_scope:
        async with trio.open_nursery() as nursery:
            await run.run_all(nursery)
    if run.failure is not None:
        return _error(f"Workflow execution failed: {run.failure}")
    if workflow_scope.cancelled_caught:
        return _error(
            f"Workflow execution failed: workflow timed out after {_seconds(plan.timeout)}"
        )
    try:
        return run.result()
    except (_StepError, TemplateError) as exc:
        return _error(f"Workflow execution failed: output construction failed: {exc}")


# ---------------------------------------------------------------------------------------------
# helpers


def _error(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _check_size(value: Any, what: str) -> None:
    try:
        size = len(orjson.dumps(value))
    except TypeError:
        raise _StepError(f"{what} is not JSON") from None
    if size > MAX_OUTPUT_BYTES:
        raise _StepError(f"{what} too large ({size} bytes, at most {MAX_OUTPUT_BYTES})")


def _truth(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return value[0] in "tT"
    raise _StepError(f"condition must evaluate to 'true' or 'false', got {go_str(value)[:64]!r}")


def _content_map(content: Any) -> dict[str, Any]:
    """ToolHive's ``ContentArrayToMap``: text, text_1.., image_0.., resource, resource_1.."""
    out: dict[str, Any] = {}
    counts = {"text": 0, "image": 0, "resource": 0}
    for item in content if isinstance(content, list) else []:
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "text":
            value = item.get("text", "")
        elif kind == "image":
            value = item.get("data", "")
        elif kind == "resource":
            resource = item.get("resource") or {}
            value = resource.get("text") or resource.get("blob", "")
        else:
            continue
        n = counts[kind]
        key = f"image_{n}" if kind == "image" else (kind if n == 0 else f"{kind}_{n}")
        out[key] = value
        counts[kind] = n + 1
    return out


def _error_message(result: Mapping[str, Any], content: Mapping[str, Any]) -> str:
    if content.get("text"):
        return str(content["text"])
    structured = result.get("structuredContent")
    if isinstance(structured, Mapping):
        for key in ("error", "message", "text"):
            if isinstance(structured.get(key), str) and structured[key]:
                return str(structured[key])
    return "tool execution error"


def _collection(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, list):
        raise _StepError("collection must resolve to a JSON array")
    return value


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _check_arguments(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Apply defaults, then check required names and declared types (a minimal JSON Schema)."""
    if not isinstance(arguments, dict):
        raise ValueError("arguments must be an object")
    props = schema.get("properties") or {}
    params = dict(arguments)
    for name, spec in props.items():
        if name not in params and isinstance(spec, Mapping) and "default" in spec:
            params[name] = spec["default"]
    for name in schema.get("required") or []:
        if name not in params:
            raise ValueError(f"parameter {name!r} is required")
    for name, value in params.items():
        spec = props.get(name)
        declared = spec.get("type") if isinstance(spec, Mapping) else None
        types = [declared] if isinstance(declared, str) else declared or []
        known = [t for t in types if t in _JSON_TYPES]
        if known and not any(_JSON_TYPES[t](value) for t in known):
            raise ValueError(f"parameter {name!r} must be of type {' or '.join(known)}")
    return params


def _construct(spec: OutputSpec, ctx: dict[str, Any]) -> dict[str, Any]:
    out = _properties(spec.properties, ctx)
    for name in spec.required:
        if out.get(name) is None:
            raise _StepError(f"required output field {name!r} is missing")
    return out


def _properties(props: tuple[OutputProperty, ...], ctx: dict[str, Any]) -> dict[str, Any]:
    """Each property's value, or its default when the template fails or gives no value; an
    optional property with neither is left out."""
    out: dict[str, Any] = {}
    for prop in props:
        if prop.properties:
            out[prop.name] = _properties(prop.properties, ctx)
            continue
        try:
            value = prop.value.evaluate(ctx) if prop.value is not None else MISSING
            if value is not MISSING and value != "<no value>":
                out[prop.name] = _coerce(value, prop.type)
                continue
        except (TemplateError, ValueError) as exc:
            if not prop.has_default:
                raise _StepError(f"output property {prop.name!r}: {exc}") from None
        if prop.has_default:
            try:
                out[prop.name] = _coerce(prop.default, prop.type)
            except ValueError as exc:
                raise _StepError(f"output property {prop.name!r}: default: {exc}") from None
    return out


def coerce_arguments(arguments: dict[str, Any], schema: Any) -> dict[str, Any]:
    """A step's arguments as the called tool's ``inputSchema`` types them (ToolHive renders
    every template to text and converts it so): each top-level argument whose property names
    one JSON type is converted to it when it can be; any other is left as it is, for the
    backend to judge."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return arguments
    coerced = dict(arguments)
    for name, value in arguments.items():
        spec = properties.get(name)
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, str) and kind in _JSON_TYPES and value is not None:
            with contextlib.suppress(ValueError, TypeError):  # the backend judges it
                coerced[name] = _coerce(value, kind)
    return coerced


def _coerce(value: Any, kind: str) -> Any:
    """``value`` as JSON of ``kind``; strings are parsed as ToolHive parses its rendered text."""
    if kind == "string":
        return value if isinstance(value, str) else go_str(value)
    if isinstance(value, str):
        text = value.strip()
        if kind == "boolean":
            lowered = {"true": True, "false": False, "1": True, "0": False, "t": True, "f": False}
            if text.lower() not in lowered:
                raise ValueError(f"cannot coerce {text[:32]!r} to boolean")
            return lowered[text.lower()]
        value = json.loads(text) if kind in ("object", "array") else float(text)
        if kind == "integer" and float(value).is_integer():
            value = int(value)
    if not _JSON_TYPES[kind](value):
        raise ValueError(f"value is not of type {kind}")
    return int(value) if kind == "integer" else value
