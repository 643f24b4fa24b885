"""A private key that signs JWS: read from PEM, its alg and kid, its public JWK, compact JWS.

One job, for whoever signs: the embedded authorization server's access tokens
(:mod:`vmcp_trio.authserver.keys`) and a client's own assertions (RFC 7523 ``private_key_jwt``,
:mod:`vmcp_trio.auth.oauth.tokens`). The rules it keeps:

* The alg follows the key: RSA (at least 2048 bits) -> RS256, P-256 -> ES256, P-384 -> ES384,
  P-521 -> ES512, Ed25519 -> EdDSA; an ECDSA signature is the fixed-width r || s (RFC 7518
  3.4), not DER.
* The kid is the RFC 7638 thumbprint of the public key: never configured, the same for the
  same key on every replica.
* An unencrypted PEM only (PKCS#8, PKCS#1 RSA or SEC1 EC; ``EC PARAMETERS`` may accompany
  it); a second key in one PEM is refused. Errors name the key by its index in the
  configuration and say why; they never contain key material (nor the text of a
  ``cryptography`` error, which may quote the input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from ..protocol import base64url
from .jwt import MIN_RSA_BITS, VerifyKey, key_from_public
from .jwt import _int_bytes as int_bytes

__all__ = ["SigningKey", "SigningKeyError", "SigningPrivateKey", "compact_jws",
           "load_signing_key", "new_key"]

SigningPrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

# JWS alg and the fixed width of r and s (RFC 7518 3.4) for each supported curve.
_EC_ALGS: dict[str, tuple[str, str, int, hashes.HashAlgorithm]] = {
    "secp256r1": ("ES256", "P-256", 32, hashes.SHA256()),
    "secp384r1": ("ES384", "P-384", 48, hashes.SHA384()),
    "secp521r1": ("ES512", "P-521", 66, hashes.SHA512()),
}
_EC_BY_ALG = {alg: (size, hash_) for alg, _, size, hash_ in _EC_ALGS.values()}

_PEM_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]{1,40})-----")
_ACCEPTED_LABELS = (b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY")


class SigningKeyError(Exception):
    """A configured signing key that cannot be used. The message names the key by its index and
    says why; it never contains key material."""


@dataclass(frozen=True)
class SigningKey:
    private_key: SigningPrivateKey = field(repr=False)
    alg: str  # RS256 | ES256 | ES384 | ES512 | EdDSA, following the key
    kid: str  # the RFC 7638 thumbprint of the public key
    verify_key: VerifyKey = field(repr=False)  # the public half, with kid and alg

    def sign(self, data: bytes) -> bytes:
        """The JWS signature of ``data`` (for ECDSA the fixed-width r || s, not DER)."""
        key = self.private_key
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        if isinstance(key, ec.EllipticCurvePrivateKey):
            size, hash_ = _EC_BY_ALG[self.alg]
            r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hash_)))
            return r.to_bytes(size, "big") + s.to_bytes(size, "big")
        return key.sign(data)

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK (never a private member), with kid, alg and use "sig"."""
        public = self.private_key.public_key()
        jwk: dict[str, Any]
        if isinstance(public, rsa.RSAPublicKey):
            numbers = public.public_numbers()
            jwk = {"kty": "RSA", "n": base64url.encode(int_bytes(numbers.n)),
                   "e": base64url.encode(int_bytes(numbers.e))}
        elif isinstance(public, ec.EllipticCurvePublicKey):
            _, crv, size, _ = _EC_ALGS[public.curve.name]
            point = public.public_numbers()
            jwk = {"kty": "EC", "crv": crv, "x": base64url.encode(point.x.to_bytes(size, "big")),
                   "y": base64url.encode(point.y.to_bytes(size, "big"))}
        else:
            raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": base64url.encode(raw)}
        jwk.update(kid=self.kid, alg=self.alg, use="sig")
        return jwk


def _make(private_key: SigningPrivateKey, alg: str, index: int) -> SigningKey:
    try:
        verify_key = key_from_public(private_key.public_key(), alg=alg)
    except ValueError as exc:  # messages name the size, curve or alg, never key material
        raise SigningKeyError(f"signing key {index}: {exc}") from None
    kid = verify_key.thumbprint
    return SigningKey(private_key, alg, kid, replace(verify_key, kid=kid))


