"""MCPServerEntry and MCPRemoteProxy as backends, MCPToolConfig, MCPTelemetryConfig.

Each rule: its error (or warning) at its field path with the message a user reads; then a real
gateway serving an MCPServerEntry backend (an SDK server recording the headers it receives) with
an MCPToolConfig's filter and override."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.gateway.aggregation import BackendListing, build_catalog
from vmcp_trio.resources.plan import (
    AggregationPlan,
    HttpEndpoint,
    SecretValue,
    StaticHeader,
    ToolOverridePlan,
    WorkloadToolsPlan,
)
from vmcp_trio.resources.problems import Severity
from vmcp_trio.resources.summary import describe_plan

from .fixtures.sdk_servers import make_server, serving
from .gateway_helpers import RawClient, running_gateway
from .helpers import example_docs, expect_error, matching, private_ca, resource, validate

Docs = list[dict[str, Any]]
API = "toolhive.stacklok.dev/v1beta1"
NS = "dev"


def doc(kind: str, name: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": API, "kind": kind,
                           "metadata": {"name": name, "namespace": NS}}
    if spec is not None:
        out["spec"] = spec
    return out


def gateway_docs(*backends: dict[str, Any], **vmcp_spec: Any) -> Docs:
    return [
        doc("MCPGroup", "remote", {}),
        *backends,
        doc("VirtualMCPServer", "gw", {"groupRef": {"name": "remote"},
                                       "incomingAuth": {"type": "anonymous"}, **vmcp_spec}),
    ]


def entry(name: str = "entry", **spec: Any) -> dict[str, Any]:
    return doc("MCPServerEntry", name, {"groupRef": {"name": "remote"},
                                        "remoteUrl": "https://mcp.example.com/mcp",
                                        "transport": "streamable-http", **spec})


def proxy(name: str = "proxy", **spec: Any) -> dict[str, Any]:
    return doc("MCPRemoteProxy", name, {"groupRef": "remote",
                                        "remoteUrl": "https://mcp.example.com/mcp", **spec})


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "stringData": data}


# --- backends ------------------------------------------------------------------------------------


def test_an_entry_is_a_url_backend_of_its_group_with_its_headers() -> None:
    docs = gateway_docs(
        secret("api", key="s3cret-value"),
        entry(transport="sse", headerForward={
            "addPlaintextHeaders": {"X-Tenant": "acme"},
            "addHeadersFromSecret": [{"headerName": "X-Api-Key",
                                      "valueSecretRef": {"name": "api", "key": "key"}}]}))
    result = validate(docs)
    assert result.ok, result.problems
    (backend,) = result.plans[0].backends
    assert backend.name == "entry"
    assert backend.endpoint == HttpEndpoint(
        "https://mcp.example.com/mcp", "sse", headers=(
            StaticHeader("X-Tenant", "acme"),
            StaticHeader("X-Api-Key", SecretValue(f"{NS}/api[key]", b"s3cret-value"))))
    assert "s3cret" not in repr(result.plans[0])


def test_a_remote_proxy_is_reached_at_remote_url_directly() -> None:
    """The old remoteURL means remoteUrl; the transport defaults to streamable-http; the proxy
    pod's own settings are warned about, not acted on."""
    docs = gateway_docs(doc("MCPRemoteProxy", "proxy", {
        "groupRef": "remote", "remoteURL": "https://old.example.com/mcp", "proxyPort": 8080,
        "oidcConfigRef": {"name": "pod-oidc", "audience": "x"}}))
    result = validate(docs)
    assert result.ok, result.problems
    (backend,) = result.plans[0].backends
    assert backend.endpoint == HttpEndpoint("https://old.example.com/mcp", "streamable-http")
    (ignored,) = matching(result, rule="ignored-field")
    assert ignored.path == "spec.oidcConfigRef" and "connects to remoteUrl directly" in \
        ignored.message and "incomingAuth decides who gets in" in ignored.message
    (k8s,) = matching(result, rule="kubernetes-only")
    assert k8s.message.startswith("proxyPort: ignored outside Kubernetes (they shape only "
                                  "ToolHive's proxy pod")


