"""The embedded authorization server against an attacker: its tables cannot be filled from many
addresses (the registration and login budgets, the bound on registrations that never complete a
login), and its tokens keep their rules under replays, races and forgeries (an ended login
session, the refresh retry grace, revocation), on memory and on a real Redis.

The token cases drive :meth:`AuthorizationServer.handle` directly with ASGI messages (a login's
end, the code, is put in storage as ``/oauth/callback`` would): what is under test is the token
and revocation endpoints, not the upstream login, which the other authorization server tests run
against real identity providers.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
import trio

from vmcp_trio.auth.identity import Identity
from vmcp_trio.authserver.rates import AddressRate
from vmcp_trio.authserver.server import AuthorizationServer
from vmcp_trio.authserver.storage import CodeGrant, RegisteredClient, StoredUpstream
from vmcp_trio.authserver.storage import memory as memory_storage
from vmcp_trio.authserver.storage import redis as redis_storage
from vmcp_trio.authserver.storage.memory import MemoryStorage
from vmcp_trio.authserver.storage.redis import RedisStorage
from vmcp_trio.http.asgi import HttpRequest
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import AuthServerPlan, OIDCProvider
from vmcp_trio.resources.plan import RedisStorage as RedisPlan

from .authserver_helpers import Stack
from .fixtures.redis_cluster import redis_command, running_redis
from .gateway_helpers import post_from

MAXIMAL = {
    "redirect_uris": [f"http://127.0.0.1:9/cb/{i}/" + "a" * 1970 for i in range(10)],
    "client_name": "n" * 200,
    "scope": " ".join(f"scope-{i:04d}" for i in range(360)),
    "token_endpoint_auth_method": "none",
}


async def test_registrations_from_many_addresses_are_bounded_together(
        authserver_stack: Stack) -> None:
    """150 maximal registrations, each from its own address (under the 20 a minute one address
    may make): past the 120 a minute of every address together, 429 with Retry-After."""
    statuses: list[int] = []
    waits: list[str] = []
    started = time.monotonic()
    for n in range(150):
        status, headers = await post_from(f"{authserver_stack.issuer}/oauth/register",
                                          f"127.0.{n // 200 + 1}.{n % 200 + 2}", MAXIMAL)
        statuses.append(status)
        if status == 429:
            waits.append(headers["retry-after"])
    # 120 a minute together: the burst, plus one token for every half second the loop took
    refilled = int((time.monotonic() - started) * 2.0) + 1
    assert set(statuses) == {201, 429}
    assert statuses[:100] == [201] * 100 and 120 <= statuses.count(201) <= 120 + refilled
    assert len(waits) >= 30 - refilled and all(int(wait) >= 1 for wait in waits)


def test_the_rate_is_per_address_and_for_everyone() -> None:
    rate = AddressRate(2, 3)
    assert rate.retry_after("a", 0.0) is None and rate.retry_after("a", 0.0) is None
    refused = rate.retry_after("a", 0.0)
    assert refused is not None and refused[1] == "address"
    assert rate.retry_after("b", 0.0) is None  # a's refusal took nothing from everyone's
    refused = rate.retry_after("c", 0.0)
    assert refused is not None and refused[1] == "all" and refused[0] == 21  # 3 a minute
    assert rate.retry_after("c", 20.5) is None  # one token back for everyone


def _client(client_id: str, *, used: bool = False) -> RegisteredClient:
    now = time.time()
    return RegisteredClient(client_id=client_id, redirect_uris=("http://127.0.0.1:9/cb",),
                            token_endpoint_auth_method="none",
                            grant_types=("authorization_code",), client_name=None, scope=None,
                            secret_sha256=None, created_at=now, expires_at=now + 3600,
                            used=used)


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_registrations_never_used_are_bounded_and_a_used_one_stays(
        kind: str, tmp_path: Path) -> None:
    async def check(storage: MemoryStorage | RedisStorage) -> None:
        await storage.put_client(_client("first"))
        await storage.put_client(_client("first", used=True))  # its login completed
        for n in range(5):
            await storage.put_client(_client(f"unused-{n}"))
        kept = [n for n in range(5) if await storage.get_client(f"unused-{n}") is not None]
        assert kept == [2, 3, 4]  # the newest three unused
        stored = await storage.get_client("first")
        assert stored is not None and stored.used

    if kind == "memory":
        await check(MemoryStorage(max_unused_clients=3))
        return
    with running_redis(tmp_path) as (host, port):
        storage = RedisStorage(RedisPlan(key_prefix="t:", addr=f"{host}:{port}"), [b"k" * 32],
                               max_unused_clients=3)
        async with trio.open_nursery() as nursery:
            await nursery.start(storage.run)
            await check(storage)
            nursery.cancel_scope.cancel()


async def test_a_redis_that_may_evict_keys_is_named_at_startup(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Evicted keys would be clients losing their registrations and refresh tokens: a Redis
    whose maxmemory-policy evicts is named in a warning once connected; the default
    (noeviction) is not."""
    with running_redis(tmp_path) as (host, port):
        for policy, warned in (("noeviction", False), ("volatile-lru", True)):
            redis_command(port, "CONFIG", "SET", "maxmemory-policy", policy)
            caplog.clear()
            storage = RedisStorage(RedisPlan(key_prefix="t:", addr=f"{host}:{port}"),
                                   [b"k" * 32])
            async with trio.open_nursery() as nursery:
                await nursery.start(storage.run)
                await trio.sleep(0.3)
                nursery.cancel_scope.cancel()
            said = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
            assert bool(said) == warned, said
            if warned:
                assert "maxmemory-policy volatile-lru" in said[0]


