"""``obo`` (Entra ID's on-behalf-of) and ``xaa`` (Cross-App Access, ID-JAG) through the gateway.

The identity providers are ``oidc-provider`` (``tests/peers/idp.mjs``): the users' logins, ID and
access tokens, keys and client authentication are its own. The grants no installable program
offers are our stand-ins on top of it (``tests/peers/grants.mjs``): Entra's on-behalf-of request
at ``/<tenant>/oauth2/v2.0/token``, the enterprise IdP's token exchange of an ID token for an
ID-JAG, and the resource authorization server's JWT-bearer grant of that ID-JAG. Each backend is
an SDK 2.x server that is an OAuth resource server: it accepts only JWTs of the issuer and
audience it expects (anything else is 401), and records the ``Authorization`` it received.
The last tests give the ID-JAG checks wrong answers from a token endpoint written here (a
stand-in too: a real IdP would not send them on demand).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.auth.caller import Caller
from vmcp_trio.auth.identity import Identity
from vmcp_trio.auth.outgoing.delegation import CrossAppAccess
from vmcp_trio.auth.outgoing.subject import CredentialError
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import CrossAppAccessAuth

from .authserver_helpers import Stack as AuthStack
from .authserver_helpers import as_docs, claims_of, tokens
from .fixtures.idp import Idp, running_idp, served_jwks
from .fixtures.sdk_servers import BackendState, ResourceServer, make_server, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import free_port
from .scripted_http import answering

AUDIENCE = "https://vmcp.test/mcp"
GROUP = "quickstart"
TENANT = "contoso.onmicrosoft.com"
OBO_SCOPE = "api://backend-b/.default"
RESOURCE = "https://xray.example.test/mcp"


async def add(client: RawClient, tool: str) -> dict[str, Any]:
    reply = await client.request("tools/call", {"name": tool, "arguments": {"a": 1, "b": 2}})
    return reply.messages[-1]


async def session(url: str, token: str) -> RawClient:
    client = RawClient(url)
    client.token = token
    assert (await client.initialize()).status == 200
    return client


# --- obo -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entra() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}}, grants={"onBehalfOf": {
            "tenant": TENANT, "assertionAudience": AUDIENCE,
            "scopes": {OBO_SCOPE: {"audience": "backend-b", "scope": "b:read"}}}}) as idp:
        yield idp


def obo_docs(entra: Idp, gamma_url: str, beta_url: str) -> list[dict[str, Any]]:
    docs = copy.deepcopy(quickstart_docs())
    docs[:0] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "entra"},
         "stringData": {"secret": entra.clients["confidential"].client_secret}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPExternalAuthConfig",
         "metadata": {"name": "gamma-obo"},
         "spec": {"type": "obo", "obo": {
             "tenantId": TENANT, "authority": entra.issuer, "clientId": "confidential",
             "clientSecretRef": {"name": "entra", "key": "secret"}, "scopes": [OBO_SCOPE]}}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
         "metadata": {"name": "gamma"},
         "spec": {"groupRef": {"name": GROUP}, "url": gamma_url,
                  "externalAuthConfigRef": {"name": "gamma-obo"}}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
         "metadata": {"name": "beta"}, "spec": {"groupRef": {"name": GROUP}, "url": beta_url}},
    ]
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfig": {"type": "inline", "inline": {
        "issuer": entra.issuer, "audience": AUDIENCE, "clientId": "confidential",
        "insecureAllowHTTP": True, "jwksAllowPrivateIP": True}}}
    vmcp["spec"]["outgoingAuth"] = {"source": "discovered"}
    return docs


@dataclass
class OboStack:
    url: str
    entra: Idp
    gamma: BackendState
    beta: BackendState


@pytest.fixture
async def obo(entra: Idp) -> AsyncIterator[OboStack]:
    jwks = await trio.to_thread.run_sync(served_jwks, entra)
    gamma, gamma_state = make_server("gamma", resource_server=ResourceServer(
        entra.issuer, "backend-b", jwks))
    beta, beta_state = make_server("beta")
    async with serving(gamma, gamma_state) as gamma_url, serving(beta, beta_state) as beta_url, \
            running_gateway(obo_docs(entra, gamma_url, beta_url)) as (url, _):
        yield OboStack(url, entra, gamma_state, beta_state)


async def login(idp: Idp, user: str) -> str:
    answer = await trio.to_thread.run_sync(partial(idp.login_token, user, resource=AUDIENCE))
    return str(answer["access_token"])


async def test_obo_sends_the_token_entra_issued_on_behalf_of_the_user(obo: OboStack) -> None:
    """alice's token (for the gateway) is the assertion of one on-behalf-of grant; gamma
    receives the token issued for its own audience, naming alice, on every call; beta and gamma
    never see alice's token."""
    before = (await trio.to_thread.run_sync(obo.entra.grant_stats))["obo"]
    token = await login(obo.entra, "alice")
    client = await session(obo.url, token)
    try:
        for _ in range(3):
            assert (await add(client, "gamma_add"))["result"]["structuredContent"][
                "backend"] == "gamma"
        assert "result" in await add(client, "beta_add")
    finally:
        await client.aclose()
    received = {a.removeprefix("Bearer ") for a in obo.gamma.authorizations if a}
    assert len(received) == 1 and token not in received
    claims = claims_of(received.pop())
    assert (claims["iss"], claims["aud"], claims["sub"]) == (obo.entra.issuer, "backend-b",
                                                             "alice")
    assert obo.gamma.refused == 0
    assert (await trio.to_thread.run_sync(obo.entra.grant_stats))["obo"] - before == 1
    assert token not in "".join(obo.beta.authorizations)


