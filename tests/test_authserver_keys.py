"""The authorization server's signing keys (vmcp_trio.authserver.keys) and its opaque,
HMAC-protected codes and refresh tokens (vmcp_trio.authserver.opaque)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from functools import cache
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x25519
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from vmcp_trio.auth.jwt import TokenError, check_claims, load_jwks, parse_jws, verify_signature
from vmcp_trio.auth.signing import SigningKeyError, load_signing_key
from vmcp_trio.authserver.keygen import generate_signing_key
from vmcp_trio.authserver.keys import SigningKeys
from vmcp_trio.authserver.opaque import OpaqueTokens

from .jwt_helpers import jwk_of

ISSUER = "https://as.example"
NOW = 1_750_000_000

PKCS8 = serialization.PrivateFormat.PKCS8
TRADITIONAL = serialization.PrivateFormat.TraditionalOpenSSL  # PKCS#1 for RSA, SEC1 for EC


@cache
def private(kind: str) -> Any:
    """One key per kind for the whole module (RSA generation is slow)."""
    if kind.startswith("rsa"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(kind[3:]))
    curves = {"p256": ec.SECP256R1(), "p384": ec.SECP384R1(), "p521": ec.SECP521R1(),
              "k256": ec.SECP256K1()}
    if kind in curves:
        return ec.generate_private_key(curves[kind])
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(kind)


def pem_of(key: PrivateKeyTypes, fmt: serialization.PrivateFormat = PKCS8,
           encryption: serialization.KeySerializationEncryption | None = None) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, fmt,
                             encryption or serialization.NoEncryption())


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638, computed independently: the required members, sorted, no whitespace."""
    required = {"RSA": ("e", "kty", "n"), "EC": ("crv", "kty", "x", "y"),
                "OKP": ("crv", "kty", "x")}[jwk["kty"]]
    text = json.dumps({name: jwk[name] for name in required}, separators=(",", ":"),
                      sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


# kind, PEM format, the PEM label it must produce, the alg the key must get
FORMS = [
    ("rsa2048", TRADITIONAL, b"BEGIN RSA PRIVATE KEY", "RS256"),
    ("rsa2048", PKCS8, b"BEGIN PRIVATE KEY", "RS256"),
    ("p256", TRADITIONAL, b"BEGIN EC PRIVATE KEY", "ES256"),
    ("p384", TRADITIONAL, b"BEGIN EC PRIVATE KEY", "ES384"),
    ("p521", TRADITIONAL, b"BEGIN EC PRIVATE KEY", "ES512"),
    ("p256", PKCS8, b"BEGIN PRIVATE KEY", "ES256"),
    ("p384", PKCS8, b"BEGIN PRIVATE KEY", "ES384"),
    ("p521", PKCS8, b"BEGIN PRIVATE KEY", "ES512"),
    ("ed25519", PKCS8, b"BEGIN PRIVATE KEY", "EdDSA"),
]
FORM_IDS = [f"{kind}-{label.decode()[6:].replace(' ', '_')}" for kind, _, label, _ in FORMS]


# --- loading -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "fmt", "label", "alg"), FORMS, ids=FORM_IDS)
def test_each_pem_form_loads_with_the_alg_of_its_key(
        kind: str, fmt: serialization.PrivateFormat, label: bytes, alg: str) -> None:
    pem = pem_of(private(kind), fmt)
    assert label + b"-----" in pem
    key = load_signing_key(pem)
    assert key.alg == alg
    assert key.kid == thumbprint(jwk_of(private(kind).public_key(), None))
    assert key.verify_key.kid == key.kid
    assert key.verify_key.alg == alg


@pytest.mark.parametrize(("key_type", "alg"), [("ec", "ES256"), ("rsa", "RS256"),
                                               ("ed25519", "EdDSA")])
def test_keys_from_keygen_load(key_type: Any, alg: str) -> None:
    key = load_signing_key(generate_signing_key(key_type, rsa_bits=2048))
    assert key.alg == alg
    assert len(key.kid) == 43


def test_ec_parameters_block_before_the_key_is_accepted() -> None:
    # What `openssl ecparam -name prime256v1 -genkey` writes.
    params = b"-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
    key = load_signing_key(params + pem_of(private("p256"), TRADITIONAL))
    assert key.alg == "ES256"


def test_the_same_key_gets_the_same_kid_in_every_form() -> None:
    kids = {load_signing_key(pem_of(private("p256"), fmt)).kid for fmt in (PKCS8, TRADITIONAL)}
    assert len(kids) == 1


def test_rsa_1024_is_refused_with_the_index() -> None:
    pem = pem_of(private("rsa1024"), TRADITIONAL)
    with pytest.raises(SigningKeyError, match=r"signing key 3: .*1024 bits.*2048") as info:
        load_signing_key(pem, 3)
    assert_no_key_material(str(info.value), pem)


@pytest.mark.parametrize("fmt", [PKCS8, TRADITIONAL], ids=["pkcs8", "traditional"])
def test_encrypted_pem_is_refused(fmt: serialization.PrivateFormat) -> None:
    pem = pem_of(private("p256"), fmt, serialization.BestAvailableEncryption(b"passphrase"))
    assert b"ENCRYPTED" in pem
    with pytest.raises(SigningKeyError, match=r"signing key 0: .*encrypted") as info:
        load_signing_key(pem)
    assert_no_key_material(str(info.value), pem)


def assert_no_key_material(message: str, pem: bytes) -> None:
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    for start in range(0, len(body) - 16, 8):
        assert body[start:start + 16].decode() not in message


@pytest.mark.parametrize("pem", [
    b"garbage",
    b"",
    b"-----BEGIN PRIVATE KEY-----\nTUlJRXZnSUJBREFOQmdrcWhraUc5dzBCQVFFRkFBU0NCS2d3Z2dTa0FnRUFBb0lC"
    b"\n-----END PRIVATE KEY-----\n",
    b"-----BEGIN RSA PRIVATE KEY-----\nnot base64 at all!!\n-----END RSA PRIVATE KEY-----\n",
], ids=["garbage", "empty", "bad-der", "bad-base64"])
def test_garbage_is_refused_with_the_index_and_without_the_pem(pem: bytes) -> None:
    with pytest.raises(SigningKeyError, match=r"^signing key 7: ") as info:
        load_signing_key(pem, 7)
    if pem:
        assert_no_key_material(str(info.value), pem)
        for line in pem.splitlines():
            if not line.startswith(b"-----"):
                assert line.decode() not in str(info.value)


def test_a_public_key_is_refused() -> None:
    pem = private("p256").public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(SigningKeyError, match="no PEM private key"):
        load_signing_key(pem)


def test_two_keys_in_one_pem_are_refused() -> None:
    pem = pem_of(private("p256")) + pem_of(private("ed25519"))
    with pytest.raises(SigningKeyError, match="2 private keys"):
        load_signing_key(pem)


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: x25519.X25519PrivateKey.generate(), "not supported"),
    (lambda: ed448.Ed448PrivateKey.generate(), "not supported"),
    (lambda: private("k256"), "secp256k1 is not supported"),
    (lambda: dsa.generate_private_key(2048), "not supported"),
], ids=["x25519", "ed448", "secp256k1", "dsa"])
def test_other_key_types_are_refused(make: Any, reason: str) -> None:
    with pytest.raises(SigningKeyError, match=reason):
        load_signing_key(pem_of(make()), 1)


