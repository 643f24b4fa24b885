"""The committed fuzz corpora replay cleanly through the harnesses (a regression run of what
`make fuzz` found and kept; the fuzzing itself, instrumented and for a minute per harness, is
`make fuzz`'s alone).

Every corpus is replayed twice: in this process, where a failure is a plain traceback, and
through its harness script under atheris, the way `make fuzz` starts it (``-runs=0``: the
corpus is executed and nothing is mutated), so that a broken harness script or a broken
``fuzz/harness.py`` fails here and not only on the next `make fuzz`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import ROOT

FUZZ = ROOT / "fuzz"
HARNESSES = sorted(FUZZ.glob("fuzz_*.py"))


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_harness_has_a_corpus_and_every_corpus_a_harness() -> None:
    """`make fuzz` runs each ``fuzz/fuzz_*.py`` on ``fuzz/corpus/<its name>``, and the tests
    below replay the corpora of the harnesses: a corpus without its harness would be replayed
    by nothing."""
    corpora = {path.name for path in (FUZZ / "corpus").iterdir() if path.is_dir()}
    assert corpora == {harness.stem for harness in HARNESSES}
    assert len(HARNESSES) >= 7


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda p: p.stem)
def test_corpus_replays(harness: Path) -> None:
    corpus = sorted((FUZZ / "corpus" / harness.stem).iterdir())
    assert len(corpus) >= 5, "each harness keeps a seed corpus"
    run = load(harness).TestOneInput
    for case in corpus:
        run(case.read_bytes())


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda p: p.stem)
def test_corpus_replays_under_atheris(harness: Path, tmp_path: Path) -> None:
    """The harness script as `make fuzz` runs it (without its coverage instrumentation, which
    takes about a minute per harness), executing every input of its corpus once."""
    corpus = FUZZ / "corpus" / harness.stem
    dictionary = FUZZ / f"{harness.stem}.dict"
    extra = [f"-dict={dictionary}"] if dictionary.exists() else []  # a broken one fails here
    result = subprocess.run(
        [sys.executable, str(harness), "-runs=0", *extra, str(tmp_path), str(corpus)],
        cwd=FUZZ, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "VMCP_FUZZ_INSTRUMENT": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    seeds = sum(1 for case in corpus.iterdir() if case.stat().st_size > 0)
    assert f"seed corpus: files: {seeds} " in result.stderr, result.stderr[-3000:]
    assert "INITED" in result.stderr and "Done" in result.stderr, result.stderr[-3000:]
    if extra:
        assert "Dictionary: " in result.stderr, result.stderr[-3000:]
