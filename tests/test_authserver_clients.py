"""Confidential clients of the embedded authorization server (RFC 7591 registration, RFC 6749
section 2.3 client authentication), over real HTTP against a running gateway.

``allowConfidentialClientRegistration`` (ToolHive's name) lets a registration ask for
``client_secret_basic`` or ``client_secret_post``: the secret is shown once, kept as its SHA-256
only, expires at ``client_secret_expires_at``, and the token endpoint then accepts the client
only by the method it registered. Public clients (``none``, PKCE) keep working. The upstream
logins go through the two ``oidc-provider`` instances of the other authorization server tests.
A token request with a code that does not exist tells authentication apart from the grant: a
client that authenticated gets ``invalid_grant`` (400), one that did not ``invalid_client``
(401).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from vmcp_trio.authserver.registration import CLIENT_LIFETIME

from .authserver_helpers import (
    CLIENT_REDIRECT,
    Stack,
    as_docs,
    call,
    issuer_of,
    login,
    pkce,
    register,
    running_stack,
    tokens,
)
from .fixtures.idp import Idp
from .gateway_helpers import running_gateway
from .helpers import expect_error, resource, validate

WEB_REDIRECT = "https://client.example.test/callback"
"""A confidential client's redirect URI (https, not loopback; nothing needs to listen there)."""


def confidential_docs(issuer: str, corp: Idp, hub: Idp) -> list[dict[str, Any]]:
    docs = as_docs(issuer, corp, hub)
    resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"].update(
        allowConfidentialClientRegistration=True,
        insecureAllowConfidentialOverLoopbackHTTP=True)  # the test's issuer is loopback http
    return docs


def basic(client_id: str, secret: str) -> tuple[str, str]:
    return "authorization", "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


async def registered(stack: Stack, method: str) -> dict[str, Any]:
    status, headers, answer = await call(stack, "POST", "/oauth/register", body={
        "redirect_uris": [WEB_REDIRECT], "token_endpoint_auth_method": method,
        "client_name": "web"})
    assert status == 201, answer
    assert headers["cache-control"] == "no-store"
    return dict(answer)


async def authenticates(stack: Stack, client_id: str | None = None, *,
                        headers: list[tuple[str, str]] | None = None,
                        **form: str) -> tuple[int, str]:
    """(status, error) of a code request with a code that does not exist: ``invalid_grant``
    when the client authenticated."""
    body = {"grant_type": "authorization_code", "code": "no-such-code",
            "redirect_uri": WEB_REDIRECT, "code_verifier": "v" * 43, **form}
    if client_id is not None:
        body["client_id"] = client_id
    status, _, answer = await call(stack, "POST", "/oauth/token", form=body, headers=headers)
    return status, answer["error"]


@pytest.fixture
async def stack(upstreams: tuple[int, Idp, Idp]) -> Any:
    _, corp, hub = upstreams
    docs = confidential_docs(issuer_of(upstreams), corp, hub)
    async with running_stack(upstreams, docs) as stack:
        yield stack


async def test_a_registration_gets_its_secret_once_and_only_its_hash_is_kept(
        stack: Stack) -> None:
    """The secret is in the 201 answer (no-store) and nowhere else: the stored client holds its
    SHA-256; ``client_secret_expires_at`` is when the registration ends, and using the client
    does not move it. Loopback or private-use redirect URIs are a native app's, which cannot
    keep a secret: refused for a confidential client (ToolHive's rule)."""
    _, _, metadata = await call(stack, "GET", "/.well-known/oauth-authorization-server")
    assert metadata["token_endpoint_auth_methods_supported"] == [
        "none", "client_secret_basic", "client_secret_post"]
    for uri in (CLIENT_REDIRECT, "https://localhost/cb", "com.example.app:/cb"):
        status, _, refused = await call(stack, "POST", "/oauth/register", body={
            "redirect_uris": [uri], "token_endpoint_auth_method": "client_secret_basic"})
        assert (status, refused["error"]) == (400, "invalid_redirect_uri"), uri
    answer = await registered(stack, "client_secret_basic")
    secret = answer["client_secret"]
    assert len(secret) >= 43 and answer["token_endpoint_auth_method"] == "client_secret_basic"
    assert abs(answer["client_secret_expires_at"] - (time.time() + CLIENT_LIFETIME)) < 60
    assert stack.gateway is not None and stack.gateway.authserver is not None
    storage = stack.gateway.authserver.storage
    stored = await storage.get_client(answer["client_id"])
    assert stored is not None
    assert stored.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(stored)
    assert int(stored.expires_at) == answer["client_secret_expires_at"]


