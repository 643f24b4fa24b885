"""A Redis master killed (Sentinel failover) while clients call an ``upstreamInject`` backend.

The embedded authorization server keeps each session's upstream tokens in Redis (Sentinel: a
master, a replica, three sentinels, ``tests/fixtures/redis_cluster.py``), and ``upstreamInject``
reads the stored token on every call to its backend (``delta``, an SDK backend, here). While the
master is down and until the replica is promoted, that read fails: the call must fail alone,
with a JSON-RPC error naming the backend and the cause (the stored token cannot be read now),
never hang, and never take the gateway down; once the new master is in place, calls succeed
again. That holds for sessions that had already listed delta's tools and for a session whose
first call (its first listing) falls in the failover window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key

from .authserver_helpers import claims_of, tokens
from .fixtures.idp import Idp
from .fixtures.redis_cluster import RedisCluster, running_redis_cluster
from .fixtures.sdk_servers import BackendState, make_server, serving
from .gateway_helpers import RawClient, running_gateway
from .test_authserver_redis import docs_for, stack_of

GROUP = "quickstart"
BACKEND = "delta"
TOOL = f"{BACKEND}_add"
PASSWORD = "failover-redis-pw"
CALL_BOUND = 8.0
"""No single call may take longer (the storage bounds a Redis read at dial + read = 2 s)."""
CAUSE = (f"backend '{BACKEND}' has no credential for this caller: the stored corp token cannot "
         "be read now (")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with running_redis_cluster(tmp_path, password=PASSWORD) as redis:
        yield redis


@dataclass
class Outcome:
    client: int
    started: float
    """Seconds since the fault (negative: before it)."""
    took: float
    ok: bool
    message: str = ""
    error: dict[str, Any] | None = None


@dataclass
class Deployment:
    url: str
    gateway: GatewayProcess
    delta: BackendState
    access_token: str
    stored: str
    """The user's corp access token as the authorization server stores it."""
    secrets: tuple[str, ...]
    """What no error message may contain."""

    @property
    def health_url(self) -> str:
        return self.url.removesuffix("/mcp") + "/health"

    async def session(self, *, warm: bool) -> RawClient:
        """A session of the logged-in user; ``warm``: with one successful call made (so its
        catalog, delta's tools, is known)."""
        client = RawClient(self.url)
        client.token = self.access_token
        assert (await client.initialize()).status == 200
        if warm:
            first = await call_delta(client, -1, time.monotonic())
            assert first.ok, first
        return client

    async def wait_for_failover(self, cluster: RedisCluster, old: int) -> float:
        """Until the Sentinels promoted the replica and the gateway heard it; when (monotonic)."""
        await trio.to_thread.run_sync(cluster.wait_for_failover, old)
        promoted = time.monotonic()
        storage = self.gateway.authserver.storage  # type: ignore[union-attr]
        with trio.fail_after(10):
            while storage.failovers == 0:  # type: ignore[attr-defined]
                await trio.sleep(0.1)
        return promoted


@asynccontextmanager
async def deployment(upstreams: tuple[int, Idp, Idp],
                     cluster: RedisCluster) -> AsyncIterator[Deployment]:
    """The gateway with the embedded authorization server on Redis Sentinel and ``delta``
    (``upstreamInject`` of corp), the user logged in once."""
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    delta, delta_state = make_server(BACKEND)
    async with serving(delta, delta_state) as delta_url, \
            running_gateway(with_delta(docs_for(upstreams, cluster, keys), delta_url),
                            port=upstreams[0]) as (url, gateway):
        with trio.fail_after(30):
            _, answer, _ = await tokens(stack_of(upstreams, url, gateway))
        assert gateway.authserver is not None
        stored = await gateway.authserver.upstream_access_token(
            claims_of(answer["access_token"])["tsid"], "corp")
        assert stored
        yield Deployment(url, gateway, delta_state, answer["access_token"], stored,
                         (answer["access_token"], answer["refresh_token"], stored, PASSWORD))
        # and the gateway is still there: a new session, a call, /health
        client = RawClient(url)
        client.token = answer["access_token"]
        try:
            with trio.fail_after(15):
                assert (await client.initialize()).status == 200
                assert (await call_delta(client, 99, 0.0)).ok
                status, _, _ = await client.http.request("GET", url.removesuffix("/mcp")
                                                         + "/health")
                assert status == 200
        finally:
            await client.aclose()
    # delta only ever got the stored corp token, never the client's own
    assert {a for a in delta_state.authorizations if a} == {f"Bearer {stored}"}


