"""Skills (``io.modelcontextprotocol/skills``) through the gateway: merged from the backends that
declare the extension, their URIs presented under ``prefix``, routed back, cached as their
``ttlMs`` says, and filtered by policies; the official conformance scenarios through a prefixing
gateway on both protocol eras.

The backends are MCP Python SDK servers with :mod:`tests.fixtures.skills_extension` (no
installable server serves skills).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from mcp.server.mcpserver import MCPServer
from mcp.types import ResourceUpdatedNotification

from vmcp_trio.gateway.skills import SkillUris, merge_skills, present_result

from .fixtures.sdk_servers import BackendState, make_server, serving
from .fixtures.skills_extension import SKILLS, Skill, SkillsExtension
from .gateway_helpers import RawClient, StatelessClient, running_gateway

API = "toolhive.stacklok.dev/v1beta1"
EXTENSION = "io.modelcontextprotocol/skills"
PDF = "skill://pdf-processing/SKILL.md"


def entry(uri: str, *files: str) -> dict[str, Any]:
    return {"uri": uri, "frontmatter": {"name": uri.split("/")[-2], "description": "d"},
            "resources": [{"uri": uri, "digest": "sha256:" + "0" * 64, "size": 1},
                          *({"uri": f, "digest": "sha256:" + "1" * 64, "size": 2}
                            for f in files)]}


# --- merging, sans-IO ----------------------------------------------------------------------------


def test_prefix_presents_every_skill_uri_under_its_backend() -> None:
    uris = SkillUris(frozenset({"alpha", "beta"}))
    same = entry(PDF, "skill://pdf-processing/references/FORMS.md")
    index, conflicts = merge_skills([("alpha", [same], {"ttlMs": 5000, "cacheScope": "public"}),
                                     ("beta", [same], {"ttlMs": 3000, "cacheScope": "public"})],
                                    uris, manual=False)
    assert conflicts == []
    assert [skill["uri"] for skill in index.skills] == [
        "skill://alpha/pdf-processing/SKILL.md", "skill://beta/pdf-processing/SKILL.md"]
    assert [r["uri"] for r in index.skills[1]["resources"]] == [
        "skill://beta/pdf-processing/SKILL.md",
        "skill://beta/pdf-processing/references/FORMS.md"]
    assert index.skills[1]["resources"][1]["digest"] == same["resources"][1]["digest"]
    assert index.skills[0]["frontmatter"] == same["frontmatter"]
    assert (index.ttl_ms, index.private) == (3000, False)
    assert index.target("skill://beta/pdf-processing/references") == (
        "beta", "skill://pdf-processing/references")
    assert index.target("skill://gamma/pdf-processing/SKILL.md") is None  # not a backend
    read = present_result("resources/read", "beta", {"contents": [
        {"uri": "skill://pdf-processing/SKILL.md", "text": "x"}]}, uris)
    assert read["contents"][0]["uri"] == "skill://beta/pdf-processing/SKILL.md"


def test_priority_gives_a_uri_to_the_first_and_manual_to_nobody() -> None:
    first, second = entry(PDF), {**entry(PDF), "frontmatter": {"name": "pdf-processing",
                                                               "description": "other"}}
    listings = [("alpha", [first], {"ttlMs": 0}), ("beta", [second], {"ttlMs": 0})]
    index, conflicts = merge_skills(listings, SkillUris(), manual=False)
    assert index.skills == (first,) and conflicts == []
    assert index.target("skill://pdf-processing/references/FORMS.md") == (
        "alpha", "skill://pdf-processing/references/FORMS.md")
    assert index.private  # no cacheScope said: private
    index, conflicts = merge_skills(listings, SkillUris(), manual=True)
    assert index.skills == () and index.target(PDF) is None
    assert conflicts == [f"skill {PDF} is offered by alpha, beta: left out "
                         "(conflictResolution manual)"]


# --- a real gateway ------------------------------------------------------------------------------


def skills_server(name: str, skills: Sequence[Skill] = SKILLS, **options: Any) -> MCPServer:
    return MCPServer(name, extensions=[SkillsExtension(skills, **options)])


def docs_for(urls: dict[str, str], conflict: str = "prefix",
             **incoming: Any) -> list[dict[str, Any]]:
    return [
        {"apiVersion": API, "kind": "MCPGroup", "metadata": {"name": "team"}},
        *({"apiVersion": API, "kind": "MCPServer", "metadata": {"name": name},
           "spec": {"groupRef": {"name": "team"}, "url": url}} for name, url in urls.items()),
        {"apiVersion": API, "kind": "VirtualMCPServer", "metadata": {"name": "gw"},
         "spec": {"groupRef": {"name": "team"},
                  "incomingAuth": {"type": "anonymous", **incoming},
                  "config": {"aggregation": {"conflictResolution": conflict,
                                             "conflictResolutionConfig": {
                                                 "priorityOrder": list(urls)}}}}},
    ]


@asynccontextmanager
async def two_backends(beta_skills: Sequence[Skill] = SKILLS, **options: Any
                       ) -> AsyncIterator[tuple[dict[str, str], dict[str, BackendState]]]:
    states = {"alpha": BackendState("alpha"), "beta": BackendState("beta")}
    async with serving(skills_server("alpha", **options), states["alpha"]) as alpha, \
            serving(skills_server("beta", beta_skills, **options), states["beta"]) as beta:
        yield {"alpha": alpha, "beta": beta}, states


async def test_two_backends_serving_the_same_skills_both_show_under_prefix() -> None:
    """Both backends serve ``skill://pdf-processing/SKILL.md``: under ``prefix`` both are
    listed, each under its backend's name, with the digests the backend gave; a read, a
    directory read and ``skills/get`` of a presented URI reach that backend and answer with
    presented URIs; the bytes read match the listed digest."""
    async with two_backends() as (urls, _), running_gateway(docs_for(urls)) as (url, _gw):
        client = RawClient(url)
        try:
            opened = await client.initialize()
            capabilities = opened.messages[-1]["result"]["capabilities"]
            assert capabilities["extensions"][EXTENSION] == {"directoryRead": True}
            listed = (await client.request("skills/list")).result
            by_uri = {skill["uri"]: skill for skill in listed["skills"]}
            assert set(by_uri) == {f"skill://{backend}/{path}" for backend in ("alpha", "beta")
                                   for path in ("pdf-processing/SKILL.md",
                                                "acme/billing/refunds/SKILL.md")}
            assert 0 < listed["ttlMs"] <= 60_000 and listed["cacheScope"] == "public"
            forms = "skill://beta/pdf-processing/references/FORMS.md"
            (digest,) = [item["digest"] for item in
                         by_uri["skill://beta/pdf-processing/SKILL.md"]["resources"]
                         if item["uri"] == forms]
            read = (await client.request("resources/read", {"uri": forms})).result
            (content,) = read["contents"]
            assert content["uri"] == forms
            assert digest == "sha256:" + hashlib.sha256(content["text"].encode()).hexdigest()
            children = (await client.request("resources/directory/read", {
                "uri": "skill://alpha/pdf-processing"})).result["resources"]
            assert {(c["uri"], c["mimeType"]) for c in children} == {
                ("skill://alpha/pdf-processing/SKILL.md", "text/markdown"),
                ("skill://alpha/pdf-processing/references", "inode/directory")}
            got = (await client.request("skills/get", {
                "uri": "skill://beta/acme/billing/refunds/SKILL.md"})).result["skill"]
            assert got == by_uri["skill://beta/acme/billing/refunds/SKILL.md"]
            unknown = await client.request("skills/get", {"uri": "skill://beta/nothing/SKILL.md"})
            assert unknown.messages[-1]["error"]["code"] == -32602
            not_ours = await client.request("skills/get", {"uri": "skill://elsewhere/SKILL.md"})
            assert not_ours.messages[-1]["error"]["code"] == -32602
            resources = (await client.request("resources/list")).result["resources"]
            listed_md = {r["uri"]: r for r in resources if r["uri"].endswith("SKILL.md")}
            assert listed_md["skill://alpha/pdf-processing/SKILL.md"]["name"] == "pdf-processing"
        finally:
            await client.aclose()


async def test_priority_keeps_the_uris_and_the_first_backends_skill() -> None:
    """Under ``priority`` the URIs are the backends' own: the skill both serve is the first
    backend's in ``priorityOrder`` (here beta, whose description differs), on 2026-07-28 too."""
    beta_skills = [Skill(s.root, s.name, "beta's " + s.description, s.files) for s in SKILLS]
    async with two_backends(beta_skills) as (urls, _):
        ordered = {"beta": urls["beta"], "alpha": urls["alpha"]}
        async with running_gateway(docs_for(ordered, "priority")) as (url, _gw):
            client = StatelessClient(url)
            try:
                reply = await client.post("skills/list")
                result = reply.body["result"]
                assert result["resultType"] == "complete"
                assert {s["uri"]: s["frontmatter"]["description"] for s in result["skills"]} == {
                    skill.uri: "beta's " + skill.description for skill in SKILLS}
                got = (await client.post("skills/get", {"uri": PDF})).body["result"]
                assert got["skill"]["frontmatter"]["description"].startswith("beta's")
                assert {"ttlMs", "cacheScope"} <= set(got)
            finally:
                await client.http.aclose()


