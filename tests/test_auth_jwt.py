"""JWS parsing, signature verification pinned to the key, claim checks, JWKS loading and the
verified-token cache (vmcp_trio.auth.jwt, vmcp_trio.auth.token_cache)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from functools import cache
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa, x25519

from vmcp_trio.auth.jwt import (
    ALLOWED_ALGS,
    MAX_TOKEN_BYTES,
    JwksError,
    TokenError,
    UnverifiedToken,
    VerifyKey,
    check_claims,
    key_from_public,
    load_jwks,
    parse_jws,
    verify_signature,
)
from vmcp_trio.auth.token_cache import VerifiedTokenCache

from .jwt_helpers import b64url, generate, jwk_of, mint, mint_raw, signing_input

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example/mcp"
NOW = 1_750_000_000.0


@cache
def private(kind: str) -> Any:
    """One key per kind for the whole module (RSA generation is slow)."""
    return generate(kind.split("-")[0])


def other(kind: str) -> Any:
    return private(f"{kind}-2")


@cache
def verify_key(kind: str, kid: str = "k1", alg: str | None = None) -> VerifyKey:
    (key,) = load_jwks({"keys": [jwk_of(private(kind).public_key(), kid, alg)]})
    return key


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": NOW + 600,
                            "iat": NOW - 10, "scope": "tools:read"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def validate(token: str, key: VerifyKey, *, audience: str | None = AUDIENCE,
             now: float = NOW, **kwargs: Any) -> UnverifiedToken:
    parsed = parse_jws(token)
    verify_signature(parsed, key)
    check_claims(parsed, issuer=ISSUER, audience=audience, now=now, **kwargs)
    return parsed


def refused(call: Callable[[], object], token: str, *, match: str) -> TokenError:
    """The call raises TokenError whose reason contains ``match`` and none of the token."""
    with pytest.raises(TokenError) as caught:
        call()
    reason = caught.value.reason
    assert match in reason, reason
    assert caught.value.error == "invalid_token"
    assert str(caught.value) == reason
    for part in token.split("."):
        assert len(part) < 8 or part not in reason, reason
    return caught.value


def refused_token(token: str, key: VerifyKey, *, match: str, **kwargs: Any) -> TokenError:
    return refused(lambda: validate(token, key, **kwargs), token, match=match)


# --- valid tokens ------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS512", "ES256", "ES384",
                                 "ES512", "EdDSA"])
def test_valid_token_verifies(alg: str) -> None:
    kind = "RS256" if alg[:2] in ("RS", "PS") else alg
    token = mint(private(kind), claims(), alg=alg, kid="k1")
    parsed = validate(token, verify_key(kind))
    assert parsed.alg == alg and parsed.kid == "k1" and parsed.typ == "at+jwt"
    assert parsed.claims["sub"] == "alice"
    assert parsed.header["alg"] == alg


def test_ed25519_alias_verifies_with_an_eddsa_jwk() -> None:
    token = mint(private("EdDSA"), claims(), alg="Ed25519")
    validate(token, verify_key("EdDSA", alg="EdDSA"))
    validate(mint(private("EdDSA"), claims(), alg="EdDSA"), verify_key("EdDSA", alg="Ed25519"))


def test_in_process_key_verifies() -> None:
    key = key_from_public(private("ES256").public_key(), kid="embedded", alg="ES256")
    validate(mint(private("ES256"), claims(), alg="ES256", kid="embedded"), key)


# --- algorithm pinning -------------------------------------------------------------------------


def test_alg_none_is_refused() -> None:
    for alg in ("none", "None", "NONE"):
        token = mint_raw({"alg": alg, "typ": "JWT"}, claims(), b"")
        refused_token(token, verify_key("RS256"), match="is not allowed")


def test_hs256_with_the_rsa_public_key_as_secret_is_refused() -> None:
    pem = private("RS256").public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "kid": "k1"}
    forged = hmac.new(pem, signing_input(header, claims()), hashlib.sha256).digest()
    token = mint_raw(header, claims(), forged)
    refused_token(token, verify_key("RS256"), match="HS256")
    # Even a caller who lists HS256 as allowed cannot turn it on.
    parsed = parse_jws(token)
    refused(lambda: verify_signature(parsed, verify_key("RS256"), frozenset({"HS256"})), token,
            match="is not allowed")


def test_es256_token_against_an_rsa_key_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256", kid="k1")
    refused_token(token, verify_key("RS256"), match="does not match the type of the key")


def test_es256_token_against_a_p384_key_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256", kid="k1")
    refused_token(token, verify_key("ES384"), match="does not match the type of the key")


def test_alg_other_than_the_jwk_alg_is_refused() -> None:
    # A genuine PS256 signature by the key, but the JWK says the key is for RS256 only.
    token = mint(private("RS256"), claims(), alg="PS256", kid="k1")
    refused_token(token, verify_key("RS256", alg="RS256"), match="is not the alg of the key")


def test_alg_outside_allowed_algs_is_refused() -> None:
    token = mint(private("RS256"), claims(), alg="RS256")
    parsed = parse_jws(token)
    refused(lambda: verify_signature(parsed, verify_key("RS256"), frozenset({"ES256"})), token,
            match="is not allowed")


def test_unknown_alg_is_refused_without_echoing_it() -> None:
    token = mint_raw({"alg": "X" * 200 + "\n<script>"}, claims(), b"sig")
    error = refused_token(token, verify_key("RS256"), match="is not allowed")
    assert "<script>" not in error.reason and len(error.reason) < 60


def test_signature_of_another_key_with_the_same_kid_is_refused() -> None:
    for kind, alg in (("RS256", "RS256"), ("ES256", "ES256"), ("EdDSA", "EdDSA")):
        token = mint(other(kind), claims(), alg=alg, kid="k1")
        refused_token(token, verify_key(kind), match="signature does not verify")


def test_tampered_payload_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256")
    header, _, signature = token.split(".")
    payload = b64url(orjson.dumps(claims(sub="root")))
    tampered = f"{header}.{payload}.{signature}"
    refused_token(tampered, verify_key("ES256"), match="signature does not verify")


def test_ecdsa_signature_of_the_wrong_length_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256")
    refused_token(token + "AAAA", verify_key("ES256"), match="signature does not verify")


# --- claims ------------------------------------------------------------------------------------


def test_expired_beyond_leeway_is_refused() -> None:
    token = mint(private("EdDSA"), claims(exp=NOW - 31), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="the token has expired")


def test_expired_within_leeway_is_accepted() -> None:
    token = mint(private("EdDSA"), claims(exp=NOW - 29), alg="EdDSA")
    validate(token, verify_key("EdDSA"))
    refused_token(token, verify_key("EdDSA"), match="expired", leeway=0)


def test_nbf_in_the_future_is_refused() -> None:
    token = mint(private("EdDSA"), claims(nbf=NOW + 120), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="nbf")
    validate(mint(private("EdDSA"), claims(nbf=NOW + 20), alg="EdDSA"), verify_key("EdDSA"))


def test_iat_in_the_future_is_refused() -> None:
    token = mint(private("EdDSA"), claims(iat=NOW + 120), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="iat is in the future")


def test_missing_exp_is_refused() -> None:
    token = mint(private("EdDSA"), claims(exp=None), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="exp is missing")


@pytest.mark.parametrize("exp", [str(int(NOW + 600)), True, [NOW + 600], {"at": NOW + 600}])
def test_exp_that_is_not_a_number_is_refused(exp: Any) -> None:
    token = mint(private("EdDSA"), claims(exp=exp), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="exp is not a number")


def test_nbf_and_iat_must_be_numbers() -> None:
    for name in ("nbf", "iat"):
        token = mint(private("EdDSA"), claims(**{name: False}), alg="EdDSA")
        refused_token(token, verify_key("EdDSA"), match=f"{name} is not a number")


def test_wrong_issuer_is_refused_without_echoing_it() -> None:
    token = mint(private("EdDSA"), claims(iss="https://evil.example/SECRETVALUE"), alg="EdDSA")
    error = refused_token(token, verify_key("EdDSA"), match="iss is not the expected issuer")
    assert "SECRETVALUE" not in error.reason and "evil" not in error.reason


def test_issuer_must_match_exactly() -> None:
    token = mint(private("EdDSA"), claims(iss=ISSUER + "/"), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="iss is not the expected issuer")
    token = mint(private("EdDSA"), claims(iss=None), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="iss is missing")


def test_missing_aud_is_refused() -> None:
    token = mint(private("EdDSA"), claims(aud=None), alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="aud is missing")
    validate(token, verify_key("EdDSA"), audience=None)


def test_wrong_aud_is_refused() -> None:
    token = mint(private("EdDSA"), claims(aud="https://other.example/SECRETAUD"), alg="EdDSA")
    error = refused_token(token, verify_key("EdDSA"), match="aud does not contain")
    assert "SECRETAUD" not in error.reason
    token = mint(private("EdDSA"), claims(aud=["https://a.example", "https://b.example"]),
                 alg="EdDSA")
    refused_token(token, verify_key("EdDSA"), match="aud does not contain")


def test_aud_array_containing_the_audience_is_accepted() -> None:
    token = mint(private("EdDSA"), claims(aud=["https://a.example", AUDIENCE]), alg="EdDSA")
    validate(token, verify_key("EdDSA"))


def test_aud_of_the_wrong_shape_is_refused() -> None:
    for aud in ([AUDIENCE, 7], 7, {"aud": AUDIENCE}):
        token = mint(private("EdDSA"), claims(aud=aud), alg="EdDSA")
        refused_token(token, verify_key("EdDSA"), match="aud is not a string or an array")


@pytest.mark.parametrize("typ", ["at+jwt", "JWT", "application/at+jwt", "AT+JWT", None])
def test_access_token_typs_are_accepted(typ: str | None) -> None:
    validate(mint(private("EdDSA"), claims(), alg="EdDSA", typ=typ), verify_key("EdDSA"))


@pytest.mark.parametrize("typ", ["dpop+jwt", "application/dpop+jwt", "logout+jwt", ""])
def test_other_typs_are_refused(typ: str) -> None:
    token = mint(private("EdDSA"), claims(), alg="EdDSA", typ=typ)
    refused_token(token, verify_key("EdDSA"), match="typ")


def test_typs_can_be_narrowed() -> None:
    token = mint(private("EdDSA"), claims(), alg="EdDSA", typ="JWT")
    refused_token(token, verify_key("EdDSA"), match="typ", typs=frozenset({"at+jwt"}))


# --- malformed tokens --------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", [
    "", "garbage", "a.b", "a.b.c.d", "....", ".a.b", "a..b", "eyJhbGciOiJSUzI1NiJ9..sig",
    "Bearer abc.def.ghi", "é.é.é", "abc.def.ghi\n", " abc.def.ghi", "abc.def.ghi=",
    "YWJj.YWJj.YWJj", "bnVsbA.bnVsbA.", "W10.e30.", "e30.W10.", "e30.e30.",
    "eyJhbGciOiJFUzI1NiJ9.W10.", "eyJhbGciOiJFUzI1NiJ9.YWJj.", "eyJhbGciOiJFUzI1NiJ9.e30",
])
def test_garbage_is_refused(garbage: str) -> None:
    with pytest.raises(TokenError) as caught:
        parse_jws(garbage)
    assert caught.value.error == "invalid_token"
    if len(garbage) >= 8:
        assert garbage not in caught.value.reason


def test_huge_token_is_refused_before_decoding() -> None:
    token = mint(private("ES256"), claims(blob="x" * 100_000), alg="ES256")
    assert len(token) > 100_000
    refused(lambda: parse_jws(token), token, match=f"larger than {MAX_TOKEN_BYTES} bytes")
    # Not even looked at: a 100 KB string of junk gets the same answer.
    refused(lambda: parse_jws("!" * 100_000), "", match="larger than")


def test_five_part_jwe_is_refused() -> None:
    jwe = ".".join([b64url(b'{"alg":"RSA-OAEP","enc":"A256GCM"}'), "a" * 43, "b" * 16,
                    "c" * 40, "d" * 22])
    refused(lambda: parse_jws(jwe), jwe, match="JWE")


def test_crit_header_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256",
                 header_extra={"crit": ["exp"], "exp": NOW + 60})
    refused(lambda: parse_jws(token), token, match="crit")


def test_unencoded_payload_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256", header_extra={"b64": False})
    refused(lambda: parse_jws(token), token, match="b64")


def test_missing_or_odd_alg_is_refused() -> None:
    token = mint_raw({"typ": "JWT"}, claims(), b"sig")
    refused(lambda: parse_jws(token), token, match="has no alg")
    token = mint_raw({"alg": ["RS256"]}, claims(), b"sig")
    refused(lambda: parse_jws(token), token, match="alg is not a string")
    token = mint_raw({"alg": "RS256", "kid": 7}, claims(), b"sig")
    refused(lambda: parse_jws(token), token, match="kid is not a string")


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("bad", ["+", "/", "=", "%", " ", "\x00"])
def test_characters_outside_base64url_are_refused(position: int, bad: str) -> None:
    parts = mint(private("ES256"), claims(), alg="ES256").split(".")
    parts[position] = parts[position][:5] + bad + parts[position][5:]
    token = ".".join(parts)
    refused(lambda: parse_jws(token), token, match="base64url")


def test_padding_is_refused() -> None:
    token = mint(private("ES256"), claims(), alg="ES256")  # an 86-character signature
    assert len(token.rsplit(".", 1)[1]) % 4 == 2
    refused(lambda: parse_jws(token + "=="), token, match="base64url")
    header = b64url(b'{"alg":"ES256"}')
    refused(lambda: parse_jws(f"{header}=.e30.AAAA"), header, match="base64url")


def test_non_canonical_base64url_is_refused() -> None:
    """Trailing bits that decode to the same bytes would give one token two spellings."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

    def bump(part: str) -> str:
        return part[:-1] + alphabet[alphabet.index(part[-1]) + 1]

    header = b64url(b'{"alg":"ES256"}  ')  # 17 bytes: 23 characters, 2 spare bits
    assert len(header) % 4 == 3
    parts = mint(private("ES256"), claims(), alg="ES256").split(".")
    assert len(parts[2]) % 4 == 2  # 64 bytes: 86 characters, 4 spare bits
    for position, part in ((0, bump(header)), (2, bump(parts[2]))):
        changed = list(parts)
        changed[position] = part
        token = ".".join(changed)
        refused(lambda t=token: parse_jws(t), token, match="not valid base64url")
    truncated = ".".join([parts[0], parts[1], parts[2][:-1]])  # 85: length 4k+1 is impossible
    refused(lambda: parse_jws(truncated), truncated, match="signature is not valid base64url")