# --- tokens --------------------------------------------------------------------------------------

ISSUER = "https://as.example"
REDIRECT = "http://127.0.0.1:9/callback"


@asynccontextmanager
async def auth_server(kind: str, tmp_path: Path) -> AsyncIterator[AuthorizationServer]:
    """An authorization server on memory storage, or on a real Redis."""
    plan = AuthServerPlan(issuer=ISSUER, authorization_endpoint=ISSUER + "/oauth/authorize",
                          providers=(OIDCProvider("corp", "https://idp.example", "c"),))
    client = HttpClient()
    if kind == "memory":
        yield AuthorizationServer(plan, resources=(ISSUER + "/mcp",), scopes=(), client=client,
                                  storage=MemoryStorage())
        return
    with running_redis(tmp_path) as (host, port):
        storage = RedisStorage(RedisPlan(key_prefix="t:", addr=f"{host}:{port}"), [b"k" * 32])
        async with trio.open_nursery() as nursery:
            await nursery.start(storage.run)
            yield AuthorizationServer(plan, resources=(ISSUER + "/mcp",), scopes=(),
                                      client=client, storage=storage)
            nursery.cancel_scope.cancel()


async def post(server: AuthorizationServer, path: str, form: dict[str, str],
               content_type: str = "application/x-www-form-urlencoded"
               ) -> tuple[int, dict[str, Any]]:
    body = orjson.dumps(form) if content_type == "application/json" else urlencode(
        form).encode()
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
             "headers": [(b"content-type", content_type.encode()),
                         (b"content-length", str(len(body)).encode())],
             "client": ("203.0.113.7", 1234)}
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    assert await server.handle(HttpRequest(scope, receive), send)
    data = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], orjson.loads(data) if data else {}


