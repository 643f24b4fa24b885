"""base64url without padding (RFC 4648 section 5, as JOSE, PKCE and OAuth use it): the one
encoder and decoder of the project.

Rules it keeps:

* :func:`encode` writes the URL-safe alphabet and never pads.
* :func:`decode` accepts only the URL-safe alphabet: a ``+``, ``/``, space or any other character
  is an error, never skipped (the standard library's ``urlsafe_b64decode`` silently drops them).
  A length of ``4k+1`` is an error (no byte sequence encodes to it).
* Lenient by default: padding is optional (when present it must make the length a multiple of
  four) and the unused bits of the last character are ignored, as most encoders in the field
  expect.
* ``strict=True`` is the canonical form that JOSE needs (``auth/jwt.py``), so that one value has
  exactly one spelling: no padding at all, and the unused bits of the last character must be
  zero.

Every error is a :class:`ValueError` that quotes nothing of the input (it may be a secret).
Not this module's: ``auth/sealing.py`` writes *padded* base64url, a stored format that must stay
readable as it is.
All of it is C-level work (``bytes.translate``, ``binascii``): the JWT parser calls it on the
request path.
"""

from __future__ import annotations

import binascii

__all__ = ["decode", "encode"]

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
# The last character of an unpadded text of length 4k+2 (4k+3) carries 4 (2) unused bits; only
# these characters have them all zero (the same in both alphabets).
_CANONICAL_LAST = {2: b"AQgw", 3: b"AEIMQUYcgkosw048"}


def encode(data: bytes) -> str:
    """``data`` as unpadded base64url text."""
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(
        _TO_URLSAFE).decode("ascii")


def decode(text: str, *, strict: bool = False) -> bytes:
    """The bytes that ``text`` encodes; :class:`ValueError` if it is not base64url (see the
    module's rules for what ``strict`` adds)."""
    if not text.isascii():
        raise ValueError("not base64url: a character outside the alphabet")
    raw = text.encode("ascii")
    if not strict and raw.endswith(b"="):
        unpadded = raw.rstrip(b"=")
        if len(raw) & 3 or len(raw) - len(unpadded) > 2:
            raise ValueError("not base64url: wrong padding")
        raw = unpadded
    if raw.translate(None, _ALPHABET):
        raise ValueError("not base64url: a character outside the alphabet")
    rest = len(raw) & 3
    if rest == 1:
        raise ValueError("not base64url: impossible length")
    if strict and rest and raw[-1] not in _CANONICAL_LAST[rest]:
        raise ValueError("not canonical base64url: the unused bits are not zero")
    return binascii.a2b_base64(raw.translate(_TO_STANDARD) + b"=" * (-len(raw) & 3))
