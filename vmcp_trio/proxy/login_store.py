"""Where ``vmcp proxy`` keeps its login to a remote server across restarts: sealed files in the
user's state directory.

Rules it keeps:

* One file per (target, issuer) under ``{state_dir}/remote-logins/``, named by a hash of the
  pair (the file name says nothing about either), holding the registered client and the
  tokens as one JSON record sealed with AES-256-GCM (:mod:`vmcp_trio.auth.sealer`), the pair
  as associated data: a file copied to another pair's name does not open.
* The key is ``{state_dir}/login.key``: 32 random bytes made on first use. Directory 0700,
  files 0600, written atomically (a temporary file renamed over the old one). This protects the
  tokens from whatever reads the files without being this user (backups, a shared volume), not
  from this user's own processes: a login the proxy can use unattended, this user can too.
* A record that does not open (another key, a damaged file) is treated as absent: the proxy logs
  in again, and the next save replaces it. Nothing here raises on reading.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

import orjson

from ..auth.sealer import Sealer, SealingError

__all__ = ["LoginStore"]

log = logging.getLogger("vmcp.proxy")

_INFO = b"vmcp proxy remote logins v1"
KEY_BYTES = 32


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, mode 0600, atomically."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class LoginStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._sealer: Sealer | None = None

    def _key(self) -> bytes:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / "login.key"
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = secrets.token_bytes(KEY_BYTES)
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another proxy made it first
                return path.read_bytes()
            with os.fdopen(descriptor, "wb") as out:
                out.write(key)
        return key

    def _sealing(self) -> Sealer:
        if self._sealer is None:
            self._sealer = Sealer([self._key()], info=_INFO)
        return self._sealer

    def _path(self, name: str) -> Path:
        digest = hashlib.sha256(name.encode()).hexdigest()[:32]
        return self.directory / "remote-logins" / f"{digest}.json"

    def load(self, name: str) -> dict[str, Any] | None:
        """The record saved under ``name`` (a target and issuer), or None."""
        path = self._path(name)
        try:
            sealed = path.read_text(encoding="ascii")
            record = orjson.loads(self._sealing().open(sealed.strip(), context=name))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, SealingError, orjson.JSONDecodeError) as exc:
            log.warning("the stored login in %s cannot be read (%s): logging in again", path,
                        type(exc).__name__)
            return None
        return record if isinstance(record, dict) else None

    def save(self, name: str, record: dict[str, Any]) -> None:
        path = self._path(name)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        sealed = self._sealing().seal(orjson.dumps(record), context=name)
        _write_private(path, sealed.encode("ascii") + b"\n")
