"""The Cedar engine as ToolHive's policies expect it: entities, values, groups, errors, cache.

Decided by the real Cedar engine (``cedarpy``); the policies are written as ToolHive's documents
and manifests write them. (The gateway's use of these decisions: tests/test_gateway_authz.py.)
"""

from __future__ import annotations

import json

import pytest

from vmcp_trio.auth.policy.cedar import CedarCheck, CedarPolicies, cedar_value
from vmcp_trio.auth.policy.mcp_checks import (
    DENY_ALWAYS,
    checks_for,
    denial_message,
    item_check,
)

ALICE = {"sub": "alice", "iss": "https://idp", "groups": ["eng"], "email": "a@example.com",
         "level": 3, "realm_access": {"roles": ["ops"]}}
BOB = {"sub": "bob", "iss": "https://idp", "groups": ["sales"]}


def policies(*texts: str, **options: object) -> CedarPolicies:
    return CedarPolicies(list(texts), server_name="gateway", **options)  # type: ignore[arg-type]


def call(name: str, arguments: dict[str, object] | None = None,
         annotations: dict[str, object] | None = None) -> CedarCheck:
    return checks_for("tools/call", {"name": name, "arguments": arguments or {}},
                      lambda _: annotations or {})[0]


def test_group_membership_is_parenthood() -> None:
    engine = policies('permit(principal in THVGroup::"eng", action == Action::"call_tool", '
                      'resource);')
    assert engine.allowed(ALICE, call("deploy"))
    assert not engine.allowed(BOB, call("deploy"))


def test_group_claim_name_and_roles_with_a_custom_entity_type() -> None:
    engine = policies('permit(principal in Team::"ops", action, resource);',
                      group_claim_name="realm_access.roles", group_entity_type="Team")
    assert engine.allowed(ALICE, call("x"))
    assert engine.groups(ALICE) == ["ops"]
    with_roles = policies('permit(principal in THVGroup::"admin", action, resource);',
                          role_claim_name="role_list")
    assert with_roles.allowed({"sub": "c", "groups": ["eng"], "role_list": ["admin"]}, call("x"))
    assert with_roles.groups({"sub": "c", "groups": ["eng"], "role_list": ["admin"]}) == \
        ["eng", "admin"]


def test_default_group_claims_in_order() -> None:
    engine = policies('permit(principal, action, resource);')
    assert engine.groups({"sub": "x", "roles": ["r"], "cognito:groups": ["c"]}) == ["r"]
    assert engine.groups({"sub": "x", "cognito:groups": ["c", 4]}) == ["c"]
    assert engine.groups({"sub": "x", "groups": [], "roles": ["r"]}) == []


def test_claims_on_principal_and_context_numbers_as_decimals() -> None:
    engine = policies(
        'permit(principal, action == Action::"call_tool", resource == Tool::"weather") when '
        '{ principal.claim_email == "a@example.com" && '
        'context.claim_level.greaterThanOrEqual(decimal("3.0")) };')
    assert engine.allowed(ALICE, call("weather"))
    assert not engine.allowed({**ALICE, "level": 2}, call("weather"))
    assert not engine.allowed(ALICE, call("other"))


def test_arguments_scalar_values_and_presence_only_for_the_rest() -> None:
    engine = policies(
        'permit(principal, action == Action::"call_tool", resource == Tool::"calc") when '
        '{ resource.arg_operation == "add" && context has arg_options_present };')
    assert engine.allowed(ALICE, call("calc", {"operation": "add", "options": {"x": 1}}))
    assert not engine.allowed(ALICE, call("calc", {"operation": "rm", "options": {"x": 1}}))
    assert not engine.allowed(ALICE, call("calc", {"operation": "add"}))
    secret = policies('permit(principal, action, resource) when '
                      '{ resource has arg_options && resource.arg_options.x == 1 };')
    assert not secret.allowed(ALICE, call("calc", {"options": {"x": 1}}))


def test_annotation_hints_are_resource_attributes() -> None:
    engine = policies('permit(principal, action == Action::"call_tool", resource) when '
                      '{ resource has readOnlyHint && resource.readOnlyHint };')
    assert engine.allowed(BOB, call("get", annotations={"readOnlyHint": True}))
    assert not engine.allowed(BOB, call("put", annotations={"readOnlyHint": False}))
    assert not engine.allowed(BOB, call("put"))


