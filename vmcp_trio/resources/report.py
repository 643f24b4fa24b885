"""Collecting problems against the documents they concern.

A :class:`Resource` is one parsed document with its identity (kind, namespace, name) and its
spec model: the whole spec when its shape was valid, else what is sound of it
(:mod:`.salvage`). The :class:`Report` turns ``(resource, field path, rule, message)`` into a
:class:`~vmcp_trio.resources.problems.Problem` with file, document number and line, and
remembers which resources have errors so that nothing downstream builds on them.

What rules say about a salvaged resource is kept only where it cannot come from a value that
was taken out: an error at an unsound path, at one of its parents (a block said to lack what
was taken out of it) or beside it (a field said to need or exclude its neighbour) is dropped,
and so are warnings; each comes back, if it still holds, once the field errors are fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .loading import SourceDocument
from .problems import PathPart, Problem, Severity, format_path

__all__ = ["Report", "Resource", "ResourceKey"]

ResourceKey = tuple[str, str, str]
"""(kind, namespace, name)"""


@dataclass(eq=False)
class Resource:
    doc: SourceDocument
    kind: str | None
    namespace: str | None
    name: str | None
    spec: Any = None
    """The kind's spec model (the whole Secret model for a Secret); with field errors, what is
    sound of it; None when nothing is."""
    broken: bool = False
    """True once an error was reported against this resource's own content."""
    unsound: tuple[tuple[PathPart, ...], ...] = ()
    """The field paths (``("spec", ...)``) taken out of a salvaged spec: the values its field
    errors are in."""

    @property
    def key(self) -> ResourceKey:
        return (self.kind or "", self.namespace or "", self.name or "")

    @property
    def ident(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def usable(self) -> bool:
        return self.spec is not None and not self.broken

    def near_unsound(self, path: Sequence[PathPart]) -> bool:
        """Whether ``path`` is an unsound path, one of their parents, or beside one (in the
        same object) or inside one."""
        here = tuple(path)
        return any(here[:len(gone)] == gone or gone[:len(here)] == here
                   or gone[:-1] == here[:-1] for gone in self.unsound)


class Report:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.error_count = 0

    def add(self, severity: Severity, where: Resource | SourceDocument,
            path: Sequence[PathPart], rule: str, message: str, *, blame: bool = True) -> None:
        """Record a problem at ``path`` of ``where``.

        ``blame=False`` is for errors that arise only in the context of another resource (a
        provider name that one gateway lacks): the resource stays usable for the others.
        """
        if isinstance(where, Resource):
            if where.unsound and (severity is Severity.WARNING or where.near_unsound(path)):
                return  # a rule read a value taken out of a salvaged spec (see the module)
            doc, kind, namespace, name = where.doc, where.kind, where.namespace, where.name
            if severity is Severity.ERROR and blame:
                where.broken = True
        else:
            doc, kind, namespace, name = where, None, None, None
        line = column = None
        position = doc.position(path)
        if position is not None:
            line, column = position
        self.problems.append(
            Problem(severity, rule, message, file=doc.file, document=doc.index, kind=kind,
                    namespace=namespace, name=name, path=format_path(path), line=line,
                    column=column)
        )
        if severity is Severity.ERROR:
            self.error_count += 1

    def error(self, where: Resource | SourceDocument, path: Sequence[PathPart], rule: str,
              message: str, *, blame: bool = True) -> None:
        self.add(Severity.ERROR, where, path, rule, message, blame=blame)

    def warn(self, where: Resource | SourceDocument, path: Sequence[PathPart], rule: str,
             message: str) -> None:
        self.add(Severity.WARNING, where, path, rule, message)

    def extend(self, problems: Sequence[Problem]) -> None:
        self.problems.extend(problems)
        self.error_count += sum(1 for p in problems if p.is_error)
