"""``vmcp serve`` as an operator's probes and scrapes see it (a real process,
:mod:`.serve_helpers`): the liveness paths Kubernetes and load balancers use, and the series
that say which build and which configuration a replica runs, across reloads."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import orjson
import trio
import yaml

from vmcp_trio.http.client import HttpClient
from vmcp_trio.runtime.build import VERSION, revision

from .gateway_helpers import quickstart_docs
from .serve_helpers import Served, serving


async def scrape(served: Served) -> str:
    http = HttpClient()
    try:
        status, _, body = await http.request("GET", served.base + "/metrics")
    finally:
        await http.aclose()
    assert status == 200
    return body.decode()


def configuration(text: str) -> tuple[str, float]:
    """The ``vmcp_config_info`` hash and the ``vmcp_config_loaded_timestamp_seconds``."""
    [digest] = re.findall(r'^vmcp_config_info\{hash="([^"]*)"\} 1\.0$', text, re.M)
    [loaded] = re.findall(r"^vmcp_config_loaded_timestamp_seconds (\S+)$", text, re.M)
    return digest, float(loaded)


async def reloaded(served: Served, outcome: str, count: float) -> str:
    """SIGHUP, and the scrape once ``vmcp_reloads_total{outcome}`` reached ``count``."""
    served.process.send_signal(signal.SIGHUP)
    with trio.fail_after(15):
        while True:
            text = await scrape(served)
            if f'vmcp_reloads_total{{outcome="{outcome}"}} {count}' in text:
                return text
            await trio.sleep(0.1)


async def test_liveness_answers_on_health_healthz_and_livez(tmp_path: Path) -> None:
    """The three names of liveness answer alike, from the start (readiness may wait for the
    backends: ``/readyz``, tests/test_gateway_health.py)."""
    with serving(quickstart_docs(), tmp_path) as served:
        http = HttpClient()
        answers = {path: await http.request("GET", served.base + path)
                   for path in ("/health", "/healthz", "/livez")}
        await http.aclose()
    for status, _, body in answers.values():
        assert status == 200 and orjson.loads(body) == {"status": "ok"}


async def test_metrics_name_the_build_and_the_configuration_a_replica_runs(
        tmp_path: Path) -> None:
    """``vmcp_build_info{version,revision}``; ``vmcp_config_info{hash}`` and
    ``vmcp_config_loaded_timestamp_seconds``: set at start, moved by a reload that accepts the
    files (the same documents laid out anew keep their hash; a change gets a new one), left
    alone by one that refuses them."""
    docs = quickstart_docs()
    with serving(docs, tmp_path) as served:
        text = await scrape(served)
        assert f'vmcp_build_info{{revision="{revision()}",version="{VERSION}"}} 1.0' in text
        assert "process_resident_memory_bytes " in text
        first, started = configuration(text)
        assert re.fullmatch(r"[0-9a-f]{12}", first)
        config = tmp_path / "vmcp.yaml"

        config.write_text("# the same documents, keys in another order\n"
                          + yaml.safe_dump_all(docs, sort_keys=False, indent=4))
        same, touched = configuration(await reloaded(served, "unchanged", 1.0))
        assert same == first and touched > started

        clock = next(d for d in docs if d["metadata"]["name"] == "clock")
        clock["spec"]["env"] = {"CLOCK_RELOADED": "1"}
        config.write_text(yaml.safe_dump_all(docs))
        changed, applied = configuration(await reloaded(served, "ok", 1.0))
        assert changed != first and applied > touched

        docs[-1]["spec"]["incomingAuth"] = {"type": "sideways"}
        config.write_text(yaml.safe_dump_all(docs))
        text = await reloaded(served, "invalid", 1.0)
        assert configuration(text) == (changed, applied)
        assert text.count("vmcp_config_info{") == 1