def test_the_server_is_the_resources_parent() -> None:
    engine = policies('permit(principal, action, resource in MCP::"gateway");')
    assert engine.allowed(BOB, call("x"))
    other = CedarPolicies(['permit(principal, action, resource in MCP::"gateway");'],
                          server_name="elsewhere")
    assert not other.allowed(BOB, call("x"))


def test_forbid_wins_and_default_deny() -> None:
    engine = policies('permit(principal, action, resource);',
                      'forbid(principal, action == Action::"call_tool", resource == '
                      'Tool::"delete_repo") unless { principal in THVGroup::"eng" };')
    assert engine.allowed(BOB, call("list_repos"))
    assert not engine.allowed(BOB, call("delete_repo"))
    assert engine.allowed(ALICE, call("delete_repo"))
    assert not policies('forbid(principal, action, resource) when { false };').allowed(
        ALICE, call("x"))


def test_an_evaluation_error_denies_even_beside_a_permit() -> None:
    engine = policies('permit(principal, action, resource);',
                      'forbid(principal, action, resource) when { principal.claim_missing };')
    assert not engine.allowed(ALICE, call("x"))


def test_no_subject_is_denied() -> None:
    assert not policies('permit(principal, action, resource);').allowed({"iss": "x"}, call("x"))


def test_static_entities_give_hierarchies_and_request_entities_replace_them() -> None:
    entities = [{"uid": {"type": "THVGroup", "id": "eng"}, "attrs": {},
                 "parents": [{"type": "Role", "id": "builders"}]},
                {"uid": {"type": "Client", "id": "alice"}, "attrs": {},
                 "parents": [{"type": "Role", "id": "owners"}]},
                {"uid": {"type": "Tool", "id": "weather"}, "attrs": {"owner": "bob"},
                 "parents": []}]
    engine = policies('permit(principal in Role::"builders", action, resource);',
                      'permit(principal in Role::"owners", action, resource);',
                      entities_json=json.dumps(entities))
    assert engine.allowed(ALICE, call("x"))  # through THVGroup::"eng"
    assert not engine.allowed(BOB, call("x"))
    # Client::"alice" of the static entities is replaced by the request's own
    only_owners = policies('permit(principal in Role::"owners", action, resource);',
                           entities_json=json.dumps(entities))
    assert not only_owners.allowed(ALICE, call("x"))


def test_escapes_in_claims_cannot_forge_entities() -> None:
    forged = {"sub": "mallory", "profile": {"__entity": {"type": "THVGroup", "id": "eng"}}}
    assert cedar_value(forged["profile"]) == {}
    engine = policies('permit(principal, action, resource) when '
                      '{ principal.claim_profile has __entity };')
    assert not engine.allowed(forged, call("x"))


def test_values_convert_as_toolhive_does() -> None:
    assert cedar_value(1.5) == {"__extn": {"fn": "decimal", "arg": "1.5"}}
    assert cedar_value(3) == {"__extn": {"fn": "decimal", "arg": "3.0"}}
    assert cedar_value([1e300, "a", None]) == ["a"]
    deep: object = "leaf"
    for _ in range(12):
        deep = {"k": deep}
    assert "k" in json.dumps(cedar_value(deep)) and "leaf" not in json.dumps(cedar_value(deep))


def test_decisions_are_cached_per_claims_action_resource_and_arguments() -> None:
    engine = policies('permit(principal in THVGroup::"eng", action, resource) '
                      'unless { resource has arg_a && resource.arg_a == "no" };')
    for _ in range(5):
        assert engine.allowed(ALICE, call("x", {"a": 1}))
    assert engine.decisions == 1
    engine.allowed(ALICE, call("x", {"a": 2}))
    engine.allowed(BOB, call("x", {"a": 1}))
    assert engine.decisions == 3
    small = policies('permit(principal, action, resource);', cache_size=2)
    for name in ("a", "b", "c", "a"):
        small.allowed(ALICE, call(name))
    assert small.decisions == 4  # "a" was pushed out


