"""Rate limits shared by two ``vmcp serve`` processes through one real redis-server: what one
replica lets through the other cannot, and Redis away lets calls through (fail open, counted)."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import trio

from vmcp_trio.http.client import HttpClient

from .fixtures.redis_cluster import redis_command, running_redis
from .gateway_helpers import FLEET_SECRET, RawClient, quickstart_docs
from .serve_helpers import serving

CALL = {"name": "clock_echo", "arguments": {"message": "hi"}}


def limited_docs(redis_port: int) -> list[dict[str, Any]]:
    docs = copy.deepcopy(quickstart_docs())
    docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet"},
                 "stringData": {"hmac": FLEET_SECRET}})
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["sessionStorage"] = {"provider": "redis", "address": f"127.0.0.1:{redis_port}",
                                      "hmacSecretRefs": [{"name": "fleet", "key": "hmac"}]}
    vmcp["spec"]["config"] = {"rateLimiting": {
        "shared": {"maxTokens": 4, "refillPeriod": "1h"},
        "tools": [{"name": "clock_now", "shared": {"maxTokens": 1, "refillPeriod": "1h"}}]}}
    return docs


async def status_of(client: RawClient, call: dict[str, Any] = CALL) -> tuple[int, Any]:
    reply = await client.request("tools/call", call)
    return reply.status, reply.body


async def metrics(base: str) -> str:
    http = HttpClient()
    try:
        _, _, body = await http.request("GET", base + "/metrics")
    finally:
        await http.aclose()
    return body.decode()


async def test_two_replicas_share_the_buckets_and_fail_open_without_redis(
        tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    with running_redis(tmp_path / "redis") as (_, port):
        docs = limited_docs(port)
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with serving(docs, tmp_path / "a") as first, serving(docs, tmp_path / "b") as second:
            one, two = RawClient(first.url), RawClient(second.url)
            with trio.fail_after(30):
                for client in (one, two):
                    assert (await client.initialize()).status == 200
                assert (await status_of(one))[0] == 200
                assert (await status_of(two))[0] == 200
                assert (await status_of(one, {"name": "clock_now", "arguments": {}}))[0] == 200
                tool_limited, body = await status_of(two, {"name": "clock_now",
                                                           "arguments": {}})
                assert tool_limited == 429  # the tool's own bucket, taken at the other replica
                assert body["error"]["code"] == -32029
                assert "tool clock_now shared" in body["error"]["message"]
                assert (await status_of(two))[0] == 200  # the refused call took no token
                status, body = await status_of(one)  # the fifth: the shared bucket is empty
                assert status == 429 and body["error"]["data"]["retryAfterSeconds"] >= 1
                assert 'vmcp_rate_limited_total{limit="shared"} 1.0' in \
                    await metrics(first.base)

                with contextlib.suppress(ConnectionError):  # it closes without a reply
                    redis_command(port, "SHUTDOWN", "NOSAVE")
                assert (await status_of(two))[0] == 200  # fail open
                assert "vmcp_rate_limit_unavailable_total 1.0" in await metrics(second.base)
            for client in (one, two):
                await client.aclose()
