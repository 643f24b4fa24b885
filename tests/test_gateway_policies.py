"""Cedar policies, rate limits and audit through a real gateway, for real tokens.

The tokens come from the ``oidc-provider`` test peer (an external IdP whose tokens carry a
``groups`` claim) and from the embedded authorization server (whose policies see the claims of
the user's upstream login, ``primaryUpstreamProvider``); the backends are the quickstart's two
stdio servers. What is asserted is what a client and an auditor see: the lists, the HTTP status
and JSON-RPC error of a denial, and the audit log's lines.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from .authserver_helpers import Stack, as_docs, chained_upstreams, tokens
from .fixtures.idp import Idp, running_idp
from .gateway_helpers import RawClient, Reply, quickstart_docs, running_gateway

AUDIENCE = "https://mcp.example.test/mcp"
POLICIES = [
    'permit(principal in THVGroup::"eng", action, resource);',
    'permit(principal in THVGroup::"sales", action == Action::"call_tool", '
    'resource == Tool::"clock_echo") unless '
    '{ resource has arg_message && resource.arg_message == "secret" };',
    'permit(principal in THVGroup::"sales", action == Action::"get_prompt", resource);',
    'forbid(principal, action == Action::"call_tool", resource == Tool::"notes_delete_note") '
    'unless { principal in THVGroup::"eng" };',
]
DENIED = {"code": 403, "message": "call denied by authorization policy"}


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}},
                     groups={"alice": ["eng"], "bob": ["sales"]}) as provider:
        yield provider


def policy_docs(idp: Idp, audit_file: Path, **config: Any) -> list[dict[str, Any]]:
    """The quickstart behind the IdP, with the policies and an audit log to ``audit_file``."""
    docs = copy.deepcopy(quickstart_docs())
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {
        "type": "oidc",
        "oidcConfig": {"type": "inline", "inline": {
            "issuer": idp.issuer, "audience": AUDIENCE, "insecureAllowHTTP": True,
            "jwksAllowPrivateIP": True, "clientId": "confidential"}},
        "authzConfig": {"type": "inline", "inline": {"policies": POLICIES}}}
    vmcp["spec"]["config"] = {"audit": {"enabled": True, "logFile": str(audit_file),
                                        "component": "policies-test"}, **config}
    return docs


async def client_for(url: str, idp: Idp, user: str) -> RawClient:
    token = await trio.to_thread.run_sync(partial(idp.login_token, user, resource=AUDIENCE))
    client = RawClient(url)
    client.token = token["access_token"]
    assert (await client.initialize()).status == 200
    return client


def names(reply: Reply, key: str = "tools") -> list[str]:
    return sorted(item.get("name") or item.get("uri") for item in reply.result[key])


async def audit_lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The audit log's events once it has at least ``count`` (the writer is asynchronous)."""
    with trio.fail_after(10):
        while True:
            text = path.read_text() if path.exists() else ""
            events = [json.loads(line) for line in text.splitlines()]
            if len(events) >= count:
                return events
            await trio.sleep(0.05)


