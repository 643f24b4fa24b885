"""The soak's verdict: failures against the fault windows, recovery times, and whether memory,
descriptors, tasks and sessions stayed flat; written as ``soak.md`` and ``soak.png``.

Rules it keeps:

* A fault's window is ``[first action, recovered + settle]``. A failed operation is *excused*
  when its span overlaps the window of a fault that touched its backend (any backend, for a
  session's ``initialize``: it needs all of them); an unexcused failure
  overlapping no window is ``failed_outside_faults``, one overlapping only windows of faults
  that touched other backends is ``failed_untouched_backend``. Both targets are 0.
* Flatness is judged per replica on the samples after the warm-up and at least a minute after
  the replica last started (the replica-restart fault starts one afresh): the least-squares
  slope of RSS in MiB per hour, and descriptors and tasks at the start and end of that span.
* "Back to the baseline": the last sample against the one taken before the clients came, per
  replica that was not restarted in between. The last sample is taken once the sessions are
  back to where they were, or the replicas' session TTL (120 s) has passed since the clients
  left: a session whose client vanished without a DELETE lives until then, by design; the
  sessions still held when the clients left are reported beside it.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak_load import EVERY, MIX, Outcome  # type: ignore[import-not-found]


@dataclass
class FaultRecord:
    name: str
    touched: list[str]
    began: float
    acted: float
    """When the fault's last action was done (the restart, the SIGCONT)."""
    recovered: float


def windows(faults: list[FaultRecord], settle: float) -> list[tuple[float, float, set[str]]]:
    return [(f.began, f.recovered + settle, set(f.touched)) for f in faults]


def judge(outcomes: list[Outcome], faults: list[FaultRecord], settle: float) -> dict[str, Any]:
    spans = windows(faults, settle)
    outside, untouched, excused = [], [], []
    for outcome in outcomes:
        if outcome.ok:
            continue
        overlapping = [touched for begin, end, touched in spans
                       if outcome.started <= end and outcome.ended >= begin]
        if any(outcome.backend in touched or (outcome.backend == EVERY and touched)
               for touched in overlapping):
            excused.append(outcome)
        elif overlapping:
            untouched.append(outcome)
        else:
            outside.append(outcome)
    return {"outside": outside, "untouched": untouched, "excused": excused}


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    if len(points) < 3:
        return 0.0
    times = [t for t, _ in points]
    values = [v for _, v in points]
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


