"""Token exchange with delegation (RFC 8693) at the embedded authorization server, over real HTTP:
``delegateClients`` (ToolHive's names) exchange a user's token for one that says who acts for
them (``act``), within what ``may_act`` and ``trustedIssuers`` allow.

The users' tokens come from the real chained login through the two ``oidc-provider`` upstreams
of the other authorization server tests. ``corp``, one of them, is also a trusted issuer whose
access tokens may be subject tokens; oidc-provider cannot put ``may_act`` or an actor of our
choosing in its tokens, so the test signs those with corp's own signing key (vmcp verifies them
against the JWKS corp serves). A token of this server carrying ``may_act`` is signed with the
server's own key in the test's process: no grant of ours issues one.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

import pytest

from .authserver_helpers import (
    Stack,
    as_docs,
    call,
    claims_of,
    issuer_of,
    mcp_status,
    register,
    running_stack,
    tokens,
)
from .fixtures.idp import Idp
from .helpers import expect_error, resource, validate
from .jwt_helpers import mint, private_key_of

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
SECRETS = {name: secrets.token_urlsafe(32) for name in ("agent-a", "agent-b", "agent-c")}
EXTERNAL_ACTOR = "external-reporting-client"


def delegation_docs(issuer: str, corp: Idp, hub: Idp) -> list[dict[str, Any]]:
    docs = as_docs(issuer, corp, hub)
    docs.insert(0, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "delegates"},
                    "stringData": SECRETS})
    config = resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]
    config["insecureAllowConfidentialOverLoopbackHTTP"] = True  # the test's issuer is loopback
    config["delegateClients"] = [
        {"clientId": name, "clientSecretRef": {"name": "delegates", "key": name},
         "scopes": ["mcp:tools"], "audiences": [issuer + "/mcp"]} for name in SECRETS]
    config["trustedIssuers"] = [{
        "issuerUrl": corp.issuer, "jwksUrl": corp.jwks_uri, "insecureAllowHTTP": True,
        "allowPrivateIPs": True, "expectedAudience": issuer + "/mcp",
        "allowedActors": [EXTERNAL_ACTOR], "allowMayAct": True,
        "actorMatcher": 'claims["azp"].startsWith("partner-") && claims["sub"] != "mallory"',
        "allowedDelegateClients": ["agent-a", "agent-b"]}, {
        "issuerUrl": hub.issuer, "jwksUrl": hub.jwks_uri, "insecureAllowHTTP": True,
        "allowPrivateIPs": True, "expectedAudience": issuer + "/mcp",
        "allowedDelegateClients": ["agent-a", "agent-b"]}]  # no allowMayAct, no actors
    return docs


@pytest.fixture
async def stack(upstreams: tuple[int, Idp, Idp]) -> Any:
    _, corp, hub = upstreams
    async with running_stack(upstreams, delegation_docs(issuer_of(upstreams), corp, hub)) as stack:
        yield stack


async def exchange(stack: Stack, client: str, subject_token: str, *, post: bool = False,
                   secret: str | None = None, **form: str) -> tuple[int, dict[str, Any]]:
    """A token exchange by a delegate client (HTTP Basic, or its secret in the form)."""
    body = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN, "scope": "mcp:tools", **form}
    secret = secret or SECRETS.get(client, "")
    headers = []
    if post:
        body.update(client_id=client, client_secret=secret)
    else:
        headers.append(("authorization", "Basic " + base64.b64encode(
            f"{client}:{secret}".encode()).decode()))
    status, _, answer = await call(stack, "POST", "/oauth/token", form=body, headers=headers)
    return status, answer


def corp_token(stack: Stack, *, by: Idp | None = None, **claims: Any) -> str:
    """An access token corp (or ``by``) signs for this gateway's resource, for user ``bob``."""
    idp = by or stack.corp
    now = int(time.time())
    body = {"iss": idp.issuer, "sub": "bob", "aud": stack.issuer + "/mcp",
            "iat": now, "exp": now + 300, "scope": "mcp:tools", **claims}
    return mint(private_key_of(idp.jwks_private["keys"][0]),
                {k: v for k, v in body.items() if v is not None}, alg="RS256",
                kid=idp.kid, typ="at+jwt")


