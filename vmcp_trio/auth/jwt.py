"""Compact JWS (JWT) parsing and validation, and the JWKS keys that verify them.

Written directly on ``cryptography`` and ``orjson`` because a first-seen token is on the request
path: most of a general-purpose library's cost is in Python-level base64 checks and option
handling, not in the signature verification itself. The checks are strict where laxness has
bitten JWT libraries before:

* the algorithm is pinned to the key (``none`` and HMAC are never accepted, so an RSA public key
  can never be used as an HMAC secret), and must equal the JWK's ``alg`` when it has one;
* base64url must be canonical (alphabet only, no padding, no stray trailing bits), so that one
  token has exactly one spelling (the verified-token cache is keyed by the token's hash): the
  project's one helper, :func:`vmcp_trio.protocol.base64url.decode` with ``strict=True``;
* ``crit`` (extensions) and unencoded payloads are refused, as are encrypted tokens (JWE);
* header parameters that point to keys (``jku``, ``x5u``, ``jwk``, ``x5c``) are ignored: keys come
  only from the issuer's configured JWKS.

Error reasons are safe to show to the client: they name the part, header parameter or claim that
was wrong and never contain the token or a claim value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..protocol import base64url

__all__ = [
    "ALLOWED_ALGS",
    "MAX_TOKEN_BYTES",
    "JwksError",
    "TokenError",
    "UnverifiedToken",
    "VerifyKey",
    "check_claims",
    "key_from_public",
    "load_jwks",
    "parse_jws",
    "verify_signature",
]

MAX_TOKEN_BYTES = 16 * 1024

ALLOWED_ALGS: frozenset[str] = frozenset({
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
    "ES256", "ES384", "ES512", "EdDSA", "Ed25519",
})
"""Every algorithm this module can verify. ``Ed25519`` is the fully-specified name (RFC 9864) of
what ``EdDSA`` means with an Ed25519 key; the two are interchangeable here."""

MIN_RSA_BITS = 2048
MAX_RSA_BITS = 16384  # OpenSSL's own limit; beyond it verification would fail anyway.
MAX_RSA_EXPONENT_BITS = 64  # 65537 in practice; a huge exponent makes every verify expensive.


class TokenError(Exception):
    """A token that cannot be accepted. ``reason`` is safe to show to the client (never contains
    the token); ``error`` is the RFC 6750 error code ("invalid_token")."""

    reason: str
    error: str

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = "invalid_token"


class JwksError(Exception):
    """The JWKS document as a whole is unusable (not an object, no ``keys`` array)."""


@dataclass(frozen=True)
class VerifyKey:
    kid: str | None
    kty: str  # "RSA" | "EC" | "OKP"
    alg: str | None  # the JWK's "alg" if it had one
    crv: str | None  # EC/OKP curve
    key: object  # cryptography public key object
    thumbprint: str  # RFC 7638 JWK thumbprint (base64url SHA-256), a stable id


@dataclass(frozen=True, slots=True)
class UnverifiedToken:
    header: dict[str, Any]
    claims: dict[str, Any]
    alg: str
    kid: str | None
    typ: str | None
    signing_input: bytes
    signature: bytes


# --- base64url ---------------------------------------------------------------------------------

_BASE64URL_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _member_bytes(value: object) -> bytes | None:
    """A JWK member's bytes (canonical base64url, :mod:`~vmcp_trio.protocol.base64url` strict),
    or None when it is not a string or not canonical."""
    if not isinstance(value, str):
        return None
    try:
        return base64url.decode(value, strict=True)
    except ValueError:
        return None


def _excerpt(value: object) -> str:
    """A short, harmless rendering of a header value for an error message."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    cleaned = "".join(c for c in value[:24] if c.isascii() and (c.isalnum() or c in "+-._/"))
    return repr(cleaned[:20])


# --- parsing -----------------------------------------------------------------------------------


