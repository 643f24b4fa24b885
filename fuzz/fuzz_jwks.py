"""Fuzz JWKS loading: any JSON document gives a list of keys or raises JwksError, and every key
it gives is one we can verify with, with the thumbprint its public key computes to."""

from __future__ import annotations

import orjson

from vmcp_trio.auth.jwt import JwksError, key_from_public, load_jwks


def TestOneInput(data: bytes) -> None:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    try:
        keys = load_jwks(document)
    except JwksError:
        return
    for key in keys:
        if key.kty not in ("RSA", "EC", "OKP") or len(key.thumbprint) != 43:
            raise AssertionError(f"odd key {key!r}")
        if key_from_public(key.key, kid=key.kid, alg=key.alg).thumbprint != key.thumbprint:
            raise AssertionError(f"thumbprint of {key!r} is not stable")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
