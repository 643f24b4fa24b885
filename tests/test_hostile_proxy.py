"""Hostile clients against ``vmcp proxy`` (in this process, :mod:`.proxy_helpers`).

Each case sends what an attacker would and checks the refusal, that nothing reached a host it
should not (the recording remotes say what they received), that the proxy's credentials went
nowhere else, and that the proxy serves well-behaved requests afterwards. The rules themselves
(request-targets, ``Host`` values, the body budget) are checked one by one at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import orjson
import pytest
import trio

from vmcp_trio.app.proxy import build_proxy
from vmcp_trio.auth.oauth.discovery import FetchError
from vmcp_trio.http.asgi import client_group
from vmcp_trio.http.body_budget import BodyBudget
from vmcp_trio.http.client import HttpClient
from vmcp_trio.http.origin import host_of
from vmcp_trio.protocol.targets import forwarded_url, target_problem
from vmcp_trio.proxy.remote_login import LoginFailed, RemoteLogin, _Challenge
from vmcp_trio.proxy.settings import RemoteAuthSettings

from .fixtures.sdk_servers import make_server, serving
from .helpers import free_port
from .proxy_helpers import base, fetch, raw_http, recording_remote, running_proxy

SECRET = "remote-secret-7f3a"


def _no_faults(caplog: pytest.LogCaptureFixture) -> None:
    faults = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not faults, [r.getMessage() for r in faults]


# --- the request-target ----------------------------------------------------------------------

@pytest.mark.parametrize("target", [
    "@127.0.0.1:{port}/secret", "%40127.0.0.1:{port}/secret", ".attacker.example/x",
    "http://127.0.0.1:{port}/secret", "*", "/mcp%0d%0aX-Injected:%201", "/mcp%00",
    "/mcp#@127.0.0.1:{port}/", "/mcp\\@127.0.0.1:{port}/", "/mcp?x=1#frag",
])
async def test_a_request_target_cannot_send_the_proxy_or_its_credentials_elsewhere(
        target: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with recording_remote() as (remote_url, remote), \
            recording_remote() as (other_url, other):
        settings = base(remote_url, bearer_token=SECRET,
                        injected_headers=(("X-Api-Key", "k-1"),))
        async with running_proxy(settings) as url:
            port = other_url.split("/")[2].rsplit(":", 1)[1]
            line = target.format(port=port).encode()
            reply, closed = await raw_http(url, b"GET " + line + b" HTTP/1.1\r\n"
                                           b"Host: 127.0.0.1\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
            assert b"request-target" in reply and closed
            assert (await fetch(url))[0] == 200  # the proxy goes on serving
    assert not other.seen
    assert [seen["path"] for seen in remote.seen] == ["/mcp"]
    _no_faults(caplog)


async def test_the_path_and_query_cross_as_the_client_encoded_them() -> None:
    async with recording_remote() as (remote_url, remote), running_proxy(base(remote_url)) as url:
        reply, _ = await raw_http(url, b"GET /mcp/a%2Fb%3Fc?x=%26y&z HTTP/1.1\r\n"
                                  b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200")
    seen = remote.seen[-1]
    assert seen["path"] == "/mcp/a/b?c" and seen["query"] == "x=%26y&z"  # decoded there, once


def test_a_url_is_made_on_the_targets_origin_or_not_at_all() -> None:
    assert forwarded_url("https://target.host", "/mcp", "a=1") == "https://target.host/mcp?a=1"
    assert forwarded_url("http://h:8080", "//evil.example/x", "") == "http://h:8080//evil.example/x"
    for path in (".attacker.example/x", "@evil.example/x", ":1@evil/x", "/a#@evil/", "x"):
        with pytest.raises(ValueError, match="origin"):
            forwarded_url("https://target.host", path, "")


@pytest.mark.parametrize(("raw", "query", "refused"), [
    ("/mcp", "", False), ("/", "a=%00", False), ("/a%2Fb", "x=1&y", False),
    ("", "", True), ("mcp", "", True), ("*", "", True), ("@h/x", "", True),
    ("/a%0A", "", True), ("/a%7f", "", True), ("/a b", "", True), ("/a\u00e9", "", True),
    ("/a#b", "", True), ("/a", "b#c", True), ("/a\\b", "", True), ("/a", "\x01", True),
])
def test_only_origin_form_targets_are_served(raw: str, query: str, refused: bool) -> None:
    assert (target_problem(raw, query) is not None) is refused


# --- headers ----------------------------------------------------------------------------------

async def test_where_a_client_says_it_came_from_never_reaches_the_remote() -> None:
    async with recording_remote() as (remote_url, remote), running_proxy(base(remote_url)) as url:
        status, _, _ = await fetch(url, headers=[
            ("forwarded", "for=10.0.0.1;host=admin.internal"), ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-host", "admin.internal"), ("x-forwarded-proto", "https"),
            ("x-real-ip", "10.0.0.1"), ("x-kept", "1")])
    assert status == 200
    names = {name for name, _ in remote.seen[-1]["headers"]}
    assert "x-kept" in names
    assert not names & {"forwarded", "x-forwarded-for", "x-forwarded-host",
                        "x-forwarded-proto", "x-real-ip"}


@pytest.mark.parametrize(("host", "allowed"), [
    ("localhost:80@evil.example", False), ("127.0.0.1:1@evil.example", False),
    ("localhost.evil.example", False), ("127.0.0.1/x", False), ("[::1]evil", False),
    ("localhost:8o", False), ("localhost", True), ("127.0.0.1:4483", True), ("[::1]:1", True),
    ("LOCALHOST:", True),
])
async def test_the_host_header_is_read_strictly_on_a_loopback_listener(host: str,
                                                                       allowed: bool) -> None:
    async with recording_remote() as (remote_url, remote), running_proxy(base(remote_url)) as url:
        status, _, body = await fetch(url, headers=[("host", host)])
    assert status == (200 if allowed else 403), body
    assert bool(remote.seen) is allowed


def test_host_values() -> None:
    assert host_of("localhost:80@evil.example") is None
    assert host_of("a b") is None and host_of("[::1]:x") is None
    assert host_of("[::1]:80") == "[::1]" and host_of("example.com") == "example.com"


# --- connections --------------------------------------------------------------------------------

def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_connection_close_closes_the_connection_after_every_answer() -> None:
    """200 answered and 502 (the remote gone) alike: the proxy closes what the client asked it
    to, so such clients cannot pile up descriptors."""
    async with recording_remote() as (remote_url, _), running_proxy(base(remote_url)) as url, \
            running_proxy(base(f"http://127.0.0.1:{free_port()}/mcp")) as dead:
        await fetch(url)
        before = _open_descriptors()
        for _ in range(100):
            for proxy, status in ((url, b"200"), (dead, b"502")):
                reply, closed = await raw_http(
                    proxy, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                    b"Content-Length: 2\r\n\r\n{}", linger=2)
                assert reply.startswith(b"HTTP/1.1 " + status) and closed, reply[:100]
        assert _open_descriptors() - before < 10


async def test_an_event_streams_headers_reach_the_client_before_its_first_event() -> None:
    """A client that waits for its GET stream to open before it goes on is not left waiting
    for the remote's first event."""
    async with recording_remote() as (remote_url, remote), running_proxy(base(remote_url)) as url:
        client = HttpClient()
        with trio.fail_after(5):
            async with client.stream("GET", url.replace("/mcp", "/quiet"),
                                     headers=[("accept", "text/event-stream")]) as response:
                assert response.status == 200
                remote.release.set()
                body = b"".join([chunk async for chunk in response.iter_bytes()])
        await client.aclose()
    assert b'"late": 1' in body


