"""A JSON Schema of the configuration files, for editors, generated from the resource models.

One job: describe every document ``vmcp validate`` reads, each kind of
:data:`~vmcp_trio.resources.models.KIND_MODELS` and Kubernetes' ``v1`` Secret and ConfigMap, as
one JSON Schema (draft-07, what the YAML language server speaks) with a ``oneOf`` branch per
kind, so that an editor checks field names, types and enums while a file is written.
``scripts/crds.py`` writes it to ``deploy/schema/vmcp-config.schema.json``, beside the CRDs.

The rules it keeps:

* The source of the CRDs (:mod:`.crds`): the models' input schema, with the shapes that a
  before-validator accepts written out (``groupRef`` as ``{name}`` or the name alone, ``env`` as
  a map or as Kubernetes' list). Unlike a CRD it says what a structural schema cannot: an
  unknown field is refused, as the loader refuses it, and unions stay unions.
* The fields of ToolHive's CRDs that the loader sets aside (:mod:`.toolhive_fields`) are
  accepted, each described with what vmcp does with it.
* A document the loader skips with a warning (outside the API group, or one of the kinds it
  ignores) is accepted.
* What a schema cannot say stays with ``vmcp validate``: formats its validators check (URLs,
  DNS names, ``host:port``), references between documents, rules between fields.
* A JSON Schema keyword with no draft-07 form is an error here, not a silent gap.
"""

from __future__ import annotations

import copy
import re
from typing import Any, get_args

from pydantic import BeforeValidator, TypeAdapter
from pydantic.json_schema import JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from ..defaults import DEFAULT_API_GROUP
from .crds import DESCRIPTIONS, SPEC_OPTIONAL, InputSchema, prose, schema_child
from .models import KIND_MODELS, EnvName, GroupRef, MCPServerSpec, Metadata, Model
from .schema import API_VERSIONS, CORE_KINDS, IGNORED_KINDS
from .toolhive_fields import (
    IGNORED,
    KUBERNETES_ONLY,
    split_pattern,
)

__all__ = ["DIALECT", "editor_schema"]

DIALECT = "http://json-schema.org/draft-07/schema#"

Schema = dict[str, Any]

_GROUP_REF_INPUT = next(arg.func for arg in get_args(GroupRef) if isinstance(arg, BeforeValidator))
_ENV_INPUT = next(item.func for item in MCPServerSpec.model_fields["env"].metadata
                  if isinstance(item, BeforeValidator))

_SCHEMAS = ("additionalProperties", "additionalItems", "contains", "else", "if", "items", "not",
            "propertyNames", "then")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_MAPS = ("definitions", "patternProperties", "properties")
_VALUES = ("$ref", "const", "default", "description", "enum", "exclusiveMaximum",
           "exclusiveMinimum", "format", "maxItems", "maxLength", "maxProperties", "maximum",
           "minItems", "minLength", "minProperties", "minimum", "multipleOf", "pattern",
           "required", "type", "uniqueItems")
_DROPPED = ("title", "discriminator")
"""Pydantic's generated titles (``Compositetools``) and OpenAPI's discriminator: words for no
one; each branch gets a title of its own."""


class _EditorInput(InputSchema):
    def reshaped_input(
        self, schema: core_schema.BeforeValidatorFunctionSchema
    ) -> JsonSchemaValue:
        function = schema["function"]["function"]
        given = self.generate_inner(schema["schema"])
        if function is _GROUP_REF_INPUT:
            return {"anyOf": [given, {"type": "string",
                                      "description": "The MCPGroup's name alone."}]}
        if function is _ENV_INPUT:
            item = {"type": "object", "additionalProperties": False, "required": ["name"],
                    "properties": {"name": TypeAdapter(EnvName).json_schema(),
                                   "value": {"type": "string"}}}
            listed = {"type": "array", "items": item,
                      "description": "Kubernetes' form: a list of {name, value}."}
            return {"anyOf": [given, listed, {"type": "null"}]}
        raise ValueError(f"no editor schema for the input of {function.__qualname__}")


def editor_schema(api_group: str = DEFAULT_API_GROUP) -> Schema:
    """The whole schema: a ``oneOf`` of one branch per kind, and the definitions they share."""
    models: list[type[Model]] = [*KIND_MODELS.values(), Metadata, *CORE_KINDS.values()]
    refs, generated = models_json_schema([(model, "validation") for model in models],
                                         by_alias=True, ref_template="#/definitions/{model}",
                                         schema_generator=_EditorInput)
    raw: dict[str, Schema] = generated["$defs"]
    branches = [_kind_branch(kind, dict(refs[(model, "validation")]), raw, api_group)
                for kind, model in KIND_MODELS.items()]
    definitions = {name: _draft7(node) for name, node in raw.items()}
    for kind, core in CORE_KINDS.items():
        branches.append(_core_branch(kind, refs[(core, "validation")], definitions))
    branches += _skipped_branches(api_group)
    schema: Schema = {
        "$schema": DIALECT,
        "title": "vmcp-trio configuration",
        "description": "A document of a configuration that vmcp reads: one of the kinds of "
                       f"{api_group}, a v1 Secret or ConfigMap, or a document it skips.",
        "type": "object",
        "required": ["kind"],
        "oneOf": branches,
        "definitions": definitions,
    }
    return _pruned(schema)


