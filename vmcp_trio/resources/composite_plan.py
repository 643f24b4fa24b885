"""The plan of one ToolHive composite tool: frozen dataclasses, and the builder that checks the raw
definition (``spec.config.compositeTools[]`` or a VirtualMCPCompositeToolDefinition's ``spec``).

Rules it keeps:

* Every problem is reported, with its field path (``steps[2].dependsOn[0]``), in one
  :class:`PlanError` carrying ``problems: list[(path, message)]``; the config loader turns them
  into its own errors. Paths are relative to the ``path`` the caller passes (``""`` by default).
* The checks are ToolHive's (``pkg/vmcp/config/composite_validation.go``): name, description and
  at least one step required; unique step ids; ``dependsOn`` naming existing steps and no cycle;
  ``type`` one of tool/elicitation/forEach (default tool); a tool step needs ``tool`` matching
  ``^[a-zA-Z0-9][a-zA-Z0-9._-]*$``; an elicitation step needs ``message``; ``onError.action``
  abort/continue/retry with ``retryCount >= 1`` for retry (capped at 10, as ToolHive caps it;
  ``maxRetries``, its name up to ToolHive v0.6, means the same: v0.7 renamed it with no
  transition, so no deprecation to warn of; both given and different is a problem);
  onDecline/onCancel actions skip_remaining/abort/continue; forEach needs ``collection`` and a
  tool inner ``step``, ``itemVar`` an identifier other than ``index``, ``maxParallel`` 0..50,
  ``maxIterations`` 0..1000; ``parameters`` a JSON Schema of ``type: object``; durations in Go
  syntax (:mod:`vmcp_trio.resources.durations`); a step that may be skipped (``condition``, or
  ``onError.action: continue``) and whose output fields are read elsewhere must give those
  fields in ``defaultResults``; at most 100 steps.
* Every template is compiled here (:mod:`vmcp_trio.composite.templates`), so one that
  does not parse is a load-time error naming its field, line and column.
* Fields the CRD does not define (``failureMode`` in some examples) are dropped as the
  Kubernetes API server prunes them, and listed in :attr:`WorkflowPlan.warnings`.
* Defaults are ToolHive's: workflow timeout 30m, step timeout 5m, retry delay 1s, forEach
  ``itemVar`` ``item``, ``maxIterations`` 100, ``maxParallel`` 10.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ..composite.templates import (
    CompiledValue,
    Template,
    TemplateSyntaxError,
    compile_template,
    compile_value,
    references_of,
)
from .durations import DurationError, parse_duration

__all__ = [
    "MAX_STEPS",
    "ElicitAction",
    "ErrorAction",
    "OnError",
    "OutputProperty",
    "OutputSpec",
    "PlanError",
    "Step",
    "StepKind",
    "WorkflowPlan",
    "build_plan",
]

StepKind = Literal["tool", "elicitation", "forEach"]
ErrorAction = Literal["abort", "continue", "retry"]
ElicitAction = Literal["skip_remaining", "abort", "continue"]

MAX_STEPS = 100
MAX_RETRY_COUNT = 10
MAX_FOREACH_ITERATIONS = 1000
MAX_FOREACH_PARALLEL = 50
DEFAULT_WORKFLOW_TIMEOUT = 30 * 60.0
DEFAULT_STEP_TIMEOUT = 5 * 60.0
DEFAULT_RETRY_DELAY = 1.0
DEFAULT_MAX_ITERATIONS = 100
DEFAULT_MAX_PARALLEL = 10

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_IDENTIFIER = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_OUTPUT_TYPES = ("string", "integer", "number", "boolean", "object", "array")
_TOP_FIELDS = {"name", "description", "parameters", "timeout", "steps", "output", "annotations"}
_STEP_FIELDS = {"id", "type", "tool", "arguments", "condition", "dependsOn", "onError", "message",
                "schema", "timeout", "onDecline", "onCancel", "defaultResults", "collection",
                "itemVar", "maxParallel", "maxIterations", "step"}  # fmt: skip
_ANNOTATIONS = {"title": str, "readOnlyHint": bool, "destructiveHint": bool,
                "idempotentHint": bool, "openWorldHint": bool}  # fmt: skip


class PlanError(ValueError):
    """The definition has problems; ``problems`` lists ``(field path, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p or '<root>'}: {m}" for p, m in problems))
        self.problems = problems


