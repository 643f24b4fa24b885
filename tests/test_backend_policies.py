"""An MCPRemoteProxy's own Cedar policies (``authzConfig`` / ``authzConfigRef``, what ToolHive's
proxy pod in front of the backend enforces): their rules, and a real ``vmcp serve`` where they
decide the calls routed to that backend (and what it lists), under the backend's own names,
while the other backends are left alone."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import trio

from vmcp_trio.resources.plan import AuthzPlan
from vmcp_trio.resources.summary import describe_plan

from .fixtures.sdk_servers import make_server
from .fixtures.sdk_servers import serving as serving_backend
from .gateway_helpers import RawClient, StatelessClient, quickstart_docs, running_gateway
from .helpers import example_docs, expect_error, resource, validate
from .serve_helpers import Served, serving

API = "toolhive.stacklok.dev/v1beta1"
ONLY_ADD = 'permit(principal, action == Action::"call_tool", resource == Tool::"add");'
ONLY_GREET = ('permit(principal, action == Action::"get_prompt", resource) when '
              '{ resource.name == "greet" };')


def guarded(url: str, **spec: Any) -> dict[str, Any]:
    """An MCPRemoteProxy ``guarded`` of the quickstart's group in front of ``url``, whose
    policies allow the tool ``add`` and the prompt ``greet`` and nothing else."""
    return {"apiVersion": API, "kind": "MCPRemoteProxy", "metadata": {"name": "guarded"},
            "spec": {"groupRef": {"name": "quickstart"}, "remoteUrl": url,
                     "allowPrivateEndpoint": True,
                     "authzConfig": {"type": "inline",
                                     "inline": {"policies": [ONLY_ADD, ONLY_GREET]}},
                     **spec}}


def with_guarded(url: str = "http://127.0.0.1:9/mcp", **spec: Any) -> list[dict[str, Any]]:
    docs = quickstart_docs()
    docs.insert(1, guarded(url, **spec))
    return docs


# --- rules ---------------------------------------------------------------------------------------


def test_the_policies_go_with_their_backend_only() -> None:
    result = validate(with_guarded())
    assert result.ok, result.problems
    plan = result.plans[0]
    assert plan.authz is None
    backends = {backend.name: backend.authz for backend in plan.backends}
    assert backends == {"clock": None, "notes": None,
                        "guarded": AuthzPlan(policies=(ONLY_ADD, ONLY_GREET))}
    assert "    guarded: streamable-http" in describe_plan(plan)
    assert "      its own policies: 2 Cedar policies" in describe_plan(plan)


def test_an_mcp_authz_config_can_hold_them() -> None:
    docs = with_guarded(authzConfig=None, authzConfigRef={"name": "shared"})
    del resource(docs, "MCPRemoteProxy")["spec"]["authzConfig"]
    docs.append({"apiVersion": API, "kind": "MCPAuthzConfig", "metadata": {"name": "shared"},
                 "spec": {"type": "cedarv1", "config": {"policies": [ONLY_ADD],
                                                        "group_claim_name": "teams"}}})
    result = validate(docs)
    assert result.ok, result.problems
    (authz,) = [b.authz for b in result.plans[0].backends if b.name == "guarded"]
    assert authz == AuthzPlan(policies=(ONLY_ADD,), group_claim_name="teams")


def test_their_mistakes_are_the_proxys() -> None:
    docs = with_guarded()
    proxy = resource(docs, "MCPRemoteProxy")
    proxy["spec"]["authzConfig"]["inline"]["policies"] = ["permit(principal, action, oops);"]
    expect_error(validate(docs), "authz", "spec.authzConfig.inline.policies[0]",
                 kind="MCPRemoteProxy", name="guarded", contains="is not a Cedar policy")
    proxy["spec"]["authzConfigRef"] = {"name": "shared"}
    expect_error(validate(docs), "conflict", "spec.authzConfigRef", kind="MCPRemoteProxy",
                 contains="exclude each other")


def test_their_primary_upstream_provider_is_one_of_the_gateways() -> None:
    """Behind the embedded authorization server, a backend's policies see the claims of the
    gateway's primary upstream login, or of the one its own ``primaryUpstreamProvider``
    names, which must be the gateway's."""
    docs = example_docs("embedded-auth-server.yaml")
    jira = resource(docs, "MCPServer", "jira")
    jira["kind"] = "MCPRemoteProxy"
    jira["spec"] = {"groupRef": jira["spec"]["groupRef"],
                    "remoteUrl": "https://jira.example.com/mcp",
                    "authzConfig": {"type": "inline", "inline": {
                        "policies": [ONLY_ADD], "primaryUpstreamProvider": "github"}}}
    result = validate(docs)
    assert result.ok, result.problems
    (authz,) = [b.authz for b in result.plans[0].backends if b.name == "jira"]
    assert authz is not None and authz.primary_upstream_provider == "github"
    jira["spec"]["authzConfig"]["inline"]["primaryUpstreamProvider"] = "gitlab"
    expect_error(validate(docs), "reference",
                 "spec.authzConfig.inline.primaryUpstreamProvider", kind="MCPRemoteProxy",
                 name="jira", contains="names upstream provider 'gitlab'")


