"""The authorization server's signing keys: the set of them (each a :mod:`~vmcp_trio.auth.signing`
key), signing access tokens (compact JWS), publishing the JWKS, and handing the same keys to
the in-process token verifier.

Rotation works by order: the first configured key signs, every configured key verifies and is
published in the JWKS (ToolHive publishes only the signing key, so a token signed by the previous
key fails at every resource server that refetched the JWKS during a rotation; we publish all).
Each key's ``kid`` is its RFC 7638 thumbprint, so a kid never has to be configured and the same
key always gets the same kid, whichever replica loaded it.

Errors name the key by its index in the configuration and say why it cannot be used; they never
contain key material (nor the text of a ``cryptography`` error, which may quote the input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..auth.jwt import VerifyKey
from ..auth.signing import SigningKey, SigningKeyError, compact_jws, load_signing_key, new_key

__all__ = ["SigningKeys"]

class SigningKeys:
    """The authorization server's key set. The first key signs; all keys verify and are
    published (rotation: add the new key first, keep the old one after it until every token it
    signed has expired). Without keys, one ephemeral ES256 key is generated (``ephemeral`` is
    True): fine for a single development replica, but tokens stop verifying at each restart and
    differ between replicas. Two entries holding the same key are refused (they would publish
    one kid twice)."""

    ephemeral: bool
    signing: SigningKey

    def __init__(self, pems: Sequence[bytes]) -> None:
        if isinstance(pems, bytes | str):  # a lone PEM is a Sequence too, of characters
            raise TypeError("pems must be a sequence of PEMs, not a single PEM")
        keys: list[SigningKey] = []
        by_kid: dict[str, int] = {}
        for index, pem in enumerate(pems):
            key = load_signing_key(pem, index)
            if key.kid in by_kid:
                raise SigningKeyError(f"signing key {index}: the same key as signing key "
                                      f"{by_kid[key.kid]}")
            by_kid[key.kid] = index
            keys.append(key)
        self.ephemeral = not keys
        if not keys:
            keys.append(new_key())
        self.signing = keys[0]
        self.keys: tuple[SigningKey, ...] = tuple(keys)
        self._by_kid = {key.kid: key.verify_key for key in keys}
        self._jwks = [key.public_jwk() for key in keys]

    def sign(self, claims: dict[str, Any], *, typ: str = "at+jwt") -> str:
        """A compact JWS of ``claims`` under the signing key; header ``{alg, kid, typ}``."""
        return compact_jws(self.signing, claims, typ=typ)

    def jwks(self) -> dict[str, Any]:
        """The public JWKS: every key (the signing key first, then the rotation keys), each with
        kid, alg and use "sig". A fresh document at each call, so callers may change it."""
        return {"keys": [dict(jwk) for jwk in self._jwks]}

    async def key_for(self, kid: str | None) -> VerifyKey | None:
        """The verification key for a token's kid (the ``KeySource`` protocol of the incoming
        authenticator): one of ours, or None for an unknown kid. A token without kid gets the
        signing key. Never does I/O: the keys are in memory."""
        if kid is None:
            return self.signing.verify_key
        return self._by_kid.get(kid)
