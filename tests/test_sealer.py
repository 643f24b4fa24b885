"""Sealed values (what the authorization server keeps in Redis, the task ids clients hold):
they open only under a configured secret, in their own context, and only as ``seal`` wrote
them."""

from __future__ import annotations

import pytest

from vmcp_trio.auth.sealer import Sealer, SealingError

INFO = b"vmcp-trio test sealing"


def test_a_sealed_value_opens_in_its_context_and_after_a_rotation() -> None:
    old = Sealer([b"first secret of thirty-two bytes!"], info=INFO)
    sealed = old.seal(b"upstream token", context="upstream:s1:github")
    assert old.open(sealed, context="upstream:s1:github") == b"upstream token"
    with pytest.raises(SealingError):
        old.open(sealed, context="upstream:s2:github")  # moved to another record
    rotated = Sealer([b"second secret of thirty-two bytes", b"first secret of thirty-two bytes!"],
                     info=INFO)
    assert rotated.open(sealed, context="upstream:s1:github") == b"upstream token"
    assert rotated.seal(b"x", context="c").split(".")[0] != sealed.split(".")[0]
    with pytest.raises(SealingError, match="no longer configured"):
        Sealer([b"second secret of thirty-two bytes"], info=INFO).open(sealed,
                                                                       context="upstream:s1:github")


def test_only_the_spelling_seal_wrote_opens() -> None:
    """base64url decoding forgives stray characters, missing padding and other trailing bits:
    a sealed task id would have many spellings that all open. Each is refused."""
    sealer = Sealer([b"a secret of at least thirty-two bytes"], info=INFO)
    sealed = sealer.seal(b"task 7", context="owner", deterministic=True)
    key_id, _, body = sealed.partition(".")
    assert body.endswith("=")  # 12 + 6 + 16 bytes: one padding character
    last = body.rstrip("=")[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other_bits = alphabet[alphabet.index(last) ^ 1]  # same 6 bits but the unused low one
    for spelling in (body.rstrip("="),  # padding dropped
                     body[:4] + "!" + body[4:],  # a stray character, skipped by the decoder
                     body.rstrip("=")[:-1] + other_bits + "="):  # other unused trailing bits
        with pytest.raises(SealingError, match="altered or not sealed"):
            sealer.open(f"{key_id}.{spelling}", context="owner")
    assert sealer.open(sealed, context="owner") == b"task 7"
    assert sealer.seal(b"task 7", context="owner", deterministic=True) == sealed
