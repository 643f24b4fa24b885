"""``awsSts`` against a real STS emulator, and ``unauthenticated`` beside it.

STS is moto's server (``moto[server]``, PyPI), started as a process on a free loopback port and
named to vmcp by ``AWS_ENDPOINT_URL_STS``, as the AWS SDKs read it. The users log in at
``oidc-provider`` (``tests/peers/idp.mjs``): alice is in the ``admins`` group, bob in none. The
backend ``alpha`` (SDK 2.x) sits behind a SigV4 verifier written here, as an AWS service would
check its callers: it looks the access key up in moto's own state (``/moto-api/data.json``),
recomputes the signature with botocore over the headers the request says it signed, and answers
403 to anything else. ``beta``'s MCPExternalAuthConfig is ``unauthenticated``. The last test's
STS answers (AWS's error document, broken answers) come from a stand-in written here.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import hypercorn.trio
import pytest
import trio
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypercorn.config import Config
from starlette.types import ASGIApp, Receive, Scope, Send

from vmcp_trio.auth.caller import Caller
from vmcp_trio.auth.identity import Identity
from vmcp_trio.auth.outgoing.aws_sts import AwsSts
from vmcp_trio.auth.outgoing.sigv4 import OutgoingRequest
from vmcp_trio.auth.outgoing.subject import CredentialError
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import AwsStsAuth, RoleRule

from .fixtures.idp import Idp, running_idp
from .fixtures.sdk_servers import BackendState, make_server, replaying, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import free_port, stop_process
from .scripted_http import answering

AUDIENCE = "https://vmcp.test/mcp"
GROUP = "quickstart"
ADMIN_ROLE = "arn:aws:iam::123456789012:role/mcp-admin"
READER_ROLE = "arn:aws:iam::123456789012:role/mcp-reader"
MOTO_SERVER = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "moto_server"
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})")


@dataclass
class Moto:
    url: str

    def reset_auth(self, count: str) -> None:
        """moto's switch: "0" makes it demand signed requests (so AssumeRoleWithWebIdentity,
        unsigned by design, fails), "inf" lets everything through again."""
        httpx2.post(f"{self.url}/moto-api/reset-auth", content=count.encode(), timeout=10)

    def assumed_roles(self) -> list[dict[str, Any]]:
        state = httpx2.get(f"{self.url}/moto-api/data.json", timeout=10).json()
        return list(state.get("sts", {}).get("AssumedRole", []))


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    port = free_port()
    process = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx2.get(f"{url}/moto-api/data.json", timeout=1)
                break
            except httpx2.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        yield Moto(url)
    finally:
        stop_process(process)


@dataclass
class Verified:
    """What the verifier in front of alpha accepted and refused."""

    accepted: list[dict[str, str]] = field(default_factory=list)
    """(access key, role ARN, session name) of every request whose signature verified."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(JSON-RPC method, why) of every request refused."""


def sigv4_verifier(app: ASGIApp, moto: Moto, verified: Verified) -> ASGIApp:
    """``app`` behind a SigV4 check of every request, with the secret of the temporary
    credentials moto issued for the access key the request names."""

    async def verify(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        problem = await trio.to_thread.run_sync(check, scope, headers, body, moto, verified)
        if problem is not None:
            method = json.loads(body).get("method", "") if body else scope["method"]
            verified.refused.append((method, problem))
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": problem.encode()})
            return
        await app(scope, replaying(body, receive), send)

    return verify


def check(scope: Scope, headers: dict[str, str], body: bytes, moto: Moto,
          verified: Verified) -> str | None:
    found = _AUTHORIZATION.fullmatch(headers.get("authorization", ""))
    if found is None:
        return "no SigV4 authorization"
    role = next((r for r in moto.assumed_roles() if r["access_key_id"] == found["key"]), None)
    if role is None:
        return "an access key STS never issued"
    if (found["region"], found["service"]) != ("us-east-1", "aws-mcp"):
        return "another region or service"
    if headers.get("x-amz-security-token") != role["session_token"]:
        return "not the session token of these credentials"
    names = found["signed"].split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "host and x-amz-date must be signed"
    query = scope["query_string"].decode()
    request = AWSRequest(method=scope["method"], data=body,
                         url=f"http://{headers['host']}{scope['raw_path'].decode()}"
                             + (f"?{query}" if query else ""),
                         headers={name: headers[name] for name in names})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials(found["key"], role["secret_access_key"],
                                   role["session_token"]), "aws-mcp", "us-east-1")
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)),
                                request)
    if expected != found["signature"]:
        return "the signature does not verify"
    verified.accepted.append({"key": found["key"], "role": role["role_arn"],
                              "session": role["session_name"]})
    return None


@asynccontextmanager
async def signed_backend(moto: Moto, verified: Verified) -> AsyncIterator[str]:
    server, _ = make_server("alpha")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.loglevel = "WARNING"
    config.accesslog = config.errorlog = None
    app = sigv4_verifier(server.streamable_http_app(streamable_http_path="/mcp"), moto,
                         verified)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn.trio.serve, app, config,
                                            shutdown_trigger=trio.sleep_forever))
        yield f"{binds[0]}/mcp"
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with running_idp(resources={AUDIENCE: {}}, groups={"alice": ["admins", "staff"]}) as idp:
        yield idp


