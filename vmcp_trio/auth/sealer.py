"""Sealing values that leave the process: AES-256-GCM under keys derived from secrets.

Used for what the authorization server stores in Redis (upstream tokens, pending logins) and for
the task ids the gateway hands to clients. The key is derived (HKDF-SHA256, with an ``info``
naming the use, so one secret never gives two uses the same key) from each secret: the first
seals, every one opens (rotation), so a Secret rotation needs no separate key. A sealed value is
``<key id>.<base64url(nonce || ciphertext)>``; the key id (8 hex characters of the derived key's
hash) picks the key without trying them all, and a ``context`` is bound as associated data (the
storage key, the task's owner), so a value moved to another context does not open. Only the text
``seal`` wrote opens: base64 with other padding, stray characters or other trailing bits is
refused, so one sealed value has one spelling (a task id compares equal only to itself).

A value is sealed under a random nonce, or, ``deterministic``, under one derived from the value
and its context (HMAC-SHA256 with a key of its own, as in SIV): the same value in the same context
then seals to the same text (which is the point: an id that must compare equal each time it is
handed out), and different values never share a nonce.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["STORAGE_INFO", "Sealer", "SealingError"]

STORAGE_INFO = b"vmcp-trio authserver storage sealing v1"
"""The use of the authorization server's storage (the first use: its keys stay as they were)."""


class SealingError(Exception):
    """A stored value that does not open (another key, altered, or not sealed)."""


def _derive(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


class Sealer:
    def __init__(self, secrets: Sequence[bytes], *, info: bytes) -> None:
        if not secrets:
            raise ValueError("sealing needs at least one secret")
        self._keys: dict[str, AESGCM] = {}
        for secret in secrets:
            key_id = hashlib.sha256(info + secret).hexdigest()[:8]
            self._keys.setdefault(key_id, AESGCM(_derive(secret, info)))
        self._current = next(iter(self._keys))
        self._nonce_key = _derive(secrets[0], info + b" nonce")

    def seal(self, plaintext: bytes, *, context: str, deterministic: bool = False) -> str:
        if deterministic:
            nonce = hmac.new(self._nonce_key, context.encode() + b"\0" + plaintext,
                             hashlib.sha256).digest()[:12]
        else:
            nonce = os.urandom(12)
        sealed = self._keys[self._current].encrypt(nonce, plaintext, context.encode())
        return f"{self._current}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, value: str, *, context: str) -> bytes:
        key_id, _, body = value.partition(".")
        key = self._keys.get(key_id)
        if key is None:
            raise SealingError("sealed with a key that is no longer configured")
        try:
            raw = base64.urlsafe_b64decode(body)
            if base64.urlsafe_b64encode(raw).decode() != body:  # one text per sealed value
                raise ValueError("not canonical base64url")
            return key.decrypt(raw[:12], raw[12:], context.encode())
        except (ValueError, InvalidTag):
            raise SealingError("the sealed value is altered or not sealed") from None
