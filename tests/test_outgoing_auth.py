"""Boundary 2: what each backend receives, never the client's token.

``oidc-provider`` is the clients' issuer and, with the RFC 8693 grant added to it for the tests
(``tests/peers/idp.mjs``: no installable program offers token exchange), the exchange service.
Behind vmcp: ``alpha`` (an SDK 2.x backend, 2026-07-28, and an OAuth resource server that
accepts only the provider's JWTs for audience ``backend-a``: anything else is 401) whose
MCPExternalAuthConfig exchanges the caller's token for that audience, and ``beta`` (SDK 2.x,
handshake) with no outgoing auth. Both record the ``Authorization`` of every request they
receive.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from vmcp_trio.app.parts import GatewayProcess

from .authserver_helpers import Stack as AuthStack
from .authserver_helpers import as_docs, chained_upstreams, tokens
from .fixtures.idp import Idp, running_idp, served_jwks
from .fixtures.sdk_servers import BackendState, ResourceServer, make_server, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway

AUDIENCE = "https://vmcp.test/mcp"
GROUP = "quickstart"


@dataclass
class Stack:
    url: str
    idp: Idp
    alpha: BackendState
    beta: BackendState
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}}, token_exchange={
            "trustedIssuers": [], "audiences": {"backend-a": {"scope": "a:read",
                                                              "accessTokenTTL": 600}}}) as idp:
        yield idp


def docs_for(idp: Idp, alpha_url: str, beta_url: str,
             source: str = "discovered") -> list[dict[str, Any]]:
    """alpha exchanges (its own externalAuthConfigRef with ``discovered``, the VirtualMCPServer's
    ``backends`` map with ``inline``), beta has none; alpha's calls time out after 3 s."""
    docs = copy.deepcopy(quickstart_docs())
    client = idp.clients["confidential"]
    docs[:0] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sts"},
         "stringData": {"secret": client.client_secret}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPExternalAuthConfig",
         "metadata": {"name": "alpha-exchange"},
         "spec": {"type": "tokenExchange", "tokenExchange": {
             "tokenUrl": idp.token_endpoint, "clientId": client.client_id,
             "clientSecretRef": {"name": "sts", "key": "secret"}, "audience": "backend-a",
             "scopes": ["a:read"], "insecureAllowHTTP": True}}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
         "metadata": {"name": "alpha"},
         "spec": {"groupRef": {"name": GROUP}, "url": alpha_url,
                  **({"externalAuthConfigRef": {"name": "alpha-exchange"}}
                     if source == "discovered" else {})}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
         "metadata": {"name": "beta"}, "spec": {"groupRef": {"name": GROUP}, "url": beta_url}},
    ]
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfig": {"type": "inline", "inline": {
        "issuer": idp.issuer, "audience": AUDIENCE, "clientId": client.client_id,
        "insecureAllowHTTP": True, "jwksAllowPrivateIP": True}}}
    vmcp["spec"]["outgoingAuth"] = {"source": source}
    if source == "inline":
        vmcp["spec"]["outgoingAuth"]["backends"] = {"alpha": {
            "type": "externalAuthConfigRef",
            "externalAuthConfigRef": {"name": "alpha-exchange"}}}
    vmcp["spec"]["operational"] = {"timeouts": {"perWorkload": {"alpha": "3s"}}}
    return docs


