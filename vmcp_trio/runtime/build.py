"""What build of vmcp-trio is running: its version and the source revision it was built from,
for ``vmcp version`` and the ``vmcp_build_info{version,revision}`` series.

Rules it keeps:

* The version is the package's (``vmcp_trio.__version__``).
* The revision is the git commit of the source tree the package runs from, when that tree is a
  git checkout (an editable install, ``make run``); else the one recorded beside the package
  at install (``_revision.txt``, written by the build); else ``unknown``. It is read once, and
  a failure to read it is never an error.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from .. import __version__

__all__ = ["VERSION", "revision"]

VERSION = __version__
PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def revision() -> str:
    """The short git commit of the running source, or ``unknown``."""
    try:
        git = ["git", "-C", str(PACKAGE.parent), "rev-parse", "--short=12", "HEAD"]
        done = subprocess.run(git, capture_output=True, text=True, timeout=5,  # noqa: S603
                              check=False)  # fixed arguments; git from PATH, as a user runs it
        if done.returncode == 0 and (PACKAGE.parent / ".git").exists():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    recorded = PACKAGE / "_revision.txt"
    try:
        return recorded.read_text().strip() or "unknown"
    except OSError:
        return "unknown"
