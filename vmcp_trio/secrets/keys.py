"""Where the encrypted file's key comes from: ``VMCP_SECRETS_PASSWORD`` or
``VMCP_SECRETS_KEY_FILE``.

Rules kept here:

* Writing uses the key file when ``VMCP_SECRETS_KEY_FILE`` is set, else the password. Reading
  uses what the file's header names (``scrypt``: the password; ``key-file``: the key file), so
  with both set a file sealed either way opens, and the next write moves it to the key file.
* An empty variable counts as unset.
* A key file holds 32 bytes: raw, or as 64 hexadecimal digits (surrounding whitespace ignored,
  so ``openssl rand -hex 32 > key`` works). It is read only when a key is needed; its problems
  are usage errors naming the variable and the path, never its content.
* A password's key is derived once per salt and kept by this object (one command, or one
  proxy's start), so a read-modify-write costs one scrypt.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from pathlib import Path

from .errors import KeyFileError, NoKeyConfigured
from .file_format import KEY_BYTES, KEY_FILE, SCRYPT, SCRYPT_N, SCRYPT_P, SCRYPT_R, Kdf, derive_key

__all__ = ["KEY_FILE_VAR", "PASSWORD_VAR", "KeySource"]

PASSWORD_VAR = "VMCP_SECRETS_PASSWORD"
KEY_FILE_VAR = "VMCP_SECRETS_KEY_FILE"
BOTH = f"{PASSWORD_VAR} or {KEY_FILE_VAR}"
_MAX_KEY_FILE = 4096


class KeySource:
    """The configured password and key file, and the keys they give."""

    def __init__(self, password: str | None = None, key_file: Path | None = None) -> None:
        self._password = password.encode("utf-8", "surrogateescape") if password else None
        self._key_file = key_file
        self._file_key: bytes | None = None
        self._derived: dict[Kdf, bytes] = {}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> KeySource:
        key_file = environ.get(KEY_FILE_VAR)
        return cls(environ.get(PASSWORD_VAR) or None,
                   Path(key_file).expanduser() if key_file else None)

    @property
    def configured(self) -> bool:
        return self._password is not None or self._key_file is not None

    def for_reading(self, kdf: Kdf, path: Path) -> bytes:
        """The key that opens a file at ``path`` sealed under ``kdf``."""
        if kdf.name == KEY_FILE:
            if self._key_file is None:
                raise NoKeyConfigured(self._missing(path, "a key file", KEY_FILE_VAR))
            return self._read_key_file()
        if self._password is None:
            raise NoKeyConfigured(self._missing(path, "a password", PASSWORD_VAR))
        return self._derive(kdf, self._password)

    def for_writing(self, current: Kdf | None, path: Path) -> tuple[Kdf, bytes]:
        """The KDF and key to seal the file at ``path`` with; ``current`` is the file's KDF (its
        salt is kept when the password stays the way in)."""
        if self._key_file is not None:
            return Kdf.key_file(), self._read_key_file()
        if self._password is None:
            raise NoKeyConfigured(f"no key to write {path}: set {BOTH}")
        if current is not None and current.name == SCRYPT and (
                current.n, current.r, current.p) == (SCRYPT_N, SCRYPT_R, SCRYPT_P):
            kdf = current
        else:
            kdf = Kdf.scrypt()
        return kdf, self._derive(kdf, self._password)

    def _missing(self, path: Path, what: str, variable: str) -> str:
        if not self.configured:
            return f"no key to open {path}: set {BOTH}"
        return f"{path} is sealed with {what}: set {variable}"

    def _derive(self, kdf: Kdf, password: bytes) -> bytes:
        key = self._derived.get(kdf)
        if key is None:
            key = self._derived[kdf] = derive_key(kdf, password)
        return key

    def _read_key_file(self) -> bytes:
        if self._file_key is not None:
            return self._file_key
        path = self._key_file
        assert path is not None
        try:
            with path.open("rb") as fh:
                data = fh.read(_MAX_KEY_FILE + 1)
        except OSError as exc:
            raise KeyFileError(f"cannot read {KEY_FILE_VAR} {path}: "
                               f"{exc.strerror or type(exc).__name__}") from None
        key = data if len(data) == KEY_BYTES else _hex_key(data)
        if key is None:
            raise KeyFileError(f"{KEY_FILE_VAR} {path} must hold {KEY_BYTES} random bytes or "
                               f"{2 * KEY_BYTES} hexadecimal digits")
        self._file_key = key
        return key


def _hex_key(data: bytes) -> bytes | None:
    text = data.strip()
    if len(text) != 2 * KEY_BYTES:
        return None
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        return None