@dataclass(frozen=True)
class OnError:
    action: ErrorAction = "abort"
    retry_count: int = 0
    retry_delay: float = DEFAULT_RETRY_DELAY  # seconds before the first retry


@dataclass(frozen=True)
class Step:
    id: str
    kind: StepKind
    depends_on: tuple[str, ...] = ()
    condition: Template | None = None
    on_error: OnError = OnError()
    timeout: float = DEFAULT_STEP_TIMEOUT
    default_results: Any = None  # JSON, the output of a skipped or continued step
    # tool
    tool: str = ""
    arguments: CompiledValue = field(default_factory=lambda: MappingProxyType({}))
    # elicitation
    message: Template | None = None
    schema: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    on_decline: ElicitAction = "abort"
    on_cancel: ElicitAction = "abort"
    # forEach
    collection: Template | None = None
    item_var: str = "item"
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_parallel: int = DEFAULT_MAX_PARALLEL
    inner: Step | None = None


@dataclass(frozen=True)
class OutputProperty:
    name: str
    type: str
    description: str = ""
    value: Template | None = None
    default: Any = None
    has_default: bool = False
    properties: tuple[OutputProperty, ...] = ()


@dataclass(frozen=True)
class OutputSpec:
    properties: tuple[OutputProperty, ...]
    required: tuple[str, ...] = ()

    def json_schema(self) -> dict[str, Any]:
        """The ``outputSchema`` to advertise in ``tools/list``."""
        return _object_schema(self.properties, self.required)


