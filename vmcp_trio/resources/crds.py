"""CustomResourceDefinitions of the resource kinds, generated from their models.

One job: give every kind of :data:`~vmcp_trio.resources.models.KIND_MODELS` (Secret is
Kubernetes' own) an ``apiextensions.k8s.io/v1`` CustomResourceDefinition whose schema is the
kind's spec model, so that a cluster stores these resources with the shape ``vmcp validate``
checks. ``scripts/crds.py`` writes them to ``deploy/kubernetes/crds/crds.yaml``.

The rules it keeps:

* Versions as ToolHive's: ``v1beta1`` served and stored, ``v1alpha1`` served and deprecated
  with ToolHive's warning, both with the same schema (no conversion is ever needed).
* The schema is *structural*, as Kubernetes requires of a v1 CRD: every ``$ref`` is inlined,
  ``anyOf: [X, {type: null}]`` becomes X with ``nullable: true``, ``const`` becomes a one-value
  ``enum``, tuples are arrays, maps are ``additionalProperties: {schema}``, and no ``title``,
  ``$defs``, ``propertyNames``, ``patternProperties`` or ``discriminator`` is left. A union of
  objects becomes one object with every branch's properties; any other union, and any field
  whose input a before-validator reshapes (MCPServer ``env`` takes a map or ToolHive's list),
  keeps what it is given (``x-kubernetes-preserve-unknown-fields``) and is left to the loader.
  A Go duration is a string with the grammar's pattern. A recursive model is spelled out once,
  then free-form. A JSON Schema keyword with no Kubernetes form is an error here, not a silent
  gap.
* ``additionalProperties: false`` is dropped: Kubernetes prunes fields a schema does not name
  (``vmcp validate`` refuses them instead). ``uniqueItems`` becomes a ``set`` list.
* Only scalar defaults are kept (the API server then writes the value the loader would assume);
  ``null``, list and map defaults mean "absent" and are dropped.
* The fields of ToolHive's CRDs that the loader accepts without acting on them
  (:mod:`.toolhive_fields`: Kubernetes workload settings, features not implemented yet) are in
  the schema as free-form, so the API server keeps them as the loader sees them.
* What a schema cannot say stays with the loader: formats checked by validators (URLs, DNS
  names, ``host:port``), map key patterns, and every rule that relates two fields or documents.

The result is plain data (dicts, lists, strings, numbers) with no shared sub-objects, so it
dumps to YAML without anchors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BeforeValidator
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from ..defaults import DEFAULT_API_GROUP
from .fields import DurationText
from .models import KIND_MODELS, Model
from .toolhive_fields import accepted_patterns, split_pattern

__all__ = [
    "DEPRECATION_WARNING",
    "GO_DURATION_PATTERN",
    "SERVED_VERSION",
    "STORAGE_VERSION",
    "InputSchema",
    "crd_documents",
    "prose",
    "schema_child",
    "spec_schema",
]

STORAGE_VERSION = "v1beta1"
SERVED_VERSION = "v1alpha1"
"""Still served, deprecated: the version existing ToolHive manifests carry."""

DEPRECATION_WARNING = "{group}/v1alpha1 is deprecated; use v1beta1"
"""ToolHive's warning text (``kubectl`` prints it for each v1alpha1 request)."""

GO_DURATION_PATTERN = (
    r"^(-0|\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|" "\u00b5s|\u03bcs" r"|ms|s|m|h))+))$"
)
"""What :func:`~vmcp_trio.resources.durations.parse_duration` accepts: Go's grammar, not
negative. The micro signs are the characters themselves: Go's regexp has no ``\\u`` escape."""

SHORT_NAMES: dict[str, list[str]] = {
    "VirtualMCPServer": ["vmcp", "virtualmcp"],
    "MCPGroup": ["mcpg", "mcpgroup"],
    "MCPServer": ["mcpserver"],
    "MCPExternalAuthConfig": ["extauth", "mcpextauth"],
    "MCPOIDCConfig": ["mcpoidc"],
}
"""ToolHive's short names, so ``kubectl get vmcp`` means the same in either cluster."""