# --- JWKS --------------------------------------------------------------------------------------


def test_rfc7638_thumbprint() -> None:
    n = ("0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_B"
         "JECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_F"
         "DW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4"
         "vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")
    (key,) = load_jwks({"keys": [{"kty": "RSA", "n": n, "e": "AQAB", "alg": "RS256",
                                  "kid": "2011-04-29"}]})
    assert key.thumbprint == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    assert (key.kid, key.kty, key.alg, key.crv) == ("2011-04-29", "RSA", "RS256", None)
    assert isinstance(key.key, rsa.RSAPublicKey)


def test_jwks_and_in_process_keys_have_the_same_thumbprint() -> None:
    for kind in ("RS256", "ES256", "ES384", "ES512", "EdDSA"):
        public = private(kind).public_key()
        (loaded,) = load_jwks({"keys": [jwk_of(public, "a")]})
        assert loaded.thumbprint == key_from_public(public, kid="b").thumbprint
        assert loaded.thumbprint != key_from_public(other(kind).public_key()).thumbprint


def test_load_jwks_keeps_signing_keys_and_skips_the_rest() -> None:
    rsa_pub, ec_pub, ed_pub = (private(k).public_key() for k in ("RS256", "ES256", "EdDSA"))
    small = rsa.generate_private_key(65537, 1024).public_key()
    p192 = {"kty": "EC", "crv": "P-192", "x": "AAAA", "y": "AAAA", "kid": "p192"}
    off_curve = jwk_of(ec_pub, "off-curve")
    off_curve["y"] = b64url(bytes(31) + b"\x01")
    keys = load_jwks({"keys": [
        {"kty": "oct", "k": b64url(b"secret" * 6), "kid": "oct"},
        jwk_of(rsa_pub, "enc", use="enc"),
        jwk_of(rsa_pub, "wrap", key_ops=["wrapKey"]),
        jwk_of(small, "small"),
        p192,
        {"kty": "OKP", "crv": "Ed448", "x": b64url(bytes(57)), "kid": "ed448"},
        {"kty": "OKP", "crv": "X25519", "kid": "x25519",
         "x": b64url(x25519.X25519PrivateKey.generate().public_key().public_bytes_raw())},
        off_curve,
        {"kty": "RSA", "n": "not base64!", "e": "AQAB", "kid": "bad-base64"},
        jwk_of(rsa_pub, "hs", alg="HS256"),
        jwk_of(ec_pub, "mismatch", alg="RS256"),
        jwk_of(rsa_pub, 42),
        {"kty": ["RSA"]},
        {"kty": "EC", "crv": ["P-256"]},
        "not an object",
        None,
        jwk_of(rsa_pub, "rsa", use="sig", key_ops=["verify"], d="private part is ignored"),
        jwk_of(ec_pub, "ec", alg="ES256"),
        jwk_of(ed_pub, None),
    ]})
    assert [(k.kid, k.kty, k.crv, k.alg) for k in keys] == [
        ("rsa", "RSA", None, None), ("ec", "EC", "P-256", "ES256"), (None, "OKP", "Ed25519", None)]
    assert isinstance(keys[1].key, ec.EllipticCurvePublicKey)
    assert isinstance(keys[2].key, ed25519.Ed25519PublicKey)


