"""Tokens already verified, so that a client presenting the same token on every request pays for
one signature verification, not one per request.

Entries are keyed by the SHA-256 of the token: the cache never holds a bearer token, so a heap
dump or a debugging session cannot leak one. Each entry also remembers which key verified it
(the key's RFC 7638 thumbprint), so that a key rotated out of the issuer's JWKS takes the tokens
it verified with it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["VerifiedTokenCache"]

T = TypeVar("T")


class VerifiedTokenCache(Generic[T]):
    """Tokens already verified, keyed by SHA-256 of the token (the token itself is never kept),
    bounded (LRU, max_entries), each entry expiring at the token's exp (and never later than
    now + max_ttl), dropped when the key that verified it leaves the issuer's JWKS."""

    def __init__(self, max_entries: int = 10_000, max_ttl: float = 3600.0) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.max_ttl = max_ttl
        # digest -> (value, expires, key_id); oldest use first.
        self._entries: OrderedDict[bytes, tuple[T, float, str]] = OrderedDict()
        self._by_key: dict[str, set[bytes]] = {}

    def get(self, token: str, now: float) -> T | None:
        digest = hashlib.sha256(token.encode()).digest()
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[1] <= now:
            self._remove(digest)
            return None
        self._entries.move_to_end(digest)
        return entry[0]

    def put(self, token: str, value: T, *, expires: float, key_id: str, now: float) -> None:
        digest = hashlib.sha256(token.encode()).digest()
        if digest in self._entries:
            self._remove(digest)
        expires = min(expires, now + self.max_ttl)
        if expires <= now:
            return
        self._entries[digest] = (value, expires, key_id)
        self._by_key.setdefault(key_id, set()).add(digest)
        while len(self._entries) > self.max_entries:
            oldest, (_, _, oldest_key) = self._entries.popitem(last=False)
            self._unindex(oldest, oldest_key)

    def drop_key(self, key_id: str) -> int:
        """Forget every token the key verified; returns how many entries were removed."""
        digests = self._by_key.pop(key_id, set())
        for digest in digests:
            del self._entries[digest]
        return len(digests)

    def __len__(self) -> int:
        return len(self._entries)

    def _remove(self, digest: bytes) -> None:
        _, _, key_id = self._entries.pop(digest)
        self._unindex(digest, key_id)

    def _unindex(self, digest: bytes, key_id: str) -> None:
        digests = self._by_key.get(key_id)
        if digests is not None:
            digests.discard(digest)
            if not digests:
                del self._by_key[key_id]
