"""Reading resource documents from YAML and JSON files and folders, defensively.

What this module guarantees, so the rest of the package can trust its input:

* Only YAML's safe constructors run (plain maps, lists, strings, numbers, booleans, null).
  Date-looking scalars stay strings, as they do in Kubernetes manifests.
* A file larger than :data:`MAX_FILE_BYTES`, text that is not UTF-8, a YAML syntax error
  (one line: its line and column, what PyYAML found, and a hint where the mistake is a common
  one: an indentation, a tab, a bracket or quote left open), a duplicate mapping key, a
  recursive alias, a document nested deeper than :data:`MAX_DEPTH` or one whose aliases expand
  past :data:`MAX_NODES` (the "billion laughs" bomb) each becomes a
  :class:`~vmcp_trio.resources.problems.Problem`, never an exception. The expansion is
  measured on the composed node graph *before* any Python object is built, so a bomb costs at
  most :data:`MAX_NODES` steps.
* Each document carries a map from field path to (line, column), so later checks can point at
  the exact line of the field they complain about.

Folders are read recursively in sorted order, taking ``*.yaml``, ``*.yml`` and ``*.json`` and
skipping hidden files and folders, so the same folder always loads the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .problems import PathPart, Position, Problem, Severity, format_path

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENTS",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "ConfigPathError",
    "SourceDocument",
    "expand_paths",
    "load_paths",
    "load_text",
]

MAX_FILE_BYTES = 4 * 1024 * 1024
"""Largest file read. Kubernetes itself caps an object at about 1.5 MB."""
MAX_NODES = 100_000
"""Most YAML nodes one document may expand to, aliases included."""
MAX_DEPTH = 64
"""Deepest nesting of maps and lists in one document."""
MAX_DOCUMENTS = 10_000
"""Most documents read in one load, over all files."""

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class ConfigPathError(Exception):
    """A path given on the command line cannot be read at all (a usage error, not a problem)."""


class _SafeLoader(yaml.SafeLoader):
    """The safe loader, minus YAML 1.1 timestamps: ``2025-06-18`` stays the string it is."""


_SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class SourceDocument:
    """One parsed document and where it came from."""

    file: str
    index: int
    """1-based position in the file, counting empty documents too."""
    body: Any
    positions: Mapping[tuple[PathPart, ...], Position] = field(default_factory=dict, repr=False)

    def position(self, path: Sequence[PathPart]) -> Position | None:
        """Line and column of the deepest known prefix of ``path`` (the field itself if known)."""
        key = tuple(path)
        while True:
            found = self.positions.get(key)
            if found is not None or not key:
                return found
            key = key[:-1]


def _problem(file: str, message: str, rule: str, *, document: int | None = None,
             mark: Any = None) -> Problem:
    line = column = None
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
    return Problem(Severity.ERROR, rule, message, file=file, document=document,
                   line=line, column=column)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly are taken whatever their suffix; folders give their config files."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file()
                and p.suffix.lower() in CONFIG_SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            ]
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise ConfigPathError(f"{raw}: not a regular file or folder")
        else:
            raise ConfigPathError(f"{raw}: no such file or folder")
    return files


def fingerprint(paths: Iterable[str | Path]) -> str:
    """The content of the configuration (every file :func:`expand_paths` finds, and which
    they are), summed up: it changes when any of them does (``--watch``). A path that is gone
    or unreadable counts as such, never as an error."""
    digest = hashlib.sha256()
    try:
        files = expand_paths(paths)
    except ConfigPathError as exc:
        return f"unreadable: {exc}"
    for path in files:
        digest.update(str(path).encode() + b"\0")
        try:
            with path.open("rb") as fh:
                digest.update(fh.read(MAX_FILE_BYTES + 1))
        except OSError as exc:
            digest.update(f"unreadable: {exc.strerror}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def load_paths(paths: Iterable[str | Path]) -> tuple[list[SourceDocument], list[Problem]]:
    """Load every document of the given files and folders (see :func:`expand_paths`)."""
    documents: list[SourceDocument] = []
    problems: list[Problem] = []
    for path in expand_paths(paths):
        name = str(path)
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            problems.append(_problem(name, f"cannot be read: {exc.strerror}", "file-read"))
            continue
        docs, probs = load_text(data, name, json_syntax=path.suffix.lower() == ".json")
        room = MAX_DOCUMENTS - len(documents)
        if len(docs) > room:
            problems.append(_problem(name, f"too many documents in all (at most {MAX_DOCUMENTS})",
                                     "too-many-documents"))
            docs = docs[:room]
        documents.extend(docs)
        problems.extend(probs)
    return documents, problems


def load_text(data: bytes | str, file: str, *,
              json_syntax: bool = False) -> tuple[list[SourceDocument], list[Problem]]:
    """Parse one file's content. Returns the documents read before any fatal problem."""
    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            return [], [_problem(file, f"is larger than {MAX_FILE_BYTES} bytes", "file-size")]
        text = _decode(data, file)
        if isinstance(text, Problem):
            return [], [text]
    else:
        text = data
        if len(text) > MAX_FILE_BYTES:
            return [], [_problem(file, f"is larger than {MAX_FILE_BYTES} bytes", "file-size")]
    if json_syntax:
        return _load_json(text, file)
    return _load_yaml(text, file)


