"""Validation problems: what was wrong, where, and which rule it broke.

Every check in :mod:`vmcp_trio.resources` reports through :class:`Problem` instead of raising,
so one run reports everything at once. A problem names the file, the document number within
it (1-based, counting every ``---`` document), the resource (kind and namespace/name), the field
path in dot notation (``spec.incomingAuth.oidcConfig.inline.issuer``, list items as ``[0]``,
map keys that are not identifiers as ``["my key"]``), the line and column when known, and a
short rule id that tests and scripts can match on.

Messages never contain secret values: checks describe the value's shape, not its content.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Position", "Problem", "Severity", "format_path", "sort_problems"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")

PathPart = str | int
Position = tuple[int, int]
"""A (line, column) pair, both 1-based."""


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"


def format_path(parts: Sequence[PathPart]) -> str:
    """``("spec", "backends", "my.server", "type")`` -> ``spec.backends["my.server"].type``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += '["' + part.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return out


@dataclass(frozen=True)
class Problem:
    """One finding. ``path`` is already formatted; ``rule`` is a stable short id."""

    severity: Severity
    rule: str
    message: str
    file: str | None = None
    document: int | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    path: str = ""
    line: int | None = None
    column: int | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def as_dict(self) -> dict[str, Any]:
        """Every field, the severity as its text (``vmcp validate -o json``, JSON logs)."""
        return {"severity": self.severity.value, "rule": self.rule, "message": self.message,
                "file": self.file, "document": self.document, "kind": self.kind,
                "namespace": self.namespace, "name": self.name, "path": self.path,
                "line": self.line, "column": self.column}

    def where(self) -> str:
        """``file:line:col: document N (Kind ns/name)`` with whatever parts are known."""
        parts: list[str] = []
        if self.file is not None:
            loc = self.file
            if self.line is not None:
                loc += f":{self.line}"
                if self.column is not None:
                    loc += f":{self.column}"
            parts.append(loc)
        resource = ""
        if self.document is not None:
            resource = f"document {self.document}"
        if self.kind is not None:
            ident = self.kind
            if self.name is not None:
                ident += f" {self.namespace}/{self.name}" if self.namespace else f" {self.name}"
            resource = f"{resource} ({ident})" if resource else ident
        if resource:
            parts.append(resource)
        return ": ".join(parts)

    def __str__(self) -> str:
        head = self.where()
        body = f"{self.path}: {self.message}" if self.path else self.message
        text = f"{head}: {body}" if head else body
        return f"{self.severity.value}: {text} [{self.rule}]"


def sort_problems(problems: Iterable[Problem]) -> list[Problem]:
    """Errors first, then by file, document and line, so output reads top to bottom."""
    return sorted(
        problems,
        key=lambda p: (
            p.severity is not Severity.ERROR,
            p.file or "",
            p.document or 0,
            p.line or 0,
            p.column or 0,
            p.path,
            p.rule,
        ),
    )
