"""The encrypted file's format: a map of secrets sealed into bytes, and opened again. No I/O.

Format, version 1: one JSON object on one line (UTF-8, newline-terminated)::

    {"format": "vmcp-secrets", "version": 1, "cipher": "AES-256-GCM",
     "kdf": {"name": "scrypt", "salt": "<base64, 16 bytes>", "n": 32768, "r": 8, "p": 1},
     "nonce": "<base64, 12 bytes>", "ciphertext": "<base64: ciphertext and 16-byte tag>"}

``kdf`` is ``{"name": "key-file"}`` when the key is the 32 bytes of a key file, and
``{"name": "keyring", "account": "secrets-<32 hex>"}`` when it is kept in the OS keyring under
that account (:mod:`vmcp_trio.secrets.os_keyring`). The plaintext is
the JSON object ``{name: value, ...}``: names are sealed too, so the file tells nothing but its
size. The associated data is the header (every field but ``nonce`` and ``ciphertext``) as
canonical JSON, so a change to the version or the KDF parameters fails authentication as a
change to the ciphertext does.

Rules kept here:

* Every seal draws a fresh random 96-bit nonce. A salt is drawn for every new password-sealed
  file and kept when the file is rewritten with the same password, so a command derives the key
  once (scrypt is deliberately slow) and a reused salt never meets a reused nonce.
* scrypt's parameters are read from the file, within bounds (``n`` a power of two up to 2**20,
  ``r`` and ``p`` at most 16, 16 to 64 bytes of salt): a crafted file cannot make a reader
  allocate gigabytes, and a future default can be raised without a new version.
* A wrong key and an altered file are one error (:class:`WrongKey`), as AES-GCM sees them.
  Errors carry no secret and no path: the file provider adds the path.
* ``cryptography`` is imported when a key is derived or a blob sealed or opened, not when the
  package is, so that ``vmcp --help`` stays fast.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KEYRING", "KEY_BYTES", "KEY_FILE", "SCRYPT", "SCRYPT_N", "SCRYPT_P", "SCRYPT_R",
           "FormatError", "Kdf", "Sealed", "WrongKey", "derive_key", "new_salt", "open_sealed",
           "parse", "seal"]

FORMAT, VERSION, CIPHER = "vmcp-secrets", 1, "AES-256-GCM"
SCRYPT, KEY_FILE, KEYRING = "scrypt", "key-file", "keyring"
KEY_BYTES, NONCE_BYTES, SALT_BYTES = 32, 12, 16
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
"""Defaults for new files: 32 MiB and some 60 ms per derivation; fits a small container."""
_MAX_N, _MAX_R, _MAX_P = 2**20, 16, 16
_ACCOUNT = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class FormatError(Exception):
    """The bytes are not a secrets file this version can read; the message says why."""


class WrongKey(Exception):
    """Authentication failed: a wrong password or key, or bytes altered after sealing."""


@dataclass(frozen=True)
class Kdf:
    """Where the AES key comes from: ``scrypt`` (a password, this salt and cost), ``key-file``
    (the key itself) or ``keyring`` (the OS keyring's entry of this account)."""

    name: str
    salt: bytes = b""
    n: int = 0
    r: int = 0
    p: int = 0
    account: str = ""

    @classmethod
    def scrypt(cls, salt: bytes | None = None) -> Kdf:
        """The default scrypt parameters with ``salt`` (a new one when None)."""
        return cls(SCRYPT, new_salt() if salt is None else salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)

    @classmethod
    def key_file(cls) -> Kdf:
        return cls(KEY_FILE)

    @classmethod
    def keyring(cls, account: str) -> Kdf:
        return cls(KEYRING, account=account)

    def header(self) -> dict[str, Any]:
        if self.name == KEY_FILE:
            return {"name": KEY_FILE}
        if self.name == KEYRING:
            return {"name": KEYRING, "account": self.account}
        return {"name": SCRYPT, "salt": _b64(self.salt), "n": self.n, "r": self.r, "p": self.p}


@dataclass(frozen=True)
class Sealed:
    """A parsed file, not yet opened."""

    kdf: Kdf
    nonce: bytes
    ciphertext: bytes
    associated_data: bytes


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def derive_key(kdf: Kdf, password: bytes) -> bytes:
    """The AES-256 key of a password under ``kdf`` (an scrypt one)."""
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=kdf.salt, length=KEY_BYTES, n=kdf.n, r=kdf.r, p=kdf.p).derive(password)


