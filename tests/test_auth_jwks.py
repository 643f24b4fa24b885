"""The JWKS cache, the SSRF guard and the RFC 9728 helpers, against a real local HTTP server.

The issuer here is a small ASGI app under hypercorn whose JWKS document, ``Cache-Control`` and
availability the test changes, and which counts the fetches it served.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import hypercorn.trio
import orjson
import pytest
import trio
from hypercorn.config import Config

from vmcp_trio.auth.incoming.jwks import JwksCache, KeysUnavailable
from vmcp_trio.auth.metadata import bearer_challenge, metadata_url, resource_url
from vmcp_trio.auth.oauth.discovery import FetchError
from vmcp_trio.auth.ssrf import PUBLIC_ONLY, UnsafeUrl, check_fetch_url, is_public
from vmcp_trio.http.asgi import lifespan
from vmcp_trio.http.client import HttpClient, HttpError
from vmcp_trio.runtime.supervisor import Supervisor

from .jwt_helpers import generate, jwk_of


@dataclass
class Issuer:
    keys: list[dict[str, Any]]
    cache_control: str = "max-age=600"
    up: bool = True
    delay: float = 0.0
    fetches: int = 0
    url: str = ""
    private: dict[str, Any] = field(default_factory=dict)


@asynccontextmanager
async def issuer_serving(issuer: Issuer) -> AsyncIterator[Issuer]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        issuer.fetches += 1
        await trio.sleep(issuer.delay)
        status, body = (200, orjson.dumps({"keys": issuer.keys})) if issuer.up else (503, b"{}")
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"cache-control",
                                                     issuer.cache_control.encode())]})
        await send({"type": "http.response.body", "body": body})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn.trio.serve, app, config,
                                            shutdown_trigger=trio.sleep_forever))
        issuer.url = binds[0] + "/jwks"
        yield issuer
        nursery.cancel_scope.cancel()


def new_key(kid: str) -> dict[str, Any]:
    return jwk_of(generate("ES256").public_key(), kid, alg="ES256")


def cache_for(issuer: Issuer, **options: Any) -> JwksCache:
    async def url() -> str:
        return issuer.url
    return JwksCache("https://issuer.test", url, HttpClient(), allow_http=True,
                     allow_private=True, **options)


@pytest.mark.parametrize(("header", "seconds"), [
    ("max-age=600", 600.0), ("public, max-age=5", 60.0), ("max-age=999999999", 86400.0),
    ("no-store", 60.0), ("no-cache, max-age=600", 60.0), ("", 900.0), ("private", 900.0),
])
def test_cache_control_is_honoured_within_bounds(header: str, seconds: float) -> None:
    cache = JwksCache("i", lambda: None, HttpClient())  # type: ignore[arg-type, return-value]
    assert cache._lifetime(header) == seconds


async def test_concurrent_misses_share_one_fetch() -> None:
    async with issuer_serving(Issuer([new_key("a")], delay=0.2)) as issuer:
        cache = cache_for(issuer)
        found: list[object] = []

        async def ask() -> None:
            found.append(await cache.key_for("a"))

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(ask)
        assert issuer.fetches == 1
        assert all(key is not None and key.kid == "a" for key in found)  # type: ignore[attr-defined]


async def test_unknown_kids_refetch_at_most_once_per_interval() -> None:
    async with issuer_serving(Issuer([new_key("a")])) as issuer:
        cache = cache_for(issuer, miss_interval=30.0)
        await cache.refresh()
        for kid in ("x", "y", "z", "w"):
            assert await cache.key_for(kid) is None
        assert issuer.fetches == 2  # the load, and one refetch for all the misses
        assert (await cache.key_for("a")) is not None


async def test_the_last_good_keys_serve_while_the_issuer_is_down() -> None:
    async with issuer_serving(Issuer([new_key("a")])) as issuer:
        cache = cache_for(issuer)
        await cache.refresh()
        assert cache.state == "healthy"
        issuer.up = False
        with pytest.raises(FetchError, match="503"):
            await cache.refresh()
        assert cache.state == "stale" and "503" in (cache.last_error or "")
        assert (await cache.key_for("a")) is not None


async def test_a_cold_cache_with_the_issuer_down_fails_fast() -> None:
    async with issuer_serving(Issuer([new_key("a")], up=False)) as issuer:
        cache = cache_for(issuer)
        with trio.fail_after(5), pytest.raises(KeysUnavailable, match="503"):
            await cache.key_for("a")


async def test_a_removed_key_is_reported() -> None:
    async with issuer_serving(Issuer([new_key("a"), new_key("b")])) as issuer:
        removed: list[str] = []
        cache = cache_for(issuer, on_removed=removed.append)
        await cache.refresh()
        gone = cache.keys["a"].thumbprint
        issuer.keys = issuer.keys[1:]
        await cache.refresh()
        assert removed == [gone] and set(cache.keys) == {"b"}


async def test_the_supervised_refresher_follows_max_age() -> None:
    async with issuer_serving(Issuer([new_key("a")], cache_control="max-age=1")) as issuer:
        cache = cache_for(issuer, min_refresh=0.2)
        async with trio.open_nursery() as nursery:
            await Supervisor(nursery).start("JWKS", cache.run)
            assert issuer.fetches == 1
            issuer.keys = [new_key("b")]
            with trio.fail_after(5):
                while "b" not in cache.keys:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()


# --- the SSRF guard ------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "allow_http", "allow_private", "reason"), [
    ("http://login.example.com/jwks", False, False, "insecureAllowHTTP"),
    ("https://127.0.0.1/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://10.1.2.3/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://169.254.169.254/latest/meta-data", False, False, "jwksAllowPrivateIP"),
    ("https://[::1]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[::ffff:127.0.0.1]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://localhost/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://a.localhost/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[64:ff9b::a00:5]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[64:ff9b::a9fe:a9fe]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[64:ff9b:1::a00:5]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[2002:a00:5::1]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[::a00:5]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[::ffff:0:a00:5]/jwks", False, False, "jwksAllowPrivateIP"),
    ("https://[fec0::1]/jwks", False, False, "jwksAllowPrivateIP"),
    ("ftp://login.example.com/jwks", True, True, r"not an http\(s\) URL"),
    ("https://[::1/jwks", True, True, r"not an http\(s\) URL"),
])
def test_unsafe_urls_are_refused(url: str, allow_http: bool, allow_private: bool,
                                 reason: str) -> None:
    with pytest.raises(UnsafeUrl, match=reason):
        check_fetch_url(url, allow_http=allow_http, allow_private=allow_private,
                        switch="jwksAllowPrivateIP")


def test_what_the_configuration_allows_passes_with_the_guard_its_fetch_needs() -> None:
    assert check_fetch_url("http://127.0.0.1:1/jwks", allow_http=True,
                           allow_private=True) is None
    assert check_fetch_url("https://8.8.8.8/jwks", allow_http=False,
                           allow_private=False) is PUBLIC_ONLY
    assert check_fetch_url("https://[64:ff9b::808:808]/jwks", allow_http=False,
                           allow_private=False) is PUBLIC_ONLY  # NAT64 of 8.8.8.8: public


async def test_a_name_is_resolved_once_and_the_connection_goes_where_the_guard_looked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name answers a public address to the check, then loopback. The
    guard resolves once and the client connects to the address it checked (here nothing
    listens on it, so the connection fails) instead of looking the name up again; a name whose
    answer is private is refused before any connection. (The name service and the network are
    stand-ins here: no resolver this machine would use can be pointed at a rebinding server.)"""
    looked_up: list[str] = []
    answers = {"rebind.test": ["93.184.216.34", "127.0.0.1"], "inside.test": ["10.0.0.5"]}

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        looked_up.append(host)
        address = answers[host][min(looked_up.count(host), len(answers[host])) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    opened: list[str] = []

    async def open_tcp_stream(host: str, port: int, **kwargs: Any) -> Any:
        opened.append(host)
        raise OSError("connection refused")

    monkeypatch.setattr(trio, "open_tcp_stream", open_tcp_stream)
    client = HttpClient()
    with pytest.raises(HttpError, match="cannot connect"):
        await client.request("GET", "https://rebind.test/jwks", guard=PUBLIC_ONLY)
    assert looked_up == ["rebind.test"] and opened == ["93.184.216.34"]
    with pytest.raises(HttpError, match=r"non-public address 10\.0\.0\.5"):
        await client.request("GET", "https://inside.test/jwks", guard=PUBLIC_ONLY)
    assert opened == ["93.184.216.34"]
    await client.aclose()


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("2606:4700::1111", True), ("64:ff9b::808:808", True),
    ("2002:808:808::1", True), ("10.0.0.5", False), ("100.64.0.1", False),
    ("::ffff:10.0.0.5", False), ("64:ff9b::a00:5", False), ("2002:a00:5::1", False),
    ("fe80::1%eth0", False), ("ff02::1", False), ("224.0.0.1", False),
])
def test_which_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(address) is public


# --- RFC 9728 helpers ----------------------------------------------------------------------------

def test_resource_url_and_where_its_metadata_lives() -> None:
    kwargs: dict[str, Any] = {"scheme": "http", "host": "10.0.0.5:4483", "path": "/mcp",
                              "forwarded_proto": "https", "forwarded_host": "mcp.example.com"}
    assert resource_url(None, **kwargs) == "http://10.0.0.5:4483/mcp"
    assert resource_url(None, trust_forwarded=True, **kwargs) == "https://mcp.example.com/mcp"
    assert resource_url("https://gw.example/mcp", trust_forwarded=True,
                        **kwargs) == "https://gw.example/mcp"
    assert metadata_url("https://gw.example/mcp") == (
        "https://gw.example/.well-known/oauth-protected-resource/mcp")
    assert bearer_challenge("https://gw.example/mcp") == (
        'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"')
    assert bearer_challenge("https://gw.example/mcp", scopes=("a", "b"), error="invalid_token",
                            description='say "no"').endswith(
        'scope="a b", error="invalid_token", error_description="say \\"no\\""')