def test_remote_url_and_remote_url_legacy_must_agree() -> None:
    docs = gateway_docs(proxy(remoteURL="https://other.example.com/mcp"))
    expect_error(validate(docs), "conflict", "spec.remoteURL", kind="MCPRemoteProxy",
                 contains="differs from spec.remoteUrl (remoteURL is its name up to ToolHive "
                          "v0.15)")
    resource(docs, "MCPRemoteProxy")["spec"]["remoteURL"] = "https://mcp.example.com/mcp"
    assert validate(docs).ok


def test_a_remote_proxy_needs_a_url() -> None:
    docs = gateway_docs(doc("MCPRemoteProxy", "proxy", {"groupRef": "remote"}))
    expect_error(validate(docs), "required", "spec.remoteUrl", kind="MCPRemoteProxy",
                 contains="is required: the URL of the remote MCP server")


@pytest.mark.parametrize(("url", "what"), [
    ("http://127.0.0.1:8080/mcp", "loopback"),
    ("http://localhost:9000/mcp", "loopback"),
    ("https://10.1.2.3/mcp", "private"),
    ("http://169.254.169.254/latest", "link-local"),
    ("http://[::1]:9000/mcp", "loopback"),
    ("http://[::ffff:192.168.1.5]/mcp", "private"),
    ("http://0.0.0.0/mcp", "unspecified"),
])
def test_private_endpoints_need_allow_private_endpoint(url: str, what: str) -> None:
    docs = gateway_docs(entry(remoteUrl=url))
    expect_error(validate(docs), "private-endpoint", "spec.remoteUrl", kind="MCPServerEntry",
                 contains=f"has a host that is {what}: refused unless "
                          "spec.allowPrivateEndpoint is true")
    resource(docs, "MCPServerEntry")["spec"]["allowPrivateEndpoint"] = True
    assert validate(docs).ok


def test_names_are_not_resolved_at_load_time() -> None:
    assert validate(gateway_docs(entry(remoteUrl="https://mcp.internal.corp/mcp"))).ok


@pytest.mark.parametrize(("name", "why"), [
    ("Connection", "is a hop-by-hop or transport header"),
    ("Transfer-Encoding", "is a hop-by-hop or transport header"),
    ("Host", "is a hop-by-hop or transport header"),
    ("Mcp-Session-Id", "is the MCP transport's own header"),
    ("MCP-Protocol-Version", "is the MCP transport's own header"),
    ("X-Forwarded-For", "would spoof a proxy's forwarding headers"),
])
def test_refused_header_names(name: str, why: str) -> None:
    docs = gateway_docs(entry(headerForward={"addPlaintextHeaders": {name: "v"}}))
    expect_error(validate(docs), "header-name",
                 f"spec.headerForward.addPlaintextHeaders.{name}", kind="MCPServerEntry",
                 contains=f"{name!r} {why}")


def test_refused_header_name_from_a_secret() -> None:
    docs = gateway_docs(secret("s", k="v"), proxy(headerForward={"addHeadersFromSecret": [
        {"headerName": "mcp-session-id", "valueSecretRef": {"name": "s", "key": "k"}}]}))
    expect_error(validate(docs), "header-name",
                 "spec.headerForward.addHeadersFromSecret[0].headerName", kind="MCPRemoteProxy",
                 contains="is the MCP transport's own header")


def test_a_header_given_twice_and_a_bad_value() -> None:
    docs = gateway_docs(secret("s", k="v"), entry(headerForward={
        "addPlaintextHeaders": {"X-Key": "a"},
        "addHeadersFromSecret": [{"headerName": "x-key",
                                  "valueSecretRef": {"name": "s", "key": "k"}}]}))
    expect_error(validate(docs), "duplicate-name",
                 "spec.headerForward.addHeadersFromSecret[0].headerName",
                 contains="header 'x-key' is given twice (names are case-insensitive)")
    docs = gateway_docs(entry(headerForward={"addPlaintextHeaders": {"X-Key": "a\r\nHost: x"}}))
    expect_error(validate(docs), "header-value", "spec.headerForward.addPlaintextHeaders.X-Key",
                 contains="must not contain control characters")


