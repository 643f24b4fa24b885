"""The planning of MCPExternalAuthConfig types ``awsSts``, ``obo`` and ``xaa``: what a valid one
plans, and every bad input reported at its field path with its rule (vmcp_trio/resources/
external_auth_rules.py, and gateway_rules.py for what a gateway's context requires)."""

from __future__ import annotations

from typing import Any

import pytest

from vmcp_trio.resources.plan import AwsStsAuth, CrossAppAccessAuth, OnBehalfOfAuth, RoleRule

from .helpers import expect_error, resource, set_field, validate

Docs = list[dict[str, Any]]
EXT = "MCPExternalAuthConfig"
ARN = "arn:aws:iam::123456789012:role/"
TENANT = "0b6c3f1e-1d2a-4c5b-8e9f-0a1b2c3d4e5f"


def use(docs: Docs, spec: dict[str, Any]) -> None:
    """github-tools' MCPExternalAuthConfig becomes ``spec``."""
    resource(docs, EXT, "github-inject")["spec"] = spec


def planned(docs: Docs, **options: Any) -> Any:
    result = validate(docs, **options)
    assert result.ok, result.problems
    return next(b.outgoing for b in result.plans[0].backends if b.name == "github-tools")


def aws(**fields: Any) -> dict[str, Any]:
    return {"type": "awsSts", "awsSts": {"region": "us-west-2", **fields}}


