"""``@modelcontextprotocol/server-everything`` (the upstream reference server, Node) behind vmcp.

The same checks run with it reached over Streamable HTTP (a subprocess on a free loopback port,
kept to 127.0.0.1 by ``tests/peers/force-loopback.cjs``, started once per module) and over stdio
(an ``MCPServer`` whose ``spec.command`` is the Node binary, started and supervised by vmcp with
its minimal environment), each with the SDK 2.x ``Client`` in both modes, and with the ``clock``
example server beside it so names are prefixed. Its ``get-env`` tool is never called: it would
print the environment.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import trio
from mcp import Client
from mcp.client.session import ClientRequestContext

from .gateway_helpers import SERVERS, running_gateway
from .helpers import free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "tests" / "peers"
EVERYTHING = PEERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / (
    "index.js")
PRELOAD = PEERS / "force-loopback.cjs"
GROUP = "peers"
TIMEOUT = 30
REQUEST_TIMEOUT = 10.0

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


@pytest.fixture(scope="module")
def node() -> str:
    """The Node >= 22 binary the npm peers were installed with."""
    if not EVERYTHING.exists():
        pytest.fail(f"{EVERYTHING} is missing: run `make peers` (scripts/peers.py)")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers.py"), "--print-node"],
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def everything_http(node: str) -> Iterator[str]:
    """server-everything over Streamable HTTP for this module; yields its URL."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "NODE_OPTIONS": f"--require {PRELOAD}"}
    process = subprocess.Popen([node, str(EVERYTHING), "streamableHttp"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"server-everything exited with {process.returncode}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "server-everything did not listen in 30s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process, 5)


def _docs(everything_spec: dict[str, Any]) -> list[dict[str, Any]]:
    api = "toolhive.stacklok.dev/v1alpha1"
    group = {"groupRef": {"name": GROUP}}
    return [
        {"apiVersion": api, "kind": "MCPGroup", "metadata": {"name": GROUP}},
        {"apiVersion": api, "kind": "MCPServer", "metadata": {"name": "everything"},
         "spec": {**group, **everything_spec}},
        {"apiVersion": api, "kind": "MCPServer", "metadata": {"name": "clock"},
         "spec": {**group, "command": sys.executable,
                  "args": [str(SERVERS / "clock_server.py")]}},
        {"apiVersion": api, "kind": "VirtualMCPServer", "metadata": {"name": "peers"},
         "spec": {**group, "incomingAuth": {"type": "anonymous"}}},
    ]


@pytest.fixture(params=["streamableHttp", "stdio"])
def everything_spec(request: pytest.FixtureRequest, node: str) -> dict[str, Any]:
    """The MCPServer spec of server-everything: its URL, or the command vmcp runs."""
    if request.param == "stdio":
        return {"command": node, "args": [str(EVERYTHING), "stdio"]}
    return {"url": request.getfixturevalue("everything_http")}


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def sampling_client(url: str, mode: str,
                          asked: list[types.CreateMessageRequestParams]
                          ) -> AsyncIterator[Client]:
    """An SDK client that declares sampling and answers every sampling request the same way."""

    async def on_sampling(context: ClientRequestContext,
                          params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="a sampled answer"),
            model="test-model", stop_reason="endTurn")

    async with Client(url, mode=mode, read_timeout_seconds=REQUEST_TIMEOUT,
                      sampling_callback=on_sampling) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    assert texts, result
    return texts[0]


