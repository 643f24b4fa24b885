"""One failing case per rule of the resources: each asserts the rule, the field path, the
resource it is reported against and the message a user would read."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from vmcp_trio.resources.durations import Duration
from vmcp_trio.resources.plan import (
    CircuitBreakerPlan,
    HttpEndpoint,
    MemoryStorage,
    NoOutgoingAuth,
)
from vmcp_trio.resources.problems import Severity

from .helpers import (
    del_field,
    example_docs,
    expect_error,
    matching,
    resource,
    set_field,
    validate,
)

Docs = list[dict[str, Any]]
VMCP = "VirtualMCPServer"
EXT = "MCPExternalAuthConfig"
PROVIDERS = "spec.authServerConfig.upstreamProviders"


def vmcp(docs: Docs) -> dict[str, Any]:
    return resource(docs, VMCP)


# --- enums -------------------------------------------------------------------------------------

ENUMS = [
    # (example, kind, name, dotted field to break, reported path, expected values)
    ("embedded-auth-server.yaml", VMCP, None, "spec.incomingAuth.type",
     "spec.incomingAuth.type", "'anonymous' or 'oidc'"),
    ("oidc-inline.yaml", VMCP, None, "spec.incomingAuth.oidcConfig.type",
     "spec.incomingAuth.oidcConfig.type", "'inline' or 'kubernetes'"),
    ("embedded-auth-server.yaml", VMCP, None, "spec.outgoingAuth.source",
     "spec.outgoingAuth.source", "'discovered' or 'inline'"),
    ("embedded-auth-server.yaml", VMCP, None, "spec.outgoingAuth.backends.jira.type",
     "spec.outgoingAuth.backends.jira.type", "'externalAuthConfigRef' or 'discovered'"),
    ("embedded-auth-server.yaml", EXT, "github-inject", "spec.type", "spec.type",
     "'upstreamInject', 'tokenExchange', 'unauthenticated'"),
    ("embedded-auth-server.yaml", VMCP, None, f"{PROVIDERS}.0.type",
     f"{PROVIDERS}[0].type", "'oauth2' or 'oidc'"),
    ("anonymous.yaml", "MCPServer", "notes", "spec.transport", "spec.transport",
     "'stdio', 'streamable-http' or 'sse'"),
    ("embedded-auth-server.yaml", EXT, "jira-exchange", "spec.tokenExchange.subjectTokenType",
     "spec.tokenExchange.subjectTokenType", "'access_token', 'id_token', 'jwt'"),
    ("embedded-auth-server.yaml", VMCP, None, f"{PROVIDERS}.1.oauth2Config.userInfo.httpMethod",
     f"{PROVIDERS}[1].oauth2Config.userInfo.httpMethod", "'GET' or 'POST'"),
    ("embedded-auth-server.yaml", VMCP, None, "spec.aggregation",
     "spec.aggregation.conflictResolution", "'prefix', 'priority' or 'manual'"),
]


@pytest.mark.parametrize(("example", "kind", "name", "field", "path", "expected"), ENUMS,
                         ids=[e[4] for e in ENUMS])
def test_enum_values(example: str, kind: str, name: str | None, field: str, path: str,
                     expected: str) -> None:
    docs = example_docs(example)
    doc = resource(docs, kind, name)
    if field == "spec.aggregation":
        set_field(doc, field, {"conflictResolution": "bogus-value"})
    else:
        set_field(doc, field, "bogus-value")
    problem = expect_error(validate(docs), "enum", path, kind=kind)
    assert expected in problem.message
    assert "(got 'bogus-value')" in problem.message


# --- incoming auth --------------------------------------------------------------------------------


def test_oidc_with_both_config_and_ref(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.incomingAuth.oidcConfig",
              {"type": "inline", "inline": {"issuer": "https://idp.example.com",
                                            "clientId": "c", "audience": "a"}})
    expect_error(validate(embedded), "one-of", "spec.incomingAuth", kind=VMCP,
                 contains="exactly one of oidcConfig")


def test_oidc_with_neither_config_nor_ref(inline_oidc: Docs) -> None:
    del_field(vmcp(inline_oidc), "spec.incomingAuth.oidcConfig")
    expect_error(validate(inline_oidc), "one-of", "spec.incomingAuth")


@pytest.mark.parametrize("field", ["clientId", "audience"])
def test_inline_oidc_needs_client_id_and_audience(inline_oidc: Docs, field: str) -> None:
    del_field(vmcp(inline_oidc), f"spec.incomingAuth.oidcConfig.inline.{field}")
    expect_error(validate(inline_oidc), "required",
                 f"spec.incomingAuth.oidcConfig.inline.{field}",
                 contains="is required for inline OIDC")


def test_inline_oidc_needs_issuer(inline_oidc: Docs) -> None:
    del_field(vmcp(inline_oidc), "spec.incomingAuth.oidcConfig.inline.issuer")
    expect_error(validate(inline_oidc), "required", "spec.incomingAuth.oidcConfig.inline.issuer",
                 contains="is required")


def test_inline_block_with_default_kubernetes_type(inline_oidc: Docs) -> None:
    del_field(vmcp(inline_oidc), "spec.incomingAuth.oidcConfig.type")
    expect_error(validate(inline_oidc), "unused-field", "spec.incomingAuth.oidcConfig.inline",
                 contains="set type: inline")


@pytest.mark.parametrize("url", ["login.example.com/realms/x", "ftp://login.example.com",
                                 "https://login.example.com/#frag", "https://", "https://a b",
                                 "https://host:99999/"])
def test_urls_must_be_absolute_http(inline_oidc: Docs, url: str) -> None:
    set_field(vmcp(inline_oidc), "spec.incomingAuth.oidcConfig.inline.issuer", url)
    problem = expect_error(validate(inline_oidc), "url",
                           "spec.incomingAuth.oidcConfig.inline.issuer")
    assert "example.com" not in problem.message and "host:" not in problem.message


def test_plain_http_needs_the_insecure_switch(inline_oidc: Docs) -> None:
    inline = "spec.incomingAuth.oidcConfig.inline"
    set_field(vmcp(inline_oidc), f"{inline}.issuer", "http://127.0.0.1:9000")
    expect_error(validate(inline_oidc), "https", f"{inline}.issuer",
                 contains=f"set {inline}.insecureAllowHTTP: true")
    set_field(vmcp(inline_oidc), f"{inline}.insecureAllowHTTP", True)
    result = validate(inline_oidc)
    assert result.ok
    assert result.plans[0].incoming.insecure_allow_http is True  # type: ignore[union-attr]


def test_token_url_needs_https(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.tokenUrl",
              "http://sts.example.com/token")
    expect_error(validate(embedded), "https", "spec.tokenExchange.tokenUrl", kind=EXT,
                 name="jira-exchange", contains="spec.tokenExchange.insecureAllowHTTP")


def test_audience_beside_oidc_config(inline_oidc: Docs) -> None:
    set_field(vmcp(inline_oidc), "spec.incomingAuth.audience", "x")
    expect_error(validate(inline_oidc), "unused-field", "spec.incomingAuth.audience")


def test_oidc_config_ref_needs_an_audience(embedded: Docs) -> None:
    del_field(vmcp(embedded), "spec.incomingAuth.oidcConfigRef.audience")
    expect_error(validate(embedded), "required", "spec.incomingAuth.oidcConfigRef.audience")
    # The seed's spelling, beside the reference, is accepted too.
    set_field(vmcp(embedded), "spec.incomingAuth.audience", "https://mcp.example.com/mcp")
    assert validate(embedded).ok


def test_two_different_audiences_conflict(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.incomingAuth.audience", "other")
    expect_error(validate(embedded), "conflict", "spec.incomingAuth.audience")


def test_anonymous_with_oidc_settings(anonymous: Docs) -> None:
    set_field(vmcp(anonymous), "spec.incomingAuth.audience", "x")
    expect_error(validate(anonymous), "unused-field", "spec.incomingAuth.audience",
                 contains="only with type oidc")


def test_oidc_config_ref_issuer_must_equal_the_embedded_issuer(embedded: Docs) -> None:
    set_field(resource(embedded, "MCPOIDCConfig"), "spec.inline.issuer",
              "https://elsewhere.example.com")
    expect_error(validate(embedded), "issuer-mismatch", "spec.incomingAuth.oidcConfigRef.name",
                 kind=VMCP, contains="spec.authServerConfig.issuer (https://mcp.example.com)")


def test_oidc_config_ref_without_auth_server_is_an_external_issuer(embedded: Docs) -> None:
    """Without authServerConfig an MCPOIDCConfig is a shared external issuer definition."""
    gateway = vmcp(embedded)
    del_field(gateway, "spec.authServerConfig")
    gateway["spec"]["outgoingAuth"] = {"source": "inline"}
    result = validate(embedded)
    assert result.ok, result.problems
    incoming = result.plans[0].incoming
    assert incoming.mode == "oidc"
    assert incoming.issuer == "https://mcp.example.com"  # type: ignore[union-attr]


def test_kubernetes_defaults(inline_oidc: Docs) -> None:
    set_field(vmcp(inline_oidc), "spec.incomingAuth.oidcConfig", {"type": "kubernetes"})
    result = validate(inline_oidc)
    assert result.ok
    incoming = result.plans[0].incoming
    assert incoming.mode == "kubernetes"
    assert incoming.audience == "toolhive"  # type: ignore[union-attr]
    assert incoming.use_cluster_auth is True  # type: ignore[union-attr]


# --- upstream providers ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Corp", "-corp", "corp-", "a" * 64, "corp_1", ""])
def test_provider_names_are_dns_labels(embedded: Docs, name: str) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.0.name", name)
    problem = expect_error(validate(embedded), "dns-label",
                           f"{PROVIDERS}[0].name")
    assert "DNS label" in problem.message


def test_provider_names_are_unique(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.1.name", "corp")
    expect_error(validate(embedded), "duplicate-name", f"{PROVIDERS}[1].name",
                 contains="already defined at upstreamProviders[0]")


@pytest.mark.parametrize("field", ["authorizationEndpoint", "tokenEndpoint", "clientId"])
def test_oauth2_provider_required_fields(embedded: Docs, field: str) -> None:
    del_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.{field}")
    expect_error(validate(embedded), "required", f"{PROVIDERS}[1].oauth2Config.{field}")


@pytest.mark.parametrize("field", ["issuerUrl", "clientId"])
def test_oidc_provider_required_fields(embedded: Docs, field: str) -> None:
    del_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.{field}")
    expect_error(validate(embedded), "required", f"{PROVIDERS}[0].oidcConfig.{field}")


def test_provider_block_must_match_type(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.1.type", "oidc")
    result = validate(embedded)
    expect_error(result, "required", f"{PROVIDERS}[1].oidcConfig",
                 contains="is required when type is oidc")
    expect_error(result, "unused-field", f"{PROVIDERS}[1].oauth2Config")


def test_oidc_provider_scopes_need_openid(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.scopes", ["profile"])
    expect_error(validate(embedded), "scopes", f"{PROVIDERS}[0].oidcConfig.scopes")


def test_oidc_provider_subject_claim_names_the_user(embedded: Docs) -> None:
    """``subjectClaim`` (ToolHive's, for Entra ID's ``oid``): the ID token's claim that names
    the user, a claim name (ToolHive's pattern)."""
    set_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.subjectClaim", "oid")
    result = validate(embedded)
    assert result.ok, result.problems
    auth_server = result.plans[0].auth_server
    assert auth_server is not None and auth_server.providers[0].subject_claim == "oid"
    set_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.subjectClaim", "oid.sub")
    expect_error(validate(embedded), "pattern", f"{PROVIDERS}[0].oidcConfig.subjectClaim")


def test_provider_redirect_uri_is_the_gateways_callback(embedded: Docs) -> None:
    """``redirectUri`` (ToolHive's; its default is the callback): vmcp serves the callback at
    ``{issuer}/oauth/callback``, so that is the one it may name."""
    issuer = vmcp(embedded)["spec"]["authServerConfig"]["issuer"]
    set_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.redirectUri", f"{issuer}/oauth/callback")
    set_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.redirectUri",
              f"{issuer}/oauth/callback")
    assert validate(embedded).ok
    set_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.redirectUri",
              "https://elsewhere.example.com/callback")
    expect_error(validate(embedded), "redirect-uri", f"{PROVIDERS}[1].oauth2Config.redirectUri",
                 contains=f"must be {issuer}/oauth/callback")


