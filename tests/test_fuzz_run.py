"""A short run of every fuzz/ harness under atheris (the long runs are `make fuzz`).

Each harness mutates its committed seed corpus for 20,000 inputs, without coverage
instrumentation (instrumenting every loaded module costs about a minute per harness; `make fuzz`
does it); any exception other than the harness's own clear errors is a crash, and fails the
test with atheris's report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT

HARNESSES = sorted((ROOT / "fuzz").glob("fuzz_*.py"))
RUNS = 20_000


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda p: p.stem)
def test_a_short_fuzz_run_finds_no_crash(harness: Path, tmp_path: Path) -> None:
    corpus = ROOT / "fuzz" / "corpus" / harness.stem
    result = subprocess.run(
        [sys.executable, str(harness), f"-runs={RUNS}", "-seed=1", "-max_len=4096",
         str(tmp_path), str(corpus)],
        cwd=ROOT / "fuzz", capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "VMCP_FUZZ_INSTRUMENT": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr, result.stderr[-3000:]