def test_openssh_keys_are_refused_by_label() -> None:
    pem = private("ed25519").private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption())
    with pytest.raises(SigningKeyError, match="'OPENSSH PRIVATE KEY' is not supported"):
        load_signing_key(pem)


def test_key_set_errors_name_the_entry() -> None:
    with pytest.raises(SigningKeyError, match=r"^signing key 1: "):
        SigningKeys([pem_of(private("p256")), b"garbage"])


def test_the_same_key_twice_is_refused() -> None:
    with pytest.raises(SigningKeyError, match="signing key 1: the same key as signing key 0"):
        SigningKeys([pem_of(private("p256")), pem_of(private("p256"), TRADITIONAL)])


def test_a_single_pem_instead_of_a_list_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="sequence of PEMs"):
        SigningKeys(pem_of(private("p256")))


def test_the_private_key_is_not_in_the_repr() -> None:
    key = load_signing_key(pem_of(private("rsa2048")))
    assert "private" not in repr(key).lower()
    assert key.kid in repr(key)


# --- signing and verification ------------------------------------------------------------------

CLAIMS = {"iss": ISSUER, "sub": "user-1", "aud": ["https://mcp.example/mcp"],
          "exp": NOW + 3600, "iat": NOW, "scp": ["mcp:tools"], "name": "Zoë"}


@pytest.mark.parametrize(("kind", "fmt", "label", "alg"), FORMS, ids=FORM_IDS)
async def test_signed_tokens_verify_with_key_for(
        kind: str, fmt: serialization.PrivateFormat, label: bytes, alg: str) -> None:
    keys = SigningKeys([pem_of(private(kind), fmt)])
    token = parse_jws(keys.sign(CLAIMS))
    assert token.header == {"alg": alg, "kid": keys.signing.kid, "typ": "at+jwt"}
    assert token.claims == CLAIMS
    key = await keys.key_for(token.kid)
    assert key is not None
    verify_signature(token, key)
    check_claims(token, issuer=ISSUER, audience="https://mcp.example/mcp", now=NOW)
    if alg.startswith("ES"):  # raw r || s, not DER
        assert len(token.signature) == {"ES256": 64, "ES384": 96, "ES512": 132}[alg]


