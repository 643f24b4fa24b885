"""A real ``vmcp serve`` process for the tests that must see what an operator sees: whether the
process is still alive, what it logged, how it exits.

:func:`serving` starts it on documents written to a folder and yields a :class:`Served` (its URL,
process and log; :meth:`Served.kill`, :meth:`Served.health` and :meth:`Served.assert_serving`,
which checks that it still serves a well-behaved client); at the end it is stopped with SIGTERM
and must exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import yaml

from vmcp_trio.http.client import HttpClient, HttpError

from .gateway_helpers import RawClient
from .helpers import ROOT, answers_ok, free_port, stop_process


@dataclass
class Served:
    url: str
    """The ``/mcp`` URL."""
    process: subprocess.Popen[bytes]
    log_path: Path
    killed: bool = False
    """SIGKILLed by the test (:meth:`kill`): its exit status is not checked."""

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL: nothing of it runs any more (no drain, no cleanup)."""
        self.killed = True
        self.process.kill()
        self.process.wait(timeout=10)

    async def health(self) -> int:
        http = HttpClient()
        try:
            status, _, _ = await http.request("GET", self.base + "/health")
        except HttpError:
            return 0
        finally:
            await http.aclose()
        return status

    async def assert_serving(self, *, token: str | None = None, tracebacks: int = 0) -> None:
        """The process is alive, ``/health`` is 200, a well-behaved client's call works, and
        the log holds ``tracebacks`` tracebacks (none, unless a test injected a fault)."""
        assert self.process.poll() is None, f"vmcp exited ({self.process.returncode}):\n" + \
            self.log()[-3000:]
        assert await self.health() == 200
        client = RawClient(self.url)
        client.token = token
        try:
            with trio.fail_after(15):
                assert (await client.initialize()).status == 200
                reply = await client.request("tools/call", {
                    "name": "clock_echo", "arguments": {"message": "still here"}})
            assert reply.result["content"][0]["text"] == "still here"
        finally:
            await client.aclose()
        assert self.log().count("Traceback") == tracebacks, self.log()[-3000:]


@contextmanager
def serving(docs: list[dict[str, Any]], workdir: Path, *flags: str,
            port: int | None = None, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``vmcp serve`` on ``docs`` (written to ``workdir``) on 127.0.0.1, with ``env`` added to
    its environment, ready once ``/health`` answers; stopped with SIGTERM at the end, and it
    must then exit 0. (Synchronous, so that a module-scoped fixture can hold it.)"""
    config = workdir / "vmcp.yaml"
    config.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    port = port or free_port()
    log_path = workdir / "vmcp.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmcp_trio", "serve", "--config", str(config), "--port",
             str(port), "--drain-delay", "0s", *flags], cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    running = Served(f"http://127.0.0.1:{port}/mcp", process, log_path)
    try:
        deadline = time.monotonic() + 30
        while not answers_ok(running.base + "/health"):
            assert process.poll() is None, running.log()
            assert time.monotonic() < deadline, "vmcp did not start:\n" + running.log()
            time.sleep(0.1)
        yield running
    finally:
        stop_process(process, timeout=20)
    assert running.killed or process.returncode == 0, running.log()[-3000:]


