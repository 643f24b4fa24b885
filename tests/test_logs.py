"""What ``vmcp serve`` writes, as an operator reads it: with ``--log-format json`` every line is
one JSON object (the banner, the validation warnings, the shutdown lines, tracebacks as a
field); one access record per request, naming the caller, session, method, tool and backend,
and never a token."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import trio

from .gateway_helpers import RawClient, quickstart_docs
from .serve_helpers import serving

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2VuLWxpa2U.SIGNATURE-SHOULD-NEVER-BE-LOGGED"


async def test_json_logs_are_json_lines_with_access_records(tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path, "--log-format", "json") as served:
        client = RawClient(served.url)
        client.token = TOKEN  # anonymous: ignored, and it must not be logged anywhere
        await client.initialize()
        reply = await client.request("tools/call", {"name": "clock_echo",
                                                    "arguments": {"message": "hi"}},
                                     headers=client.headers(x_request_id="trace-77"))
        assert reply.result["content"][0]["text"] == "hi"
        await client.request("tools/call", {"name": "no_such_tool"})
        await client.aclose()
        served.process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            while served.process.poll() is None:
                await trio.sleep(0.05)
    text = served.log()
    assert TOKEN not in text and "SIGNATURE" not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # all JSON
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    banner = next(line for line in lines if line["msg"].startswith("MCP endpoint: "))
    assert banner["url"] == served.url and banner["backends"] == ["clock", "notes"]
    assert any(line.get("rule") == "anonymous" and line["level"] == "warning"
               for line in lines)  # the validation warning, as fields
    assert any(line.get("signal") == "SIGTERM" for line in lines)
    call = only(lines, logger="vmcp.access", request_id="trace-77")
    assert call["method"] == "POST" and call["path"] == "/mcp" and call["status"] == 200
    assert call["rpc"] == "tools/call" and call["tool"] == "clock_echo"
    assert call["backend"] == "clock" and call["subject"] == "anonymous"
    assert len(call["session"]) == 8 and call["duration_ms"] >= 0
    assert not any(line.get("path") in ("/health", "/readyz") for line in lines)


def only(lines: list[dict[str, Any]], **fields: str) -> dict[str, Any]:
    found = [line for line in lines if all(line.get(k) == v for k, v in fields.items())]
    assert len(found) == 1, found
    return found[0]
