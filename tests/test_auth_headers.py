"""Authorization: Bearer parsing and WWW-Authenticate formatting/parsing
(vmcp_trio.auth.headers)."""

from __future__ import annotations

import pytest

from vmcp_trio.auth.headers import HeaderError, bearer_token, challenge, parse_challenges

TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


# --- Authorization: Bearer ---------------------------------------------------------------------


def test_absent_header_is_none() -> None:
    assert bearer_token(None) is None


@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer   {TOKEN}",
    f"  Bearer {TOKEN} ",
])
def test_bearer_token_is_extracted(header: str) -> None:
    assert bearer_token(header) == TOKEN


@pytest.mark.parametrize("token", ["abc", "a-b.c_d~e+f/g", "abc==", "A", "mF_9.B5f-4.1JqM"])
def test_token68_characters_are_accepted(token: str) -> None:
    assert bearer_token(f"Bearer {token}") == token


def refused(header: str, match: str) -> HeaderError:
    with pytest.raises(HeaderError) as caught:
        bearer_token(header)
    assert match in caught.value.reason
    assert "Authorization" in caught.value.reason
    assert TOKEN not in caught.value.reason
    return caught.value


@pytest.mark.parametrize("header", [
    f"Basic {TOKEN}", f"Token {TOKEN}", f"Bearer{TOKEN}", TOKEN, f"DPoP {TOKEN}", "",
    f"Bearer: {TOKEN}",
])
def test_other_schemes_are_refused_without_echoing(header: str) -> None:
    refused(header, "does not use the Bearer scheme")


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer    "])
def test_empty_token_is_refused(header: str) -> None:
    refused(header, "empty Bearer token")


@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN} extra", f"Bearer {TOKEN},x", f'Bearer "{TOKEN}"', "Bearer =abc",
    "Bearer abc=def", "Bearer a b", "Bearer ab\tc", f"Bearer\t{TOKEN}", "Bearer é",
    "Bearer abc\x00",
])
def test_malformed_token_is_refused(header: str) -> None:
    refused(header, "malformed")


def test_huge_header_is_refused() -> None:
    refused("Bearer " + "a" * (16 * 1024), "longer than 16 KiB")
    assert bearer_token("Bearer " + "a" * (16 * 1024 - 7)) is not None


# --- WWW-Authenticate: formatting -----------------------------------------------------------------


def test_challenge_formats_quoted_params() -> None:
    assert challenge("Bearer", [
        ("resource_metadata", "https://mcp.example/.well-known/oauth-protected-resource"),
        ("scope", "a b"), ("error", "invalid_token"),
    ]) == ('Bearer resource_metadata="https://mcp.example/.well-known/oauth-protected-resource"'
           ', scope="a b", error="invalid_token"')


def test_challenge_without_params() -> None:
    assert challenge("Bearer", []) == "Bearer"


def test_challenge_escapes_backslash_and_quote() -> None:
    assert challenge("Bearer", [("error_description", 'say "hi" \\ bye')]) == (
        'Bearer error_description="say \\"hi\\" \\\\ bye"')


@pytest.mark.parametrize("value", ["line\nbreak", "cr\r", "nul\x00", "tab\t", "del\x7f"])
def test_challenge_refuses_control_characters(value: str) -> None:
    with pytest.raises(ValueError, match="control character"):
        challenge("Bearer", [("error_description", value)])


@pytest.mark.parametrize(("scheme", "params"), [
    ("Bear er", []), ("", []), ("Bearer", [("sc ope", "x")]), ("Bearer", [("a", "1"), ("A", "2")]),
    ("Basic", [("", "not token68!")]), ("Basic", [("", "abc"), ("realm", "x")]),
])
def test_challenge_refuses_bad_names(scheme: str, params: list[tuple[str, str]]) -> None:
    with pytest.raises(ValueError):
        challenge(scheme, params)


def test_challenge_token68() -> None:
    token68 = "YWxhZGRpbjpvcGVuc2VzYW1l"
    assert challenge("Basic", [("", token68)]) == f"Basic {token68}"
    assert parse_challenges(challenge("Basic", [("", token68)])) == [("basic", {"": token68})]


# --- WWW-Authenticate: parsing -----------------------------------------------------------------


@pytest.mark.parametrize("params", [
    [],
    [("realm", "example")],
    [("resource_metadata", "https://mcp.example/.well-known/oauth-protected-resource"),
     ("scope", "files:read files:write"), ("error", "insufficient_scope")],
    [("error_description", 'quotes " and \\ backslashes, commas, = signs')],
    [("empty", "")],
    [("unicode", "caf\u00e9 \u2603")],
])
def test_parse_round_trips_challenge(params: list[tuple[str, str]]) -> None:
    assert parse_challenges(challenge("Bearer", params)) == [
        ("bearer", dict(params))]


def test_parse_lowercases_scheme_and_names_but_not_values() -> None:
    assert parse_challenges('BEARER Realm="Mixed Case", Scope=Tools') == [
        ("bearer", {"realm": "Mixed Case", "scope": "Tools"})]


def test_parse_several_challenges() -> None:
    header = ('Newauth realm="apps", type=1, title="Login to \\"apps\\"", Basic realm="simple", '
              "Bearer, DPoP algs=\"ES256 PS256\"")
    assert parse_challenges(header) == [
        ("newauth", {"realm": "apps", "type": "1", "title": 'Login to "apps"'}),
        ("basic", {"realm": "simple"}),
        ("bearer", {}),
        ("dpop", {"algs": "ES256 PS256"}),
    ]


def test_parse_token68() -> None:
    # At the end of a challenge, "name=" is a token68, not a parameter without a value.
    assert parse_challenges("Bearer realm=") == [("bearer", {"": "realm="})]
    assert parse_challenges("Negotiate YII=, Basic realm=x, Other abc/+.-_~") == [
        ("negotiate", {"": "YII="}), ("basic", {"realm": "x"}), ("other", {"": "abc/+.-_~"})]
    assert parse_challenges("Basic  abc  ") == [("basic", {"": "abc"})]


def test_parse_tolerates_whitespace_and_empty_list_elements() -> None:
    assert parse_challenges(' , Bearer realm = "a" ,, scope="b" , ,Basic ,') == [
        ("bearer", {"realm": "a", "scope": "b"}), ("basic", {})]
    assert parse_challenges("") == []
    assert parse_challenges("  ") == []


@pytest.mark.parametrize("header", [
    'Bearer realm="unterminated', 'Bearer realm="a" scope="b"', "Bearer a=1, realm=", "Bearer =x",
    'Bearer realm="a", realm="b"', 'Bearer realm="a", Realm="b"', "Basic abc=, realm=x",
    '"Bearer"', "Bearer realm=a b", 'Bearer realm="nl\n"', "Bearer realm=\"a\"x", "Bear=er",
    "Bearer a=b=c", "Bearer,=", "Bearer realm=\"\\\x00\"",
])
def test_parse_refuses_malformed(header: str) -> None:
    with pytest.raises(HeaderError) as caught:
        parse_challenges(header)
    assert "WWW-Authenticate" in caught.value.reason


def test_parse_refuses_huge_input() -> None:
    with pytest.raises(HeaderError, match="16 KiB"):
        parse_challenges("Bearer realm=" + "a" * 16 * 1024)