def ours(stack: Stack, **claims: Any) -> str:
    """An access token of this server for ``carol`` with ``claims`` (signed with its key in the
    test's process: no grant of ours issues such claims)."""
    assert stack.gateway is not None and stack.gateway.authserver is not None
    now = int(time.time())
    return stack.gateway.authserver.keys.sign({
        "iss": stack.issuer, "sub": "carol", "aud": [stack.issuer + "/mcp"], "iat": now,
        "exp": now + 300, "client_id": "some-client", "scope": "mcp:tools", **claims})


def refused(result: tuple[int, dict[str, Any]], error: str, said: str) -> None:
    status, answer = result
    assert (status, answer.get("error")) == (401 if error == "invalid_client" else 400,
                                             error), answer
    assert said in answer["error_description"], answer


async def test_a_delegate_acts_for_a_user_and_chains_nest(stack: Stack) -> None:
    """A delegate client exchanges a user's token of ours: the delegated token keeps the user
    as ``sub`` (and the login session), names the delegate in ``act``, is the client's, and the
    gateway takes it. Exchanged again by another delegate, the chain nests. When the user's
    login session ends, delegated tokens stop working and the user's token exchanges no more."""
    _, _, metadata = await call(stack, "GET", "/.well-known/oauth-authorization-server")
    assert TOKEN_EXCHANGE in metadata["grant_types_supported"]
    client_id, user, _ = await tokens(stack)
    user_claims = claims_of(user["access_token"])
    status, first = await exchange(stack, "agent-a", user["access_token"])
    assert status == 200, first
    assert first["issued_token_type"] == ACCESS_TOKEN and first["token_type"] == "Bearer"
    assert "refresh_token" not in first and first["scope"] == "mcp:tools"
    delegated = claims_of(first["access_token"])
    assert delegated["sub"] == user_claims["sub"] and delegated["client_id"] == "agent-a"
    assert delegated["act"] == {"iss": stack.issuer, "sub": "agent-a"}
    assert delegated["tsid"] == user_claims["tsid"] and delegated["exp"] <= user_claims["exp"]
    assert delegated["aud"] == [stack.issuer + "/mcp"]
    assert await mcp_status(stack, first["access_token"]) == 200

    status, second = await exchange(stack, "agent-b", first["access_token"], post=True)
    assert status == 200, second
    assert claims_of(second["access_token"])["act"] == {
        "iss": stack.issuer, "sub": "agent-b", "act": {"iss": stack.issuer, "sub": "agent-a"}}

    status, _, _ = await call(stack, "POST", "/oauth/revoke", form={
        "token": user["refresh_token"], "client_id": client_id})
    assert status == 200
    assert await mcp_status(stack, first["access_token"]) == 401
    refused(await exchange(stack, "agent-a", user["access_token"]), "invalid_request",
            "login session ended")