async def test_the_gateway_keeps_skills_as_long_as_their_ttl_says() -> None:
    """A backend's ``ttlMs`` is honoured in the gateway's own cache: listed once while fresh
    (60 s), listed again on every ``skills/list`` when 0."""
    for ttl_ms, relisted in ((60_000, False), (0, True)):
        async with two_backends(ttl_ms=ttl_ms) as (urls, states), \
                running_gateway(docs_for(urls)) as (url, _gw):
            client = RawClient(url)
            try:
                await client.initialize()
                counts = []
                for _ in range(3):
                    assert len((await client.request("skills/list")).result["skills"]) == 4
                    counts.append(states["alpha"].methods.count("skills/list"))
            finally:
                await client.aclose()
            pages = len(SKILLS)  # the fixture's pages hold one skill each
            assert counts[1:] == ([counts[0] + pages, counts[0] + 2 * pages] if relisted
                                  else [counts[0], counts[0]]), (ttl_ms, counts)


async def test_policies_decide_which_skills_a_caller_sees_and_reads() -> None:
    """The gateway's Cedar policies see a skill as a ``read_resource`` of its URI: a caller
    allowed alpha's skills only lists, gets and reads alpha's, is refused beta's (403), and the
    list says ``cacheScope: private``."""
    policy = ('permit(principal, action == Action::"read_resource", resource) '
              'when { resource.uri like "skill://alpha/*" };')
    async with two_backends() as (urls, _):
        docs = docs_for(urls, authzConfig={"type": "inline", "inline": {"policies": [policy]}})
        async with running_gateway(docs) as (url, _gw):
            client = RawClient(url)
            try:
                await client.initialize()
                listed = (await client.request("skills/list")).result
                assert {s["uri"] for s in listed["skills"]} == {
                    "skill://alpha/pdf-processing/SKILL.md",
                    "skill://alpha/acme/billing/refunds/SKILL.md"}
                assert listed["cacheScope"] == "private"
                for method in ("skills/get", "resources/read"):
                    denied = await client.request(method, {
                        "uri": "skill://beta/pdf-processing/SKILL.md"})
                    assert denied.status == 403, (method, denied)
                allowed = await client.request("resources/directory/read", {
                    "uri": "skill://alpha/pdf-processing/references"})
                assert [c["uri"] for c in allowed.result["resources"]] == [
                    "skill://alpha/pdf-processing/references/FORMS.md"]
            finally:
                await client.aclose()


