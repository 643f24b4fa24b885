"""What of a spec with field errors is sound: the spec without the values those errors are in.

One job: after a spec's field errors were reported, give the rules between resources a model to
run on, so that one ``vmcp validate`` reports every problem instead of holding the rules back
until every field error is fixed. :func:`salvage` takes out of the raw spec each value a field
error is in and validates again, until the rest validates:

* the value itself (an unknown field, a bad enum, a duration that does not parse, a map key);
* the object a required field is missing from (it cannot stand without it), and so up the tree
  as each removal leaves its parent without a required field of its own;
* a whole list, never one of its items (removing an item would shift the others' indexes, and
  a rule would then point at the wrong one).

When what is left is not a spec (its own required field is the broken one), there is nothing to
salvage: None. The paths taken out are :attr:`~.report.Resource.unsound`; the report drops what
rules say at them and next to them (:meth:`~.report.Report.add`), since a rule reading a field
that was taken out would see its default, not what was written.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .problems import PathPart

__all__ = ["salvage"]

M = TypeVar("M", bound=BaseModel)
Path = tuple[PathPart, ...]


def _target(data: Any, error: Any) -> Path:
    """The path of what to take out for one pydantic error (empty: the whole spec)."""
    loc: list[PathPart] = [part for part in error["loc"] if part != "[key]"]
    node, found = data, 0
    for part in loc:
        present = part in node if isinstance(node, dict) else (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node))
        if not present:
            break
        node = node[part]
        found += 1
    path = tuple(loc[:found])
    if error["type"] == "missing" and found == len(loc):
        path = path[:-1]  # an explicit null where a value is required: its object goes
    first_index = next((i for i, part in enumerate(path) if isinstance(part, int)), None)
    return path if first_index is None else path[:first_index]


def _take_out(data: Any, path: Path) -> bool:
    """Remove the value at ``path`` (a map key or object field); False when it is not there."""
    node = data
    for part in path[:-1]:
        node = node[part]
    if isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
        return True
    return False


def salvage(model: type[M], data: Any,
            errors: Sequence[Any]) -> tuple[M, tuple[Path, ...]] | None:
    """``data`` validated without what ``errors`` (pydantic's, of validating it) are in, and
    the paths taken out; None when no spec is left."""
    data = copy.deepcopy(data)
    taken: list[Path] = []
    while True:
        targets = sorted({_target(data, error) for error in errors}, key=len)
        if not targets or () in targets:
            return None
        removed = False
        for path in targets:
            if any(path[:len(done)] == done for done in taken):
                continue  # inside what is already out
            if _take_out(data, path):
                taken.append(path)
                removed = True
        if not removed:
            return None
        try:
            return model.model_validate(data), tuple(taken)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
