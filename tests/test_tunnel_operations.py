"""The tunnel as an operator runs it: ``vmcp proxy tunnel`` as a real process (its probes and
metrics on ``--metrics-port``, what it logs when the relay is down, how it ends when the relay
keeps refusing its token) against ``vmcp tunnel relay`` as its command runs it
(:mod:`.tunnel_helpers`), whose own probes answer beside the tunnels."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import trio

from vmcp_trio.http.client import HttpClient, HttpError
from vmcp_trio.runtime.build import VERSION, revision
from vmcp_trio.tunnel.relay import TunnelRelay
from vmcp_trio.tunnel.tokens import TunnelTokens, new_token_line

from .helpers import ROOT, free_port, stop_process
from .tunnel_helpers import LINE, TOKEN, relay_running

BUILD_INFO = f'vmcp_build_info{{revision="{revision()}",version="{VERSION}"}} 1.0'


@contextmanager
def agent_process(relay_port: int, token: str, workdir: Path, *flags: str
                  ) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``vmcp proxy tunnel demo`` to a relay at ``relay_port``, its output in a log file;
    stopped with SIGTERM at the end if it still runs."""
    token_file = workdir / "demo.token"
    token_file.write_text(token, encoding="utf-8")
    log_path = workdir / "agent.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "vmcp_trio", "proxy", "tunnel", "--relay-url",
             f"ws://127.0.0.1:{relay_port}", "--tunnel-token-file", str(token_file),
             "--target-uri", "http://127.0.0.1:9/mcp", *flags, "demo"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield process, log_path
    finally:
        stop_process(process)


async def get(http: HttpClient, url: str) -> tuple[int, bytes]:
    try:
        status, _, body = await http.request("GET", url)
    except HttpError:
        return 0, b""
    return status, body


async def test_the_agent_logs_why_it_cannot_reach_the_relay_and_its_probes_follow_it(
        tmp_path: Path) -> None:
    """Relay down: the agent's log says why in words (``cannot connect to 127.0.0.1:PORT:
    connection refused``), its ``/health`` is 200 (it lives) and ``/readyz`` 503; once the relay
    is up the agent connects and ``/readyz`` is 200. Its ``/metrics`` carries the process's
    series and ``vmcp_build_info``. SIGTERM ends it with 0."""
    relay_port, metrics_port = free_port(), free_port()
    probes = f"http://127.0.0.1:{metrics_port}"
    http = HttpClient()
    with agent_process(relay_port, TOKEN, tmp_path, "--metrics-port",
                       str(metrics_port)) as (agent, log_path):
        with trio.fail_after(20):
            while f"127.0.0.1:{relay_port}" not in log_path.read_text():
                assert agent.poll() is None, log_path.read_text()
                await trio.sleep(0.1)
        with trio.fail_after(10):  # the listener may come up just after the first try
            while (await get(http, f"{probes}/health"))[0] != 200:
                assert agent.poll() is None, log_path.read_text()
                await trio.sleep(0.1)
        status, body = await get(http, f"{probes}/readyz")
        assert status == 503 and orjson.loads(body) == {
            "status": "connecting", "tunnel": "demo", "connected": False}
        log = log_path.read_text()
        assert (f"tunnel demo: the connection to the relay failed: cannot connect to "
                f"127.0.0.1:{relay_port}: connection refused") in log
        assert "Error(" not in log and "Traceback" not in log

        async with relay_running(TunnelRelay(TunnelTokens.parse(LINE)), relay_port):
            with trio.fail_after(20):
                while (await get(http, f"{probes}/readyz"))[0] != 200:
                    await trio.sleep(0.2)
            status, body = await get(http, f"{probes}/metrics")
            text = body.decode()
            assert status == 200 and BUILD_INFO in text
            assert "process_resident_memory_bytes " in text
            assert "vmcp_tunnel_agents_connected 1.0" in text
            stop_process(agent)
    await http.aclose()
    assert agent.returncode == 0, log_path.read_text()


