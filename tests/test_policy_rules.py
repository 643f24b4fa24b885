"""The rules of a gateway's policies: Cedar authorization, rate limits and audit, each problem at
its field, and the plans they resolve to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vmcp_trio.resources.plan import AuthzPlan, Bucket, ToolBuckets
from vmcp_trio.resources.problems import Severity

from .helpers import expect_error, matching, resource, validate

Docs = list[dict[str, Any]]
VMCP = "VirtualMCPServer"
PERMIT = 'permit(principal, action == Action::"call_tool", resource);'


def incoming(docs: Docs) -> dict[str, Any]:
    spec: dict[str, Any] = resource(docs, VMCP)["spec"]["incomingAuth"]
    return spec


def config(docs: Docs) -> dict[str, Any]:
    spec: dict[str, Any] = resource(docs, VMCP)["spec"]
    return spec.setdefault("config", {})


def authz_of(docs: Docs) -> AuthzPlan:
    result = validate(docs)
    assert result.ok, result.problems
    authz = result.plans[0].authz
    assert authz is not None
    return authz


def config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "dev"},
            "data": data}


# --- authorization ------------------------------------------------------------------------------


def test_inline_policies_and_entities(anonymous: Docs) -> None:
    entities = json.dumps([{"uid": {"type": "THVGroup", "id": "eng"}, "attrs": {},
                            "parents": []}])
    incoming(anonymous)["authzConfig"] = {
        "type": "inline", "inline": {"policies": [PERMIT], "entitiesJson": entities},
        "groupClaimName": "realm_access.roles", "groupEntityType": "Team"}
    authz = authz_of(anonymous)
    assert (authz.policies, authz.entities_json, authz.group_claim_name,
            authz.group_entity_type, authz.primary_upstream_provider) == \
        ((PERMIT,), entities, "realm_access.roles", "Team", None)


def test_a_policy_that_does_not_parse_is_named_by_index(anonymous: Docs) -> None:
    incoming(anonymous)["authzConfig"] = {"type": "inline", "inline": {"policies": [
        PERMIT, "permit(principal, action, resource) when { principal.x == };"]}}
    expect_error(validate(anonymous), "authz", "spec.incomingAuth.authzConfig.inline.policies[1]",
                 contains="is not a Cedar policy: unexpected token")


def test_entities_must_be_cedar_entities(anonymous: Docs) -> None:
    incoming(anonymous)["authzConfig"] = {"type": "inline", "inline": {
        "policies": [PERMIT], "entitiesJson": '{"not": "a list"}'}}
    expect_error(validate(anonymous), "authz",
                 "spec.incomingAuth.authzConfig.inline.entities_json",
                 contains="must be a JSON list of Cedar entities")


@pytest.mark.parametrize(("block", "path"), [
    ({"type": "inline", "configMap": {"name": "x"}}, "spec.incomingAuth.authzConfig.inline"),
    ({"inline": {"policies": [PERMIT]}}, "spec.incomingAuth.authzConfig.configMap"),
])
def test_the_type_names_the_block_given(anonymous: Docs, block: dict[str, Any],
                                        path: str) -> None:
    incoming(anonymous)["authzConfig"] = block
    expect_error(validate(anonymous), "required", path)


def test_authz_config_and_ref_exclude_each_other(anonymous: Docs) -> None:
    incoming(anonymous)["authzConfig"] = {"type": "inline", "inline": {"policies": [PERMIT]}}
    incoming(anonymous)["authzConfigRef"] = {"name": "shared"}
    expect_error(validate(anonymous), "conflict", "spec.incomingAuth.authzConfigRef")


def test_a_config_map_holds_toolhive_authz_json(anonymous: Docs) -> None:
    document = {"version": "1.0", "type": "cedarv1", "cedar": {
        "policies": [PERMIT], "entities_json": "[]", "group_claim_name": "teams",
        "primary_upstream_provider": "ignored-here"}}
    anonymous.append(config_map("policies", {"authz.json": json.dumps(document)}))
    incoming(anonymous)["authzConfig"] = {"configMap": {"name": "policies"},
                                          "roleClaimName": "roles"}
    authz = authz_of(anonymous)
    assert (authz.policies, authz.group_claim_name, authz.role_claim_name) == \
        ((PERMIT,), "teams", "roles")


def test_a_config_map_without_the_key_or_with_other_content(anonymous: Docs) -> None:
    anonymous.append(config_map("policies", {"other.json": "{}", "authz.json": "[1, 2]"}))
    incoming(anonymous)["authzConfig"] = {"configMap": {"name": "policies", "key": "x.json"}}
    expect_error(validate(anonymous), "reference", "spec.incomingAuth.authzConfig.configMap.key",
                 contains="has no key 'x.json'")
    incoming(anonymous)["authzConfig"] = {"configMap": {"name": "policies"}}
    expect_error(validate(anonymous), "authz", 'data["authz.json"]', kind="ConfigMap",
                 contains="must be ToolHive's authz.json")
    incoming(anonymous)["authzConfig"] = {"configMap": {"name": "missing"}}
    expect_error(validate(anonymous), "reference",
                 "spec.incomingAuth.authzConfig.configMap.name")


def test_an_mcp_authz_config_of_type_cedarv1(anonymous: Docs) -> None:
    shared = {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPAuthzConfig",
              "metadata": {"name": "shared", "namespace": "dev"},
              "spec": {"type": "cedarv1", "config": {"policies": [PERMIT],
                                                     "entities_json": "[]"}}}
    anonymous.append(shared)
    incoming(anonymous)["authzConfigRef"] = {"name": "shared"}
    assert authz_of(anonymous).policies == (PERMIT,)
    shared["spec"]["config"]["policies"] = ["permit(principal"]
    expect_error(validate(anonymous), "authz", "spec.config.policies[0]", kind="MCPAuthzConfig")
    shared["spec"] = {"type": "httpv1", "config": {"pdp": {}}}
    expect_error(validate(anonymous), "not-implemented", "spec.type", kind="MCPAuthzConfig",
                 contains="authorizer 'httpv1' is not implemented")


def test_primary_upstream_provider_defaults_to_the_first(embedded: Docs) -> None:
    incoming(embedded)["authzConfig"] = {"type": "inline", "inline": {"policies": [PERMIT]}}
    gateway = resource(embedded, VMCP)["spec"]
    first = gateway["authServerConfig"]["upstreamProviders"][0]["name"]
    assert authz_of(embedded).primary_upstream_provider == first
    gateway["authServerConfig"]["primaryUpstreamProvider"] = "nobody"
    expect_error(validate(embedded), "reference",
                 "spec.authServerConfig.primaryUpstreamProvider",
                 contains="names upstream provider 'nobody'")


# --- rate limits ---------------------------------------------------------------------------------


def test_rate_limits_resolve_to_buckets(inline_oidc: Docs) -> None:
    config(inline_oidc)["rateLimiting"] = {
        "global": {"maxTokens": 100, "refillPeriod": "1m"},
        "perUser": {"maxTokens": 10, "refillPeriod": "30s"},
        "tools": [{"name": "search", "shared": {"maxTokens": 5, "refillPeriod": "1s"}}]}
    result = validate(inline_oidc)
    assert result.ok, result.problems
    rules = result.plans[0].rate_limits
    assert rules is not None
    assert (rules.shared, rules.per_user, dict(rules.tools)) == (
        Bucket(100, 60.0), Bucket(10, 30.0), {"search": ToolBuckets(Bucket(5, 1.0), None)})
    (local,) = matching(result, rule="rate-limit-local")
    assert local.severity is Severity.WARNING


def test_per_user_limits_need_authenticated_callers(anonymous: Docs) -> None:
    config(anonymous)["rateLimiting"] = {"perUser": {"maxTokens": 1, "refillPeriod": "1s"}}
    expect_error(validate(anonymous), "rate-limit", "spec.config.rateLimiting.perUser",
                 contains="need authenticated callers")


def test_shared_and_global_are_one_limit(anonymous: Docs) -> None:
    config(anonymous)["rateLimiting"] = {"shared": {"maxTokens": 1, "refillPeriod": "1s"},
                                         "global": {"maxTokens": 2, "refillPeriod": "1s"}}
    expect_error(validate(anonymous), "conflict", "spec.config.rateLimiting.global")


def test_a_tool_limited_twice(anonymous: Docs) -> None:
    bucket = {"shared": {"maxTokens": 1, "refillPeriod": "1s"}}
    config(anonymous)["rateLimiting"] = {"tools": [{"name": "a", **bucket},
                                                   {"name": "a", **bucket}]}
    expect_error(validate(anonymous), "duplicate", "spec.config.rateLimiting.tools[1].name")


def test_a_zero_refill_period(anonymous: Docs) -> None:
    config(anonymous)["rateLimiting"] = {"shared": {"maxTokens": 1, "refillPeriod": "0s"}}
    expect_error(validate(anonymous), "range",
                 "spec.config.rateLimiting.shared.refillPeriod")


# --- audit ---------------------------------------------------------------------------------------


def test_audit_settings_in_either_place(anonymous: Docs) -> None:
    config(anonymous)["audit"] = {"enabled": True, "component": "gw",
                                  "excludeEventTypes": ["mcp_ping"], "maxDataSize": 64}
    result = validate(anonymous)
    assert result.ok, result.problems
    audit = result.plans[0].audit
    assert (audit.enabled, audit.component, audit.exclude_event_types, audit.max_data_size) == \
        (True, "gw", frozenset({"mcp_ping"}), 64)
    resource(anonymous, VMCP)["spec"]["audit"] = {"enabled": False}
    expect_error(validate(anonymous), "conflict", "spec.config.audit")


def test_an_unknown_event_type(anonymous: Docs) -> None:
    config(anonymous)["audit"] = {"enabled": True, "eventTypes": ["mcp_tool_call", "tool_call"]}
    expect_error(validate(anonymous), "audit", "spec.config.audit.eventTypes[1]",
                 contains="is not an event type")


def test_the_summary_says_what_the_gateway_checks_and_records(anonymous: Docs) -> None:
    from vmcp_trio.resources.summary import describe_plan

    assert "  policies: no authorization policies" in describe_plan(validate(anonymous).plans[0])
    incoming(anonymous)["authzConfig"] = {"type": "inline", "inline": {"policies": [PERMIT]}}
    config(anonymous)["rateLimiting"] = {"shared": {"maxTokens": 5, "refillPeriod": "1m"}}
    config(anonymous)["audit"] = {"enabled": True, "logFile": "/var/log/vmcp/audit.jsonl"}
    summary = describe_plan(validate(anonymous).plans[0])
    assert ("  policies: 1 Cedar policies (the token's claims, groups as THVGroup); rate limits "
            "(this process's): shared 5/60s; audit to /var/log/vmcp/audit.jsonl") in summary
