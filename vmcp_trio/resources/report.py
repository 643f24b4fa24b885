"""Collecting problems against the documents they concern.

A :class:`Resource` is one parsed document with its identity (kind, namespace, name) and, when
its shape was valid, its spec model. The :class:`Report` turns ``(resource, field path, rule,
message)`` into a :class:`~vmcp_trio.resources.problems.Problem` with file, document number and
line, and remembers which resources have errors so that nothing downstream builds on them.
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
    """The kind's spec model (the whole Secret model for a Secret); None if its shape is invalid."""
    broken: bool = False
    """True once an error was reported against this resource's own content."""

    @property
    def key(self) -> ResourceKey:
        return (self.kind or "", self.namespace or "", self.name or "")

    @property
    def ident(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def usable(self) -> bool:
        return self.spec is not None and not self.broken


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