def test_a_secret_header_value_is_checked_and_never_echoed() -> None:
    docs = gateway_docs(secret("s", k="zebra\n"), entry(headerForward={"addHeadersFromSecret": [
        {"headerName": "X-Key", "valueSecretRef": {"name": "s", "key": "k"}}]}))
    problem = expect_error(validate(docs), "header-value",
                           "spec.headerForward.addHeadersFromSecret[0].valueSecretRef",
                           contains=f"Secret {NS}/s[k] is not a usable header value")
    assert "zebra" not in problem.message
    docs = gateway_docs(entry(headerForward={"addHeadersFromSecret": [
        {"headerName": "X-Key", "valueSecretRef": {"name": "gone", "key": "k"}}]}))
    expect_error(validate(docs), "reference",
                 "spec.headerForward.addHeadersFromSecret[0].valueSecretRef.name",
                 contains=f"refers to Secret {NS}/gone")


def test_authorization_conflicts_with_the_backends_outgoing_auth() -> None:
    docs = example_docs("embedded-auth-server.yaml")
    jira = resource(docs, "MCPServer", "jira")
    jira["kind"] = "MCPServerEntry"
    jira["spec"] = {"groupRef": {"name": "team-tools"}, "transport": "streamable-http",
                    "remoteUrl": "https://jira.example.com/mcp",
                    "headerForward": {"addPlaintextHeaders": {"Authorization": "Bearer x"}}}
    expect_error(validate(docs), "header-conflict", "spec.headerForward", kind="MCPServerEntry",
                 name="jira", contains="sets Authorization, which backend 'jira''s outgoing auth "
                                       "(tokenExchange")
    jira["spec"]["headerForward"] = {"addPlaintextHeaders": {"X-Jira-Tenant": "acme"}}
    assert validate(docs).ok


def test_authorization_without_outgoing_auth_is_a_static_credential() -> None:
    result = validate(gateway_docs(entry(headerForward={
        "addPlaintextHeaders": {"Authorization": "Bearer static"}})))
    assert result.ok, result.problems


def test_the_entrys_external_auth_config_is_its_outgoing_strategy() -> None:
    docs = gateway_docs(entry(externalAuthConfigRef={"name": "none"}),
                        doc("MCPExternalAuthConfig", "none", {"type": "unauthenticated"}))
    assert validate(docs).ok
    resource(docs, "MCPServerEntry")["spec"]["externalAuthConfigRef"] = {"name": "gone"}
    expect_error(validate(docs), "reference", "spec.externalAuthConfigRef.name",
                 kind="MCPServerEntry", contains="refers to MCPExternalAuthConfig dev/gone")


def test_a_proxys_rate_limits_are_its_backends_own() -> None:
    result = validate(gateway_docs(proxy(rateLimiting={
        "shared": {"maxTokens": 5, "refillPeriod": "1m"}})))
    assert result.ok, result.problems
    (backend,) = result.plans[0].backends
    assert backend.rate_limits is not None and backend.rate_limits.shared is not None
    assert backend.rate_limits.shared.max_tokens == 5
    assert result.plans[0].rate_limits is None  # not the gateway's
    per_user = validate(gateway_docs(proxy(rateLimiting={
        "perUser": {"maxTokens": 5, "refillPeriod": "1m"}})))
    expect_error(per_user, "rate-limit", "spec.rateLimiting.perUser", kind="MCPRemoteProxy",
                 contains="per-user limits need authenticated callers")


def test_backend_names_are_unique_across_kinds() -> None:
    docs = gateway_docs(entry("same"), proxy("same"))
    expect_error(validate(docs), "duplicate-backend", "metadata.name", kind="MCPRemoteProxy",
                 contains="MCPServerEntry dev/same of group remote has the same name")


def test_an_entry_of_another_group_is_not_a_backend() -> None:
    other = entry()
    other["spec"]["groupRef"] = {"name": "elsewhere"}
    result = validate([*gateway_docs(), other, doc("MCPGroup", "elsewhere", {})])
    assert result.ok and result.plans[0].backends == ()


