"""The OS keyring (through the ``keyring`` package) as the home of the encrypted file's key.

Rules kept here:

* A keyring is used only when keyring's chosen backend is a real one. keyring's ``fail``
  backend (what it chooses where there is none, such as a headless Linux without a Secret
  Service), its ``null`` backend (keyring switched off) and a chainer of no backend are none;
  nor is a backend keyring cannot load (a wrong ``PYTHON_KEYRING_BACKEND`` or keyringrc.cfg).
* One entry per encrypted file: service ``vmcp``, account ``secrets-<32 hexadecimal digits>``
  (drawn when the file is created and written in its header), the key as 64 hexadecimal digits.
* ``keyring`` is imported only when a key is looked for, never when ``vmcp`` starts.
* Every failure is :class:`~vmcp_trio.secrets.errors.KeyringFailure`, one line naming the
  backend and the account, never the key.
"""

from __future__ import annotations

import binascii
import secrets
from typing import TYPE_CHECKING

from .errors import KeyringFailure

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

__all__ = ["SERVICE", "OsKeyring", "new_account"]

SERVICE = "vmcp"


def new_account() -> str:
    """The account of a new encrypted file's key."""
    return "secrets-" + secrets.token_hex(16)


class OsKeyring:
    """keyring's chosen backend, when it is a real one (looked for once, on first use)."""

    def __init__(self) -> None:
        self._looked = False
        self._backend: KeyringBackend | None = None

    def backend(self) -> KeyringBackend | None:
        """The backend to keep keys in, or None when this machine has no keyring."""
        if not self._looked:
            self._looked = True
            self._backend = _real_backend()
        return self._backend

    def name(self) -> str:
        """The backend's name, for messages ("no OS keyring" when there is none)."""
        backend = self.backend()
        return "no OS keyring" if backend is None else str(backend.name)

    def where(self, account: str) -> str:
        """Where the key of ``account`` is, in words."""
        backend = "" if self.backend() is None else f"{self.name()}, "
        return f"the OS keyring ({backend}service {SERVICE}, account {account})"

    def load(self, account: str) -> bytes | None:
        """The key kept under ``account``; None when the keyring holds no such entry."""
        from keyring.errors import KeyringError

        backend = self._require(account)
        try:
            stored = backend.get_password(SERVICE, account)
        except KeyringError as exc:
            raise KeyringFailure(f"{self.where(account)} refused the key: "
                                 f"{type(exc).__name__}") from None
        if stored is None:
            return None
        try:
            key = binascii.unhexlify(stored.strip())
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise KeyringFailure(f"{self.where(account)} does not hold a key of 64 "
                                 "hexadecimal digits")
        return key

    def store(self, account: str, key: bytes) -> None:
        """Keep ``key`` under ``account``."""
        from keyring.errors import KeyringError

        backend = self._require(account)
        try:
            backend.set_password(SERVICE, account, key.hex())
        except KeyringError as exc:
            raise KeyringFailure(f"{self.where(account)} refused the key: "
                                 f"{type(exc).__name__}") from None

    def _require(self, account: str) -> KeyringBackend:
        backend = self.backend()
        if backend is None:
            raise KeyringFailure(f"the key is in {self.where(account)}, and there is none here")
        return backend


def _real_backend() -> KeyringBackend | None:
    try:
        import keyring
        from keyring.backends import chainer, fail, null

        backend = keyring.get_keyring()
    except Exception:  # a plugin system: whatever a backend's loading raises means no keyring
        return None
    if isinstance(backend, fail.Keyring | null.Keyring):
        return None
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return None
    return backend