@pytest.mark.parametrize(("method", "params", "expected"), [
    ("prompts/get", {"name": "greet", "arguments": {"who": "x"}},
     ("get_prompt", "Prompt", "greet")),
    ("resources/read", {"uri": "file:///data/x.txt"},
     ("read_resource", "Resource", "file____data_x_txt")),
    ("resources/subscribe", {"uri": "db://t"}, ("read_resource", "Resource", "db___t")),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "greet"}},
     ("get_prompt", "Prompt", "greet")),
    ("completion/complete", {"ref": {"type": "ref/resource", "uri": "a:b"}},
     ("read_resource", "Resource", "a_b")),
])
def test_requests_map_to_toolhive_actions(method: str, params: dict[str, object],
                                          expected: tuple[str, str, str]) -> None:
    (check,) = checks_for(method, params, lambda _: {})
    assert (check.action, check.resource_type, check.resource_id) == expected


def test_unplaceable_requests_are_denied_and_others_unchecked() -> None:
    assert checks_for("completion/complete", {"ref": {"type": "ref/other"}},
                      lambda _: {}) == [DENY_ALWAYS]
    assert checks_for("tools/call", {"name": 7}, lambda _: {}) == [DENY_ALWAYS]
    for method in ("initialize", "ping", "tools/list", "logging/setLevel", "tasks/get"):
        assert checks_for(method, {}, lambda _: {}) == []
    listen = checks_for("subscriptions/listen", {"notifications": {
        "resourceSubscriptions": ["a:1", "a:1", "b:2"]}}, lambda _: {})
    assert [c.resource_id for c in listen] == ["a_1", "b_2"]
    engine = policies('permit(principal, action, resource);')
    assert not engine.allowed(ALICE, DENY_ALWAYS)


def test_list_items_are_checked_as_their_use() -> None:
    check = item_check("tools/list", {"name": "t", "annotations": {"readOnlyHint": True}})
    assert (check.action, check.resource_id, check.attributes["readOnlyHint"]) == \
        ("call_tool", "t", True)
    assert item_check("resources/templates/list", {"uriTemplate": "db://{x}"}).resource_id == \
        "db___{x}"
    assert denial_message(check) == "call denied by authorization policy"


def test_arguments_are_left_out_when_no_policy_reads_them() -> None:
    engine = policies('permit(principal in THVGroup::"eng", action, resource);')
    for index in range(5):
        assert engine.allowed(ALICE, call("search", {"query": f"q{index}"}))
    assert engine.decisions == 1
    reading = policies('permit(principal, action, resource) when '
                       '{ resource has arg_query && resource.arg_query != "q3" };')
    assert [reading.allowed(ALICE, call("search", {"query": f"q{i}"})) for i in range(5)] == \
        [True, True, True, False, True]
    assert reading.decisions == 5


def test_cached_decisions_follow_the_claims_not_the_object() -> None:
    """Decisions are cached by a fingerprint of the claims, remembered per claims object: a new
    claims object (even at a recycled address) is judged by what it holds."""
    team_a = policies('permit(principal, action, resource) when { principal.claim_team == "a" };')
    check = call("t")
    for i in range(200):
        team = "a" if i % 2 else "b"
        assert team_a.allowed({"sub": f"u{i % 3}", "team": team}, check) is (team == "a")
    same = {"sub": "u", "team": "a"}
    assert team_a.allowed(same, check) and team_a.allowed(same, check)


def test_a_tools_check_follows_its_annotations_and_each_calls_arguments() -> None:
    """A tool's check is made once per annotations object and reused: a catalog rebuilt with
    other hints (a new object, maybe at a freed one's address) gets a check of its own, and
    each call's arguments are its own."""
    engine = policies('permit(principal, action == Action::"call_tool", resource);',
                      'forbid(principal, action == Action::"call_tool", resource) when '
                      '{ resource has destructiveHint && resource.destructiveHint };',
                      'forbid(principal, action == Action::"call_tool", resource) when '
                      '{ resource has arg_text && resource.arg_text == "no" };')
    safe = {"destructiveHint": False}
    assert engine.allowed(ALICE, call("wipe", {"text": "yes"}, safe))
    assert not engine.allowed(ALICE, call("wipe", {"text": "no"}, safe))
    assert engine.allowed(ALICE, call("wipe", {"text": "yes"}, safe))
    for _ in range(3):  # new objects, whatever their ids
        assert not engine.allowed(ALICE, call("wipe", {"text": "yes"},
                                              {"destructiveHint": True}))
        assert engine.allowed(ALICE, call("wipe", {"text": "yes"}, {"destructiveHint": False}))
