"""Every example under examples/ validates, and resolves to the plan its comments describe."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmcp_trio.resources import validate_paths
from vmcp_trio.resources.durations import Duration
from vmcp_trio.resources.plan import (
    AnonymousIncoming,
    EmbeddedIncoming,
    HttpEndpoint,
    KubernetesIncoming,
    NoOutgoingAuth,
    OAuth2Provider,
    OIDCIncoming,
    OIDCProvider,
    RedisStorage,
    StdioEndpoint,
    TokenExchangeAuth,
    UpstreamInjectAuth,
)

from .helpers import EXAMPLES


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_valid(path: Path) -> None:
    result = validate_paths([path])
    assert result.ok, "\n".join(map(str, result.problems))
    assert len(result.plans) == 1


def plan_of(name: str):  # type: ignore[no-untyped-def]
    result = validate_paths([EXAMPLES / name])
    assert result.ok
    return result, result.plans[0]


def test_anonymous_development() -> None:
    result, plan = plan_of("anonymous.yaml")
    assert isinstance(plan.incoming, AnonymousIncoming)
    assert [p.rule for p in result.warnings] == ["anonymous"]
    everything = plan.backends[0]
    assert everything.name == "everything"
    assert everything.endpoint == StdioEndpoint(
        "npx", ("-y", "@modelcontextprotocol/server-everything", "stdio"),
        (("LOG_LEVEL", "info"),), None)
    assert plan.backends[1].endpoint == HttpEndpoint("http://127.0.0.1:8001/mcp")
    assert all(b.outgoing == NoOutgoingAuth() for b in plan.backends)


def test_oidc_inline_with_discovered_outgoing() -> None:
    _, plan = plan_of("oidc-inline.yaml")
    assert plan.namespace == "platform"
    assert plan.incoming == OIDCIncoming(
        issuer="https://login.example.com/realms/engineering",
        audience="https://mcp.example.com/mcp", client_id="vmcp-gateway", scopes=("openid",))
    search, wiki = plan.backends
    assert isinstance(search.outgoing, TokenExchangeAuth)
    assert search.outgoing.audience == "search-api"
    assert search.outgoing.subject_provider is None
    assert search.outgoing.subject_token_type == "urn:ietf:params:oauth:token-type:access_token"
    assert search.outgoing.client_secret is not None
    assert search.outgoing.client_secret.value == b"replace-with-the-sts-client-secret"
    assert wiki.outgoing == NoOutgoingAuth()


def test_inline_with_introspection() -> None:
    _, plan = plan_of("oidc-introspection.yaml")
    assert isinstance(plan.incoming, OIDCIncoming)
    assert plan.incoming.client_secret is not None
    assert plan.incoming.client_secret.source == "default/introspection-client[clientSecret]"


def test_kubernetes_service_accounts_and_in_cluster_backends() -> None:
    _, plan = plan_of("kubernetes-service-accounts.yaml")
    assert plan.incoming == KubernetesIncoming(audience="vmcp", service_account="ci-runner",
                                               namespace="ci")
    assert [b.endpoint for b in plan.backends] == [
        HttpEndpoint("http://mcp-fetch-proxy.ci.svc.cluster.local:8080/mcp", in_cluster=True),
        HttpEndpoint("http://mcp-github-proxy.ci.svc.cluster.local:8080/mcp", in_cluster=True),
    ]


def test_embedded_auth_server_mixing_strategies() -> None:
    result, plan = plan_of("embedded-auth-server.yaml")
    assert result.warnings == ()
    assert plan.incoming == EmbeddedIncoming("https://mcp.example.com",
                                             "https://mcp.example.com/mcp", ("openid",))
    by_name = {b.name: b.outgoing for b in plan.backends}
    assert by_name["github-tools"] == UpstreamInjectAuth("github", "tools/github-inject")
    jira = by_name["jira"]
    assert isinstance(jira, TokenExchangeAuth) and jira.subject_provider == "corp"
    reports = by_name["reports"]
    assert isinstance(reports, TokenExchangeAuth) and reports.subject_provider is None
    assert by_name["status"] == NoOutgoingAuth()

    auth = plan.auth_server
    assert auth is not None
    assert auth.authorization_endpoint == "https://mcp.example.com/oauth/authorize"
    assert (auth.access_token_lifespan, auth.refresh_token_lifespan, auth.auth_code_lifespan) == (
        Duration.of(minutes=30), Duration.of(hours=168), Duration.of(minutes=5))
    assert len(auth.signing_keys) == 1 and len(auth.hmac_secrets) == 1
    corp, github = auth.providers
    assert isinstance(corp, OIDCProvider) and corp.name == "corp"
    assert isinstance(github, OAuth2Provider) and github.user_info is not None
    assert github.user_info.subject_fields == ("id", "login")
    assert github.user_info.additional_headers == (("Accept", "application/vnd.github+json"),)
    storage = auth.storage
    assert isinstance(storage, RedisStorage)
    assert storage.master_name == "vmcp-auth" and len(storage.sentinel_addrs) == 3
    assert storage.key_prefix == "vmcp:auth:{tools:tools-gateway}:"
    assert storage.username is not None and storage.username.value == b"vmcp"
