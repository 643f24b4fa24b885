"""``vmcp proxy``: forwarding, the four authentication scenarios, token exchange, header injection.

The proxy runs in this process (:mod:`.proxy_helpers`), or as a subprocess where the command
line itself is under test. Remotes: the recording stand-in of :mod:`.proxy_helpers`, and MCP
Python SDK 2.x servers (``tests/fixtures/sdk_servers.py``),
one of them an OAuth resource server that accepts only ``oidc-provider``'s JWTs for its own
audience. ``oidc-provider`` (``tests/fixtures/idp.py``) issues the clients' tokens and serves
RFC 8693 exchanges. (The official conformance scenarios through the proxy are in
``tests/test_conformance.py``.)
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import NoReturn

import orjson
import pytest
import trio

from vmcp_trio.app.proxy import build_proxy, serve_proxy
from vmcp_trio.auth.headers import parse_challenges
from vmcp_trio.http.client import HttpClient
from vmcp_trio.protocol.sse import SSEParser
from vmcp_trio.proxy.command import configure_listener, configure_parser
from vmcp_trio.proxy.options import settings_from
from vmcp_trio.proxy.settings import ProxySettings
from vmcp_trio.resources.plan import OIDCIncoming, SecretValue, TokenExchangeAuth
from vmcp_trio.runtime.build import VERSION, revision

from .fixtures.idp import Idp, running_idp, served_jwks
from .fixtures.sdk_servers import ResourceServer, make_server, serving
from .helpers import ROOT, free_port
from .proxy_helpers import base, fetch, recording_remote, running_proxy

AUDIENCE = "https://proxy.test/mcp"


# --- forwarding ----------------------------------------------------------------------------------

async def test_end_to_end_headers_cross_and_hop_by_hop_ones_do_not() -> None:
    async with recording_remote() as (target, remote), running_proxy(base(target)) as url:
        status, headers, body = await fetch(url + "?probe=1", headers=[
            ("mcp-session-id", "s-1"), ("mcp-protocol-version", "2025-11-25"),
            ("last-event-id", "e-7"), ("x-trace", "t"), ("authorization", "Bearer mine"),
            ("connection", "x-hop"), ("x-hop", "1"), ("keep-alive", "timeout=5"),
            ("te", "trailers"), ("content-type", "application/json")],
            body=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
    assert status == 200 and body == b'{"ok": true}'
    assert headers.get("x-end") == "1" and "x-resp-hop" not in headers
    seen = remote.seen[-1]
    assert (seen["method"], seen["path"], seen["query"]) == ("POST", "/mcp", "probe=1")
    assert seen["body"] == b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    got = dict(seen["headers"])
    for name, value in (("mcp-session-id", "s-1"), ("mcp-protocol-version", "2025-11-25"),
                        ("last-event-id", "e-7"), ("x-trace", "t"),
                        ("authorization", "Bearer mine")):  # no auth at all: transparent
        assert got.get(name) == value
    assert not {"x-hop", "keep-alive", "te"} & set(got)
    assert got["host"] == target.split("/")[2]


async def test_an_sse_event_reaches_the_client_before_the_remote_writes_the_next() -> None:
    async with recording_remote() as (target, remote), running_proxy(base(target)) as url:
        client = HttpClient()
        events = []
        with trio.fail_after(20):
            async with client.stream("POST", url.replace("/mcp", "/stream"), body=b"{}",
                                     headers=[("accept", "text/event-stream")]) as response:
                parser = SSEParser()
                async for chunk in response.iter_bytes():
                    for event in parser.feed(chunk):
                        events.append(orjson.loads(event.data))
                        remote.first_event_read.set()  # only now does the remote go on
        await client.aclose()
    assert events == [{"progress": 1}, {"result": 2}]


async def test_an_unreachable_remote_is_a_502_naming_it_and_a_big_body_a_413() -> None:
    target = f"http://127.0.0.1:{free_port()}/mcp"
    async with running_proxy(base(target, max_body_bytes=100)) as url:
        status, _, body = await fetch(url)
        assert status == 502
        assert target.rsplit("/", 1)[0] in orjson.loads(body)["error_description"]
        status, _, body = await fetch(url, body=b"x" * 101)
        assert status == 413 and b"100 bytes" in body


async def test_a_rebound_host_name_is_refused_on_a_loopback_listener() -> None:
    async with recording_remote() as (target, remote), running_proxy(base(target)) as url:
        status, _, body = await fetch(url, headers=[("host", "evil.example:80")])
        assert status == 403 and b"loopback" in body
        status, _, _ = await fetch(url, headers=[("origin", "https://evil.example")])
        assert status == 403
    assert not remote.seen


async def test_injected_headers_and_a_bearer_token_replace_the_clients() -> None:
    settings = base("", bearer_token="remote-secret",
                    injected_headers=(("X-Api-Key", "k-1"), ("X-Tenant", "acme")))
    async with recording_remote() as (target, remote), \
            running_proxy(replace(settings, target_uri=target)) as url:
        await fetch(url, headers=[("authorization", "Bearer mine"), ("x-api-key", "forged")])
    got = remote.seen[-1]["headers"]
    assert ("authorization", "Bearer remote-secret") in got
    assert [v for k, v in got if k == "x-api-key"] == ["k-1"]
    assert ("x-tenant", "acme") in got
    assert "Bearer mine" not in str(got)


async def test_the_proxy_answers_its_probes_itself_and_forwards_everything_else() -> None:
    """``/health``, ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics`` are the proxy's own
    (never forwarded; ready: no login to wait for); every other path reaches the remote."""
    async with recording_remote() as (target, remote), running_proxy(base(target)) as url:
        origin = url.removesuffix("/mcp")
        answers = {path: await fetch(origin + path, method="GET")
                   for path in ("/health", "/healthz", "/livez", "/readyz", "/metrics")}
        assert not remote.seen
        assert (await fetch(origin + "/status"))[0] == 200
    assert [seen["path"] for seen in remote.seen] == ["/status"]
    assert {path: status for path, (status, _, _) in answers.items()} == dict.fromkeys(
        answers, 200)
    assert orjson.loads(answers["/health"][2]) == {"status": "ok"}
    assert orjson.loads(answers["/readyz"][2]) == {"status": "ready"}
    metrics = answers["/metrics"][2].decode()
    assert f'vmcp_build_info{{revision="{revision()}",version="{VERSION}"}} 1.0' in metrics
    assert "process_resident_memory_bytes " in metrics


async def test_requests_in_flight_finish_during_the_drain_and_new_ones_get_503() -> None:
    """SIGTERM: ``/readyz`` says 503 at once (``/health`` stays 200) while requests are still
    forwarded for the drain delay; then new ones get 503 and those in flight finish."""
    async with recording_remote() as (target, remote):
        settings = base(target, drain_delay=0.5, shutdown_grace=10.0)
        stop = trio.Event()
        results: list[list[object]] = []
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(partial(serve_proxy, build_proxy(settings),
                                               shutdown_trigger=stop.wait))
            stream_url = urls[0].replace("/mcp", "/stream")

            async def slow_call() -> None:
                results.append([await fetch(stream_url)])

            nursery.start_soon(slow_call)
            with trio.fail_after(10):
                while not remote.seen:
                    await trio.sleep(0.01)
            stop.set()
            await trio.sleep(0.05)
            origin = urls[0].removesuffix("/mcp")
            status, _, body = await fetch(origin + "/readyz", method="GET")
            assert status == 503 and orjson.loads(body)["notReady"] == {
                "draining": "the proxy is shutting down"}
            assert (await fetch(origin + "/health", method="GET"))[0] == 200
            assert (await fetch(urls[0]))[0] == 200  # still forwarded
            await trio.sleep(0.6)  # past the drain delay
            status, headers, _ = await fetch(urls[0])
            assert status == 503 and headers.get("retry-after") == "5"
            remote.first_event_read.set()
    (status, _, body), = results[0]  # type: ignore[misc]
    assert status == 200 and b'"result": 2' in body


# --- incoming auth and token exchange ------------------------------------------------------------

@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}, "https://other.test/mcp": {}}, token_exchange={
            "trustedIssuers": [], "audiences": {"backend-a": {"scope": "a:read",
                                                              "accessTokenTTL": 600}}}) as idp:
        yield idp


def incoming(idp: Idp, *, introspection: bool = False) -> OIDCIncoming:
    client = idp.clients["confidential"]
    return OIDCIncoming(issuer=idp.issuer, audience=AUDIENCE, client_id=client.client_id,
                        client_secret=SecretValue("test", str(client.client_secret).encode())
                        if introspection else None, scopes=("openid", "mcp:tools"),
                        jwks_allow_private_ip=True, insecure_allow_http=True)


async def token_for(idp: Idp, resource: str | None = AUDIENCE) -> str:
    answer = await trio.to_thread.run_sync(
        lambda: idp.client_credentials_token("confidential", resource=resource))
    return str(answer["access_token"])


async def test_incoming_oidc_refuses_with_a_challenge_and_never_forwards_the_clients_token(
        idp: Idp, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    good = await token_for(idp)
    stranger = await token_for(idp, "https://other.test/mcp")
    opaque = await token_for(idp, None)
    async with recording_remote() as (target, remote), running_proxy(base(
            target, incoming=incoming(idp, introspection=True),
            scopes_supported=("openid", "mcp:tools"))) as url:
        status, headers, _ = await fetch(url)
        assert status == 401
        (scheme, params), = parse_challenges(headers["www-authenticate"])
        assert scheme.lower() == "bearer" and "error" not in params
        metadata_url = params["resource_metadata"]
        assert metadata_url == url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        status, _, body = await fetch(metadata_url, method="GET", body=b"")
        document = orjson.loads(body)
        assert status == 200 and document["resource"] == url
        assert document["authorization_servers"] == [idp.issuer]
        assert document["scopes_supported"] == ["openid", "mcp:tools"]

        status, headers, _ = await fetch(url, headers=[("authorization", f"Bearer {stranger}")])
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
        assert not remote.seen

        for token in (good, opaque):
            status, _, _ = await fetch(url, headers=[("authorization", f"Bearer {token}")])
            assert status == 200
        assert len(remote.seen) == 2
        assert all("authorization" not in dict(seen["headers"]) for seen in remote.seen)
    for token in (good, stranger, opaque):
        assert token not in caplog.text


async def test_token_exchange_gives_the_remote_its_own_token_in_either_header(
        idp: Idp) -> None:
    jwks = await trio.to_thread.run_sync(served_jwks, idp)
    await trio.to_thread.run_sync(idp.set_exchange_mode, "ok")
    client = idp.clients["confidential"]
    exchange = TokenExchangeAuth(
        config="--token-exchange-url", token_url=idp.token_endpoint, audience="backend-a",
        client_id=client.client_id,
        client_secret=SecretValue("test", str(client.client_secret).encode()),
        scopes=("a:read",))
    token = await token_for(idp)
    server, state = make_server("alpha", resource_server=ResourceServer(
        idp.issuer, "backend-a", jwks))
    async with serving(server, state) as target:
        async with running_proxy(base(target, incoming=incoming(idp),
                                      token_exchange=exchange)) as url:
            status, _, body = await fetch(url, headers=[
                ("authorization", f"Bearer {token}"), ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream")],
                body=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                   "params": {"protocolVersion": "2025-11-25",
                                              "capabilities": {}, "clientInfo": {
                                                  "name": "t", "version": "1"}}}))
            assert status == 200, body
        sent = [a for a in state.authorizations if a]
        assert sent and token not in "".join(sent) and state.refused == 0
    async with recording_remote() as (target, remote), running_proxy(base(
            target, incoming=incoming(idp),
            token_exchange=replace(exchange, header_name="x-exchanged"))) as url:
        await fetch(url, headers=[("authorization", f"Bearer {token}")])
        got = dict(remote.seen[-1]["headers"])
        assert "authorization" not in got and got["x-exchanged"].count(".") == 2
        await trio.to_thread.run_sync(idp.set_exchange_mode, "fail")
        try:
            other = await token_for(idp, AUDIENCE)
            status, headers, body = await fetch(url, headers=[("authorization",
                                                               f"Bearer {other}")])
        finally:
            await trio.to_thread.run_sync(idp.set_exchange_mode, "ok")
        assert status == 401 and "resource_metadata" in headers["www-authenticate"]
        assert b"exchange" in body.lower()


# --- the command line ----------------------------------------------------------------------------

def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vmcp_trio", "proxy", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **(env or {})})


@pytest.mark.parametrize(("header", "extra"), [
    ("Host", ()), ("Connection", ()), ("Content-Length", ()), ("Transfer-Encoding", ()),
    ("Proxy-Authorization", ()), ("Forwarded", ()), ("X-Forwarded-For", ()),
    ("Authorization", ("--remote-auth-bearer-token", "t")),
])
def test_headers_the_proxy_must_not_send_are_refused_at_startup(
        header: str, extra: tuple[str, ...]) -> None:
    done = run_cli("--target-uri", "http://127.0.0.1:9/mcp", *extra,
                   "--remote-forward-headers", f"{header}=x", "remote")
    assert done.returncode == 2
    assert header in done.stderr and "Traceback" not in done.stderr


def test_a_header_from_the_secrets_manager_must_exist() -> None:
    done = run_cli("--target-uri", "http://127.0.0.1:9/mcp",
                   "--remote-forward-headers-secret", "X-Api-Key=missing-one", "remote")
    assert done.returncode == 2 and "X-Api-Key" in done.stderr
    assert "missing-one" in done.stderr and "Traceback" not in done.stderr


async def test_a_header_from_the_secrets_manager_reaches_the_remote() -> None:
    async with recording_remote() as (target, remote):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "vmcp_trio", "proxy", "--target-uri", target,
             "--remote-forward-headers-secret", "X-Api-Key=api-key", "remote"],
            cwd=ROOT, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                           "VMCP_SECRET_API_KEY": "from-the-manager"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert process.stdout is not None
            output = b""
            with trio.fail_after(20):
                while b" -> " not in output:
                    chunk = await process.stdout.receive_some(4096)
                    assert chunk, f"vmcp proxy exited: {output.decode(errors='replace')}"
                    output += chunk
            url = next(word for line in output.decode().splitlines()
                       if line.startswith("vmcp proxy: remote: ") for word in line.split()
                       if word.startswith("http://"))
            status, _, _ = await fetch(url)
        finally:
            process.terminate()
            with trio.fail_after(10):
                await process.wait()
    assert status == 200
    assert ("x-api-key", "from-the-manager") in remote.seen[-1]["headers"]
    assert process.returncode == 0


def parse_flags(*argv: str, environ: dict[str, str] | None = None
                ) -> tuple[ProxySettings | str, list[str]]:
    """``vmcp proxy`` flags as settings, or the usage error; and the warnings."""
    parser = argparse.ArgumentParser(prog="vmcp proxy")
    configure_listener(parser)
    configure_parser(parser, duration=lambda text: float(text.rstrip("s")))
    warnings: list[str] = []

    def error(message: str) -> NoReturn:
        raise ValueError(message)

    try:
        return settings_from(parser.parse_args([*argv, "remote"]), environ=environ or {},
                             error=error, warn=warnings.append), warnings
    except ValueError as exc:
        return str(exc), warnings


def test_the_remote_client_secret_comes_from_the_first_source_that_has_it(
        tmp_path: Path) -> None:
    """The seed's rule 5: the flag (with a warning), the file, the environment variable."""
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-file\n")
    base_flags = ("--target-uri", "https://mcp.example.test/mcp", "--remote-auth",
                  "--remote-auth-client-id", "vmcp")
    environ = {"SERVICE_REMOTE_OAUTH_CLIENT_SECRET": "from-env"}
    cases = [
        (("--remote-auth-client-secret", "from-flag", "--remote-auth-client-secret-file",
          str(secret_file)), "from-flag", True),
        (("--remote-auth-client-secret-file", str(secret_file)), "from-file", False),
        ((), "from-env", False),
    ]
    for flags, expected, warned in cases:
        settings, warnings = parse_flags(*base_flags, *flags, environ=environ)
        assert isinstance(settings, ProxySettings) and settings.remote_auth is not None
        assert settings.remote_auth.client_secret == expected
        assert bool(warnings) == warned
        assert "from-flag" not in repr(settings)
    settings, _ = parse_flags(*base_flags)
    assert isinstance(settings, ProxySettings) and settings.remote_auth is not None
    assert settings.remote_auth.client_secret is None
    assert settings.remote_auth.scopes is None and settings.remote_auth.timeout == 30
    assert settings.remote_auth.callback_port == 8666


@pytest.mark.parametrize(("flags", "named"), [
    (("--remote-auth", "--remote-auth-bearer-token", "t"), "alternatives"),
    (("--remote-auth", "--remote-auth-authorize-url", "https://as.test/authorize"),
     "--remote-auth-authorize-url needs --remote-auth-token-url"),
    (("--remote-auth", "--remote-auth-token-url", "https://as.test/token",
      "--remote-auth-client-id", "c"), "--remote-auth-token-url alone is for the logins without "
                                       "a user"),
    (("--remote-auth-issuer", "https://as.test"), "needs --remote-auth"),
    (("--remote-auth", "--remote-auth-issuer", "http://as.example.test"), "https"),
    (("--oidc-issuer", "https://idp.test"), "--oidc-audience"),
    (("--token-exchange-url", "https://sts.test/token"), "--oidc-issuer"),
])
def test_flags_that_cannot_work_are_one_line_naming_them(flags: tuple[str, ...],
                                                        named: str) -> None:
    settings, _ = parse_flags("--target-uri", "https://mcp.example.test/mcp", *flags)
    assert isinstance(settings, str) and named in settings