async def test_a_gateway_without_skill_backends_declares_no_skills() -> None:
    async with serving(MCPServer("plain")) as plain, \
            running_gateway(docs_for({"plain": plain})) as (url, _gw):
        client = RawClient(url)
        try:
            opened = await client.initialize()
            capabilities = opened.messages[-1]["result"]["capabilities"]
            assert EXTENSION not in capabilities.get("extensions", {})
            with trio.fail_after(10):
                listed = (await client.request("skills/list")).result
            assert listed["skills"] == []
        finally:
            await client.aclose()


async def test_the_conformance_scenarios_pass_through_a_prefixing_gateway(tmp_path: Path) -> None:
    """The suite's Skills scenarios against a gateway that presents two backends' skills under
    their names (2026-07-28, and the handshake wire where the gateway declares the extension in
    its ``initialize``): no check fails, and the listing is checked, not skipped. The one
    warning is the suite's "names SHOULD be unique": both backends serve skills of the same
    names, which the presented URIs tell apart (the spec's way)."""
    from .test_conformance import PEERS, SKILLS_SCENARIOS, SUITE_SCRIPTS, _node, read_results

    node = await trio.to_thread.run_sync(_node)
    async with two_backends() as (urls, _), running_gateway(docs_for(urls)) as (url, _gw):
        for wire in ((), ("--spec-version", "2025-11-25", "--force")):
            for scenario in SKILLS_SCENARIOS:
                output = tmp_path / f"{scenario}{len(wire)}"
                with trio.fail_after(60):
                    await trio.run_process(
                        [node, str(SUITE_SCRIPTS["0.2"]), "server", "--url", url, "-o",
                         str(output), "--timeout", "30000", "--scenario", scenario, *wire],
                        cwd=PEERS, capture_stdout=True, capture_stderr=True, check=False)
                run = read_results(output)[scenario]
                assert {(c["id"], c["status"]) for c in run.problems} <= {
                    ("sep-2640-names-should-be-unique", "WARNING")}, (wire, run.describe())
                assert run.checks
                skipped = [c["id"] for c in run.checks if c["status"] == "SKIPPED"]
                assert all("cache-attributes" in check for check in skipped), (wire, skipped)