def flatness(samples: list[dict[str, Any]], faults: list[FaultRecord],
             warm_until: float) -> list[dict[str, Any]]:
    load = [s for s in samples if s["phase"] == "load"]
    restarts = [f.acted for f in faults if f.name == "replica-restart"]
    rows = []
    for index in range(len(samples[0]["replicas"])):
        since = warm_until
        if index == 1 and restarts:
            since = max(since, restarts[-1] + 60)
        span = [(s["t"], s["replicas"][index]) for s in load if s["t"] >= since
                and s["replicas"][index].get("rss_mib")]
        if len(span) < 3:
            rows.append({"replica": index, "samples": len(span)})
            continue
        first, last = span[0][1], span[-1][1]
        half = span[len(span) // 2:]
        rows.append({
            "replica": index, "samples": len(span), "minutes": (span[-1][0] - span[0][0]) / 60,
            "rss_first": first["rss_mib"], "rss_last": last["rss_mib"],
            "rss_mib_per_hour": slope_per_hour([(t, r["rss_mib"]) for t, r in span]),
            "rss_mib_per_hour_last_half": slope_per_hour([(t, r["rss_mib"]) for t, r in half]),
            "sessions_first": first.get("vmcp_sessions", 0),
            "sessions_last": last.get("vmcp_sessions", 0),
            "fds_first": first["fds"], "fds_last": last["fds"],
            "fds_max": max(r["fds"] for _, r in span),
            "tasks_first": first.get("vmcp_tasks", 0), "tasks_last": last.get("vmcp_tasks", 0)})
    return rows


def baseline(samples: list[dict[str, Any]], faults: list[FaultRecord]) -> list[dict[str, Any]]:
    before = next(s for s in samples if s["phase"] == "before")
    left = next(s for s in samples if s["phase"] == "left")
    after = next(s for s in samples if s["phase"] == "after")
    restarted = any(f.name == "replica-restart" for f in faults)
    rows = []
    for index, (b, lt, a) in enumerate(zip(before["replicas"], left["replicas"],
                                           after["replicas"], strict=True)):
        rows.append({"replica": index, "restarted": restarted and index == 1,
                     "seconds_after": round(after["t"] - left["t"], 1),
                     "sessions_before": b.get("vmcp_sessions", 0),
                     "sessions_left": lt.get("vmcp_sessions", 0),
                     "fds_before": b["fds"], "fds_after": a["fds"],
                     "tasks_before": b.get("vmcp_tasks", 0),
                     "tasks_after": a.get("vmcp_tasks", 0),
                     "sessions_after": a.get("vmcp_sessions", 0),
                     "streams_after": a.get("vmcp_open_streams", 0),
                     "rss_before": b["rss_mib"], "rss_after": a["rss_mib"]})
    return rows


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def report(outcomes: list[Outcome], samples: list[dict[str, Any]], faults: list[FaultRecord],
           args: argparse.Namespace, results: Path, *, settle: float,
           counts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """The run's metrics (``counts``: the load's own, such as sessions reopened) and ratios,
    with the Markdown report and the plot written to ``results``."""
    verdict = judge(outcomes, faults, settle)
    start = min(o.started for o in outcomes)
    warm_until = start + min(60.0, args.minutes * 6)
    kinds = {kind: Counter() for kind in MIX}  # type: ignore[var-annotated]
    for outcome in outcomes:
        kinds[outcome.kind]["attempted"] += 1
        kinds[outcome.kind]["ok" if outcome.ok else "failed"] += 1
    causes = Counter(f"{o.kind}: {o.cause}" for o in outcomes if not o.ok)
    spans = windows(faults, settle)
    quiet = [o.ended - o.started for o in outcomes if o.ok and o.kind in ("call", "call-2026")
             and not any(o.started <= end and o.ended >= begin for begin, end, _ in spans)]
    flat = flatness(samples, faults, warm_until)
    back = baseline(samples, faults)
    failed = sum(1 for o in outcomes if not o.ok)
    metrics: dict[str, Any] = {
        "minutes": args.minutes, "rate": args.rate, "operations": len(outcomes),
        "succeeded": len(outcomes) - failed, "failed": failed,
        "failed_in_fault_windows": len(verdict["excused"]),
        "failed_outside_faults": len(verdict["outside"]),
        "failed_untouched_backend": len(verdict["untouched"]),
        "faults": len(faults),
        "recovery_s": {f"{f.name}@{f.began - start:.0f}": round(f.recovered - f.acted, 2)
                       for f in faults},
        "fault_log": [{"fault": f.name, "touched": f.touched, "began_s": round(f.began - start, 2),
                       "acted_s": round(f.acted - start, 2),
                       "recovered_s": round(f.recovered - start, 2)} for f in faults],
        "call_p50_ms": round(percentile(quiet, 0.5) * 1000, 1),
        "call_p99_ms": round(percentile(quiet, 0.99) * 1000, 1),
        **counts,
        "flatness": flat, "baseline": back,
        "unexcused": [f"{o.kind} at {o.started - start:.1f}s: {o.cause}"
                      for o in verdict["outside"] + verdict["untouched"]][:50]}
    # a replica restarted late is judged over minutes: its warm-up is no trend
    rss_slopes = [row["rss_mib_per_hour"] for row in flat
                  if "rss_mib_per_hour" in row and row["minutes"] >= args.minutes / 2]
    ratios = {"succeeded_share": round((len(outcomes) - failed) / len(outcomes), 5),
              "worst_rss_mib_per_hour": round(max(rss_slopes, default=0.0), 2)}
    write_markdown(results / "soak.md", metrics, kinds, causes, faults, start)
    plot(results / "soak.png", outcomes, samples, faults, start, settle)
    return metrics, ratios


def write_markdown(path: Path, metrics: dict[str, Any], kinds: dict[str, Counter[str]],
                   causes: Counter[str], faults: list[FaultRecord], start: float) -> None:
    lines = [f"# Soak: {metrics['minutes']:g} minutes at {metrics['rate']:g} operations a second",
             "", "| | |", "|---|---|",
             f"| operations | {metrics['operations']:,} |",
             f"| succeeded | {metrics['succeeded']:,} |",
             f"| failed inside a fault's window, on a backend it touched | "
             f"{metrics['failed_in_fault_windows']:,} |",
             f"| **failed outside every fault window** (target 0) | "
             f"**{metrics['failed_outside_faults']}** |",
             f"| **failed on a backend the fault did not touch** (target 0) | "
             f"**{metrics['failed_untouched_backend']}** |",
             f"| faults | {metrics['faults']} |",
             f"| answers sent again after a 503 / sessions opened again after a 404 | "
             f"{metrics.get('answers_resent_after_503', 0)} / "
             f"{metrics.get('sessions_reopened_after_404', 0)} |",
             f"| `call` p50 / p99 outside faults | {metrics['call_p50_ms']} / "
             f"{metrics['call_p99_ms']} ms |", "",
             "| operation | attempted | succeeded | failed |", "|---|---:|---:|---:|"]
    for kind, counts in kinds.items():
        lines.append(f"| {kind} | {counts['attempted']:,} | {counts['ok']:,} | "
                     f"{counts['failed']:,} |")
    lines += ["", "| fault | at (s) | touched | recovered after (s) |", "|---|---:|---|---:|"]
    for fault in faults:
        lines.append(f"| {fault.name} | {fault.began - start:.0f} | "
                     f"{', '.join(fault.touched) or 'nothing'} | "
                     f"{fault.recovered - fault.acted:.2f} |")
    lines += ["", "| failures by cause | count |", "|---|---:|"]
    lines += [f"| {cause} | {count} |" for cause, count in causes.most_common()]
    lines += ["", "| replica | minutes judged | RSS first → last (MiB) | RSS slope (MiB/h): "
              "all, last half | fds first → last (max) | tasks first → last | sessions first → "
              "last |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in metrics["flatness"]:
        if "rss_mib_per_hour" not in row:
            continue
        lines.append(f"| {row['replica']} | {row['minutes']:.1f} | {row['rss_first']:.1f} → "
                     f"{row['rss_last']:.1f} | {row['rss_mib_per_hour']:+.2f}, "
                     f"{row['rss_mib_per_hour_last_half']:+.2f} | "
                     f"{row['fds_first']} → {row['fds_last']} ({row['fds_max']}) | "
                     f"{row['tasks_first']:.0f} → {row['tasks_last']:.0f} | "
                     f"{row['sessions_first']:.0f} → {row['sessions_last']:.0f} |")
    waited = max((row.get("seconds_after", 15.0) for row in metrics["baseline"]), default=0)
    lines += ["", f"Before the clients came → {waited:.0f} s after they left:", "",
              "| replica | fds | tasks | sessions (when they left) | streams after | RSS MiB |",
              "|---|---:|---:|---:|---:|---:|"]
    for row in metrics["baseline"]:
        note = " (restarted)" if row["restarted"] else ""
        lines.append(f"| {row['replica']}{note} | {row['fds_before']} → {row['fds_after']} | "
                     f"{row['tasks_before']:.0f} → {row['tasks_after']:.0f} | "
                     f"{row.get('sessions_before', 0):.0f} → {row['sessions_after']:.0f} "
                     f"({row.get('sessions_left', 0):.0f}) | {row['streams_after']:.0f} | "
                     f"{row['rss_before']:.0f} → {row['rss_after']:.0f} |")
    if metrics["unexcused"]:
        lines += ["", "Unexcused failures:", ""] + [f"- {u}" for u in metrics["unexcused"]]
    path.write_text("\n".join(lines) + "\n")


def plot(path: Path, outcomes: list[Outcome], samples: list[dict[str, Any]],
         faults: list[FaultRecord], start: float, settle: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bin_s = 5.0
    bins: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        bins.setdefault(int((outcome.ended - start) // bin_s), []).append(outcome)
    xs = sorted(bins)
    minutes = [x * bin_s / 60 for x in xs]
    ok_rate = [sum(o.ok for o in bins[x]) / bin_s for x in xs]
    started: dict[int, int] = {}  # failures where they began (a timeout ends 25 s later)
    for outcome in outcomes:
        if not outcome.ok:
            key = int((outcome.started - start) // bin_s)
            started[key] = started.get(key, 0) + 1
    failed = [started.get(x, 0) for x in xs]
    p99 = [percentile([o.ended - o.started for o in bins[x] if o.ok and o.kind == "call"],
                      0.99) * 1000 for x in xs]
    figure, axes = plt.subplots(6, 1, figsize=(12, 15), sharex=True)
    axes[0].plot(minutes, ok_rate, color="tab:green")
    axes[0].set_ylabel("succeeded / s")
    axes[1].bar(minutes, failed, width=bin_s / 60, color="tab:red")
    axes[1].set_ylabel(f"failed, by start, per {bin_s:.0f} s")
    axes[2].plot(minutes, p99, color="tab:blue")
    axes[2].set_ylabel("call p99 (ms)")
    load = [s for s in samples if s["phase"] == "load"]
    times = [(s["t"] - start) / 60 for s in load]
    for index in range(len(samples[0]["replicas"])):
        axes[3].plot(times, [s["replicas"][index]["rss_mib"] or None for s in load],
                     label=f"replica {index}")
        axes[4].plot(times, [s["replicas"][index]["fds"] or None for s in load],
                     label=f"replica {index}")
        axes[5].plot(times, [s["replicas"][index].get("vmcp_sessions") for s in load],
                     label=f"replica {index}")
    axes[3].set_ylabel("RSS (MiB)")
    axes[4].set_ylabel("open descriptors")
    axes[5].set_ylabel("sessions held")
    axes[5].set_xlabel("minutes")
    axes[3].legend(loc="lower right", fontsize="small")
    for axis in axes:
        for fault in faults:
            axis.axvspan((fault.began - start) / 60, (fault.recovered + settle - start) / 60,
                         color="tab:orange", alpha=0.25)
    for fault in faults:
        axes[0].annotate(fault.name, ((fault.began - start) / 60, 0), rotation=90,
                         fontsize="x-small", va="bottom")
    figure.suptitle("vmcp soak: 3 replicas behind haproxy, Redis via Sentinel; faults shaded")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