async def test_a_servers_notification_on_the_get_stream_reaches_the_client() -> None:
    """The standalone GET stream through the proxy: the client opens it and waits for it to be
    open (as many clients do), then asks the server to change its tools; the server's
    ``notifications/tools/list_changed`` arrives on the stream."""
    headers = [("content-type", "application/json"),
               ("accept", "application/json, text/event-stream")]
    async with serving(*make_server("alpha")) as target, running_proxy(base(target)) as url:
        client, listener = HttpClient(), HttpClient()
        with trio.fail_after(20):
            _, raw, _ = await client.request("POST", url, headers=headers, body=orjson.dumps({
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}))
            session = dict(raw)[b"mcp-session-id"].decode()
            headers += [("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]
            await client.request("POST", url, headers=headers, body=orjson.dumps(
                {"jsonrpc": "2.0", "method": "notifications/initialized"}))
            async with listener.stream("GET", url, headers=[
                    ("accept", "text/event-stream"), *headers[2:]]) as stream:
                assert stream.status == 200
                status, _, _ = await client.request("POST", url, headers=headers,
                                                    body=orjson.dumps({
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "grow", "arguments": {}}}))
                assert status == 200
                async for chunk in stream.iter_bytes():
                    if b"notifications/tools/list_changed" in chunk:
                        break
        await client.aclose()
        await listener.aclose()


# --- bodies -------------------------------------------------------------------------------------

async def test_one_clients_uploads_cannot_hold_every_body() -> None:
    """The bodies held at once are bounded per client: past its share a client's next upload
    waits, then gets 503 with Retry-After, while its first is still being forwarded."""
    async with recording_remote() as (remote_url, remote):
        process = build_proxy(base(remote_url, max_body_bytes=1000))
        process.app.forwarder.bodies = BodyBudget(2000, per_client=1200, wait=0.3)
        async with running_proxy(process) as url:
            hold = url.replace("/mcp", "/hold")
            async with trio.open_nursery() as nursery:
                first: list[int] = []

                async def upload() -> None:
                    first.append((await fetch(hold, body=b"x" * 1000))[0])

                nursery.start_soon(upload)
                await trio.sleep(0.3)
                status, headers, _ = await fetch(url, body=b"y" * 1000)
                assert status == 503 and headers["retry-after"] == "1"
                assert (await fetch(url, body=b"{}"))[0] == 200  # small ones still fit
                remote.release.set()
            assert first == [200]
            assert (await fetch(url, body=b"y" * 1000))[0] == 200  # room again


async def test_the_body_budget_bounds_the_sum_and_each_client() -> None:
    budget = BodyBudget(1000, per_client=600, wait=0.05)
    async with budget.reserve("a", 500) as first, budget.reserve("a", 200) as second:
        assert first and not second  # a's share is 600
        async with budget.reserve("b", 500) as third, budget.reserve("c", 100) as fourth:
            assert third and not fourth and budget.reserved == 1000  # the sum is 1000
    assert budget.reserved == 0
    async with budget.reserve("a", 10**9) as capped:  # capped at the share, never more
        assert capped and budget.reserved == 600


async def test_a_reservation_waits_for_room() -> None:
    budget = BodyBudget(1000, per_client=600, wait=5.0)
    got: list[bool] = []

    async def later() -> None:
        async with budget.reserve("b", 300) as room:
            got.append(room)

    async with trio.open_nursery() as nursery, budget.reserve("a", 600), \
            budget.reserve("b", 400):
        nursery.start_soon(later)
        await trio.sleep(0.1)
        assert not got
    assert got == [True] and budget.reserved == 0


# --- the remote login's discovery ------------------------------------------------------------

@pytest.mark.parametrize("challenge", [
    {"resource_metadata": "http://127.0.0.1:{port}/.well-known/oauth-protected-resource"},
    {"resource_metadata": "http://[::1]:{port}/x", "realm": "http://127.0.0.1:{port}"},
    {"realm": "http://127.0.0.1:{port}"},
    {"resource_metadata": "http://localhost:{port}/prm", "realm": "https://127.0.0.1:{port}/"},
])
async def test_a_public_remotes_401_cannot_steer_discovery_to_loopback(
        challenge: dict[str, str]) -> None:
    """A public remote's challenge names loopback (or private) URLs: none is fetched (the login
    fails, or falls back to the target's own origin). With --remote-auth-allow-private the same
    challenge is followed (so the recording server would have seen the requests)."""
    async with recording_remote() as (remote_url, remote):
        port = remote_url.split("/")[2].rsplit(":", 1)[1]
        named = _Challenge(**{k: v.format(port=port) for k, v in challenge.items()})
        for allowed in (False, True):
            login = RemoteLogin(RemoteAuthSettings(allow_private=allowed),
                                target="https://mcp.example.test/mcp", server_name="remote",
                                client=HttpClient(), store=None)
            login._challenge = named
            with trio.fail_after(20), contextlib.suppress(FetchError, LoginFailed):
                await login._discover()
            if not allowed:
                assert not remote.seen
                assert login.metadata is None or login.metadata.issuer == (
                    "https://mcp.example.test")
            await login.client.aclose()
        assert remote.seen  # allowed: the loopback URLs were fetched


def test_the_allowance_comes_from_the_configuration_alone() -> None:
    def local(target: str, **settings: Any) -> bool:
        return RemoteLogin(RemoteAuthSettings(**settings), target=target, server_name="r",
                           client=HttpClient(), store=None).local

    assert not local("https://mcp.example.com/mcp")
    assert local("http://127.0.0.1:9/mcp") and local("http://localhost:9/mcp")
    assert local("https://mcp.example.com/mcp", issuer="http://localhost:8080")
    assert local("https://mcp.example.com/mcp", allow_private=True)


@pytest.mark.parametrize(("address", "group"), [
    ("203.0.113.7", "203.0.113.7"), ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"), ("fe80::1%eth0", "fe80::/64"), ("", ""),
])
def test_an_ipv6_client_counts_as_its_slash_64(address: str, group: str) -> None:
    """Per-client bounds (bodies, logins, registrations, anonymous sessions) group an IPv6
    client by its /64: one host holds a whole subnet."""
    assert client_group(address) == group
