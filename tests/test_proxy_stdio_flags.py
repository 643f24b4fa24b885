"""``vmcp proxy stdio``'s own flags, with the official MCP Python SDK client over stdio and an SDK
server as the remote (``tests/fixtures/sdk_servers.py``, recording what it received):
``--ignore-tool``, ``--keep-alive``/``--ping-interval`` and ``--remote-forward-headers-file``
(with ``${VAR}`` from the environment)."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from .fixtures.sdk_servers import make_server, serving
from .helpers import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


def bridge(url: str, *flags: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, cwd=ROOT, env=env, args=[
        "-m", "vmcp_trio", "proxy", "stdio", "--target-uri", url, *flags])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_ignored_tools_are_neither_listed_nor_called(mode: str) -> None:
    """``--ignore-tool`` globs (``*``, case-insensitive) hide the remote's tools from the
    client, and a call to one is refused without reaching the remote."""
    server, state = make_server("remote")
    async with serving(server, state) as url, Client(stdio_client(bridge(
            url, "--ignore-tool", "sl*", "--ignore-tool", "ADD")), mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "touch" in names and not names & {"slow", "add"}, names
        with pytest.raises(MCPError) as refused:
            await client.call_tool("add", {"a": 1, "b": 2})
        assert refused.value.error.message == 'Tool "add" is not available'
        assert (await client.call_tool("touch", {"uri": "remote://static"})).content
    assert state.methods.count("tools/call") == 1  # touch's: add never reached the remote


async def test_keep_alive_pings_the_remote_while_the_session_is_open() -> None:
    server, state = make_server("remote")
    async with serving(server, state) as url, Client(stdio_client(bridge(
            url, "--ping-interval", "200ms")), mode="legacy") as client:
        await client.list_tools()
        with trio.fail_after(10):
            while state.methods.count("ping") < 3:
                await trio.sleep(0.1)
        assert (await client.call_tool("touch", {"uri": "remote://static"})).content
    sessions = {session for method, session in zip(state.methods, state.sessions, strict=True)
                if method == "ping"}
    assert len(sessions) == 1 and "" not in sessions  # in the client's session


async def test_headers_from_a_file_with_environment_variables(tmp_path: Path) -> None:
    headers = tmp_path / "headers"
    headers.write_text("# the tenant and its key\nX-Tenant: acme\n\nX-Api-Key: ${REMOTE_KEY}\n")
    server, state = make_server("remote")
    env = {**os.environ, "REMOTE_KEY": "k-123"}
    async with serving(server, state) as url, Client(stdio_client(bridge(
            url, "--remote-forward-headers-file", str(headers), env=env)),
            mode="legacy") as client:
        await client.list_tools()
    assert state.headers and all(h.get("x-tenant") == "acme" and h.get("x-api-key") == "k-123"
                                 for h in state.headers)


@pytest.mark.parametrize(("content", "flags", "message"), [
    ("X-Api-Key: ${NOT_SET_ANYWHERE}\n", (),
     "--remote-forward-headers-file {path}:1 X-Api-Key: the environment variable "
     "'NOT_SET_ANYWHERE' is not set"),
    ("X-Api-Key abc\n", (), "--remote-forward-headers-file {path}:1: not 'Name: Value'"),
    ("", ("--remote-forward-headers", "X-Key=${NOT_SET_ANYWHERE}"),
     "--remote-forward-headers X-Key: the environment variable 'NOT_SET_ANYWHERE' is not set"),
    ("", ("--ignore-tool", "**"), "--ignore-tool '**' would hide every tool"),
    ("", ("--ping-interval", "0s"), "--ping-interval must be more than 0s"),
    ("", ("--body-timeout", "0s"), "--body-timeout must be more than 0s"),
])
def test_mistakes_are_one_line_and_exit_2(tmp_path: Path, content: str, flags: tuple[str, ...],
                                          message: str) -> None:
    path = tmp_path / "headers"
    path.write_text(content)
    extra = ["--remote-forward-headers-file", str(path)] if content else []
    env = {k: v for k, v in os.environ.items() if k != "NOT_SET_ANYWHERE"}
    done = subprocess.run([sys.executable, "-m", "vmcp_trio", "proxy", "stdio", "--target-uri",
                           "http://127.0.0.1:9/mcp", *extra, *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert message.format(path=path) in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (("--remote-auth", "--remote-auth-client-credentials"),
     "--remote-auth-client-credentials needs --remote-auth-client-id and its secret"),
    (("--remote-auth", "--remote-auth-client-id", "c", "--remote-auth-client-key-file",
      "/nonexistent/key.pem"), "--remote-auth-client-key-file /nonexistent/key.pem: cannot read"),
    (("--remote-auth", "--remote-auth-client-id", "c", "--remote-auth-client-key-file",
      "{junk}"), "no PEM private key"),
    (("--remote-auth-client-credentials",), "--remote-auth-client-credentials needs "
                                            "--remote-auth"),
    (("--remote-auth", "--remote-auth-idp-token-url", "https://idp.example.com/token"),
     "--remote-auth-idp-token-url, --remote-auth-idp-client-id and --remote-auth-id-token-file "
     "go together"),
    (("--remote-auth", "--remote-auth-idp-token-url", "https://idp.example.com/token",
      "--remote-auth-idp-client-id", "desktop", "--remote-auth-id-token-file", "{junk}"),
     "--remote-auth-idp-token-url needs --remote-auth-client-id"),
    (("--remote-auth", "--remote-auth-device-code", "--remote-auth-client-credentials",
      "--remote-auth-client-id", "c", "--remote-auth-client-key-file", "{key}"),
     "--remote-auth-device-code, --remote-auth-client-credentials, "
     "--remote-auth-idp-token-url and --remote-auth-assertion-file are alternatives"),
    (("--remote-auth", "--remote-auth-assertion-file", "{junk}"),
     "--remote-auth-assertion-file needs --remote-auth-client-id"),
])
def test_client_credentials_mistakes_are_one_line(tmp_path: Path, flags: tuple[str, ...],
                                                  message: str) -> None:
    from vmcp_trio.authserver.keygen import generate_signing_key

    junk, key = tmp_path / "junk.pem", tmp_path / "key.pem"
    junk.write_text("not a key\n")
    key.write_bytes(generate_signing_key("ec"))
    args = [flag.format(junk=junk, key=key) for flag in flags]
    done = subprocess.run([sys.executable, "-m", "vmcp_trio", "proxy", "stdio", "--target-uri",
                           "http://127.0.0.1:9/mcp", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_client_assertion_is_signed_for_the_authorization_server() -> None:
    """``private_key_jwt``: ``iss`` and ``sub`` the client, ``aud`` the issuer, a fresh
    ``jti``, a minute of validity, signed with the client's key (ES256 for P-256)."""
    import time

    from vmcp_trio.auth.jwt import parse_jws, verify_signature
    from vmcp_trio.auth.oauth.tokens import ClientCredentials, client_assertion
    from vmcp_trio.auth.signing import new_key

    key = new_key()
    credentials = ClientCredentials("my-client", None, "private_key_jwt", key)
    first, second = (parse_jws(client_assertion(credentials, "https://as.example"))
                     for _ in range(2))
    verify_signature(first, key.verify_key)
    assert first.header["alg"] == "ES256"
    claims = first.claims
    assert (claims["iss"], claims["sub"], claims["aud"]) == (
        "my-client", "my-client", "https://as.example")
    assert claims["exp"] - claims["iat"] == 60 and abs(claims["iat"] - time.time()) < 5
    assert claims["jti"] != second.claims["jti"]
    with pytest.raises(ValueError):
        ClientCredentials("my-client", "secret", "private_key_jwt", key)