async def test_a_subscription_to_a_presented_skill_file() -> None:
    """Under ``prefix`` a subscription to ``skill://alpha/...`` reaches alpha under its own URI,
    and alpha's update reaches the client under the presented one (a 2026-07-28 listen stream,
    and a handshake ``resources/subscribe``)."""
    from .test_sdk_interop import connect

    presented, own = "skill://alpha/pdf-processing/SKILL.md", PDF
    alpha, state = make_server("alpha", extensions=[SkillsExtension()])
    async with serving(alpha, state) as alpha_url, \
            running_gateway(docs_for({"alpha": alpha_url})) as (url, _gw):
        async with connect(url, "auto") as (client, _), \
                client.listen(resource_subscriptions=[presented]) as subscription:
            assert subscription.honored.resource_subscriptions == [presented]
            assert state.listens[-1] == [own]
            await client.call_tool("alpha_touch", {"uri": own})
            with trio.fail_after(5):
                async for event in subscription:
                    if getattr(event, "uri", None) is not None:
                        assert str(event.uri) == presented
                        break
        async with connect(url, "legacy") as (client, seen):
            await client.subscribe_resource(presented)
            assert own in (state.listens[-1] if state.listens else []) or \
                own in state.subscriptions
            await client.call_tool("alpha_touch", {"uri": own})
            updated = await seen.wait_for(lambda m: isinstance(m, ResourceUpdatedNotification))
            assert str(updated.params.uri) == presented


async def test_the_gateway_lists_skills_without_reading_their_files(tmp_path: Path) -> None:
    """The suite's client scenario ``sep-2640-client-no-prefetch`` with vmcp as the client of
    its server (``tests/fixtures/gateway_skills_client.py``: vmcp serve in front of it, asked
    for ``skills/list``): the listing reaches the server, no skill file is read."""
    import json
    import sys

    from .test_conformance import PEERS, SUITE_SCRIPTS, _node

    node = await trio.to_thread.run_sync(_node)
    script = Path(__file__).parent / "fixtures" / "gateway_skills_client.py"
    with trio.fail_after(90):
        await trio.run_process(
            [node, str(SUITE_SCRIPTS["0.2"]), "client", "--command",
             f"{sys.executable} {script}", "--scenario", "sep-2640-client-no-prefetch",
             "-o", str(tmp_path)], cwd=PEERS, capture_stdout=True, capture_stderr=True,
            check=False)
    (checks_file,) = tmp_path.glob("sep-2640-client-no-prefetch-*/checks.json")
    statuses = {check["id"]: check["status"]
                for check in json.loads(checks_file.read_text(encoding="utf-8"))}
    assert statuses.get("sep-2640-host-no-prefetch") == "SUCCESS", statuses
    assert not set(statuses.values()) & {"FAILURE", "WARNING"}, statuses