def test_aws_sts_plans_rules_by_priority_and_the_regions_sts(embedded: Docs) -> None:
    use(embedded, aws(fallbackRoleArn=ARN + "reader", sessionDuration=900, roleMappings=[
        {"claim": "staff", "roleArn": ARN + "staff"},
        {"claim": "admins", "roleArn": ARN + "admin", "priority": 1},
        {"claim": "ops", "roleArn": ARN + "ops", "priority": 5}]))
    plan = planned(embedded)
    assert isinstance(plan, AwsStsAuth)
    assert plan.role_rules == (RoleRule("admins", ARN + "admin"), RoleRule("ops", ARN + "ops"),
                               RoleRule("staff", ARN + "staff"))
    use(embedded, aws(roleMappings=[{"matcher": '"admins" in claims["groups"]',
                                     "roleArn": ARN + "admin"}]))
    assert planned(embedded).role_rules == (
        RoleRule(None, ARN + "admin", '"admins" in claims["groups"]'),)
    assert (plan.sts_url, plan.service, plan.session_duration, plan.role_claim,
            plan.session_name_claim) == ("https://sts.us-west-2.amazonaws.com/", "aws-mcp", 900,
                                         "groups", "sub")
    assert plan.subject_provider == "corp"  # the first upstream's, as ToolHive's operator
    use(embedded, aws(fallbackRoleArn=ARN + "r") | {"awsSts": {
        "region": "cn-north-1", "fallbackRoleArn": "arn:aws-cn:iam::123456789012:role/r"}})
    assert planned(embedded).sts_url == "https://sts.cn-north-1.amazonaws.com.cn/"
    assert planned(embedded, environ={"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}
                   ).sts_url == "http://127.0.0.1:5000/"
    assert planned(embedded, environ={"AWS_ENDPOINT_URL": "https://a.example",
                                      "AWS_ENDPOINT_URL_STS": "https://sts.example"}
                   ).sts_url == "https://sts.example/"


AWS_PROBLEMS = [
    # (the awsSts block, rule, path, words of the message)
    ({}, "required", "spec.awsSts.fallbackRoleArn", "roleMappings is empty"),
    ({"fallbackRoleArn": "arn:aws:iam::123:role/x"}, "pattern", "spec.awsSts.fallbackRoleArn",
     "must match"),
    ({"region": "Frankfurt", "fallbackRoleArn": ARN + "r"}, "pattern", "spec.awsSts.region",
     "must match"),
    ({"fallbackRoleArn": ARN + "r", "sessionDuration": 600}, "range",
     "spec.awsSts.sessionDuration", "900"),
    ({"roleMappings": [{"roleArn": ARN + "r"}]}, "one-of", "spec.awsSts.roleMappings[0].claim",
     "exactly one of claim and matcher"),
    ({"roleMappings": [{"claim": "a", "matcher": "true", "roleArn": ARN + "r"}]}, "one-of",
     "spec.awsSts.roleMappings[0].claim", "exactly one"),
    ({"roleMappings": [{"matcher": '"admins" in claims["groups"', "roleArn": ARN + "r"}]},
     "cel", "spec.awsSts.roleMappings[0].matcher", "is not a CEL expression"),
    ({"fallbackRoleArn": ARN + "r", "subjectProviderName": "okta"}, "provider-name",
     "spec.awsSts.subjectProviderName", "defines only: corp, github"),
]


@pytest.mark.parametrize(("block", "rule", "path", "words"), AWS_PROBLEMS,
                         ids=[f"{p[2]}-{p[1]}" for p in AWS_PROBLEMS])
def test_aws_sts_problems(embedded: Docs, block: dict[str, Any], rule: str, path: str,
                          words: str) -> None:
    use(embedded, {"type": "awsSts", "awsSts": {"region": "us-west-2", **block}})
    expect_error(validate(embedded), rule, path, kind=EXT, contains=words)


def test_an_sts_endpoint_of_the_environment_must_be_https(embedded: Docs) -> None:
    use(embedded, aws(fallbackRoleArn=ARN + "r"))
    expect_error(validate(embedded, environ={"AWS_ENDPOINT_URL_STS": "http://sts.example"}),
                 "sts-endpoint", "spec.awsSts", kind=EXT,
                 contains="$AWS_ENDPOINT_URL_STS of vmcp's environment, which must use https")


def obo(**fields: Any) -> dict[str, Any]:
    return {"type": "obo", "obo": {
        "tenantId": TENANT, "clientId": "middle-tier",
        "clientSecretRef": {"name": "upstream-clients", "key": "sts-client-secret"}, **fields}}


def test_obo_plans_the_tenants_token_endpoint_and_the_scope(embedded: Docs) -> None:
    use(embedded, obo(scopes=["api://b/.default", "offline_access"], cacheSkew="45s",
                      subjectTokenProviderName="corp"))
    plan = planned(embedded)
    assert isinstance(plan, OnBehalfOfAuth)
    assert plan.token_url == f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/token"
    assert (plan.scope, plan.cache_skew, plan.subject_provider, plan.client_id) == (
        "api://b/.default offline_access", 45.0, "corp", "middle-tier")
    assert plan.client_secret.text() == "replace-with-the-token-exchange-client-secret"
    use(embedded, obo(audience="api://b/.default", authority="https://login.microsoftonline.us",
                      tenantId="contoso.onmicrosoft.com"))
    plan = planned(embedded)
    assert (plan.token_url, plan.scope) == (
        "https://login.microsoftonline.us/contoso.onmicrosoft.com/oauth2/v2.0/token",
        "api://b/.default")


OBO_PROBLEMS = [
    ({"tenantId": None}, "required", "spec.obo.tenantId", "is required"),
    ({"clientId": None}, "required", "spec.obo.clientId", "is required"),
    ({"clientSecretRef": None}, "required", "spec.obo.clientSecretRef", "is required"),
    ({"scopes": None}, "required", "spec.obo.scopes", "audience and scopes"),
    ({"tenantId": "common"}, "pattern", "spec.obo.tenantId", "must match"),
    ({"authority": "https://login.example.com/"}, "pattern", "spec.obo.authority", "must match"),
    ({"authority": "http://login.example.com"}, "https", "spec.obo.authority",
     "plain http only to a loopback host"),
    ({"scopes": [f"s{i}" for i in range(21)]}, "too-long", "spec.obo.scopes", "20"),
    ({"clientSecretRef": {"name": "upstream-clients", "key": "nope"}}, "secret-key",
     "spec.obo.clientSecretRef.key", "has no key"),
]


@pytest.mark.parametrize(("fields", "rule", "path", "words"), OBO_PROBLEMS,
                         ids=[f"{p[2]}-{p[1]}" for p in OBO_PROBLEMS])
def test_obo_problems(embedded: Docs, fields: dict[str, Any], rule: str, path: str,
                      words: str) -> None:
    spec = obo(**{"scopes": ["api://b/.default"], **fields})
    spec["obo"] = {k: v for k, v in spec["obo"].items() if v is not None}
    use(embedded, spec)
    expect_error(validate(embedded), rule, path, kind=EXT, contains=words)


def xaa(**fields: Any) -> dict[str, Any]:
    return {"type": "xaa", "xaa": {
        "idpTokenUrl": "https://login.example.com/oauth2/v1/token",
        "targetTokenUrl": "https://auth.xray.example/token",
        "targetAudience": "https://auth.xray.example", **fields}}


def test_xaa_plans_both_steps_and_takes_the_first_upstreams_id_token(embedded: Docs) -> None:
    use(embedded, xaa(idpClientId="vmcp", idpClientSecretRef={
        "name": "upstream-clients", "key": "corp-client-secret"},
        targetResource="https://xray.example/mcp", scopes=["x:read"]))
    plan = planned(embedded)
    assert isinstance(plan, CrossAppAccessAuth)
    assert plan.subject_provider == "corp"  # as ToolHive's operator defaults it
    assert (plan.audience, plan.resource, plan.scopes, plan.idp_client_id,
            plan.target_client_id, plan.subject_token_type) == (
        "https://auth.xray.example", "https://xray.example/mcp", ("x:read",), "vmcp", None,
        "urn:ietf:params:oauth:token-type:id_token")
    use(embedded, xaa(subjectProviderName="github",
                      targetTokenUrl="http://auth.xray.internal/token",
                      insecureTargetTokenUrl=True))
    assert planned(embedded).subject_provider == "github"


XAA_PROBLEMS = [
    ({"idpTokenUrl": "http://login.example.com/token"}, "https", "spec.xaa.idpTokenUrl",
     "plain http only to a loopback host"),
    ({"targetTokenUrl": "http://auth.xray.internal/token"}, "https",
     "spec.xaa.targetTokenUrl", "set spec.xaa.insecureTargetTokenUrl: true"),
    ({"idpClientId": "vmcp"}, "required", "spec.xaa.idpClientSecretRef",
     "is required when idpClientId is set"),
    ({"targetClientSecretRef": {"name": "upstream-clients", "key": "corp-client-secret"}},
     "required", "spec.xaa.targetClientId", "is required when targetClientSecretRef is set"),
    ({"subjectTokenType": "urn:ietf:params:oauth:token-type:access_token"}, "enum",
     "spec.xaa.subjectTokenType", "id_token"),
    ({"subjectProviderName": "okta"}, "provider-name", "spec.xaa.subjectProviderName",
     "defines only: corp, github"),
]


@pytest.mark.parametrize(("fields", "rule", "path", "words"), XAA_PROBLEMS,
                         ids=[f"{p[2]}-{p[1]}" for p in XAA_PROBLEMS])
def test_xaa_problems(embedded: Docs, fields: dict[str, Any], rule: str, path: str,
                      words: str) -> None:
    use(embedded, xaa(**fields))
    expect_error(validate(embedded), rule, path, kind=EXT, contains=words)


def test_xaa_needs_a_login_and_the_others_a_callers_token(anonymous: Docs) -> None:
    """xaa's subject is an ID token of the embedded authorization server's login; awsSts and
    obo without a provider trade the caller's token, which anonymous callers lack."""
    anonymous.append({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "s", "namespace": "dev"}, "stringData": {"k": "v"}})
    for spec, path, rule in (
            (xaa(), "spec.authServerConfig", "required"),
            (aws(fallbackRoleArn=ARN + "r"), "spec.incomingAuth.type", "subject-token"),
            (obo(scopes=["a"], clientSecretRef={"name": "s", "key": "k"}),
             "spec.incomingAuth.type", "subject-token")):
        docs = [dict(doc) for doc in anonymous] + [{
            "apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": EXT,
            "metadata": {"name": "creds", "namespace": "dev"}, "spec": spec}]
        set_field(resource(docs, "MCPServer", "notes"), "spec.externalAuthConfigRef",
                  {"name": "creds"})
        expect_error(validate(docs), rule, path, kind="VirtualMCPServer")
