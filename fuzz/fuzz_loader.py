"""Fuzz the resource loader and validator: any bytes, as YAML and as JSON.

The property: only problems come back, never another exception (and no hang: the alias,
depth and size limits bound the work). Run through ``make fuzz``, or directly:
``python fuzz/fuzz_loader.py fuzz/work/fuzz_loader fuzz/corpus/fuzz_loader -max_total_time=60``.
"""

from __future__ import annotations

from vmcp_trio.resources import LoadOptions, validate_documents
from vmcp_trio.resources.loading import load_text
from vmcp_trio.resources.problems import Problem


def TestOneInput(data: bytes) -> None:
    for json_syntax in (False, True):
        docs, problems = load_text(data, "fuzz.json" if json_syntax else "fuzz.yaml",
                                   json_syntax=json_syntax)
        result = validate_documents(docs, LoadOptions(), problems)
        for problem in result.problems:
            if not isinstance(problem, Problem) or not str(problem):
                raise AssertionError("validation returned something other than a problem")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
