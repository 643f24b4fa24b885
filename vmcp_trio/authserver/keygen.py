"""Generating the signing keys and HMAC secrets that ``authServerConfig`` refers to.

Keys are written as unencrypted PEM (PKCS#8), which is what a Kubernetes Secret holds and what
the authorization server loads. HMAC secrets are 48 random bytes as URL-safe base64 text
(64 characters), comfortably above the 32-byte minimum.
"""

from __future__ import annotations

import secrets
from typing import Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from ..protocol import base64url

__all__ = ["KeyType", "generate_hmac_secret", "generate_signing_key"]

KeyType = Literal["ec", "rsa", "ed25519"]


def generate_signing_key(key_type: KeyType = "ec", rsa_bits: int = 3072) -> bytes:
    """A new private key as PKCS#8 PEM: EC P-256 (ES256), RSA (RS256) or Ed25519 (EdDSA)."""
    key: PrivateKeyTypes
    if key_type == "ec":
        key = ec.generate_private_key(ec.SECP256R1())
    elif key_type == "rsa":
        if rsa_bits < 2048:
            raise ValueError("RSA keys need at least 2048 bits")
        key = rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    else:
        key = ed25519.Ed25519PrivateKey.generate()
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate_hmac_secret() -> bytes:
    return base64url.encode(secrets.token_bytes(48)).encode("ascii")