def test_extra_authorization_parameters_follow_the_logins_own(tmp_path: Path) -> None:
    """``--remote-auth-authorize-param``: each KEY=VALUE goes into the authorization URL the
    user is sent to, after the parameters the login sets itself."""
    from urllib.parse import parse_qsl, urlsplit

    base = "http://127.0.0.1:9"
    process = subprocess.Popen(
        [sys.executable, "-m", "vmcp_trio", "proxy", "stdio", "--target-uri", f"{base}/mcp",
         "--remote-auth", "--remote-auth-skip-browser", "--remote-auth-timeout", "20s",
         "--remote-auth-authorize-url", f"{base}/authorize", "--remote-auth-token-url",
         f"{base}/token", "--remote-auth-client-id", "desktop", "--remote-auth-callback-port",
         "0", "--remote-auth-authorize-param", "audience=https://api.example.com",
         "--remote-auth-authorize-param", "prompt=consent"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    try:
        assert process.stderr is not None
        url = ""
        for line in process.stderr:
            if f"{base}/authorize?" in line:
                url = line.strip().split()[-1]
                break
        query = parse_qsl(urlsplit(url).query)
        names = [name for name, _ in query]
        assert names[-2:] == ["audience", "prompt"], url
        assert dict(query)["audience"] == "https://api.example.com"
        assert {"client_id", "code_challenge", "state", "resource"} <= set(names[:-2])
    finally:
        process.kill()
        process.communicate(timeout=10)


@pytest.mark.parametrize(("flags", "message"), [
    (("--remote-auth-authorize-param", "scope=admin"),
     "--remote-auth-authorize-param scope: the login sets it itself (use --remote-auth-scopes)"),
    (("--remote-auth-authorize-param", "state=x"),
     "--remote-auth-authorize-param state: the login sets it itself"),
    (("--remote-auth-authorize-param", "novalue"), "not KEY=VALUE"),
    (("--remote-auth-client-metadata-url", "http://example.com/client.json"),
     "--remote-auth-client-metadata-url must be an https URL with a path"),
    (("--remote-auth-client-metadata-url", "https://example.com/"),
     "--remote-auth-client-metadata-url must be an https URL with a path"),
])
def test_login_parameter_mistakes_are_one_line(flags: tuple[str, ...], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "vmcp_trio", "proxy", "stdio", "--target-uri",
                           "http://127.0.0.1:9/mcp", "--remote-auth", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


async def test_a_remote_that_never_answers_is_an_error_within_the_headers_timeout() -> None:
    """``--headers-timeout``: the client's request gets a JSON-RPC error naming the wait, not
    silence, when the remote takes the request and says nothing."""
    import json

    async def silent(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
        with trio.fail_after(20):
            done = await trio.run_process(
                [sys.executable, "-m", "vmcp_trio", "proxy", "stdio", "--target-uri",
                 f"http://127.0.0.1:{port}/mcp", "--headers-timeout", "500ms"],
                cwd=ROOT, stdin=line.encode(), capture_stdout=True, capture_stderr=True,
                check=False)
        nursery.cancel_scope.cancel()
    answer = json.loads(done.stdout.decode().splitlines()[0])
    assert answer["id"] == 1 and answer["error"]["code"] == -32603, answer
    assert "sent no response head within 0.5s" in answer["error"]["message"]
