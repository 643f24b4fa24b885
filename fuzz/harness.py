"""Running a ``TestOneInput`` under atheris (imported only here, so the corpus replay in the
test suite needs no fuzzer installed)."""

from __future__ import annotations

import sys
from collections.abc import Callable


def fuzz(test_one_input: Callable[[bytes], None]) -> None:
    import atheris

    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