def docs_for(idp: Idp, alpha_url: str, beta_url: str) -> list[dict[str, Any]]:
    docs = copy.deepcopy(quickstart_docs())
    docs[:0] = [
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPExternalAuthConfig",
         "metadata": {"name": "aws"},
         "spec": {"type": "awsSts", "awsSts": {
             "region": "us-east-1", "sessionDuration": 900, "fallbackRoleArn": READER_ROLE,
             "roleMappings": [{"claim": "admins", "roleArn": ADMIN_ROLE, "priority": 1}]}}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPExternalAuthConfig",
         "metadata": {"name": "none"}, "spec": {"type": "unauthenticated"}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
         "metadata": {"name": "alpha"},
         "spec": {"groupRef": {"name": GROUP}, "url": alpha_url,
                  "externalAuthConfigRef": {"name": "aws"}}},
        {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
         "metadata": {"name": "beta"},
         "spec": {"groupRef": {"name": GROUP}, "url": beta_url,
                  "externalAuthConfigRef": {"name": "none"}}},
    ]
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfig": {"type": "inline", "inline": {
        "issuer": idp.issuer, "audience": AUDIENCE, "clientId": "vmcp",
        "insecureAllowHTTP": True, "jwksAllowPrivateIP": True}}}
    vmcp["spec"]["outgoingAuth"] = {"source": "discovered"}
    return docs


async def login(idp: Idp, user: str) -> str:
    answer = await trio.to_thread.run_sync(
        partial(idp.login_token, user, resource=AUDIENCE))
    return str(answer["access_token"])


async def add(client: RawClient, tool: str) -> dict[str, Any]:
    reply = await client.request("tools/call", {"name": tool, "arguments": {"a": 1, "b": 2}})
    return reply.messages[-1]


@dataclass
class Stack:
    url: str
    strategy: AwsSts
    verified: Verified
    beta: BackendState


@pytest.fixture
async def stack(idp: Idp, moto: Moto, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.url)
    verified = Verified()
    beta, beta_state = make_server("beta")
    async with signed_backend(moto, verified) as alpha_url, \
            serving(beta, beta_state) as beta_url, \
            running_gateway(docs_for(idp, alpha_url, beta_url)) as (url, gateway):
        strategy = gateway.links.strategies["alpha"]
        assert isinstance(strategy, AwsSts)
        yield Stack(url, strategy, verified, beta_state)


async def session(stack: Stack, token: str) -> RawClient:
    client = RawClient(stack.url)
    client.token = token
    assert (await client.initialize()).status == 200
    return client


async def test_each_request_is_signed_with_the_role_credentials_sts_issued_for_the_user(
        stack: Stack, idp: Idp) -> None:
    """alice (admins) gets the admin role, bob the fallback; each user's credentials come from
    one AssumeRoleWithWebIdentity, named after the user, and sign every request; beta
    (``unauthenticated``) receives no credential at all, and no backend the client's token."""
    tokens = {user: await login(idp, user) for user in ("alice", "bob")}
    for token in tokens.values():
        client = await session(stack, token)
        try:
            for _ in range(3):
                assert (await add(client, "alpha_add"))["result"]["structuredContent"][
                    "backend"] == "alpha"
            assert "result" in await add(client, "beta_add")
        finally:
            await client.aclose()
    # no signed request was refused; the unsigned ones are the health checks, which have no
    # caller (as ToolHive's): an AWS service's 403 to them still says the backend is up
    assert {why for _, why in stack.verified.refused} <= {"no SigV4 authorization"}
    assert {method for method, _ in stack.verified.refused} <= {
        "server/discover", "initialize", "ping"}
    roles = {(seen["session"], seen["role"]) for seen in stack.verified.accepted}
    assert roles == {("alice", ADMIN_ROLE), ("bob", READER_ROLE)}
    assert len(stack.verified.accepted) >= 6  # initialize, list, three calls...
    assert stack.strategy.calls == 2  # one AssumeRoleWithWebIdentity per user
    assert stack.beta.authorizations and set(stack.beta.authorizations) == {""}
    seen = json.dumps([*stack.beta.headers])
    assert all(token not in seen for token in tokens.values())


async def test_an_sts_refusal_fails_that_backend_alone(stack: Stack, idp: Idp,
                                                       moto: Moto) -> None:
    """carol's session opens while STS works; then STS refuses (moto made to demand signed
    requests): a new token of hers (a cache miss) gets a JSON-RPC error naming alpha and STS,
    while beta answers."""
    client = await session(stack, await login(idp, "carol"))
    try:
        assert "result" in await add(client, "alpha_add")
        await trio.to_thread.run_sync(moto.reset_auth, "0")
        try:
            client.token = await login(idp, "carol")
            failed = await add(client, "alpha_add")
        finally:
            await trio.to_thread.run_sync(moto.reset_auth, "inf")
        assert failed["error"]["data"]["backend"] == "alpha"
        assert "STS AssumeRoleWithWebIdentity" in failed["error"]["message"]
        assert "refused (HTTP 500)" in failed["error"]["message"]
        assert client.token not in json.dumps(failed)
        assert (await add(client, "beta_add"))["result"]["structuredContent"]["total"] == 3
    finally:
        await client.aclose()