async def test_everything_behind_vmcp(everything_spec: dict[str, Any], mode: str) -> None:
    """Through vmcp, server-everything (over HTTP or stdio) is one client's server among
    others: its tools are listed as ``everything_<tool>``, calls are routed to it with their
    results intact (text and structured content), its long-running tool's progress reaches the
    progress callback with its values, its sampling tool's ``sampling/createMessage`` reaches
    the client's sampling callback and the answer goes back to it, and its resources (static
    and templated, text and blob) and prompts (with completion) are served."""
    asked: list[types.CreateMessageRequestParams] = []
    with trio.fail_after(TIMEOUT):
        async with running_gateway(_docs(everything_spec)) as (url, _), \
                sampling_client(url, mode, asked) as client:
            assert client.protocol_version == ("2026-07-28" if mode == "auto" else
                                               "2025-11-25")
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"everything_echo", "everything_get-sum",
                    "everything_trigger-long-running-operation",
                    "everything_trigger-sampling-request", "everything_get-structured-content",
                    "clock_add"} <= names
            assert all(name.startswith(("everything_", "clock_")) for name in names)

            echo = await client.call_tool("everything_echo", {"message": "through vmcp"})
            assert text_of(echo) == "Echo: through vmcp"
            total = await client.call_tool("everything_get-sum", {"a": 2, "b": 40})
            assert text_of(total) == "The sum of 2 and 40 is 42."
            weather = await client.call_tool("everything_get-structured-content",
                                             {"location": "Chicago"})
            assert weather.structured_content is not None
            assert set(weather.structured_content) == {"temperature", "conditions", "humidity"}

            steps: list[tuple[float, float | None]] = []

            async def on_progress(progress: float, total: float | None,
                                  message: str | None) -> None:
                steps.append((progress, total))

            long_running = await client.call_tool(
                "everything_trigger-long-running-operation", {"duration": 0.6, "steps": 3},
                progress_callback=on_progress)
            assert text_of(long_running) == (
                "Long running operation completed. Duration: 0.6 seconds, Steps: 3.")
            assert steps == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]

            sampled = await client.call_tool("everything_trigger-sampling-request",
                                             {"prompt": "what is vmcp?", "maxTokens": 20})
            assert len(asked) == 1
            request = asked[0]
            assert request.max_tokens == 20
            assert request.system_prompt == "You are a helpful test server."
            assert request.messages[0].content == types.TextContent(
                type="text", text="Resource trigger-sampling-request context: what is vmcp?")
            head, _, body = text_of(sampled).partition("\n")
            assert head.startswith("LLM sampling result:")
            assert json.loads(body) == {"model": "test-model", "role": "assistant",
                                        "stopReason": "endTurn",
                                        "content": {"type": "text", "text": "a sampled answer"}}

            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            architecture = "demo://resource/static/document/architecture.md"
            assert architecture in uris
            templates = {t.uri_template for t in
                         (await client.list_resource_templates()).resource_templates}
            assert "demo://resource/dynamic/text/{resourceId}" in templates
            document = (await client.read_resource(architecture)).contents[0]
            assert isinstance(document, types.TextResourceContents)
            assert document.mime_type == "text/markdown" and "Architecture" in document.text
            text = (await client.read_resource("demo://resource/dynamic/text/3")).contents[0]
            assert isinstance(text, types.TextResourceContents)
            assert text.text.startswith("Resource 3: This is a plaintext resource")
            blob = (await client.read_resource("demo://resource/dynamic/blob/2")).contents[0]
            assert isinstance(blob, types.BlobResourceContents) and blob.blob

            prompt = await client.get_prompt("everything_args-prompt", {"city": "Oslo"})
            content = prompt.messages[0].content
            assert isinstance(content, types.TextContent)
            assert content.text == "What's weather in Oslo?"
            completion = await client.complete(
                types.PromptReference(type="ref/prompt", name="everything_completable-prompt"),
                {"name": "department", "value": "E"})
            assert completion.completion.values == ["Engineering"]


async def test_client_capabilities_reach_an_http_backend(everything_http: str) -> None:
    """vmcp initializes an HTTP backend with the client's own capabilities: server-everything
    offers its sampling tool to a client that declared sampling, and not to one that did not."""
    with trio.fail_after(TIMEOUT):
        async with running_gateway(_docs({"url": everything_http})) as (url, _):
            async with Client(url, mode="legacy", read_timeout_seconds=REQUEST_TIMEOUT) as plain:
                plain_names = {tool.name for tool in (await plain.list_tools()).tools}
            async with sampling_client(url, "legacy", []) as sampling:
                sampling_names = {tool.name for tool in (await sampling.list_tools()).tools}
    assert "everything_echo" in plain_names
    assert "everything_trigger-sampling-request" not in plain_names
    assert "everything_trigger-sampling-request" in sampling_names