# --- MCPToolConfig -------------------------------------------------------------------------------


def tool_config(name: str = "tools", **spec: Any) -> dict[str, Any]:
    return doc("MCPToolConfig", name, spec)


@pytest.mark.parametrize("where", ["server", "proxy", "aggregation"])
def test_a_dangling_tool_config_ref_is_named(where: str) -> None:
    ref = {"name": "missing"}
    if where == "server":
        docs = gateway_docs(doc("MCPServer", "srv", {"groupRef": {"name": "remote"},
                                                    "url": "http://127.0.0.1:1/mcp",
                                                    "toolConfigRef": ref}))
        kind, path = "MCPServer", "spec.toolConfigRef.name"
    elif where == "proxy":
        docs = gateway_docs(proxy(toolConfigRef=ref))
        kind, path = "MCPRemoteProxy", "spec.toolConfigRef.name"
    else:
        docs = gateway_docs(entry(), aggregation={"tools": [{"workload": "entry",
                                                             "toolConfigRef": ref}]})
        kind, path = "VirtualMCPServer", "spec.aggregation.tools[0].toolConfigRef.name"
    expect_error(validate(docs), "reference", path, kind=kind,
                 contains="refers to MCPToolConfig dev/missing, which does not exist")


def test_a_backends_own_tool_config_is_its_first_stage() -> None:
    docs = gateway_docs(proxy(toolConfigRef={"name": "tools"}),
                        tool_config(toolsFilter=["plus"], toolsOverride={"add": {"name": "plus"}}))
    result = validate(docs)
    assert result.ok, result.problems
    assert result.plans[0].aggregation.backend_tools == (WorkloadToolsPlan(
        "proxy", ("plus",), (ToolOverridePlan("add", "plus", None),)),)
    assert result.plans[0].aggregation.tools == ()


def test_an_in_cluster_servers_tool_config_is_its_proxys_business() -> None:
    docs = gateway_docs(doc("MCPServer", "srv", {"groupRef": {"name": "remote"},
                                                "toolConfigRef": {"name": "any"}}))
    result = validate(docs)
    assert result.ok and result.plans[0].aggregation.backend_tools == ()


def test_inline_rules_win_over_the_tool_config_as_in_toolhive() -> None:
    config = tool_config(toolsFilter=["b", "c"], toolsOverride={
        "x": {"name": "z"}, "w": {"description": "from the config"}})
    inline: dict[str, Any] = {"workload": "entry", "toolConfigRef": {"name": "tools"},
                              "overrides": {"x": {"name": "y"}}}
    docs = gateway_docs(entry(), config, aggregation={"tools": [inline]})
    (rules,) = validate(docs).plans[0].aggregation.tools
    assert rules == WorkloadToolsPlan("entry", ("b", "c"), (
        ToolOverridePlan("w", None, "from the config"), ToolOverridePlan("x", "y", None)))
    inline["filter"] = ["a"]
    (rules,) = validate(docs).plans[0].aggregation.tools
    assert rules.filter == ("a",)


def test_a_filter_naming_a_renamed_tool_is_warned() -> None:
    docs = gateway_docs(tool_config(toolsFilter=["create_pr"],
                                    toolsOverride={"create_pr": {"name": "gh_create_pr"}}))
    result = validate(docs)
    assert result.ok
    (warning,) = matching(result, rule="filter-renamed")
    assert warning.path == "spec.toolsFilter[0]" and warning.severity is Severity.WARNING
    assert "the filter matches the name clients see (as in ToolHive)" in warning.message
    assert "list 'gh_create_pr' instead" in warning.message


def test_a_tool_configs_annotation_overrides_reach_its_workloads_rules() -> None:
    result = validate(gateway_docs(entry(), tool_config(toolsOverride={
        "add": {"name": "plus", "annotations": {"readOnlyHint": True}}}),
        aggregation={"tools": [{"workload": "entry", "toolConfigRef": {"name": "tools"}}]}))
    assert result.ok and not matching(result, rule="ignored-field"), result.problems
    (rules,) = result.plans[0].aggregation.tools
    assert rules.overrides == (ToolOverridePlan("add", "plus", None,
                                                (("readOnlyHint", True),)),)


