"""Load, check and resolve resource files: the one entry point the rest of vmcp-trio uses.

Order of work: read every document (:mod:`.loading`), check each one's shape (:mod:`.schema`),
check the kinds a gateway builds on and remember what they resolve to (:mod:`.resolver`), then
resolve every VirtualMCPServer (:mod:`.gateway_rules`). Problems accumulate throughout; the
plans are returned only when there is no error at all, so callers never run on a configuration
that has one.

A document whose shape is wrong gets all its shape errors at once, and the rules that relate
it to other documents run all the same on what is sound of it (:mod:`.salvage`), so that one run
reports every problem; references to it are not reported as missing, and nothing builds on it.

The result also sums the documents up (:attr:`ValidationResult.digest`, a short sha256 of their
parsed content: comments, layout and key order do not change it, file names neither), so that an
operator can tell which configuration each replica runs (``vmcp_config_info{hash}``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..defaults import DEFAULT_API_GROUP, DEFAULT_BACKEND_URL_TEMPLATE, DEFAULT_NAMESPACE
from .composite_rules import check_definitions
from .gateway_rules import resolve_gateway
from .loading import SourceDocument, load_paths
from .plan import GatewayPlan
from .problems import Problem, sort_problems
from .report import Report
from .resolver import Resolver
from .schema import parse_documents

__all__ = ["LoadOptions", "ValidationResult", "validate_documents", "validate_paths"]


@dataclass(frozen=True)
class LoadOptions:
    api_group: str = DEFAULT_API_GROUP
    namespace: str = DEFAULT_NAMESPACE
    """Namespace of documents that do not set ``metadata.namespace`` (as kubectl does)."""
    backend_url_template: str = DEFAULT_BACKEND_URL_TEMPLATE
    environ: Mapping[str, str] | None = None
    """Where Secret references outside the configuration resolve (``VMCP_SECRETS_DIR``,
    ``VMCP_SECRET_<NAME>__<KEY>``); None: the process environment."""


@dataclass(frozen=True)
class ValidationResult:
    problems: tuple[Problem, ...]
    plans: tuple[GatewayPlan, ...]
    """Every VirtualMCPServer, resolved, in (namespace, name) order; empty if there is an error."""
    document_count: int
    unchecked: int = 0
    """Resources whose field errors left nothing for the rules between resources to run on (a
    required field of the spec itself, or the envelope, is broken)."""
    digest: str = ""
    """A short sha256 of the documents' parsed content, in order (see the module)."""

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.is_error)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if not p.is_error)

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_documents(docs: Sequence[SourceDocument], options: LoadOptions = LoadOptions(),
                       load_problems: Iterable[Problem] = ()) -> ValidationResult:
    report = Report()
    report.extend(list(load_problems))
    resources = parse_documents(docs, report, api_group=options.api_group,
                                namespace=options.namespace)
    resolver = Resolver(resources, report, backend_url_template=options.backend_url_template,
                        environ=options.environ)
    resolver.check_dependencies()
    check_definitions(resolver)
    plans: list[GatewayPlan] = []
    for gateway in resolver.of_kind("VirtualMCPServer"):
        plan = resolve_gateway(resolver, gateway)
        if plan is not None:
            plans.append(plan)
    problems = tuple(sort_problems(dict.fromkeys(report.problems)))
    ok = not any(p.is_error for p in problems)
    ordered = sorted(plans, key=lambda p: (p.namespace, p.name)) if ok else []
    unchecked = sum(1 for r in resources if r.spec is None)
    return ValidationResult(problems, tuple(ordered), len(docs), unchecked, _digest(docs))


def _digest(docs: Sequence[SourceDocument]) -> str:
    """The first 12 hex digits of the sha256 of the documents' content, as canonical JSON."""
    bodies = [doc.body for doc in docs]
    option = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    try:
        content = orjson.dumps(bodies, default=str, option=option)
    except TypeError:  # an integer past 64 bits, which orjson does not write: as its digits
        content = orjson.dumps(_big_ints_as_text(bodies), default=str, option=option)
    return hashlib.sha256(content).hexdigest()[:12]


def _big_ints_as_text(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and \
            not -(1 << 63) <= value < (1 << 64):
        return str(value)
    if isinstance(value, dict):
        return {_big_ints_as_text(key): _big_ints_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_big_ints_as_text(item) for item in value]
    return value


def validate_paths(paths: Iterable[str | Path],
                   options: LoadOptions = LoadOptions()) -> ValidationResult:
    """Load files and folders and validate them. Raises ``ConfigPathError`` for a missing path."""
    docs, problems = load_paths(paths)
    return validate_documents(docs, options, problems)