async def test_a_tampered_token_does_not_verify() -> None:
    keys = SigningKeys([pem_of(private("p256"))])
    header, _payload, signature = keys.sign(CLAIMS).split(".")
    other = keys.sign({**CLAIMS, "sub": "admin"}).split(".")[1]
    token = parse_jws(f"{header}.{other}.{signature}")
    key = await keys.key_for(token.kid)
    assert key is not None
    with pytest.raises(TokenError, match="signature does not verify"):
        verify_signature(token, key)


async def test_the_typ_header_can_be_chosen() -> None:
    keys = SigningKeys([pem_of(private("ed25519"))])
    assert parse_jws(keys.sign(CLAIMS, typ="JWT")).typ == "JWT"


async def test_key_for_without_kid_is_the_signing_key_and_unknown_kids_are_none() -> None:
    keys = SigningKeys([pem_of(private("p384")), pem_of(private("ed25519"))])
    signing = await keys.key_for(None)
    assert signing is not None and signing.kid == keys.signing.kid and signing.alg == "ES384"
    assert await keys.key_for("no-such-kid") is None
    assert await keys.key_for("") is None


async def test_rotation_keys_verify_tokens_they_signed() -> None:
    old = SigningKeys([pem_of(private("rsa2048"))])
    token = parse_jws(old.sign(CLAIMS))
    rotated = SigningKeys([pem_of(private("p256")), pem_of(private("rsa2048"))])
    assert rotated.signing.alg == "ES256"
    key = await rotated.key_for(token.kid)
    assert key is not None and key.alg == "RS256"
    verify_signature(token, key)
    # ... and the new signing key's tokens verify too.
    fresh = parse_jws(rotated.sign(CLAIMS))
    assert fresh.kid != token.kid
    fresh_key = await rotated.key_for(fresh.kid)
    assert fresh_key is not None
    verify_signature(fresh, fresh_key)


# --- JWKS --------------------------------------------------------------------------------------

PUBLIC_MEMBERS = {"RSA": {"kty", "n", "e", "kid", "alg", "use"},
                  "EC": {"kty", "crv", "x", "y", "kid", "alg", "use"},
                  "OKP": {"kty", "crv", "x", "kid", "alg", "use"}}


async def test_jwks_publishes_every_key_with_public_members_only() -> None:
    pems = [pem_of(private("p256")), pem_of(private("rsa2048"), TRADITIONAL),
            pem_of(private("ed25519")), pem_of(private("p521"), TRADITIONAL)]
    keys = SigningKeys(pems)
    document = keys.jwks()
    assert [jwk["alg"] for jwk in document["keys"]] == ["ES256", "RS256", "EdDSA", "ES512"]
    assert document["keys"][0]["kid"] == keys.signing.kid
    for jwk in document["keys"]:
        assert set(jwk) == PUBLIC_MEMBERS[jwk["kty"]]
        assert jwk["use"] == "sig"
        assert jwk["kid"] == thumbprint(jwk)
    # What a resource server loads from it verifies our tokens.
    loaded = load_jwks(document)
    assert len(loaded) == 4
    token = parse_jws(keys.sign(CLAIMS))
    verify_signature(token, next(k for k in loaded if k.kid == token.kid))


def test_jwks_is_a_fresh_document_each_time() -> None:
    keys = SigningKeys([pem_of(private("p256"))])
    keys.jwks()["keys"][0]["kid"] = "changed"
    keys.jwks()["keys"].clear()
    assert keys.jwks()["keys"][0]["kid"] == keys.signing.kid


async def test_without_keys_one_ephemeral_es256_key() -> None:
    keys = SigningKeys([])
    assert keys.ephemeral
    assert keys.signing.alg == "ES256"
    assert len(keys.jwks()["keys"]) == 1
    token = parse_jws(keys.sign(CLAIMS))
    key = await keys.key_for(token.kid)
    assert key is not None
    verify_signature(token, key)
    assert SigningKeys([]).signing.kid != keys.signing.kid
    assert not SigningKeys([pem_of(private("p256"))]).ephemeral


# --- opaque tokens -----------------------------------------------------------------------------

SECRET_A = b"a" * 32
SECRET_B = bytes(range(48))
TOKEN_SHAPE = re.compile(r"(code|rt)_([A-Za-z0-9_-]{43})\.([A-Za-z0-9_-]{43})")