def test_the_filter_matches_names_after_overrides_in_both_stages() -> None:
    listing = BackendListing("b", tools=[{"name": "add"}, {"name": "sub"}, {"name": "mul"}])
    plan = AggregationPlan(
        conflict_resolution="manual",
        backend_tools=(WorkloadToolsPlan("b", ("plus", "sub"),
                                         (ToolOverridePlan("add", "plus", None),)),),
        tools=(WorkloadToolsPlan("b", ("sum",), (ToolOverridePlan("plus", "sum", "S"),)),))
    catalog = build_catalog([listing], plan)
    assert [(t["name"], t.get("description")) for t in catalog.tools] == [("sum", "S")]
    assert catalog.tool_routes["sum"].name == "add"


# --- MCPTelemetryConfig --------------------------------------------------------------------------


def test_a_telemetry_config_becomes_the_gateways_otel_environment() -> None:
    telemetry = doc("MCPTelemetryConfig", "otel", {
        "openTelemetry": {"enabled": True, "endpoint": "otel-collector:4318", "insecure": True,
                          "tracing": {"enabled": True, "samplingRate": "0.5"},
                          "headers": {"x-tenant": "acme"},
                          "resourceAttributes": {"deployment.environment": "prod"},
                          "metrics": {"enabled": True},
                          "sensitiveHeaders": [{"name": "x-key", "secretKeyRef": {
                              "name": "otel", "key": "k"}}]},
        "prometheus": {"enabled": True}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "otel", "namespace": NS},
              "stringData": {"k": "s3cret value"}}
    unused = validate(gateway_docs(telemetry, secret))
    assert unused.ok and unused.plans[0].telemetry is None
    assert not matching(unused, rule="ignored-field")  # not used: nothing to say
    docs = gateway_docs(telemetry, secret, telemetryConfigRef={"name": "otel",
                                                               "serviceName": "edge"})
    result = validate(docs)
    assert result.ok, result.problems
    telemetry_plan = result.plans[0].telemetry
    assert telemetry_plan is not None
    assert telemetry_plan.environment() == {
        "OTEL_SERVICE_NAME": "edge", "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4318",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=acme,x-key=s3cret%20value"}
    assert "s3cret" not in repr(telemetry_plan)
    (metrics,) = matching(result, rule="ignored-field")
    assert metrics.path == "spec.openTelemetry.metrics.enabled"
    bad = copy.deepcopy(docs)
    resource(bad, "MCPTelemetryConfig")["spec"]["openTelemetry"]["tracing"]["samplingRate"] = "2"
    expect_error(validate(bad), "pattern", "spec.openTelemetry.tracing.samplingRate",
                 kind="MCPTelemetryConfig")
    resource(bad, "MCPTelemetryConfig")["spec"]["openTelemetry"] = {
        "caBundleRef": {"configMapRef": {"name": "ca", "key": "ca.crt"}}}
    expect_error(validate(bad), "reference", "spec.openTelemetry.caBundleRef.configMapRef.name",
                 kind="MCPTelemetryConfig")
    dangling = gateway_docs(telemetryConfigRef={"name": "nowhere"})
    expect_error(validate(dangling), "reference", "spec.telemetryConfigRef.name")


# --- a real gateway ------------------------------------------------------------------------------


async def test_a_gateway_serves_an_entry_with_its_headers_and_tool_config() -> None:
    """The plaintext and secret headers reach the backend on every request, the client's
    token never does; the MCPToolConfig's filter and override shape tools/list and route
    tools/call under the new name."""
    server, state = make_server("remote")
    async with serving(server, state) as url:
        docs = gateway_docs(
            secret("api", key="key-from-a-secret"),
            entry(remoteUrl=url, allowPrivateEndpoint=True, headerForward={
                "addPlaintextHeaders": {"X-Tenant": "acme"},
                "addHeadersFromSecret": [{"headerName": "X-Api-Key",
                                          "valueSecretRef": {"name": "api", "key": "key"}}]}),
            tool_config(toolsFilter=["plus"], toolsOverride={
                "add": {"name": "plus", "description": "Adds, renamed"}}),
            aggregation={"conflictResolution": "manual",
                         "tools": [{"workload": "entry", "toolConfigRef": {"name": "tools"}}]})
        async with running_gateway(docs) as (gateway_url, _):
            client = RawClient(gateway_url)
            client.token = "client-token-must-stay-here"
            try:
                await client.initialize()
                listed = (await client.request("tools/list")).result["tools"]
                assert [(t["name"], t["description"]) for t in listed] == [
                    ("plus", "Adds, renamed")]
                called = (await client.request("tools/call", {
                    "name": "plus", "arguments": {"a": 2, "b": 3}})).result
                assert called["structuredContent"]["total"] == 5
                refused = (await client.request("tools/call", {
                    "name": "add", "arguments": {"a": 1, "b": 1}})).messages[-1]
                assert "error" in refused or refused["result"].get("isError")
            finally:
                await client.aclose()
        await trio.sleep(0)
    assert "tools/call" in state.methods and state.headers
    for headers in state.headers:
        assert headers.get("x-tenant") == "acme"
        assert headers.get("x-api-key") == "key-from-a-secret"
        assert "client-token" not in headers.get("authorization", "")


def test_the_summary_names_static_headers_never_their_values() -> None:
    docs = gateway_docs(secret("api", key="s3cret-value"), entry(headerForward={
        "addPlaintextHeaders": {"X-Tenant": "acme"},
        "addHeadersFromSecret": [{"headerName": "X-Api-Key",
                                  "valueSecretRef": {"name": "api", "key": "key"}}]}))
    text = describe_plan(validate(docs).plans[0])
    assert "(headers: X-Tenant, X-Api-Key)" in text
    assert "s3cret" not in text and "acme" not in text


@pytest.mark.parametrize(("auth", "header", "expected"), [
    ({"type": "headerInjection", "headerInjection": {
        "headerName": "X-Service-Key", "valueSecretRef": {"name": "api", "key": "key"}}},
     "x-service-key", "key-from-a-secret"),
    ({"type": "bearerToken", "bearerToken": {"tokenSecretRef": {"name": "api", "key": "key"}}},
     "authorization", "Bearer key-from-a-secret"),
])
async def test_static_credentials_of_an_external_auth_config_reach_the_backend(
        auth: dict[str, Any], header: str, expected: str) -> None:
    """headerInjection and bearerToken: the backend gets the Secret's value on every request,
    never the client's token; the summary names the Secret, never its value."""
    server, state = make_server("remote")
    async with serving(server, state) as url:
        docs = gateway_docs(secret("api", key="key-from-a-secret"),
                            doc("MCPExternalAuthConfig", "static", auth),
                            entry(remoteUrl=url, allowPrivateEndpoint=True,
                                  externalAuthConfigRef={"name": "static"}))
        result = validate(docs)
        assert result.ok, result.problems
        assert "key-from-a-secret" not in describe_plan(result.plans[0])
        async with running_gateway(docs) as (gateway_url, _):
            client = RawClient(gateway_url)
            client.token = "client-token-must-stay-here"
            try:
                await client.initialize()
                called = await client.request("tools/call", {
                    "name": "entry_add", "arguments": {"a": 2, "b": 3}})
                assert called.result["structuredContent"]["total"] == 5
            finally:
                await client.aclose()
    assert state.headers  # health checks too: the credential is everyone's
    for headers in state.headers:
        assert headers.get(header) == expected
        assert "client-token" not in str(headers)


async def test_an_entry_behind_a_private_ca_is_trusted_through_its_ca_bundle(
        tmp_path: Path) -> None:
    """caBundleRef: the gateway verifies the server's certificate against the ConfigMap's CA
    (and only with it: without the bundle the same server is unreachable)."""
    ca, cert, key = private_ca(tmp_path, "remote")
    bundle = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca", "namespace": NS},
              "data": {"ca.crt": ca.read_text()}}
    server, state = make_server("remote")
    async with serving(server, state, tls=(cert, key)) as url:
        assert url.startswith("https://")
        trusted = gateway_docs(bundle, entry(remoteUrl=url, allowPrivateEndpoint=True,
                                             caBundleRef={"configMapRef": {"name": "ca",
                                                                           "key": "ca.crt"}}))
        async with running_gateway(trusted) as (gateway_url, _):
            client = RawClient(gateway_url)
            await client.initialize()
            called = await client.request("tools/call", {"name": "entry_add",
                                                         "arguments": {"a": 2, "b": 3}})
            assert called.result["structuredContent"]["total"] == 5
            await client.aclose()
        untrusted = gateway_docs(entry(remoteUrl=url, allowPrivateEndpoint=True))
        async with running_gateway(untrusted) as (gateway_url, _):
            client = RawClient(gateway_url)
            await client.initialize()
            failed = await client.request("tools/call", {"name": "entry_add",
                                                         "arguments": {"a": 2, "b": 3}})
            assert "error" in failed.messages[-1]
            await client.aclose()


