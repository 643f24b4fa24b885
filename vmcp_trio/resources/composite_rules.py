"""Rules of a VirtualMCPServer's composite tools: inline, or VirtualMCPCompositeToolDefinitions.

One job: build the :class:`~.composite_plan.WorkflowPlan` of every composite tool a gateway offers
(``compositeTools[]`` inline, ``compositeToolRefs[]`` naming definitions in the same namespace;
each definition is checked whether a gateway uses it or not), reporting each problem
:mod:`.composite_plan` finds at its field, on the resource that holds it; what that module drops as
the API server would (fields no CRD has) is a warning. Two composite tools of one gateway may not
share a name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from . import models as m
from .gateway_config import Placed
from .problems import PathPart
from .report import Resource
from .resolver import Resolver

if TYPE_CHECKING:
    from .composite_plan import WorkflowPlan

__all__ = ["check_definitions", "resolve_composites"]

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _parts(path: str) -> tuple[PathPart, ...]:
    """``steps[2].dependsOn[0]`` -> ``("steps", 2, "dependsOn", 0)``."""
    return tuple(int(index) if index else name for name, index in _PART.findall(path))


def _build(resolver: Resolver, owner: Resource, raw: Any,
           at: tuple[PathPart, ...]) -> WorkflowPlan | None:
    # Imported here: the templates' engine (Jinja2) is loaded only for a configuration that
    # has composite tools, so `vmcp validate` of any other does not pay for it.
    from .composite_plan import PlanError, build_plan

    try:
        plan = build_plan(raw)
    except PlanError as exc:
        for path, message in exc.problems:
            resolver.report.error(owner, (*at, *_parts(path)), "composite-tool", message)
        return None
    for path, message in plan.warnings:
        resolver.report.warn(owner, (*at, *_parts(path)), "ignored-field", message)
    return plan


def check_definitions(resolver: Resolver) -> None:
    """Build every VirtualMCPCompositeToolDefinition, used by a gateway or not (kept in
    ``resolver.workflows`` for the gateways that name them)."""
    for definition in resolver.of_kind("VirtualMCPCompositeToolDefinition"):
        spec: m.CompositeToolDefinitionSpec = definition.spec
        plan = _build(resolver, definition, dict(spec.model_extra or {}), ("spec",))
        if plan is not None:
            resolver.workflows[definition.key] = plan


def resolve_composites(resolver: Resolver, gateway: Resource,
                       inline: Placed[tuple[dict[str, Any], ...]],
                       refs: Placed[tuple[m.NameRef, ...]]) -> tuple[WorkflowPlan, ...] | None:
    """The gateway's composite tools, in order (inline first); None when any was reported."""
    errors_before = resolver.report.error_count
    found: list[tuple[WorkflowPlan, Resource, tuple[PathPart, ...]]] = []
    for index, raw in enumerate(inline.value):
        at = (*inline.path, index)
        plan = _build(resolver, gateway, raw, at)
        if plan is not None:
            found.append((plan, gateway, (*at, "name")))
    for index, ref in enumerate(refs.value):
        target = resolver.ref(gateway, (*refs.path, index, "name"),
                              "VirtualMCPCompositeToolDefinition", ref.name)
        if target is None:
            continue
        plan = resolver.workflows.get(target.key)
        if plan is not None:
            found.append((plan, target, ("spec", "name")))
    names: dict[str, Resource] = {}
    for plan, owner, name_path in found:
        if plan.name in names:
            resolver.report.error(owner, name_path, "duplicate",
                                  f"composite tool {plan.name!r} is defined twice for this "
                                  f"gateway (also by {names[plan.name].ident})")
        names.setdefault(plan.name, owner)
    if resolver.report.error_count != errors_before:
        return None
    return tuple(plan for plan, _, _ in found)