@pytest.fixture(params=["discovered", "inline"])
async def stack(idp: Idp, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    jwks = await trio.to_thread.run_sync(served_jwks, idp)
    alpha, alpha_state = make_server("alpha", resource_server=ResourceServer(
        idp.issuer, "backend-a", jwks))
    beta, beta_state = make_server("beta")
    await trio.to_thread.run_sync(idp.set_exchange_mode, "ok")
    async with serving(alpha, alpha_state) as alpha_url, \
            serving(beta, beta_state, handshake_only=True) as beta_url, \
            running_gateway(docs_for(idp, alpha_url, beta_url, str(request.param))) as (
                url, gateway):
        yield Stack(url, idp, alpha_state, beta_state, gateway)


async def client_token(idp: Idp, client: str = "confidential") -> str:
    answer = await trio.to_thread.run_sync(
        lambda: idp.client_credentials_token(client, resource=AUDIENCE))
    return str(answer["access_token"])


async def session(stack: Stack, token: str) -> RawClient:
    client = RawClient(stack.url)
    client.token = token
    assert (await client.initialize()).status == 200
    return client


async def add(client: RawClient, tool: str) -> dict[str, Any]:
    reply = await client.request("tools/call", {"name": tool, "arguments": {"a": 1, "b": 2}})
    return reply.messages[-1]


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


async def test_each_backend_gets_its_own_credential_never_the_clients(stack: Stack) -> None:
    token = await client_token(stack.idp)
    client = await session(stack, token)
    try:
        assert (await add(client, "alpha_add"))["result"]["structuredContent"]["backend"] == \
            "alpha"
        assert (await add(client, "beta_add"))["result"]["structuredContent"]["backend"] == \
            "beta"
    finally:
        await client.aclose()
    seen = [a for a in stack.alpha.authorizations if a]
    assert seen and all(a.startswith("Bearer ") for a in seen)
    assert token not in stack.alpha.authorizations and token not in "".join(
        stack.beta.authorizations)
    exchanged = claims_of(seen[-1].removeprefix("Bearer "))
    assert exchanged["aud"] == "backend-a" and exchanged["iss"] == stack.idp.issuer
    assert exchanged["sub"] == claims_of(token)["sub"]
    assert all(a == "" for a in stack.beta.authorizations)
    assert stack.alpha.refused == 0  # alpha, as a resource server, accepted every request


async def test_two_hundred_concurrent_calls_make_one_exchange(stack: Stack) -> None:
    before = (await trio.to_thread.run_sync(stack.idp.exchange_stats))["total"]
    token = await client_token(stack.idp)
    client = await session(stack, token)
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(add, client, "alpha_add")
    finally:
        await client.aclose()
    after = (await trio.to_thread.run_sync(stack.idp.exchange_stats))["total"]
    assert after - before == 1
    exchanger = next(iter(stack.gateway.exchangers.values()))
    assert exchanger.exchanges >= 1


async def test_an_exchange_failure_fails_only_that_backend(stack: Stack) -> None:
    """The session starts while the exchange works; then the service fails, and a new token of
    the same client (a cache miss) cannot be exchanged: alpha's call is a JSON-RPC error naming
    alpha, beta's call works."""
    client = await session(stack, await client_token(stack.idp, "other"))
    try:
        assert "result" in await add(client, "alpha_add")  # lists the tools, while it works
        await trio.to_thread.run_sync(stack.idp.set_exchange_mode, "fail")
        client.token = await client_token(stack.idp, "other")
        failed = await add(client, "alpha_add")
        assert failed["error"]["data"]["backend"] == "alpha"
        assert "exchange" in failed["error"]["message"]
        assert (await add(client, "beta_add"))["result"]["structuredContent"]["total"] == 3
    finally:
        await client.aclose()
        await trio.to_thread.run_sync(stack.idp.set_exchange_mode, "ok")


async def test_a_slow_exchange_fails_that_backend_within_its_timeout(stack: Stack) -> None:
    """The exchange service hangs: alpha's call fails within alpha's timeout (3 s) with an
    error naming alpha, while beta answers at once, concurrently."""
    client = await session(stack, await client_token(stack.idp, "other"))
    try:
        assert "result" in await add(client, "alpha_add")
        await trio.to_thread.run_sync(lambda: stack.idp.set_exchange_mode("slow", 20))
        client.token = await client_token(stack.idp, "other")
        results: dict[str, Any] = {}

        async def call(tool: str) -> None:
            results[tool] = await add(client, tool)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "alpha_add")
                nursery.start_soon(call, "beta_add")
        assert results["alpha_add"]["error"]["data"]["backend"] == "alpha"
        assert results["beta_add"]["result"]["structuredContent"]["total"] == 3
    finally:
        await client.aclose()
        await trio.to_thread.run_sync(stack.idp.set_exchange_mode, "ok")


@pytest.fixture(scope="module")
def exchanging_upstreams() -> Iterator[tuple[int, Idp, Idp]]:
    with chained_upstreams(token_exchange={"trustedIssuers": [], "audiences": {
            "backend-a": {"scope": "a:read", "accessTokenTTL": 600}}}) as started:
        yield started


