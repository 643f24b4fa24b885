"""The relay's tunnel tokens: which agent may hold which tunnel name (no I/O but reading a file).

Rules it keeps:

* The tokens file has one ``NAME:TOKEN`` or ``NAME:sha256:HEX`` line per tunnel (``#`` starts a
  comment; blank lines are skipped). Only the SHA-256 of a token is kept in memory; a plain token
  in the file is hashed at once. A bad line is an error naming its number, never echoing it.
* Names are DNS labels (they may become ``{name}.{domain}`` host names): 1-63 of ``a-z0-9-``,
  not starting or ending with ``-``.
* A presented token is checked against the name's hash in constant time.
* :func:`new_token_line` makes a token (32 random bytes, URL-safe) and the line to put in the
  file: the hashed form, so the relay's file never holds the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path

__all__ = ["TokenFileError", "TunnelTokens", "new_token_line"]

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_HEX = re.compile(r"[0-9a-f]{64}")


class TokenFileError(Exception):
    """The tokens file cannot be used; the message names the file and line."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TunnelTokens:
    def __init__(self, digests: dict[str, bytes]) -> None:
        self._digests = digests

    @classmethod
    def parse(cls, text: str, source: str = "the tokens file") -> TunnelTokens:
        digests: dict[str, bytes] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, secret = line.partition(":")
            if not sep or not _NAME.fullmatch(name):
                raise TokenFileError(f"{source} line {number}: expected NAME:TOKEN with NAME a "
                                     "DNS label (a-z, 0-9, -)")
            if name in digests:
                raise TokenFileError(f"{source} line {number}: {name} is listed twice")
            if secret.startswith("sha256:"):
                if not _HEX.fullmatch(secret[7:]):
                    raise TokenFileError(f"{source} line {number}: sha256: takes 64 lower-case "
                                         "hex digits")
                digests[name] = bytes.fromhex(secret[7:])
            elif len(secret) < 16:
                raise TokenFileError(f"{source} line {number}: the token of {name} is shorter "
                                     "than 16 characters")
            else:
                digests[name] = _digest(secret)
        return cls(digests)

    @classmethod
    def load(cls, path: str) -> TunnelTokens:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"--tokens {path}: cannot read it: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
        return cls.parse(text, f"--tokens {path}")

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._digests)

    def allows(self, name: str, token: str) -> bool:
        """Whether ``token`` is the token of tunnel ``name`` (constant time)."""
        expected = self._digests.get(name)
        presented = _digest(token)
        if expected is None:
            hmac.compare_digest(presented, presented)  # same work for an unknown name
            return False
        return hmac.compare_digest(presented, expected)


def new_token_line(name: str) -> tuple[str, str]:
    """A new token for tunnel ``name`` and the relay's line for it (``NAME:sha256:HEX``)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name[:70]!r} is not a DNS label (a-z, 0-9, -; 1-63 characters)")
    token = secrets.token_urlsafe(32)
    return token, f"{name}:sha256:{_digest(token).hex()}"