DESCRIPTIONS: dict[str, str] = {
    "VirtualMCPServer": "One MCP endpoint (the Virtual MCP Server) over the MCPServers of a "
                        "group, with its incoming and outgoing authentication.",
    "MCPGroup": "A named group of MCPServers that a VirtualMCPServer presents as one.",
    "MCPServer": "A backend MCP server of a group: a URL, a stdio command, or the in-cluster "
                 "Service of a ToolHive workload.",
    "MCPExternalAuthConfig": "How the gateway obtains a credential of its own for a backend "
                             "(upstreamInject or tokenExchange).",
    "MCPOIDCConfig": "A shared OIDC issuer that incomingAuth.oidcConfigRef names.",
}

SPEC_OPTIONAL = frozenset({"MCPGroup"})
"""Kinds whose ``spec`` may be left out (every field of the spec is optional)."""

_DURATION_INPUT = next(arg.func for arg in get_args(DurationText)
                       if isinstance(arg, BeforeValidator))

_ANY: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}

_KEPT = frozenset({
    "type", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum",
    "minItems", "maxItems", "minProperties", "maxProperties", "multipleOf", "required",
})
_DOCUMENTATION = frozenset({
    "title", "examples", "deprecated", "readOnly", "writeOnly", "$comment", "$schema", "$id",
    "$defs", "definitions", "discriminator",
})
_FORMATS = frozenset({
    "bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3",
    "uuid4", "uuid5", "isbn", "isbn10", "isbn13", "creditcard", "ssn", "hexcolor", "rgbcolor",
    "byte", "password", "date", "duration", "datetime", "date-time", "int32", "int64", "float",
    "double",
})
"""The formats Kubernetes knows; it ignores (and newer servers warn about) the others."""
_SCALARS = frozenset({"string", "integer", "number", "boolean"})


class InputSchema(GenerateJsonSchema):
    """The JSON schema of what a file may hold (pydantic's validation mode), with the inputs that
    a before-validator reshapes described as they are written, not as they come out: a Go
    duration as a string of its grammar, any other as :meth:`reshaped_input` says."""

    def function_before_schema(
        self, schema: core_schema.BeforeValidatorFunctionSchema
    ) -> JsonSchemaValue:
        if schema["function"]["function"] is _DURATION_INPUT:
            return {"type": "string", "pattern": GO_DURATION_PATTERN, "maxLength": 64,
                    "description": "A Go duration such as 30s, 10m or 1h30m."}
        return self.reshaped_input(schema)

    def reshaped_input(
        self, schema: core_schema.BeforeValidatorFunctionSchema
    ) -> JsonSchemaValue:
        """The input of a field that another before-validator reshapes: here anything (the
        loader decides)."""
        return dict(_ANY)


def spec_schema(model: type[Model], kind: str | None = None) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one spec model, with the fields the loader accepts
    for ``kind`` without acting on them."""
    raw = model.model_json_schema(by_alias=True, schema_generator=InputSchema)
    schema = _Converter(raw.get("$defs", {})).convert(raw)
    for pattern in accepted_patterns(kind) if kind else ():
        _admit(schema, split_pattern(pattern))
    return schema


def schema_child(node: dict[str, Any], part: str) -> dict[str, Any]:
    """The schema below ``node`` for one part of a :func:`split_pattern` path: ``[]`` an array's
    items, ``*`` a map's values, else the named property."""
    if part == "[]":
        child: dict[str, Any] = node["items"]
    elif part == "*":
        child = node["additionalProperties"]
    else:
        child = node["properties"][part]
    return child


def _admit(node: dict[str, Any], parts: list[str]) -> None:
    """Add the free-form field ``parts`` (a path of :func:`split_pattern`) to a schema node."""
    for part in parts[:-1]:
        node = schema_child(node, part)
    node.setdefault("properties", {})[parts[-1]] = dict(_ANY)


