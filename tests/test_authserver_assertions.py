"""The JWT-bearer grant (RFC 7523) of the embedded authorization server, for trusted issuers
(``trustedIssuers[].jwtBearerGrant``, ToolHive's names), over real HTTP.

The trusted issuer is ``corp``, a real ``oidc-provider`` (one of the upstreams of the other
authorization server tests): vmcp fetches its keys from the JWKS it serves. oidc-provider issues
no RFC 7523 assertions of its own (it has no such grant), so the test signs them with corp's own
signing key, which the fixture holds: the assertions are what corp would sign, verified against
what corp publishes. Each rule has its refusal; the replay rule is also shown across two
replicas sharing a real Redis (``running_redis``).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key

from .authserver_helpers import (
    Stack,
    as_docs,
    call,
    claims_of,
    issuer_of,
    mcp_status,
    running_stack,
)
from .fixtures.idp import Idp, served_jwks
from .fixtures.redis_cluster import redis_command, running_redis
from .gateway_helpers import running_gateway
from .helpers import expect_error, free_port, resource, validate
from .jwt_helpers import generate, mint, private_key_of

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
SUBJECT = "workload-123"


def trusting_docs(issuer: str, corp: Idp, hub: Idp, *, storage: dict[str, Any] | None = None,
                  keys: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    docs = as_docs(issuer, corp, hub, storage=storage, keys=keys)
    resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]["trustedIssuers"] = [{
        "issuerUrl": corp.issuer, "jwksUrl": corp.jwks_uri,
        "insecureAllowHTTP": True, "allowPrivateIPs": True,  # corp is on loopback http
        "jwtBearerGrant": {"maxAssertionAge": "5m", "subjectBindings": [
            {"subject": SUBJECT, "allowedResources": [issuer + "/mcp"]}]}}]
    return docs


def assertion(stack: Stack, *, key: Any = None, alg: str = "RS256", typ: str | None = "JWT",
              kid: str | None = None, **claims: Any) -> str:
    """An assertion corp signs (its key, its kid) for ``SUBJECT`` and this token endpoint, valid
    two minutes; ``claims`` change or (None) remove claims."""
    now = int(time.time())
    body = {"iss": stack.corp.issuer, "sub": SUBJECT, "aud": stack.issuer + "/oauth/token",
            "iat": now, "exp": now + 120, "jti": secrets.token_urlsafe(12), **claims}
    return mint(key or private_key_of(stack.corp.jwks_private["keys"][0]),
                {k: v for k, v in body.items() if v is not None}, alg=alg,
                kid=kid or stack.corp.kid, typ=typ)


async def present(stack: Stack, token: str, *, resource_url: str | None = None,
                  headers: list[tuple[str, str]] | None = None) -> tuple[int, dict[str, Any]]:
    form = {"grant_type": JWT_BEARER, "assertion": token,
            "resource": resource_url or stack.issuer + "/mcp"}
    status, _, answer = await call(stack, "POST", "/oauth/token", form=form, headers=headers)
    return status, answer


@pytest.fixture
async def stack(upstreams: tuple[int, Idp, Idp]) -> Any:
    _, corp, hub = upstreams
    async with running_stack(upstreams, trusting_docs(issuer_of(upstreams), corp, hub)) as stack:
        yield stack


async def test_an_assertion_buys_one_access_token_once(stack: Stack) -> None:
    """A good assertion gets an access token for its resource, of the issuer's subject
    (qualified by the issuer), no longer-lived than the assertion, no refresh token; the gateway
    takes it at /mcp. The same assertion again is refused (its jti is used up), and so is a
    second presentation of one without a jti (its hash stands in)."""
    _, _, metadata = await call(stack, "GET", "/.well-known/oauth-authorization-server")
    assert JWT_BEARER in metadata["grant_types_supported"]
    token = assertion(stack)
    status, answer = await present(stack, token)
    assert status == 200, answer
    assert answer["token_type"] == "Bearer" and "refresh_token" not in answer
    assert 0 < answer["expires_in"] <= 120
    claims = claims_of(answer["access_token"])
    assert claims["sub"] == f"{stack.corp.issuer}#{SUBJECT}"
    assert claims["aud"] == [stack.issuer + "/mcp"] and claims["iss"] == stack.issuer
    assert claims["client_id"].startswith("jwt-bearer-") and "tsid" not in claims
    assert claims["exp"] <= claims_of(token)["exp"]
    assert await mcp_status(stack, answer["access_token"]) == 200
    status, replayed = await present(stack, token)
    assert (status, replayed["error"]) == (400, "invalid_grant")
    assert "already used" in replayed["error_description"]
    by_issuer = assertion(stack, aud=[stack.issuer, "https://another.example"])
    assert (await present(stack, by_issuer))[0] == 200  # the issuer names this server too
    without_jti = assertion(stack, jti=None)
    assert (await present(stack, without_jti))[0] == 200
    assert (await present(stack, without_jti))[1]["error"] == "invalid_grant"


async def test_every_rule_of_an_assertion_has_its_refusal(stack: Stack) -> None:
    """Each assertion breaks one rule and is refused for it, before it is used up: the one
    refused for its resource still works for the resource its subject is bound to."""
    jwks = await trio.to_thread.run_sync(served_jwks, stack.corp)
    assert all(key.get("alg") == "RS256" for key in jwks["keys"])  # what pins PS256 out
    now = int(time.time())
    other = generate("RS256")
    refusals = {  # why: (the assertion, what the refusal says)
        "aud naming the resource": (assertion(stack, aud=stack.issuer + "/mcp"), "aud"),
        "aud naming another server": (assertion(stack, aud="https://elsewhere.example/token"),
                                      "aud"),
        "expired": (assertion(stack, iat=now - 100, exp=now - 5), "expired"),
        "alg not the key's (PS256 with corp's RSA key)": (assertion(stack, alg="PS256"),
                                                          "not the alg of the key"),
        "lives longer than maxAssertionAge": (assertion(stack, exp=now + 600),
                                              "maxAssertionAge"),
        "no iat": (assertion(stack, iat=None), "iat is missing"),
        "not valid yet (nbf)": (assertion(stack, nbf=now + 200, exp=now + 280),
                                "not valid yet"),
        "signed by another key under corp's kid": (assertion(stack, key=other),
                                                   "signature does not verify"),
        "an untrusted issuer": (assertion(stack, iss="https://not-trusted.example"),
                                "not a trusted issuer"),
        "a subject without a binding": (assertion(stack, sub="workload-999"),
                                        "subjectBindings"),
        "an ID-JAG, not a plain assertion": (assertion(stack, typ="oauth-id-jag+jwt"), "typ"),
        "an ID token (at_hash)": (assertion(stack, at_hash="abc"), "ID token"),
        "no sub": (assertion(stack, sub=None), "sub is missing"),
    }
    for why, (token, said) in refusals.items():
        status, answer = await present(stack, token)
        assert (status, answer.get("error")) == (400, "invalid_grant"), (why, answer)
        assert said in answer["error_description"], (why, answer)
    token = assertion(stack)
    status, answer = await present(stack, token, resource_url="https://other.example/mcp")
    assert (status, answer["error"]) == (400, "invalid_target")
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": JWT_BEARER, "assertion": token})
    assert (status, answer["error"]) == (400, "invalid_request")  # no resource
    status, answer = await present(stack, token, headers=[("authorization", "Basic bm86bm8=")])
    assert (status, answer["error"]) == (401, "invalid_client")  # credentials are checked
    assert (await present(stack, token))[0] == 200  # none of that used it up


async def test_a_replayed_assertion_is_refused_by_another_replica(
        upstreams: tuple[int, Idp, Idp], tmp_path: Path) -> None:
    """Two replicas share one issuer, keys and Redis: an assertion accepted at one is refused
    at the other, and of two presentations at once, one at each, exactly one is accepted. The
    used assertion is remembered until it expires (the Redis key's TTL), no longer."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    keys = (generate_signing_key("ec").decode(), generate_hmac_secret().decode())
    with running_redis(tmp_path) as (host, redis_port):
        docs = trusting_docs(issuer, corp, hub, keys=keys, storage={
            "type": "redis", "redis": {"addr": f"{host}:{redis_port}"}})
        port_b = free_port()
        async with running_gateway(docs, port=port) as (url_a, gateway_a), \
                running_gateway(docs, port=port_b) as (url_b, gateway_b):
            a = Stack(issuer, url_a, corp, hub, gateway_a)
            b = Stack(f"http://127.0.0.1:{port_b}", url_b, corp, hub, gateway_b)
            token = assertion(a)
            assert (await present(a, token))[0] == 200
            status, replayed = await present(b, token, resource_url=issuer + "/mcp")
            assert (status, replayed["error"]) == (400, "invalid_grant")
            [used] = redis_command(redis_port, "KEYS", "*assertion:*")
            assert 0 < int(redis_command(redis_port, "PTTL", used)) <= 120_000

            both = assertion(a)
            results: list[int] = []

            async def send(stack: Stack) -> None:
                results.append((await present(stack, both, resource_url=issuer + "/mcp"))[0])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, a)
                nursery.start_soon(send, b)
            assert sorted(results) == [200, 400]