def test_provider_urls_need_https_unless_switched(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.0.oidcConfig.issuerUrl", "http://127.0.0.1:9000")
    expect_error(validate(embedded), "https", f"{PROVIDERS}[0].oidcConfig.issuerUrl",
                 contains="spec.authServerConfig.insecureAllowHTTP")
    set_field(vmcp(embedded), "spec.authServerConfig.insecureAllowHTTP", True)
    assert validate(embedded).ok


@pytest.mark.parametrize("path", ["authed_user..access_token", ".token", "token.", " . "])
def test_token_response_mapping_paths(embedded: Docs, path: str) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.tokenResponseMapping",
              {"accessTokenPath": path})
    expect_error(validate(embedded), "dot-path",
                 f"{PROVIDERS}[1].oauth2Config.tokenResponseMapping.accessTokenPath",
                 contains="dot-notation path")


def test_token_response_mapping_needs_access_token_path(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.tokenResponseMapping",
              {"refreshTokenPath": "data.refresh"})
    expect_error(validate(embedded), "required",
                 f"{PROVIDERS}[1].oauth2Config.tokenResponseMapping.accessTokenPath")


def test_token_response_mapping_defaults(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{PROVIDERS}.1.oauth2Config.tokenResponseMapping",
              {"accessTokenPath": "authed_user.access_token"})
    result = validate(embedded)
    mapping = result.plans[0].auth_server.providers[1].token_response_mapping  # type: ignore
    assert (mapping.access_token_path, mapping.refresh_token_path, mapping.expires_in_path,
            mapping.scope_path) == ("authed_user.access_token", "refresh_token", "expires_in",
                                    "scope")


# --- durations --------------------------------------------------------------------------------

LIFESPANS = "spec.authServerConfig.tokenLifespans"


@pytest.mark.parametrize(("value", "message"), [
    ("7d", "Go durations have no days"), ("-1h", "must not be negative"), ("1h 5m", "unit"),
    ("soon", "expected a number"), (3600, "duration string")])
def test_durations_must_parse(embedded: Docs, value: object, message: str) -> None:
    set_field(vmcp(embedded), f"{LIFESPANS}.refreshTokenLifespan", value)
    expect_error(validate(embedded), "duration", f"{LIFESPANS}.refreshTokenLifespan",
                 contains=message)


@pytest.mark.parametrize(("field", "value", "bounds"), [
    ("accessTokenLifespan", "0", "between 1m and 24h"),
    ("accessTokenLifespan", "25h", "between 1m and 24h"),
    ("accessTokenLifespan", "59s", "between 1m and 24h"),
    ("refreshTokenLifespan", "30m", "between 1h and 720h"),
    ("refreshTokenLifespan", "721h", "between 1h and 720h"),
    ("authCodeLifespan", "29s", "between 30s and 10m"),
    ("authCodeLifespan", "11m", "between 30s and 10m"),
])
def test_durations_in_sane_ranges(embedded: Docs, field: str, value: str, bounds: str) -> None:
    set_field(vmcp(embedded), f"{LIFESPANS}.{field}", value)
    expect_error(validate(embedded), "duration-range", f"{LIFESPANS}.{field}", contains=bounds)