def parse_jws(token: str) -> UnverifiedToken:
    """Split and decode a compact JWS (three base64url parts). Raises TokenError for: too long
    (> MAX_TOKEN_BYTES, checked first, before any decoding), not three parts, bad base64url,
    header/payload not a JSON object, missing or non-string "alg", "crit" present (we support no
    extensions), "b64": false, nested JWE (five parts) and so on."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenError(f"the token is larger than {MAX_TOKEN_BYTES} bytes")
    if not token.isascii():
        raise TokenError("the token contains characters outside base64url")
    raw = token.encode("ascii")
    # One pass of C code each: delete the alphabet, and exactly two dots must remain.
    if raw.translate(None, _BASE64URL_ALPHABET) != b"..":
        dots = raw.count(b".")
        if dots == 4:
            raise TokenError("encrypted tokens (JWE) are not supported")
        if dots != 2:
            raise TokenError("the token is not a compact JWS (three dot-separated parts)")
        raise TokenError("the token contains characters outside base64url")
    first = raw.index(b".")
    second = raw.index(b".", first + 1)
    if first == 0 or second == first + 1:
        # An empty signature is let through, for the clear "alg none" refusal later.
        raise TokenError("the token has an empty header or payload")
    try:
        header_bytes = base64url.decode(token[:first], strict=True)
    except ValueError:
        raise TokenError("the token header is not valid base64url") from None
    try:
        payload_bytes = base64url.decode(token[first + 1:second], strict=True)
    except ValueError:
        raise TokenError("the token payload is not valid base64url") from None
    try:
        signature = base64url.decode(token[second + 1:], strict=True)
    except ValueError:
        raise TokenError("the token signature is not valid base64url") from None
    try:
        header = orjson.loads(header_bytes)
    except orjson.JSONDecodeError:
        raise TokenError("the token header is not valid JSON") from None
    if type(header) is not dict:
        raise TokenError("the token header is not a JSON object")
    alg = header.get("alg")
    if type(alg) is not str:
        raise TokenError("the token header has no alg" if alg is None
                         else "the token header's alg is not a string")
    if "crit" in header:
        raise TokenError("the token header has crit: no extensions are supported")
    if "enc" in header or "zip" in header:
        raise TokenError("encrypted tokens (JWE) are not supported")
    if "b64" in header and header["b64"] is not True:
        raise TokenError("unencoded payloads (b64) are not supported")
    kid = header.get("kid")
    if kid is not None and type(kid) is not str:
        raise TokenError("the token header's kid is not a string")
    typ = header.get("typ")
    if typ is not None and type(typ) is not str:
        raise TokenError("the token header's typ is not a string")
    try:
        claims = orjson.loads(payload_bytes)
    except orjson.JSONDecodeError:
        raise TokenError("the token payload is not valid JSON") from None
    if type(claims) is not dict:
        raise TokenError("the token payload is not a JSON object")
    return UnverifiedToken(header, claims, alg, kid, typ, raw[:second], signature)


# --- signatures --------------------------------------------------------------------------------

_Verifier = Callable[[object, bytes, bytes], None]


def _rsa(pad: padding.AsymmetricPadding, hash_: hashes.HashAlgorithm) -> _Verifier:
    def verify(key: object, signature: bytes, data: bytes) -> None:
        if not isinstance(key, rsa.RSAPublicKey):
            raise TypeError("VerifyKey.key is not an RSA public key")
        key.verify(signature, data, pad, hash_)

    return verify


def _pss(hash_: hashes.HashAlgorithm) -> _Verifier:
    # RFC 7518 3.5: the salt is as long as the hash output.
    return _rsa(padding.PSS(padding.MGF1(hash_), hash_.digest_size), hash_)


def _ecdsa(hash_: hashes.HashAlgorithm, size: int) -> _Verifier:
    algorithm = ec.ECDSA(hash_)

    def verify(key: object, signature: bytes, data: bytes) -> None:
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise TypeError("VerifyKey.key is not an EC public key")
        # JWS carries the fixed-width r || s (RFC 7518 3.4); cryptography wants DER.
        if len(signature) != 2 * size:
            raise InvalidSignature
        r = int.from_bytes(signature[:size], "big")
        s = int.from_bytes(signature[size:], "big")
        key.verify(encode_dss_signature(r, s), data, algorithm)

    return verify


def _eddsa(key: object, signature: bytes, data: bytes) -> None:
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise TypeError("VerifyKey.key is not an Ed25519 public key")
    key.verify(signature, data)


_SHA256, _SHA384, _SHA512 = hashes.SHA256(), hashes.SHA384(), hashes.SHA512()

# alg -> (kty, crv or None for any, verifier)
_ALGORITHMS: dict[str, tuple[str, str | None, _Verifier]] = {
    "RS256": ("RSA", None, _rsa(padding.PKCS1v15(), _SHA256)),
    "RS384": ("RSA", None, _rsa(padding.PKCS1v15(), _SHA384)),
    "RS512": ("RSA", None, _rsa(padding.PKCS1v15(), _SHA512)),
    "PS256": ("RSA", None, _pss(_SHA256)),
    "PS384": ("RSA", None, _pss(_SHA384)),
    "PS512": ("RSA", None, _pss(_SHA512)),
    "ES256": ("EC", "P-256", _ecdsa(_SHA256, 32)),
    "ES384": ("EC", "P-384", _ecdsa(_SHA384, 48)),
    "ES512": ("EC", "P-521", _ecdsa(_SHA512, 66)),
    "EdDSA": ("OKP", "Ed25519", _eddsa),
    "Ed25519": ("OKP", "Ed25519", _eddsa),
}
_ALIASES = {"Ed25519": "EdDSA"}


def _same_alg(a: str, b: str) -> bool:
    return _ALIASES.get(a, a) == _ALIASES.get(b, b)


def _fits(alg: str, kty: str, crv: str | None) -> bool:
    entry = _ALGORITHMS.get(alg)
    return entry is not None and entry[0] == kty and (entry[1] is None or entry[1] == crv)


def verify_signature(token: UnverifiedToken, key: VerifyKey,
                     allowed_algs: frozenset[str] = ALLOWED_ALGS) -> None:
    """The alg is pinned to the key: "none" and any HS* are always refused; the token's alg must
    be in allowed_algs, match the key type (RS*/PS* need RSA, ES256 needs EC P-256, ES384 P-384,
    ES512 P-521, EdDSA needs OKP Ed25519), and equal the JWK's "alg" when it has one. Raises
    TokenError (reason names the alg problem, or "signature does not verify")."""
    alg = token.alg
    entry = _ALGORITHMS.get(alg)
    if entry is None or alg not in allowed_algs:
        raise TokenError(f"alg {_excerpt(alg)} is not allowed")
    kty, crv, verifier = entry
    if kty != key.kty or (crv is not None and crv != key.crv):
        raise TokenError(f"alg {alg} does not match the type of the key")
    if key.alg is not None and key.alg != alg and not _same_alg(key.alg, alg):
        raise TokenError(f"alg {alg} is not the alg of the key")
    try:
        verifier(key.key, token.signature, token.signing_input)
    except InvalidSignature:
        raise TokenError("signature does not verify") from None


# --- claims ------------------------------------------------------------------------------------


def _number(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    kind = type(value)
    if (kind is not int and kind is not float) or value != value:  # bool is not int here; NaN
        raise TokenError(f"{name} is not a number")
    return value  # type: ignore[no-any-return]


def check_claims(token: UnverifiedToken, *, issuer: str,
                 audience: str | frozenset[str] | None, now: float, leeway: float = 30.0,
                 typs: frozenset[str] = frozenset({"at+jwt", "jwt"})) -> None:
    """iss must equal issuer exactly; aud (string or array of strings) must contain audience when
    audience is not None (one of them, given a set); exp required and > now - leeway; nbf (if
    present) <= now + leeway; iat
    (if present) <= now + leeway; exp/nbf/iat must be numbers (not bool); typ header, when
    present, compared case-insensitively after stripping an "application/" prefix, must be in
    typs (give them in lower case). Raises TokenError naming the claim; never echoes values."""
    typ = token.typ
    if typ is not None:
        typ = typ.lower()
        if typ.startswith("application/"):
            typ = typ[12:]
        if typ not in typs:
            raise TokenError("the token's typ header is not an accepted token type")
    claims = token.claims
    iss = claims.get("iss")
    if iss != issuer or type(iss) is not str:
        raise TokenError("iss is missing" if iss is None else "iss is not the expected issuer")
    if audience is not None:
        aud = claims.get("aud")
        if type(aud) is str:
            if aud != audience and (type(audience) is str or aud not in audience):
                raise TokenError("aud does not contain the expected audience")
        elif type(aud) is list:
            if not all(type(item) is str for item in aud):
                raise TokenError("aud is not a string or an array of strings")
            if audience not in aud if isinstance(audience, str) else audience.isdisjoint(aud):
                raise TokenError("aud does not contain the expected audience")
        elif aud is None:
            raise TokenError("aud is missing")
        else:
            raise TokenError("aud is not a string or an array of strings")
    exp = _number(claims, "exp")
    if exp is None:
        raise TokenError("exp is missing")
    if exp <= now - leeway:
        raise TokenError("the token has expired")
    nbf = _number(claims, "nbf")
    if nbf is not None and nbf > now + leeway:
        raise TokenError("the token is not valid yet (nbf is in the future)")
    iat = _number(claims, "iat")
    if iat is not None and iat > now + leeway:
        raise TokenError("iat is in the future")


# --- keys --------------------------------------------------------------------------------------

_CURVES: dict[str, tuple[type[ec.EllipticCurve], int]] = {
    "P-256": (ec.SECP256R1, 32),
    "P-384": (ec.SECP384R1, 48),
    "P-521": (ec.SECP521R1, 66),
}
_CURVE_NAMES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}


def _int_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8 or 1, "big")


def _thumbprint(members: str) -> str:
    """RFC 7638: SHA-256 of the required members, sorted, without whitespace."""
    return base64url.encode(hashlib.sha256(members.encode("ascii")).digest())


def key_from_public(key: object, *, kid: str | None = None, alg: str | None = None) -> VerifyKey:
    """A VerifyKey from a cryptography public key object (RSA, EC P-256/P-384/P-521, Ed25519),
    for in-process keys (the embedded authorization server). Raises TypeError for another kind
    of key and ValueError for a weak RSA key, another curve, or an alg that does not fit."""
    kty: str
    crv: str | None
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        if not MIN_RSA_BITS <= numbers.n.bit_length() <= MAX_RSA_BITS:
            raise ValueError(f"RSA keys need {MIN_RSA_BITS} to {MAX_RSA_BITS} bits")
        if numbers.e.bit_length() > MAX_RSA_EXPONENT_BITS:
            raise ValueError("the RSA public exponent is too large")
        kty, crv = "RSA", None
        e, n = base64url.encode(_int_bytes(numbers.e)), base64url.encode(_int_bytes(numbers.n))
        thumbprint = _thumbprint(f'{{"e":"{e}","kty":"RSA","n":"{n}"}}')
    elif isinstance(key, ec.EllipticCurvePublicKey):
        crv = _CURVE_NAMES.get(key.curve.name)
        if crv is None:
            raise ValueError(f"EC curve {key.curve.name} is not supported")
        kty, size = "EC", _CURVES[crv][1]
        point = key.public_numbers()
        x = base64url.encode(point.x.to_bytes(size, "big"))
        y = base64url.encode(point.y.to_bytes(size, "big"))
        thumbprint = _thumbprint(f'{{"crv":"{crv}","kty":"EC","x":"{x}","y":"{y}"}}')
    elif isinstance(key, ed25519.Ed25519PublicKey):
        kty, crv = "OKP", "Ed25519"
        x = base64url.encode(key.public_bytes(Encoding.Raw, PublicFormat.Raw))
        thumbprint = _thumbprint(f'{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}')
    else:
        raise TypeError(f"unsupported key type {type(key).__name__}")
    if alg is not None and not _fits(alg, kty, crv):
        raise ValueError(f"alg {alg!r} does not fit a {kty} {crv or ''} key".replace("  ", " "))
    return VerifyKey(kid, kty, alg, crv, key, thumbprint)


def _jwk_public_key(jwk: dict[str, Any]) -> object | None:
    """The public key of one JWK, or None when it is malformed or not a kind we verify with."""
    kty = jwk.get("kty")
    if kty == "RSA":
        n_bytes, e_bytes = _member_bytes(jwk.get("n")), _member_bytes(jwk.get("e"))
        if not n_bytes or not e_bytes:
            return None
        n, e = int.from_bytes(n_bytes, "big"), int.from_bytes(e_bytes, "big")
        if (not MIN_RSA_BITS <= n.bit_length() <= MAX_RSA_BITS
                or e.bit_length() > MAX_RSA_EXPONENT_BITS):
            return None
        return rsa.RSAPublicNumbers(e, n).public_key()
    if kty == "EC":
        crv = jwk.get("crv")
        curve = _CURVES.get(crv) if type(crv) is str else None
        if curve is None:
            return None
        x_bytes, y_bytes = _member_bytes(jwk.get("x")), _member_bytes(jwk.get("y"))
        if x_bytes is None or y_bytes is None or not len(x_bytes) == len(y_bytes) == curve[1]:
            return None
        return ec.EllipticCurvePublicNumbers(
            int.from_bytes(x_bytes, "big"), int.from_bytes(y_bytes, "big"), curve[0]()
        ).public_key()
    if kty == "OKP" and jwk.get("crv") == "Ed25519":
        x_bytes = _member_bytes(jwk.get("x"))
        if x_bytes is None or len(x_bytes) != 32:
            return None
        return ed25519.Ed25519PublicKey.from_public_bytes(x_bytes)
    return None


def _jwk_to_verify_key(jwk: object) -> VerifyKey | None:
    if type(jwk) is not dict:
        return None
    use = jwk.get("use")
    if use is not None and use != "sig":
        return None
    ops = jwk.get("key_ops")
    if ops is not None and (type(ops) is not list or "verify" not in ops):
        return None
    kid, alg = jwk.get("kid"), jwk.get("alg")
    if (kid is not None and type(kid) is not str) or (alg is not None and type(alg) is not str):
        return None
    try:
        key = _jwk_public_key(jwk)
        if key is None:
            return None
        return key_from_public(key, kid=kid, alg=alg)
    except ValueError:  # not on the curve, bad exponent, alg that does not fit the key ...
        return None


def load_jwks(document: object) -> list[VerifyKey]:
    """Keys of a JWKS document (already JSON-decoded). Keys that are not for signature
    verification (use != "sig" when present, key_ops without "verify", unknown kty/crv,
    symmetric "oct" keys) are skipped, not fatal; private parts, when present, are ignored.
    Malformed values (bad base64, RSA modulus < 2048 bits, point not on curve) skip that key.
    Raises JwksError only when the document as a whole is unusable."""
    if not isinstance(document, dict):
        raise JwksError("the JWKS document is not a JSON object")
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise JwksError('the JWKS document has no "keys" array')
    return [key for key in map(_jwk_to_verify_key, keys) if key is not None]