async def test_an_obo_failure_fails_that_backend_alone(obo: OboStack) -> None:
    client = await session(obo.url, await login(obo.entra, "bob"))
    try:
        assert "result" in await add(client, "gamma_add")
        await trio.to_thread.run_sync(obo.entra.set_grant_mode, "fail")
        try:
            client.token = await login(obo.entra, "bob")  # a new assertion: a cache miss
            failed = await add(client, "gamma_add")
        finally:
            await trio.to_thread.run_sync(obo.entra.set_grant_mode, "ok")
        assert failed["error"]["data"]["backend"] == "gamma"
        assert "on-behalf-of grant" in failed["error"]["message"]
        assert client.token not in str(failed)
        assert (await add(client, "beta_add"))["result"]["structuredContent"]["total"] == 3
    finally:
        await client.aclose()


# --- xaa -----------------------------------------------------------------------------------------


@dataclass
class XaaStack:
    issuer: str
    url: str
    corp: Idp
    hub: Idp
    ras: Idp
    gateway: GatewayProcess
    xray: BackendState


@pytest.fixture(scope="module")
def xaa_peers() -> Iterator[tuple[int, Idp, Idp, Idp]]:
    """vmcp's port; corp, the enterprise IdP (the embedded authorization server's first
    upstream, which issues ID-JAGs); hub, a second upstream; ras, the resource's authorization
    server, trusting corp's ID-JAGs for its client ``confidential``."""
    port = free_port()
    callback = (f"http://127.0.0.1:{port}/oauth/callback",)
    with running_idp(redirect_uris=callback, grants={"idJag": {"clientId": "confidential"}}
                     ) as corp, running_idp(redirect_uris=callback) as hub, \
            running_idp(resources={}, grants={"jwtBearer": {
                "trustedIssuers": [{"issuer": corp.issuer, "jwksUri": corp.jwks_uri}],
                "audience": "backend-x", "scope": "x:read x:write"}}) as ras:
        yield port, corp, hub, ras


@pytest.fixture
async def xaa(xaa_peers: tuple[int, Idp, Idp, Idp]) -> AsyncIterator[XaaStack]:
    port, corp, hub, ras = xaa_peers
    issuer = f"http://127.0.0.1:{port}"
    jwks = await trio.to_thread.run_sync(served_jwks, ras)
    xray, xray_state = make_server("xray", resource_server=ResourceServer(
        ras.issuer, "backend-x", jwks))
    async with serving(xray, xray_state) as xray_url:
        docs = as_docs(issuer, corp, hub)
        docs[:0] = [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ras"},
             "stringData": {"secret": ras.clients["confidential"].client_secret}},
            {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPExternalAuthConfig",
             "metadata": {"name": "xray-xaa"},
             "spec": {"type": "xaa", "xaa": {
                 "idpTokenUrl": corp.token_endpoint, "idpClientId": "confidential",
                 "idpClientSecretRef": {"name": "upstreams", "key": "corp"},
                 "targetTokenUrl": ras.token_endpoint, "targetClientId": "confidential",
                 "targetClientSecretRef": {"name": "ras", "key": "secret"},
                 "targetAudience": ras.issuer, "targetResource": RESOURCE,
                 "scopes": ["x:read"]}}},
            {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
             "metadata": {"name": "xray"},
             "spec": {"groupRef": {"name": GROUP}, "url": xray_url,
                      "externalAuthConfigRef": {"name": "xray-xaa"}}}]
        next(d for d in docs if d["kind"] == "VirtualMCPServer")["spec"]["outgoingAuth"] = {
            "source": "discovered"}
        async with running_gateway(docs, port=port) as (url, gateway):
            yield XaaStack(issuer, url, corp, hub, ras, gateway, xray_state)


async def vmcp_token(stack: XaaStack, user: str) -> str:
    _, answer, _ = await tokens(AuthStack(stack.issuer, stack.url, stack.corp, stack.hub,
                                          stack.gateway), user)
    return str(answer["access_token"])