def test_refresh_not_shorter_than_access(embedded: Docs) -> None:
    set_field(vmcp(embedded), LIFESPANS, {"accessTokenLifespan": "12h",
                                          "refreshTokenLifespan": "2h"})
    expect_error(validate(embedded), "duration-range", f"{LIFESPANS}.refreshTokenLifespan",
                 contains="not be shorter")


def test_lifespan_defaults(embedded: Docs) -> None:
    del_field(vmcp(embedded), LIFESPANS)
    auth = validate(embedded).plans[0].auth_server
    assert auth is not None
    assert (auth.access_token_lifespan, auth.refresh_token_lifespan,
            auth.auth_code_lifespan) == (Duration.of(hours=1), Duration.of(hours=168),
                                         Duration.of(minutes=10))


# --- references --------------------------------------------------------------------------------


def test_group_ref_resolves(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.groupRef.name", "no-such-group")
    expect_error(validate(embedded), "reference", "spec.groupRef.name", kind=VMCP,
                 contains="MCPGroup tools/no-such-group, which does not exist")


def test_server_group_ref_resolves(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "notes"), "spec.groupRef.name", "missing")
    expect_error(validate(anonymous), "reference", "spec.groupRef.name", kind="MCPServer",
                 name="notes")


def test_server_external_auth_ref_resolves(inline_oidc: Docs) -> None:
    set_field(resource(inline_oidc, "MCPServer", "search"), "spec.externalAuthConfigRef.name",
              "missing")
    expect_error(validate(inline_oidc), "reference", "spec.externalAuthConfigRef.name",
                 kind="MCPServer", name="search")


def test_backend_external_auth_ref_resolves(embedded: Docs) -> None:
    path = "spec.outgoingAuth.backends.jira.externalAuthConfigRef.name"
    set_field(vmcp(embedded), path, "missing")
    expect_error(validate(embedded), "reference", path, kind=VMCP)


def test_backend_with_type_ref_needs_a_ref(embedded: Docs) -> None:
    del_field(vmcp(embedded), "spec.outgoingAuth.backends.jira.externalAuthConfigRef")
    expect_error(validate(embedded), "required",
                 "spec.outgoingAuth.backends.jira.externalAuthConfigRef")


def test_oidc_config_ref_resolves(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.incomingAuth.oidcConfigRef.name", "missing")
    expect_error(validate(embedded), "reference", "spec.incomingAuth.oidcConfigRef.name",
                 contains="MCPOIDCConfig tools/missing")


def test_secret_must_exist(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.hmacSecretRefs.0.name", "missing")
    expect_error(validate(embedded), "reference", "spec.authServerConfig.hmacSecretRefs[0].name",
                 contains="Secret tools/missing")


def test_secret_must_have_the_key(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.clientSecretRef.key",
              "nope")
    problem = expect_error(validate(embedded), "secret-key",
                           "spec.tokenExchange.clientSecretRef.key", kind=EXT)
    assert "has no key 'nope'" in problem.message
    assert "corp-client-secret, github-client-secret, sts-client-secret" in problem.message


def test_references_stay_in_their_namespace(embedded: Docs) -> None:
    set_field(resource(embedded, "Secret", "redis-auth"), "metadata.namespace", "other")
    expect_error(validate(embedded), "reference",
                 "spec.authServerConfig.storage.redis.aclUserConfig.passwordSecretRef.name",
                 contains="same namespace")


def test_a_broken_target_is_not_reported_missing(embedded: Docs) -> None:
    set_field(resource(embedded, "MCPOIDCConfig"), "spec.inline.bogus", 1)
    result = validate(embedded)
    assert matching(result, rule="unknown-field", path="spec.inline.bogus")
    assert not matching(result, rule="reference")


# --- outgoing ------------------------------------------------------------------------------


def test_upstream_inject_provider_must_exist(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "github-inject"), "spec.upstreamInject.providerName",
              "gitlab")
    expect_error(validate(embedded), "provider-name", "spec.upstreamInject.providerName",
                 kind=EXT, name="github-inject",
                 contains="VirtualMCPServer tools/tools-gateway (for backend 'github-tools') "
                          "defines only: corp, github")


def test_subject_provider_must_exist(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.subjectProviderName",
              "okta")
    expect_error(validate(embedded), "provider-name", "spec.tokenExchange.subjectProviderName",
                 kind=EXT, name="jira-exchange")


def test_upstream_inject_requires_an_auth_server(inline_oidc: Docs) -> None:
    inline_oidc.append({"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": EXT,
                        "metadata": {"name": "inject", "namespace": "platform"},
                        "spec": {"type": "upstreamInject",
                                 "upstreamInject": {"providerName": "github"}}})
    set_field(resource(inline_oidc, "MCPServer", "wiki"), "spec.externalAuthConfigRef",
              {"name": "inject"})
    expect_error(validate(inline_oidc), "required", "spec.authServerConfig", kind=VMCP,
                 contains="backend 'wiki' uses MCPExternalAuthConfig platform/inject")


def test_upstream_tokens_need_embedded_incoming_auth(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.incomingAuth",
              {"type": "oidc", "oidcConfig": {"type": "inline", "inline": {
                  "issuer": "https://idp.example.com", "clientId": "c", "audience": "a"}}})
    expect_error(validate(embedded), "embedded-auth-required", "spec.incomingAuth",
                 contains="issuer is https://mcp.example.com")


def test_token_exchange_needs_a_caller_token(inline_oidc: Docs) -> None:
    set_field(vmcp(inline_oidc), "spec.incomingAuth", {"type": "anonymous"})
    expect_error(validate(inline_oidc), "subject-token", "spec.incomingAuth.type",
                 contains="anonymous callers have none")


def test_backend_keys_name_group_members(embedded: Docs) -> None:
    backends = vmcp(embedded)["spec"]["outgoingAuth"]["backends"]
    backends["jiraa"] = backends.pop("jira")
    expect_error(validate(embedded), "group-member", "spec.outgoingAuth.backends.jiraa",
                 contains="github-tools, jira, reports, status")


def test_backends_only_with_inline_source(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.outgoingAuth.source", "discovered")
    expect_error(validate(embedded), "unused-field", "spec.outgoingAuth.backends",
                 contains="only with source: inline")


def test_inline_entry_of_type_discovered_uses_the_server_ref(embedded: Docs) -> None:
    set_field(resource(embedded, "MCPServer", "jira"), "spec.externalAuthConfigRef",
              {"name": "reports-exchange"})
    set_field(vmcp(embedded), "spec.outgoingAuth.backends.jira", {"type": "discovered"})
    result = validate(embedded)
    jira = next(b for b in result.plans[0].backends if b.name == "jira")
    assert jira.outgoing.config == "tools/reports-exchange"  # type: ignore[union-attr]


def test_external_auth_block_must_match_type(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "github-inject"), "spec.type", "tokenExchange")
    result = validate(embedded)
    expect_error(result, "required", "spec.tokenExchange", kind=EXT)
    expect_error(result, "unused-field", "spec.upstreamInject", kind=EXT)


def test_client_secret_needs_client_id(embedded: Docs) -> None:
    del_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.clientId")
    expect_error(validate(embedded), "required", "spec.tokenExchange.clientId",
                 contains="when clientSecretRef is set")


def test_subject_token_type_short_forms_become_urns(embedded: Docs) -> None:
    set_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.subjectTokenType",
              "id_token")
    result = validate(embedded)
    jira = next(b for b in result.plans[0].backends if b.name == "jira")
    assert jira.outgoing.subject_token_type == (  # type: ignore[union-attr]
        "urn:ietf:params:oauth:token-type:id_token")


# --- MCPServer -------------------------------------------------------------------------------


def test_url_and_command_are_exclusive(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "notes"), "spec.command", "python")
    expect_error(validate(anonymous), "one-of", "spec.command", kind="MCPServer")