async def logged_in(server: AuthorizationServer, client_id: str | None = None
                    ) -> tuple[str, dict[str, Any]]:
    """A client and the tokens of a login: the code is stored as ``/oauth/callback`` stores it
    at the end of an upstream login, then redeemed at ``/oauth/token``."""
    if client_id is None:
        status, registered = await post(server, "/oauth/register", {
            "redirect_uris": [REDIRECT]}, "application/json")  # type: ignore[dict-item]
        assert status == 201
        client_id = registered["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    now, session = time.time(), secrets.token_urlsafe(24)
    await server.storage.put_upstream(StoredUpstream(
        session_id=session, provider="corp", access_token="upstream", refresh_token="u-rt",
        expires_at=now + 3600, scope=None, subject="alice", issuer="https://idp.example"),
        now + 3600)
    code, code_id = server.opaque.mint("code")
    await server.storage.put_code(CodeGrant(
        code_id=code_id, client_id=client_id, redirect_uri=REDIRECT,
        code_challenge=challenge.rstrip(b"=").decode(), scopes=(), resource=None,
        subject="u-alice", session_id=session, name=None, email=None, expires_at=now + 600))
    status, tokens = await post(server, "/oauth/token", {
        "grant_type": "authorization_code", "code": code, "client_id": client_id,
        "code_verifier": verifier})
    assert status == 200, tokens
    return client_id, tokens


async def refresh(server: AuthorizationServer, client_id: str,
                  token: str) -> tuple[int, dict[str, Any]]:
    return await post(server, "/oauth/token", {"grant_type": "refresh_token",
                                               "client_id": client_id, "refresh_token": token})


def identity_of(tokens: dict[str, Any]) -> Identity:
    """The identity the gateway's authenticator makes of the access token."""
    claims = orjson.loads(base64.urlsafe_b64decode(tokens["access_token"].split(".")[1] + "=="))
    return Identity(claims["iss"], claims["sub"], claims)


KINDS = pytest.mark.parametrize("kind", ["memory", "redis"])


@KINDS
async def test_an_ended_login_sessions_refresh_tokens_stay_refused(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream provider refused the user's refresh token, so the session ended: its
    refresh token is refused at once, and still a day later (the revocation outlives the access
    tokens' lifetime)."""
    async with auth_server(kind, tmp_path) as server:
        client_id, tokens = await logged_in(server)
        await server.refresher.end_session(identity_of(tokens).claims["tsid"])
        status, answer = await refresh(server, client_id, tokens["refresh_token"])
        assert status == 400 and "session" in answer["error_description"]
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 24 * 3600)
        status, answer = await refresh(server, client_id, tokens["refresh_token"])
        assert status == 400 and answer["error"] == "invalid_grant"


@KINDS
async def test_a_replaced_refresh_token_may_be_retried_within_the_grace_until_a_successor_is_used(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose answers are lost retries with the token it holds: four requests at once,
    then a fifth, all rotate (a retry whose own answer was lost can be retried again). Only the
    last answer's token is current; once it is used, the replaced token is reuse and revokes
    the family. The grace runs from the first rotation: retries do not extend it."""
    monkeypatch.setattr(memory_storage, "ROTATION_GRACE", 1.5)
    monkeypatch.setattr(redis_storage, "ROTATION_GRACE", 1.5)
    async with auth_server(kind, tmp_path) as server:
        client_id, tokens = await logged_in(server)
        answers: list[tuple[int, dict[str, Any]]] = []
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                async def one() -> None:
                    answers.append(await refresh(server, client_id, tokens["refresh_token"]))
                nursery.start_soon(one)
        assert [status for status, _ in answers] == [200] * 4
        status, latest = await refresh(server, client_id, tokens["refresh_token"])
        assert status == 200
        status, used = await refresh(server, client_id, latest["refresh_token"])
        assert status == 200
        status, answer = await refresh(server, client_id, tokens["refresh_token"])
        assert (status, answer["error"]) == (400, "invalid_grant")
        assert (await refresh(server, client_id, used["refresh_token"]))[0] == 400

        # The grace is counted from the rotation, not from the last retry.
        client_id, tokens = await logged_in(server)
        assert (await refresh(server, client_id, tokens["refresh_token"]))[0] == 200
        await trio.sleep(1.0)
        assert (await refresh(server, client_id, tokens["refresh_token"]))[0] == 200
        await trio.sleep(0.7)
        assert (await refresh(server, client_id, tokens["refresh_token"]))[0] == 400


@KINDS
async def test_concurrent_refreshes_of_one_token_each_give_a_token_that_works(
        kind: str, tmp_path: Path) -> None:
    """A client refreshing at two replicas at once (or retrying) keeps one of the answers,
    whichever: that one refreshes, not reuse. Once it is used, the others are reuse and revoke
    the family, so a stolen copy is still caught."""
    async with auth_server(kind, tmp_path) as server:
        for kept in range(3):
            client_id, tokens = await logged_in(server)
            answers: list[dict[str, Any]] = []

            async def one(client_id: str, token: str, answers: list[dict[str, Any]]) -> None:
                status, answer = await refresh(server, client_id, token)
                assert status == 200, answer
                answers.append(answer)
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(one, client_id, tokens["refresh_token"], answers)
            status, used = await refresh(server, client_id, answers[kept]["refresh_token"])
            assert status == 200, used
            other = answers[(kept + 1) % 3]
            status, answer = await refresh(server, client_id, other["refresh_token"])
            assert (status, answer["error"]) == (400, "invalid_grant")
            assert (await refresh(server, client_id, used["refresh_token"]))[0] == 400


@KINDS
async def test_revocation_takes_only_a_token_of_the_family_it_names(kind: str,
                                                                    tmp_path: Path) -> None:
    """``<victim's family>~<the attacker's own refresh token>`` revokes nothing; the victim's
    own token, by its own client, revokes its family and its session."""
    async with auth_server(kind, tmp_path) as server:
        victim_client, victim = await logged_in(server)
        _, attacker = await logged_in(server)
        forged = (victim["refresh_token"].partition("~")[0] + "~"
                  + attacker["refresh_token"].partition("~")[2])
        assert (await post(server, "/oauth/revoke", {"token": forged,
                                                     "client_id": victim_client}))[0] == 200
        status, victim = await refresh(server, victim_client, victim["refresh_token"])
        assert status == 200
        assert (await post(server, "/oauth/revoke", {"token": victim["refresh_token"],
                                                     "client_id": victim_client}))[0] == 200
        assert (await refresh(server, victim_client, victim["refresh_token"]))[0] == 400


@KINDS
async def test_revoking_an_access_token_ends_its_login_session(kind: str,
                                                               tmp_path: Path) -> None:
    """RFC 7009 for an access token: by its own client, it stops working (and the session's
    refresh token with it); by another client, nothing happens."""
    async with auth_server(kind, tmp_path) as server:
        owner, tokens = await logged_in(server)
        other, _ = await logged_in(server)
        identity = identity_of(tokens)
        await post(server, "/oauth/revoke", {"token": tokens["access_token"], "client_id": other})
        assert server.session_valid(identity)
        await post(server, "/oauth/revoke", {"token": tokens["access_token"], "client_id": owner})
        assert not server.session_valid(identity)
        assert not await server.session_not_revoked(identity)
        assert (await refresh(server, owner, tokens["refresh_token"]))[0] == 400