async def test_a_basic_client_logs_in_and_authenticates_only_with_basic(stack: Stack) -> None:
    """The whole flow as a ``client_secret_basic`` client; the secret in the form instead, a
    wrong secret, none at all, or both methods at once are refused, each for what it is."""
    answer = await registered(stack, "client_secret_basic")
    client_id, secret = answer["client_id"], answer["client_secret"]
    right = [basic(client_id, secret)]
    assert await authenticates(stack, headers=right) == (400, "invalid_grant")
    assert await authenticates(stack, client_id, client_secret=secret) == (401, "invalid_client")
    assert await authenticates(stack, headers=[basic(client_id, "not-the-secret")]) == (
        401, "invalid_client")
    assert await authenticates(stack, client_id) == (401, "invalid_client")  # no secret
    assert await authenticates(stack, headers=right, client_secret=secret) == (
        400, "invalid_request")  # two methods in one request
    assert await authenticates(stack, "someone-else", headers=right) == (401, "invalid_client")

    verifier, challenge = pkce()
    redirect = await login(stack, client_id, challenge, redirect_uri=WEB_REDIRECT)
    form = {"grant_type": "authorization_code", "code": redirect["code"],
            "redirect_uri": WEB_REDIRECT, "code_verifier": verifier}
    status, headers, refused = await call(stack, "POST", "/oauth/token", form=form,
                                          headers=[basic(client_id, "wrong")])
    assert (status, refused["error"]) == (401, "invalid_client")
    assert headers["www-authenticate"].startswith("Basic")
    status, _, issued = await call(stack, "POST", "/oauth/token", form=form, headers=right)
    assert status == 200, issued
    status, _, rotated = await call(stack, "POST", "/oauth/token", headers=right, form={
        "grant_type": "refresh_token", "refresh_token": issued["refresh_token"]})
    assert status == 200, rotated
    assert stack.gateway is not None and stack.gateway.authserver is not None
    stored = await stack.gateway.authserver.storage.get_client(client_id)
    assert stored is not None and stored.used
    assert int(stored.expires_at) == answer["client_secret_expires_at"]  # use does not extend


async def test_a_post_client_and_public_clients(stack: Stack) -> None:
    """A ``client_secret_post`` client authenticates in the form only; a public client presents
    no secret (one it presents is ``invalid_client``), and still logs in with PKCE."""
    answer = await registered(stack, "client_secret_post")
    client_id, secret = answer["client_id"], answer["client_secret"]
    assert await authenticates(stack, client_id, client_secret=secret) == (400, "invalid_grant")
    assert await authenticates(stack, headers=[basic(client_id, secret)]) == (
        401, "invalid_client")
    assert await authenticates(stack, client_id, client_secret="wrong") == (401, "invalid_client")

    public = await register(stack)
    assert await authenticates(stack, public) == (400, "invalid_grant")
    assert await authenticates(stack, public, client_secret="made-up") == (
        401, "invalid_client")
    assert await authenticates(stack, headers=[basic(public, "made-up")]) == (
        401, "invalid_client")
    assert await authenticates(stack, headers=[basic(public, "")]) == (
        400, "invalid_grant")  # Basic with an empty password presents no secret
    _, issued, _ = await tokens(stack)  # a public client's whole login, PKCE only
    assert issued["access_token"]


