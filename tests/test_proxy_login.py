"""``vmcp proxy --remote-auth``: the OAuth login to a remote MCP server, against real parts.

The remote is an MCP Python SDK 2.x server that is an OAuth resource server: it accepts only
``oidc-provider``'s JWTs for its own URL and otherwise answers 401 with ``resource_metadata``
(RFC 9728, its ``resource`` being that URL). ``oidc-provider`` (``tests/fixtures/idp.py``) is
the authorization server, with dynamic client registration. The user's browser is the fixture's
headless one: it follows the authorization URL the proxy announces, logs in, consents, and
delivers the redirect to the proxy's callback server as a browser would. The proxy runs in this
process (``build_proxy`` + ``serve_proxy``) with its state directory in a temporary folder.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx2
import orjson
import pytest
import trio

from vmcp_trio.app.proxy import build_proxy, serve_proxy
from vmcp_trio.http.client import HttpClient
from vmcp_trio.proxy.remote_login import RemoteLogin
from vmcp_trio.proxy.settings import ProxySettings, RemoteAuthSettings

from .fixtures.idp import Idp, browse, browse_device, running_idp, served_jwks
from .fixtures.sdk_servers import BackendState, ResourceServer, make_server, serving
from .helpers import free_port

INITIALIZE = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"}}})
MCP_HEADERS = [("content-type", "application/json"),
               ("accept", "application/json, text/event-stream")]


@dataclass
class Browser:
    """The user: logs in at each URL the proxy announces (unless told not to)."""

    urls: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    allowed: bool = True

    def __call__(self, url: str, seconds_left: float) -> None:
        self.urls.append(url)
        assert self.allowed, "the proxy asked for a login it should not need"
        params = browse(url, "alice")
        self.codes.append(params.get("code", ""))
        redirect = dict(parse_qsl(urlsplit(url).query))["redirect_uri"]
        httpx2.get(f"{redirect}?{urlencode(params)}", timeout=10)


@dataclass
class Remote:
    url: str
    idp: Idp
    state: BackendState


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def idp(port: int) -> Iterator[Idp]:
    with running_idp(resources={f"http://127.0.0.1:{port}/mcp": {
            "scope": "mcp:tools", "accessTokenTTL": 8}}) as idp:
        yield idp


@asynccontextmanager
async def remote_server(idp: Idp, port: int) -> AsyncIterator[Remote]:
    url = f"http://127.0.0.1:{port}/mcp"
    jwks = await trio.to_thread.run_sync(served_jwks, idp)
    server, state = make_server("remote", resource_server=ResourceServer(idp.issuer, url, jwks),
                                resource_url=url)
    async with serving(server, state, port=port):
        yield Remote(url, idp, state)


@asynccontextmanager
async def running_proxy(settings: ProxySettings, browser: Callable[[str, float], None]
                        ) -> AsyncIterator[tuple[str, RemoteLogin]]:
    process = build_proxy(settings, open_url=browser)
    [login] = [c for c in process.app.forwarder.credentials if isinstance(c, RemoteLogin)]
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(partial(serve_proxy, process, shutdown_trigger=stop.wait))
        yield urls[0], login
        stop.set()


def settings_for(remote: Remote, state_dir: Path, **auth: Any) -> ProxySettings:
    return ProxySettings(
        server_name="remote", target_uri=remote.url, drain_delay=0.0, state_dir=str(state_dir),
        remote_auth=RemoteAuthSettings(**{"scopes": ("openid", "mcp:tools"), "callback_port": 0,
                                          "skip_browser": True, "timeout": 30.0, **auth}))


async def post(url: str) -> tuple[int, dict[str, str], bytes]:
    client = HttpClient()
    try:
        with trio.fail_after(20):
            status, headers, body = await client.request("POST", url, headers=MCP_HEADERS,
                                                         body=INITIALIZE)
    finally:
        await client.aclose()
    return status, {k.decode(): v.decode() for k, v in headers}, body


async def until_logged_in(login: RemoteLogin) -> None:
    with trio.fail_after(30):
        while login.tokens is None:
            await trio.sleep(0.05)


async def test_discovery_registration_login_refresh_and_restart(
        idp: Idp, port: int, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """From the remote's 401 alone: its metadata, the provider's, a registered client, one
    login (PKCE S256, the resource and the scopes on the authorization request), calls that
    carry the provider's token; the token refreshed ahead of its 8 s lifetime; a restart that
    needs no new login."""
    caplog.set_level(logging.DEBUG)
    browser = Browser()
    async with remote_server(idp, port) as remote:
        async with running_proxy(settings_for(remote, tmp_path), browser) as (url, login):
            await until_logged_in(login)
            status, _, body = await post(url)
            assert status == 200, body
            first_token = login.tokens.access_token if login.tokens else ""

            [authorize] = browser.urls
            query = dict(parse_qsl(urlsplit(authorize).query))
            assert authorize.startswith(idp.authorization_endpoint)
            assert query["resource"] == remote.url and query["code_challenge_method"] == "S256"
            assert query["scope"] == "openid mcp:tools"
            assert query["client_id"] not in idp.clients  # registered for the proxy

            with trio.fail_after(20):  # 8 s tokens: refreshed ahead of expiry
                while login.refreshes < 1:
                    await trio.sleep(0.1)
            assert login.tokens is not None and login.tokens.access_token != first_token
            status, _, _ = await post(url)
            assert status == 200
        sent = [a.removeprefix("Bearer ") for a in remote.state.authorizations if a]
        assert first_token in sent and sent[-1] == login.tokens.access_token
        assert remote.state.refused == 0 or remote.state.authorizations[0] == ""

        browser.allowed = False  # a restart reads the kept login
        async with running_proxy(settings_for(remote, tmp_path), browser) as (url, again):
            await until_logged_in(again)
            status, _, _ = await post(url)
            assert status == 200
    assert len(browser.urls) == 1
    stored = list((tmp_path / "remote-logins").iterdir())
    assert len(stored) == 1 and stored[0].stat().st_mode & 0o777 == 0o600
    kept = stored[0].read_text()
    ours = "\n".join(record.getMessage() for record in caplog.records
                     if record.name.startswith(("vmcp", "hypercorn")))  # not the test's browser
    for secret in (first_token, *browser.codes):
        assert secret not in kept and secret not in ours


async def test_a_request_waits_for_the_login_and_gets_503_when_it_fails(
        idp: Idp, port: int, tmp_path: Path) -> None:
    """A request that arrives while the login waits for the user waits with it; when the login
    times out it gets 503 with Retry-After and the reason. Nothing logs in again until a request
    asks for it, and then the URL is announced again."""

    def never(url: str, seconds_left: float) -> None:
        announced.append(url)

    announced: list[str] = []
    async with remote_server(idp, port) as remote, running_proxy(
            settings_for(remote, tmp_path, timeout=1.0), never) as (url, _):
        started = trio.current_time()
        status, headers, body = await post(url)
        assert status == 503 and headers.get("retry-after") == "5"
        assert "no login within 1s" in orjson.loads(body)["error_description"]
        assert trio.current_time() - started >= 0.5  # it waited for the login
        await trio.sleep(1.5)
        assert len(announced) == 1  # nobody asked: no second login
        status, _, body = await post(url)
        assert status == 503 and b"no login within" in body
        assert len(announced) == 2


async def test_readyz_is_503_until_the_remote_login_has_a_token(
        idp: Idp, port: int, tmp_path: Path) -> None:
    """A load balancer or a kubelet asks the proxy's own ``/readyz``: 503 naming the remote
    login while the user has not logged in yet (``/health`` 200: the process lives), 200 once
    the login gave a token."""
    user_ready = threading.Event()
    browser = Browser()

    def after_a_while(url: str, seconds_left: float) -> None:
        user_ready.wait(20)
        browser(url, seconds_left)

    http = HttpClient()
    try:
        async with remote_server(idp, port) as remote, running_proxy(
                settings_for(remote, tmp_path), after_a_while) as (url, login):
            origin = url.removesuffix("/mcp")
            status, _, body = await http.request("GET", origin + "/readyz")
            assert status == 503 and orjson.loads(body)["notReady"] == {
                "remoteLogin": "the login to the remote server has not finished yet"}
            assert (await http.request("GET", origin + "/health"))[0] == 200
            user_ready.set()
            await until_logged_in(login)
            status, _, body = await http.request("GET", origin + "/readyz")
            assert status == 200 and orjson.loads(body) == {"status": "ready"}
    finally:
        user_ready.set()
        await http.aclose()


async def test_a_login_on_another_device(idp: Idp, port: int, tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """``--remote-auth-device-code`` (RFC 8628): a client registered for the device grant, the
    verification URL and user code announced (no callback server, no PKCE), the user approving
    on "another device" (the headless browser at that URL), the proxy polling until the
    provider's tokens come; calls then carry them. The device code itself is never logged."""
    caplog.set_level(logging.DEBUG)
    announced: list[str] = []

    def other_device(url: str, seconds_left: float) -> None:
        announced.append(url)
        browse_device(url, "alice")

    async with remote_server(idp, port) as remote, running_proxy(
            settings_for(remote, tmp_path, device_code=True), other_device) as (url, login):
        await until_logged_in(login)
        status, _, body = await post(url)
        assert status == 200, body
    [shown] = announced
    assert shown.startswith(f"{idp.issuer}/device?user_code="), shown
    assert login.tokens is not None and login.tokens.scope == "mcp:tools"
    assert remote.state.authorizations[-1] == f"Bearer {login.tokens.access_token}"
    assert "device_code=" not in caplog.text


async def test_client_credentials_at_a_token_endpoint_given_without_discovery(
        idp: Idp, port: int, tmp_path: Path) -> None:
    """``--remote-auth-client-credentials`` with ``--remote-auth-token-url`` alone (an
    authorization server that publishes no metadata): no discovery, no browser, one
    client_credentials grant at that endpoint for the remote's resource; calls carry its
    token."""
    confidential = idp.clients["confidential"]
    async with remote_server(idp, port) as remote, running_proxy(settings_for(
            remote, tmp_path, client_credentials=True, client_id="confidential",
            client_secret=confidential.client_secret, token_url=idp.token_endpoint,
            scopes=("mcp:tools",)), Browser(allowed=False)) as (url, login):
        await until_logged_in(login)
        status, _, body = await post(url)
        assert status == 200, body
    assert login.metadata is not None and login.metadata.token_endpoint == idp.token_endpoint
    assert login.metadata.document == {}  # nothing was discovered
    assert login.tokens is not None and login.tokens.refresh_token is None
    assert remote.state.authorizations[-1] == f"Bearer {login.tokens.access_token}"