@pytest.mark.parametrize("subject_type", ["access_token", "id_token"])
async def test_exchange_of_a_stored_upstream_token(
        exchanging_upstreams: tuple[int, Idp, Idp], subject_type: str) -> None:
    """Both strategies in one deployment, with the embedded authorization server. delta,
    ``upstreamInject`` of corp, receives the user's stored corp access token. gamma,
    ``tokenExchange`` with ``subjectProviderName: corp``, receives corp's exchange of that token
    (or, with ``subjectTokenType: id_token``, of corp's ID token) for its audience, naming the
    user corp knows. Neither receives the user's vmcp token."""
    port, corp, hub = exchanging_upstreams
    issuer = f"http://127.0.0.1:{port}"
    gamma, gamma_state = make_server("gamma")
    delta, delta_state = make_server("delta")
    client_info = corp.clients["confidential"]
    async with serving(gamma, gamma_state) as gamma_url, \
            serving(delta, delta_state) as delta_url:
        docs = as_docs(issuer, corp, hub)
        docs[:0] = [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "corp-sts"},
             "stringData": {"secret": client_info.client_secret}},
            {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPExternalAuthConfig",
             "metadata": {"name": "corp-exchange"},
             "spec": {"type": "tokenExchange", "tokenExchange": {
                 "tokenUrl": corp.token_endpoint, "clientId": client_info.client_id,
                 "clientSecretRef": {"name": "corp-sts", "key": "secret"},
                 "audience": "backend-a", "subjectProviderName": "corp",
                 "subjectTokenType": subject_type, "insecureAllowHTTP": True}}},
            {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
             "metadata": {"name": "gamma"},
             "spec": {"groupRef": {"name": GROUP}, "url": gamma_url,
                      "externalAuthConfigRef": {"name": "corp-exchange"}}},
            {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPExternalAuthConfig",
             "metadata": {"name": "corp-inject"},
             "spec": {"type": "upstreamInject", "upstreamInject": {"providerName": "corp"}}},
            {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPServer",
             "metadata": {"name": "delta"},
             "spec": {"groupRef": {"name": GROUP}, "url": delta_url,
                      "externalAuthConfigRef": {"name": "corp-inject"}}}]
        next(d for d in docs if d["kind"] == "VirtualMCPServer")["spec"]["outgoingAuth"] = {
            "source": "discovered"}
        async with running_gateway(docs, port=port) as (url, gateway):
            _, answer, _ = await tokens(AuthStack(issuer, url, corp, hub, gateway))
            client = RawClient(url)
            client.token = answer["access_token"]
            try:
                assert (await client.initialize()).status == 200
                assert "result" in await add(client, "gamma_add")
                assert "result" in await add(client, "delta_add")
            finally:
                await client.aclose()
            assert gateway.authserver is not None
            stored = await gateway.authserver.upstream_access_token(
                claims_of(answer["access_token"])["tsid"], "corp")
    # upstreamInject: delta got the user's stored corp access token itself
    assert stored is not None
    assert {a for a in delta_state.authorizations if a} == {f"Bearer {stored}"}
    assert answer["access_token"] not in "".join(delta_state.authorizations)
    # tokenExchange: gamma got corp's exchange of it (or of the ID token)
    received = [a.removeprefix("Bearer ") for a in gamma_state.authorizations if a]
    assert received
    exchanged = claims_of(received[-1])
    assert exchanged["aud"] == "backend-a" and exchanged["iss"] == corp.issuer
    assert exchanged["sub"] == "alice"
    assert answer["access_token"] not in "".join(gamma_state.authorizations)


async def test_long_lived_backend_streams_use_the_sessions_latest_token(stack: Stack) -> None:
    """alpha's listen stream belongs to the session, not to the request that opened it: when
    it reopens (here for a new resource subscription), its credential is exchanged from the
    token the client sends now."""
    client = await session(stack, await client_token(stack.idp))
    try:
        assert "result" in await add(client, "alpha_add")
        client.token = await client_token(stack.idp)
        subscribed = await client.request("resources/subscribe", {"uri": "alpha://static"})
        assert "result" in subscribed.messages[-1]
        assert "result" in await add(client, "alpha_add")
    finally:
        await client.aclose()
    listens = [auth for method, auth in stack.alpha.requests if method == "subscriptions/listen"]
    calls = [auth for method, auth in stack.alpha.requests if method == "tools/call"]
    assert len(listens) >= 2 and calls[0] != calls[-1]
    assert listens[0] == calls[0] and listens[-1] == calls[-1]
