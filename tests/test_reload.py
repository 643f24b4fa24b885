"""Editing the configuration of a running ``vmcp serve``: SIGHUP (and ``--watch``) reload it.

A valid change is applied while sessions go on: a backend added is started and a session open
before sees its tools (and hears ``list_changed``); one removed leaves the lists; one changed
is restarted. An invalid change is refused with every problem logged, and the old
configuration keeps serving. ``vmcp_reloads_total`` counts the outcomes.
"""

from __future__ import annotations

import copy
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio
import yaml

from vmcp_trio.http.client import HttpClient

from .gateway_helpers import SERVERS, RawClient, quickstart_docs
from .serve_helpers import Served, serving


def with_memo(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The quickstart plus ``memo``, a second notes server."""
    docs = copy.deepcopy(docs)
    docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
                    "metadata": {"name": "memo"},
                    "spec": {"groupRef": {"name": "quickstart"}, "command": sys.executable,
                             "args": [str(SERVERS / "notes_server.py")]}})
    return docs


def rewrite(served: Served, docs: list[dict[str, Any]]) -> None:
    (served.log_path.parent / "vmcp.yaml").write_text(yaml.safe_dump_all(docs))


async def tools(client: RawClient) -> set[str]:
    return {t["name"] for t in (await client.request("tools/list")).result["tools"]}


async def reloads(served: Served) -> dict[str, float]:
    http = HttpClient()
    _, _, body = await http.request("GET", served.base + "/metrics")
    await http.aclose()
    return {line.split('"')[1]: float(line.split()[-1]) for line in body.decode().splitlines()
            if line.startswith("vmcp_reloads_total{")}


async def wait_for(predicate: Any, seconds: float = 15) -> None:
    with trio.fail_after(seconds):
        while not await predicate():
            await trio.sleep(0.1)


async def test_sighup_applies_a_valid_change_and_keeps_the_old_one_on_an_invalid_one(
        tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path) as served:
        client = RawClient(served.url)
        await client.initialize()
        assert not any(name.startswith("memo_") for name in await tools(client))
        async with trio.open_nursery() as nursery:
            heard: list[str] = []

            async def listen() -> None:  # the session's GET stream
                reply = await client.get(stop_after=3, timeout=20)
                heard.extend(m["method"] for m in reply.messages)

            nursery.start_soon(listen)
            await trio.sleep(0.3)
            rewrite(served, with_memo(quickstart_docs()))
            served.process.send_signal(signal.SIGHUP)

            async def memo_listed() -> bool:
                return "memo_add_note" in await tools(client)

            await wait_for(memo_listed)
        assert "notifications/tools/list_changed" in heard
        added = await client.request("tools/call", {"name": "memo_add_note", "arguments": {
            "title": "t", "text": "x"}})
        assert "result" in added.messages[-1]
        assert "reloaded: backends added: memo" in served.log()

        broken = with_memo(quickstart_docs())
        broken[-1]["spec"]["incomingAuth"] = {"type": "sideways"}
        rewrite(served, broken)
        served.process.send_signal(signal.SIGHUP)

        async def refused() -> bool:
            return (await reloads(served)).get("invalid") == 1.0

        await wait_for(refused)
        assert "reload refused" in served.log() and "spec.incomingAuth.type" in served.log()
        assert "memo_add_note" in await tools(client)  # the old configuration serves

        rewrite(served, quickstart_docs())  # memo removed
        served.process.send_signal(signal.SIGHUP)

        async def memo_gone() -> bool:
            return "memo_add_note" not in await tools(client)

        await wait_for(memo_gone)
        echo = await client.request("tools/call", {"name": "clock_echo",
                                                   "arguments": {"message": "same session"}})
        assert echo.result["content"][0]["text"] == "same session"
        assert (await reloads(served)) == {"ok": 2.0, "invalid": 1.0}
        await client.aclose()


async def test_watch_reloads_when_the_files_change(tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path, "--watch") as served:
        client = RawClient(served.url)
        await client.initialize()
        changed = quickstart_docs()
        clock = next(d for d in changed if d["metadata"]["name"] == "clock")
        clock["spec"]["env"] = {"CLOCK_RELOADED": "1"}  # a changed backend: restarted
        rewrite(served, with_memo(changed))

        async def memo_listed() -> bool:
            return "memo_add_note" in await tools(client)

        await wait_for(memo_listed)
        assert "backends added: memo; changed: clock" in served.log()
        echo = await client.request("tools/call", {"name": "clock_echo",
                                                   "arguments": {"message": "restarted"}})
        assert echo.result["content"][0]["text"] == "restarted"
        await client.aclose()


def test_what_a_reload_changes() -> None:
    from vmcp_trio.app.reload import changes
    from vmcp_trio.resources.plan import (
        AggregationPlan,
        AnonymousIncoming,
        AuditSettings,
        BackendPlan,
        Bucket,
        GatewayPlan,
        HttpEndpoint,
        RateLimitRules,
        WebhookPlan,
        WebhooksPlan,
    )

    def plan(*backends: BackendPlan, **fields: Any) -> GatewayPlan:
        return GatewayPlan(name="g", namespace="ns", group="grp", incoming=AnonymousIncoming(),
                           backends=backends, **fields)

    a = BackendPlan("a", HttpEndpoint("http://a/mcp", "streamable-http"))
    b = BackendPlan("b", HttpEndpoint("http://b/mcp", "streamable-http"))
    b2 = BackendPlan("b", HttpEndpoint("http://b2/mcp", "streamable-http"))
    c = BackendPlan("c", HttpEndpoint("http://c/mcp", "streamable-http"))
    diff = changes(plan(a, b), plan(b2, c))
    assert (diff.added, diff.removed, diff.changed) == ({"c"}, {"a"}, {"b"})
    assert diff.gone == {"a", "b"} and diff.new == {"b", "c"}
    assert diff.describe() == "backends added: c; removed: a; changed: b"
    assert not changes(plan(a), plan(a)).describe()
    other = changes(plan(a), plan(a, aggregation=AggregationPlan(conflict_resolution="priority")))
    assert other.describe() == "aggregation, operational settings or composite tools"
    limited = changes(plan(a), plan(a, rate_limits=RateLimitRules(shared=Bucket(1, 1.0))))
    assert limited.describe() == "policies or rate limits"
    assert changes(plan(a), plan(a, audit=AuditSettings(enabled=True))).describe() == "audit"
    # What a backend has of its own at the gate rebuilds the gate and reconnects nothing.
    hooks = WebhooksPlan("ns/hooks", validating=(WebhookPlan("v", "https://v.example"),))
    for own in ({"rate_limits": RateLimitRules(shared=Bucket(1, 1.0))}, {"webhooks": hooks}):
        diff = changes(plan(a), plan(replace(a, **own)))
        assert (diff.changed, diff.policies) == (frozenset(), True), own


async def test_no_call_is_lost_across_a_reload_under_traffic(tmp_path: Path) -> None:
    """Official SDK clients (both eras) call clock without pause while a reload restarts clock
    (its env changed) and adds memo: every call succeeds, and the clients see memo's tools."""
    from mcp import Client

    with serving(quickstart_docs(), tmp_path) as served:
        results: dict[str, list[str]] = {"auto": [], "legacy": []}
        stop = trio.Event()

        async def caller(mode: str) -> None:
            async with Client(served.url, mode=mode, read_timeout_seconds=30) as client:
                while not stop.is_set():
                    answer = await client.call_tool("clock_echo", {"message": mode})
                    results[mode].append(answer.content[0].text)  # type: ignore[union-attr]
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert "memo_add_note" in names

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller, "auto")
            nursery.start_soon(caller, "legacy")
            await trio.sleep(0.5)
            changed = quickstart_docs()
            next(d for d in changed if d["metadata"]["name"] == "clock")["spec"]["env"] = {
                "CLOCK_GENERATION": "2"}
            rewrite(served, with_memo(changed))
            served.process.send_signal(signal.SIGHUP)

            async def reloaded() -> bool:
                return (await reloads(served)).get("ok") == 1.0

            await wait_for(reloaded)
            await trio.sleep(1.0)  # calls go on through the swap and the old clock's retirement
            stop.set()
        assert all(len(texts) > 5 for texts in results.values()), results
        assert all(text == mode for mode, texts in results.items() for text in texts)
        assert served.log().count("backend clock running") == 2  # restarted with its new env
