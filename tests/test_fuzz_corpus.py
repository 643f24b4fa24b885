"""The committed fuzz corpora replay cleanly through the harnesses (a regression run of what
`make fuzz` found and kept; the fuzzers themselves run in `make fuzz`)."""

from __future__ import annotations

import importlib.util
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


@pytest.mark.parametrize("harness", HARNESSES, ids=lambda p: p.stem)
def test_corpus_replays(harness: Path) -> None:
    corpus = sorted((FUZZ / "corpus" / harness.stem).iterdir())
    assert len(corpus) >= 5, "each harness keeps a seed corpus"
    run = load(harness).TestOneInput
    for case in corpus:
        run(case.read_bytes())