def test_mint_and_check_round_trip() -> None:
    tokens = OpaqueTokens([SECRET_A])
    assert not tokens.ephemeral
    token, key = tokens.mint("code")
    match = TOKEN_SHAPE.fullmatch(token)
    assert match is not None and match.group(1) == "code"
    assert tokens.check("code", token) == key
    # The storage key is not the token nor any part of it.
    assert key not in token and match.group(2) != key
    assert tokens.mint("code")[0] != token


def test_storage_key_is_the_hash_of_prefix_and_id() -> None:
    token, key = OpaqueTokens([SECRET_A]).mint("rt")
    token_id = token[3:].split(".")[0]
    digest = hashlib.sha256(f"rt.{token_id}".encode()).digest()
    assert key == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_the_mac_is_hmac_sha256_of_prefix_and_id() -> None:
    token, _ = OpaqueTokens([SECRET_A]).mint("code")
    token_id, mac = token[5:].split(".")
    expected = hmac.digest(SECRET_A, f"code.{token_id}".encode(), "sha256")
    assert mac == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()


def test_a_token_of_another_prefix_is_refused() -> None:
    tokens = OpaqueTokens([SECRET_A])
    code, _ = tokens.mint("code")
    refresh, _ = tokens.mint("rt")
    assert tokens.check("rt", code) is None
    assert tokens.check("code", refresh) is None
    # Relabelled: the MAC covers the prefix.
    assert tokens.check("rt", "rt" + code[4:]) is None


def flip(char: str) -> str:
    return "B" if char == "A" else "A"


def test_one_flipped_character_in_id_or_mac_is_refused() -> None:
    tokens = OpaqueTokens([SECRET_A])
    token, _ = tokens.mint("code")
    start = len("code_")
    for position in range(start, len(token)):
        if token[position] == ".":
            continue
        forged = token[:position] + flip(token[position]) + token[position + 1:]
        assert tokens.check("code", forged) is None, position


def test_a_token_under_an_old_secret_is_accepted() -> None:
    token, key = OpaqueTokens([SECRET_B]).mint("rt")
    rotated = OpaqueTokens([SECRET_A, SECRET_B])
    assert rotated.check("rt", token) == key
    # New tokens come from the first secret: the old secret alone does not accept them.
    new, _ = rotated.mint("rt")
    assert OpaqueTokens([SECRET_A]).check("rt", new) is not None
    assert OpaqueTokens([SECRET_B]).check("rt", new) is None


def test_a_token_under_an_unknown_secret_is_refused() -> None:
    token, _ = OpaqueTokens([b"x" * 40]).mint("code")
    assert OpaqueTokens([SECRET_A, SECRET_B]).check("code", token) is None


def test_a_short_secret_is_refused_naming_its_index() -> None:
    secret = b"short-secret-value-1234567890"
    with pytest.raises(ValueError, match=r"HMAC secret 1 is shorter than 32 bytes") as info:
        OpaqueTokens([SECRET_A, secret])
    assert secret.decode() not in str(info.value)
    with pytest.raises(TypeError):
        OpaqueTokens(SECRET_A)


@pytest.mark.parametrize("bad", ["", "code", "code_", "code_.", "code_" + "A" * 43 + ".",
                                 "code_" + "A" * 43 + "." + "A" * 42,
                                 "code_" + "A" * 43 + "." + "A" * 44,
                                 "code_" + "A" * 43 + "!" + "A" * 43,
                                 "code_" + "é" * 43 + "." + "A" * 43])
def test_malformed_tokens_are_refused(bad: str) -> None:
    assert OpaqueTokens([SECRET_A]).check("code", bad) is None


def test_overlong_input_is_refused() -> None:
    tokens = OpaqueTokens([SECRET_A])
    token, _ = tokens.mint("code")
    assert tokens.check("code", token + "A" * (257 - len(token))) is None
    assert tokens.check("code", token + "." * 10_000_000) is None
    assert tokens.check("code", 12345) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "code1", "a_b", "rt.x", "é", "x" * 33])
def test_prefixes_are_letters_only(prefix: str) -> None:
    tokens = OpaqueTokens([SECRET_A])
    with pytest.raises(ValueError, match="prefix"):
        tokens.mint(prefix)
    with pytest.raises(ValueError, match="prefix"):
        tokens.check(prefix, "anything")


def test_without_secrets_one_ephemeral_secret() -> None:
    tokens = OpaqueTokens([])
    assert tokens.ephemeral
    token, key = tokens.mint("code")
    assert tokens.check("code", token) == key
    assert OpaqueTokens([]).check("code", token) is None