async def test_may_act_names_the_only_actor(stack: Stack) -> None:
    """``may_act`` in the subject token (ours, or a trusted issuer's that may grant it) lets
    only the actor it names act: another delegate is refused with ``invalid_request`` (RFC 8693
    section 2.2.2). A trusted issuer's ``may_act`` must name this server as ``iss``."""
    ours_for_b = ours(stack, may_act={"sub": "agent-b"})
    refused(await exchange(stack, "agent-a", ours_for_b), "invalid_request",
            "may_act does not name this actor")
    status, answer = await exchange(stack, "agent-b", ours_for_b)
    assert status == 200, answer
    assert claims_of(answer["access_token"])["act"] == {"iss": stack.issuer, "sub": "agent-b"}

    external = corp_token(stack, may_act={"sub": "agent-b", "iss": stack.issuer})
    refused(await exchange(stack, "agent-a", external), "invalid_request",
            "may_act does not name this actor")
    status, answer = await exchange(stack, "agent-b", external)
    assert status == 200, answer
    claims = claims_of(answer["access_token"])
    assert claims["sub"] == f"{stack.corp.issuer}#bob" and "tsid" not in claims
    assert claims["act"] == {"iss": stack.issuer, "sub": "agent-b",
                             "act": {"iss": stack.corp.issuer}}
    refused(await exchange(stack, "agent-b", corp_token(stack, may_act={"sub": "agent-b"})),
            "invalid_request", "may_act does not name a party of this authorization server")
    refused(await exchange(stack, "agent-b", corp_token(
        stack, by=stack.hub, may_act={"sub": "agent-b", "iss": stack.issuer})),
        "invalid_request", "allowMayAct")  # hub is trusted, but not to grant may_act


async def test_prior_chains_are_reissued_bounded_and_bare(stack: Stack) -> None:
    """The subject token's own ``act`` nests under the new actor with each hop's ``iss`` and
    ``sub`` only (nothing else of it is signed again); a chain that would pass ten hops, or a
    hop that names no party, is refused."""
    chain = {"sub": "agent-x", "iss": "https://elsewhere.example", "extra": "dropped",
             "act": {"sub": "agent-y", "roles": ["admin"]}}
    status, answer = await exchange(stack, "agent-a", ours(stack, act=chain))
    assert status == 200, answer
    assert claims_of(answer["access_token"])["act"] == {
        "iss": stack.issuer, "sub": "agent-a", "act": {
            "iss": "https://elsewhere.example", "sub": "agent-x", "act": {"sub": "agent-y"}}}
    deep: dict[str, Any] = {"sub": "agent-0"}
    for depth in range(1, 10):
        deep = {"sub": f"agent-{depth}", "act": deep}
    refused(await exchange(stack, "agent-a", ours(stack, act=deep)), "invalid_request",
            "too long")
    refused(await exchange(stack, "agent-a", ours(stack, act={"act": {"sub": "x"}})),
            "invalid_request", "names no party")


async def test_a_trusted_issuers_allowlists(stack: Stack) -> None:
    """Without ``may_act``, a trusted issuer's token is exchanged only when its client
    (``azp``) is in ``allowedActors``, and only by its ``allowedDelegateClients``; the external
    actor is recorded under the delegate in ``act``."""
    allowed = corp_token(stack, azp=EXTERNAL_ACTOR)
    status, answer = await exchange(stack, "agent-a", allowed)
    assert status == 200, answer
    assert claims_of(answer["access_token"])["act"] == {
        "iss": stack.issuer, "sub": "agent-a",
        "act": {"iss": stack.corp.issuer, "sub": EXTERNAL_ACTOR}}
    refused(await exchange(stack, "agent-a", corp_token(stack, azp="someone-else")),
            "invalid_request", "allowedActors")
    # actorMatcher (CEL over the subject token's claims) admits a class of actors besides
    status, answer = await exchange(stack, "agent-a", corp_token(stack, azp="partner-7"))
    assert status == 200, answer
    assert claims_of(answer["access_token"])["act"]["act"]["sub"] == "partner-7"
    refused(await exchange(stack, "agent-a", corp_token(stack, azp="partner-7",
                                                        sub="mallory")),
            "invalid_request", "nor admitted by actorMatcher")
    refused(await exchange(stack, "agent-c", allowed), "invalid_request",
            "allowedDelegateClients")
    refused(await exchange(stack, "agent-a", corp_token(stack, azp=EXTERNAL_ACTOR,
                                                        aud="https://elsewhere.example")),
            "invalid_request", "aud")