def test_working_dir_needs_a_command(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "notes"), "spec.workingDir", "/srv")
    expect_error(validate(anonymous), "unused-field", "spec.workingDir",
                 contains="only with spec.command")


def test_args_and_env_without_a_command_belong_to_the_image(anonymous: Docs) -> None:
    """ToolHive passes them to the container: accepted, with a warning saying where the
    backend is then reached."""
    notes = resource(anonymous, "MCPServer", "notes")
    set_field(notes, "spec.args", ["--verbose"])
    set_field(notes, "spec.env", [{"name": "LOG_LEVEL", "value": "debug"}])
    result = validate(anonymous)
    assert result.ok
    (warning,) = matching(result, rule="image-args")
    assert (warning.path, warning.name) == ("spec.args", "notes")
    assert "args and env without spec.command belong to the container image" in warning.message
    assert "reached at spec.url" in warning.message
    del_field(notes, "spec.url")
    (warning,) = matching(validate(anonymous), rule="image-args")
    assert "at its in-cluster URL (--backend-url-template)" in warning.message


@pytest.mark.parametrize(("command", "env", "fragment"), [
    ("npxx", {}, "'npxx' is not found on the PATH"),
    ("/nonexistent/server", {}, "'/nonexistent/server' is not an executable file"),
    ("./README.md", {}, "is not an executable file"),
    ("sh", {"PATH": "/nonexistent"}, "'sh' is not found on the PATH (/nonexistent)"),
])
def test_a_command_that_cannot_start_is_an_error(anonymous: Docs, command: str,
                                                 env: dict[str, str], fragment: str) -> None:
    """vmcp starts spec.command itself: a misspelled one is caught before serving."""
    server = resource(anonymous, "MCPServer", "everything")
    set_field(server, "spec.command", command)
    if env:
        set_field(server, "spec.env", env)
    expect_error(validate(anonymous), "command", "spec.command", name="everything",
                 contains=fragment)


def test_a_relative_command_is_found_in_the_working_dir(anonymous: Docs, tmp_path: Path) -> None:
    (tmp_path / "server").write_text("#!/bin/sh\n")
    (tmp_path / "server").chmod(0o755)
    server = resource(anonymous, "MCPServer", "everything")
    set_field(server, "spec.command", "./server")
    set_field(server, "spec.workingDir", str(tmp_path))
    assert not [p for p in validate(anonymous).errors if p.rule == "command"]


def test_stdio_transport_with_url(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "notes"), "spec.transport", "stdio")
    expect_error(validate(anonymous), "transport", "spec.transport")


def test_command_with_http_transport(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "everything"), "spec.transport", "sse")
    expect_error(validate(anonymous), "transport", "spec.transport", name="everything")


