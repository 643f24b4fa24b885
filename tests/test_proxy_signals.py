"""``vmcp proxy`` as an operator drives it with signals: Ctrl-C at a terminal, SIGINT and SIGTERM
from a supervisor, SIGHUP; its bearer token's file rotated under it; ``--log-level``.

Each test runs the real command (``python -m vmcp_trio proxy``) against the recording remote of
:mod:`.proxy_helpers`, in this process, and reads what the proxy writes. Ctrl-C is typed the way
a terminal types it: the proxy runs with a pseudo-terminal as its controlling terminal, and
``\\x03`` is written to the terminal's side, whose line discipline sends SIGINT to its
foreground job.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from .helpers import ROOT
from .proxy_helpers import fetch, recording_remote


class Output:
    """What a process writes, gathered as it comes, from a pipe or a terminal's side."""

    def __init__(self) -> None:
        self.text = ""

    async def gather_pipe(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            self.text += chunk.decode(errors="replace")

    async def gather_terminal(self, fd: int) -> None:
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the terminal's last user left
                return
            if not chunk:
                return
            self.text += chunk.decode(errors="replace")

    async def wait_for(self, text: str, timeout: float = 20) -> None:
        with trio.fail_after(timeout):
            while text not in self.text:
                await trio.sleep(0.05)

    def url(self) -> str:
        return next(word for word in self.text.split() if word.startswith("http://127.0.0.1"))


def proxy_command(target: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "vmcp_trio", "proxy", "--target-uri", target, *flags, "remote"]


@asynccontextmanager
async def running_proxy(target: str, *flags: str
                        ) -> AsyncIterator[tuple[trio.Process, Output]]:
    """``vmcp proxy`` to ``target`` in a session of its own, its output gathered, once it
    printed where it listens."""
    process = await trio.lowlevel.open_process(
        proxy_command(target, *flags), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True)
    output = Output()
    async with trio.open_nursery() as nursery:
        assert process.stdout is not None
        nursery.start_soon(output.gather_pipe, process.stdout)
        await output.wait_for(" -> ")
        yield process, output


async def open_stream(url: str) -> None:
    """A request whose answer, an event stream, the remote never ends (cut by the proxy)."""
    with contextlib.suppress(Exception):
        await fetch(url)


ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONUNBUFFERED": "1"}


def _take_terminal() -> None:
    """In the child, after ``setsid``: stdin (the pseudo-terminal) becomes the controlling
    terminal, and the child its foreground job."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def test_ctrl_c_at_a_terminal_stops_at_once_with_a_request_in_flight() -> None:
    """The default drain delay (5s) and the shutdown grace (30s) do not hold a person's Ctrl-C,
    not even with a request still open."""
    async with recording_remote() as (target, remote):
        leader, follower = pty.openpty()
        process = await trio.lowlevel.open_process(
            proxy_command(target), cwd=ROOT, env=ENV, stdin=follower, stdout=follower,
            stderr=follower, start_new_session=True, preexec_fn=_take_terminal)
        os.close(follower)
        output = Output()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(output.gather_terminal, leader)
                await output.wait_for(" -> ")
                nursery.start_soon(open_stream, output.url().replace("/mcp", "/quiet"))
                with trio.fail_after(10):
                    while not remote.seen:
                        await trio.sleep(0.02)
                typed = trio.current_time()
                os.write(leader, b"\x03")
                with trio.fail_after(10):
                    await process.wait()
                stopped_after = trio.current_time() - typed
                nursery.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()
            os.close(leader)
    assert process.returncode == 0, output.text
    assert stopped_after < 3, (stopped_after, output.text)
    assert "vmcp proxy: Ctrl-C, stopping" in output.text and "Traceback" not in output.text


async def test_sigint_from_a_supervisor_still_drains() -> None:
    """Without a terminal, SIGINT drains as the contract says: requests are forwarded for the
    drain delay before the proxy stops."""
    async with recording_remote() as (target, _), \
            running_proxy(target, "--drain-delay", "2s") as (process, output):
        sent = trio.current_time()
        process.send_signal(signal.SIGINT)
        await output.wait_for("draining")
        status, _, _ = await fetch(output.url())  # still forwarded during the delay
        with trio.fail_after(20):
            await process.wait()
        stopped_after = trio.current_time() - sent
    assert status == 200
    assert process.returncode == 0 and stopped_after >= 1.9, (stopped_after, output.text)
    assert "vmcp proxy: SIGINT, draining" in output.text
    assert "INFO    vmcp.proxy: draining: requests are refused after 2s" in output.text


async def test_sighup_and_a_changed_file_send_the_new_bearer_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token-1\n")
    async with recording_remote() as (target, remote), \
            running_proxy(target, "--remote-auth-bearer-token-file", str(token_file),
                          "--drain-delay", "0s") as (process, output):
        url = output.url()
        await fetch(url)
        # The same size and modification time: only SIGHUP can tell the proxy.
        before = token_file.stat()
        token_file.write_text("token-2\n")
        os.utime(token_file, ns=(before.st_atime_ns, before.st_mtime_ns))
        process.send_signal(signal.SIGHUP)
        await output.wait_for("re-read: the new token is sent from now on")
        await fetch(url)
        # A new file, as a Secret volume's update makes it: noticed without a signal.
        (tmp_path / "token.new").write_text("token-3\n")
        os.replace(tmp_path / "token.new", token_file)
        with trio.fail_after(10):
            while output.text.count("new token is sent") < 2:
                await trio.sleep(0.05)
        await fetch(url)
        process.terminate()
        with trio.fail_after(20):
            await process.wait()
    sent = [dict(seen["headers"])["authorization"] for seen in remote.seen]
    assert sent == ["Bearer token-1", "Bearer token-2", "Bearer token-3"]
    assert f"vmcp proxy: SIGHUP, re-reading --remote-auth-bearer-token-file {token_file}" \
        in output.text
    assert not any(f"token-{n}" in output.text for n in "123")  # a token is never logged
    assert process.returncode == 0, output.text


async def test_log_level_warning_drops_the_info_lines_and_the_access_records() -> None:
    async with recording_remote() as (target, _):
        process = await trio.lowlevel.open_process(
            proxy_command(target, "--log-level", "warning", "--drain-delay", "0s"), cwd=ROOT,
            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        output = Output()
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None
            nursery.start_soon(output.gather_pipe, process.stdout)
            await output.wait_for(" -> ")
            status, _, _ = await fetch(output.url())
            process.terminate()
            with trio.fail_after(20):
                await process.wait()
    assert status == 200 and process.returncode == 0
    assert "vmcp proxy: SIGTERM, draining" in output.text  # the operator's lines stay
    assert "INFO" not in output.text and "vmcp.access" not in output.text, output.text
