"""The encrypted file provider: every secret in one AES-256-GCM sealed file.

Rules kept here:

* The file is ``VMCP_SECRETS_FILE`` when set, else ``secrets.json.enc`` in vmcp's
  configuration folder (:func:`~vmcp_trio.secrets.private_files.config_folder`:
  ``$XDG_CONFIG_HOME/vmcp``, else ``~/.config/vmcp``). Its format is
  :mod:`vmcp_trio.secrets.file_format`'s.
* Reading a file that does not exist finds nothing and needs no key. Reading one that exists
  needs the key its header names; writing needs a key, which creating the file may make
  (:mod:`vmcp_trio.secrets.keys`). Deleting from a file that does not exist needs none.
* A write is a read-modify-write under an exclusive ``flock`` on ``<file>.lock``, so two
  ``vmcp secret set`` at once both land. The new content goes to a temporary file in the same
  folder (mode 0600 from its creation), is flushed to disk, then renamed over the old one with
  ``os.replace``: a reader sees the old file or the new one, never half of one, and a crash
  leaves the old one. The folder is fsynced after the rename.
* A folder the provider creates is made mode 0700; an existing folder is left as it is (it may
  be the operator's own choice, such as a mounted volume): see
  :mod:`vmcp_trio.secrets.private_files`.
* Every failure is a :class:`~vmcp_trio.secrets.errors.SecretsError` naming the file; none
  carries a value or a key.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from .errors import DecryptError, SecretsFileError
from .file_format import FormatError, Kdf, WrongKey, open_sealed, parse, seal
from .keys import KeySource
from .private_files import config_folder, fsync_folder, make_private_folder, write_temporary

__all__ = ["FILE_VAR", "EncryptedFileProvider", "default_path"]

FILE_VAR = "VMCP_SECRETS_FILE"
_MAX_FILE = 16 * 1024 * 1024


def default_path(environ: Mapping[str, str]) -> Path:
    """Where the encrypted file is for this environment."""
    explicit = environ.get(FILE_VAR)
    if explicit:
        return Path(explicit).expanduser()
    return config_folder(environ) / "secrets.json.enc"


class EncryptedFileProvider:
    """Secrets sealed in one file, opened with a :class:`~vmcp_trio.secrets.keys.KeySource`."""

    label = "file"

    def __init__(self, path: Path, keys: KeySource) -> None:
        self.path = path
        self.keys = keys

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
        with self._locked():
            secrets, kdf = self._read()
            secrets[name] = value
            self._write(secrets, kdf)

    def delete(self, name: str) -> bool:
        """Remove ``name``; False when the file does not hold it."""
        if not self.path.exists():
            return False
        with self._locked():
            secrets, kdf = self._read()
            if name not in secrets:
                return False
            del secrets[name]
            self._write(secrets, kdf)
        return True

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
            for key in self.keys.for_reading(sealed.kdf, self.path):
                with contextlib.suppress(WrongKey):
                    return open_sealed(sealed, key), sealed.kdf
        except FormatError as exc:
            raise SecretsFileError(f"cannot read {self.path}: {exc}") from None
        raise DecryptError(f"cannot decrypt {self.path}: wrong VMCP_SECRETS_PASSWORD or key "
                           "file (or the file was altered)")

    def _write(self, secrets: Mapping[str, str], current: Kdf | None) -> None:
        kdf, key = self.keys.for_writing(current, self.path)
        data = seal(secrets, kdf, key)
        folder = self.path.parent
        try:
            tmp = write_temporary(self.path, data)
            try:
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            fsync_folder(folder)
        except OSError as exc:
            raise SecretsFileError(f"cannot write {self.path}: {_why(exc)}") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        folder = self.path.parent
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            make_private_folder(folder)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SecretsFileError(f"cannot write {self.path}: {_why(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
