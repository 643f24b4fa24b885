"""CEL matchers over a token's claims (awsSts roleMappings[].matcher, trusted issuers'
actorMatcher): only true matches; every other outcome is no match; a syntax error is said at
load."""

from __future__ import annotations

import pytest

from vmcp_trio.auth.claims_matcher import MAX_EXPRESSION, MatcherError, compile_matcher

CLAIMS = {"sub": "user123", "groups": ["admins", "ops"], "tenant": {"id": 7},
          "amr": ["pwd"], "email_verified": True}


@pytest.mark.parametrize(("expression", "expected"), [
    ('"admins" in claims["groups"]', True),
    ('claims["sub"] == "user123" && !("act" in claims)', True),
    ("claims.tenant.id == 7 && claims.email_verified", True),
    ('claims["groups"].exists(g, g.startsWith("op"))', True),
    ('"viewers" in claims["groups"]', False),
    ('claims["sub"]', False),  # a string, not a boolean
    ('claims["missing"] == "x"', False),  # an evaluation error
    ("claims.tenant.id / 0 == 1", False),
    ('claims["groups"] + 1 == 2', False),  # a type error
])
def test_only_true_matches(expression: str, expected: bool) -> None:
    assert compile_matcher(expression).matches(CLAIMS) is expected


def test_what_does_not_compile_is_said_at_load() -> None:
    with pytest.raises(MatcherError, match="is not a CEL expression"):
        compile_matcher('"admins" in claims["groups"')
    with pytest.raises(MatcherError, match=f"longer than {MAX_EXPRESSION}"):
        compile_matcher("true || " * 600 + "true")