async def test_lists_calls_and_denials_follow_the_groups_claim(idp: Idp, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with running_gateway(policy_docs(idp, audit)) as (url, _):
        alice = await client_for(url, idp, "alice")
        bob = await client_for(url, idp, "bob")
        everything = names(await alice.request("tools/list"))
        assert {"clock_echo", "clock_now", "notes_delete_note"} <= set(everything)
        assert names(await bob.request("tools/list")) == ["clock_echo"]
        assert names(await bob.request("prompts/list"), "prompts") == \
            names(await alice.request("prompts/list"), "prompts")
        assert (await bob.request("resources/list")).result["resources"] == []

        allowed = await bob.request("tools/call", {"name": "clock_echo",
                                                   "arguments": {"message": "hi"}})
        assert allowed.status == 200 and allowed.result["content"][0]["text"] == "hi"
        for name, arguments in (("clock_echo", {"message": "secret"}), ("clock_now", {}),
                                ("notes_delete_note", {"id": "1"}), ("no_such_tool", {})):
            denied = await bob.request("tools/call", {"name": name, "arguments": arguments})
            assert denied.status == 403, (name, denied.body)
            assert denied.body["error"] == DENIED, name  # never "unknown tool": no oracle
        read = await bob.request("resources/read", {"uri": "notes://index"})
        assert read.status == 403
        assert read.body["error"]["message"] == "read denied by authorization policy"
        deleted = await alice.request("tools/call", {"name": "notes_delete_note",
                                                     "arguments": {"id": "nope"}})
        assert deleted.status == 200  # allowed: the backend answers (an error of its own)

        events = await audit_lines(audit, 13)  # every one: the writer takes them in batches
        denials = [e for e in events if e["outcome"] == "denied"]
        assert [e["target"].get("name") for e in denials] == \
            ["clock_echo", "clock_now", "notes_delete_note", "no_such_tool", "notes://index"]
        first = denials[0]
        assert first["type"] == "mcp_tool_call" and first["component"] == "policies-test"
        assert first["subjects"]["user_id"] == "bob"
        assert first["source"]["type"] == "network" and first["source"]["value"] == "127.0.0.1"
        assert first["target"]["method"] == "tools/call"
        assert "data" not in first  # arguments only with includeRequestData
        success = next(e for e in events if e["type"] == "mcp_tool_call"
                       and e["outcome"] == "success")
        assert success["subjects"]["user_id"] == "bob"
        assert success["metadata"]["extra"]["backend_name"] == "clock"
        assert bob.token is not None and bob.token not in audit.read_text()
        for client in (alice, bob):
            await client.aclose()


async def test_a_token_refused_at_the_boundary_is_audited(idp: Idp, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with running_gateway(policy_docs(idp, audit)) as (url, _):
        client = RawClient(url)
        client.token = "not-a-token"
        assert (await client.initialize()).status == 401
        await client.aclose()
        events = await audit_lines(audit, 2)  # initialize, then notifications/initialized
        for event in events:
            assert (event["type"], event["outcome"], event["target"]["endpoint"]) == \
                ("vmcp_auth_denied", "denied", "/mcp")
            assert event["metadata"]["extra"]["reason"] == "invalid_token"
        assert "not-a-token" not in audit.read_text()


async def test_rate_limits_refuse_with_retry_after(idp: Idp, tmp_path: Path) -> None:
    limits = {"rateLimiting": {"perUser": {"maxTokens": 2, "refillPeriod": "1h"}}}
    async with running_gateway(policy_docs(idp, tmp_path / "a.jsonl", **limits)) as (url, gw):
        alice = await client_for(url, idp, "alice")
        bob = await client_for(url, idp, "bob")
        call = {"name": "clock_echo", "arguments": {"message": "hi"}}
        for _ in range(2):
            assert (await alice.request("tools/call", call)).status == 200
        refused = await alice.request("tools/call", call)
        assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.body["error"]["code"] == -32029
        assert refused.body["error"]["data"]["retryAfterSeconds"] >= 1
        assert (await bob.request("tools/call", call)).status == 200  # his own bucket
        assert (await alice.request("tools/list")).status == 200  # only tools/call is limited
        denied = await bob.request("tools/call", {"name": "clock_now", "arguments": {}})
        assert denied.status == 403  # a denial takes no token: bob still has one
        assert (await bob.request("tools/call", call)).status == 200
        metrics = gw.metrics.render().decode()
        assert 'vmcp_rate_limited_total{limit="perUser"} 1.0' in metrics
        for client in (alice, bob):
            await client.aclose()


async def test_embedded_server_tokens_use_the_upstream_logins_groups(tmp_path: Path) -> None:
    with chained_upstreams(groups={"alice": ["eng"], "bob": ["sales"]}) as (port, corp, hub):
        issuer = f"http://127.0.0.1:{port}"
        docs = as_docs(issuer, corp, hub)
        vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
        vmcp["spec"]["incomingAuth"]["authzConfig"] = {
            "type": "inline", "inline": {"policies": POLICIES}}
        async with running_gateway(docs, port=port) as (url, gateway):
            stack = Stack(issuer, url, corp, hub, gateway)
            seen: dict[str, list[str]] = {}
            for user in ("alice", "bob"):
                _, answer, _ = await tokens(stack, user)
                client = RawClient(url)
                client.token = answer["access_token"]
                assert (await client.initialize()).status == 200
                seen[user] = names(await client.request("tools/list"))
                denied = await client.request("tools/call", {"name": "clock_now",
                                                             "arguments": {}})
                assert denied.status == (200 if user == "alice" else 403)
                await client.aclose()
            assert "clock_now" in seen["alice"] and seen["bob"] == ["clock_echo"]


async def test_a_reload_changes_the_policies_and_the_audit_log_at_once(tmp_path: Path) -> None:
    from vmcp_trio.app.reload import apply, changes
    from vmcp_trio.resources import validate_documents
    from vmcp_trio.resources.loading import SourceDocument

    def plan_of(docs: list[dict[str, Any]]) -> Any:
        result = validate_documents([SourceDocument("t.yaml", i + 1, d)
                                     for i, d in enumerate(docs)])
        assert result.ok, result.problems
        return result.plans[0]

    docs = copy.deepcopy(quickstart_docs())
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    async with running_gateway(docs) as (url, gateway):
        client = RawClient(url)
        await client.initialize()
        now = {"name": "clock_now", "arguments": {}}
        assert (await client.request("tools/call", now)).status == 200
        vmcp["spec"]["incomingAuth"]["authzConfig"] = {"type": "inline", "inline": {"policies": [
            'permit(principal, action, resource) unless { resource == Tool::"clock_now" };']}}
        vmcp["spec"]["config"] = {"audit": {"enabled": True,
                                            "logFile": str(tmp_path / "audit.jsonl")}}
        new = plan_of(docs)
        diff = changes(gateway.plan, new)
        assert diff.describe() == "policies or rate limits; audit"
        await apply(gateway, new, diff)
        denied = await client.request("tools/call", now)
        assert denied.status == 403 and denied.body["error"] == DENIED
        assert "clock_now" not in names(await client.request("tools/list"))
        (event, *_) = await audit_lines(tmp_path / "audit.jsonl", 1)
        assert (event["type"], event["outcome"]) == ("mcp_tool_call", "denied")
        del vmcp["spec"]["incomingAuth"]["authzConfig"]
        await apply(gateway, plan_of(docs), changes(gateway.plan, plan_of(docs)))
        assert (await client.request("tools/call", now)).status == 200
        await client.aclose()