async def test_an_agent_whose_token_the_relay_keeps_refusing_exits_1_saying_so(
        tmp_path: Path) -> None:
    """Three refusals in a row (1 s, then 2 s apart) and the agent stops, exit 1, with one line
    naming the cause, instead of knocking on the relay for ever."""
    relay = TunnelRelay(TunnelTokens.parse(LINE))
    relay_port = free_port()
    async with relay_running(relay, relay_port):
        with agent_process(relay_port, "x" * 43, tmp_path) as (agent, log_path):
            with trio.fail_after(20):
                while agent.poll() is None:
                    await trio.sleep(0.1)
    log = log_path.read_text()
    assert agent.returncode == 1, log
    assert log.splitlines()[-1] == (
        "vmcp proxy tunnel: the relay refused the token of tunnel demo 3 times in a row "
        "(HTTP 403): is the tunnel in its --tokens file, with this token?")
    assert "Traceback" not in log
    assert relay.metrics.registry.get_sample_value(
        "vmcp_tunnel_connections_total", {"outcome": "refused"}) == 3


async def test_the_relay_answers_its_probes_and_an_unknown_tunnel_is_404() -> None:
    """``/health``, ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics`` are the relay's own; a
    tunnel the tokens file does not list is 404, a known one without its agent 503."""
    async with relay_running(TunnelRelay(TunnelTokens.parse(LINE))) as relay_url:
        http = HttpClient()
        answers = {path: await get(http, relay_url + path)
                   for path in ("/health", "/healthz", "/livez", "/readyz", "/metrics",
                                "/t/nobody/mcp", "/t/demo/mcp")}
        await http.aclose()
    assert {path: status for path, (status, _) in answers.items()} == {
        "/health": 200, "/healthz": 200, "/livez": 200, "/readyz": 200, "/metrics": 200,
        "/t/nobody/mcp": 404, "/t/demo/mcp": 503}
    assert orjson.loads(answers["/readyz"][1]) == {"status": "ready", "tunnels": 0}
    metrics = answers["/metrics"][1].decode()
    assert BUILD_INFO in metrics and "process_cpu_seconds_total " in metrics


async def test_sighup_reloads_the_relays_tokens_and_cuts_an_agent_no_longer_allowed(
        tmp_path: Path) -> None:
    """The relay re-reads its --tokens file on SIGHUP: a file that does not load leaves the old
    tokens in force (one line says so); a new token for ``demo`` disconnects the agent that
    connected with the old one, which the relay then refuses. SIGHUP to the agent is a line,
    not its end."""
    tokens = tmp_path / "tokens"
    tokens.write_text(LINE + "\n", encoding="utf-8")
    relay_port = free_port()
    relay_log = tmp_path / "relay.log"
    http = HttpClient()
    with relay_log.open("wb") as out:
        relay = subprocess.Popen(
            [sys.executable, "-m", "vmcp_trio", "tunnel", "relay", "--host", "127.0.0.1",
             "--port", str(relay_port), "--tokens", str(tokens)], cwd=ROOT,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        with agent_process(relay_port, TOKEN, tmp_path) as (agent, agent_log):
            with trio.fail_after(20):
                while "agent connected" not in relay_log.read_text():
                    assert relay.poll() is None, relay_log.read_text()
                    await trio.sleep(0.1)
            agent.send_signal(signal.SIGHUP)
            tokens.write_text("demo:sha256:not-hex\n", encoding="utf-8")
            relay.send_signal(signal.SIGHUP)
            with trio.fail_after(10):
                while "the tokens file was not reloaded" not in relay_log.read_text():
                    await trio.sleep(0.1)
            assert "agent disconnected" not in relay_log.read_text()
            _, new_line = new_token_line("demo")
            tokens.write_text(f"{new_line}\nother:sha256:{'0' * 64}\n", encoding="utf-8")
            relay.send_signal(signal.SIGHUP)
            with trio.fail_after(30):  # cut, then refused three times: the agent gives up
                while agent.poll() is None:
                    await trio.sleep(0.1)
            assert agent.returncode == 1
            log = agent_log.read_text()
            assert "SIGHUP: nothing to reload" in log and "refused the token" in log
        text = relay_log.read_text()
        assert ("SIGHUP: reloaded the tokens file: 2 tunnel(s); disconnected the agents of "
                "demo (no longer allowed)") in text
        assert TOKEN not in text
        status, body = await get(http, f"http://127.0.0.1:{relay_port}/readyz")
        assert status == 200 and orjson.loads(body)["tunnels"] == 0  # connected now
    finally:
        stop_process(relay)
        await http.aclose()
    assert relay.returncode == 0, relay_log.read_text()
