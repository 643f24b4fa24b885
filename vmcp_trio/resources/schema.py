"""From parsed documents to typed resources: envelope, apiVersion/kind, and the spec's shape.

pydantic checks the shape; this module turns each of its errors into a problem with our field
path, rule id and wording. Values are quoted only for enum mismatches (never secret) so that no
message can echo a secret that was typed into the wrong field. A spec with field errors keeps
what is sound of it (:mod:`.salvage`), for the rules between resources.

Which documents are resources, by apiVersion and kind:

* ``{api_group}/v1beta1`` and ``{api_group}/v1alpha1`` hold the same schema, as in ToolHive since
  v0.23. A v1alpha1 resource gets one ``deprecated-api-version`` warning naming ToolHive's
  deprecation; it loads all the same.
* ToolHive's kinds that are not the gateway's business (:data:`IGNORED_KINDS`: the optimizer's
  embedding server, the registry server) are skipped with an ``ignored-kind`` warning saying
  why; what would rely on them in a gateway (``config.optimizer``) is reported where it is
  written.
* ``v1`` Secrets and ConfigMaps are data the resources refer to (:data:`CORE_KINDS`).
* Any other document outside the API group (Namespace, ServiceAccount, RBAC, Deployment,
  Service...) is skipped with a ``skipped-kind`` warning, so a folder of Kubernetes manifests
  loads as it is. An unknown kind inside the group is an error.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from ..defaults import DEFAULT_API_GROUP
from .loading import SourceDocument
from .models import KIND_MODELS, ConfigMapResource, Envelope, Model, SecretResource
from .problems import PathPart
from .report import Report, Resource
from .salvage import salvage
from .toolhive_fields import set_aside

__all__ = ["DEFAULT_API_GROUP", "IGNORED_KINDS", "parse_documents"]

API_VERSIONS = ("v1beta1", "v1alpha1")
"""Served versions, the first current; ToolHive deprecated v1alpha1 in v0.23."""

IGNORED_KINDS = {
    "EmbeddingServer": "it serves embeddings to ToolHive's optimizer, which vmcp does not "
                       "implement yet (config.optimizer is ignored with a warning)",
    "MCPRegistry": "it runs ToolHive's registry server, not part of a gateway",
}
"""ToolHive's kinds that are not the gateway's business, and why."""
CORE_KINDS: dict[str, type[SecretResource] | type[ConfigMapResource]] = {
    "Secret": SecretResource, "ConfigMap": ConfigMapResource}
"""Kubernetes' own kinds (``v1``) a configuration may hold for its resources to refer to."""

_TYPE_NAMES = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "none_required": "must be empty",
}


@cache
def _field_vocabulary() -> tuple[str, ...]:
    """Every field name any model knows, for "did you mean" hints."""
    names: set[str] = set()
    seen: set[type[BaseModel]] = set()

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            names.add(info.alias or name)
            for inner in _models_in(info.annotation):
                visit(inner)

    roots: list[type[BaseModel]] = [*KIND_MODELS.values(), Envelope, SecretResource,
                                    ConfigMapResource]
    for model in roots:
        visit(model)
    return tuple(sorted(names))