def test_env_as_kubernetes_list(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "everything"), "spec.env",
              [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
    result = validate(anonymous)
    endpoint = next(b for b in result.plans[0].backends if b.name == "everything").endpoint
    assert endpoint.env == (("A", "1"), ("B", "2"))  # type: ignore[union-attr]
    set_field(resource(anonymous, "MCPServer", "everything"), "spec.env",
              [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    expect_error(validate(anonymous), "env", "spec.env", contains="set twice")


def test_sse_server_in_cluster(anonymous: Docs) -> None:
    notes = resource(anonymous, "MCPServer", "notes")
    del_field(notes, "spec.url")
    set_field(notes, "spec.transport", "sse")
    set_field(notes, "spec.proxyPort", 9090)
    result = validate(anonymous, backend_url_template="http://{name}.{namespace}:{port}")
    endpoint = next(b for b in result.plans[0].backends if b.name == "notes").endpoint
    assert endpoint.url == "http://notes.dev:9090/sse"  # type: ignore[union-attr]
    assert endpoint.transport == "sse"  # type: ignore[union-attr]


# --- embedded authorization server: keys and storage ------------------------------------------


def test_missing_keys_and_storage_are_warnings(embedded: Docs) -> None:
    auth = vmcp(embedded)["spec"]["authServerConfig"]
    for field in ("signingKeySecretRefs", "hmacSecretRefs", "storage"):
        del auth[field]
    result = validate(embedded)
    assert result.ok
    warnings = {(p.rule, p.path) for p in result.warnings}
    assert warnings == {
        ("ephemeral-keys", "spec.authServerConfig.signingKeySecretRefs"),
        ("ephemeral-keys", "spec.authServerConfig.hmacSecretRefs"),
        ("memory-storage", "spec.authServerConfig.storage"),
    }
    assert all(p.severity is Severity.WARNING for p in result.warnings)
    assert "must log in again" in matching(result, rule="ephemeral-keys")[0].message
    assert result.plans[0].auth_server.storage == MemoryStorage()  # type: ignore[union-attr]


def _keys_secret(docs: Docs) -> dict[str, Any]:
    return resource(docs, "Secret", "gateway-auth-keys")


def test_signing_key_must_be_a_pem_private_key(embedded: Docs) -> None:
    _keys_secret(embedded)["stringData"]["signing-key.pem"] = "not a key"
    problem = expect_error(validate(embedded), "signing-key",
                           "spec.authServerConfig.signingKeySecretRefs[0].key",
                           contains="is not a PEM private key")
    assert "not a key" not in problem.message


def test_weak_rsa_key_is_refused(embedded: Docs) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption())
    _keys_secret(embedded)["stringData"]["signing-key.pem"] = weak.decode()
    expect_error(validate(embedded), "signing-key",
                 "spec.authServerConfig.signingKeySecretRefs[0].key",
                 contains="1024 bits; at least 2048")


def test_short_hmac_secret_is_refused_without_echo(embedded: Docs) -> None:
    _keys_secret(embedded)["stringData"]["hmac-secret"] = "short-secret-value"
    result = validate(embedded)
    expect_error(result, "hmac-secret", "spec.authServerConfig.hmacSecretRefs[0].key",
                 contains="at least 32 bytes")
    assert not any("short-secret-value" in str(p) for p in result.problems)


STORAGE = "spec.authServerConfig.storage"


def test_redis_storage_needs_its_block(embedded: Docs) -> None:
    set_field(vmcp(embedded), STORAGE, {"type": "redis"})
    expect_error(validate(embedded), "required", f"{STORAGE}.redis")


def test_redis_needs_exactly_one_of_sentinel_or_addr(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{STORAGE}.redis.addr", "127.0.0.1:6379")
    expect_error(validate(embedded), "one-of", f"{STORAGE}.redis")
    del_field(vmcp(embedded), f"{STORAGE}.redis.sentinelConfig")
    result = validate(embedded)
    assert result.ok
    assert result.plans[0].auth_server.storage.addr == "127.0.0.1:6379"  # type: ignore


@pytest.mark.parametrize("addr", ["redis", "redis:0", "redis:port", "::1:26379", "[::1:26379"])
def test_sentinel_addresses_are_host_port(embedded: Docs, addr: str) -> None:
    set_field(vmcp(embedded), f"{STORAGE}.redis.sentinelConfig.sentinelAddrs", [addr])
    expect_error(validate(embedded), "host-port",
                 f"{STORAGE}.redis.sentinelConfig.sentinelAddrs[0]")


def test_redis_timeouts_in_range(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{STORAGE}.redis.readTimeout", "10m")
    expect_error(validate(embedded), "duration-range", f"{STORAGE}.redis.readTimeout",
                 contains="between 100ms and 1m")


def test_memory_storage_with_redis_block(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{STORAGE}.type", "memory")
    expect_error(validate(embedded), "unused-field", f"{STORAGE}.redis")


def test_issuer_without_query_or_trailing_slash(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.issuer", "https://mcp.example.com/")
    expect_error(validate(embedded), "issuer", "spec.authServerConfig.issuer",
                 contains="must not end with '/'")


def test_authorization_endpoint_base_url(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.authorizationEndpointBaseUrl",
              "https://login.mcp.example.com")
    auth = validate(embedded).plans[0].auth_server
    assert auth is not None
    assert auth.authorization_endpoint == "https://login.mcp.example.com/oauth/authorize"
    assert auth.issuer == "https://mcp.example.com"


# --- aggregation -----------------------------------------------------------------------------


def test_prefix_format_needs_workload(anonymous: Docs) -> None:
    set_field(vmcp(anonymous), "spec.aggregation.conflictResolutionConfig.prefixFormat",
              "{server}_")
    expect_error(validate(anonymous), "prefix-format",
                 "spec.aggregation.conflictResolutionConfig.prefixFormat")


def test_priority_needs_an_order_of_members(anonymous: Docs) -> None:
    set_field(vmcp(anonymous), "spec.aggregation", {"conflictResolution": "priority"})
    expect_error(validate(anonymous), "required",
                 "spec.aggregation.conflictResolutionConfig.priorityOrder")
    set_field(vmcp(anonymous), "spec.aggregation.conflictResolutionConfig",
              {"priorityOrder": ["notes", "nobody", "notes"]})
    result = validate(anonymous)
    expect_error(result, "group-member",
                 "spec.aggregation.conflictResolutionConfig.priorityOrder[1]")
    expect_error(result, "duplicate-name",
                 "spec.aggregation.conflictResolutionConfig.priorityOrder[2]")


def test_tool_settings_name_members(anonymous: Docs) -> None:
    set_field(vmcp(anonymous), "spec.aggregation.tools",
              [{"workload": "nobody", "filter": ["echo"]}])
    expect_error(validate(anonymous), "group-member", "spec.aggregation.tools[0].workload")


def test_tool_overrides_reach_the_plan(anonymous: Docs) -> None:
    set_field(vmcp(anonymous), "spec.aggregation.tools",
              [{"workload": "everything", "filter": ["echo", "add"],
                "overrides": {"echo": {"name": "say", "description": "Say it"}}}])
    aggregation = validate(anonymous).plans[0].aggregation
    assert aggregation.tools[0].filter == ("echo", "add")
    assert aggregation.tools[0].overrides[0].name == "say"


# --- documents -------------------------------------------------------------------------------


def test_unknown_field_suggests_the_known_one(inline_oidc: Docs) -> None:
    inline = vmcp(inline_oidc)["spec"]["incomingAuth"]["oidcConfig"]["inline"]
    inline["clientID"] = inline.pop("clientId")
    result = validate(inline_oidc)
    expect_error(result, "unknown-field", "spec.incomingAuth.oidcConfig.inline.clientID",
                 contains="did you mean 'clientId'?")
    # A field known in another place is not suggested to itself.
    inline["clientId"] = inline.pop("clientID")
    inline["dialTimeout"] = "1s"
    [problem] = [p for p in validate(inline_oidc).problems if p.rule == "unknown-field"]
    assert problem.message == "is not a known field", problem


def test_labels_annotations_and_status_are_allowed(anonymous: Docs) -> None:
    doc = vmcp(anonymous)
    doc["metadata"]["labels"] = {"team": "a"}
    doc["metadata"]["annotations"] = {"note": "b"}
    doc["status"] = {"phase": "Ready"}
    assert validate(anonymous).ok


def test_unknown_metadata_field(anonymous: Docs) -> None:
    vmcp(anonymous)["metadata"]["uid"] = "123"
    expect_error(validate(anonymous), "unknown-field", "metadata.uid")


def test_unknown_kind(anonymous: Docs) -> None:
    anonymous.append({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPWidget",
                      "metadata": {"name": "x"}})
    expect_error(validate(anonymous), "kind", "kind", contains="unknown kind 'MCPWidget'")


@pytest.mark.parametrize(("api_version", "kind"), [
    ("v1", "PersistentVolumeClaim"), ("v1", "Namespace"), ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("v1", "Service")])
def test_documents_of_other_api_groups_are_skipped(anonymous: Docs, api_version: str,
                                                   kind: str) -> None:
    """A folder of Kubernetes manifests loads as it is: what is not ToolHive's is a note."""
    anonymous.append({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                      "spec": {"anything": True}})
    result = validate(anonymous)
    assert result.ok and len(result.plans) == 1
    (note,) = matching(result, rule="skipped-kind")
    assert note.severity is Severity.WARNING and (note.kind, note.path) == (kind, "kind")
    assert note.message == (f"{kind} of {api_version} is not a resource of "
                            "toolhive.stacklok.dev: skipped")


@pytest.mark.parametrize(("kind", "why"), [
    ("MCPRegistry", "ToolHive's registry server"), ("EmbeddingServer", "optimizer")])
def test_toolhive_kinds_that_are_not_the_gateways_are_skipped(anonymous: Docs, kind: str,
                                                              why: str) -> None:
    anonymous.append({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": kind,
                      "metadata": {"name": "x"}, "spec": {"remoteUrl": "https://x.example"}})
    result = validate(anonymous)
    assert result.ok
    (note,) = matching(result, rule="ignored-kind")
    assert note.severity is Severity.WARNING and (note.kind, note.path) == (kind, "kind")
    assert note.message.startswith(f"{kind} is skipped: ") and why in note.message


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha1"])
def test_both_api_versions_mean_the_same(anonymous: Docs, version: str) -> None:
    """v1alpha1 loads as v1beta1 does, with ToolHive's deprecation as one warning per
    resource."""
    for doc in anonymous:
        doc["apiVersion"] = f"toolhive.stacklok.dev/{version}"
    result = validate(anonymous)
    assert result.ok and result.plans == validate(example_docs("anonymous.yaml")).plans
    deprecated = matching(result, rule="deprecated-api-version")
    assert len(deprecated) == (len(anonymous) if version == "v1alpha1" else 0)
    for problem in deprecated:
        assert problem.severity is Severity.WARNING and problem.path == "apiVersion"
        assert problem.message == ("toolhive.stacklok.dev/v1alpha1 is deprecated in ToolHive "
                                   "(since v0.23); use toolhive.stacklok.dev/v1beta1, the same "
                                   "schema")


def test_wrong_api_version_and_the_api_group_flag(anonymous: Docs) -> None:
    for doc in anonymous:
        doc["apiVersion"] = "example.org/v1beta1"
    expect_error(validate(anonymous), "api-version", "apiVersion",
                 contains="must be toolhive.stacklok.dev/v1beta1 or "
                          "toolhive.stacklok.dev/v1alpha1 for kind MCPGroup (or run with "
                          "--api-group example.org)")
    assert validate(anonymous, api_group="example.org").ok
    for doc in anonymous:
        doc["apiVersion"] = "example.org/v1alpha1"
    deprecated = matching(validate(anonymous, api_group="example.org"),
                          rule="deprecated-api-version")
    assert "example.org/v1alpha1 is deprecated" in deprecated[0].message


def test_wrong_version(anonymous: Docs) -> None:
    vmcp(anonymous)["apiVersion"] = "toolhive.stacklok.dev/v1"
    expect_error(validate(anonymous), "api-version", "apiVersion", kind=VMCP)


def test_secret_is_v1(embedded: Docs) -> None:
    resource(embedded, "Secret", "redis-auth")["apiVersion"] = "toolhive.stacklok.dev/v1alpha1"
    expect_error(validate(embedded), "api-version", "apiVersion", kind="Secret",
                 contains="must be v1")


def test_secret_data_must_be_base64(embedded: Docs) -> None:
    resource(embedded, "Secret", "redis-auth")["data"]["password"] = "not base64!"
    problem = expect_error(validate(embedded), "base64", "data.password", kind="Secret")
    assert "not base64!" not in problem.message


def test_secret_data_is_decoded(embedded: Docs) -> None:
    resource(embedded, "Secret", "redis-auth")["data"]["password"] = (
        base64.b64encode(b"s3cret").decode())
    storage = validate(embedded).plans[0].auth_server.storage  # type: ignore[union-attr]
    assert storage.password.value == b"s3cret"  # type: ignore[union-attr]


def test_duplicate_resource(anonymous: Docs) -> None:
    anonymous.append(dict(resource(anonymous, "MCPServer", "notes")))
    problem = expect_error(validate(anonymous), "duplicate-resource", "metadata.name",
                           contains="is also defined in test.yaml, document 2")
    assert problem.document == 5


def test_same_name_in_another_namespace_is_not_a_duplicate(anonymous: Docs) -> None:
    other = dict(resource(anonymous, "MCPGroup"))
    other["metadata"] = {"name": "dev-tools", "namespace": "other"}
    anonymous.append(other)
    assert validate(anonymous).ok


@pytest.mark.parametrize("body", [["a", "list"], "text", 42])
def test_document_must_be_a_mapping(anonymous: Docs, body: object) -> None:
    anonymous.append(body)  # type: ignore[arg-type]
    expect_error(validate(anonymous), "document", "")


def test_metadata_name_rules(anonymous: Docs) -> None:
    vmcp(anonymous)["metadata"]["name"] = "Dev_Gateway"
    expect_error(validate(anonymous), "dns-name", "metadata.name")


def test_every_problem_is_reported_at_once(embedded: Docs) -> None:
    set_field(vmcp(embedded), f"{LIFESPANS}.authCodeLifespan", "1h")
    set_field(resource(embedded, EXT, "jira-exchange"), "spec.tokenExchange.audience", "")
    set_field(resource(embedded, "MCPServer", "status"), "spec.transport", "carrier-pigeon")
    resource(embedded, "Secret", "redis-auth")["data"]["password"] = "%%%"
    result = validate(embedded)
    assert {(p.rule, p.kind) for p in result.errors} >= {
        ("duration-range", VMCP), ("required", EXT), ("enum", "MCPServer"),
        ("base64", "Secret")}


def test_two_loads_give_equal_plans(embedded: Docs) -> None:
    first, second = validate(embedded), validate(embedded)
    assert first.plans == second.plans
    assert hash(first.plans) == hash(second.plans)
    resource(embedded, "Secret", "upstream-clients")["stringData"]["sts-client-secret"] = "new"
    assert validate(embedded).plans != first.plans


def test_auth_server_that_incoming_auth_ignores_is_a_warning(embedded: Docs) -> None:
    gateway = vmcp(embedded)
    gateway["spec"]["outgoingAuth"] = {"source": "inline"}
    set_field(gateway, "spec.incomingAuth", {"type": "anonymous"})
    result = validate(embedded)
    assert result.ok
    assert matching(result, rule="auth-server-unused", path="spec.authServerConfig",
                    severity=Severity.WARNING)


# --- ToolHive's shapes of every release (toolhive/FIELDS.md) ------------------------------------


def test_group_ref_as_a_string_or_an_object(anonymous: Docs) -> None:
    """ToolHive up to v0.19 wrote ``groupRef: name`` on MCPServer; from v0.20 ``{name}``."""
    expected = validate(anonymous).plans
    for doc in anonymous:
        if doc["kind"] in ("MCPServer", VMCP):
            doc["spec"]["groupRef"] = "dev-tools"
    assert validate(anonymous).plans == expected
    vmcp(anonymous)["spec"]["groupRef"] = "no-such-group"
    expect_error(validate(anonymous), "reference", "spec.groupRef.name", kind=VMCP,
                 contains="refers to MCPGroup dev/no-such-group")


def test_settings_under_config_mean_the_same(anonymous: Docs) -> None:
    """v0.6.17-v0.19 wrote the group and the settings under spec.config."""
    expected = validate(anonymous).plans
    spec = vmcp(anonymous)["spec"]
    spec["config"] = {"groupRef": spec.pop("groupRef")["name"],
                      "aggregation": spec.pop("aggregation")}
    result = validate(anonymous)
    assert result.ok and result.plans == expected
    spec["config"]["aggregation"]["conflictResolutionConfig"]["prefixFormat"] = "{server}_"
    expect_error(validate(anonymous), "prefix-format",
                 "spec.config.aggregation.conflictResolutionConfig.prefixFormat", kind=VMCP)


@pytest.mark.parametrize(("field", "top", "inner"), [
    ("aggregation", {"conflictResolution": "prefix"}, {"conflictResolution": "manual"}),
    ("operational", {"timeouts": {"default": "10s"}}, {"timeouts": {"default": "5s"}}),
    ("sessionStorage", {"provider": "memory", "keyPrefix": "x"}, {"provider": "memory"}),
])
def test_settings_in_both_places_must_agree(anonymous: Docs, field: str, top: Any,
                                            inner: Any) -> None:
    spec = vmcp(anonymous)["spec"]
    spec[field] = top
    spec["config"] = {field: inner}
    expect_error(validate(anonymous), "conflict", f"spec.config.{field}", kind=VMCP,
                 contains=f"differs from spec.{field}: give it in one place")
    spec["config"] = {field: spec[field]}
    assert validate(anonymous).ok


def test_config_group_ref_must_agree_with_spec_group_ref(anonymous: Docs) -> None:
    vmcp(anonymous)["spec"]["config"] = {"groupRef": "other-group"}
    expect_error(validate(anonymous), "conflict", "spec.config.groupRef", kind=VMCP,
                 contains="names MCPGroup 'other-group', but spec.groupRef names 'dev-tools'")
    vmcp(anonymous)["spec"]["config"] = {"groupRef": "dev-tools"}
    assert validate(anonymous).ok


def test_a_gateway_needs_a_group_somewhere(anonymous: Docs) -> None:
    del_field(vmcp(anonymous), "spec.groupRef")
    expect_error(validate(anonymous), "required", "spec.groupRef", kind=VMCP,
                 contains="is required (or spec.config.groupRef)")


def test_what_toolhive_replaces_or_its_proxy_enforces_is_warned_about(anonymous: Docs) -> None:
    """The runtime form of incoming and outgoing auth (``spec.config.incomingAuth`` and
    ``outgoingAuth``), which ToolHive's operator always replaces with ``spec``'s, and an
    MCPServer's ``authServerRef`` (its proxy's incoming auth, which vmcp does not run): each
    a warning saying so, never a change of who gets in."""
    vmcp(anonymous)["spec"]["config"] = {"incomingAuth": {"type": "oidc", "oidc": {
        "issuer": "https://idp.example.com", "clientId": "x", "audience": "y"}},
        "outgoingAuth": {"source": "inline"}}
    resource(anonymous, "MCPServer", "everything")["spec"]["authServerRef"] = {
        "kind": "MCPExternalAuthConfig", "name": "as"}
    result = validate(anonymous)
    assert result.ok, result.problems
    assert result.plans[0].incoming == validate(
        [d for d in anonymous if d["kind"] != "VirtualMCPServer"]
        + [vmcp(anonymous) | {"spec": {k: v for k, v in vmcp(anonymous)["spec"].items()
                                       if k != "config"}}]).plans[0].incoming
    notes = {(note.path, note.rule): note.message for note in result.problems}
    assert notes[("spec.config.incomingAuth", "ignored-field")].endswith(
        "ToolHive's operator always replaces it with spec.incomingAuth (which is required), "
        "so it never takes effect: vmcp does the same")
    assert "spec.outgoingAuth" in notes[("spec.config.outgoingAuth", "ignored-field")]
    assert "authServerRef" in notes[("spec", "kubernetes-only")]


def test_a_feature_switched_off_is_accepted(anonymous: Docs) -> None:
    vmcp(anonymous)["spec"]["config"] = {"audit": {"enabled": False},
                                         "codeMode": {"enabled": False}}
    result = validate(anonymous)
    assert result.ok and not matching(result, rule="ignored-field")


def test_a_server_behind_toolhives_proxy_keeps_the_proxys_features(anonymous: Docs) -> None:
    """Without url or command the backend is the in-cluster proxy, which enforces them."""
    notes = resource(anonymous, "MCPServer", "notes")
    del_field(notes, "spec.url")
    notes["spec"].update(image="ghcr.io/x/notes:1", resources={"limits": {"cpu": "1"}},
                         authzConfig={"type": "configMap", "configMap": {"name": "a"}})
    result = validate(anonymous)
    assert result.ok
    assert not matching(result, rule="kubernetes-only")


@pytest.mark.parametrize(("field", "value", "path", "why"), [
    ("spec.config", {"telemetry": {"endpoint": "otel:4317"}}, "spec.config.telemetry",
     "telemetry (vmcp serves /metrics, and its traces follow the process's OTEL_* "
     "environment)"),
    ("spec.config", {"optimizer": {"maxToolsToReturn": 5}}, "spec.config.optimizer",
     "the optimizer is not implemented yet"),
    ("spec.config", {"codeMode": {"enabled": True}}, "spec.config.codeMode",
     "code mode is not implemented yet"),
])
def test_harmless_fields_are_ignored_with_a_warning(anonymous: Docs, field: str, value: Any,
                                                    path: str, why: str) -> None:
    spec = vmcp(anonymous)["spec"]
    spec.setdefault("operational", {}).setdefault("failureHandling", {})
    set_field(vmcp(anonymous), field, value)
    result = validate(anonymous)
    assert result.ok, "\n".join(map(str, result.problems))
    (warning,) = matching(result, rule="ignored-field")
    assert (warning.path, warning.kind) == (path, VMCP)
    assert warning.message.startswith("is ignored: ") and why in warning.message


def test_the_circuit_breaker_is_planned_when_enabled(anonymous: Docs) -> None:
    failure = vmcp(anonymous)["spec"].setdefault("operational", {}).setdefault(
        "failureHandling", {})
    failure["circuitBreaker"] = {"enabled": True, "failureThreshold": 3, "timeout": "30s"}
    result = validate(anonymous)
    assert result.ok and not matching(result, rule="ignored-field")
    assert result.plans[0].operational.circuit_breaker == CircuitBreakerPlan(
        3, Duration.of(seconds=30))
    failure["circuitBreaker"] = {"enabled": True}
    assert validate(anonymous).plans[0].operational.circuit_breaker == CircuitBreakerPlan(
        5, Duration.of(seconds=60))
    failure["circuitBreaker"] = {"enabled": False, "failureThreshold": 3}
    result = validate(anonymous)
    assert result.ok and result.plans[0].operational.circuit_breaker is None


@pytest.mark.parametrize(("breaker", "path", "fragment"), [
    ({"enabled": True, "timeout": "500ms"}, "circuitBreaker.timeout", "between 1s and 1h"),
    ({"enabled": True, "failureThreshold": 0}, "circuitBreaker.failureThreshold", "1"),
    ({"enabled": "yes"}, "circuitBreaker.enabled", "must be true or false"),
])
def test_circuit_breaker_mistakes_name_the_field(anonymous: Docs, breaker: dict[str, Any],
                                                 path: str, fragment: str) -> None:
    vmcp(anonymous)["spec"]["operational"] = {"failureHandling": {"circuitBreaker": breaker}}
    result = validate(anonymous)
    assert not result.ok
    (problem,) = [p for p in result.problems if p.severity is Severity.ERROR]
    assert problem.path == f"spec.operational.failureHandling.{path}", problem
    assert fragment in problem.message, problem


def test_kubernetes_workload_fields_get_one_warning(anonymous: Docs) -> None:
    server = resource(anonymous, "MCPServer", "everything")
    server["spec"].update(image="ghcr.io/x/everything:1", mcpPort=8080,
                          resources={"limits": {"cpu": "500m"}}, permissionProfile={
                              "type": "builtin", "name": "network"})
    vmcp(anonymous)["spec"].update(replicas=2, serviceType="LoadBalancer",
                                   podTemplateSpec={"spec": {}})
    result = validate(anonymous)
    assert result.ok, "\n".join(map(str, result.problems))
    server_warning, gateway_warning = sorted(matching(result, rule="kubernetes-only"),
                                             key=lambda p: p.kind or "")
    assert (server_warning.kind, server_warning.name, server_warning.path) == (
        "MCPServer", "everything", "spec")
    assert server_warning.message == (
        "image, mcpPort, permissionProfile, resources: ignored outside Kubernetes (they shape "
        "only the workload and ToolHive's proxy in front of it that ToolHive's operator runs)")
    assert (gateway_warning.kind, gateway_warning.path) == (VMCP, "spec")
    assert gateway_warning.message.startswith(
        "podTemplateSpec, replicas, serviceType: ignored outside Kubernetes")


def test_the_embedded_auth_server_type_is_not_a_gateways(embedded: Docs) -> None:
    """Refused where a backend would use one; a definition nothing uses is a warning. (The
    other types' rules: tests/test_external_auth_rules.py.)"""
    config = resource(embedded, EXT, "github-inject")
    config["spec"] = {"type": "embeddedAuthServer", "embeddedAuthServer": {"anything": "here"}}
    result = validate(embedded)
    expect_error(result, "not-implemented",
                 "spec.outgoingAuth.backends.github-tools.externalAuthConfigRef.name",
                 kind=VMCP, contains="of type embeddedAuthServer, which is not implemented yet")
    (note,) = matching(result, rule="auth-type-unused")
    assert note.severity is Severity.WARNING and note.path == "spec.type"
    del vmcp(embedded)["spec"]["outgoingAuth"]["backends"]["github-tools"]
    assert validate(embedded).ok


def test_external_auth_block_must_match_the_type(embedded: Docs) -> None:
    config = resource(embedded, EXT, "github-inject")
    config["spec"]["headerInjection"] = {"headerName": "X-Key", "valueSecretRef": {
        "name": "x", "key": "y"}}
    expect_error(validate(embedded), "unused-field", "spec.headerInjection", kind=EXT,
                 contains="must not be set when type is upstreamInject")


def test_unauthenticated_external_auth_means_no_credentials(anonymous: Docs) -> None:
    anonymous.append({"apiVersion": "toolhive.stacklok.dev/v1beta1",
                      "kind": EXT, "metadata": {"name": "none", "namespace": "dev"},
                      "spec": {"type": "unauthenticated"}})
    set_field(resource(anonymous, "MCPServer", "notes"), "spec.externalAuthConfigRef",
              {"name": "none"})
    result = validate(anonymous)
    assert result.ok
    assert all(b.outgoing == NoOutgoingAuth() for b in result.plans[0].backends)


def test_old_port_name_and_proxy_mode_shape_the_in_cluster_url(anonymous: Docs) -> None:
    notes = resource(anonymous, "MCPServer", "notes")
    del_field(notes, "spec.url")
    notes["spec"].update(transport="stdio", port=9090, proxyMode="sse")
    backend = next(b for b in validate(anonymous).plans[0].backends if b.name == "notes")
    assert backend.endpoint == HttpEndpoint(
        "http://mcp-notes-proxy.dev.svc.cluster.local:9090/sse", "sse", in_cluster=True)
    notes["spec"]["proxyPort"] = 8080
    expect_error(validate(anonymous), "conflict", "spec.port", name="notes",
                 contains="differs from spec.proxyPort")


def test_env_without_a_value_is_no_variable(anonymous: Docs) -> None:
    set_field(resource(anonymous, "MCPServer", "everything"), "spec.env", None)
    result = validate(anonymous)
    assert result.ok
    assert result.plans[0].backends[0].endpoint.env == ()  # type: ignore[union-attr]


# --- the authorization server's registration, documents and upstream tokens -----------------


def test_dcr_config_instead_of_a_client_id(embedded: Docs) -> None:
    oauth2 = f"{PROVIDERS}.1.oauth2Config"
    del_field(vmcp(embedded), f"{oauth2}.clientId")
    del_field(vmcp(embedded), f"{oauth2}.clientSecretRef")
    set_field(vmcp(embedded), f"{oauth2}.dcrConfig", {
        "registrationEndpoint": "https://github.example/register"})
    assert not validate(embedded).errors
    set_field(vmcp(embedded), f"{oauth2}.dcrConfig.discoveryUrl",
              "https://github.example/.well-known/oauth-authorization-server")
    expect_error(validate(embedded), "one-of", f"{PROVIDERS}[1].oauth2Config.dcrConfig",
                 contains="exactly one of discoveryUrl and registrationEndpoint")
    del_field(vmcp(embedded), f"{oauth2}.dcrConfig.registrationEndpoint")
    set_field(vmcp(embedded), f"{oauth2}.clientId", "static")
    expect_error(validate(embedded), "one-of", f"{PROVIDERS}[1].oauth2Config.dcrConfig",
                 contains="must not be set with clientId")
    del_field(vmcp(embedded), f"{oauth2}.clientId")
    set_field(vmcp(embedded), f"{oauth2}.dcrConfig.discoveryUrl", "http://github.example/m")
    expect_error(validate(embedded), "https",
                 f"{PROVIDERS}[1].oauth2Config.dcrConfig.discoveryUrl")


def test_client_documents_settings(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.cimd",
              {"enabled": False, "cacheMaxSize": 50, "cacheFallbackTtl": "10m"})
    result = validate(embedded)
    assert not result.errors
    documents = result.plans[0].auth_server.client_documents  # type: ignore[union-attr]
    assert (documents.enabled, documents.max_cached) == (False, 50)
    assert documents.fallback_lifetime == Duration.of(minutes=10)
    set_field(vmcp(embedded), "spec.authServerConfig.cimd.cacheFallbackTtl", "48h")
    expect_error(validate(embedded), "duration-range",
                 "spec.authServerConfig.cimd.cacheFallbackTtl", contains="between 1s and 24h")


def test_baseline_client_scopes_are_offered_scopes(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.baselineClientScopes",
              ["mcp:tools", "admin:everything"])
    expect_error(validate(embedded), "scope", "spec.authServerConfig.baselineClientScopes[1]",
                 contains="'admin:everything' is not among the scopes this server offers")


def test_forced_confidential_redirect_uris(embedded: Docs) -> None:
    field = "spec.authServerConfig.forceConfidentialRedirectUris"
    set_field(vmcp(embedded), field, ["https://app.example/cb", "https://127.0.0.1/cb"])
    result = validate(embedded)
    expect_error(result, "requires", field,
                 contains="needs allowConfidentialClientRegistration: true")
    expect_error(result, "redirect-uri", f"{field}[1]", contains="other than this machine's")


def test_no_upstream_tokens_for_a_backend_that_needs_them(embedded: Docs) -> None:
    set_field(vmcp(embedded), "spec.authServerConfig.disableUpstreamTokenInjection", True)
    expect_error(validate(embedded), "conflict",
                 "spec.authServerConfig.disableUpstreamTokenInjection",
                 contains="upstream tokens are not kept, but backend")


def test_upstream_authorization_params_and_identity(embedded: Docs) -> None:
    oauth2 = f"{PROVIDERS}.1.oauth2Config"
    set_field(vmcp(embedded), f"{oauth2}.additionalAuthorizationParams",
              {"access_type": "offline", "state": "mine"})
    set_field(vmcp(embedded), f"{oauth2}.identityFromToken", {"subjectPath": "authed_user.id"})
    result = validate(embedded)
    expect_error(result, "reserved",
                 f"{PROVIDERS}[1].oauth2Config.additionalAuthorizationParams.state",
                 contains="is set by vmcp for every login")
    expect_error(result, "one-of", f"{PROVIDERS}[1].oauth2Config.identityFromToken",
                 contains="must not be set with userInfo")
    del_field(vmcp(embedded), f"{oauth2}.userInfo")
    del_field(vmcp(embedded), f"{oauth2}.additionalAuthorizationParams.state")
    set_field(vmcp(embedded), f"{oauth2}.insecureAllowHTTP", True)
    set_field(vmcp(embedded), f"{oauth2}.tokenEndpoint", "http://github.internal/token")
    set_field(vmcp(embedded), f"{oauth2}.allowPrivateIPs", True)
    result = validate(embedded)
    assert not result.errors, result.errors
    hub = result.plans[0].auth_server.providers[1]  # type: ignore[union-attr]
    assert hub.authorization_params == (("access_type", "offline"),)  # type: ignore[union-attr]
    assert (hub.allow_http, hub.allow_private) == (True, True)  # type: ignore[union-attr]


def test_redis_sentinel_service_tls_and_cluster_mode(embedded: Docs) -> None:
    storage = "spec.authServerConfig.storage"
    set_field(vmcp(embedded), storage, {"type": "redis", "redis": {
        "sentinelConfig": {"masterName": "mymaster",
                           "sentinelService": {"name": "redis-sentinel"}},
        "tls": {"insecureSkipVerify": True}, "sentinelTls": {}}})
    result = validate(embedded)
    assert not result.errors, result.errors
    plan = result.plans[0].auth_server.storage  # type: ignore[union-attr]
    assert plan.sentinel_addrs == ("redis-sentinel.tools.svc:26379",)  # type: ignore[union-attr]
    assert plan.tls.verify is False and plan.sentinel_tls.verify  # type: ignore[union-attr]
    set_field(vmcp(embedded), f"{storage}.redis.sentinelConfig.sentinelAddrs", ["s1:26379"])
    expect_error(validate(embedded), "one-of", f"{storage}.redis.sentinelConfig",
                 contains="exactly one of sentinelAddrs and sentinelService")
    set_field(vmcp(embedded), f"{storage}.redis", {"addr": "redis:6379", "clusterMode": True,
                                                   "sentinelTls": {}, "db": 2})
    result = validate(embedded)
    expect_error(result, "cluster-db", f"{storage}.redis.db", contains="database 0 only")
    expect_error(result, "unused-field", f"{storage}.redis.sentinelTls",
                 contains="applies to sentinels only")
    set_field(vmcp(embedded), f"{storage}.redis", {"addr": "redis:6379", "clusterMode": True})
    result = validate(embedded)
    assert not result.errors and result.plans[0].auth_server.storage.cluster_mode  # type: ignore[union-attr]


def test_a_default_outgoing_strategy_for_backends_without_an_entry(embedded: Docs) -> None:
    backends = "spec.outgoingAuth.backends"
    del_field(vmcp(embedded), f"{backends}.jira")
    set_field(vmcp(embedded), "spec.outgoingAuth.default",
              {"type": "externalAuthConfigRef",
               "externalAuthConfigRef": {"name": "reports-exchange"}})
    result = validate(embedded)
    assert not result.errors, result.errors
    jira = next(b for b in result.plans[0].backends if b.name == "jira")
    assert jira.outgoing.config == "tools/reports-exchange"  # type: ignore[union-attr]
    github = next(b for b in result.plans[0].backends if b.name == "github-tools")
    assert github.outgoing.config == "tools/github-inject"  # type: ignore[union-attr]
    set_field(vmcp(embedded), "spec.outgoingAuth.default", {"type": "externalAuthConfigRef"})
    expect_error(validate(embedded), "required",
                 "spec.outgoingAuth.default.externalAuthConfigRef")


def test_tool_annotation_overrides_in_mcp_camel_case(embedded: Docs) -> None:
    vmcp(embedded)["spec"]["aggregation"] = {"tools": [{"workload": "jira", "overrides": {
        "create_issue": {"annotations": {"destructiveHint": True, "title": "New issue"}}}}]}
    result = validate(embedded)
    assert not result.errors, result.errors
    (rules,) = result.plans[0].aggregation.tools
    assert rules.overrides[0].annotations == (("destructiveHint", True),
                                              ("title", "New issue"))