def _decode(data: bytes, file: str) -> str | Problem:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _problem(file, "is UTF-16 encoded; save it as UTF-8", "encoding")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return Problem(Severity.ERROR, "encoding",
                       f"is not valid UTF-8 (byte offset {exc.start})", file=file, line=line)


class _DuplicateJsonKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJsonKey(key)
        out[key] = value
    return out


def _load_json(text: str, file: str) -> tuple[list[SourceDocument], list[Problem]]:
    try:
        body = json.loads(text, object_pairs_hook=_json_object)
    except _DuplicateJsonKey as exc:
        return [], [_problem(file, f"duplicate key {exc.key[:60]!r} in a JSON object",
                             "duplicate-key")]
    except json.JSONDecodeError as exc:
        return [], [Problem(Severity.ERROR, "json-syntax", f"is not valid JSON: {exc.msg}",
                            file=file, line=exc.lineno, column=exc.colno)]
    except RecursionError:
        return [], [_problem(file, f"is nested deeper than {MAX_DEPTH} levels", "too-deep")]
    bodies = body if isinstance(body, list) else [body]
    docs: list[SourceDocument] = []
    problems: list[Problem] = []
    for number, item in enumerate(bodies, start=1):
        depth = _json_depth(item)
        if depth > MAX_DEPTH:
            problems.append(_problem(file, f"is nested deeper than {MAX_DEPTH} levels",
                                     "too-deep", document=number))
            continue
        docs.append(SourceDocument(file, number, item))
    return docs, problems


def _json_depth(value: Any) -> int:
    depth = 0
    level = [value]
    while level and depth <= MAX_DEPTH:
        nxt: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                nxt.extend(item.values())
            elif isinstance(item, list):
                nxt.extend(item)
        depth += 1
        level = nxt
    return depth if not level else depth + 1