@pytest.mark.parametrize("document", [None, [], "keys", 7, {}, {"keys": {}}, {"keys": "a"}])
def test_unusable_jwks_document_raises(document: object) -> None:
    with pytest.raises(JwksError):
        load_jwks(document)


def test_empty_key_list_is_not_an_error() -> None:
    assert load_jwks({"keys": []}) == []


def test_key_from_public_refuses_what_it_cannot_verify_with() -> None:
    with pytest.raises(TypeError):
        key_from_public(private("ES256"))
    with pytest.raises(TypeError):
        key_from_public(x25519.X25519PrivateKey.generate().public_key())
    with pytest.raises(ValueError, match="2048"):
        key_from_public(rsa.generate_private_key(65537, 1024).public_key())
    with pytest.raises(ValueError, match="not supported"):
        key_from_public(ec.generate_private_key(ec.SECP256K1()).public_key())
    with pytest.raises(ValueError, match="does not fit"):
        key_from_public(private("ES256").public_key(), alg="ES384")


def test_allowed_algs() -> None:
    assert frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                      "ES512", "EdDSA", "Ed25519"}) == ALLOWED_ALGS


# --- verified-token cache ----------------------------------------------------------------------


def test_cache_hit_and_miss() -> None:
    cache_: VerifiedTokenCache[str] = VerifiedTokenCache()
    assert cache_.get("a.b.c", NOW) is None
    cache_.put("a.b.c", "alice", expires=NOW + 60, key_id="k", now=NOW)
    assert cache_.get("a.b.c", NOW + 1) == "alice"
    assert cache_.get("a.b.d", NOW + 1) is None
    assert len(cache_) == 1