class _Converter:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs
        self.resolving: list[str] = []

    def convert(self, node: Mapping[str, Any]) -> dict[str, Any]:
        """One node: its references, unions and keywords merged into one structural node."""
        rest = dict(node)
        out: dict[str, Any] = {}
        ref = rest.pop("$ref", None)
        if ref is not None:
            out = _merge(out, self._resolve(ref))
        for part in rest.pop("allOf", ()):
            out = _merge(out, self.convert(part))
        nullable = False
        for key in ("anyOf", "oneOf"):
            branches = rest.pop(key, None)
            if branches is None:
                continue
            kept = [branch for branch in branches if branch.get("type") != "null"]
            nullable = nullable or len(kept) < len(branches)
            if kept:
                out = _merge(out, _union([self.convert(branch) for branch in kept]))
        own = self._keywords(rest)
        nullable = own.pop("nullable", False) or nullable
        out = _merge(out, own)
        if nullable:
            out["nullable"] = True
        if "type" not in out and not (out.get("x-kubernetes-preserve-unknown-fields")
                                      or out.get("x-kubernetes-int-or-string")):
            # No type (pydantic's Any): keep whatever is given; only the words survive.
            out = {key: out[key] for key in ("description", "nullable") if key in out} | _ANY
        return _ordered(out)

    def _resolve(self, ref: str) -> dict[str, Any]:
        name = ref.rpartition("/")[2]
        if name in self.resolving:  # a recursive model: a schema cannot be infinite
            return dict(_ANY)
        self.resolving.append(name)
        try:
            return self.convert(self.defs[name])
        finally:
            self.resolving.pop()

    def _keywords(self, node: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DOCUMENTATION or key == "propertyNames":
                continue  # words for people, or map key rules that Kubernetes cannot check
            if key == "description":
                out[key] = prose(value)
            elif key in _KEPT:
                out[key] = value
            elif key == "type":
                out.update(_type(value))
            elif key == "const":
                out["enum"] = [value]
                if "type" not in node:
                    out["type"] = _json_type(value)
            elif key == "properties":
                out[key] = {name: self.convert(prop) for name, prop in value.items()}
            elif key in ("items", "prefixItems"):
                out.update(self._items(value, node))
            elif key == "additionalProperties":
                if value is True:
                    out.update(_ANY)
                elif isinstance(value, dict):
                    out[key] = self.convert(value)
            elif key == "patternProperties":
                out["additionalProperties"] = _union(
                    [self.convert(item) for item in value.values()])
            elif key == "uniqueItems":
                if value:
                    out["x-kubernetes-list-type"] = "set"
            elif key in ("exclusiveMinimum", "exclusiveMaximum"):
                out[key.replace("exclusiveM", "m")] = value
                out[key] = True
            elif key == "default":
                if value is not None and not isinstance(value, (list, dict)):
                    out[key] = value
            elif key == "format":
                if value in _FORMATS:
                    out[key] = value
            elif key.startswith("x-kubernetes-"):
                out[key] = value
            else:
                raise ValueError(f"no Kubernetes form for the JSON Schema keyword {key!r}")
        if out.get("x-kubernetes-list-type") == "set" and out.get("items", {}).get(
                "type") not in _SCALARS:
            del out["x-kubernetes-list-type"]  # a set of objects needs map keys: leave it
        return out

    def _items(self, value: Any, node: Mapping[str, Any]) -> dict[str, Any]:
        """``items`` as one schema; a fixed tuple (``prefixItems``) as an array of its length."""
        if isinstance(value, dict):
            return {"items": self.convert(value)}
        if not isinstance(value, list):
            return {}  # ``items: false`` closes a tuple: its maxItems says so already
        schemas = [self.convert(item) for item in value]
        out: dict[str, Any] = {"items": _union(schemas) if schemas else dict(_ANY)}
        if "items" not in node or node["items"] is False:
            out.setdefault("maxItems", len(schemas))
        return out


def prose(text: str) -> str:
    """A docstring as one paragraph of plain text (``kubectl explain`` rewraps it anyway)."""
    return _ROLE.sub(r"\1", " ".join(text.split())).replace("``", "`")


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_FIRST = ("type", "description", "nullable")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """``type``, ``description`` and ``nullable`` first, for a reader of the YAML."""
    return {key: node[key] for key in _FIRST if key in node} | {
        key: value for key, value in node.items() if key not in _FIRST}


def _type(value: Any) -> dict[str, Any]:
    types = value if isinstance(value, list) else [value]
    kept = [t for t in types if t != "null"]
    out: dict[str, Any] = {"nullable": True} if len(kept) < len(types) else {}
    if len(kept) == 1:
        out["type"] = kept[0]
    elif set(kept) == {"integer", "string"}:
        out["x-kubernetes-int-or-string"] = True
    elif kept:
        out.update(_ANY)
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: its keys win, except that properties and required add up."""
    out = dict(base)
    for key, value in over.items():
        if key == "properties" and key in out:
            out[key] = {**out[key], **value}
        elif key == "required" and key in out:
            out[key] = [*out[key], *(name for name in value if name not in out[key])]
        else:
            out[key] = value
    return out


def _union(branches: list[dict[str, Any]]) -> dict[str, Any]:
    """One structural node that admits every branch (and may admit more: the loader decides)."""
    if all(branch == branches[0] for branch in branches):
        return branches[0]
    types = {branch.get("type") for branch in branches}
    if types == {"object"} and all("additionalProperties" not in b for b in branches):
        by_name: dict[str, list[dict[str, Any]]] = {}
        for branch in branches:
            for name, prop in branch.get("properties", {}).items():
                by_name.setdefault(name, []).append(prop)
        required = set.intersection(*(set(b.get("required", ())) for b in branches))
        out: dict[str, Any] = {"type": "object", "properties": {
            name: _union(props) for name, props in by_name.items()}}
        if required:
            out["required"] = sorted(required)
        return out
    if types == {"integer", "string"}:
        return {"x-kubernetes-int-or-string": True}
    if len(types) == 1 and types <= _SCALARS:
        out = {"type": types.pop()}
        if all("enum" in branch for branch in branches):
            out["enum"] = list(dict.fromkeys(
                value for branch in branches for value in branch["enum"]))
        return out
    return dict(_ANY)


def _crd(kind: str, model: type[Model], group: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec_schema(model, kind),
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    root: dict[str, Any] = {
        "type": "object",
        "description": DESCRIPTIONS.get(kind, f"A {kind} of {group}."),
        "properties": properties,
    }
    if kind not in SPEC_OPTIONAL:
        root["required"] = ["spec"]
    names: dict[str, Any] = {"kind": kind, "listKind": kind + "List", "plural": plural,
                             "singular": kind.lower()}
    if kind in SHORT_NAMES:
        names["shortNames"] = SHORT_NAMES[kind]
    names["categories"] = ["toolhive"]

    def version(name: str, storage: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "served": True, "storage": storage}
        if not storage:
            out["deprecated"] = True
            out["deprecationWarning"] = DEPRECATION_WARNING.format(group=group)
        out["schema"] = {"openAPIV3Schema": root}
        out["subresources"] = {"status": {}}
        return out

    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [version(STORAGE_VERSION, True), version(SERVED_VERSION, False)],
        },
    }


def crd_documents(api_group: str = DEFAULT_API_GROUP) -> list[dict[str, Any]]:
    """One CustomResourceDefinition per kind, in the order of ``KIND_MODELS``."""
    documents = [_crd(kind, model, api_group) for kind, model in KIND_MODELS.items()
                 if kind != "Secret"]
    # Plain data without shared sub-objects (the two versions share one schema above).
    copied: list[dict[str, Any]] = json.loads(json.dumps(documents))
    return copied
