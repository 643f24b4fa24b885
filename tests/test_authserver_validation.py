"""OAuth request rules of the embedded authorization server (vmcp_trio.authserver.validation):
client registration, redirect URI matching, PKCE, scope and resource indicators."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from vmcp_trio.authserver.validation import (
    ClientMetadata,
    OAuthError,
    check_pkce_request,
    check_resource,
    parse_scope,
    redirect_uri_matches,
    validate_client_metadata,
    verify_pkce,
)


@contextmanager
def raises(error: str, match: str) -> Iterator[None]:
    """pytest.raises for an OAuthError with this code and a description matching ``match``."""
    with pytest.raises(OAuthError) as info:
        yield
    assert info.value.error == error, info.value
    assert re.search(match, info.value.description), info.value.description


# --- OAuthError --------------------------------------------------------------------------------


def test_oauth_error_status_follows_the_code() -> None:
    assert OAuthError("invalid_request", "x").status == 400
    assert OAuthError("invalid_client", "x").status == 401
    assert OAuthError("invalid_client", "x", status=400).status == 400
    error = OAuthError("invalid_grant", "code_verifier is required")
    assert (error.error, error.description) == ("invalid_grant", "code_verifier is required")
    with pytest.raises(ValueError, match="unknown OAuth error code"):
        OAuthError("server_on_fire", "x")


# --- registration ------------------------------------------------------------------------------

MINIMAL = {"redirect_uris": ["https://app.example/callback"]}


def register(allow_confidential: bool = False, **fields: Any) -> ClientMetadata:
    return validate_client_metadata({**MINIMAL, **fields}, allow_confidential=allow_confidential)


def test_defaults_make_a_public_code_client() -> None:
    metadata = validate_client_metadata(MINIMAL, allow_confidential=False)
    assert metadata == ClientMetadata(
        redirect_uris=("https://app.example/callback",), token_endpoint_auth_method="none",
        grant_types=("authorization_code", "refresh_token"), response_types=("code",),
        client_name=None, scope=None, client_uri=None, logo_uri=None)
    assert metadata.public


NATIVE_REDIRECTS = ["http://127.0.0.1/cb", "http://[::1]:8080/cb", "http://localhost:8666/callback",
                    "com.example.app:/oauth2redirect", "https://127.0.0.1/cb"]


def test_a_full_registration_is_kept() -> None:
    metadata = register(
        allow_confidential=True,
        redirect_uris=["https://app.example/cb", "https://app.example/other"],
        token_endpoint_auth_method="client_secret_post", grant_types=["authorization_code"],
        response_types=["code"], client_name="My app ✓", scope="mcp:tools  mcp:tools read",
        client_uri="https://app.example/", logo_uri="https://app.example/logo.png",
        software_id="unknown fields are ignored", jwks_uri="https://x.example/jwks")
    assert len(metadata.redirect_uris) == 2
    assert metadata.token_endpoint_auth_method == "client_secret_post"
    assert not metadata.public
    assert metadata.grant_types == ("authorization_code",)
    assert metadata.client_name == "My app ✓"
    assert metadata.scope == "mcp:tools read"
    assert metadata.client_uri == "https://app.example/"
    assert metadata.logo_uri == "https://app.example/logo.png"


def test_native_redirect_uris_are_for_public_clients_only() -> None:
    """Loopback and private-use redirect URIs are a native app's, which cannot keep a secret
    (ToolHive's rule): a confidential registration with one of them is refused."""
    assert len(register(True, redirect_uris=NATIVE_REDIRECTS).redirect_uris) == 5
    for uri in NATIVE_REDIRECTS:
        for method in ("client_secret_basic", "client_secret_post"):
            with raises("invalid_redirect_uri", r"^redirect_uris\[1\] must be https on a "
                                                "host other than loopback"):
                register(True, token_endpoint_auth_method=method,
                         redirect_uris=["https://app.example/cb", uri])


def test_duplicate_redirect_uris_are_dropped() -> None:
    metadata = register(redirect_uris=["https://a.example/cb", "https://a.example/cb"])
    assert metadata.redirect_uris == ("https://a.example/cb",)


@pytest.mark.parametrize("document", [None, [], "text", 3, [MINIMAL]])
def test_the_request_must_be_an_object(document: object) -> None:
    with raises("invalid_client_metadata", "not a JSON object"):
        validate_client_metadata(document, allow_confidential=True)


@pytest.mark.parametrize(("uris", "match"), [
    (None, "redirect_uris is required"),
    ("https://app.example/cb", "redirect_uris is not an array"),
    ([], "1 to 10"),
    ([f"https://app.example/cb{i}" for i in range(11)], "1 to 10"),
], ids=["missing", "string", "empty", "eleven"])
def test_redirect_uris_list_rules(uris: Any, match: str) -> None:
    document = {} if uris is None else {"redirect_uris": uris}
    with raises("invalid_redirect_uri", match):
        validate_client_metadata(document, allow_confidential=True)


def test_ten_redirect_uris_are_allowed() -> None:
    assert len(register(redirect_uris=[f"https://app.example/{i}" for i in range(10)])
               .redirect_uris) == 10


@pytest.mark.parametrize(("uri", "match"), [
    ("http://app.example/cb", "http for a host other than loopback"),
    ("http://127.0.0.2/cb", "http for a host other than loopback"),
    ("http://localhost.evil.example/cb", "http for a host other than loopback"),
    ("https://app.example/cb#frag", "has a fragment"),
    ("https://app.example/cb#", "has a fragment"),
    ("https://user:pass@app.example/cb", "user information"),
    ("https://app.example@evil.example/cb", "user information"),
    ("http://localhost@evil.example/cb", "user information"),
    ("javascript:alert(1)", "scheme"),
    ("JavaScript://app.example/%0aalert(1)", "scheme"),
    ("data:text/html,<script>", "characters not allowed"),
    ("data:text/html;base64,PHNjcmlwdD4", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("vbscript:msgbox", "scheme"),
    ("myapp:/callback", "scheme"),
    ("/relative/callback", "not an absolute URI"),
    ("app.example/cb", "not an absolute URI"),
    ("https:/app.example/cb", "no host"),
    ("https:///cb", "no host"),
    ("https://:443/cb", "no host"),
    ("https://app.example:99999/cb", "port outside"),
    ("https://app.example:0/cb", "port outside"),
    ("https://app.example:/cb", "invalid port"),
    ("https://app.example:80:80/cb", "invalid port"),
    ("https://app.example:8a/cb", "invalid port"),
    ("https://[::1/cb", "unclosed IP literal"),
    ("https://[::g]/cb", "invalid IPv6 literal"),
    ("https://[fe80::1%25eth0]/cb", "invalid IPv6 literal"),
    ("https://app.example\\@evil.example/cb", "characters not allowed"),
    ("https://app.example/c b", "characters not allowed"),
    ("https://app.exa\tmple/cb", "characters not allowed"),
    ("https://app.example/cb\n", "characters not allowed"),
    ("https://app.example/%zz", "characters not allowed"),
    ("https://äpp.example/cb", "characters not allowed"),
    ("https://app_ex!ample/cb", "invalid host name"),
    ("", "is empty"),
    (42, "is not a string"),
    (None, "is not a string"),
    ("https://app.example/" + "a" * 1981, "longer than 2000"),
], ids=lambda value: repr(value)[:40] if isinstance(value, str) else None)
def test_bad_redirect_uris_are_refused_naming_the_index(uri: object, match: str) -> None:
    uris = ["https://ok.example/1", "https://ok.example/2", "https://ok.example/3", uri]
    with raises("invalid_redirect_uri", rf"^redirect_uris\[3\] .*{match}"):
        register(redirect_uris=uris)


def test_descriptions_do_not_echo_the_uri() -> None:
    with pytest.raises(OAuthError) as info:
        register(redirect_uris=["javascript:alert(document.cookie)"])
    assert "alert" not in info.value.description and "javascript" not in info.value.description


@pytest.mark.parametrize("uri", [
    "https://app.example/callback?x=1",
    "https://APP.example:8443/cb",
    "https://192.0.2.1/cb",
    "https://[2001:db8::1]:443/cb",
    "http://127.0.0.1:3000/callback",
    "http://[::1]/callback",
    "http://localhost/callback",
    "HTTP://LOCALHOST:1234/cb",
    "com.example.app:/oauth2redirect/provider",
    "com.example.app://callback",
    "https://app.example/" + "a" * 1980,
])
def test_good_redirect_uris_are_accepted(uri: str) -> None:
    assert register(redirect_uris=[uri]).redirect_uris == (uri,)


def test_confidential_methods_need_allow_confidential() -> None:
    for method in ("client_secret_basic", "client_secret_post"):
        with raises("invalid_client_metadata", "token_endpoint_auth_method must be none"):
            register(token_endpoint_auth_method=method)
        assert register(True, token_endpoint_auth_method=method).token_endpoint_auth_method \
            == method


@pytest.mark.parametrize("method", ["private_key_jwt", "client_secret_jwt", "", 3, ["none"]])
def test_unknown_auth_methods_are_refused(method: object) -> None:
    with raises("invalid_client_metadata", "^token_endpoint_auth_method"):
        register(True, token_endpoint_auth_method=method)


@pytest.mark.parametrize(("grants", "match"), [
    (["implicit"], r"grant_types\[0\] is not supported"),
    (["authorization_code", "password"], r"grant_types\[1\] is not supported"),
    (["urn:ietf:params:oauth:grant-type:token-exchange"], r"grant_types\[0\] is not supp"),
    (["client_credentials"], r"grant_types\[0\] is not supported"),
    ([], "grant_types is empty"),
    ("authorization_code", "grant_types is not an array"),
    ([1], r"grant_types\[0\] is not a string"),
    (["refresh_token"], "response_types code needs grant_types authorization_code"),
])
def test_grant_types_rules(grants: Any, match: str) -> None:
    with raises("invalid_client_metadata", match):
        register(grant_types=grants)


@pytest.mark.parametrize(("responses", "match"), [
    (["token"], r"response_types\[0\] is not supported"),
    (["code", "id_token"], r"response_types\[1\] is not supported"),
    ([], "response_types is empty"),
    ("code", "response_types is not an array"),
])
def test_response_types_rules(responses: Any, match: str) -> None:
    with raises("invalid_client_metadata", match):
        register(response_types=responses)


def test_grant_and_response_types_are_deduplicated() -> None:
    metadata = register(grant_types=["refresh_token", "authorization_code", "refresh_token"],
                        response_types=["code", "code"])
    assert metadata.grant_types == ("refresh_token", "authorization_code")
    assert metadata.response_types == ("code",)


@pytest.mark.parametrize(("name", "match"), [
    ("x" * 201, "longer than 200"),
    (5, "not a string"),
    ("", "empty"),
    ("evil\u202eelpmaxe", "control characters"),
    ("line\nbreak", "control characters"),
])
def test_client_name_rules(name: object, match: str) -> None:
    with raises("invalid_client_metadata", f"^client_name .*{match}"):
        register(client_name=name)
    assert register(client_name="x" * 200).client_name == "x" * 200


@pytest.mark.parametrize("field", ["client_uri", "logo_uri"])
@pytest.mark.parametrize(("value", "match"), [
    ("http://app.example/", "not an https URL"),
    ("javascript:alert(1)", "not an https URL"),
    ("https://", "no host"),
    ("https://u@app.example/", "user information"),
    (["https://app.example/"], "not a string"),
])
def test_client_and_logo_uris_must_be_https(field: str, value: object, match: str) -> None:
    with raises("invalid_client_metadata", f"^{field} .*{match}"):
        register(**{field: value})


@pytest.mark.parametrize(("scope", "match"), [
    (["a"], "scope is not a string"),
    ('read "write"', "not allowed in a scope"),
    ("read\twrite", "not allowed in a scope"),
])
def test_registration_scope_rules(scope: object, match: str) -> None:
    with raises("invalid_client_metadata", match):
        register(scope=scope)
    assert register(scope="   ").scope is None


# --- redirect URI matching ---------------------------------------------------------------------

REGISTERED = ("https://app.example/callback", "http://127.0.0.1:8080/cb",
              "http://[::1]:8080/cb", "http://localhost:8080/cb",
              "com.example.app:/oauth2redirect")


@pytest.mark.parametrize("requested", list(REGISTERED))
def test_registered_uris_match_exactly(requested: str) -> None:
    assert redirect_uri_matches(REGISTERED, requested)


@pytest.mark.parametrize("requested", [
    "https://app.example/callback2",  # other path
    "https://app.example/other",  # other path
    "https://app.example:8443/callback",  # other port, non-loopback host
    "https://app.example:443/callback",  # the default port spelled out
    "https://APP.example/callback",  # other case (host)
    "https://app.example/Callback",  # other case (path)
    "HTTPS://app.example/callback",  # other case (scheme)
    "https://app.example/callback?x=1",  # added query
    "https://app.example/callback/",  # trailing slash
    "https://app.example/callback#x",  # fragment
    "https://app.example/callback/../callback",  # not normalised
    "https://app.example/%63allback",  # not normalised
    "http://app.example/callback",  # other scheme
    "http://localhost:9090/cb",  # localhost: the port must match
    "http://localhost/cb",
    "http://127.0.0.1:8080/cb/",  # loopback, but other path
    "http://127.0.0.1:9090/cb?x=1",  # loopback other port, and an added query
    "http://127.0.0.1:9090/CB",
    "http://127.0.0.1:99999/cb",  # not a port
    "http://127.0.0.1:0/cb",
    "http://127.0.0.1:/cb",
    "http://127.0.0.1:8080@evil.example/cb",  # userinfo trick
    "http://127.0.0.1.evil.example:8080/cb",
    "http://[::1]:9090/cb/",
    "https://127.0.0.1:9090/cb",  # loopback rule is for http only
    "com.example.app:/oauth2redirect/x",
    "",
])
def test_near_misses_do_not_match(requested: str) -> None:
    assert not redirect_uri_matches(REGISTERED, requested)


@pytest.mark.parametrize("requested", [
    "http://127.0.0.1:9090/cb",  # other port
    "http://127.0.0.1/cb",  # no port
    "http://127.0.0.1:1/cb",
    "http://[::1]:55555/cb",
    "http://[::1]/cb",
])
def test_loopback_ip_literals_match_on_any_port(requested: str) -> None:
    assert redirect_uri_matches(REGISTERED, requested)


def test_loopback_registered_without_port_matches_any_port() -> None:
    assert redirect_uri_matches(["http://127.0.0.1/callback"], "http://127.0.0.1:61234/callback")
    assert not redirect_uri_matches(["http://localhost/callback"],
                                    "http://localhost:61234/callback")


def test_matching_with_nothing_registered_and_odd_input() -> None:
    assert not redirect_uri_matches([], "https://app.example/callback")
    assert not redirect_uri_matches(REGISTERED, None)  # type: ignore[arg-type]
    assert not redirect_uri_matches(["http://127.0.0.1/" + "a" * 2000],
                                    "http://127.0.0.1:1/" + "a" * 2000)


# --- PKCE --------------------------------------------------------------------------------------

VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"  # RFC 7636 appendix B
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def challenge_of(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_pkce_rfc_7636_example_verifies() -> None:
    assert challenge_of(VERIFIER) == CHALLENGE
    verify_pkce(CHALLENGE, "S256", VERIFIER)


@pytest.mark.parametrize("verifier", ["a" * 43, "Z" * 128, "0-._~" * 9])
def test_pkce_verifier_lengths_and_characters_that_are_allowed(verifier: str) -> None:
    verify_pkce(challenge_of(verifier), "S256", verifier)


def test_pkce_missing_verifier_is_refused() -> None:
    with raises("invalid_grant", "code_verifier is required"):
        verify_pkce(CHALLENGE, "S256", None)


def test_pkce_wrong_verifier_is_refused_without_echoing_it() -> None:
    wrong = VERIFIER[:-1] + "Y"
    with pytest.raises(OAuthError) as info:
        verify_pkce(CHALLENGE, "S256", wrong)
    assert info.value.error == "invalid_grant"
    assert "does not match" in info.value.description
    assert wrong not in str(info.value) and CHALLENGE not in str(info.value)


@pytest.mark.parametrize("verifier", ["a" * 42, "", "a" * 129], ids=["42", "empty", "129"])
def test_pkce_verifier_of_bad_length_is_refused(verifier: str) -> None:
    with raises("invalid_grant", "43 to 128 characters"):
        verify_pkce(challenge_of(verifier), "S256", verifier)


@pytest.mark.parametrize("verifier", ["a" * 42 + "+", "a" * 42 + "/", "a" * 42 + "=",
                                      "a" * 42 + " ", "a" * 42 + "é", "a" * 42 + "\n"])
def test_pkce_verifier_with_bad_characters_is_refused(verifier: str) -> None:
    with raises("invalid_grant", "43 to 128 characters"):
        verify_pkce(challenge_of(verifier), "S256", verifier)


def test_pkce_plain_method_is_refused_at_the_token_endpoint() -> None:
    with raises("invalid_grant", "S256"):
        verify_pkce(VERIFIER, "plain", VERIFIER)


def test_pkce_request_with_s256_is_accepted() -> None:
    check_pkce_request(CHALLENGE, "S256")


@pytest.mark.parametrize(("challenge", "method", "match"), [
    (None, "S256", "code_challenge is required"),
    (CHALLENGE, None, "code_challenge_method is required"),
    (CHALLENGE, "plain", "code_challenge_method must be S256"),
    (CHALLENGE, "s256", "code_challenge_method must be S256"),
    (CHALLENGE, "S512", "code_challenge_method must be S256"),
    (VERIFIER + "x", "S256", "43 characters"),
    (CHALLENGE[:-1], "S256", "43 characters"),
    (CHALLENGE[:-1] + "+", "S256", "43 characters"),
    (CHALLENGE[:-1] + "N", "S256", "43 characters"),  # non-canonical trailing bits
    ("", "S256", "43 characters"),
], ids=["no-challenge", "no-method", "plain", "lower-case", "S512", "44-chars", "42-chars",
        "plus", "trailing-bits", "empty"])
def test_pkce_request_rules(challenge: str | None, method: str | None, match: str) -> None:
    with raises("invalid_request", match):
        check_pkce_request(challenge, method)


# --- scope -------------------------------------------------------------------------------------


def test_scope_tokens_are_split_and_deduplicated_in_order() -> None:
    assert parse_scope("b a  b c") == ("b", "a", "c")
    assert parse_scope(None) == ()
    assert parse_scope("") == ()
    assert parse_scope("mcp:tools!#$%&'()*+,-./:;<=>?@[]^_`{|}~") == (
        "mcp:tools!#$%&'()*+,-./:;<=>?@[]^_`{|}~",)


def test_unknown_scopes_are_refused_when_allowed_is_given() -> None:
    assert parse_scope("read write", allowed=["write", "read", "admin"]) == ("read", "write")
    with raises("invalid_scope", r"scope\[1\] is not a supported scope"):
        parse_scope("read admin", allowed=["read"])
    with raises("invalid_scope", r"scope\[0\]"):
        parse_scope("read", allowed=[])
    assert parse_scope("anything", allowed=None) == ("anything",)


@pytest.mark.parametrize("value", ['read "x"', "read\\x", "a\tb", "a\nb", "caf\u00e9",
                                   "a\x00b"])
def test_scope_characters_outside_rfc_6749_are_refused(value: str) -> None:
    with raises("invalid_scope", "characters not allowed in a scope"):
        parse_scope(value)


def test_overlong_scope_is_refused() -> None:
    with raises("invalid_scope", "longer than"):
        parse_scope("a " * 5000)


# --- resource ----------------------------------------------------------------------------------

RESOURCES = ("https://mcp.example/mcp", "https://other.example/")


def test_resource_absent_or_allowed() -> None:
    assert check_resource(None, allowed=RESOURCES) is None
    assert check_resource([], allowed=RESOURCES) is None
    assert check_resource("https://mcp.example/mcp", allowed=RESOURCES) == \
        "https://mcp.example/mcp"
    assert check_resource(["https://other.example/"], allowed=RESOURCES) == \
        "https://other.example/"


def test_two_resources_are_refused() -> None:
    with raises("invalid_target", "only one resource"):
        check_resource(list(RESOURCES), allowed=RESOURCES)
    with raises("invalid_target", "only one resource"):
        check_resource([RESOURCES[0], RESOURCES[0]], allowed=RESOURCES)


@pytest.mark.parametrize(("value", "match"), [
    ("https://mcp.example/mcp#frag", "has a fragment"),
    ("/mcp", "not an absolute URI"),
    ("mcp.example/mcp", "not an absolute URI"),
    ("", "is empty"),
    ("https://mcp.example/m cp", "characters not allowed"),
    ("https://mcp.example/mcp/", "not a resource this server"),  # trailing slash
    ("https://MCP.example/mcp", "not a resource this server"),
    ("https://evil.example/mcp", "not a resource this server"),
    ("https://mcp.example/mcp?x=1", "not a resource this server"),
    ([3], "not a string"),
])
def test_bad_or_unknown_resources_are_refused(value: Any, match: str) -> None:
    with raises("invalid_target", f"^resource .*{match}"):
        check_resource(value, allowed=RESOURCES)
