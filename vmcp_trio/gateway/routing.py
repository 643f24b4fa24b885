"""Where a client's request goes: from its method and params to one backend, with no I/O.

:func:`route` is the one place this is derived, from a session's :class:`~.aggregation.Catalog`.
The rules it keeps:

* ``tools/call`` and ``prompts/get`` name an item as the client sees it (``params.name``, a
  string); it goes to the backend that offers it, under the backend's own name. An unknown name
  is -32602 naming it, and when some backends could not be listed, naming those too (it may be
  one of theirs).
* ``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe`` name a URI
  (``params.uri``, a string): a skill's (:meth:`~.skills.SkillIndex.target`, with the URI the
  backend knows), a listed resource, else the first backend whose template matches. No backend:
  the revision's "resource not found" code, with the URI in ``data``.
* ``skills/get`` and ``resources/directory/read`` name a skill's URI, or a directory of one
  (``params.uri``): its backend, with the URI the backend knows; any other is -32602.
* ``completion/complete`` names a prompt (``ref/prompt``, by the client's name, renamed for the
  backend) or a resource template or URI (``ref/resource``).
* Any other method has no route here (-32601).

The params a backend gets are the client's with the names rewritten, and nothing else changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, ErrorObject
from .aggregation import Catalog

__all__ = ["NAMED", "RESOURCE_METHODS", "SKILL_ROUTED", "NotRouted", "Routed", "route"]

NAMED = {"tools/call": ("tool", "tool_routes"), "prompts/get": ("prompt", "prompt_routes")}
RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
SKILL_ROUTED = frozenset({"skills/get", "resources/directory/read"})


@dataclass(frozen=True, slots=True)
class Routed:
    backend: str
    params: dict[str, Any]
    """The params as the backend takes them (its own names)."""


class NotRouted(Exception):
    """The request goes to no backend; ``error`` says why, for the client."""

    def __init__(self, error: ErrorObject) -> None:
        super().__init__(error.message)
        self.error = error


def _invalid(message: str) -> NotRouted:
    return NotRouted(ErrorObject(INVALID_PARAMS, message))


def route(catalog: Catalog, method: str, params: dict[str, Any], *,
          not_found_code: int) -> Routed:
    """The backend ``method`` with ``params`` goes to (raises :class:`NotRouted`);
    ``not_found_code`` is the session's revision's code for an unknown resource."""
    if method in NAMED:
        kind, table = NAMED[method]
        name = params.get("name")
        if not isinstance(name, str):
            raise _invalid("params.name must be a string")
        found = getattr(catalog, table).get(name)
        if found is None:
            if catalog.failures:  # it may be one of theirs: say who could not be asked
                unavailable = "; ".join(f"backend {backend!r} {detail}" for backend, detail
                                        in sorted(catalog.failures.items()))
                raise NotRouted(ErrorObject(
                    INVALID_PARAMS, f"Unknown {kind}: {name[:200]} (unavailable now: "
                                    f"{unavailable[:500]})",
                    {"unavailable": sorted(catalog.failures)}))
            raise _invalid(f"Unknown {kind}: {name[:200]}")
        return Routed(found.backend, {**params, "name": found.name})
    if method in RESOURCE_METHODS or method in SKILL_ROUTED:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise _invalid("params.uri must be a string")
        target = catalog.skills.target(uri)
        if target is not None:
            return Routed(target[0], {**params, "uri": target[1]})
        if method in SKILL_ROUTED:
            kind = "skill" if method == "skills/get" else "skill directory"
            raise _invalid(f"Unknown {kind}: {uri[:500]}")
        backend = catalog.resource_backend(uri)
        if backend is None:
            raise NotRouted(ErrorObject(not_found_code, f"Resource not found: {uri[:500]}",
                                        {"uri": uri}))
        return Routed(backend, params)
    if method == "completion/complete":
        return _completion(catalog, params)
    raise NotRouted(ErrorObject(METHOD_NOT_FOUND, f"Method not found: {method[:100]}"))


def _completion(catalog: Catalog, params: dict[str, Any]) -> Routed:
    ref = params.get("ref")
    if not isinstance(ref, dict):
        raise _invalid("params.ref must be an object")
    if ref.get("type") == "ref/prompt":
        found = catalog.prompt_routes.get(str(ref.get("name")))
        if found is None:
            raise _invalid("Unknown prompt in params.ref.name")
        return Routed(found.backend, {**params, "ref": {**ref, "name": found.name}})
    if ref.get("type") == "ref/resource":
        uri = str(ref.get("uri"))
        decoded = catalog.skills.uris.decoded(uri)
        if decoded is not None:  # a presented skill:// template
            return Routed(decoded[0], {**params, "ref": {**ref, "uri": decoded[1]}})
        backend = catalog.template_owners.get(uri) or catalog.resource_backend(uri) or ""
        if not backend:
            raise _invalid("Unknown resource in params.ref.uri")
        return Routed(backend, params)
    raise _invalid("params.ref.type must be ref/prompt or ref/resource")
