"""The methods a client session answers, by kind: the tables :mod:`.session` dispatches on.

One job: name, once, which methods are lists (and where their items are in the catalog and
the result), which go to one backend (:mod:`.routing`), which list changes a backend may
announce, and which methods get a metrics label of their own (the rest are ``other``, so that
a client inventing methods cannot grow the metrics); and the tool annotations a ``tools/call``
is judged with (:func:`hints_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..auth.policy.mcp_checks import NO_ANNOTATIONS
from ..protocol.jsonrpc import Request
from ..protocol.tasks_extension import TASK_METHODS
from .aggregation import Catalog
from .routing import NAMED, SKILL_ROUTED
from .skills import SKILL_METHODS

__all__ = ["KNOWN_METHODS", "LISTS", "LIST_CHANGED", "ROUTED", "hints_of"]

LIST_CHANGED = ("notifications/prompts/list_changed", "notifications/resources/list_changed",
                "notifications/tools/list_changed")
LISTS = {
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("templates", "resourceTemplates"),
}
"""A list method: (the catalog's field, the result's key)."""
KNOWN_METHODS = frozenset({
    "ping", "initialize", "tools/list", "tools/call", "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "completion/complete", "logging/setLevel", *TASK_METHODS,
    *SKILL_METHODS})
"""Methods that get their own metrics label (others are "other": bounded cardinality)."""
ROUTED = frozenset({*NAMED, "resources/read", "resources/subscribe", "resources/unsubscribe",
                    "completion/complete", *SKILL_ROUTED})
"""Methods that go to the one backend :func:`~.routing.route` names."""


def hints_of(catalog: Catalog | None, request: Request) -> Mapping[str, Any]:
    """The annotations of the tool ``request`` calls, as ``catalog`` lists it (none when it
    lists no such tool)."""
    tool = catalog.tool((request.params or {}).get("name")) if catalog is not None else None
    hints = tool.get("annotations") if tool is not None else None
    return hints if isinstance(hints, dict) else NO_ANNOTATIONS