def _models_in(annotation: Any) -> Iterable[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in get_args(annotation):
        yield from _models_in(arg)


def _describe(error: Any) -> tuple[str, str]:
    """(rule, message) for one pydantic error dict."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "required", "is required"
    if kind == "extra_forbidden":
        field = error["loc"][-1] if error["loc"] else ""
        hint = ""
        if isinstance(field, str):
            others = [name for name in _field_vocabulary() if name != field]  # known elsewhere
            close = difflib.get_close_matches(field, others, n=1, cutoff=0.75)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
        return "unknown-field", f"is not a known field{hint}"
    if kind == "literal_error":
        got = error.get("input")
        shown = ""
        if isinstance(got, str) and len(got) <= 64 and got.isprintable():
            shown = f" (got {got!r})"
        elif got is None:
            shown = " (got nothing)"
        return "enum", f"must be one of {ctx.get('expected', '')}{shown}"
    if kind in _TYPE_NAMES:
        return "type", _TYPE_NAMES[kind]
    if kind == "string_too_short":
        return "required", "must not be empty"
    if kind == "string_too_long":
        return "too-long", f"must be at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        return "too-short", f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return "too-long", f"must have at most {ctx.get('max_length')} items"
    if kind == "string_pattern_mismatch":
        return "pattern", f"must match {ctx.get('pattern')}"
    if kind in ("greater_than_equal", "greater_than"):
        return "range", f"must be at least {ctx.get('ge', ctx.get('gt'))}"
    if kind in ("less_than_equal", "less_than"):
        return "range", f"must be at most {ctx.get('le', ctx.get('lt'))}"
    if kind == "int_from_float" or kind == "int_parsing":
        return "type", "must be an integer"
    # Our own PydanticCustomError types are rule ids with a finished message.
    return kind.replace("_", "-"), str(error["msg"])


def _report_validation(report: Report, resource: Resource, prefix: Sequence[PathPart],
                       exc: ValidationError) -> None:
    errors = exc.errors(include_url=False)
    locs = [tuple(e["loc"]) for e in errors]
    for error in errors:
        loc = list(error["loc"])
        # pydantic counts only the valid items of a list against min_length: "must have at
        # least 1 item" is wrong when the items are there but have errors of their own.
        if error["type"] == "too_short" and any(
                len(other) > len(loc) and list(other[:len(loc)]) == loc for other in locs):
            continue
        rule, message = _describe(error)
        if "[key]" in loc:
            loc.remove("[key]")
            message = f"key {message}"
        report.error(resource, (*prefix, *loc), rule, message)


def _identity(body: dict[str, Any], namespace: str) -> tuple[str | None, str | None]:
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None, None
    name = meta.get("name") if isinstance(meta.get("name"), str) else None
    ns = meta.get("namespace", namespace)
    return name, ns if isinstance(ns, str) else namespace


M = TypeVar("M", bound=Model)


def _validate(model: type[M], data: Any, report: Report, resource: Resource,
              prefix: Sequence[PathPart]) -> M | None:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        _report_validation(report, resource, prefix, exc)
        return None


def _check_api_version(report: Report, resource: Resource, kind: str, api: Any,
                       api_group: str) -> None:
    """``v1`` for a Secret or ConfigMap; a served version of the API group for the others."""
    if kind in CORE_KINDS:
        if isinstance(api, str) and api != "v1":
            report.error(resource, ("apiVersion",), "api-version",
                         f"must be v1 for kind {kind}")
        return
    if not isinstance(api, str):
        return  # the envelope reports it missing or of the wrong type
    group, _, version = api.rpartition("/")
    if group == api_group and version in API_VERSIONS:
        if version == "v1alpha1":
            report.warn(resource, ("apiVersion",), "deprecated-api-version",
                        f"{api_group}/v1alpha1 is deprecated in ToolHive (since v0.23); use "
                        f"{api_group}/v1beta1, the same schema")
        return
    hint = ""
    if group and group != api_group and version in API_VERSIONS:
        hint = f" (or run with --api-group {group[:100]})"
    report.error(resource, ("apiVersion",), "api-version",
                 f"must be {api_group}/v1beta1 or {api_group}/v1alpha1 for kind {kind}{hint}")


def parse_document(doc: SourceDocument, report: Report, *, api_group: str,
                   namespace: str) -> Resource | None:
    """Check one document's envelope and spec shape. None when it is not a resource at all."""
    body = doc.body
    if not isinstance(body, dict):
        report.error(doc, (), "document",
                     "must be a mapping with apiVersion, kind, metadata and spec")
        return None
    kind = body.get("kind")
    name, ns = _identity(body, namespace)
    resource = Resource(doc, kind if isinstance(kind, str) else None, ns, name)
    if not isinstance(kind, str) or not kind:
        report.error(resource, ("kind",), "required",
                     "is required: one of Secret, " + ", ".join(KIND_MODELS))
        return None
    api = body.get("apiVersion")
    ours = kind in CORE_KINDS or kind in KIND_MODELS or kind in IGNORED_KINDS
    if not ours and isinstance(api, str) and api.rpartition("/")[0] != api_group:
        report.warn(resource, ("kind",), "skipped-kind",
                    f"{kind[:64]} of {api[:100]} is not a resource of {api_group}: skipped")
        return None
    if kind in IGNORED_KINDS:
        report.warn(resource, ("kind",), "ignored-kind",
                    f"{kind} is skipped: {IGNORED_KINDS[kind]}")
        return None
    if not ours:
        known = ", ".join(("Secret", *KIND_MODELS))
        report.error(resource, ("kind",), "kind",
                     f"unknown kind {kind[:64]!r}: expected one of {known}")
        return None
    _check_api_version(report, resource, kind, api, api_group)

    if kind in CORE_KINDS:
        core = _validate(CORE_KINDS[kind], body, report, resource, ())
        if core is not None:
            resource.spec = core
            resource.namespace = core.metadata.namespace or namespace
        return resource

    envelope = _validate(Envelope, body, report, resource, ())
    raw_spec = body.get("spec")
    if raw_spec is None and kind != "MCPGroup":
        report.error(resource, ("spec",), "required", "is required")
        return resource
    raw_spec = set_aside(kind, raw_spec or {}, report, resource)
    model = KIND_MODELS[kind]
    try:
        spec = model.model_validate(raw_spec)
    except ValidationError as exc:
        _report_validation(report, resource, ("spec",), exc)
        salvaged = salvage(model, raw_spec, exc.errors(include_url=False))
        if envelope is None or salvaged is None:
            return resource
        spec = salvaged[0]
        resource.unsound = tuple(("spec", *path) for path in salvaged[1])
    if envelope is not None:
        resource.spec = spec
        resource.namespace = envelope.metadata.namespace or namespace
    return resource


def parse_documents(docs: Iterable[SourceDocument], report: Report, *,
                    api_group: str = DEFAULT_API_GROUP,
                    namespace: str = "default") -> list[Resource]:
    """Parse every document; report duplicates of (kind, namespace, name)."""
    resources: list[Resource] = []
    seen: dict[tuple[str, str, str], Resource] = {}
    for doc in docs:
        resource = parse_document(doc, report, api_group=api_group, namespace=namespace)
        if resource is None:
            continue
        if resource.name is not None:
            first = seen.get(resource.key)
            if first is not None:
                report.error(resource, ("metadata", "name"), "duplicate-resource",
                             f"{resource.ident} is also defined in {first.doc.file}, "
                             f"document {first.doc.index}")
                continue
            seen[resource.key] = resource
        resources.append(resource)
    return resources
