"""Shapes of MCPExternalAuthConfig: the credential a backend gets, one block per ``type``.

One job: the models of ToolHive's MCPExternalAuthConfig spec, under ToolHive's names, shape
only (field names, types, enums, patterns, bounds). Which block goes with which ``type``, the
rules between fields and the references are :mod:`.external_auth_rules`' job. Where vmcp is
more lenient than ToolHive's admission patterns it says so: a token endpoint or an Entra
authority may be plain http to a loopback host, as ToolHive's own runtime allows (checked by
the rules, not here).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict

from .base_model import FreeForm, Model, Scopes, SecretKeyRef
from .fields import Bool, DnsLabel, DurationText, NonEmpty, UrlText

__all__ = ["AwsSts", "CrossAppAccess", "ExternalAuthConfigSpec", "OnBehalfOf",
           "RoleMapping"]

SubjectTokenType = Literal[
    "access_token",
    "id_token",
    "jwt",
    "urn:ietf:params:oauth:token-type:access_token",
    "urn:ietf:params:oauth:token-type:id_token",
    "urn:ietf:params:oauth:token-type:jwt",
]
"""ToolHive's short forms and the RFC 8693 URNs they stand for."""


class TokenExchange(Model):
    token_url: UrlText
    audience: NonEmpty
    client_id: NonEmpty | None = None
    client_secret_ref: SecretKeyRef | None = None
    scopes: Scopes = ()
    subject_token_type: SubjectTokenType = "access_token"
    subject_provider_name: DnsLabel | None = None
    external_token_header_name: Annotated[
        str, Field(min_length=1, max_length=256, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    ] | None = None
    insecure_allow_http: Bool = Field(False, alias="insecureAllowHTTP")


class UpstreamInject(Model):
    provider_name: DnsLabel


class HeaderInjection(Model):
    """``headerInjection``: one header whose value is a Secret's, on every request."""

    header_name: Annotated[str, Strict(), Field(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
                                                 min_length=1, max_length=256)]
    value_secret_ref: SecretKeyRef


class BearerToken(Model):
    """``bearerToken``: ``Authorization: Bearer <a Secret's value>`` on every request."""

    token_secret_ref: SecretKeyRef


ExternalAuthType = Literal["upstreamInject", "tokenExchange", "unauthenticated",
                           "headerInjection", "bearerToken", "embeddedAuthServer", "awsSts",
                           "obo", "xaa"]
"""ToolHive's nine types (``embeddedAuthServer`` is not a gateway's: the rules refuse it)."""


RoleArn = Annotated[str, Strict(), Field(
    max_length=2048, pattern=r"^arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:role/[\w+=,.@\-_/]+$")]
"""An IAM role's ARN, in one of the three partitions."""


class RoleMapping(Model):
    """One rule of ``awsSts.roleMappings``: exactly one of ``claim`` (a value the caller's
    ``roleClaim`` claim holds) and ``matcher``; the matching rule of lowest ``priority`` (then
    the first) names the role."""

    claim: NonEmpty | None = None
    matcher: NonEmpty | None = None
    role_arn: RoleArn
    priority: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] | None = None


class AwsSts(Model):
    """``awsSts``: the caller's token exchanged at AWS STS (AssumeRoleWithWebIdentity) for
    temporary credentials of a role, with which every request to the backend is signed
    (SigV4)."""

    region: Annotated[str, Strict(), Field(min_length=1, max_length=64,
                                           pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")]
    service: NonEmpty = "aws-mcp"
    fallback_role_arn: RoleArn | None = None
    role_mappings: tuple[RoleMapping, ...] = ()
    role_claim: NonEmpty = "groups"
    session_duration: Annotated[int, Strict(), Field(ge=900, le=43200)] = 3600
    session_name_claim: NonEmpty = "sub"
    subject_provider_name: DnsLabel | None = None


class OnBehalfOf(Model):
    """``obo``: Microsoft Entra ID's on-behalf-of flow, the caller's token as the assertion of a
    JWT-bearer grant (``requested_token_use=on_behalf_of``) at the tenant's token endpoint."""

    tenant_id: Annotated[str, Strict(), Field(max_length=253, pattern=(
        r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|"
        r"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,})$"))] | None = None
    authority: Annotated[str, Strict(), Field(
        max_length=2048, pattern=r"^https?://[^\s?#@]+[^/\s?#@]$")] | None = None
    client_id: NonEmpty | None = None
    client_secret_ref: SecretKeyRef | None = None
    audience: NonEmpty | None = None
    scopes: Annotated[tuple[Annotated[str, Strict(), Field(min_length=1, max_length=256)], ...],
                      Field(max_length=20)] = ()
    subject_token_provider_name: DnsLabel | None = None
    cache_skew: DurationText | None = None


class CrossAppAccess(Model):
    """``xaa``: Cross-App Access (the ID-JAG of draft-ietf-oauth-identity-assertion-authz-grant,
    the MCP enterprise-managed authorization extension): the user's ID token exchanged at the
    IdP for an ID-JAG (RFC 8693), presented to the resource's authorization server for an
    access token (RFC 7523)."""

    idp_token_url: UrlText
    idp_client_id: NonEmpty | None = None
    idp_client_secret_ref: SecretKeyRef | None = None
    target_token_url: UrlText
    insecure_target_token_url: Bool = False
    target_client_id: NonEmpty | None = None
    target_client_secret_ref: SecretKeyRef | None = None
    target_audience: NonEmpty
    target_resource: NonEmpty | None = None
    scopes: Scopes = ()
    subject_provider_name: DnsLabel | None = None
    subject_token_type: Literal["urn:ietf:params:oauth:token-type:id_token"] = (
        "urn:ietf:params:oauth:token-type:id_token")


class ExternalAuthConfigSpec(Model):
    type: ExternalAuthType
    upstream_inject: UpstreamInject | None = None
    token_exchange: TokenExchange | None = None
    header_injection: HeaderInjection | None = None
    bearer_token: BearerToken | None = None
    embedded_auth_server: FreeForm | None = None
    aws_sts: AwsSts | None = None
    obo: OnBehalfOf | None = None
    xaa: CrossAppAccess | None = None