def test_cache_evicts_the_least_recently_used() -> None:
    cache_: VerifiedTokenCache[int] = VerifiedTokenCache(max_entries=2)
    cache_.put("one", 1, expires=NOW + 60, key_id="k", now=NOW)
    cache_.put("two", 2, expires=NOW + 60, key_id="k", now=NOW)
    assert cache_.get("one", NOW) == 1  # "two" is now the least recently used
    cache_.put("three", 3, expires=NOW + 60, key_id="k", now=NOW)
    assert len(cache_) == 2
    assert (cache_.get("one", NOW), cache_.get("two", NOW), cache_.get("three", NOW)) == (
        1, None, 3)
    assert cache_.drop_key("k") == 2  # the key index forgot the evicted entry


def test_cache_entries_expire_at_exp_and_at_most_after_max_ttl() -> None:
    cache_: VerifiedTokenCache[int] = VerifiedTokenCache(max_ttl=100)
    cache_.put("short", 1, expires=NOW + 10, key_id="k", now=NOW)
    cache_.put("long", 2, expires=NOW + 10_000, key_id="k", now=NOW)
    cache_.put("already", 3, expires=NOW, key_id="k", now=NOW)
    assert len(cache_) == 2
    assert cache_.get("short", NOW + 9.9) == 1
    assert cache_.get("short", NOW + 10) is None
    assert cache_.get("long", NOW + 99) == 2
    assert cache_.get("long", NOW + 100) is None
    assert len(cache_) == 0
    assert cache_.drop_key("k") == 0


