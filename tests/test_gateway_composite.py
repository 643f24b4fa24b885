"""Composite tools through a real gateway: steps across the quickstart's two stdio backends, an
elicitation answered by the official SDK client (a relayed request in 2025-11-25, an input
request in 2026-07-28), progress per step, each failure mode of a failing step, and a step the
authorization policies deny.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.types as types
import pytest
import trio
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from .gateway_helpers import RawClient, quickstart_docs, running_gateway

FILE_SUM: dict[str, Any] = {
    "name": "file_sum",
    "description": "Adds two numbers, asks before filing the sum as a note, echoes the note",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}},
                   "required": ["a", "b"]},
    "steps": [
        {"id": "sum", "tool": "clock_add",
         "arguments": {"a": "{{.params.a}}", "b": "{{.params.b}}"}},
        {"id": "confirm", "type": "elicitation", "dependsOn": ["sum"],
         "message": "File the sum {{.steps.sum.output.sum}}?",
         "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
         "onDecline": {"action": "skip_remaining"}},
        {"id": "note", "tool": "notes_add_note", "dependsOn": ["confirm"],
         "arguments": {"title": "sum", "text": "{{.steps.sum.output.sum}}"}},
        {"id": "echo", "tool": "clock.echo", "dependsOn": ["note"],
         "arguments": {"message": "{{.steps.note.output.text}}"}},
    ],
    "output": {"properties": {
        "sum": {"type": "number", "value": "{{.steps.sum.output.sum}}"},
        "filed": {"type": "string", "value": "{{.steps.echo.output.text}}",
                  "default": "not filed"}},
        "required": ["sum"]},
}


def fragile(action: str, **on_error: Any) -> dict[str, Any]:
    """A workflow whose first step fails (clock's ``fail`` tool answers ``isError``)."""
    return {
        "name": f"fragile_{action}", "description": f"a failing step, onError {action}",
        "steps": [
            {"id": "broken", "tool": "clock_fail", "arguments": {},
             "onError": {"action": action, **on_error},
             "defaultResults": {"text": "fallback"}},
            {"id": "after", "tool": "clock_echo", "dependsOn": ["broken"],
             "arguments": {"message": "after {{.steps.broken.output.text}}"}},
        ],
    }


def composite_docs(*tools: dict[str, Any], **incoming: Any) -> list[dict[str, Any]]:
    docs = copy.deepcopy(quickstart_docs())
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["config"] = {"compositeTools": list(tools)}
    vmcp["spec"]["incomingAuth"].update(incoming)
    return docs


@asynccontextmanager
async def sdk_client(url: str, mode: str, answer: str,
                     asked: list[str]) -> AsyncIterator[Client]:
    async def on_elicitation(context: ClientRequestContext,
                             params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={"ok": True}  # type: ignore[arg-type]
                                  if answer == "accept" else None)

    async with httpx2.AsyncClient(timeout=30) as http, Client(
            streamable_http_client(url, http_client=http), mode=mode,
            read_timeout_seconds=30, elicitation_callback=on_elicitation) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_composite_tool_across_two_backends_with_an_elicitation(mode: str) -> None:
    async with running_gateway(composite_docs(FILE_SUM)) as (url, _):
        asked: list[str] = []
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        with trio.fail_after(30):
            async with sdk_client(url, mode, "accept", asked) as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                assert tools["file_sum"].input_schema["required"] == ["a", "b"]
                assert tools["file_sum"].output_schema is not None
                result = await client.call_tool("file_sum", {"a": 2, "b": 3},
                                                progress_callback=on_progress)
                assert not result.is_error, result
                assert result.structured_content == {"sum": 5, "filed": "added note 1"}
                assert asked == ["File the sum 5?"]
                assert len(progress) >= 4 and progress[-1][0] == progress[-1][1]
                notes = await client.call_tool("notes_list_notes", {})
                assert text_of(notes) == "1: sum"


async def test_a_declined_elicitation_skips_the_remaining_steps() -> None:
    async with running_gateway(composite_docs(FILE_SUM)) as (url, _):
        asked: list[str] = []
        with trio.fail_after(30):
            async with sdk_client(url, "legacy", "decline", asked) as client:
                result = await client.call_tool("file_sum", {"a": 1, "b": 1})
                assert not result.is_error, result
                assert result.structured_content == {"sum": 2, "filed": "not filed"}
                assert text_of(await client.call_tool("notes_list_notes", {})) == "no notes"


@pytest.mark.parametrize(("action", "options", "error", "text"), [
    ("abort", {}, True, "step 'broken'"),
    ("continue", {}, False, "after fallback"),
    ("retry", {"retryCount": 2, "retryDelay": "10ms"}, True, "step 'broken'"),
])
async def test_a_failing_step_under_each_failure_mode(action: str, options: dict[str, Any],
                                                      error: bool, text: str) -> None:
    async with running_gateway(composite_docs(fragile(action, **options))) as (url, _):
        client = RawClient(url)
        await client.initialize()
        reply = await client.request("tools/call", {"name": f"fragile_{action}",
                                                    "arguments": {}})
        result = reply.result
        assert result.get("isError", False) is error, result
        assert text in result["content"][0]["text"], result
        if error:
            assert "this tool always fails" in result["content"][0]["text"]
        await client.aclose()


async def test_a_step_the_policies_deny_fails_the_workflow() -> None:
    just_note = {"name": "just_note", "description": "files a note",
                 "steps": [{"id": "note", "tool": "notes_add_note",
                            "arguments": {"title": "t", "text": "x"}}]}
    policies = ['permit(principal, action == Action::"call_tool", resource);',
                'forbid(principal, action == Action::"call_tool", '
                'resource == Tool::"notes_add_note");']
    docs = composite_docs(just_note, authzConfig={"type": "inline",
                                                  "inline": {"policies": policies}})
    async with running_gateway(docs) as (url, _):
        client = RawClient(url)
        await client.initialize()
        reply = await client.request("tools/call", {"name": "just_note", "arguments": {}})
        assert reply.result["isError"] is True
        assert "call denied by authorization policy" in reply.result["content"][0]["text"]
        listed = await client.request("tools/call", {"name": "notes_list_notes",
                                                     "arguments": {}})
        assert listed.result["content"][0]["text"] == "no notes"
        await client.aclose()


async def test_with_every_backend_tool_hidden_clients_see_the_composite_tools_only() -> None:
    """excludeAllTools: tools/list holds the composite tools alone, a client cannot call a
    backend tool, and the composite tool's steps still reach them (as ``<backend>.<tool>``)."""
    summed = {"name": "sum_twice", "description": "adds, then adds again",
              "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
              "steps": [{"id": "one", "tool": "clock.add", "arguments": {"a": "{{.params.a}}",
                                                                         "b": 1}},
                        {"id": "two", "tool": "clock.add", "dependsOn": ["one"],
                         "arguments": {"a": "{{.steps.one.output.sum}}", "b": 1}}],
              "output": {"properties": {"sum": {"type": "number",
                                                "value": "{{.steps.two.output.sum}}"}}}}
    docs = composite_docs(summed)
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["aggregation"] = {"excludeAllTools": True}
    async with running_gateway(docs) as (url, _):
        with trio.fail_after(30):
            async with sdk_client(url, "legacy", "accept", []) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["sum_twice"]
                result = await client.call_tool("sum_twice", {"a": 1})
                assert not result.is_error and result.structured_content == {"sum": 3}
                with pytest.raises(MCPError, match="Unknown tool: clock_add"):
                    await client.call_tool("clock_add", {"a": 1, "b": 1})
