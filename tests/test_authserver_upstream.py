"""The upstream providers of the embedded authorization server's chained login.

Against a real OpenID provider (oidc-provider, tests/fixtures/idp.py) for the oidc and oauth2
kinds, and against a small stand-in (tests/fixtures/nested_token_server.py) for what no installable
provider does: a nested token response (tokenResponseMapping) and GitHub-like user documents.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio

from vmcp_trio.authserver.upstream import (
    LegStart,
    UpstreamError,
    UpstreamProvider,
    UpstreamTokens,
)
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import (
    OAuth2Provider,
    OIDCProvider,
    SecretValue,
    TokenResponseMappingPlan,
    UserInfoPlan,
)

from .fixtures.idp import REDIRECT_URI, Idp, browse, running_idp
from .fixtures.nested_token_server import NestedTokenServer, running_nested_token_server
from .helpers import free_port

TIMEOUT = 5.0
ERIN_OID = "4f1c2a9e-0d7b-4c55-9a7e-erin"
"""The ``oid`` claim of account erin's ID tokens (Entra ID's stable user id)."""


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(account_claims={"erin": {"oid": ERIN_OID}}) as running:
        yield running


@pytest.fixture
def stand_in() -> Iterator[NestedTokenServer]:
    with running_nested_token_server() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    try:
        yield client
    finally:
        await client.aclose()


def _secret(idp: Idp, client: str) -> SecretValue | None:
    value = idp.clients[client].client_secret
    return None if value is None else SecretValue(f"test/idp[{client}]", value.encode())


def oidc_plan(idp: Idp, client: str = "confidential", **changes: Any) -> OIDCProvider:
    fields: dict[str, Any] = {"name": "corp", "issuer_url": idp.issuer, "client_id": client,
                              "client_secret": _secret(idp, client)}
    return OIDCProvider(**(fields | changes))


def oauth2_plan(idp: Idp, **changes: Any) -> OAuth2Provider:
    """oidc-provider as a plain OAuth 2.0 provider: explicit endpoints, its userinfo (/me)."""
    fields: dict[str, Any] = {
        "name": "plain", "authorization_endpoint": idp.authorization_endpoint,
        "token_endpoint": idp.token_endpoint, "client_id": "confidential",
        "client_secret": _secret(idp, "confidential"), "scopes": ("openid",),
        "user_info": UserInfoPlan(f"{idp.issuer}/me", subject_fields=("sub",))}
    return OAuth2Provider(**(fields | changes))


def stand_in_plan(server: NestedTokenServer, **changes: Any) -> OAuth2Provider:
    fields: dict[str, Any] = {
        "name": "nested", "authorization_endpoint": f"{server.url}/authorize",
        "token_endpoint": f"{server.url}/token", "client_id": "vmcp",
        "client_secret": SecretValue("test/nested[secret]", b"s3cret"),
        "scopes": ("read", "write"),
        "user_info": UserInfoPlan(f"{server.url}/user", subject_fields=("user.id",),
                                  name_fields=("user.name", "user.login"),
                                  email_fields=("user.mail", "user.email2", "primary_email")),
        "token_response_mapping": TokenResponseMappingPlan(
            access_token_path="data.auth.token", scope_path="data.granted",
            refresh_token_path="data.auth.refresh", expires_in_path="data.auth.ttl")}
    return OAuth2Provider(**(fields | changes))


def upstream(plan: OIDCProvider | OAuth2Provider, http: HttpClient,
             timeout: float = TIMEOUT) -> UpstreamProvider:
    return UpstreamProvider(plan, http, allow_http=True, allow_private=True, timeout=timeout)


async def login(provider: UpstreamProvider, user: str = "alice") -> tuple[str, LegStart]:
    """Start a leg and log in as ``user`` in the headless browser: (code, leg)."""
    state = secrets.token_urlsafe(16)
    leg = await provider.start(state=state, redirect_uri=REDIRECT_URI)
    result = await trio.to_thread.run_sync(browse, leg.url, user)
    assert result.get("state") == state and "code" in result, result
    return result["code"], leg


async def finish(provider: UpstreamProvider, code: str, leg: LegStart, *,
                 nonce: str | None = None) -> tuple[UpstreamTokens, Any]:
    return await provider.finish(code=code, verifier=leg.verifier,
                                 nonce=leg.nonce if nonce is None else nonce,
                                 redirect_uri=REDIRECT_URI)


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(
        b"=").decode()


# --- oidc --------------------------------------------------------------------------------------

async def test_oidc_start_url_has_every_parameter_and_s256(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    leg = await provider.start(state="st-1", redirect_uri=REDIRECT_URI)
    parts = urlsplit(leg.url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == idp.authorization_endpoint
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert query == {"response_type": "code", "client_id": "confidential",
                     "redirect_uri": REDIRECT_URI, "scope": "openid offline_access",
                     "state": "st-1", "code_challenge": s256(leg.verifier),
                     "code_challenge_method": "S256", "nonce": leg.nonce}
    assert 43 <= len(leg.verifier) <= 128 and leg.nonce and len(leg.nonce) >= 32
    again = await provider.start(state="st-2", redirect_uri=REDIRECT_URI)
    assert again.verifier != leg.verifier and again.nonce != leg.nonce
    assert leg.verifier not in repr(leg)  # the nonce is in the URL anyway


async def test_oidc_login_gives_tokens_and_the_subject(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    code, leg = await login(provider, "alice")
    tokens, identity = await finish(provider, code, leg)
    assert identity.subject == "alice"
    assert tokens.access_token and tokens.refresh_token and tokens.id_token
    assert tokens.token_type == "Bearer"
    assert tokens.expires_at is not None
    assert abs(tokens.expires_at - (time.time() + idp.access_token_ttl)) < 30
    assert tokens.scope is not None and "openid" in tokens.scope.split()
    assert tokens.access_token not in repr(tokens) and tokens.refresh_token not in repr(tokens)


async def test_oidc_subject_claim_names_the_user(idp: Idp, http: HttpClient) -> None:
    """``oidcConfig.subjectClaim`` (Entra ID's ``oid``): the user is that claim of the ID
    token, not ``sub``; a token without it fails the login rather than fall back to ``sub``."""
    provider = upstream(oidc_plan(idp, subject_claim="oid"), http)
    code, leg = await login(provider, "erin")
    _, identity = await finish(provider, code, leg)
    assert identity.subject == ERIN_OID
    code, leg = await login(provider, "alice")
    with pytest.raises(UpstreamError, match="the ID token has no oid"):
        await finish(provider, code, leg)


async def test_oidc_public_client_sends_its_id_in_the_form(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp, "public"), http)
    code, leg = await login(provider, "carol")
    tokens, identity = await finish(provider, code, leg)
    assert identity.subject == "carol" and tokens.access_token


async def test_oidc_wrong_nonce_is_refused(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    code, leg = await login(provider)
    with pytest.raises(UpstreamError, match="nonce") as caught:
        await finish(provider, code, leg, nonce=secrets.token_urlsafe(32))
    assert "'corp'" in str(caught.value) and code not in str(caught.value)


async def test_oidc_code_used_twice_is_the_providers_invalid_grant(idp: Idp,
                                                                   http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    code, leg = await login(provider)
    await finish(provider, code, leg)
    with pytest.raises(UpstreamError, match="invalid_grant") as caught:
        await finish(provider, code, leg)
    assert caught.value.oauth_error == "invalid_grant"
    assert "'corp'" in str(caught.value) and code not in str(caught.value)


async def test_oidc_refresh_gives_a_new_access_token(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    code, leg = await login(provider)
    tokens, _ = await finish(provider, code, leg)
    assert tokens.refresh_token is not None
    renewed = await provider.refresh(tokens.refresh_token)
    assert renewed.access_token and renewed.access_token != tokens.access_token
    assert renewed.expires_at is not None and renewed.expires_at > time.time()


async def test_oidc_supervised_task_loads_the_providers_keys(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oidc_plan(idp), http)
    [(name, task)] = provider.supervised()
    assert name == "JWKS"
    async with trio.open_nursery() as nursery:
        await nursery.start(task)
        code, leg = await login(provider, "dave")
        _, identity = await finish(provider, code, leg)
        assert identity.subject == "dave"
        nursery.cancel_scope.cancel()
    assert upstream(oauth2_plan(idp), http).supervised() == []


async def test_oidc_discovery_failure_names_the_provider(http: HttpClient) -> None:
    plan = OIDCProvider("gone", f"http://127.0.0.1:{free_port()}", "c")
    with trio.fail_after(TIMEOUT + 2), pytest.raises(UpstreamError,
                                                     match=r"'gone'.*discovery failed"):
        await upstream(plan, http).start(state="s", redirect_uri=REDIRECT_URI)


async def test_oidc_plain_http_issuer_needs_allow_http(idp: Idp, http: HttpClient) -> None:
    provider = UpstreamProvider(oidc_plan(idp), http, allow_private=True, timeout=TIMEOUT)
    with pytest.raises(UpstreamError, match="plain http"):
        await provider.start(state="s", redirect_uri=REDIRECT_URI)


# --- oauth2 with userInfo ----------------------------------------------------------------------

async def test_oauth2_identity_from_the_userinfo_endpoint(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oauth2_plan(idp), http)
    code, leg = await login(provider, "erin")
    assert leg.nonce is None and "nonce=" not in leg.url
    assert leg.url.startswith(idp.authorization_endpoint + "?")
    tokens, identity = await finish(provider, code, leg)
    assert identity.subject == "erin"
    assert tokens.access_token and tokens.refresh_token and tokens.expires_at is not None


async def test_oauth2_userinfo_by_post(idp: Idp, http: HttpClient) -> None:
    plan = oauth2_plan(idp, user_info=UserInfoPlan(f"{idp.issuer}/me", http_method="POST"))
    provider = upstream(plan, http)
    code, leg = await login(provider, "frank")
    _, identity = await finish(provider, code, leg)
    assert identity.subject == "frank"


async def test_oauth2_userinfo_post_sends_the_additional_headers(
        stand_in: NestedTokenServer, http: HttpClient) -> None:
    info = UserInfoPlan(f"{stand_in.url}/user", http_method="POST", additional_headers=(
        ("Accept", "application/vnd.github+json"), ("X-GitHub-Api-Version", "2022-11-28")),
        subject_fields=("user.id",))
    provider = upstream(stand_in_plan(stand_in, user_info=info), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    tokens, identity = await finish(provider, "any-code", leg)
    assert identity.subject == "12345"
    [call] = [r for r in stand_in.requests if r.path == "/user"]
    assert call.method == "POST"
    assert call.headers["authorization"] == f"Bearer {tokens.access_token}"
    assert call.headers["accept"] == "application/vnd.github+json"
    assert call.headers["x-github-api-version"] == "2022-11-28"


async def test_field_mapping_first_non_empty_wins_and_numbers_are_integers(
        stand_in: NestedTokenServer, http: HttpClient) -> None:
    provider = upstream(stand_in_plan(stand_in), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    # user.mail is empty, user.email2 missing, primary_email set; user.name null -> login.
    _, identity = await finish(provider, "c1", leg)
    assert (identity.subject, identity.name, identity.email) == ("12345", "octo",
                                                                 "o@example.com")

    nested = UserInfoPlan(f"{stand_in.url}/user", subject_fields=("account.uid", "user.id"),
                          name_fields=("none",), email_fields=("emails.1",))
    provider = upstream(stand_in_plan(stand_in, user_info=nested), http)
    stand_in.user = {"account": {"uid": 1.0}, "user": {"id": 7}, "emails": ["a@x", "b@x"]}
    _, identity = await finish(provider, "c2", leg)
    assert (identity.subject, identity.name, identity.email) == ("1", None, "b@x")

    stand_in.user = {"account": {"uid": ""}, "user": {"id": True}}
    with pytest.raises(UpstreamError, match=r"none of the subject fields account\.uid, user\.id"):
        await finish(provider, "c3", leg)


# --- tokenResponseMapping ----------------------------------------------------------------------

async def test_token_response_mapping_on_the_code_exchange(stand_in: NestedTokenServer,
                                                          http: HttpClient) -> None:
    provider = upstream(stand_in_plan(stand_in), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    assert leg.url.startswith(f"{stand_in.url}/authorize?") and "scope=read%20write" in leg.url
    tokens, identity = await finish(provider, "whatever", leg)
    issued = stand_in.issued[-1]
    assert (tokens.access_token, tokens.refresh_token) == (issued["token"], issued["refresh"])
    assert tokens.scope == "read write"
    assert tokens.expires_at is not None and abs(tokens.expires_at - time.time() - 3600) < 30
    assert identity.subject == "12345"
    # What the token endpoint was sent: Basic auth, the form, JSON wanted.
    [call] = [r for r in stand_in.requests if r.path == "/token"]
    assert call.headers["authorization"] == "Basic " + base64.b64encode(b"vmcp:s3cret").decode()
    assert call.headers["accept"] == "application/json"
    assert call.form == {"grant_type": "authorization_code", "code": "whatever",
                         "redirect_uri": REDIRECT_URI, "code_verifier": leg.verifier}


async def test_token_response_mapping_on_refresh(stand_in: NestedTokenServer,
                                                 http: HttpClient) -> None:
    provider = upstream(stand_in_plan(stand_in, client_secret=None), http)
    renewed = await provider.refresh("rt-old")
    issued = stand_in.issued[-1]
    assert (renewed.access_token, renewed.refresh_token) == (issued["token"], issued["refresh"])
    assert renewed.scope == "read write"
    assert renewed.expires_at is not None and abs(renewed.expires_at - time.time() - 3600) < 30
    [call] = stand_in.requests
    assert "authorization" not in call.headers  # a public client: its id in the form
    assert call.form == {"grant_type": "refresh_token", "refresh_token": "rt-old",
                         "client_id": "vmcp"}


async def test_token_response_mapping_without_the_access_token(stand_in: NestedTokenServer,
                                                               http: HttpClient) -> None:
    plan = stand_in_plan(stand_in, token_response_mapping=TokenResponseMappingPlan(
        access_token_path="data.missing"))
    with pytest.raises(UpstreamError, match=r"no access token at 'data\.missing'"):
        await upstream(plan, http).refresh("rt")


# --- errors ------------------------------------------------------------------------------------

async def test_token_endpoint_down_names_the_provider(http: HttpClient) -> None:
    port = free_port()
    plan = OAuth2Provider("down", f"http://127.0.0.1:{port}/auth",
                          f"http://127.0.0.1:{port}/token", "c",
                          user_info=UserInfoPlan(f"http://127.0.0.1:{port}/user"))
    provider = upstream(plan, http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    with trio.fail_after(TIMEOUT + 2), pytest.raises(UpstreamError, match=r"'down'.*token"):
        await finish(provider, "code", leg)


async def test_a_silent_token_endpoint_times_out(http: HttpClient) -> None:
    # A listener that never accepts: the kernel completes the handshake, nobody answers.
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    plan = OAuth2Provider("silent", f"http://127.0.0.1:{port}/auth",
                          f"http://127.0.0.1:{port}/token", "c")
    started = trio.current_time()
    with pytest.raises(UpstreamError, match=r"'silent'.*did not answer within 0\.5s"):
        await upstream(plan, http, timeout=0.5).refresh("rt")
    assert trio.current_time() - started < 2
    await listener.aclose()


async def test_the_providers_invalid_grant_is_reported(idp: Idp, http: HttpClient) -> None:
    provider = upstream(oauth2_plan(idp), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    with pytest.raises(UpstreamError, match=r"'plain'.*HTTP 400.*invalid_grant") as caught:
        await finish(provider, "not-a-real-code", leg)
    assert caught.value.oauth_error == "invalid_grant"
    assert "not-a-real-code" not in str(caught.value)


async def test_an_error_in_a_200_answer_is_an_error(stand_in: NestedTokenServer,
                                                    http: HttpClient) -> None:
    provider = upstream(stand_in_plan(stand_in), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    with pytest.raises(UpstreamError, match="bad_verification_code") as caught:
        await finish(provider, "github-style-error", leg)
    assert caught.value.oauth_error == "bad_verification_code"


async def test_oauth2_without_userinfo_knows_the_user_by_the_access_token(
        stand_in: NestedTokenServer, http: HttpClient) -> None:
    """Neither userInfo nor identityFromToken (an MCP authorization server upstream, say): the
    user is ``tk-`` and a digest of the access token, as ToolHive's synthesis mode, with no
    name; nothing of the token itself is in it."""
    provider = upstream(stand_in_plan(stand_in, user_info=None), http)
    leg = await provider.start(state="s", redirect_uri=REDIRECT_URI)
    tokens, identity = await finish(provider, "code", leg)
    digest = hashlib.sha256(tokens.access_token.encode()).hexdigest()[:32]
    assert identity.subject == "tk-" + digest and identity.name is None
    assert tokens.access_token not in identity.subject


def test_invalid_additional_headers_are_refused_at_construction(
        stand_in: NestedTokenServer) -> None:
    for headers, problem in ((("Authorization", "token x"),), "cannot be set"), \
            ((("X-Key", "a\r\nb"),), "not a valid header value"):
        info = UserInfoPlan(f"{stand_in.url}/user", additional_headers=headers)
        with pytest.raises(UpstreamError, match=problem) as caught:
            upstream(stand_in_plan(stand_in, user_info=info), HttpClient())
        assert "a\r\nb" not in str(caught.value)


def test_id_token_at_hash_and_azp_bind_it_to_this_login(idp: Idp) -> None:
    """oidc-provider puts no at_hash in code-flow ID tokens, so these checks run on a token built
    here (the signature and claim checks before them are covered by the login tests)."""
    from vmcp_trio.auth.jwt import parse_jws

    def unsigned(claims: dict[str, Any]) -> Any:
        part = [base64.urlsafe_b64encode(json.dumps(x).encode()).rstrip(b"=").decode()
                for x in ({"alg": "RS256"}, claims)]
        return parse_jws(f"{part[0]}.{part[1]}.c2ln")

    provider = upstream(oidc_plan(idp), HttpClient())
    digest = hashlib.sha256(b"the-access-token").digest()
    at_hash = base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()
    check = provider._check_id_token_bindings
    check(unsigned({"nonce": "n", "at_hash": at_hash, "azp": "confidential"}),
          "the-access-token", "n")
    with pytest.raises(UpstreamError, match="at_hash"):
        check(unsigned({"nonce": "n", "at_hash": at_hash}), "another-access-token", "n")
    with pytest.raises(UpstreamError, match="azp"):
        check(unsigned({"nonce": "n", "azp": "someone-else"}), "the-access-token", "n")
    with pytest.raises(UpstreamError, match="has no nonce"):
        check(unsigned({}), "the-access-token", "n")