def test_cache_put_replaces() -> None:
    cache_: VerifiedTokenCache[int] = VerifiedTokenCache()
    cache_.put("t", 1, expires=NOW + 60, key_id="old", now=NOW)
    cache_.put("t", 2, expires=NOW + 60, key_id="new", now=NOW)
    assert cache_.drop_key("old") == 0
    assert cache_.get("t", NOW) == 2
    assert cache_.drop_key("new") == 1
    assert cache_.get("t", NOW) is None


def test_cache_drop_key_removes_what_the_key_verified() -> None:
    cache_: VerifiedTokenCache[str] = VerifiedTokenCache()
    for i in range(5):
        cache_.put(f"a{i}", "a", expires=NOW + 60, key_id="key-a", now=NOW)
    cache_.put("b", "b", expires=NOW + 60, key_id="key-b", now=NOW)
    assert cache_.drop_key("key-a") == 5
    assert cache_.drop_key("key-a") == 0
    assert cache_.drop_key("unknown") == 0
    assert len(cache_) == 1 and cache_.get("b", NOW) == "b"


def test_cache_never_keeps_the_token() -> None:
    token = mint(private("EdDSA"), claims(), alg="EdDSA")
    cache_: VerifiedTokenCache[str] = VerifiedTokenCache()
    cache_.put(token, "alice", expires=NOW + 60, key_id="k", now=NOW)
    assert cache_.get(token, NOW) == "alice"
    state = repr(vars(cache_))
    for part in token.split("."):
        assert part not in state
    for digest, entry in cache_._entries.items():
        assert digest == hashlib.sha256(token.encode()).digest()
        assert token not in repr(entry)