def with_delta(docs: list[dict[str, Any]], delta_url: str) -> list[dict[str, Any]]:
    """The Redis-backed embedded authorization server's documents plus ``delta``, an SDK
    backend that gets the caller's stored corp access token (``upstreamInject``)."""
    docs[:0] = [
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPExternalAuthConfig",
         "metadata": {"name": "corp-inject"},
         "spec": {"type": "upstreamInject", "upstreamInject": {"providerName": "corp"}}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
         "metadata": {"name": BACKEND},
         "spec": {"groupRef": {"name": GROUP}, "url": delta_url,
                  "externalAuthConfigRef": {"name": "corp-inject"}}}]
    next(d for d in docs if d["kind"] == "VirtualMCPServer")["spec"]["outgoingAuth"] = {
        "source": "discovered"}
    return docs


async def call_delta(client: RawClient, index: int, fault_at: float) -> Outcome:
    started = time.monotonic()
    with trio.fail_after(CALL_BOUND):
        reply = await client.request("tools/call", {"name": TOOL,
                                                    "arguments": {"a": 1, "b": 2}})
    took = time.monotonic() - started
    assert reply.status == 200, (reply.status, reply.body)
    final = reply.messages[-1]
    if "result" in final:
        assert final["result"]["structuredContent"]["backend"] == BACKEND, final
        return Outcome(index, started - fault_at, took, True)
    return Outcome(index, started - fault_at, took, False, final["error"]["message"],
                   final["error"])


def timeline(outcomes: list[Outcome]) -> str:
    return "\n".join(f"{o.started:+7.2f}s c{o.client} {o.took:5.2f}s "
                     f"{'ok' if o.ok else 'ERR ' + o.message}" for o in outcomes)


def clear_error_problems(outcome: Outcome, secrets: tuple[str, ...]) -> list[str]:
    """What is wrong with a failed call's error: it must name delta and the storage cause
    (the stored corp token cannot be read now, Redis) and carry no secret."""
    error = outcome.error or {}
    message = str(error.get("message", ""))
    problems = []
    if not (CAUSE in message and "Redis" in message and "try again shortly" in message):
        problems.append(f"the error does not name delta and the storage cause: {error}")
    data = error.get("data") or {}
    if data.get("backend") != BACKEND and data.get("unavailable") != [BACKEND]:
        problems.append(f"the error's data does not name delta: {error}")
    if any(secret in repr(error) for secret in secrets):
        problems.append("the error echoes a token or the Redis password")
    return problems


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing escaped a request: no traceback in the gateway's log."""
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert not tracebacks, [(r.name, r.getMessage()) for r in tracebacks]
    assert not [r for r in caplog.records if "a request's work failed" in r.getMessage()]


