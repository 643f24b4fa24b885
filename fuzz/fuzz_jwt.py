"""Fuzz JWS parsing and validation: any text either parses or raises TokenError, and a parsed
token's signature and claims checks raise nothing but TokenError. A token whose signature
verifies must have an algorithm that fits the key.

The keys are fixed (public halves only; the seed corpus has tokens signed by their private
halves, so mutations start from tokens that verify).

An input whose first byte is 0x01 is taken apart instead: the rest, split at NUL bytes, is the
header's JSON, the payload's JSON and the signature's bytes, which the harness encodes itself
(base64url, joined by dots). Byte mutations of base64 text rarely decode to JSON; this way the
header and claims checks see every shape of JSON the fuzzer makes."""

from __future__ import annotations

import base64
import contextlib

from cryptography.hazmat.primitives.serialization import load_pem_public_key

from vmcp_trio.auth.jwt import (
    TokenError,
    check_claims,
    key_from_public,
    parse_jws,
    verify_signature,
)

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example/mcp"
NOW = 1_750_000_000.0

_PEMS = {
    "rsa": b"""-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAzDFGqbo6HYa5fnEC1BK/
CODWcufnQcJRUZ5aVkcut9mKfxGIlbiZglXS5awD2r31KXHPJWEKAtezlQGbmyfe
qYVZcnqJX99zqGPAEXpyRkFU+8BJc2iT7jf5Tu9dKFUjIxl28m3VRly7ZMuLJkvl
8bw7b65BzLal8jeS49zUkxiUz6WxFcsVvtpUrdiNb8H70yVLunsT8KSiL1rJFo3d
0OX56UA7HPw+GH4tqi0jDSVif0LsrXN1Z0St0vvYTfezqokdLqHs3HZcIMA8n2LA
pb7NdWHs1Sss5GE0qC/nALch1UIUYHGYWDIBQRLSM2NlWf73rTaZbEPPKCd5DWTy
yQIDAQAB
-----END PUBLIC KEY-----
""",
    "ec": b"""-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEOFmYNZnWtuG9opMpRsMLRiPGIvm7
HiFKsybhuzef/+b+bTUHOPsNJjnvi3NHeAk/cuohdD9AKTS2Hb7B5xwr5w==
-----END PUBLIC KEY-----
""",
    "ed": b"""-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAg9OgNMRy22EqXRPos6v+vz+yR79Kp5k0FuiPbC/IHdk=
-----END PUBLIC KEY-----
""",
}
KEYS = [key_from_public(load_pem_public_key(pem), kid=kid) for kid, pem in _PEMS.items()]
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


def _assembled(parts: bytes) -> str:
    header, _, rest = parts.partition(b"\0")
    payload, _, signature = rest.partition(b"\0")
    return ".".join(base64.urlsafe_b64encode(part).rstrip(b"=").decode("ascii")
                    for part in (header, payload, signature))


def TestOneInput(data: bytes) -> None:
    assembled = data[:1] == b"\x01"
    text = _assembled(data[1:]) if assembled else data.decode("utf-8", errors="replace")
    try:
        token = parse_jws(text)
    except TokenError:
        return
    for key in KEYS:
        try:
            verify_signature(token, key)
        except TokenError:
            continue
        if _KEY_TYPES.get(token.alg[:2]) != key.kty:
            raise AssertionError(f"alg {token.alg!r} verified with a {key.kty} key")
    for audience in (AUDIENCE, None):
        with contextlib.suppress(TokenError):
            check_claims(token, issuer=ISSUER, audience=audience, now=NOW)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
