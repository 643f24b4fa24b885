"""Where the secrets manager keeps its files, and how a file only its owner may read is made.

Rules kept here:

* vmcp's configuration folder is ``$XDG_CONFIG_HOME/vmcp`` (an ``XDG_CONFIG_HOME`` that is not
  absolute is ignored, as the XDG spec says), else ``~/.config/vmcp``.
* A folder made here gets mode 0700, and so does each missing parent made on the way; a folder
  that exists is left as it is (it may be the operator's own choice, such as a mounted volume).
* A new file is written whole to a temporary file (mode 0600 from its creation) in its folder,
  flushed to disk, then linked to its name only if that name is free: a reader never sees half
  of it, and of two processes creating it at once, one wins and the other reads the winner's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["config_folder", "create_private_file", "fsync_folder", "make_private_folder",
           "write_temporary"]


def config_folder(environ: Mapping[str, str]) -> Path:
    """vmcp's configuration folder for this environment (it may not exist)."""
    xdg = environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "vmcp"
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".config" / "vmcp"


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each mode 0700 whatever the umask."""
    missing: list[Path] = []
    current = folder
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o700)


def create_private_file(path: Path, data: bytes) -> bool:
    """Write ``data`` to the new file ``path`` (mode 0600, its folders made private); False,
    with nothing written, when ``path`` exists already. Raises ``OSError``."""
    folder = path.parent
    make_private_folder(folder)
    tmp = write_temporary(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
    fsync_folder(folder)
    return True


def write_temporary(path: Path, data: bytes) -> str:
    """``data`` written whole and flushed to disk in a new temporary file (mode 0600) beside
    ``path``, for the caller to link or rename to ``path``: the temporary file's path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def fsync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries to disk (a rename or a link in it survives a crash)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
