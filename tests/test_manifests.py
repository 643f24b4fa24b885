"""Every real ToolHive manifest of ../shared/toolhive/manifests (and of
tests/fixtures/toolhive-manifests, found since: its NOTICE.md) loads, or fails only as listed.

Each file is validated alone, as a user would validate it, plus companions for what it names but
keeps elsewhere: a Secret for every Secret reference the loader reports missing (placeholder
values made here, long enough for the rules; an EC key where a signing key is named) and an
MCPGroup for every missing group. :data:`EXPECTED` lists the files that still fail, each with
every error and why: a real mistake of that manifest (``Mistake``) or a feature vmcp does not
implement yet (``NotYet``). Like expected failures, the list is exact both ways: a new error
fails the test, and so does an entry that no longer happens (the file now loads: remove it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from vmcp_trio.resources import LoadOptions, ValidationResult, validate_documents
from vmcp_trio.resources.loading import SourceDocument, load_paths, load_text

from .helpers import ROOT, TOOLHIVE_MANIFESTS

MANIFESTS = TOOLHIVE_MANIFESTS
MORE = ROOT / "tests" / "fixtures" / "toolhive-manifests"
"""Real manifests the shared corpus does not hold (their NOTICE.md says where from), named
``vmcp-trio/<path>``."""
FILES = sorted(p for root in (MANIFESTS, MORE) for p in root.rglob("*")
               if p.suffix in (".yaml", ".yml"))
OPTIONS = LoadOptions(environ={})
"""Nothing from the environment of the machine running the tests."""



@dataclass(frozen=True)
class NotYet:
    """Fails because vmcp does not implement ``what`` yet."""

    what: str
    errors: tuple[str, ...]


@dataclass(frozen=True)
class Mistake:
    """Fails because the manifest itself is wrong: ``why``."""

    why: str
    errors: tuple[str, ...]


Expected = NotYet | Mistake

EXPECTED: dict[str, Expected] = {
    'docs-website/guides-k8s-customize-tools-04-mcpremoteproxy-with-toolconfig.yaml': Mistake(
        ('an incomplete snippet: names MCPToolConfig github-tools-config, which '
         'guides-k8s-customize-tools-02 defines'),
        ('MCPRemoteProxy github: spec.toolConfigRef.name [reference]',)),
    'docs-website/guides-k8s-logging-01.yaml': Mistake(
        'the placeholder <SERVER_NAME> is not a DNS name',
        ('MCPServer <SERVER_NAME>: metadata.name [dns-name]',)),
    'docs-website/guides-k8s-logging-02.yaml': Mistake(
        'placeholders (<SERVER_NAME>, <SERVER_URL>) for the name and the URL',
        ('MCPRemoteProxy <SERVER_NAME>: metadata.name [dns-name]',
         'MCPRemoteProxy <SERVER_NAME>: spec.remoteUrl [url]',)),
    'docs-website/guides-k8s-logging-03.yaml': Mistake(
        "placeholders (<SERVER_NAME>) for names, and no spec.incomingAuth (required by "
        "ToolHive's CRD too)",
        ('VirtualMCPServer <SERVER_NAME>: metadata.name [dns-name]',
         'VirtualMCPServer <SERVER_NAME>: spec.groupRef.name [dns-name]',
         'VirtualMCPServer <SERVER_NAME>: spec.incomingAuth [required]',)),
    'docs-website/guides-k8s-migrate-to-v1beta1-03.yaml': Mistake(
        "a snippet whose spec is elided ('# ...'): an MCPServer needs a spec",
        ('MCPServer my-server: spec [required]',)),
    'docs-website/guides-k8s-migrate-to-v1beta1-04.yaml': Mistake(
        "a snippet whose spec is elided ('# ...'): an MCPServer needs a spec",
        ('MCPServer my-server: spec [required]',)),
    'docs-website/guides-k8s-rate-limiting-05-vmcp-ratelimit.yaml': Mistake(
        'the placeholder <YOUR_REDIS_ADDRESS> is not host:port; an incomplete snippet: names an '
        'MCPOIDCConfig that no document defines',
        ('VirtualMCPServer shared-toolkit: spec.incomingAuth.oidcConfigRef.name [reference]',
         'VirtualMCPServer shared-toolkit: spec.sessionStorage.address [host-port]',)),
    'docs-website/guides-registry-configuration-01-mcp-server-with-claims.yaml': Mistake(
        'a snippet showing only metadata: an MCPServer needs a spec',
        ('MCPServer deploy-helper: spec [required]',)),
    'docs-website/guides-registry-configuration-02.yaml': Mistake(
        'a snippet showing only metadata: an MCPServer needs a spec',
        ('MCPServer my-mcp-server: spec [required]',)),
    'docs-website/guides-vmcp-audit-logging-01.yaml': Mistake(
        "no spec.incomingAuth (required by ToolHive's CRD too)",
        ('VirtualMCPServer my-vmcp: spec.incomingAuth [required]',)),
    'docs-website/guides-vmcp-audit-logging-02.yaml': Mistake(
        "no spec.incomingAuth (required by ToolHive's CRD too)",
        ('VirtualMCPServer my-vmcp: spec.incomingAuth [required]',)),
    'docs-website/guides-vmcp-composite-tools-01.yaml': Mistake(
        "a skeleton whose steps are elided: a composite tool needs at least one step (ToolHive's "
        "validation too)",
        ('VirtualMCPCompositeToolDefinition my-workflow: spec.steps [composite-tool]',)),
    'docs-website/guides-vmcp-failure-handling-03.yaml': Mistake(
        'an incomplete snippet: names an MCPOIDCConfig that no document defines',
        ('VirtualMCPServer production-vmcp: spec.incomingAuth.oidcConfigRef.name [reference]',)),
    'docs-website/guides-vmcp-optimizer-06-vmcp-with-optimizer.yaml': Mistake(
        'an incomplete snippet: names an MCPOIDCConfig that no document defines',
        ('VirtualMCPServer full-vmcp: spec.incomingAuth.oidcConfigRef.name [reference]',)),
    'docs-website/guides-vmcp-telemetry-and-metrics-02-virtualmcpserver.yaml': Mistake(
        'an incomplete snippet: names MCPTelemetryConfig shared-otel, which '
        'guides-vmcp-telemetry-and-metrics-01 defines',
        ('VirtualMCPServer my-vmcp: spec.telemetryConfigRef.name [reference]',)),
    'docs-website/integrations-aws-sts-01-aws-sts-auth-config.yaml': Mistake(
        'the placeholders <YOUR_AWS_REGION> and <YOUR_AWS_ACCOUNT_ID> where a region and ARNs '
        'belong',
        ('MCPExternalAuthConfig aws-mcp-sts-auth: spec.awsSts.fallbackRoleArn [pattern]',
         'MCPExternalAuthConfig aws-mcp-sts-auth: spec.awsSts.region [pattern]',
         'MCPExternalAuthConfig aws-mcp-sts-auth: spec.awsSts.roleMappings[0].roleArn '
         '[pattern]',)),
    'docs-website/integrations-aws-sts-03-aws-mcp-remote-proxy.yaml': Mistake(
        ('an incomplete snippet: names MCPExternalAuthConfig aws-mcp-sts-auth, defined in '
         'another page of the guide'),
        ('MCPRemoteProxy aws-mcp-proxy: spec.externalAuthConfigRef.name [reference]',)),
    'docs-website/integrations-aws-sts-04-aws-mcp-remote-proxy-combined.yaml': Mistake(
        'an incomplete snippet: names MCPExternalAuthConfig aws-mcp-sts-auth, defined in another '
        'page of the guide',
        ('MCPRemoteProxy aws-mcp-proxy: spec.externalAuthConfigRef.name [reference]',)),
    'docs-website/integrations-okta-02-github-mcpserver-oidc.yaml': Mistake(
        "the placeholder 'YOUR_ISSUER_URL' where URLs belong",
        ('MCPOIDCConfig okta-oidc: spec.inline.issuer [url]',
         'MCPOIDCConfig okta-oidc: spec.inline.jwksUrl [url]',)),
    'docs-website/reference-crds-mcpoidcconfig-01-mcpoidcconfig.yaml': Mistake(
        'the placeholder <string> where the issuer URL belongs',
        ('MCPOIDCConfig my-mcpoidcconfig: spec.inline.issuer [url]',)),
    'docs-website/reference-crds-mcpserverentry-01-mcpserverentry.yaml': Mistake(
        'the placeholder <string> where the group name belongs',
        ('MCPServerEntry my-mcpserverentry: spec.groupRef.name [dns-name]',)),
    'docs-website/reference-crds-virtualmcpcompositetooldefinition-01-virtualmcpcompositetooldefinition.yaml':
        Mistake(
        'the CRD reference\'s placeholder: name <string>, no description, no steps',
        ('VirtualMCPCompositeToolDefinition my-virtualmcpcompositetooldefinition: '
         'spec.description [composite-tool]',
         'VirtualMCPCompositeToolDefinition my-virtualmcpcompositetooldefinition: spec.name '
         '[composite-tool]',
         'VirtualMCPCompositeToolDefinition my-virtualmcpcompositetooldefinition: '
         'spec.steps [composite-tool]',)),
    'docs-website/reference-crds-virtualmcpserver-01-virtualmcpserver.yaml': Mistake(
        'the placeholder <string> where the group name belongs',
        ('VirtualMCPServer my-virtualmcpserver: spec.groupRef.name [dns-name]',)),
    'docs-website-v1alpha1/guides-vmcp-composite-tools-01.yaml': Mistake(
        "a skeleton whose steps are elided: a composite tool needs at least one step (ToolHive's "
        "validation too)",
        ('VirtualMCPServer my-vmcp: spec.config.compositeTools[0].steps [composite-tool]',)),
    'docs-website-v1alpha1/guides-vmcp-failure-handling-03.yaml': Mistake(
        'an incomplete snippet: names an MCPOIDCConfig that no document defines',
        ('VirtualMCPServer production-vmcp: spec.incomingAuth.oidcConfigRef.name [reference]',)),
    'docs-website-v1alpha1/guides-vmcp-optimizer-05-vmcp-with-optimizer.yaml': Mistake(
        'spec.groupRef is given twice (a duplicate YAML key)',
        ('None None:  [duplicate-key]',)),
    'toolhive-chainsaw/st-pod-annotations-mcpserver.yaml': Mistake(
        "chainsaw's template ($testPrefix) where a DNS name belongs",
        ('MCPServer ($testPrefix): metadata.name [dns-name]',)),
    'toolhive-chainsaw/st-sse-mcpserver.yaml': Mistake(
        "chainsaw's template ($testPrefix) where a DNS name belongs",
        ('MCPServer ($testPrefix): metadata.name [dns-name]',)),
    'toolhive-chainsaw/st-stdio-mcpserver.yaml': Mistake(
        "chainsaw's template ($testPrefix) where a DNS name belongs",
        ('MCPServer ($testPrefix): metadata.name [dns-name]',)),
    'toolhive-chainsaw/st-stdio-streamable-http-mcpserver.yaml': Mistake(
        "chainsaw's template ($testPrefix) where a DNS name belongs",
        ('MCPServer ($testPrefix): metadata.name [dns-name]',)),
    'toolhive-chainsaw/st-streamable-http-mcpserver.yaml': Mistake(
        "chainsaw's template ($testPrefix) where a DNS name belongs",
        ('MCPServer ($testPrefix): metadata.name [dns-name]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-awssts-missing-config.yaml': Mistake(
        "deliberately invalid (ToolHive's test expects the API server to reject it): type awsSts "
        "without its block",
        ('MCPExternalAuthConfig test-invalid-awssts: spec.awsSts [required]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-bearertoken-missing-config.yaml':
        Mistake(
        ("deliberately invalid (ToolHive's test expects rejection): type bearerToken without "
         'its block'),
        ('MCPExternalAuthConfig test-invalid-bearertoken: spec.bearerToken [required]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-embeddedauthserver-missing-config.yaml':
        Mistake(
        "deliberately invalid (ToolHive's test expects rejection): type embeddedAuthServer "
        "without its block",
        ('MCPExternalAuthConfig test-invalid-embeddedauthserver: spec.embeddedAuthServer '
         '[required]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-headerinjection-missing-config.yaml':
        Mistake(
        ("deliberately invalid (ToolHive's test expects rejection): type headerInjection "
         'without its block'),
        ('MCPExternalAuthConfig test-invalid-headerinjection: spec.headerInjection [required]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-tokenexchange-missing-config.yaml':
        Mistake(
        ("deliberately invalid (ToolHive's test expects rejection): type tokenExchange without "
         'its block'),
        ('MCPExternalAuthConfig test-invalid-tokenexchange: spec.tokenExchange [required]',)),
    'toolhive-chainsaw/validation-mcpexternalauthconfig-reject-unauthenticated-with-config.yaml':
        Mistake(
        ("deliberately invalid (ToolHive's test expects rejection): type unauthenticated with "
         'a tokenExchange block'),
        ('MCPExternalAuthConfig test-invalid-unauthenticated: spec.tokenExchange [unused-field]',)),
    'toolhive-chainsaw/vmcp.extracted.yaml': Mistake(
        "chainsaw's reject cases: duplicate step ids and a dependency cycle, which ToolHive's "
        "webhook refuses too",
        ('VirtualMCPCompositeToolDefinition circular-deps: spec.steps[1].dependsOn '
         '[composite-tool]',
         'VirtualMCPCompositeToolDefinition duplicate-steps: spec.steps[1].id [composite-tool]',)),
    'toolhive-docs/arch-02-core-concepts-01.yaml': Mistake(
        ('tools[0] has no workload and a filter written as {allow: [...]} (a list of tool '
         'names in every release); no spec.incomingAuth'),
        ('VirtualMCPServer team-tools: spec.aggregation.tools[0].filter [type]',
         'VirtualMCPServer team-tools: spec.aggregation.tools[0].workload [required]',
         'VirtualMCPServer team-tools: spec.incomingAuth [required]',)),
    'toolhive-docs/arch-09-operator-architecture-01.yaml': Mistake(
        'an incomplete snippet: names an MCPExternalAuthConfig that no document defines',
        ('MCPRemoteProxy bedrock-proxy: spec.externalAuthConfigRef.name [reference]',)),
    'toolhive-docs/arch-17-token-exchange-delegation-02.yaml': Mistake(
        ('an incomplete snippet: no spec.incomingAuth, an authServerConfig without '
         'upstreamProviders'),
        ('VirtualMCPServer reporting-gateway: spec.authServerConfig.upstreamProviders [required]',
         'VirtualMCPServer reporting-gateway: spec.incomingAuth [required]',)),
    'toolhive-docs/operator-advanced-workflow-patterns-02.yaml': Mistake(
        'no description (its onError.maxRetries is retryCount under its name up to v0.6)',
        ('VirtualMCPCompositeToolDefinition robust-deployment: spec.description '
         '[composite-tool]',)),
    'toolhive-docs/operator-virtualmcpcompositetooldefinition-guide-01.yaml': Mistake(
        "a skeleton whose steps are elided: a composite tool needs at least one step (ToolHive's "
        "validation too)",
        ('VirtualMCPCompositeToolDefinition deploy-app: spec.steps [composite-tool]',)),
    'toolhive-docs/operator-virtualmcpcompositetooldefinition-guide-06.yaml': Mistake(
        "no spec.incomingAuth (required by ToolHive's CRD too)",
        ('VirtualMCPServer production-vmcp: spec.incomingAuth [required]',)),
    'toolhive-docs/operator-virtualmcpserver-api-02.yaml': Mistake(
        'outgoingAuth backend type service_account (no such type in any release) with a '
        'serviceAccount field; an incomplete snippet: names backends, an MCPOIDCConfig and an '
        'MCPToolConfig that no document defines',
        ('VirtualMCPServer engineering-vmcp: spec.config.aggregation.tools[0].workload '
         '[group-member]',
         'VirtualMCPServer engineering-vmcp: spec.config.aggregation.tools[1].toolConfigRef.name '
         '[reference]',
         'VirtualMCPServer engineering-vmcp: spec.config.aggregation.tools[1].workload '
         '[group-member]',
         'VirtualMCPServer engineering-vmcp: spec.incomingAuth.oidcConfigRef.name [reference]',
         'VirtualMCPServer engineering-vmcp: spec.operational.timeouts.perWorkload.github '
         '[group-member]',
         'VirtualMCPServer engineering-vmcp: spec.outgoingAuth.backends.slack.serviceAccount '
         '[unknown-field]',
         'VirtualMCPServer engineering-vmcp: spec.outgoingAuth.backends.slack.type [enum]',)),
    'toolhive-docs/vmcp-readme-01.yaml': Mistake(
        ('config.group (the field is groupRef), an unknown '
         'config.operational.sessionManagementV2, no spec.incomingAuth'),
        ('VirtualMCPServer my-vmcp: spec.config.group [unknown-field]',
         'VirtualMCPServer my-vmcp: spec.config.operational.sessionManagementV2 [unknown-field]',
         'VirtualMCPServer my-vmcp: spec.incomingAuth [required]',)),
    'toolhive-examples/mcpexternalauthconfig_minimal.yaml': Mistake(
        ("snake_case field names (token_url, client_id, client_secret_ref) that no release's "
         'CRD has: tokenUrl is then missing'),
        ('MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.client_id [unknown-field]',
         ('MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.client_secret_ref '
          '[unknown-field]'),
         'MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.tokenUrl [required]',
         'MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.token_url [unknown-field]',)),
    'toolhive-examples/mcpserver_with_external_auth.yaml': Mistake(
        ('names MCPExternalAuthConfig oauth-token-exchange, which no file defines (an '
         'incomplete example)'),
        ('MCPServer fetch-with-auth: spec.externalAuthConfigRef.name [reference]',)),
    'toolhive-examples/mcpserverentry_with_ca_bundle.yaml': Mistake(
        'a placeholder certificate (a comment between the PEM markers)',
        ('ConfigMap corp-ca-bundle: data["ca.crt"] [ca-bundle]',)),
    'toolhive-examples-v0.19.0/mcpserverentry_with_ca_bundle.yaml': Mistake(
        'a placeholder certificate (a comment between the PEM markers)',
        ('ConfigMap corp-ca-bundle: data["ca.crt"] [ca-bundle]',)),
    'toolhive-examples-v0.22.0/mcpexternalauthconfig_minimal.yaml': Mistake(
        ("snake_case field names (token_url, client_id, client_secret_ref) that no release's "
         'CRD has: tokenUrl is then missing'),
        ('MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.client_id [unknown-field]',
         ('MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.client_secret_ref '
          '[unknown-field]'),
         'MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.tokenUrl [required]',
         'MCPExternalAuthConfig minimal-oauth: spec.tokenExchange.token_url [unknown-field]',)),
    'toolhive-examples-v0.22.0/mcpserverentry_with_ca_bundle.yaml': Mistake(
        'a placeholder certificate (a comment between the PEM markers)',
        ('ConfigMap corp-ca-bundle: data["ca.crt"] [ca-bundle]',)),
    'toolhive-examples-v0.6.17/mcpremoteproxy_with_inline_oidc_secretref.yaml': Mistake(
        ("upstreamURL, a field of no release's CRD (the URL was remoteURL then)"),
        ('MCPRemoteProxy github-proxy: spec.upstreamURL [unknown-field]',)),
    'vmcp-trio/docs-website/guides-k8s-remote-mcp-proxy-06.yaml': Mistake(
        'an incomplete snippet: names MCPExternalAuthConfig external-auth-config, which the '
        "page's previous block defines",
        ('MCPRemoteProxy analytics-proxy: spec.externalAuthConfigRef.name [reference]',)),
    'vmcp-trio/docs-website/guides-vmcp-backend-discovery-02.yaml': Mistake(
        'an incomplete snippet: names MCPExternalAuthConfig github-token-config, which no block '
        'of the page defines',
        ('VirtualMCPServer my-vmcp: spec.outgoingAuth.backends.github-mcp.externalAuthConfigRef'
         '.name [reference]',)),
    'vmcp-trio/docs-website/guides-vmcp-embedded-auth-server-vmcp-07-virtualmcpserver.yaml':
        Mistake(
        "an incomplete snippet: the page's previous blocks define its backends, MCPOIDCConfig "
        'and MCPExternalAuthConfigs',
        ('VirtualMCPServer my-vmcp: spec.incomingAuth.oidcConfigRef.name [reference]',
         'VirtualMCPServer my-vmcp: spec.outgoingAuth.backends.backend-github [group-member]',
         'VirtualMCPServer my-vmcp: spec.outgoingAuth.backends.backend-github'
         '.externalAuthConfigRef.name [reference]',)),
    'toolhive-examples-v0.6.17/mcpserver_with_external_auth.yaml': Mistake(
        ('names MCPExternalAuthConfig oauth-token-exchange, which no file defines (an '
         'incomplete example)'),
        ('MCPServer fetch-with-auth: spec.externalAuthConfigRef.name [reference]',)),

}


# --- companions -----------------------------------------------------------------------------------

_MISSING = re.compile(r"refers to (Secret|MCPGroup) ([a-z0-9-]+)/([a-z0-9.-]+),")
_PATH_PART = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


def _walk(body: Any, path: str) -> Any:
    """The value at a problem's formatted path (``spec.refs[0].name``) of a document."""
    node = body
    for match in _PATH_PART.finditer(path):
        key, index, quoted = match.groups()
        node = node[int(index)] if index is not None else node[key if key else quoted]
    return node