def _object_schema(props: Sequence[OutputProperty], required: Sequence[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    for prop in props:
        entry: dict[str, Any] = {"type": prop.type}
        if prop.description:
            entry["description"] = prop.description
        if prop.properties:
            entry.update(_object_schema(prop.properties, ()))
        schema["properties"][prop.name] = entry
    if required:
        schema["required"] = list(required)
    return schema


@dataclass(frozen=True)
class WorkflowPlan:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON Schema (the tool's inputSchema)
    steps: tuple[Step, ...]
    timeout: float = DEFAULT_WORKFLOW_TIMEOUT
    output: OutputSpec | None = None
    annotations: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    warnings: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def input_schema(self) -> dict[str, Any]:
        return dict(self.parameters) if self.parameters else {"type": "object", "properties": {}}

    def tool(self) -> dict[str, Any]:
        """The MCP ``Tool`` clients are shown for this composite tool."""
        tool: dict[str, Any] = {"name": self.name, "description": self.description,
                                "inputSchema": self.input_schema()}
        if self.output is not None:
            tool["outputSchema"] = self.output.json_schema()
        if self.annotations:
            tool["annotations"] = dict(self.annotations)
        return tool


def build_plan(raw: Any, path: str = "") -> WorkflowPlan:
    """Check ``raw`` and build its plan, or raise :class:`PlanError` listing every problem."""
    builder = _Builder(path)
    plan = builder.build(raw)
    if builder.problems or plan is None:
        raise PlanError(builder.problems)
    return plan


def _join(base: str, name: str) -> str:
    if name.startswith("["):
        return base + name
    return f"{base}.{name}" if base else name


class _Builder:
    def __init__(self, path: str) -> None:
        self.base = path
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[tuple[str, str]] = []

    def at(self, *names: str) -> str:
        out = self.base
        for name in names:
            out = _join(out, name)
        return out

    def problem(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def build(self, raw: Any) -> WorkflowPlan | None:
        if not isinstance(raw, Mapping):
            self.problem(self.base, "must be an object")
            return None
        self.unknown(raw, _TOP_FIELDS, self.base)
        name = self.string(raw, "name", self.base, required=True)
        if name and not _TOOL_NAME.match(name):
            self.problem(self.at("name"), "must be a tool name of letters, digits, '.', '_', '-'")
        description = self.string(raw, "description", self.base, required=True)
        parameters = self.parameters(raw.get("parameters"))
        timeout = self.duration(raw, "timeout", self.base, DEFAULT_WORKFLOW_TIMEOUT)
        steps = self.steps(raw.get("steps"))
        output = self.output(raw.get("output"), self.at("output")) if "output" in raw else None
        annotations = self.annotations(raw.get("annotations"))
        if not self.problems:
            self.check_skippable_references(steps, output)
        return WorkflowPlan(
            name=name, description=description, parameters=parameters, steps=steps,
            timeout=timeout, output=output, annotations=annotations,
            warnings=tuple(self.warnings),
        )  # fmt: skip

    # --- scalar helpers
    def unknown(self, raw: Mapping[str, Any], known: set[str], path: str) -> None:
        for key in raw:
            if key not in known:
                self.warnings.append(
                    (
                        _join(path, str(key)),
                        "is not a field of this resource; "
                        "ignored (the Kubernetes API server drops it too)",
                    )
                )

    def string(self, raw: Mapping[str, Any], key: str, path: str, required: bool = False) -> str:
        value = raw.get(key)
        if value is None or value == "":
            if required:
                self.problem(_join(path, key), "is required")
            return ""
        if not isinstance(value, str):
            self.problem(_join(path, key), "must be a string")
            return ""
        return value

    def integer(self, raw: Mapping[str, Any], key: str, path: str, low: int, high: int) -> int:
        value = raw.get(key, 0)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(_join(path, key), "must be an integer")
            return 0
        if not low <= value <= high:
            self.problem(_join(path, key), f"must be between {low} and {high}")
            return 0
        return value

    def duration(self, raw: Mapping[str, Any], key: str, path: str, default: float) -> float:
        value = raw.get(key)
        if value in (None, ""):
            return default
        try:
            seconds = parse_duration(value).total_seconds()
        except DurationError as exc:
            self.problem(_join(path, key), str(exc))
            return default
        return seconds or default

    def template(self, raw: Mapping[str, Any], key: str, path: str) -> Template | None:
        value = raw.get(key)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            self.problem(_join(path, key), "must be a string")
            return None
        try:
            return compile_template(value)
        except TemplateSyntaxError as exc:
            self.problem(_join(path, key), f"invalid template: {exc}")
            return None

    def parameters(self, raw: Any) -> Mapping[str, Any]:
        path = self.at("parameters")
        if raw is None or raw == {}:
            return MappingProxyType({})
        if not isinstance(raw, Mapping):
            self.problem(path, "must be a JSON Schema object")
            return MappingProxyType({})
        if (
            "type" not in raw
            and raw
            and all(isinstance(v, Mapping) and "type" in v for v in raw.values())
        ):
            raw = _legacy_parameters(raw)
            self.warnings.append(
                (
                    path,
                    "uses the old {name: {type, required}} form; read as "
                    "the equivalent JSON Schema",
                )
            )
        if raw.get("type") != "object":
            self.problem(_join(path, "type"), "must be 'object' (parameters are a JSON Schema)")
        props = raw.get("properties", {})
        if not isinstance(props, Mapping) or not all(
            isinstance(v, Mapping) for v in props.values()
        ):
            self.problem(_join(path, "properties"), "must map names to JSON Schemas")
        required = raw.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            self.problem(_join(path, "required"), "must be a list of property names")
        return MappingProxyType(dict(raw))

    def annotations(self, raw: Any) -> Mapping[str, Any]:
        if raw is None:
            return MappingProxyType({})
        path = self.at("annotations")
        if not isinstance(raw, Mapping):
            self.problem(path, "must be an object")
            return MappingProxyType({})
        self.unknown(raw, set(_ANNOTATIONS), path)
        out = {}
        for key, kind in _ANNOTATIONS.items():
            if key in raw:
                if isinstance(raw[key], kind):
                    out[key] = raw[key]
                else:
                    self.problem(_join(path, key), f"must be a {kind.__name__}")
        return MappingProxyType(out)

    # --- steps
    def steps(self, raw: Any) -> tuple[Step, ...]:
        path = self.at("steps")
        if not isinstance(raw, list) or not raw:
            self.problem(path, "must have at least one step")
            return ()
        if len(raw) > MAX_STEPS:
            self.problem(path, f"too many steps: {len(raw)} (at most {MAX_STEPS})")
            return ()
        ids: dict[str, int] = {}
        for i, item in enumerate(raw):
            step_id = item.get("id") if isinstance(item, Mapping) else None
            if isinstance(step_id, str) and step_id:
                if step_id in ids:
                    self.problem(f"{path}[{i}].id", f"duplicates the id of steps[{ids[step_id]}]")
                else:
                    ids[step_id] = i
        steps = [self.step(item, f"{path}[{i}]", ids) for i, item in enumerate(raw)]
        built = tuple(s for s in steps if s is not None)
        self.check_cycles(built, ids, path)
        return built

    def step(self, raw: Any, path: str, ids: Mapping[str, int], inner: bool = False) -> Step | None:
        if not isinstance(raw, Mapping):
            self.problem(path, "must be an object")
            return None
        self.unknown(raw, _STEP_FIELDS, path)
        step_id = self.string(raw, "id", path, required=not inner)
        kind = raw.get("type") or "tool"
        if kind not in ("tool", "elicitation", "forEach"):
            self.problem(_join(path, "type"), "must be one of: tool, elicitation, forEach")
            return None
        if inner and kind != "tool":
            self.problem(_join(path, "type"), "must be 'tool': only tool inner steps are supported")
            return None
        if "type" not in raw and raw.get("tool") and raw.get("message"):
            self.problem(path, "cannot have both tool and message fields without an explicit type")
        depends = self.depends_on(raw.get("dependsOn"), _join(path, "dependsOn"), step_id, ids)
        common: dict[str, Any] = {
            "id": step_id, "kind": kind, "depends_on": depends,
            "condition": self.template(raw, "condition", path),
            "on_error": self.on_error(raw.get("onError"), _join(path, "onError")),
            "timeout": self.duration(raw, "timeout", path, DEFAULT_STEP_TIMEOUT),
            "default_results": raw.get("defaultResults"),
        }  # fmt: skip
        if kind == "tool":
            return Step(**common, **self.tool_fields(raw, path))
        if kind == "elicitation":
            return Step(**common, **self.elicitation_fields(raw, path))
        return Step(**common, **self.for_each_fields(raw, path, ids))

    def depends_on(self, raw: Any, path: str, step_id: str, ids: Mapping[str, int]
                   ) -> tuple[str, ...]:  # fmt: skip
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.problem(path, "must be a list of step ids")
            return ()
        out = []
        for i, dep in enumerate(raw):
            if not isinstance(dep, str) or dep not in ids:
                self.problem(f"{path}[{i}]", f"references unknown step {dep!r}")
            elif dep == step_id:
                self.problem(f"{path}[{i}]", "a step cannot depend on itself")
            elif dep not in out:
                out.append(dep)
        return tuple(out)

    def on_error(self, raw: Any, path: str) -> OnError:
        if raw is None:
            return OnError()
        if not isinstance(raw, Mapping):
            self.problem(path, "must be an object")
            return OnError()
        self.unknown(raw, {"action", "retryCount", "maxRetries", "retryDelay"}, path)
        action = raw.get("action") or "abort"
        if action not in ("abort", "continue", "retry"):
            self.problem(_join(path, "action"), "must be one of: abort, continue, retry")
            return OnError()
        count = self.integer(raw, "retryCount", path, 0, 1_000_000)
        if raw.get("maxRetries") is not None:  # retryCount's name up to ToolHive v0.6
            legacy = self.integer(raw, "maxRetries", path, 0, 1_000_000)
            if raw.get("retryCount") is not None and legacy != count:
                self.problem(_join(path, "maxRetries"), "differs from retryCount (maxRetries is "
                             "its name up to ToolHive v0.6): set only retryCount")
            count = count or legacy
        if action == "retry" and count < 1:
            self.problem(_join(path, "retryCount"), "must be at least 1 for retry")
        delay = self.duration(raw, "retryDelay", path, DEFAULT_RETRY_DELAY)
        retries = min(count, MAX_RETRY_COUNT) if action == "retry" else 0
        return OnError(action, retries, delay)  # type: ignore[arg-type]

    def tool_fields(self, raw: Mapping[str, Any], path: str) -> dict[str, Any]:
        tool = self.string(raw, "tool", path, required=True)
        if tool and not _TOOL_NAME.match(tool):
            self.problem(_join(path, "tool"), "must be a valid tool name")
        args = raw.get("arguments") or {}
        if not isinstance(args, Mapping):
            self.problem(_join(path, "arguments"), "must be an object")
            args = {}
        try:
            compiled = compile_value(args)
        except TemplateSyntaxError as exc:
            self.problem(
                _join(path, "arguments") + exc.path,
                f"invalid template: line {exc.line}, column {exc.column}: {exc.message}",
            )
            compiled = MappingProxyType({})
        return {"tool": tool, "arguments": compiled}

    def elicitation_fields(self, raw: Mapping[str, Any], path: str) -> dict[str, Any]:
        if not raw.get("message"):
            self.problem(_join(path, "message"), "is required when type is elicitation")
        schema = raw.get("schema") or {"type": "object", "properties": {}}
        if not isinstance(schema, Mapping):
            self.problem(_join(path, "schema"), "must be a JSON Schema object")
            schema = {}
        return {
            "message": self.template(raw, "message", path),
            "schema": MappingProxyType(dict(schema)),
            "on_decline": self.elicit_action(raw.get("onDecline"), _join(path, "onDecline")),
            "on_cancel": self.elicit_action(raw.get("onCancel"), _join(path, "onCancel")),
        }

    def elicit_action(self, raw: Any, path: str) -> ElicitAction:
        if raw is None:
            return "abort"
        action = raw.get("action") if isinstance(raw, Mapping) else None
        if action not in ("skip_remaining", "abort", "continue"):
            self.problem(_join(path, "action"), "must be one of: abort, continue, skip_remaining")
            return "abort"
        return action  # type: ignore[no-any-return]

    def for_each_fields(self, raw: Mapping[str, Any], path: str, ids: Mapping[str, int]
                        ) -> dict[str, Any]:  # fmt: skip
        for key in ("tool", "message"):
            if raw.get(key):
                self.problem(_join(path, key), "a forEach step must not have this field")
        if not raw.get("collection"):
            self.problem(_join(path, "collection"), "is required for forEach steps")
        item_var = raw.get("itemVar") or "item"
        if not isinstance(item_var, str) or not _IDENTIFIER.match(item_var):
            self.problem(_join(path, "itemVar"), "must be an identifier")
        elif item_var == "index":
            self.problem(_join(path, "itemVar"), "cannot be 'index' (reserved)")
        inner = None
        if raw.get("step") is None:
            self.problem(_join(path, "step"), "is required for forEach steps")
        else:
            inner = self.step(raw["step"], _join(path, "step"), ids, inner=True)
        return {
            "collection": self.template(raw, "collection", path),
            "item_var": item_var,
            "max_iterations": self.integer(raw, "maxIterations", path, 0, MAX_FOREACH_ITERATIONS)
            or DEFAULT_MAX_ITERATIONS,
            "max_parallel": self.integer(raw, "maxParallel", path, 0, MAX_FOREACH_PARALLEL)
            or DEFAULT_MAX_PARALLEL,
            "inner": inner,
        }

    def check_cycles(self, steps: Sequence[Step], ids: Mapping[str, int], path: str) -> None:
        graph = {s.id: s.depends_on for s in steps if s.id}
        state: dict[str, int] = {}  # 1 visiting, 2 done

        def visit(node: str, trail: list[str]) -> bool:
            state[node] = 1
            for dep in graph.get(node, ()):
                if state.get(dep) == 1:
                    cycle = [*trail[trail.index(dep) :], dep] if dep in trail else [node, dep]
                    self.problem(
                        f"{path}[{ids[node]}].dependsOn", "dependency cycle: " + " -> ".join(cycle)
                    )
                    return True
                if dep not in state and visit(dep, [*trail, dep]):
                    return True
            state[node] = 2
            return False

        for node in graph:
            if node not in state and visit(node, [node]):
                return

    def check_skippable_references(self, steps: Sequence[Step], output: OutputSpec | None) -> None:
        """ToolHive's rule: a field read from a step that may be skipped needs a default."""
        skippable = {s.id: s for s in steps if s.condition is not None
                     or s.on_error.action == "continue"}  # fmt: skip
        if not skippable:
            return
        readers: list[tuple[str, list[tuple[str, ...]]]] = []
        for step in steps:
            refs = list(step.condition.references) if step.condition else []
            refs += references_of(step.arguments)
            refs += sorted(step.message.references) if step.message else []
            readers.append((f"step {step.id!r}", refs))
        if output is not None:
            readers.append(
                (
                    "output",
                    [r for p in _flatten(output.properties) if p.value for r in p.value.references],
                )
            )
        for reader, read in readers:
            for ref in read:
                if len(ref) < 4 or ref[0] != "steps" or ref[2] != "output":
                    continue
                source = skippable.get(ref[1])
                defaults = source.default_results if source else None
                if source and not (isinstance(defaults, Mapping) and ref[3] in defaults):
                    index = [s.id for s in steps].index(source.id)
                    self.problem(
                        self.at("steps", f"[{index}]", "defaultResults", ref[3]),
                        f"is required: step {source.id!r} may be skipped and field "
                        f"{ref[3]!r} is read by {reader}",
                    )

    # --- output
    def output(self, raw: Any, path: str) -> OutputSpec | None:
        if not isinstance(raw, Mapping):
            self.problem(path, "must be an object")
            return None
        self.unknown(raw, {"properties", "required"}, path)
        props = self.output_properties(raw.get("properties"), _join(path, "properties"))
        required = raw.get("required") or []
        names = {p.name for p in props}
        if not isinstance(required, list):
            self.problem(_join(path, "required"), "must be a list of property names")
            required = []
        for i, name in enumerate(required):
            if name not in names:
                self.problem(f"{_join(path, 'required')}[{i}]", f"names no property: {name!r}")
        return OutputSpec(props, tuple(str(r) for r in required))

    def output_properties(self, raw: Any, path: str) -> tuple[OutputProperty, ...]:
        if not isinstance(raw, Mapping) or not raw:
            self.problem(path, "must define at least one property")
            return ()
        return tuple(
            p
            for name, item in raw.items()
            if (p := self.output_property(str(name), item, _join(path, str(name))))
        )

    def output_property(self, name: str, raw: Any, path: str) -> OutputProperty | None:
        if not isinstance(raw, Mapping):
            self.problem(path, "must be an object")
            return None
        self.unknown(raw, {"type", "description", "value", "properties", "default"}, path)
        kind = raw.get("type")
        if kind not in _OUTPUT_TYPES:
            self.problem(_join(path, "type"), "must be one of: " + ", ".join(_OUTPUT_TYPES))
            return None
        has_value, has_props = bool(raw.get("value")), bool(raw.get("properties"))
        nested: tuple[OutputProperty, ...] = ()
        if kind == "object" and has_value == has_props:
            self.problem(path, "an object property needs either value or properties (not both)")
        elif kind != "object" and not has_value:
            self.problem(_join(path, "value"), "is required for a property of this type")
        elif has_props:
            nested = self.output_properties(raw["properties"], _join(path, "properties"))
        description = raw.get("description") or ""
        return OutputProperty(
            name=name, type=kind, description=str(description),
            value=self.template(raw, "value", path), default=raw.get("default"),
            has_default="default" in raw and raw["default"] is not None, properties=nested,
        )  # fmt: skip


def _legacy_parameters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The pre-JSON-Schema form of early ToolHive docs: ``{name: {type, description, default,
    required: bool}}``."""
    props = {name: {k: v for k, v in spec.items() if k != "required"} for name, spec in raw.items()}
    required = [name for name, spec in raw.items() if spec.get("required") is True]
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def _flatten(props: Sequence[OutputProperty]) -> list[OutputProperty]:
    return [q for p in props for q in (p, *_flatten(p.properties))]
