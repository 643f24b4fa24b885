"""The Grafana dashboard of ``deploy/grafana/``: every metric its panels (and its replica
variable) query is one a running ``vmcp serve`` exports, read from a real process's
``/metrics``; and it shows what an operator looks at first."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vmcp_trio.http.client import HttpClient

from .gateway_helpers import quickstart_docs
from .helpers import ROOT
from .serve_helpers import serving

DASHBOARD = ROOT / "deploy" / "grafana" / "vmcp-dashboard.json"
METRIC = re.compile(r"\b(?:vmcp|process)_[a-z0-9_]+")
"""A metric name of the gateway's (PromQL's functions and labels never start so)."""


def exported(text: str) -> set[str]:
    """Every series name a scrape can hold: the samples, and each family's (a histogram's
    ``_bucket``, ``_sum``, ``_count``), also those with no sample yet."""
    names = {line.split("{")[0].split()[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= ({f"{name}_bucket", f"{name}_sum", f"{name}_count"}
                      if kind == "histogram" else {name})
    return names


def queried(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """The metric names each panel's queries use, by panel title (and the variables')."""
    used = {panel["title"]: {name for target in panel["targets"]
                             for name in METRIC.findall(target["expr"])}
            for panel in dashboard["panels"] if panel["type"] != "row"}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            used[f"${variable['name']}"] = set(METRIC.findall(variable["definition"]))
    return used


async def test_every_metric_the_dashboard_queries_is_one_the_gateway_exports(
        tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    with serving(quickstart_docs(), tmp_path) as served:
        await served.assert_serving()  # a call: the request series have samples
        http = HttpClient()
        status, _, body = await http.request("GET", served.base + "/metrics")
        await http.aclose()
    assert status == 200
    names = exported(body.decode())
    used = queried(dashboard)
    assert all(used.values()), [title for title, metrics in used.items() if not metrics]
    unknown = {title: sorted(metrics - names) for title, metrics in used.items()
               if metrics - names}
    assert not unknown, unknown
    everything = set().union(*used.values())
    for essential in ("vmcp_requests_total", "vmcp_request_duration_seconds_bucket",
                      "vmcp_faults_total", "vmcp_sessions", "vmcp_open_streams",
                      "vmcp_backend_healthy", "vmcp_reloads_total", "vmcp_config_info",
                      "vmcp_build_info", "process_resident_memory_bytes",
                      "process_cpu_seconds_total"):
        assert essential in everything, essential
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