def caller(user: str, token: str, groups: list[str]) -> Caller:
    return Caller(Identity("https://idp.test", user, {"sub": user, "groups": groups}), token)


async def test_credentials_are_reused_until_shortly_before_they_expire(
        moto: Moto, monkeypatch: pytest.MonkeyPatch) -> None:
    """One user's credentials (900 s, moto honours DurationSeconds) are reused for concurrent
    and later requests, and asked for again 30 s before they expire."""
    plan = AwsStsAuth(config="t/aws", region="us-east-1", service="aws-mcp",
                      sts_url=f"{moto.url}/", role_rules=(RoleRule("admins", ADMIN_ROLE),),
                      fallback_role_arn=None, session_duration=900)
    strategy = AwsSts(plan, HttpClient(), None)
    request = OutgoingRequest("POST", "https://aws-mcp.us-east-1.api.aws/mcp",
                              [("content-type", "application/json")], b"{}")
    dave = caller("dave", "dave-token.x.y", ["admins"])
    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(strategy.sign, dave, request)
    first = await strategy.sign(dave, request)
    assert strategy.calls == 1
    clock = time.time()
    monkeypatch.setattr("vmcp_trio.auth.outgoing.cache.time.time", lambda: clock + 860)
    await strategy.sign(dave, request)
    assert strategy.calls == 1  # 40 s before expiry: still reused
    monkeypatch.setattr("vmcp_trio.auth.outgoing.cache.time.time", lambda: clock + 875)
    await strategy.sign(dave, request)
    assert strategy.calls == 2  # within 30 s of expiry: asked again
    with pytest.raises(CredentialError, match="no roleMappings rule"):
        await strategy.sign(caller("erin", "erin-token", ["staff"]), request)
    with pytest.raises(CredentialError, match="role session name"):
        await strategy.sign(caller("e", "e-token", ["admins"]), request)
    dates = {name: value for name, value in first if name == "x-amz-date"}
    assert abs(datetime.strptime(dates["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=UTC).timestamp() - clock) < 60


STS_ANSWERS = [
    (400, '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender'
          '</Type><Code>InvalidIdentityToken</Code><Message>Token frank-token.x.y is expired'
          '</Message></Error></ErrorResponse>',
     r"refused \(HTTP 400\): InvalidIdentityToken \(Token \[redacted\] is expired\)"),
    (200, "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
          "<AccessKeyId>ASIA1</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
          "</AssumeRoleWithWebIdentityResponse>", "holds no valid credentials"),
    (200, "not xml", "holds no valid credentials"),
]


@pytest.mark.parametrize(("status", "body", "words"), STS_ANSWERS,
                         ids=["aws-error", "no-secret", "not-xml"])
async def test_what_sts_says_when_it_refuses(status: int, body: str, words: str) -> None:
    """AWS's own refusals (an ``ErrorResponse`` with a code and a message) and broken answers,
    from an STS written here: moto refuses nothing on demand but by failing (a stand-in)."""

    with answering(lambda _: (status, "text/xml", body.encode())) as sts:
        plan = AwsStsAuth(config="t/aws", region="us-east-1", service="aws-mcp",
                          sts_url=f"{sts}/", role_rules=(), fallback_role_arn=READER_ROLE)
        strategy = AwsSts(plan, HttpClient(), None)
        with pytest.raises(CredentialError, match=words) as caught:
            await strategy.sign(caller("frank", "frank-token.x.y", []),
                                OutgoingRequest("GET", "https://aws-mcp.us-east-1.api.aws/mcp"))
        assert "frank-token" not in str(caught.value)


def test_a_cel_matcher_picks_the_role_from_any_claim() -> None:
    """roleMappings[].matcher: the first rule whose CEL expression is true of the caller's
    claims; an expression that fails on these claims (a missing key) is no match."""
    plan = AwsStsAuth(config="t/aws", region="us-east-1", service="aws-mcp",
                      sts_url="https://sts.us-east-1.amazonaws.com/", role_rules=(
                          RoleRule(None, ADMIN_ROLE, 'claims["tenant"] == "acme" && '
                                                     '"admins" in claims["groups"]'),
                          RoleRule("staff", ADMIN_ROLE.replace("admin", "staff"))),
                      fallback_role_arn=None, session_duration=900)
    strategy = AwsSts(plan, HttpClient(), None)
    assert strategy.role_for({"tenant": "acme", "groups": ["admins"]}) == ADMIN_ROLE
    assert strategy.role_for({"groups": ["admins", "staff"]}).endswith("staff")
    with pytest.raises(CredentialError, match="no roleMappings rule"):
        strategy.role_for({"tenant": "globex", "groups": ["admins"]})
