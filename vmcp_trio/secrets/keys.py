"""Where the encrypted file's key comes from, and where a new one is kept.

Rules kept here:

* Writing uses, in this order: the key file of ``VMCP_SECRETS_KEY_FILE`` when set; else the
  password of ``VMCP_SECRETS_PASSWORD`` when set; else the key the existing file was sealed with
  (its OS keyring entry, or the default key file); else, for a new file, the default key file
  ``$XDG_CONFIG_HOME/vmcp/secrets.key`` when it exists, else a new random key kept in the OS
  keyring when there is one (:mod:`vmcp_trio.secrets.os_keyring`), else written to a new default
  key file (mode 0600, its folders 0700). :attr:`KeySource.created` then says where a new key
  went, in one line; it is never said again.
* Reading uses what the file's header names: ``scrypt`` the password; ``key-file`` the key file
  of ``VMCP_SECRETS_KEY_FILE`` or the default key file, whichever opens it; ``keyring`` the OS
  keyring's entry. So a file sealed one way opens while a variable names another key, and the
  next write moves it to the variable's key.
* An empty variable counts as unset.
* A key file holds 32 bytes: raw, or as 64 hexadecimal digits (surrounding whitespace ignored,
  so ``openssl rand -hex 32 > key`` works; a generated one is written so). It is read only when
  a key is needed; its problems are usage errors naming the variable or the path, never its
  content.
* Each key is found (a password's derived) once and kept by this object (one command, or one
  process's configuration load), so a read-modify-write costs one scrypt.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Mapping
from pathlib import Path

from .errors import KeyFileError, KeyringFailure, NoKeyConfigured
from .file_format import (
    KEY_BYTES,
    KEY_FILE,
    KEYRING,
    SCRYPT,
    SCRYPT_N,
    SCRYPT_P,
    SCRYPT_R,
    Kdf,
    derive_key,
)
from .os_keyring import OsKeyring, new_account
from .private_files import config_folder, create_private_file

__all__ = ["DEFAULT_KEY_FILE", "KEY_FILE_VAR", "PASSWORD_VAR", "KeySource"]

PASSWORD_VAR = "VMCP_SECRETS_PASSWORD"
KEY_FILE_VAR = "VMCP_SECRETS_KEY_FILE"
DEFAULT_KEY_FILE = "secrets.key"
"""The default key file's name, in vmcp's configuration folder."""
_MAX_KEY_FILE = 4096


class KeySource:
    """The configured password and key file, the default key file and the OS keyring, and the
    keys they give."""

    def __init__(self, password: str | None, key_file: Path | None,
                 default_key_file: Path) -> None:
        self._password = password.encode("utf-8", "surrogateescape") if password else None
        self._key_file = key_file
        self._default_key_file = default_key_file
        self._keyring = OsKeyring()
        self._by_kdf: dict[Kdf, bytes] = {}
        """A password's keys (one per salt) and the keyring's (one per account)."""
        self._by_file: dict[Path, bytes] = {}
        self.created: str | None = None
        """Where the new key this object made is, in one line (None: it made none)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> KeySource:
        key_file = environ.get(KEY_FILE_VAR)
        return cls(environ.get(PASSWORD_VAR) or None,
                   Path(key_file).expanduser() if key_file else None,
                   config_folder(environ) / DEFAULT_KEY_FILE)

    def for_reading(self, kdf: Kdf, path: Path) -> list[bytes]:
        """The keys that may open a file at ``path`` sealed under ``kdf``, to try in turn: one,
        but for a key file both ``VMCP_SECRETS_KEY_FILE``'s and the default one when both are
        there (the file may have been sealed with either)."""
        if kdf.name == KEY_FILE:
            default = self._default_key_file
            files = [file for file in (self._key_file, default) if file is not None]
            keys = [self._file_key(file) for file in dict.fromkeys(files)
                    if file == self._key_file or file.exists()]
            if not keys:
                raise NoKeyConfigured(f"{path} is sealed with a key file: set {KEY_FILE_VAR} "
                                      f"(the default key file {default} does not exist)")
            return keys
        key = self._by_kdf.get(kdf)
        if key is None:
            key = self._by_kdf[kdf] = self._find(kdf, path)
        return [key]

    def for_writing(self, current: Kdf | None, path: Path) -> tuple[Kdf, bytes]:
        """The KDF and key to seal the file at ``path`` with; ``current`` is the file's KDF (None:
        a new file). A password keeps the file's salt when its cost is the default one."""
        if self._key_file is not None:
            return Kdf.key_file(), self._file_key(self._key_file)
        if self._password is not None:
            same_cost = current is not None and current.name == SCRYPT and (
                current.n, current.r, current.p) == (SCRYPT_N, SCRYPT_R, SCRYPT_P)
            kdf = current if current is not None and same_cost else Kdf.scrypt()
            return kdf, self.for_reading(kdf, path)[0]
        if current is None and not self._default_key_file.exists():
            return self._new_key(path)
        if current is None or current.name == KEY_FILE:
            return Kdf.key_file(), self._file_key(self._default_key_file)
        return current, self.for_reading(current, path)[0]

    def _file_key(self, file: Path) -> bytes:
        key = self._by_file.get(file)
        if key is None:
            label = f"{KEY_FILE_VAR} {file}" if file == self._key_file else f"the key file {file}"
            key = self._by_file[file] = _read_key_file(file, label)
        return key

    def _find(self, kdf: Kdf, path: Path) -> bytes:
        """The key of a file sealed with the OS keyring or a password."""
        if kdf.name == KEYRING:
            where = self._keyring.where(kdf.account)
            if self._keyring.backend() is None:
                raise KeyringFailure(f"{path} is sealed with a key kept in {where}, and this "
                                     "machine has no OS keyring: open it where that keyring is")
            key = self._keyring.load(kdf.account)
            if key is None:
                raise KeyringFailure(f"{path} is sealed with a key kept in {where}, which has "
                                     "no such entry")
            return key
        if self._password is None:
            if self._key_file is None:
                raise NoKeyConfigured(f"no key to open {path}: set {PASSWORD_VAR} or "
                                      f"{KEY_FILE_VAR}")
            raise NoKeyConfigured(f"{path} is sealed with a password: set {PASSWORD_VAR}")
        return derive_key(kdf, self._password)

    def _new_key(self, path: Path) -> tuple[Kdf, bytes]:
        """A new random key for the new file ``path``: in the OS keyring, else a key file."""
        key = os.urandom(KEY_BYTES)
        why = "there is no OS keyring here"
        if self._keyring.backend() is not None:
            account = new_account()
            try:
                self._keyring.store(account, key)
            except KeyringFailure:
                why = f"the OS keyring ({self._keyring.name()}) refused it"
            else:
                kdf = Kdf.keyring(account)
                self._by_kdf[kdf] = key
                self.created = f"keeping the key of {path} in {self._keyring.where(account)}"
                return kdf, key
        default = self._default_key_file
        try:
            made = create_private_file(default, key.hex().encode("ascii") + b"\n")
        except OSError as exc:
            raise KeyFileError(f"cannot create the key file {default}: "
                               f"{exc.strerror or type(exc).__name__}") from None
        if not made:  # another process made it first: its key it is
            return Kdf.key_file(), self._file_key(default)
        self._by_file[default] = key
        self.created = (f"created the key file {default} (mode 0600) for {path}, as {why}: "
                        "back it up with that file, which cannot be opened without it")
        return Kdf.key_file(), key


def _read_key_file(path: Path, label: str) -> bytes:
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise KeyFileError(f"cannot read {label}: "
                           f"{exc.strerror or type(exc).__name__}") from None
    key = data if len(data) == KEY_BYTES else _hex_key(data)
    if key is None:
        raise KeyFileError(f"{label} must hold {KEY_BYTES} random bytes or {2 * KEY_BYTES} "
                           "hexadecimal digits")
    return key


def _hex_key(data: bytes) -> bytes | None:
    text = data.strip()
    if len(text) != 2 * KEY_BYTES:
        return None
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        return None