def test_a_ca_bundle_must_be_pem_certificates_in_the_config_map() -> None:
    bundle = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca", "namespace": NS},
              "data": {"ca.crt": "not a certificate"}}
    ref = {"configMapRef": {"name": "ca", "key": "ca.crt"}}
    expect_error(validate(gateway_docs(bundle, entry(caBundleRef=ref))), "ca-bundle",
                 'data["ca.crt"]', kind="ConfigMap", contains="is not PEM CA certificates")
    missing = {"configMapRef": {"name": "ca", "key": "other.crt"}}
    expect_error(validate(gateway_docs(bundle, entry(caBundleRef=missing))), "reference",
                 "spec.caBundleRef.configMapRef.key", contains="has no key 'other.crt'")


def test_a_remote_proxys_own_pod_settings_are_said_not_acted_on() -> None:
    """authServerRef and audit belong to ToolHive's proxy pod, which vmcp does not run: each a
    warning naming what decides instead (incomingAuth, config.audit)."""
    result = validate(gateway_docs(proxy(
        audit={"enabled": True},
        authServerRef={"kind": "MCPExternalAuthConfig", "name": "pod-auth"})))
    assert result.ok, result.problems
    notes = {p.path: p.message for p in matching(result, rule="ignored-field")}
    assert "incomingAuth decides who gets in" in notes["spec.authServerRef"]
    assert "config.audit records the calls" in notes["spec.audit"]


