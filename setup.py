"""Records the source revision in the built package, for ``vmcp version`` and ``vmcp_build_info``.

Everything else about the package is in pyproject.toml. A build (``pip install .``, ``pipx
install .``, ``pip wheel .``, the Dockerfile) writes ``vmcp_trio/_revision.txt`` into the built
package: ``$VMCP_REVISION`` when set (the Dockerfile's build argument: its context has no .git),
else ``git rev-parse --short=12 HEAD`` of the source tree, else nothing (the revision then reads
``unknown``). An editable install records nothing: it reads the checkout's revision as it runs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent


def source_revision() -> str:
    """The revision to record, or an empty string when none is known."""
    given = os.environ.get("VMCP_REVISION", "").strip()
    if given:
        return given
    try:
        done = subprocess.run(["git", "-C", str(SOURCE), "rev-parse", "--short=12", "HEAD"],  # noqa: S603, S607
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


class BuildWithRevision(build_py):
    """``build_py``, then ``_revision.txt`` beside the built package's modules."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "vmcp_trio" / "_revision.txt"
        revision = source_revision()
        if revision:
            target.write_text(revision + "\n", encoding="utf-8")
        else:
            target.unlink(missing_ok=True)  # an earlier build's, left in build/ of this tree


setup(cmdclass={"build_py": BuildWithRevision})