@cache
def _signing_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def companions(docs: list[SourceDocument], result: ValidationResult) -> list[dict[str, Any]]:
    """A Secret per missing Secret reference (by namespace and name, with every key asked for)
    and an MCPGroup per missing group."""
    secrets: dict[tuple[str, str], dict[str, str]] = {}
    groups: set[tuple[str, str]] = set()
    bodies = {doc.index: doc.body for doc in docs}
    for problem in result.errors:
        found = _MISSING.search(problem.message) if problem.rule == "reference" else None
        if found is None:
            continue
        kind, namespace, name = found.groups()
        if kind == "MCPGroup":
            groups.add((namespace, name))
            continue
        ref_path = problem.path.removesuffix(".name")
        key = _walk(bodies[problem.document or 0], ref_path)["key"]
        value = (_signing_key() if "signingKeySecretRefs" in ref_path
                 else f"placeholder-{name}-{key}-".ljust(48, "x"))
        secrets.setdefault((namespace, name), {})[key] = value
    return [
        *({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": namespace}, "stringData": data}
          for (namespace, name), data in sorted(secrets.items())),
        *({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPGroup",
           "metadata": {"name": name, "namespace": namespace}}
          for namespace, name in sorted(groups)),
    ]


def validate_alone(path: Path) -> ValidationResult:
    """The file alone, then again with the companions of what it names but does not hold."""
    docs, problems = load_paths([path])
    result = validate_documents(docs, OPTIONS, problems)
    extra = companions(docs, result)
    if not extra:
        return result
    more, more_problems = load_text(yaml.safe_dump_all(extra), "companions.yaml")
    assert not more_problems
    return validate_documents([*docs, *more], OPTIONS, problems)


def error_keys(result: ValidationResult) -> tuple[str, ...]:
    """Each error as ``Kind name: path [rule]``, sorted, duplicates once."""
    return tuple(sorted({f"{p.kind} {p.name}: {p.path} [{p.rule}]" for p in result.errors}))


def name_of(path: Path) -> str:
    if path.is_relative_to(MORE):
        return "vmcp-trio/" + path.relative_to(MORE).as_posix()
    return path.relative_to(MANIFESTS).as_posix()


# --- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=name_of)
def test_manifest_loads_or_fails_only_as_listed(path: Path) -> None:
    result = validate_alone(path)
    expected = EXPECTED.get(name_of(path))
    got = error_keys(result)
    if expected is None:
        assert not got, "\n".join(map(str, result.errors))
        return
    assert got, f"{name_of(path)} now loads: remove its entry from EXPECTED"
    assert got == tuple(sorted(expected.errors)), (
        "errors differ from EXPECTED:\n" + "\n".join(map(str, result.errors)))


def test_every_entry_names_a_manifest() -> None:
    assert set(EXPECTED) <= {name_of(p) for p in FILES}
    assert all(entry.errors for entry in EXPECTED.values())


def test_the_corpus_is_all_there() -> None:
    """220 files in 9 folders (their NOTICE.md): a missing file would pass unnoticed."""
    assert MANIFESTS.is_dir(), f"{MANIFESTS} is missing: ../shared must be beside the repository"
    shared = [p for p in FILES if p.is_relative_to(MANIFESTS)]
    assert len(shared) == 220
    assert len({p.relative_to(MANIFESTS).parts[0] for p in shared}) == 9
    assert len(FILES) - len(shared) == 23


def test_companions_are_made_for_missing_references_only() -> None:
    text = """\
apiVersion: toolhive.stacklok.dev/v1beta1
kind: VirtualMCPServer
metadata: {name: gw, namespace: tools}
spec:
  groupRef: {name: team}
  incomingAuth: {type: anonymous}
  sessionStorage:
    provider: redis
    address: redis:6379
    passwordRef: {name: redis, key: password}
    hmacSecretRefs: [{name: fleet, key: hmac}]
"""
    docs, _ = load_text(text, "gw.yaml")
    made = companions(docs, validate_documents(docs, OPTIONS))
    assert [(d["kind"], d["metadata"]["name"]) for d in made] == [
        ("Secret", "fleet"), ("Secret", "redis"), ("MCPGroup", "team")]
    assert all(d["metadata"]["namespace"] == "tools" for d in made)
    assert len(made[0]["stringData"]["hmac"]) >= 32
    more, _ = load_text(yaml.safe_dump_all(made), "companions.yaml")
    assert validate_documents([*docs, *more], OPTIONS).ok
