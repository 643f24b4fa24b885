"""Opaque, HMAC-protected values: authorization codes and refresh tokens.

A token is ``<prefix>_<id>.<mac>``: ``id`` is 32 random bytes, ``mac`` is
HMAC-SHA256(secret, ``<prefix>.<id>``), both unpadded base64url (43 characters each). The MAC
lets the server throw away forged or mistyped tokens before any storage lookup, and binds the
token to its kind: a refresh token is never accepted where a code is expected, and the other
way round.

What storage keys on is neither the token nor the id, but
``key = base64url(SHA-256(<prefix>.<id>))``, which :meth:`OpaqueTokens.mint` returns next to the
token and :meth:`OpaqueTokens.check` returns for a genuine token. The id alone would already be
useless without the MAC, but anyone who reads the storage *and* holds an HMAC secret (both
typically live in the same namespace) could then turn every stored id into a working refresh
token. From a hash they cannot recover the id, so a storage dump never yields a usable token,
with or without the secrets. The cost is one SHA-256 per check.

Secrets rotate like signing keys: the first makes new tokens, every configured one is accepted.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as random
from collections.abc import Sequence

from ..protocol import base64url

__all__ = ["MAX_TOKEN_CHARS", "MIN_SECRET_BYTES", "OpaqueTokens"]

MIN_SECRET_BYTES = 32
MAX_TOKEN_CHARS = 256
MAX_PREFIX_CHARS = 32

_PREFIX = re.compile(rf"[A-Za-z]{{1,{MAX_PREFIX_CHARS}}}")
_BODY = re.compile(r"([A-Za-z0-9_-]{43})\.([A-Za-z0-9_-]{43})")


def _check_prefix(prefix: str) -> None:
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(f"prefix must be 1 to {MAX_PREFIX_CHARS} ASCII letters")


def _storage_key(prefix: str, token_id: str) -> str:
    return base64url.encode(hashlib.sha256(f"{prefix}.{token_id}".encode("ascii")).digest())


class OpaqueTokens:
    """Minting and checking ``<prefix>_<id>.<mac>`` tokens under rotating HMAC secrets. Secrets
    shorter than 32 bytes are refused (ValueError naming the index). Without secrets, one
    ephemeral 32-byte secret is generated (``ephemeral`` is True): codes and refresh tokens then
    die with the process and are not shared between replicas."""

    ephemeral: bool

    def __init__(self, secrets: Sequence[bytes]) -> None:
        if isinstance(secrets, bytes | str):  # a lone secret is a Sequence too
            raise TypeError("secrets must be a sequence of secrets, not a single secret")
        keys: list[bytes] = []
        for index, secret in enumerate(secrets):
            if not isinstance(secret, bytes):
                raise TypeError(f"HMAC secret {index} is not bytes")
            if len(secret) < MIN_SECRET_BYTES:
                raise ValueError(f"HMAC secret {index} is shorter than {MIN_SECRET_BYTES} bytes")
            keys.append(secret)
        self.ephemeral = not keys
        if not keys:
            keys.append(random.token_bytes(MIN_SECRET_BYTES))
        self._secrets: tuple[bytes, ...] = tuple(keys)

    @staticmethod
    def _mac(secret: bytes, prefix: str, token_id: str) -> bytes:
        digest = hmac.digest(secret, f"{prefix}.{token_id}".encode("ascii"), "sha256")
        return base64url.encode(digest).encode("ascii")  # all 32 bytes: 43 characters

    def mint(self, prefix: str) -> tuple[str, str]:
        """A new token of kind ``prefix`` (ASCII letters, e.g. "code" or "rt") and its storage
        key: ``(token, key)``. Give the token to the client, keep only the key."""
        _check_prefix(prefix)
        token_id = base64url.encode(random.token_bytes(32))
        mac = self._mac(self._secrets[0], prefix, token_id).decode("ascii")
        return f"{prefix}_{token_id}.{mac}", _storage_key(prefix, token_id)

    def sign(self, purpose: str, data: str) -> str:
        """HMAC-SHA256 of ``data`` for ``purpose`` (ASCII letters) under the first secret,
        base64url: what a value that travels through the browser carries (the consent form)."""
        _check_prefix(purpose)
        digest = hmac.digest(self._secrets[0], f"{purpose}\0{data}".encode(), "sha256")
        return base64url.encode(digest)

    def verify(self, purpose: str, data: str, mac: str) -> bool:
        """Whether ``mac`` is :meth:`sign` of ``data`` under any configured secret (constant
        time, every secret tried)."""
        _check_prefix(purpose)
        if not isinstance(mac, str) or not mac.isascii() or len(mac) != 43:
            return False
        genuine = False
        for secret in self._secrets:
            digest = hmac.digest(secret, f"{purpose}\0{data}".encode(), "sha256")
            genuine |= hmac.compare_digest(base64url.encode(digest).encode("ascii"),
                                           mac.encode("ascii"))
        return genuine

    def check(self, prefix: str, token: str) -> str | None:
        """The storage key of ``token`` when it is genuine (its MAC verifies under one of the
        secrets) and of kind ``prefix``; None otherwise. The length is checked before anything
        else; the MAC is compared in constant time against every secret (all of them, so the
        time does not tell which one matched). ValueError for a malformed ``prefix`` (a bug in
        the caller, not in the token)."""
        _check_prefix(prefix)
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
            return None
        if not token.isascii() or not token.startswith(prefix + "_"):
            return None
        match = _BODY.fullmatch(token, len(prefix) + 1)
        if match is None:
            return None
        token_id = match.group(1)
        presented = match.group(2).encode("ascii")
        genuine = False
        for secret in self._secrets:
            genuine |= hmac.compare_digest(self._mac(secret, prefix, token_id), presented)
        return _storage_key(prefix, token_id) if genuine else None