async def test_xaa_trades_the_users_id_token_for_an_id_jag_then_an_access_token(
        xaa: XaaStack) -> None:
    """alice logs in through the embedded authorization server (corp first). xray's calls
    carry the access token ras issued for the ID-JAG corp issued for alice's corp ID token
    (the first upstream's, as ToolHive's operator defaults ``subjectProviderName``): one ID-JAG
    and one grant for several calls; never alice's vmcp token."""
    before = [(await trio.to_thread.run_sync(peer.grant_stats))
              for peer in (xaa.corp, xaa.ras)]
    token = await vmcp_token(xaa, "alice")
    client = await session(xaa.url, token)
    try:
        for _ in range(3):
            assert (await add(client, "xray_add"))["result"]["structuredContent"][
                "backend"] == "xray"
    finally:
        await client.aclose()
    received = {a.removeprefix("Bearer ") for a in xaa.xray.authorizations if a}
    assert len(received) == 1 and token not in received
    claims = claims_of(received.pop())
    assert (claims["iss"], claims["aud"], claims["sub"], claims["scope"]) == (
        xaa.ras.issuer, "backend-x", "alice", "x:read")
    assert xaa.xray.refused == 0
    after = [(await trio.to_thread.run_sync(peer.grant_stats)) for peer in (xaa.corp, xaa.ras)]
    assert after[0]["idJag"] - before[0]["idJag"] == 1
    assert after[1]["jwtBearer"] - before[1]["jwtBearer"] == 1


async def test_an_xaa_failure_fails_that_backend_alone(xaa: XaaStack) -> None:
    """bob's session opens while it works; then the IdP stops issuing ID-JAGs, and after a new
    login (a new ID token: a cache miss) bob's call to xray is a JSON-RPC error naming xray and
    the step that failed; the other backends answer."""
    client = await session(xaa.url, await vmcp_token(xaa, "bob"))
    assert "result" in await add(client, "xray_add")
    await trio.to_thread.run_sync(xaa.corp.set_grant_mode, "fail")
    try:
        client.token = await vmcp_token(xaa, "bob")
        failed = await add(client, "xray_add")
        assert failed["error"]["data"]["backend"] == "xray"
        assert "ID-JAG request" in failed["error"]["message"]
        assert "result" in await add(client, "clock_add")
    finally:
        await trio.to_thread.run_sync(xaa.corp.set_grant_mode, "ok")
        await client.aclose()


# --- what an ID-JAG must be -------------------------------------------------------------------


def _jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'oauth-id-jag+jwt'})}.{part(claims)}.c2ln"


@pytest.fixture
def misbehaving_idp() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A token endpoint written here that answers the ID-JAG request with what each test puts
    in the list (a stand-in: a real IdP would not send these wrong answers on demand)."""
    answers: list[dict[str, Any]] = []
    with answering(lambda _: (200, "application/json", json.dumps(answers.pop(0)).encode())
                   ) as idp:
        yield f"{idp}/token", answers


ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
BAD_ID_JAGS = [
    ({"issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "N_A",
      "claims": {"aud": "https://as.x", "resource": RESOURCE}}, "issued_token_type"),
    ({"issued_token_type": ID_JAG, "token_type": "Bearer",
      "claims": {"aud": "https://as.x", "resource": RESOURCE}}, "token_type is not N_A"),
    ({"issued_token_type": ID_JAG, "token_type": "N_A",
      "claims": {"aud": "https://as.evil", "resource": RESOURCE}}, "not for audience"),
    ({"issued_token_type": ID_JAG, "token_type": "N_A",
      "claims": {"aud": ["https://as.x", "https://as.evil"], "resource": RESOURCE}},
     "not for audience"),
    ({"issued_token_type": ID_JAG, "token_type": "N_A",
      "claims": {"aud": "https://as.x", "resource": "https://evil.example/mcp"}},
     "not for resource"),
    ({"issued_token_type": ID_JAG, "token_type": "N_A", "access_token": "not-a-jwt"},
     "is not a JWT"),
]


@pytest.mark.parametrize(("answer", "words"), BAD_ID_JAGS, ids=[b[1] for b in BAD_ID_JAGS])
async def test_a_wrong_id_jag_is_never_presented(
        misbehaving_idp: tuple[str, list[dict[str, Any]]], answer: dict[str, Any],
        words: str) -> None:
    """The confused-deputy checks ToolHive makes: an ID-JAG for another audience or resource,
    or not said to be one, is refused before the target's token endpoint is asked."""
    url, answers = misbehaving_idp
    claims = answer.pop("claims", None)
    answers.append({"access_token": _jwt(claims) if claims else "", "expires_in": 300,
                    **answer})
    plan = CrossAppAccessAuth(config="t/x", idp_token_url=url,
                              target_token_url="http://127.0.0.1:9/never", audience="https://as.x",
                              resource=RESOURCE, subject_provider=None)
    strategy = CrossAppAccess(plan, HttpClient(), None)
    who = Caller(Identity("https://idp.test", "alice"), "the-id-token.x.y")
    with pytest.raises(CredentialError, match=words):
        await strategy.headers(who)
    assert strategy.target.requests == 0