def seal(secrets: Mapping[str, str], kdf: Kdf, key: bytes) -> bytes:
    """The file's bytes for ``secrets`` under ``key``, with a fresh nonce."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    header = _header(kdf)
    plaintext = json.dumps(dict(secrets), sort_keys=True, ensure_ascii=False).encode("utf-8")
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, plaintext, _canonical(header))
    document = {**header, "nonce": _b64(nonce), "ciphertext": _b64(ciphertext)}
    return (json.dumps(document) + "\n").encode("ascii")


def parse(data: bytes) -> Sealed:
    """The header and blob of a file's bytes, or :class:`FormatError`."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise FormatError("not a vmcp secrets file (not JSON)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FormatError("not a vmcp secrets file")
    version = document.get("version")
    if version != VERSION:
        raise FormatError(f"format version {version!r} is not one this vmcp reads "
                          f"(it reads {VERSION})")
    if document.get("cipher") != CIPHER:
        raise FormatError(f"unknown cipher {str(document.get('cipher'))[:40]!r}")
    kdf = _kdf(document.get("kdf"))
    nonce = _unb64(document.get("nonce"), "nonce")
    ciphertext = _unb64(document.get("ciphertext"), "ciphertext")
    if len(nonce) != NONCE_BYTES or len(ciphertext) < 16:
        raise FormatError("damaged file (nonce or ciphertext too short)")
    return Sealed(kdf, nonce, ciphertext, _canonical(_header(kdf)))


def open_sealed(sealed: Sealed, key: bytes) -> dict[str, str]:
    """The secrets in ``sealed``, or :class:`WrongKey` (or :class:`FormatError` for a
    plaintext that is not a map of strings, which only a foreign writer holding the key can
    produce)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        plaintext = AESGCM(key).decrypt(sealed.nonce, sealed.ciphertext, sealed.associated_data)
    except InvalidTag:
        raise WrongKey from None
    try:
        secrets = json.loads(plaintext)
    except (UnicodeDecodeError, ValueError):
        raise FormatError("the decrypted content is not JSON") from None
    if not isinstance(secrets, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in secrets.items()):
        raise FormatError("the decrypted content is not a map of names to values")
    return secrets


def _header(kdf: Kdf) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "cipher": CIPHER, "kdf": kdf.header()}


def _canonical(header: Mapping[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii")


def _kdf(raw: object) -> Kdf:
    if not isinstance(raw, dict):
        raise FormatError("damaged file (no kdf)")
    if raw.get("name") == KEY_FILE:
        return Kdf.key_file()
    if raw.get("name") == KEYRING:
        account = raw.get("account")
        if not (isinstance(account, str) and _ACCOUNT.fullmatch(account)):
            raise FormatError("damaged file (no keyring account)")
        return Kdf.keyring(account)
    if raw.get("name") != SCRYPT:
        raise FormatError(f"unknown kdf {str(raw.get('name'))[:40]!r}")
    n, r, p = raw.get("n"), raw.get("r"), raw.get("p")
    if not (isinstance(n, int) and isinstance(r, int) and isinstance(p, int)
            and 2 <= n <= _MAX_N and n & (n - 1) == 0 and 1 <= r <= _MAX_R
            and 1 <= p <= _MAX_P):
        raise FormatError("scrypt parameters out of bounds")
    salt = _unb64(raw.get("salt"), "salt")
    if not 16 <= len(salt) <= 64:
        raise FormatError("damaged file (salt of the wrong size)")
    return Kdf(SCRYPT, salt, n, r, p)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object, field: str) -> bytes:
    if not isinstance(value, str):
        raise FormatError(f"damaged file (no {field})")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"damaged file ({field} is not base64)") from None
