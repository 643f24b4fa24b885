"""``oidc`` + ``kubernetes`` incoming auth: service-account tokens, validated in-cluster.

No Kubernetes API server runs here: ``tests/fixtures/k8s_apiserver.py`` is a TLS stand-in with a
CA of its own serving the two endpoints vmcp uses (the service-account issuer's discovery and
JWKS), and the service-account directory vmcp reads (token, CA) is written by the test. vmcp
finds the API server through ``KUBERNETES_SERVICE_HOST``/``_PORT`` as in a pod.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vmcp_trio.auth.incoming.authenticator import AuthFailure
from vmcp_trio.auth.incoming.build import AuthSettings, build_authenticator
from vmcp_trio.http.client import HttpClient
from vmcp_trio.resources.plan import OIDCIncoming

from .fixtures.k8s_apiserver import ISSUER, FakeApiServer, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import ROOT


def k8s_docs(**kubernetes: Any) -> list[dict[str, Any]]:
    docs = copy.deepcopy(quickstart_docs())
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfig": {
        "type": "kubernetes", "kubernetes": kubernetes}}
    return docs


@pytest.fixture
async def apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                    ) -> AsyncIterator[FakeApiServer]:
    async with serving(tmp_path) as server:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", server.host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
        yield server


def settings(server: FakeApiServer) -> AuthSettings:
    return AuthSettings(service_account_dir=str(server.account_dir))


async def status_with(url: str, token: str) -> tuple[int, dict[str, str]]:
    client = RawClient(url)
    client.token = token
    try:
        reply = await client.initialize()
        return reply.status, reply.headers
    finally:
        await client.aclose()


async def test_a_service_account_token_is_accepted(apiserver: FakeApiServer) -> None:
    """The issuer is learnt from the API server, the keys come from its JWKS endpoint (asked
    with the pod's own token over the cluster CA), and the default audience is ``toolhive``."""
    async with running_gateway(k8s_docs(), auth=settings(apiserver)) as (url, gateway):
        assert gateway.authenticator.issuer == ISSUER
        assert (await status_with(url, apiserver.token()))[0] == 200
        status, headers = await status_with(url, apiserver.token(audience="someone-else"))
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    asked = dict(apiserver.requests)
    assert asked["/openid/v1/jwks"] == f"Bearer {apiserver.pod_token}"
    assert asked["/.well-known/openid-configuration"] == f"Bearer {apiserver.pod_token}"


async def test_service_account_and_namespace_restrictions(apiserver: FakeApiServer) -> None:
    docs = k8s_docs(serviceAccount="mcp-client", namespace="apps", audience="vmcp")
    async with running_gateway(docs, auth=settings(apiserver)) as (url, _):
        allowed = apiserver.token("mcp-client", "apps", audience="vmcp")
        assert (await status_with(url, allowed))[0] == 200
        for name, namespace, reason in (("intruder", "apps", "service account"),
                                        ("mcp-client", "other", "namespace")):
            status, headers = await status_with(
                url, apiserver.token(name, namespace, audience="vmcp"))
            assert status == 401
            assert reason in headers["www-authenticate"]


async def test_a_token_signed_by_another_cluster_is_refused(apiserver: FakeApiServer,
                                                            tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    async with serving(tmp_path / "other") as other, \
            running_gateway(k8s_docs(), auth=settings(apiserver)) as (url, _):
        foreign = other.token()
        status, headers = await status_with(url, foreign)
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]


def test_serve_outside_a_cluster_says_so(tmp_path: Path) -> None:
    """Without KUBERNETES_SERVICE_HOST (and no issuer configured) ``vmcp serve`` refuses to
    start with a clear message instead of serving unauthenticated."""
    config = tmp_path / "k8s.yaml"
    config.write_text(yaml.safe_dump_all(k8s_docs()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    result = subprocess.run([sys.executable, "-m", "vmcp_trio", "serve", "--config", str(config),
                             "--port", "0"], capture_output=True, text=True, timeout=30, env=env,
                            cwd=ROOT, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "incoming auth" in result.stderr and "KUBERNETES_SERVICE_HOST" in result.stderr


async def test_an_inline_issuer_whose_jwks_asks_for_a_bearer_token(
        apiserver: FakeApiServer) -> None:
    """``jwksAuthTokenPath`` (an MCPOIDCConfig's inline issuer): the JWKS request carries the
    token of that file, read at each fetch; without it the API server's JWKS refuses vmcp
    and the caller gets 503, not a wrong verdict."""
    jwks_url = f"https://{apiserver.host}:{apiserver.port}/openid/v1/jwks"
    ca = (apiserver.account_dir / "ca.crt").read_text()
    token = apiserver.token(audience="gw")
    for path in (str(apiserver.account_dir / "token"), None):
        plan = OIDCIncoming(issuer=ISSUER, audience="gw", jwks_url=jwks_url,
                            jwks_allow_private_ip=True, ca_bundle=ca,
                            jwks_auth_token_path=path)
        client = HttpClient()
        authenticator = build_authenticator(plan, AuthSettings(), client)
        try:
            if path is not None:
                assert (await authenticator.authenticate(token)).subject.endswith(":client")
            else:
                with pytest.raises(AuthFailure) as refused:
                    await authenticator.authenticate(token)
                assert refused.value.status == 503
        finally:
            await client.aclose()
    assert ("/openid/v1/jwks", f"Bearer {apiserver.pod_token}") in apiserver.requests
    assert ("/openid/v1/jwks", "") in apiserver.requests


async def test_a_shared_config_introspects_tokens_that_are_not_jwts(
        apiserver: FakeApiServer) -> None:
    """An MCPOIDCConfig's ``kubernetesServiceAccount.introspectionUrl``: a token that is not a
    JWT is asked about there (RFC 7662, no credentials, as ToolHive's fallback provider); one
    it does not know is refused; service-account JWTs still go by the API server's keys."""
    docs = k8s_docs()
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfigRef": {
        "name": "cluster", "audience": "toolhive"}}
    url = f"https://{apiserver.host}:{apiserver.port}/introspect"
    docs.append({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPOIDCConfig",
                 "metadata": {"name": "cluster"},
                 "spec": {"type": "kubernetesServiceAccount",
                          "kubernetesServiceAccount": {"introspectionUrl": url}}})
    async with running_gateway(docs, auth=settings(apiserver)) as (gateway_url, _):
        assert (await status_with(gateway_url, apiserver.opaque_token()))[0] == 200
        assert (await status_with(gateway_url, apiserver.token()))[0] == 200
        status, headers = await status_with(gateway_url, "an-opaque-token-nobody-issued")
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
        other = apiserver.opaque_token(audience="someone-else")
        assert (await status_with(gateway_url, other))[0] == 401
    asked = [auth for path, auth in apiserver.requests if path == "/introspect"]
    assert len(asked) >= 3 and set(asked) == {""}  # no credentials sent


def test_an_introspection_url_must_be_https() -> None:
    from .helpers import expect_error, validate

    docs = k8s_docs()
    docs.append({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPOIDCConfig",
                 "metadata": {"name": "cluster"},
                 "spec": {"type": "kubernetesServiceAccount", "kubernetesServiceAccount": {
                     "introspectionUrl": "http://introspect.svc/introspect"}}})
    expect_error(validate(docs), "https", "spec.kubernetesServiceAccount.introspectionUrl",
                 kind="MCPOIDCConfig", contains="must use https")


async def test_an_inline_issuer_with_an_introspection_url_and_no_secret(
        apiserver: FakeApiServer) -> None:
    """An inline issuer's ``introspectionUrl`` without ``clientSecretRef`` introspects too,
    unauthenticated (ToolHive's fallback provider), instead of leaving opaque tokens out."""
    base = f"https://{apiserver.host}:{apiserver.port}"
    plan = OIDCIncoming(issuer=ISSUER, audience="toolhive", jwks_url=f"{base}/openid/v1/jwks",
                        introspection_url=f"{base}/introspect", jwks_allow_private_ip=True,
                        ca_bundle=(apiserver.account_dir / "ca.crt").read_text())
    client = HttpClient()
    try:
        authenticator = build_authenticator(plan, AuthSettings(), client)
        identity = await authenticator.authenticate(apiserver.opaque_token("robot", "apps"))
        assert identity.subject == "system:serviceaccount:apps:robot"
    finally:
        await client.aclose()
    assert ("/introspect", "") in apiserver.requests
