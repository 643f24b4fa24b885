"""One catalog from many backends: tools, prompts, resources, templates, and their routes.

Sans-IO: :func:`build_catalog` takes each backend's lists (as the backend sent them) and the
plan's aggregation settings, and returns what the client sees plus where each name goes.

Order of work for tools, per backend: the backend's own MCPToolConfig (``backend_tools``), then
the workload's rules (``tools``); in each, ``overrides`` (keyed by the name as it comes in)
rename and redescribe, then ``filter`` keeps the names listed *as renamed* (ToolHive's rule: a
filter names what the client sees). No tool of a backend is listed with ``excludeAllTools``,
with its workload's ``excludeAll``, or, under ``defaultToolVisibility: deny``, when it has no
``tools`` entry (prompts and resources are not affected). A tool not listed is still one a
composite tool's step may call as ``<backend>.<tool>``. Then conflict resolution across
backends:

* ``prefix``: every name becomes ``prefixFormat.format(workload=backend) + name``; distinct
  backends cannot collide.
* ``priority``: on a collision the backend earliest in ``priorityOrder`` keeps the name (backends
  not in the list come after it, in name order); the others' items are dropped.
* ``manual``: names are kept as they are after overrides; a collision the overrides did not
  resolve drops every item involved and is reported in ``conflicts`` (a gateway must not guess
  which backend a call meant). With a single backend there is never a collision, which is how to
  run without prefixes.

Resources keep their URIs (they are addresses, not names): a URI offered by two backends goes to
the first in the same order. Resource templates are matched in that order too. The one exception
is a ``skill://`` URI under ``prefix``, presented with its backend's name first, and skills
themselves: :mod:`.skills`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..resources.composite_plan import WorkflowPlan
from ..resources.plan import AggregationPlan, WorkloadToolsPlan
from .skills import SkillIndex, SkillUris, merge_skills

__all__ = ["BackendListing", "Catalog", "Route", "UriTemplate", "build_catalog",
           "template_pattern", "with_composite_tools"]


@dataclass(frozen=True, slots=True)
class Route:
    backend: str
    name: str
    """The name (or URI) the backend knows the item by."""


@dataclass
class BackendListing:
    backend: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    skills: list[dict[str, Any]] = field(default_factory=list)
    skill_facts: dict[str, Any] | None = None
    """The ``skills/list`` result's ``ttlMs``/``cacheScope`` and the backend's
    ``directoryRead`` (None: it does not declare the Skills extension)."""


@dataclass(frozen=True)
class Catalog:
    tools: tuple[dict[str, Any], ...] = ()
    prompts: tuple[dict[str, Any], ...] = ()
    resources: tuple[dict[str, Any], ...] = ()
    templates: tuple[dict[str, Any], ...] = ()
    tool_routes: Mapping[str, Route] = field(default_factory=dict)
    prompt_routes: Mapping[str, Route] = field(default_factory=dict)
    resource_routes: Mapping[str, str] = field(default_factory=dict)
    template_routes: tuple[tuple[UriTemplate, str], ...] = ()
    template_owners: Mapping[str, str] = field(default_factory=dict)
    """``uriTemplate`` -> backend, for completions that name a template."""
    conflicts: tuple[str, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    """Backends left out because they are unavailable, with why."""
    skills: SkillIndex = field(default_factory=SkillIndex)
    _tools_by_name: Mapping[str, dict[str, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {tool.get("name"): tool for tool in reversed(self.tools)}  # the first wins
        object.__setattr__(self, "_tools_by_name", by_name)

    def tool(self, name: object) -> dict[str, Any] | None:
        """The listed tool of that name (as clients see it), if any: a lookup, as every
        ``tools/call`` asks (its annotations for policies, its schema for 2026-07-28's
        parameter headers)."""
        return self._tools_by_name.get(name) if isinstance(name, str) else None

    def resource_backend(self, uri: str) -> str | None:
        """The backend serving ``uri``: a listed resource, else the first matching template."""
        backend = self.resource_routes.get(uri)
        if backend is not None:
            return backend
        for template, candidate in self.template_routes:
            if template.matches(uri):
                return candidate
        return None


_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")
_SEGMENT_END = frozenset("/?#")


@dataclass(frozen=True)
class UriTemplate:
    """An RFC 6570 URI template as the URIs it can expand to: literal text, and holes that
    match a run of characters (a simple expression: none of ``/?#``; ``+`` and ``#``: any;
    ``?`` and ``&``: an optional query part).

    Matching keeps the set of positions the URI can be at after each part: linear in the URI's
    length for each part, whatever the template. (A regular expression would backtrack: a
    backend's ``{a}{b}{c}{d}{e}{f}{g}{h}x`` took seconds on a 40-character URI, blocking the
    whole gateway.)"""

    parts: tuple[tuple[str, str], ...]
    """``("literal", text)`` or ``("segment" | "any" | "query", "")``."""

    @classmethod
    def parse(cls, template: str) -> UriTemplate:
        parts: list[tuple[str, str]] = []
        position = 0
        for match in _EXPRESSION.finditer(template):
            if match.start() > position:
                parts.append(("literal", template[position:match.start()]))
            operator = match.group(1)
            kind = ("query" if operator in ("?", "&") else
                    "any" if operator in ("+", "#") else "segment")
            if not (parts and parts[-1][0] == kind and kind != "query"):  # two holes are one
                parts.append((kind, ""))
            position = match.end()
        if position < len(template):
            parts.append(("literal", template[position:]))
        return cls(tuple(parts))

    def matches(self, uri: str) -> bool:
        reach = {0}
        end = len(uri)
        for kind, text in self.parts:
            if not reach:
                return False
            if kind == "literal":
                reach = {p + len(text) for p in reach if uri.startswith(text, p)}
            elif kind == "any":
                reach = set(range(min(reach), end + 1))
            else:
                stops = _SEGMENT_END if kind == "segment" else frozenset("#")
                extended: set[int] = set()
                """Positions a run went through: the rest of a run from there is known."""
                for start in sorted(reach):
                    if kind == "query":
                        if start >= end or uri[start] not in "?&":
                            continue
                        start += 1
                    if start in extended:
                        continue
                    extended.add(start)
                    position = start
                    while position < end and uri[position] not in stops:
                        position += 1
                        if position in extended:
                            break
                        extended.add(position)
                reach = reach | extended
        return end in reach


def template_pattern(template: str) -> UriTemplate:
    """The URIs an RFC 6570 URI template can expand to (see :class:`UriTemplate`)."""
    return UriTemplate.parse(template)


def _ordered(listings: Sequence[BackendListing], plan: AggregationPlan) -> list[BackendListing]:
    rank = {name: i for i, name in enumerate(plan.priority_order)}
    return sorted(listings, key=lambda lst: (rank.get(lst.backend, len(rank)), lst.backend))


def _apply(rules: WorkloadToolsPlan | None, item: dict[str, Any]) -> dict[str, Any] | None:
    """``item`` after one stage's overrides, or None when the stage's filter drops it. The
    filter names tools as they are after the overrides, as in ToolHive."""
    if rules is None:
        return item
    shown = item
    override = next((o for o in rules.overrides if o.tool == item["name"]), None)
    if override is not None:
        shown = dict(item)
        if override.name:
            shown["name"] = override.name
        if override.description is not None:
            shown["description"] = override.description
        if override.annotations:
            own = item.get("annotations")
            shown["annotations"] = {**(own if isinstance(own, dict) else {}),
                                    **dict(override.annotations)}
    if rules.filter is not None and shown["name"] not in rules.filter:
        return None
    return shown


def _shaped(listing: BackendListing, items: list[dict[str, Any]], plan: AggregationPlan,
            apply_workload_rules: bool) -> list[tuple[str, dict[str, Any]]]:
    """``(original name, item as the client will see it before prefixing)`` after the
    backend's own tool config, then the workload's filter and overrides (tools only, as in
    ToolHive)."""
    own = next((t for t in plan.backend_tools if t.workload == listing.backend), None)
    rules = next((t for t in plan.tools if t.workload == listing.backend), None)
    if apply_workload_rules and (plan.exclude_all_tools
                                 or (rules is not None and rules.exclude_all)
                                 or (rules is None and not plan.unlisted_tools_visible)):
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        name = item.get("name")
        if not isinstance(name, str):
            continue
        shown: dict[str, Any] | None = dict(item)
        if apply_workload_rules:
            for stage in (own, rules):
                if shown is not None:
                    shown = _apply(stage, shown)
        if shown is not None:
            out.append((name, shown))
    return out


def _merge_named(listings: Sequence[BackendListing], plan: AggregationPlan, kind: str,
                 conflicts: list[str]) -> tuple[list[dict[str, Any]], dict[str, Route]]:
    entries: list[tuple[str, str, dict[str, Any]]] = []  # (backend, original, shown)
    for listing in listings:
        items = listing.tools if kind == "tool" else listing.prompts
        for original, shown in _shaped(listing, items, plan, kind == "tool"):
            if plan.conflict_resolution == "prefix":
                shown["name"] = plan.prefix_format.format(workload=listing.backend) + shown["name"]
            entries.append((listing.backend, original, shown))
    by_name: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for entry in entries:
        by_name.setdefault(entry[2]["name"], []).append(entry)
    visible: list[dict[str, Any]] = []
    routes: dict[str, Route] = {}
    for name, group in by_name.items():
        if len(group) > 1 and plan.conflict_resolution == "manual":
            owners = ", ".join(backend for backend, _, _ in group)
            conflicts.append(f"{kind} {name!r} is offered by {owners}; add overrides to rename "
                             "all but one (manual conflict resolution)")
            continue
        backend, original, shown = group[0]  # prefix: unique; priority: the highest wins
        visible.append(shown)
        routes[name] = Route(backend, original)
    return visible, routes


def build_catalog(listings: Sequence[BackendListing], plan: AggregationPlan,
                  failures: Mapping[str, str] | None = None) -> Catalog:
    ordered = _ordered(listings, plan)
    conflicts: list[str] = []
    tools, tool_routes = _merge_named(ordered, plan, "tool", conflicts)
    prompts, prompt_routes = _merge_named(ordered, plan, "prompt", conflicts)
    resources: list[dict[str, Any]] = []
    resource_routes: dict[str, str] = {}
    templates: list[dict[str, Any]] = []
    template_routes: list[tuple[UriTemplate, str]] = []
    template_owners: dict[str, str] = {}
    uris = SkillUris(frozenset(listing.backend for listing in ordered)
                     if plan.conflict_resolution == "prefix" else frozenset())
    for listing in ordered:
        for resource in listing.resources:
            uri = resource.get("uri")
            if not isinstance(uri, str):
                continue
            shown_uri = uris.presented(listing.backend, uri)
            if shown_uri not in resource_routes:
                resource_routes[shown_uri] = listing.backend
                resources.append(resource if shown_uri == uri else {**resource, "uri": shown_uri})
        for template in listing.templates:
            uri_template = template.get("uriTemplate")
            if isinstance(uri_template, str):
                shown_template = uris.presented(listing.backend, uri_template)
                templates.append(template if shown_template == uri_template
                                 else {**template, "uriTemplate": shown_template})
                template_routes.append((template_pattern(shown_template), listing.backend))
                template_owners.setdefault(shown_template, listing.backend)
    skills, skill_conflicts = merge_skills(
        [(listing.backend, listing.skills, listing.skill_facts) for listing in ordered
         if listing.skill_facts is not None], uris, manual=plan.conflict_resolution == "manual")
    return Catalog(tuple(tools), tuple(prompts), tuple(resources), tuple(templates), tool_routes,
                   prompt_routes, resource_routes, tuple(template_routes), template_owners,
                   (*conflicts, *skill_conflicts), dict(failures or {}), skills)


def with_composite_tools(catalog: Catalog, plans: Sequence[WorkflowPlan]) -> Catalog:
    """The catalog with the gateway's composite tools listed beside the backends' (a backend
    tool of the same name is hidden, and the conflict said)."""
    names = {plan.name for plan in plans}
    hidden = [tool.get("name") for tool in catalog.tools if tool.get("name") in names]
    return replace(
        catalog,
        tools=(*(tool for tool in catalog.tools if tool.get("name") not in names),
               *(plan.tool() for plan in plans)),
        tool_routes={name: route for name, route in catalog.tool_routes.items()
                     if name not in names},
        conflicts=(*catalog.conflicts, *(f"composite tool {name!r} hides the backend tool of "
                                         "that name" for name in hidden)))
