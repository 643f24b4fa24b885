"""``kill -USR1`` on a running ``vmcp serve``: a memory census in its log (object types by
count and their growth; with allocation tracing on, the source lines holding memory), and the
process serves on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import trio

from vmcp_trio.runtime import memory_trim
from vmcp_trio.runtime.memory_census import MemoryCensus

from .gateway_helpers import RawClient, quickstart_docs
from .serve_helpers import ROOT, answers_ok, free_port, serving, stop_process


class Held:
    """What a leak would hold."""


def test_a_census_counts_types_and_their_growth_since_the_last() -> None:
    census = MemoryCensus()
    first = census.lines()
    assert first[0].startswith("memory census: ") and "objects tracked" in first[0]
    assert any(line.split()[-1] == "dict" for line in first[1:26])
    assert first[-1].endswith("for the source lines holding memory)")  # tracing is off here
    tracemalloc.start(5)  # what PYTHONTRACEMALLOC does at start
    try:
        held = [Held() for _ in range(5_000)]
        second = census.lines()
    finally:
        tracemalloc.stop()
    assert any(line.startswith("  grew +5,0") and line.endswith(" Held") for line in second)
    total = next(line for line in second if line.startswith("  traced: "))
    assert float(total.split()[1].replace(",", "")) > 0.1  # MiB: the 5,000 objects at least
    traced = [line for line in second if line.startswith("  traced ")]
    assert any("test_memory_census.py" in line for line in traced), traced
    assert len(held) == 5_000


async def test_sigusr1_writes_a_census_to_the_log_and_serving_goes_on(tmp_path: Path) -> None:
    with serving(quickstart_docs(), tmp_path) as served:
        client = RawClient(served.url)
        await client.initialize()
        for _ in range(2):
            served.process.send_signal(signal.SIGUSR1)
            with trio.fail_after(10):
                while served.log().count("memory census: ") < _ + 1:
                    await trio.sleep(0.1)
        log = served.log()
        assert "vmcp: SIGUSR1, a memory census in the log" in log
        assert "once the free memory was returned to the system" in log
        second = log[log.rindex("memory census: "):]
        assert " (+" in second or " (-" in second  # each count beside its change since the first
        reply = await client.request("tools/call", {"name": "clock_echo",
                                                    "arguments": {"message": "still here"}})
        assert reply.result["content"][0]["text"] == "still here"
        await client.aclose()


def test_sigusr1_while_the_server_starts_is_ignored_not_fatal(tmp_path: Path) -> None:
    """A census asked for too early (an operator's loop over every vmcp process) must not
    end a replica that is starting: before the handler is installed the signal is ignored."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "vmcp_trio", "serve", "--config", str(ROOT / "examples" /
         "quickstart.yaml"), "--port", str(port), "--drain-delay", "0s"], cwd=ROOT,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        time.sleep(0.3)  # the interpreter is up; the server is loading
        signalled = 0
        deadline = time.monotonic() + 30
        while not answers_ok(f"http://127.0.0.1:{port}/health"):
            assert process.poll() is None, f"ended by SIGUSR1 number {signalled}"
            assert time.monotonic() < deadline
            process.send_signal(signal.SIGUSR1)
            signalled += 1
            time.sleep(0.02)
        assert signalled > 5  # the signals fell in the start, not after it
        assert process.poll() is None
    finally:
        stop_process(process, timeout=20)


def test_a_census_returns_what_a_burst_left_free_to_the_system() -> None:
    """A burst of mid-sized buffers, freed but for one in fifty: glibc keeps the freed pages,
    so the resident size stays at the burst's high-water mark until they are returned."""
    burst = [bytes(4000 + i % 100) for i in range(100_000)]  # ~400 MiB
    kept = burst[::50]
    del burst
    line = next(line for line in MemoryCensus().lines() if line.startswith("  resident: "))
    before, after = (float(part.split()[0].replace(",", "")) for part in
                     line.removeprefix("  resident: ").split(", ")[:2])
    assert before - after > 200, line  # MiB given back
    assert len(kept) == 2_000


async def test_the_trim_task_trims_on_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory_trim, "TRIM_EVERY", 0.01)
    monkeypatch.setattr(memory_trim, "_MALLOC_TRIM", lambda pad: calls.append(pad) or 1)
    with trio.move_on_after(0.2):
        await memory_trim.trim_forever()
    assert len(calls) >= 5 and set(calls) == {0}