async def test_an_actor_token_names_the_actor_for_its_own_client_only(stack: Stack) -> None:
    """``actor_token`` (one of ours, issued to the calling client) names the actor; one issued
    to another client is refused."""
    _, user, _ = await tokens(stack)
    _, first = await exchange(stack, "agent-a", user["access_token"])
    actor = claims_of(first["access_token"])["sub"]
    refused(await exchange(stack, "agent-b", user["access_token"],
                           actor_token=first["access_token"], actor_token_type=ACCESS_TOKEN),
            "invalid_request", "not issued to this client")
    status, answer = await exchange(stack, "agent-a", user["access_token"],
                                    actor_token=first["access_token"],
                                    actor_token_type=ACCESS_TOKEN)
    assert status == 200, answer
    assert claims_of(answer["access_token"])["act"] == {"iss": stack.issuer, "sub": actor}


async def test_what_token_exchange_refuses(stack: Stack) -> None:
    """The errors of RFC 8693 section 2.2.2 and RFC 6749 section 5.2, each for its reason."""
    token = corp_token(stack, azp=EXTERNAL_ACTOR)
    assert (await exchange(stack, "agent-a", token))[0] == 200
    public = await register(stack)
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": TOKEN_EXCHANGE, "subject_token": token,
        "subject_token_type": ACCESS_TOKEN, "client_id": public})
    assert (status, answer["error"]) == (400, "unauthorized_client")
    refused(await exchange(stack, "agent-a", token, secret="not-the-secret"), "invalid_client",
            "client authentication failed")
    refused(await exchange(stack, "agent-a", token, subject_token_type="urn:x"),
            "invalid_request", "subject_token_type")
    refused(await exchange(stack, "agent-a", token,
                           requested_token_type="urn:ietf:params:oauth:token-type:id_token"),
            "invalid_request", "requested_token_type")
    refused(await exchange(stack, "agent-a", token, actor_token=token), "invalid_request",
            "actor_token_type")
    refused(await exchange(stack, "agent-a", token, scope="mcp:admin"), "invalid_scope",
            "scope[0]")
    refused(await exchange(stack, "agent-a", token, resource="https://other.example/mcp"),
            "invalid_target", "audience")
    now = int(time.time())
    refused(await exchange(stack, "agent-a", corp_token(stack, azp=EXTERNAL_ACTOR,
                                                        iat=now - 600, exp=now - 120)),
            "invalid_request", "expired")
    forged = token.rsplit(".", 1)[0] + "." + "A" * 342
    refused(await exchange(stack, "agent-a", forged), "invalid_request", "signature")


def test_the_configuration_of_delegation(upstreams: tuple[int, Idp, Idp]) -> None:
    """``vmcp validate``: delegate secrets of at least 32 bytes; a trusted issuer's
    ``allowedDelegateClients`` name delegate clients, ``*`` alone and never with
    ``allowMayAct``; a delegate client's audiences are this server's resources."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    base = "spec.authServerConfig"
    docs = delegation_docs(issuer, corp, hub)
    assert validate(docs).ok
    docs[0]["stringData"]["agent-a"] = "short"
    expect_error(validate(docs), "client-secret", f"{base}.delegateClients[0].clientSecretRef")
    docs = delegation_docs(issuer, corp, hub)
    config = resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]
    config["trustedIssuers"][0]["allowedDelegateClients"] = ["agent-a", "nobody"]
    expect_error(validate(docs), "trusted-issuer",
                 f"{base}.trustedIssuers[0].allowedDelegateClients[1]")
    config["trustedIssuers"][0]["allowedDelegateClients"] = ["*"]
    expect_error(validate(docs), "trusted-issuer", f"{base}.trustedIssuers[0].allowMayAct")
    docs = delegation_docs(issuer, corp, hub)
    resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]["delegateClients"][1][
        "audiences"] = ["https://other.example/mcp"]
    expect_error(validate(docs), "resource", f"{base}.delegateClients[1].audiences[0]")