async def test_secrets_are_never_logged_nor_audited(upstreams: tuple[int, Idp, Idp],
                                                    tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Every log record (DEBUG and up) and the audit log of a registration and of token
    requests with the right and a wrong secret: neither secret appears in any of them."""
    caplog.set_level(logging.DEBUG)
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    docs = confidential_docs(issuer, corp, hub)
    audit = tmp_path / "audit.log"
    resource(docs, "VirtualMCPServer")["spec"].setdefault("config", {})["audit"] = {
        "enabled": True, "logFile": str(audit)}
    wrong = "wrong-secret-" + "x" * 30
    async with running_gateway(docs, port=port) as (url, gateway):
        stack = Stack(issuer, url, corp, hub, gateway)
        answer = await registered(stack, "client_secret_post")
        client_id, secret = answer["client_id"], answer["client_secret"]
        verifier, challenge = pkce()
        redirect = await login(stack, client_id, challenge, redirect_uri=WEB_REDIRECT)
        form = {"grant_type": "authorization_code", "code": redirect["code"],
                "redirect_uri": WEB_REDIRECT, "code_verifier": verifier, "client_id": client_id}
        status, _, _ = await call(stack, "POST", "/oauth/token",
                                  form={**form, "client_secret": wrong})
        assert status == 401
        status, _, _ = await call(stack, "POST", "/oauth/token",
                                  form={**form, "client_secret": secret})
        assert status == 200
    logged = caplog.text + "".join(repr(record.__dict__) for record in caplog.records)
    audited = audit.read_text(encoding="utf-8")
    assert "vmcp_auth_token_issued" in audited and client_id in audited
    for value in (secret, wrong):
        assert value not in logged and value not in audited


def test_client_secrets_need_tls_or_a_loopback_issuer_that_allows_them(
        upstreams: tuple[int, Idp, Idp]) -> None:
    """``vmcp validate``: with confidential registration, an http issuer is refused unless it is
    loopback and ``insecureAllowConfidentialOverLoopbackHTTP`` says so; vmcp's earlier name of
    the switch is an unknown field now."""
    port, corp, hub = upstreams
    docs = as_docs(f"http://127.0.0.1:{port}", corp, hub)
    spec = resource(docs, "VirtualMCPServer")["spec"]
    spec["authServerConfig"]["allowConfidentialClientRegistration"] = True
    expect_error(validate(docs), "cleartext-secrets",
                 "spec.authServerConfig.allowConfidentialClientRegistration",
                 contains="insecureAllowConfidentialOverLoopbackHTTP")
    spec["authServerConfig"]["insecureAllowConfidentialOverLoopbackHTTP"] = True
    assert validate(docs).ok
    for issuer in ("http://gateway.internal:8080", "http://10.0.0.7"):
        docs = as_docs(issuer, corp, hub)
        resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"].update(
            allowConfidentialClientRegistration=True,
            insecureAllowConfidentialOverLoopbackHTTP=True)
        expect_error(validate(docs), "cleartext-secrets",
                     "spec.authServerConfig.allowConfidentialClientRegistration",
                     contains="cleartext")
    # vmcp's earlier name still works, with a warning, under the same transport rule.
    docs = as_docs(f"http://127.0.0.1:{port}", corp, hub)
    legacy = resource(docs, "VirtualMCPServer")["spec"]["authServerConfig"]
    legacy["allowConfidentialClients"] = True
    expect_error(validate(docs), "cleartext-secrets",
                 "spec.authServerConfig.allowConfidentialClientRegistration")
    legacy["insecureAllowConfidentialOverLoopbackHTTP"] = True
    result = validate(docs)
    assert result.ok and result.plans[0].auth_server is not None
    assert result.plans[0].auth_server.allow_confidential_clients
    (warning,) = [w for w in result.warnings if w.rule == "deprecated"]
    assert warning.path == "spec.authServerConfig.allowConfidentialClients"
    legacy["allowConfidentialClients"] = False
    legacy["allowConfidentialClientRegistration"] = True
    expect_error(validate(docs), "conflict", "spec.authServerConfig.allowConfidentialClients")
