"""Running a ``TestOneInput`` under atheris (imported only here, so the corpus replay in the
test suite needs no fuzzer installed)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def fuzz(test_one_input: Callable[[bytes], None]) -> None:
    """Fuzz with coverage feedback (instrumenting every loaded module takes about a minute);
    ``VMCP_FUZZ_INSTRUMENT=0`` skips that for a quick run of random mutations of the corpus."""
    import atheris

    if os.environ.get("VMCP_FUZZ_INSTRUMENT", "1") != "0":
        atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
