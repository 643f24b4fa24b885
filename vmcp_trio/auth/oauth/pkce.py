"""PKCE for the client side (RFC 7636): the S256 verifier and challenge of one authorization
request, and whether an authorization server supports S256.

Rules it keeps:

* Only S256: ``plain`` gives no protection against a stolen authorization request.
* A verifier is 64 characters from 48 random bytes (RFC 7636 allows 43 to 128), fresh for every
  request; the challenge is ``BASE64URL(SHA256(verifier))`` without padding.
* A server supports S256 only when its metadata says so: MCP (2025-11-25) has clients refuse to
  proceed when ``code_challenge_methods_supported`` is absent.
"""

from __future__ import annotations

import hashlib
import secrets

from ...protocol import base64url
from .discovery import AuthorizationServerMetadata

__all__ = ["pkce_pair", "supports_s256"]


def pkce_pair() -> tuple[str, str]:
    """A fresh ``(verifier, S256 challenge)``."""
    verifier = secrets.token_urlsafe(48)
    return verifier, base64url.encode(hashlib.sha256(verifier.encode("ascii")).digest())


def supports_s256(metadata: AuthorizationServerMetadata) -> bool:
    """Whether the server's metadata lists S256 among its ``code_challenge_methods_supported``."""
    return "S256" in metadata.code_challenge_methods_supported