def test_a_reload_of_their_policies_rebuilds_the_gate_not_the_backend() -> None:
    from vmcp_trio.app.reload import changes

    before = validate(with_guarded()).plans[0]
    docs = with_guarded()
    resource(docs, "MCPRemoteProxy")["spec"]["authzConfig"]["inline"]["policies"] = [ONLY_ADD]
    diff = changes(before, validate(docs).plans[0])
    assert (diff.added, diff.removed, diff.changed, diff.policies) == (
        frozenset(), frozenset(), frozenset(), True)


# --- a real vmcp serve ---------------------------------------------------------------------------


async def call(client: RawClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = await client.request("tools/call", {"name": name, "arguments": arguments})
    assert reply.status == 200, reply
    return reply.messages[-1]


async def test_a_real_gateway_applies_the_proxys_policies_to_its_calls(tmp_path: Path) -> None:
    """Allowed: ``add`` (listed, called); refused with 403 and never sent: ``slow`` (not
    listed, called directly, and as a composite tool's step naming it ``guarded.slow``); the
    other backends' tools are not theirs to decide."""
    server, state = make_server("alice")
    async with serving_backend(server, state) as url:
        docs = with_guarded(url)
        gateway = resource(docs, "VirtualMCPServer")
        gateway["spec"]["config"] = {"compositeTools": [{
            "name": "slow_twice", "description": "a step the backend's policies refuse",
            "steps": [{"id": "s", "tool": "guarded.slow", "arguments": {"steps": 1}}]}]}
        with contextlib.ExitStack() as stack:
            served: Served = await trio.to_thread.run_sync(
                stack.enter_context, serving(docs, tmp_path))
            try:
                await _check_the_policies(served, state)
            finally:
                await trio.to_thread.run_sync(stack.close)


async def _check_the_policies(served: Served, state: Any) -> None:
    client = RawClient(served.url)
    try:
        with trio.fail_after(30):
            assert (await client.initialize()).status == 200
            listed = (await client.request("tools/list")).result["tools"]
            names = {tool["name"] for tool in listed}
            assert "guarded_add" in names and "clock_echo" in names, names
            assert not names & {"guarded_slow", "guarded_touch", "guarded_ask"}, names
            allowed = await call(client, "guarded_add", {"a": 2, "b": 3})
            assert allowed["result"]["structuredContent"] == {"total": 5, "backend": "alice"}
            calls_before = state.methods.count("tools/call")
            denied = await call(client, "guarded_slow", {"steps": 1})
            assert denied["error"]["code"] == 403
            assert denied["error"]["message"] == "call denied by authorization policy"
            step = await call(client, "slow_twice", {})
            assert step["result"]["isError"] is True
            assert "call denied by authorization policy" in json.dumps(step["result"])
            assert state.methods.count("tools/call") == calls_before  # never reached it
            prompt = await client.request("prompts/get", {
                "name": "guarded_greet", "arguments": {"person": "alice"}})
            assert "result" in prompt.messages[-1], prompt.messages
            other = await call(client, "clock_echo", {"message": "not guarded"})
            assert other["result"]["content"][0]["text"] == "not guarded"
    finally:
        await client.aclose()
    assert "Traceback" not in served.log(), served.log()[-3000:]


async def test_a_subscription_their_policies_do_not_allow_is_not_made() -> None:
    """A 2026-07-28 ``subscriptions/listen`` subscribes at the backend for the client: a URI
    its policies do not let the caller read is not subscribed (nor acknowledged); one they do
    is."""
    server, state = make_server("alice")
    async with serving_backend(server, state) as url:
        for policies, granted in (([ONLY_ADD], []), (['permit(principal, action, resource);'],
                                                     ["alice://static"])):
            docs = with_guarded(url)
            resource(docs, "MCPRemoteProxy")["spec"]["authzConfig"]["inline"]["policies"] = \
                policies
            async with running_gateway(docs) as (gateway_url, _):
                client = StatelessClient(gateway_url)
                reply = await client.post("subscriptions/listen", {"notifications": {
                    "resourceSubscriptions": ["alice://static"]}}, stop_after=1)
                await client.http.aclose()
            ack = reply.messages[0]
            assert ack["method"] == "notifications/subscriptions/acknowledged", ack
            assert ack["params"]["notifications"].get("resourceSubscriptions", []) == granted
            assert sum("alice://static" in uris for uris in state.listens) == len(granted)


async def test_the_proxys_own_rate_limits_on_the_calls_routed_to_it() -> None:
    """An MCPRemoteProxy's ``rateLimiting`` (its pod's, in ToolHive): on its tools, by its own
    names, besides the gateway's; refused with -32029 before the backend is called, and the
    other backends are not counted."""
    server, state = make_server("alice")
    async with serving_backend(server, state) as url:
        docs = with_guarded(url, rateLimiting={
            "tools": [{"name": "add", "shared": {"maxTokens": 2, "refillPeriod": "1h"}}]})
        del resource(docs, "MCPRemoteProxy")["spec"]["authzConfig"]
        async with running_gateway(docs) as (gateway_url, _):
            client = RawClient(gateway_url)
            try:
                assert (await client.initialize()).status == 200
                for _ in range(2):
                    allowed = await call(client, "guarded_add", {"a": 1, "b": 1})
                    assert allowed["result"]["structuredContent"]["total"] == 2
                calls_before = state.methods.count("tools/call")
                refused = await call(client, "guarded_add", {"a": 1, "b": 1})
                assert refused["error"]["code"] == -32029, refused
                assert refused["error"]["data"]["retryAfterSeconds"] >= 1
                assert state.methods.count("tools/call") == calls_before  # never sent
                other = await call(client, "clock_echo", {"message": "free"})
                assert other["result"]["content"][0]["text"] == "free"
            finally:
                await client.aclose()


async def test_a_server_vmcp_starts_gets_its_proxys_policies_limits_and_filter() -> None:
    """An MCPServer vmcp starts (``command``) has no ToolHive proxy in front of it: vmcp applies
    its ``authzConfig``, ``rateLimiting`` and older ``tools`` filter itself. At its in-cluster
    URL the same fields are its proxy's business (set aside)."""
    docs = quickstart_docs()
    clock = resource(docs, "MCPServer", "clock")
    clock["spec"]["tools"] = ["echo", "add"]
    clock["spec"]["authzConfig"] = {"type": "inline", "inline": {"policies": [
        'permit(principal, action == Action::"call_tool", resource == Tool::"echo");',
        'permit(principal, action == Action::"list_tools", resource);']}}
    clock["spec"]["rateLimiting"] = {"shared": {"maxTokens": 1, "refillPeriod": "1h"}}
    result = validate(docs)
    assert result.ok, result.problems
    (plan,) = result.plans
    backend = next(b for b in plan.backends if b.name == "clock")
    assert backend.authz is not None and backend.rate_limits is not None
    async with running_gateway(docs) as (url, _):
        client = RawClient(url)
        try:
            assert (await client.initialize()).status == 200
            listed = {t["name"] for t in (await client.request("tools/list")).result["tools"]}
            assert {n for n in listed if n.startswith("clock_")} == {"clock_echo"}
            assert (await call(client, "clock_echo", {"message": "hi"}))["result"]
            again = await call(client, "clock_echo", {"message": "hi"})
            assert again["error"]["code"] == -32029  # one call an hour
        finally:
            await client.aclose()
    in_cluster = quickstart_docs()
    server = resource(in_cluster, "MCPServer", "clock")
    for field in ("command", "args"):
        server["spec"].pop(field, None)
    server["spec"]["rateLimiting"] = {"shared": {"maxTokens": 1, "refillPeriod": "1h"}}
    result = validate(in_cluster)
    assert result.ok and all(b.rate_limits is None for b in result.plans[0].backends)


async def test_a_server_vmcp_starts_has_its_own_audit_even_when_the_gateways_is_off(
        tmp_path: Path) -> None:
    """An MCPServer's ``audit.enabled`` (its proxy's audit log, in ToolHive): the requests it
    serves are written to the gateway's audit log (``config.audit``'s file) although the
    gateway records nothing else."""
    log = tmp_path / "audit.jsonl"
    docs = quickstart_docs()
    resource(docs, "MCPServer", "clock")["spec"]["audit"] = {"enabled": True}
    resource(docs, "VirtualMCPServer")["spec"]["config"] = {
        "audit": {"enabled": False, "logFile": str(log)}}
    async with running_gateway(docs) as (url, _):
        client = RawClient(url)
        try:
            assert (await client.initialize()).status == 200
            await call(client, "notes_list_notes", {})
            await call(client, "clock_echo", {"message": "audited"})
            await call(client, "notes_list_notes", {})
            with trio.fail_after(10):
                while not log.exists() or not log.read_text().strip():
                    await trio.sleep(0.05)
            await trio.sleep(0.3)  # anything else would have been written by now too
        finally:
            await client.aclose()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["type"], e["metadata"]["extra"]["backend_name"]) for e in events] == [
        ("mcp_tool_call", "clock")], events
