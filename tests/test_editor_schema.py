"""deploy/schema/vmcp-config.schema.json, the JSON Schema an editor checks configuration files with:

* it is what scripts/crds.py writes from the models (drift fails), a draft-07 schema (what the
  YAML language server speaks) with one ``oneOf`` branch per kind;
* it accepts every document of examples/ and of deploy/kubernetes/config/, and of every real
  ToolHive manifest that vmcp accepts; it refuses every manifest that vmcp refuses for a field's
  shape (an unknown field, a wrong type or enum, a feature not implemented yet);
* on single changes to a valid configuration it agrees with ``vmcp validate``: an unknown field
  anywhere is refused by both, each shape ToolHive's manifests use is accepted by both.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import yaml

from vmcp_trio.resources.models import KIND_MODELS

from .deploy_helpers import DEPLOY, crds_script, documents
from .helpers import EXAMPLES, ROOT, example_docs, validate
from .test_manifests import EXPECTED, FILES, name_of

SCHEMA_FILE = ROOT / "deploy" / "schema" / "vmcp-config.schema.json"
Doc = dict[str, Any]


@functools.cache
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def refusals(doc: Any) -> list[str]:
    return [f"{error.json_path}: {error.message[:200]}"
            for error in validator().iter_errors(doc)]


def test_the_schema_is_what_the_models_generate() -> None:
    if crds_script().render_schema() != SCHEMA_FILE.read_text(encoding="utf-8"):
        pytest.fail("deploy/schema/vmcp-config.schema.json differs from the models: run "
                    ".venv/bin/python scripts/crds.py and commit the result", pytrace=False)


def test_a_draft7_schema_with_a_branch_per_kind() -> None:
    schema = validator().schema
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    titles = [branch["title"] for branch in schema["oneOf"]]
    assert titles == [*KIND_MODELS, "Secret", "ConfigMap", "A kind vmcp skips",
                      "A document of another API"]
    for kind in ("VirtualMCPServer", "MCPGroup", "MCPServer", "MCPExternalAuthConfig",
                 "MCPOIDCConfig", "Secret"):
        assert kind in titles


def test_it_accepts_the_examples_and_the_deployed_configuration() -> None:
    paths = [*sorted(EXAMPLES.glob("*.yaml")), *sorted((DEPLOY / "config").glob("*.yaml"))]
    found = {f"{path.name} #{index}": refusals(doc)
             for path in paths for index, doc in enumerate(documents(path), start=1)}
    assert len(found) >= 30
    assert {name: problems for name, problems in found.items() if problems} == {}


def manifest_documents(name: str) -> list[Any]:
    text = next(path for path in FILES if name_of(path) == name).read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def test_it_accepts_every_toolhive_manifest_vmcp_accepts() -> None:
    accepted = [name_of(path) for path in FILES if name_of(path) not in EXPECTED]
    assert len(accepted) >= 150
    refused = {f"{name} #{index}": problems for name in accepted
               for index, doc in enumerate(manifest_documents(name), start=1)
               if (problems := refusals(doc))}
    assert refused == {}


SHAPE_RULES = ("unknown-field", "enum", "type", "not-implemented")


def test_it_refuses_every_manifest_vmcp_refuses_for_a_shape() -> None:
    shaped = [name for name, expected in EXPECTED.items()
              if any(re.search(rf"\[{rule}\]$", error) for error in expected.errors
                     for rule in SHAPE_RULES)]
    assert len(shaped) >= 5
    assert [name for name in shaped
            if all(validator().is_valid(doc) for doc in manifest_documents(name))] == []


def kind(docs: list[Doc], name: str) -> Doc:
    return next(doc for doc in docs if doc["kind"] == name)


def at(doc: Doc, path: str) -> Doc:
    node = doc
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


Change = Callable[[list[Doc]], None]

REFUSED: dict[str, Change] = {
    "a typo in spec": lambda docs: kind(docs, "VirtualMCPServer")["spec"].update(
        incomingAuht={"type": "anonymous"}),
    "a typo at the top": lambda docs: kind(docs, "MCPGroup").update(specs={}),
    "a typo in metadata": lambda docs: kind(docs, "MCPServer")["metadata"].update(lables={}),
    "a typo deep down": lambda docs: at(kind(docs, "VirtualMCPServer"),
                                        "spec.incomingAuth").update(oidcConfig={"typ": "x"}),
    "a typo in a Secret": lambda docs: kind(docs, "Secret").update(stringdata={}),
    "a wrong enum": lambda docs: at(kind(docs, "VirtualMCPServer"),
                                    "spec.incomingAuth").update(type="anonymus"),
    "a wrong type": lambda docs: kind(docs, "MCPServer")["spec"].update(args="--debug"),
    "a bad duration": lambda docs: kind(docs, "VirtualMCPServer")["spec"].update(
        operational={"timeouts": {"default": "1d"}}),
    "an unknown kind in the group": lambda docs: kind(docs, "MCPGroup").update(
        kind="MCPGrup"),
    "a Secret of another version": lambda docs: kind(docs, "Secret").update(apiVersion="v2"),
}

ACCEPTED: dict[str, Change] = {
    "nothing changed": lambda docs: None,
    "groupRef as the name alone": lambda docs: kind(docs, "MCPServer")["spec"].update(
        groupRef="quickstart"),
    "env as Kubernetes' list": lambda docs: kind(docs, "MCPServer")["spec"].update(
        env=[{"name": "LOG_LEVEL", "value": "debug"}]),
    "a feature not implemented, off": lambda docs: kind(docs, "VirtualMCPServer")[
        "spec"].update(passthroughHeaders=[]),
    "a Kubernetes-only field": lambda docs: kind(docs, "VirtualMCPServer")["spec"].update(
        replicas=3),
    "the runtime form of incoming auth": lambda docs: kind(docs, "VirtualMCPServer")[
        "spec"].update(config={"incomingAuth": {"type": "anonymous"}}),
    "a proxy's field on a server vmcp starts": lambda docs: kind(docs, "MCPServer")[
        "spec"].update(authServerRef={"kind": "MCPExternalAuthConfig", "name": "as"}),
    "v1alpha1": lambda docs: kind(docs, "MCPGroup").update(
        apiVersion="toolhive.stacklok.dev/v1alpha1"),
    "a document of another API": lambda docs: docs.append(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tools"}}),
    "labels and a status": lambda docs: kind(docs, "MCPServer").update(
        metadata={"name": "notes", "labels": {"team": "a"}}, status={"phase": "Ready"}),
}


def configuration() -> list[Doc]:
    """A valid configuration with every core kind: the quickstart and a Secret."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
              "stringData": {"token": "t-123"}}
    return [*example_docs("quickstart.yaml"), secret]


@pytest.mark.parametrize(("change", "ok"), [
    *(pytest.param(change, False, id=name) for name, change in REFUSED.items()),
    *(pytest.param(change, True, id=name) for name, change in ACCEPTED.items()),
])
def test_it_agrees_with_vmcp_validate(change: Change, ok: bool) -> None:
    docs = copy.deepcopy(configuration())
    change(docs)
    result = validate(docs)
    assert result.ok is ok, "\n".join(map(str, result.problems))
    assert all(validator().is_valid(doc) for doc in docs) is ok


def test_the_readme_says_how_to_point_an_editor_at_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "# yaml-language-server: $schema=../deploy/schema/vmcp-config.schema.json" in readme
    assert "(deploy/schema/vmcp-config.schema.json)" in readme
