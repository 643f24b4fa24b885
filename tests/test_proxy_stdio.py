"""``vmcp proxy stdio``: a local MCP client over stdin/stdout, a remote server over HTTP.

The client is the official MCP Python SDK 2.x ``Client`` with its stdio transport, which starts
``python -m vmcp_trio proxy stdio`` as its server process, in both of its modes (``auto`` speaks
2026-07-28, ``legacy`` the handshake revisions). The remote is an SDK 2.x server over Streamable
HTTP in this process (``tests/fixtures/sdk_servers.py``), which records what it received.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from mcp import Client, types
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from .fixtures.sdk_servers import BackendState, ResourceServer, make_server, serving
from .helpers import free_port
from .proxy_helpers import bridge, leaves

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_stdio_client_reaches_the_remote_with_progress_and_credentials(
        mode: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("remote-token\n")
    server, state = make_server("remote")
    async with serving(server, state) as url, Client(stdio_client(bridge(
            url, "vmcp", "--remote-auth-bearer-token-file", str(token),
            "--remote-forward-headers", "X-Tenant=acme")), mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"add", "slow"} <= names
        seen: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append(done)

        result = await client.call_tool("slow", {"steps": 3}, progress_callback=progress)
        assert not result.is_error and seen == [1, 2, 3]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added.structured_content == {"total": 5, "backend": "remote"}
    assert state.authorizations and set(state.authorizations) == {"Bearer remote-token"}


async def serve_until_cancelled(port: int, state_holder: list[BackendState], *,
                                task_status: trio.TaskStatus[trio.CancelScope]) -> None:
    server, state = make_server("remote")
    state_holder.append(state)
    with trio.CancelScope() as scope:
        async with serving(server, state, port=port):
            task_status.started(scope)
            await trio.sleep_forever()


async def test_the_session_survives_a_restart_of_the_remote() -> None:
    """The remote forgets its sessions (a restart on the same port): the bridge initializes
    again with the client's own handshake and the call goes through."""
    port = free_port()
    states: list[BackendState] = []
    async with trio.open_nursery() as nursery:
        first = await nursery.start(serve_until_cancelled, port, states)
        async with Client(stdio_client(bridge(f"http://127.0.0.1:{port}/mcp", "vmcp")),
                          mode="legacy") as client:
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content
            first.cancel()
            await trio.sleep(0.3)
            second = await nursery.start(serve_until_cancelled, port, states)
            again = await client.call_tool("add", {"a": 2, "b": 2})
            assert again.structured_content == {"total": 4, "backend": "remote"}
            second.cancel()
    # Refused (404: an unknown session), the handshake replayed, sent again.
    assert states[1].methods == ["tools/call", "initialize", "tools/call"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_servers_questions_and_notifications_reach_the_stdio_client(mode: str) -> None:
    """Elicitation and sampling asked during a call, and a tools list_changed sent on its own
    (the GET stream, or a 2026-07-28 listen), cross the bridge; the client's answers go back."""
    asked: list[str] = []
    notified: list[object] = []

    async def on_elicitation(context: ClientRequestContext,
                             params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def on_sampling(context: ClientRequestContext, params: types.CreateMessageRequestParams
                          ) -> types.CreateMessageResult:
        asked.append("sampling")
        return types.CreateMessageResult(role="assistant", model="test-model", content=(
            types.TextContent(type="text", text="forty-two")))

    async def on_message(message: object) -> None:
        notified.append(message)

    server, state = make_server("remote")
    async with serving(server, state) as url, Client(
            stdio_client(bridge(url, "vmcp")), mode=mode, elicitation_callback=on_elicitation,
            sampling_callback=on_sampling, message_handler=on_message) as client:
        answered = await client.call_tool("ask", {"question": "colour?"})
        assert answered.content[0].text == "accept:blue"  # type: ignore[union-attr]
        sampled = await client.call_tool("sample", {"prompt": "the answer?"})
        assert "forty-two" in sampled.content[0].text  # type: ignore[union-attr]
        assert asked == ["elicitation", "sampling"]
        if mode == "legacy":  # the handshake client hears list changes on the GET stream
            await client.call_tool("grow", {})
            with trio.fail_after(10):
                while not any("ToolListChanged" in type(m).__name__ for m in notified):
                    await trio.sleep(0.05)


@pytest.mark.parametrize(("mode", "flags"), [
    ("auto", ()), ("legacy", ()), ("legacy", ("--protocol", "auto"))])
async def test_credentials_the_remote_refuses_are_an_error_not_a_wait(
        mode: str, flags: tuple[str, ...], tmp_path: Path) -> None:
    """The remote refuses the token with 401 and an OAuth error object (not JSON-RPC): the
    client's first request is answered with an error naming the status and the OAuth error,
    instead of the object being passed on and the client waiting for an answer by id; so too
    when the bridge's own probe of ``--protocol auto`` is what is refused."""
    token = tmp_path / "token"
    token.write_text("a-token-it-does-not-accept\n")
    server, state = make_server("remote", resource_server=ResourceServer(
        "http://127.0.0.1:9", "http://127.0.0.1:9/mcp", {"keys": []}))
    async with serving(server, state) as url:
        with trio.fail_after(20), pytest.raises(BaseExceptionGroup) as group:
            async with Client(stdio_client(bridge(
                    url, "vmcp", "--remote-auth-bearer-token-file", str(token), *flags)),
                    mode=mode):
                pass
    [refused] = [leaf for leaf in leaves(group.value) if isinstance(leaf, MCPError)]
    assert refused.error.code == -32603
    assert refused.error.message == ("vmcp proxy: the remote answered HTTP 401 (invalid_token: "
                                     "Authentication required)"), refused.error.message
    assert state.refused >= 1