async def test_calls_during_a_sentinel_failover_fail_clearly_and_recover(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster,
        caplog: pytest.LogCaptureFixture) -> None:
    """Two sessions (delta's tools already listed) call delta every 100 ms while the master is
    killed; /health is polled every 200 ms. Every call is answered within its bound; the ones
    in the window fail with the clear error; after the promotion every call succeeds."""
    caplog.set_level(logging.WARNING)
    async with deployment(upstreams, cluster) as stack:
        clients = [await stack.session(warm=True), await stack.session(warm=True)]
        health_client = RawClient(stack.url)
        outcomes: list[Outcome] = []
        health: list[int] = []
        fault_at = time.monotonic() + 3600  # until the fault: calls are "before" it
        promoted_at = 0.0
        settled_before = 0
        stop = trio.Event()

        async def caller(index: int) -> None:
            while not stop.is_set():
                outcomes.append(await call_delta(clients[index], index, fault_at))
                await trio.sleep(0.1)

        async def watch_health() -> None:
            while not stop.is_set():
                with trio.fail_after(3):
                    status, _, _ = await health_client.http.request("GET", stack.health_url)
                health.append(status)
                await trio.sleep(0.2)

        def recovered_since(moment: float, seconds: float) -> bool:
            """Every client's calls started since ``moment`` span ``seconds``, all ok."""
            for index in range(len(clients)):
                since = [o for o in outcomes if o.client == index and o.started >= moment]
                if (not since or since[-1].started - since[0].started < seconds
                        or not all(o.ok for o in since)):
                    return False
            return True

        try:
            with trio.fail_after(40):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(caller, 0)
                    nursery.start_soon(caller, 1)
                    nursery.start_soon(watch_health)
                    await trio.sleep(1.0)  # a few calls before the fault, all fine
                    settled_before = len(outcomes)  # (one in flight at the kill may fail)
                    fault_at = time.monotonic()
                    old = await trio.to_thread.run_sync(cluster.kill_master)
                    promoted_at = await stack.wait_for_failover(cluster, old) - fault_at
                    # 3 s of successes for both clients after the last failure
                    while not recovered_since(max((o.started for o in outcomes if not o.ok),
                                                  default=0.0) + 0.01, 3.0):
                        await trio.sleep(0.2)
                    stop.set()
        finally:
            for client in [*clients, health_client]:
                await client.aclose()

        failed = [o for o in outcomes if not o.ok]
        report = (f"promoted {promoted_at:.2f}s after the kill; {len(failed)} of "
                  f"{len(outcomes)} calls failed\n{timeline(outcomes)}")
        print(report)  # the observed timeline (pytest -s)
        before = outcomes[:settled_before]
        assert before and all(o.ok for o in before), report
        assert all(o.took < CALL_BOUND for o in outcomes), report
        assert health and all(s == 200 for s in health), health

        if not failed:
            # The failover left no window: make one where there is no replica left to
            # promote. A paused master (SIGSTOP) is a read that times out.
            client = await stack.session(warm=True)
            try:
                await trio.to_thread.run_sync(cluster.pause_master)
                try:
                    failed.append(await call_delta(client, 9, time.monotonic()))
                finally:
                    await trio.to_thread.run_sync(cluster.resume_paused)
            finally:
                await client.aclose()
            assert not failed[0].ok, failed[0]

        problems = [p for o in failed for p in clear_error_problems(o, stack.secrets)]
        assert not problems, "\n".join([*problems[:3], report])
    no_tracebacks(caplog)


async def test_a_session_whose_first_call_falls_in_the_failover_window_recovers(
        upstreams: tuple[int, Idp, Idp], cluster: RedisCluster,
        caplog: pytest.LogCaptureFixture) -> None:
    """A session opened before the fault whose first tools/call (which lists delta's tools
    for the session, with the caller's credential) comes while the master is down: that call
    fails with the clear error, and once the replica is promoted the session's calls succeed
    and its tools/list names delta's tool again."""
    caplog.set_level(logging.WARNING)
    async with deployment(upstreams, cluster) as stack:
        client = await stack.session(warm=False)
        try:
            fault_at = time.monotonic()
            old = await trio.to_thread.run_sync(cluster.kill_master)
            first = await call_delta(client, 0, fault_at)
            promoted_at = await stack.wait_for_failover(cluster, old) - fault_at
            later: list[Outcome] = []
            with trio.move_on_after(6):  # calls after the promotion, until one succeeds
                while not (later and later[-1].ok):
                    later.append(await call_delta(client, 0, fault_at))
                    await trio.sleep(0.2)
            with trio.fail_after(CALL_BOUND):
                listed = (await client.request("tools/list")).messages[-1]
        finally:
            await client.aclose()

    report = (f"promoted {promoted_at:.2f}s after the kill\n{timeline([first, *later])}\n"
              f"tools/list after the promotion: {listed}")
    print(report)
    assert first.started < promoted_at and not first.ok, report  # in the window
    problems = clear_error_problems(first, stack.secrets)
    if not (later and later[-1].ok):
        problems.append(f"no call succeeded in the 6 s after the promotion ({len(later)} "
                        f"calls; last: {later[-1].message if later else None!r})")
    tools = [t.get("name") for t in (listed.get("result") or {}).get("tools", [])]
    if TOOL not in tools:
        problems.append(f"tools/list after the promotion has no {TOOL}: {listed}")
    assert not problems, "\n".join([*problems, report])
    no_tracebacks(caplog)
