"""How fast the command line starts, against the interpreter starting and doing nothing.

Each command runs ``--runs`` times (alternated, so that the machine's load hits all alike); the
medians are compared with ``python -c pass``: ``vmcp --help`` should be within 3x of it (each
command imports only the stacks it uses), ``vmcp validate`` pays for the validation stack
(pydantic, YAML) but not for the server, Redis or the MCP SDK, and ``vmcp proxy stdio`` (a
desktop client starts it with every session: here until the end of its stdin, which it meets at
once) pays for the proxy's HTTP client and credentials but not for Redis or the server.

Run: ``python bench/startup.py [--runs 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import emit  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
VMCP = str(Path(sys.executable).parent / "vmcp")
COMMANDS = {
    "python_pass": [sys.executable, "-c", "pass"],
    "help": [VMCP, "--help"],
    "validate": [VMCP, "validate", "-c", str(ROOT / "examples" / "quickstart.yaml")],
    "proxy_stdio": [VMCP, "proxy", "stdio", "--target-uri", "http://127.0.0.1:9/mcp"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
            times[name].append(time.perf_counter() - started)
    medians = {name: round(statistics.median(runs) * 1000, 1) for name, runs in times.items()}
    base = medians["python_pass"]
    emit("startup", {"runs": args.runs, "median_ms": medians},
         {"help_vs_python": round(medians["help"] / base, 2),
          "validate_vs_python": round(medians["validate"] / base, 2),
          "proxy_stdio_vs_python": round(medians["proxy_stdio"] / base, 2)})


if __name__ == "__main__":
    main()