class _Walk:
    """Measures a composed document before it is built, recording field positions on the way."""

    def __init__(self, file: str, document: int) -> None:
        self.file = file
        self.document = document
        self.nodes = 0
        self.positions: dict[tuple[PathPart, ...], Position] = {}
        self.problems: list[Problem] = []
        self._open: set[int] = set()

    def fail(self, message: str, rule: str, node: Node) -> None:
        self.problems.append(
            _problem(self.file, message, rule, document=self.document, mark=node.start_mark)
        )

    def visit(self, node: Node, path: tuple[PathPart, ...], mark_node: Node) -> bool:
        """Return False to stop the walk (a fatal problem was recorded)."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(f"expands to more than {MAX_NODES} YAML nodes (alias bomb?)",
                      "too-large", node)
            return False
        if len(path) > MAX_DEPTH:
            self.fail(f"is nested deeper than {MAX_DEPTH} levels", "too-deep", node)
            return False
        if path not in self.positions:
            self.positions[path] = (mark_node.start_mark.line + 1,
                                    mark_node.start_mark.column + 1)
        if isinstance(node, ScalarNode):
            return True
        if id(node) in self._open:
            self.fail("contains a recursive alias", "recursive-alias", node)
            return False
        self._open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return all(self.visit(item, (*path, i), item)
                           for i, item in enumerate(node.value))
            if isinstance(node, MappingNode):
                return self._visit_mapping(node, path)
            return True
        finally:
            self._open.discard(id(node))

    def _visit_mapping(self, node: MappingNode, path: tuple[PathPart, ...]) -> bool:
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                for source in merged:
                    if not isinstance(source, MappingNode):
                        continue  # the constructor reports this with its own mark
                    if not self.visit(source, path, source):
                        return False
                continue
            if not isinstance(key_node, ScalarNode):
                self.fail("mapping keys must be plain strings", "key-type", key_node)
                return False
            key = str(key_node.value)
            if key in seen:
                shown = format_path((*path, key))
                self.fail(f"duplicate key {shown}", "duplicate-key", key_node)
                continue
            seen.add(key)
            if not self.visit(value_node, (*path, key), key_node):
                return False
        return True


_INDENTATION = "check the indentation of this line against the one above"
_YAML_HINTS = (
    ("mapping values are not allowed here",
     _INDENTATION + " (or quote a value that holds ': ')", False),
    ("expected <block end>", _INDENTATION, False),
    ("did not find expected key", _INDENTATION, False),
    ("did not find expected '-' indicator", _INDENTATION, False),
    ("could not find expected ':'",
     "a key needs ': ' after it (or this line is indented deeper than the one above)", True),
    ("that cannot start any token", "indent with spaces: YAML does not allow a tab there",
     False),
    ("expected ',' or ']'", "a '[' opened before is not closed, or an item lacks its ','",
     False),
    ("expected ',' or '}'", "a '{' opened before is not closed, or an item lacks its ','",
     False),
    ("while scanning a quoted scalar", "this quote is not closed", True),
)
"""A hint for the mistakes behind PyYAML's most common complaints, by what the complaint (its
problem and context) says; and whether the place to show is where PyYAML's context began (the
key without its ':', the quote left open) rather than where it gave up."""


def _yaml_reason(problem: str | None, context: str | None) -> tuple[str, bool]:
    """PyYAML's complaint in one line, with a hint when it is a common mistake's; and whether
    the place to show is where its context began (see :data:`_YAML_HINTS`)."""
    lines = (problem or "").strip().splitlines()
    reason = lines[0] if lines else "syntax error"
    said = f"{problem or ''} {context or ''}"
    for found, hint, at_start in _YAML_HINTS:
        if found in said:
            return f"{reason}; {hint}", at_start
    return reason, False


def _load_yaml(text: str, file: str) -> tuple[list[SourceDocument], list[Problem]]:
    docs: list[SourceDocument] = []
    problems: list[Problem] = []
    number = 0
    loader = None
    try:
        loader = _SafeLoader(text)
        while loader.check_node():
            number += 1
            node = loader.get_node()
            if node is None:
                continue
            walk = _Walk(file, number)
            walk.visit(node, (), node)
            if walk.problems:
                problems.extend(walk.problems)
                continue
            body = loader.construct_document(node)
            if body is None:
                continue  # an empty document between separators
            docs.append(SourceDocument(file, number, body, walk.positions))
    except yaml.MarkedYAMLError as exc:
        reason, at_start = _yaml_reason(exc.problem, exc.context)
        problems.append(_problem(file, f"is not valid YAML: {reason}", "yaml-syntax",
                                 document=number or None,
                                 mark=exc.context_mark if at_start and exc.context_mark
                                 else exc.problem_mark))
    except yaml.reader.ReaderError as exc:
        position = int(exc.position)
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else 0
        problems.append(Problem(Severity.ERROR, "yaml-syntax",
                                f"is not valid YAML: character #x{code:04x} is not allowed",
                                file=file, document=number or None, line=line, column=column))
    except yaml.YAMLError as exc:
        problems.append(_problem(file, f"is not valid YAML: {_yaml_reason(str(exc), None)[0]}",
                                 "yaml-syntax", document=number or None))
    except RecursionError:
        problems.append(_problem(file, f"is nested deeper than {MAX_DEPTH} levels", "too-deep",
                                 document=number or None))
    finally:
        if loader is not None:
            loader.dispose()
    return docs, problems