async def test_passthrough_headers_reach_the_backend_with_each_callers_values() -> None:
    """passthroughHeaders: the named client headers go to the backend as they came, with the
    values of the request that calls (a later request's, not the session's first); others do
    not."""
    server, state = make_server("remote")
    async with serving(server, state) as url:
        docs = gateway_docs(entry(remoteUrl=url, allowPrivateEndpoint=True),
                            passthroughHeaders=["X-Tenant", "X-Request-Region"])
        async with running_gateway(docs) as (gateway_url, _):
            client = RawClient(gateway_url)
            try:
                reply = await client.initialize()
                assert reply.status == 200
                state.headers.clear()
                for tenant in ("acme", "globex"):
                    called = await client.request(
                        "tools/call", {"name": "entry_add", "arguments": {"a": 1, "b": 2}},
                        headers=client.headers(x_tenant=tenant, x_other="no"))
                    assert called.result["structuredContent"]["total"] == 3
                    calls = [h for h in state.headers if h.get("x-tenant") == tenant]
                    assert calls and all("x-other" not in h and "x-request-region" not in h
                                         for h in calls)
            finally:
                await client.aclose()


def test_passthrough_headers_never_carry_credentials_or_transport_headers() -> None:
    docs = gateway_docs(entry(headerForward={"addPlaintextHeaders": {"X-Tenant": "acme"}}),
                        passthroughHeaders=["Authorization", "Mcp-Session-Id", "X-Tenant"])
    result = validate(docs)
    expect_error(result, "header", "spec.passthroughHeaders[0]",
                 contains="is the client's credential")
    expect_error(result, "header", "spec.passthroughHeaders[1]",
                 contains="the MCP transport's own header")
    expect_error(result, "header", "spec.passthroughHeaders[2]",
                 contains="is set for backend 'entry' already")
