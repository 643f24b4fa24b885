"""A VirtualMCPServer's settings that ToolHive has in two places, merged into one.

One job: ToolHive's releases put the group and the gateway settings in different places:
``spec.groupRef`` (an object; v0.6.0-v0.6.16 and v0.20+) or ``spec.config.groupRef`` (a string;
v0.6.17-v0.19), and ``aggregation``, ``operational``, ``audit``, ``compositeTools``,
``compositeToolRefs`` and ``sessionStorage`` directly under ``spec`` (v0.6.x, and vmcp's own
examples) or under ``spec.config`` (v0.7+); ``rateLimiting`` is only ever under ``spec.config``.
Either place means the same. When both are given they must say the same thing (an error names both
paths otherwise); the value keeps the path it came from, so later rules point at the field as
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import models as m
from .problems import PathPart
from .report import Report, Resource

__all__ = ["GatewaySettings", "Placed", "gateway_settings"]

T = TypeVar("T")
Path = tuple[PathPart, ...]


@dataclass(frozen=True)
class Placed(Generic[T]):
    """A setting and the path it was written at."""

    value: T
    path: Path


@dataclass(frozen=True)
class GatewaySettings:
    group: Placed[str]
    aggregation: Placed[m.Aggregation]
    operational: Placed[m.Operational]
    session_storage: Placed[m.SessionStorage | None]
    audit: Placed[m.Audit | None]
    rate_limiting: Placed[m.RateLimiting | None]
    composite_tools: Placed[tuple[dict[str, Any], ...]]
    composite_tool_refs: Placed[tuple[m.NameRef, ...]]


def _one(report: Report, gateway: Resource, name: str, top: T | None, inner: T | None,
         default: T) -> Placed[T] | None:
    """``spec.<name>`` or ``spec.config.<name>``; None (reported) when both differ."""
    if top is not None and inner is not None and top != inner:
        report.error(gateway, ("spec", "config", name), "conflict",
                     f"differs from spec.{name}: give it in one place (spec.config.{name} is "
                     "ToolHive's current one)")
        return None
    if inner is not None:
        return Placed(inner, ("spec", "config", name))
    return Placed(top if top is not None else default, ("spec", name))


def gateway_settings(report: Report, gateway: Resource) -> GatewaySettings | None:
    """The merged settings; None when a conflict or a missing group was reported."""
    spec: m.VirtualMCPServerSpec = gateway.spec
    config = spec.config or m.GatewayConfig()
    top_group = spec.group_ref.name if spec.group_ref is not None else None
    if top_group is None and config.group_ref is None:
        report.error(gateway, ("spec", "groupRef"), "required",
                     "is required (or spec.config.groupRef): the MCPGroup whose MCPServers "
                     "are the backends")
        return None
    group: Placed[str] | None
    if top_group is not None and config.group_ref is not None and top_group != config.group_ref:
        report.error(gateway, ("spec", "config", "groupRef"), "conflict",
                     f"names MCPGroup {config.group_ref!r}, but spec.groupRef names "
                     f"{top_group!r}: give the group once (spec.groupRef)")
        group = None
    elif top_group is not None:
        group = Placed(top_group, ("spec", "groupRef", "name"))
    else:
        group = Placed(config.group_ref or "", ("spec", "config", "groupRef"))
    aggregation = _one(report, gateway, "aggregation", spec.aggregation, config.aggregation,
                       m.Aggregation())
    operational = _one(report, gateway, "operational", spec.operational, config.operational,
                       m.Operational())
    storage = _one(report, gateway, "sessionStorage", spec.session_storage,
                   config.session_storage, None)
    audit = _one(report, gateway, "audit", spec.audit, config.audit, None)
    tools = _one(report, gateway, "compositeTools", spec.composite_tools,
                 config.composite_tools, ())
    refs = _one(report, gateway, "compositeToolRefs", spec.composite_tool_refs,
                config.composite_tool_refs, ())
    if group is None or aggregation is None or operational is None or storage is None \
            or audit is None or tools is None or refs is None:
        return None
    return GatewaySettings(group, aggregation, operational, storage, audit,
                           Placed(config.rate_limiting, ("spec", "config", "rateLimiting")),
                           tools, refs)
