"""`make bench`: run every benchmark, keep each one's JSON line, print a table.

A benchmark is a script in bench/ whose last stdout line is ``{"bench": ..., "metrics": ...,
"ratios": ...}`` (CONTRACT.md). Results go to ``bench/results/<name>.json`` and all of them to
``bench/results/latest.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("auth_hot_path", "gateway_overhead", "proxy_overhead", "stdio_overhead",
              "tunnel_overhead", "tracing",
              "streams", "http2_streams", "token_exchange", "startup", "capacity",
              "capacity_curves",
              "sick_backends")


def main() -> int:
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    gathered: dict[str, object] = {}
    failed = []
    for name in BENCHMARKS:
        script = HERE / f"{name}.py"
        if not script.exists():
            continue
        print(f"== {name}", flush=True)
        started = time.time()
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=1800, check=False)
        lines = [line for line in run.stdout.splitlines() if line.strip()]
        try:
            result = json.loads(lines[-1])
            assert result["bench"] == name
        except (IndexError, ValueError, KeyError, AssertionError):
            print(f"   failed (exit {run.returncode}):\n{run.stderr[-2000:]}", flush=True)
            failed.append(name)
            continue
        result["seconds"] = round(time.time() - started, 1)
        (results_dir / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        gathered[name] = result
        for ratio, value in result["ratios"].items():
            print(f"   {ratio:<40} {value}", flush=True)
    (results_dir / "latest.json").write_text(json.dumps(gathered, indent=2) + "\n")
    print(f"results: {results_dir / 'latest.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
