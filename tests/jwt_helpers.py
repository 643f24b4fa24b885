"""Minting JWTs in tests, with ``cryptography`` only: valid tokens of every algorithm, their
public JWKs, and forged tokens (any header, any claims, any signature bytes)."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512,
}
_CURVES: dict[str, tuple[ec.EllipticCurve, str, int]] = {
    "ES256": (ec.SECP256R1(), "P-256", 32),
    "ES384": (ec.SECP384R1(), "P-384", 48),
    "ES512": (ec.SECP521R1(), "P-521", 66),
}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int, size: int | None = None) -> str:
    length = size if size is not None else (value.bit_length() + 7) // 8
    return b64url(value.to_bytes(length, "big"))


def generate(kind: str, *, rsa_bits: int = 2048) -> Any:
    """A new private key for an algorithm: RS*/PS* (RSA), ES256/ES384/ES512, EdDSA."""
    if kind[:2] in ("RS", "PS"):
        return rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    if kind in _CURVES:
        return ec.generate_private_key(_CURVES[kind][0])
    if kind in ("EdDSA", "Ed25519"):
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(f"no key type for {kind}")


def jwk_of(public_key: PublicKeyTypes, kid: str | None, alg: str | None = None,
           **extra: Any) -> dict[str, Any]:
    """The public JWK of a key, with ``kid``/``alg`` when given and any extra members."""
    jwk: dict[str, Any]
    if isinstance(public_key, rsa.RSAPublicKey):
        numbers = public_key.public_numbers()
        jwk = {"kty": "RSA", "n": _uint(numbers.n), "e": _uint(numbers.e)}
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        point = public_key.public_numbers()
        crv, size = {"secp256r1": ("P-256", 32), "secp384r1": ("P-384", 48),
                     "secp521r1": ("P-521", 66)}[public_key.curve.name]
        jwk = {"kty": "EC", "crv": crv, "x": _uint(point.x, size), "y": _uint(point.y, size)}
    elif isinstance(public_key, ed25519.Ed25519PublicKey):
        raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
    else:
        raise TypeError(type(public_key).__name__)
    if kid is not None:
        jwk["kid"] = kid
    if alg is not None:
        jwk["alg"] = alg
    jwk.update(extra)
    return jwk


def _int(member: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(member + "=" * (-len(member) % 4)), "big")


def private_key_of(jwk: dict[str, Any]) -> PrivateKeyTypes:
    """The private key of a private JWK (RSA, EC P-256/384/521, Ed25519), e.g. an identity
    provider's signing key, to sign as that provider."""
    if jwk["kty"] == "RSA":
        public = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"]))
        return rsa.RSAPrivateNumbers(
            _int(jwk["p"]), _int(jwk["q"]), _int(jwk["d"]), _int(jwk["dp"]), _int(jwk["dq"]),
            _int(jwk["qi"]), public).private_key()
    if jwk["kty"] == "EC":
        curve = {crv: curve for curve, crv, _ in _CURVES.values()}[jwk["crv"]]
        return ec.EllipticCurvePrivateNumbers(_int(jwk["d"]), ec.EllipticCurvePublicNumbers(
            _int(jwk["x"]), _int(jwk["y"]), curve)).private_key()
    return ed25519.Ed25519PrivateKey.from_private_bytes(
        base64.urlsafe_b64decode(jwk["d"] + "=" * (-len(jwk["d"]) % 4)))


def sign(private_key: PrivateKeyTypes, alg: str, data: bytes) -> bytes:
    """A JWS signature (raw r || s for ECDSA) of ``data``."""
    if alg[:2] in ("RS", "PS") and isinstance(private_key, rsa.RSAPrivateKey):
        hash_ = _HASHES[alg[2:]]()
        pad: padding.AsymmetricPadding = (
            padding.PKCS1v15() if alg[:2] == "RS"
            else padding.PSS(padding.MGF1(hash_), hash_.digest_size))
        return private_key.sign(data, pad, hash_)
    if alg in _CURVES and isinstance(private_key, ec.EllipticCurvePrivateKey):
        hash_ = _HASHES[alg[2:]]()
        r, s = decode_dss_signature(private_key.sign(data, ec.ECDSA(hash_)))
        size = _CURVES[alg][2]
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    if alg in ("EdDSA", "Ed25519") and isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(data)
    raise ValueError(f"cannot sign {alg} with {type(private_key).__name__}")


def mint(private_key: PrivateKeyTypes, claims: dict[str, Any], *, alg: str,
         kid: str | None = None, typ: str | None = "at+jwt",
         header_extra: dict[str, Any] | None = None) -> str:
    """A signed compact JWS."""
    header: dict[str, Any] = {"alg": alg}
    if kid is not None:
        header["kid"] = kid
    if typ is not None:
        header["typ"] = typ
    header.update(header_extra or {})
    signing_input = f"{b64url(orjson.dumps(header))}.{b64url(orjson.dumps(claims))}"
    return f"{signing_input}.{b64url(sign(private_key, alg, signing_input.encode()))}"


def mint_raw(header: dict[str, Any], claims: dict[str, Any], signature: bytes) -> str:
    """A compact JWS with exactly this header, these claims and these signature bytes."""
    return f"{b64url(orjson.dumps(header))}.{b64url(orjson.dumps(claims))}.{b64url(signature)}"


def signing_input(header: dict[str, Any], claims: dict[str, Any]) -> bytes:
    """What ``mint_raw(header, claims, ...)`` signs (to forge e.g. an HMAC over it)."""
    return f"{b64url(orjson.dumps(header))}.{b64url(orjson.dumps(claims))}".encode()
