"""``vmcp validate`` reports every problem in one run: the rules between resources run on what is
sound of a resource whose other fields are broken (:mod:`vmcp_trio.resources.salvage`), and say
nothing that comes only from the broken fields."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vmcp_trio.resources import models as m
from vmcp_trio.resources.problems import Problem
from vmcp_trio.resources.salvage import salvage

from .helpers import ROOT, example_docs, matching, resource, set_field, validate

VMCP = "VirtualMCPServer"
EXT = "MCPExternalAuthConfig"


def broken_twice() -> list[dict[str, Any]]:
    """The embedded-auth example with a bad duration in the gateway and an upstreamInject whose
    providerName names no provider of it."""
    docs = example_docs("embedded-auth-server.yaml")
    set_field(resource(docs, VMCP), "spec.authServerConfig.tokenLifespans.accessTokenLifespan",
              "7d")
    set_field(resource(docs, EXT, "github-inject"), "spec.upstreamInject.providerName", "gitlab")
    return docs


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, "\n".join(map(str, problems))
    return problems[0]


def test_a_bad_duration_and_a_dangling_provider_name_in_one_run() -> None:
    docs = broken_twice()
    result = validate(docs)
    duration = only(matching(result, rule="duration"))
    provider = only(matching(result, rule="provider-name"))
    assert (duration.file, duration.document, duration.kind, duration.name, duration.path) == (
        "test.yaml", docs.index(resource(docs, VMCP)) + 1, VMCP, "tools-gateway",
        "spec.authServerConfig.tokenLifespans.accessTokenLifespan")
    assert "Go durations have no days" in duration.message
    assert (provider.file, provider.document, provider.kind, provider.name, provider.path) == (
        "test.yaml", docs.index(resource(docs, EXT, "github-inject")) + 1, EXT, "github-inject",
        "spec.upstreamInject.providerName")
    assert "names upstream provider 'gitlab'" in provider.message
    assert duration.line is not None and provider.line is not None
    assert {p.rule for p in result.errors} == {"duration", "provider-name"}
    assert result.plans == () and result.unchecked == 0


def test_vmcp_validate_prints_both(tmp_path: Path) -> None:
    target = tmp_path / "gateway.yaml"
    target.write_text(yaml.safe_dump_all(broken_twice(), sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "validate", "-c", str(target)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [line for line in run.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, run.stdout
    assert errors[0].startswith(f"error: {target}:")
    assert ": document 6 (MCPExternalAuthConfig tools/github-inject): " \
           "spec.upstreamInject.providerName: names upstream provider 'gitlab'" in errors[0]
    assert errors[0].endswith("[provider-name]")
    assert ": document 13 (VirtualMCPServer tools/tools-gateway): " \
           "spec.authServerConfig.tokenLifespans.accessTokenLifespan: has an unknown unit 'd'" \
           in errors[1]
    assert errors[1].endswith("[duration]")
    assert "invalid: 2 error(s)" in run.stdout and "note:" not in run.stdout


def test_what_follows_only_from_a_broken_field_is_not_reported() -> None:
    """A block taken out is not then said to be missing, a field beside a broken one is not
    said to need it, and the broken resource is not a target others are told is missing."""
    docs = example_docs("embedded-auth-server.yaml")
    set_field(resource(docs, EXT, "jira-exchange"), "spec.tokenExchange.tokenUrl", "not a url")
    set_field(resource(docs, "MCPServer", "status"), "spec.command", 42)
    resource(docs, "MCPServer", "status")["spec"]["workingDir"] = "/tmp"
    result = validate(docs)
    assert sorted((p.name, p.path, p.rule) for p in result.errors) == [
        ("jira-exchange", "spec.tokenExchange.tokenUrl", "url"),
        ("status", "spec.command", "type"),
    ]


def test_rules_still_run_on_the_sound_rest_of_the_same_resource() -> None:
    docs = example_docs("embedded-auth-server.yaml")
    gateway = resource(docs, VMCP)
    set_field(gateway, "spec.authServerConfig.tokenLifespans.authCodeLifespan", 300)
    set_field(gateway, "spec.incomingAuth.oidcConfigRef.name", "nobody")
    result = validate(docs)
    assert sorted((p.path, p.rule) for p in result.errors) == [
        ("spec.authServerConfig.tokenLifespans.authCodeLifespan", "duration"),
        ("spec.incomingAuth.oidcConfigRef.name", "reference"),
    ]


def test_a_spec_whose_own_required_field_is_broken_is_not_salvaged() -> None:
    docs = example_docs("embedded-auth-server.yaml")
    set_field(resource(docs, EXT, "github-inject"), "spec.type", "bogus")
    result = validate(docs)
    assert [p.rule for p in result.errors] == ["enum"]
    assert result.unchecked == 1


def test_salvage_takes_out_whole_lists_and_objects_missing_a_required_field() -> None:
    data = {"issuer": "https://auth.example.com",
            "upstreamProviders": [{"name": "ok", "type": "oidc",
                                   "oidcConfig": {"issuerUrl": "https://idp", "clientId": "c"}},
                                  {"name": "Bad Name", "type": "oidc"}],
            "tokenLifespans": {"accessTokenLifespan": "7d"},
            "storage": {"type": "redis", "redis": {"aclUserConfig": {"usernameSecretRef": {
                "name": "s", "key": "k"}}}}}
    errors = [{"loc": ("upstreamProviders", 1, "name"), "type": "dns_label"},
              {"loc": ("tokenLifespans", "accessTokenLifespan"), "type": "duration"},
              {"loc": ("storage", "redis", "aclUserConfig", "passwordSecretRef"),
               "type": "missing"}]
    assert salvage(m.AuthServerConfig, data, errors) is None  # upstreamProviders is required
    data["upstreamProviders"] = data["upstreamProviders"][:1]
    found = salvage(m.AuthServerConfig, data, errors[1:])
    assert found is not None
    model, taken = found
    assert taken == (("tokenLifespans", "accessTokenLifespan"),
                     ("storage", "redis", "aclUserConfig"))
    assert model.token_lifespans is not None and model.token_lifespans.access_token_lifespan \
        is None
    assert model.storage is not None and model.storage.redis is not None
    assert model.upstream_providers[0].name == "ok"
