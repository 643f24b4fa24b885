"""The README's commands work as written: every ``sh`` block runs, offline, from a folder that
looks like a clone (``examples/`` and ``.venv/`` of this one). ``make run`` and ``make test``
are the two commands CI and the quickstart tests already run; the client snippet runs against a
quickstart gateway started here (on a free port instead of 4483, the only change)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .gateway_helpers import quickstart_docs
from .helpers import ROOT
from .serve_helpers import serving

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = [match.group(1) for match in re.finditer(r"```sh\n(.*?)```", README, re.S)]
QUICKSTART_URL = "http://127.0.0.1:4483/mcp"


def test_the_readme_has_runnable_blocks() -> None:
    assert len(BLOCKS) >= 4 and not any("<" in b and "<<" not in b for b in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.startswith("make ")
                                   and QUICKSTART_URL not in b])
def test_a_readme_block_runs(block: str, tmp_path: Path) -> None:
    for name in ("examples", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]


async def test_the_readme_client_snippet_runs(tmp_path: Path) -> None:
    [snippet] = [b for b in BLOCKS if QUICKSTART_URL in b and "<<" in b]
    with serving(quickstart_docs(), tmp_path) as served:
        run = subprocess.run(["bash", "-euo", "pipefail", "-c",
                              snippet.replace(QUICKSTART_URL, served.url)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == "2026-07-28"
    assert "'clock_add'" in run.stdout and "{'sum': 5}" in run.stdout