def load_signing_key(pem: bytes, index: int = 0) -> SigningKey:
    """A signing key from an unencrypted PEM private key: PKCS#1 RSA (``BEGIN RSA PRIVATE KEY``)
    of at least 2048 bits, SEC1 EC (``BEGIN EC PRIVATE KEY``) on P-256/P-384/P-521, or PKCS#8
    (``BEGIN PRIVATE KEY``) holding one of those or an Ed25519 key. ``EC PARAMETERS`` blocks (as
    ``openssl ecparam -genkey`` writes them) may accompany the key; any other second key is
    refused, since it would be unclear which one signs. Encrypted PEMs are refused: the key must
    be usable without a passphrase at startup, and a Secret is the place to protect it. The alg
    follows the key: RSA -> RS256, P-256 -> ES256, P-384 -> ES384, P-521 -> ES512, Ed25519 ->
    EdDSA. ``index`` (the key's position in the configuration) only names the key in errors."""
    if not isinstance(pem, bytes):
        raise SigningKeyError(f"signing key {index}: the PEM is not bytes")
    labels = [m.group(1) for m in _PEM_BEGIN.finditer(pem)]
    keys = [label for label in labels if label.endswith(b"PRIVATE KEY")]
    if b"ENCRYPTED PRIVATE KEY" in keys or b"Proc-Type: 4,ENCRYPTED" in pem:
        raise SigningKeyError(f"signing key {index}: the PEM is encrypted; "
                              "give the key unencrypted")
    if not keys:
        raise SigningKeyError(f"signing key {index}: no PEM private key "
                              "(BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) found")
    if len(keys) > 1:
        raise SigningKeyError(f"signing key {index}: the PEM holds {len(keys)} private keys; "
                              "give one key per entry")
    if keys[0] not in _ACCEPTED_LABELS:
        raise SigningKeyError(f"signing key {index}: PEM type {keys[0].decode('ascii')!r} is "
                              "not supported (use PKCS#8, PKCS#1 RSA or SEC1 EC)")
    try:
        private_key = load_pem_private_key(pem, password=None)
    except TypeError:  # "password was not given but the key is encrypted"
        raise SigningKeyError(f"signing key {index}: the PEM is encrypted; "
                              "give the key unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise SigningKeyError(f"signing key {index}: the PEM is not a valid private key "
                              "(bad encoding, or an unsupported key type)") from None
    if isinstance(private_key, rsa.RSAPrivateKey):
        if private_key.key_size < MIN_RSA_BITS:
            raise SigningKeyError(f"signing key {index}: the RSA key has {private_key.key_size}"
                                  f" bits; at least {MIN_RSA_BITS} are needed")
        return _make(private_key, "RS256", index)
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        entry = _EC_ALGS.get(private_key.curve.name)
        if entry is None:
            raise SigningKeyError(f"signing key {index}: EC curve {private_key.curve.name} is "
                                  "not supported (use P-256, P-384 or P-521)")
        return _make(private_key, entry[0], index)
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return _make(private_key, "EdDSA", index)
    raise SigningKeyError(f"signing key {index}: {type(private_key).__name__.removeprefix('_')}"
                          " keys are not supported (use RSA, EC or Ed25519)")


def new_key() -> SigningKey:
    """A fresh ES256 key (an ephemeral development key)."""
    return _make(ec.generate_private_key(ec.SECP256R1()), "ES256", 0)


def compact_jws(key: SigningKey, claims: dict[str, Any], *, typ: str | None,
                kid: bool = True) -> str:
    """A compact JWS of ``claims`` (serialized with orjson, which raises TypeError for a value
    JSON cannot hold) under ``key``: header ``{alg, kid, typ}`` (``kid`` and ``typ`` when
    asked for)."""
    header: dict[str, str] = {"alg": key.alg}
    if kid:
        header["kid"] = key.kid
    if typ is not None:
        header["typ"] = typ
    signing_input = (f"{base64url.encode(orjson.dumps(header))}."
                     f"{base64url.encode(orjson.dumps(claims))}")
    signature = key.sign(signing_input.encode("ascii"))
    return f"{signing_input}.{base64url.encode(signature)}"