def _kind_branch(kind: str, spec: Schema, definitions: dict[str, Schema],
                 api_group: str) -> Schema:
    for pattern, field in _set_aside(kind).items():
        _admit(spec, split_pattern(pattern), field, definitions)
    spec = _draft7(spec)
    optional = kind in SPEC_OPTIONAL
    return {
        "title": kind,
        "description": DESCRIPTIONS.get(kind, f"A {kind} of {api_group}."),
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", *(() if optional else ("spec",))],
        "properties": {
            "apiVersion": {"enum": [f"{api_group}/{version}" for version in API_VERSIONS],
                           "description": f"{api_group}/v1beta1, or v1alpha1: the same schema, "
                                          "deprecated"},
            "kind": {"const": kind},
            "metadata": {"$ref": "#/definitions/Metadata"},
            "spec": {"anyOf": [spec, {"type": "null"}]} if optional else spec,
            "status": {"description": "Written by controllers; vmcp ignores it."},
        },
    }


def _core_branch(kind: str, ref: Schema, definitions: dict[str, Schema]) -> Schema:
    """Kubernetes' own kind: its model's schema, with ``apiVersion: v1`` and its kind."""
    branch = copy.deepcopy(definitions[ref["$ref"].rpartition("/")[2]])
    branch["title"] = kind
    branch["properties"]["apiVersion"] = {"const": "v1"}
    branch["properties"]["kind"] = {"const": kind}
    return branch


def _skipped_branches(api_group: str) -> list[Schema]:
    ours = [*CORE_KINDS, *KIND_MODELS, *IGNORED_KINDS]
    return [
        {"title": "A kind vmcp skips",
         "description": "A kind of ToolHive that is not the gateway's business: vmcp skips it "
                        "with a warning.",
         "required": ["kind"], "properties": {"kind": {"enum": list(IGNORED_KINDS)}}},
        {"title": "A document of another API",
         "description": f"A document outside {api_group} (a Namespace, a Deployment...): "
                        "vmcp skips it with a warning.",
         "required": ["apiVersion", "kind"],
         "properties": {
             "kind": {"type": "string", "minLength": 1, "not": {"enum": ours}},
             "apiVersion": {"type": "string",
                            "not": {"pattern": f"^{re.escape(api_group)}/[^/]*$"}}}},
    ]


def _set_aside(kind: str) -> dict[str, Schema]:
    """Each field pattern :mod:`.toolhive_fields` sets aside for ``kind`` (the first table that
    names a field takes it, as there), with what vmcp does with it."""
    fields: dict[str, Schema] = {}
    for name in KUBERNETES_ONLY.get(kind, ()):
        fields.setdefault(name, {"description": "Kubernetes only: it shapes what ToolHive's "
                                                "operator runs; vmcp ignores it."})
    for pattern, what in IGNORED.get(kind, ()):
        fields.setdefault(pattern, {"description": f"Ignored by vmcp: {what}."})
    return fields


def _admit(node: Schema, parts: list[str], field: Schema,
           definitions: dict[str, Schema]) -> None:
    """Add the field at the path ``parts`` (of :func:`split_pattern`) below ``node``."""
    for part in parts[:-1]:
        node = schema_child(_fields(node, definitions), part)
    _fields(node, definitions).setdefault("properties", {})[parts[-1]] = copy.deepcopy(field)


def _fields(node: Schema, definitions: dict[str, Schema]) -> Schema:
    """The node that holds ``node``'s fields: itself with its ``$ref`` inlined in place (a copy,
    so that the definition's other users keep it as it is), or its union's one branch that is
    not null."""
    while True:
        if "$ref" in node:
            name = node.pop("$ref").rpartition("/")[2]
            for key, value in copy.deepcopy(definitions[name]).items():
                node.setdefault(key, value)
        elif "anyOf" in node and "properties" not in node:
            (node,) = [branch for branch in node["anyOf"] if branch.get("type") != "null"]
        else:
            return node


def _draft7(node: Schema) -> Schema:
    """A copy of a pydantic schema node in draft-07's terms: no generated titles, descriptions
    as plain prose, no null defaults, a ``$ref`` with siblings wrapped in ``allOf`` (draft-07
    ignores a ``$ref``'s siblings), a map of patterned keys closed to other keys."""
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED or (key == "default" and value is None):
            continue
        if key in _SCHEMAS:
            out[key] = _draft7(value) if isinstance(value, dict) else value
        elif key in _SCHEMA_LISTS:
            out[key] = [_draft7(item) for item in value]
        elif key in _SCHEMA_MAPS:
            out[key] = {name: _draft7(item) for name, item in value.items()}
        elif key == "description":
            out[key] = prose(value)
        elif key in _VALUES:
            out[key] = value
        else:
            raise ValueError(f"no draft-07 form for the JSON Schema keyword {key!r}")
    if "patternProperties" in out:
        out.setdefault("additionalProperties", False)
    if "$ref" in out and len(out) > 1:
        out["allOf"] = [{"$ref": out.pop("$ref")}, *out.get("allOf", ())]
    return out


def _pruned(schema: Schema) -> Schema:
    """``schema`` with only the definitions something refers to."""
    definitions = schema["definitions"]
    used: set[str] = set()
    pending = [{key: value for key, value in schema.items() if key != "definitions"}]
    while pending:
        for name in _refs(pending.pop()) - used:
            used.add(name)
            pending.append(definitions[name])
    schema["definitions"] = {name: node for name, node in definitions.items() if name in used}
    return schema


def _refs(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node))
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"].rpartition("/")[2]} if isinstance(node.get("$ref"), str) else set()
    return found.union(*(_refs(value) for key, value in node.items() if key != "$ref"))
