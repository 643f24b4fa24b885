"""The encrypted file provider: every secret in one AES-256-GCM sealed file.

Rules kept here:

* The file is ``VMCP_SECRETS_FILE`` when set, else ``$XDG_CONFIG_HOME/vmcp/secrets.json.enc``
  (an ``XDG_CONFIG_HOME`` that is not absolute is ignored, as the XDG spec says), else
  ``~/.config/vmcp/secrets.json.enc``. Its format is :mod:`vmcp_trio.secrets.file_format`'s.
* Reading a file that does not exist finds nothing and needs no key. Reading one that exists
  needs the key its header names (:mod:`vmcp_trio.secrets.keys`). Writing always needs a key,
  even to create the file.
* A write is a read-modify-write under an exclusive ``flock`` on ``<file>.lock``, so two
  ``vmcp secret set`` at once both land. The new content goes to a temporary file in the same
  folder (mode 0600 from its creation), is flushed to disk, then renamed over the old one with
  ``os.replace``: a reader sees the old file or the new one, never half of one, and a crash
  leaves the old one. The folder is fsynced after the rename.
* A folder the provider creates is made mode 0700; an existing folder is left as it is (it may
  be the operator's own choice, such as a mounted volume).
* Every failure is a :class:`~vmcp_trio.secrets.errors.SecretsError` naming the file; none
  carries a value or a key.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .errors import DecryptError, NoKeyConfigured, SecretsFileError
from .file_format import FormatError, Kdf, WrongKey, open_sealed, parse, seal
from .keys import BOTH, KeySource

__all__ = ["FILE_VAR", "EncryptedFileProvider", "default_path"]

FILE_VAR = "VMCP_SECRETS_FILE"
_MAX_FILE = 16 * 1024 * 1024


def default_path(environ: Mapping[str, str]) -> Path:
    """Where the encrypted file is for this environment."""
    explicit = environ.get(FILE_VAR)
    if explicit:
        return Path(explicit).expanduser()
    xdg = environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        base = Path(xdg)
    else:
        home = environ.get("HOME") or os.path.expanduser("~")
        base = Path(home) / ".config"
    return base / "vmcp" / "secrets.json.enc"


class EncryptedFileProvider:
    """Secrets sealed in one file, opened with a :class:`~vmcp_trio.secrets.keys.KeySource`."""

    label = "file"

    def __init__(self, path: Path, keys: KeySource) -> None:
        self.path = path
        self._keys = keys

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, str]:
        """Every secret of the file (none when there is no file)."""
        return self._read()[0]

    def get(self, name: str) -> str | None:
        return self.load().get(name)

    def names(self) -> list[str]:
        return sorted(self.load())

    def set(self, name: str, value: str) -> None:
        self._require_key()
        with self._locked():
            secrets, kdf = self._read()
            secrets[name] = value
            self._write(secrets, kdf)

    def delete(self, name: str) -> bool:
        """Remove ``name``; False when the file does not hold it."""
        self._require_key()
        if not self.path.exists():
            return False
        with self._locked():
            secrets, kdf = self._read()
            if name not in secrets:
                return False
            del secrets[name]
            self._write(secrets, kdf)
        return True

    def _require_key(self) -> None:
        if not self._keys.configured:
            raise NoKeyConfigured(f"no key to write {self.path}: set {BOTH}")

    def _read(self) -> tuple[dict[str, str], Kdf | None]:
        try:
            with self.path.open("rb") as fh:
                data = fh.read(_MAX_FILE + 1)
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            raise SecretsFileError(f"cannot read {self.path}: {_why(exc)}") from None
        if len(data) > _MAX_FILE:
            raise SecretsFileError(f"cannot read {self.path}: larger than {_MAX_FILE} bytes")
        try:
            sealed = parse(data)
            key = self._keys.for_reading(sealed.kdf, self.path)
            return open_sealed(sealed, key), sealed.kdf
        except FormatError as exc:
            raise SecretsFileError(f"cannot read {self.path}: {exc}") from None
        except WrongKey:
            raise DecryptError(f"cannot decrypt {self.path}: wrong VMCP_SECRETS_PASSWORD or key "
                               "file (or the file was altered)") from None

    def _write(self, secrets: Mapping[str, str], current: Kdf | None) -> None:
        kdf, key = self._keys.for_writing(current, self.path)
        data = seal(secrets, kdf, key)
        folder = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_folder(folder)
        except OSError as exc:
            raise SecretsFileError(f"cannot write {self.path}: {_why(exc)}") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        folder = self.path.parent
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            _make_folder(folder)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SecretsFileError(f"cannot write {self.path}: {_why(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _make_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) when missing; the folder itself gets mode 0700
    whatever the umask."""
    try:
        folder.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        return
    os.chmod(folder, 0o700)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