async def test_a_trusted_issuers_keys_are_fetched_behind_the_ssrf_guard(
        upstreams: tuple[int, Idp, Idp]) -> None:
    """Without ``allowPrivateIPs`` the guard refuses corp's loopback JWKS URL: no key, so the
    assertion cannot be verified (503 ``temporarily_unavailable``), never accepted unchecked."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    docs = trusting_docs(issuer, corp, hub)
    resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]["trustedIssuers"][0][
        "allowPrivateIPs"] = False
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = Stack(issuer, url, corp, hub, gateway)
        status, answer = await present(stack, assertion(stack))
        assert (status, answer["error"]) == (503, "temporarily_unavailable"), answer
        assert "names a non-public address" in answer["error_description"], answer


def test_the_configuration_of_trusted_issuers(upstreams: tuple[int, Idp, Idp]) -> None:
    """``vmcp validate``: a subject may only be bound to resources this server issues tokens
    for, ``acceptedAudiences`` name this server (never a resource), ``maxAssertionAge`` is above
    zero, ``allowPrivateIPs`` needs ``jwksUrl``, and an ``actorMatcher`` must be CEL."""
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    cases: list[tuple[str, Any, str, str]] = [
        ("jwtBearerGrant.subjectBindings.0.allowedResources", ["https://other.example/mcp"],
         "resource", "jwtBearerGrant.subjectBindings[0].allowedResources[0]"),
        ("jwtBearerGrant.acceptedAudiences", [issuer + "/mcp"], "resource",
         "jwtBearerGrant.acceptedAudiences[0]"),
        ("jwtBearerGrant.maxAssertionAge", "0s", "duration-range",
         "jwtBearerGrant.maxAssertionAge"),
        ("jwksUrl", None, "required", "allowPrivateIPs"),
        ("actorMatcher", "has(claims.roles", "cel", "actorMatcher"),
    ]
    for field, value, rule, path in cases:
        docs = trusting_docs(issuer, corp, hub)
        trusted = resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"][
            "trustedIssuers"][0]
        node, *rest = field.split(".")
        target = trusted
        for part in (node, *rest)[:-1]:
            target = target[int(part)] if part.isdigit() else target[part]
        last = (node, *rest)[-1]
        if value is None:
            del target[last]
        else:
            target[last] = value
        expect_error(validate(docs), rule,
                     f"spec.authServerConfig.trustedIssuers[0].{path}")
