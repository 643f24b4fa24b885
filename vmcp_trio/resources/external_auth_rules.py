"""MCPExternalAuthConfig's rules: the outgoing strategy each one plans, every problem at its field.

One job: turn one MCPExternalAuthConfig into its :data:`~.plan.OutgoingPlan` (None when it is
invalid, each problem reported at its field path). Whether a backend may use it (the gateway's
incoming auth, its authorization server's providers) is :mod:`.gateway_rules`' job. The rules:

* **type and block.** The block named like ``type`` is required (``unauthenticated`` has none:
  no credential, and the caller's token is never passed on), every other type's block refused.
  ``embeddedAuthServer`` is the authorization server of ToolHive's proxy in front of one
  backend, not a gateway's credential: warned about, and refused where a backend uses it.
* **Secrets** resolve as every Secret reference does (:meth:`~.resolver.Resolver.secret`); a
  secret without its client id is refused, and a client id of a grant that needs one without
  its secret.
* **Token endpoints** are https, or plain http to a loopback host (as ToolHive's runtime
  allows); ``tokenExchange`` also with ``insecureAllowHTTP``, an ``xaa`` target with
  ``insecureTargetTokenUrl``.
* **awsSts**: ``fallbackRoleArn`` or ``roleMappings`` (or both); each mapping exactly one of
  ``claim`` and ``matcher`` (a CEL expression over the caller's ``claims``, compiled here: a
  syntax error is reported at its field). STS is ``https://sts.<region>.amazonaws.com``
  (``.amazonaws.com.cn`` in China), or what ``AWS_ENDPOINT_URL_STS``, else ``AWS_ENDPOINT_URL``,
  says in vmcp's environment (the AWS SDKs' variables).
* **obo** (Entra ID): ``tenantId``, ``clientId``, ``clientSecretRef`` and one of ``audience``
  or ``scopes`` are required (ToolHive's operator requires them at reconcile); the token
  endpoint is ``<authority>/<tenantId>/oauth2/v2.0/token``, ``authority`` defaulting to
  ``https://login.microsoftonline.com``; the requested scope is the space-joined ``scopes``,
  else ``audience``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..auth.claims_matcher import MatcherError, compile_matcher
from ..auth.ssrf import is_loopback_url
from . import models as m
from . import remote_rules
from .external_auth_models import (
    AwsSts,
    CrossAppAccess,
    HeaderInjection,
    OnBehalfOf,
    TokenExchange,
)
from .plan import (
    AwsStsAuth,
    CrossAppAccessAuth,
    NoOutgoingAuth,
    OnBehalfOfAuth,
    OutgoingPlan,
    RoleRule,
    SecretValue,
    StaticCredentialAuth,
    TokenExchangeAuth,
    UpstreamInjectAuth,
)
from .problems import PathPart
from .report import Report, Resource, ResourceKey

__all__ = ["external_auth", "sts_url"]

TOKEN_TYPE_URN = "urn:ietf:params:oauth:token-type:"
ENTRA_AUTHORITY = "https://login.microsoftonline.com"

_AUTH_BLOCKS = {"upstream_inject": "upstreamInject", "token_exchange": "tokenExchange",
                "header_injection": "headerInjection", "bearer_token": "bearerToken",
                "embedded_auth_server": "embeddedAuthServer", "aws_sts": "awsSts",
                "obo": "obo", "xaa": "xaa"}
"""MCPExternalAuthConfig's strategy blocks: field name to ToolHive's name (and type)."""


class Resolver(Protocol):
    """What these rules use of :class:`~.resolver.Resolver` (which calls them)."""

    report: Report
    environ: Mapping[str, str]
    unimplemented_auth: dict[ResourceKey, str]

    def secret(self, owner: Resource, path: Sequence[PathPart],
               ref: m.SecretKeyRef) -> SecretValue | None: ...

    def require_https(self, owner: Resource, path: Sequence[PathPart], url: str | None,
                      allowed: bool, switch: str, *, blame: bool = True) -> None: ...

    def block_matches_type(self, resource: Resource, type_: str, block: str, present: bool,
                           others: dict[str, bool]) -> None: ...


def external_auth(resolver: Resolver, resource: Resource) -> OutgoingPlan | None:
    """The strategy of one MCPExternalAuthConfig, or None when it is invalid (reported)."""
    spec: m.ExternalAuthConfigSpec = resource.spec
    blocks = {alias: getattr(spec, field) is not None for field, alias in _AUTH_BLOCKS.items()}
    resolver.block_matches_type(resource, spec.type, spec.type, blocks.get(spec.type, True),
                                {alias: present for alias, present in blocks.items()
                                 if alias != spec.type})
    config = f"{resource.namespace}/{resource.name}"
    if spec.type == "embeddedAuthServer":
        resolver.unimplemented_auth[resource.key] = spec.type
        resolver.report.warn(resource, ("spec", "type"), "auth-type-unused",
                             "is the authorization server of ToolHive's proxy in front of one "
                             "backend (its authServerRef); vmcp's own is "
                             "VirtualMCPServer.authServerConfig: unused here; a backend whose "
                             "outgoing auth uses it is refused")
        return None
    if spec.type == "unauthenticated":
        return NoOutgoingAuth()
    if spec.type == "upstreamInject" and spec.upstream_inject is not None:
        return UpstreamInjectAuth(spec.upstream_inject.provider_name, config)
    if spec.type == "headerInjection" and spec.header_injection is not None:
        return _header_injection(resolver, resource, spec.header_injection, config)
    if spec.type == "bearerToken" and spec.bearer_token is not None:
        token = resolver.secret(resource, ("spec", "bearerToken", "tokenSecretRef"),
                                spec.bearer_token.token_secret_ref)
        return None if token is None else StaticCredentialAuth("authorization", SecretValue(
            token.source, b"Bearer " + token.value.strip()), config, "bearerToken")
    if spec.type == "tokenExchange" and spec.token_exchange is not None:
        return _token_exchange(resolver, resource, spec.token_exchange, config)
    if spec.type == "awsSts" and spec.aws_sts is not None:
        return _aws_sts(resolver, resource, spec.aws_sts, config)
    if spec.type == "obo" and spec.obo is not None:
        return _obo(resolver, resource, spec.obo, config)
    if spec.type == "xaa" and spec.xaa is not None:
        return _xaa(resolver, resource, spec.xaa, config)
    return None  # the type's block is missing: reported


def _header_injection(resolver: Resolver, resource: Resource, injection: HeaderInjection,
                      config: str) -> StaticCredentialAuth | None:
    """One header whose value is a Secret's."""
    here = ("spec", "headerInjection")
    problem = remote_rules.header_problem(injection.header_name)
    if problem is not None:
        resolver.report.error(resource, (*here, "headerName"), "header-name", problem)
        return None
    value = resolver.secret(resource, (*here, "valueSecretRef"), injection.value_secret_ref)
    if value is not None and remote_rules.bad_value(value.value.decode(errors="replace")):
        resolver.report.error(resource, (*here, "valueSecretRef"), "header-value",
                              "the Secret's value has control characters")
        return None
    return None if value is None else StaticCredentialAuth(
        injection.header_name.lower(), value, config)


def _client(resolver: Resolver, resource: Resource, here: tuple[PathPart, ...],
            client_id: str | None, secret_ref: m.SecretKeyRef | None, id_field: str,
            secret_field: str, *, secret_needed: bool) -> SecretValue | None:
    """A client's secret, checked with its id: a secret needs its id; with ``secret_needed``,
    an id needs its secret."""
    secret = None
    if secret_ref is not None:
        secret = resolver.secret(resource, (*here, secret_field), secret_ref)
        if client_id is None:
            resolver.report.error(resource, (*here, id_field), "required",
                                  f"is required when {secret_field} is set")
    elif client_id is not None and secret_needed:
        resolver.report.error(resource, (*here, secret_field), "required",
                              f"is required when {id_field} is set (the grant authenticates "
                              "the client with its secret)")
    return secret


def _endpoint(resolver: Resolver, resource: Resource, path: tuple[PathPart, ...], url: str,
              switch: str | None = None, insecure: bool = False) -> None:
    """https; plain http only to a loopback host, or with ``switch`` set."""
    if url.lower().startswith("http://") and not insecure and not is_loopback_url(url):
        allow = f" (or set {switch}: true, for development only)" if switch else ""
        resolver.report.error(resource, path, "https",
                              f"must use https; plain http only to a loopback host{allow}")


def _token_exchange(resolver: Resolver, resource: Resource, exchange: TokenExchange,
                    config: str) -> TokenExchangeAuth | None:
    here = ("spec", "tokenExchange")
    resolver.require_https(resource, (*here, "tokenUrl"), exchange.token_url,
                           exchange.insecure_allow_http, "spec.tokenExchange.insecureAllowHTTP")
    secret = _client(resolver, resource, here, exchange.client_id, exchange.client_secret_ref,
                     "clientId", "clientSecretRef", secret_needed=False)
    token_type: str = exchange.subject_token_type
    if not token_type.startswith(TOKEN_TYPE_URN):
        token_type = TOKEN_TYPE_URN + token_type
    if resource.broken:
        return None
    return TokenExchangeAuth(
        config=config, token_url=exchange.token_url, audience=exchange.audience,
        client_id=exchange.client_id, client_secret=secret, scopes=exchange.scopes,
        subject_token_type=token_type, subject_provider=exchange.subject_provider_name,
        header_name=exchange.external_token_header_name)


def sts_url(region: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """The STS endpoint of ``region`` and the variable that chose it (None: the default)."""
    for variable in ("AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"):
        if environ.get(variable):
            return environ[variable].rstrip("/") + "/", variable
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://sts.{region}.{suffix}/", None


def _aws_sts(resolver: Resolver, resource: Resource, sts: AwsSts,
             config: str) -> AwsStsAuth | None:
    here = ("spec", "awsSts")
    report = resolver.report
    if sts.fallback_role_arn is None and not sts.role_mappings:
        report.error(resource, (*here, "fallbackRoleArn"), "required",
                     "is required when roleMappings is empty (at least one of them names the "
                     "role to assume)")
    ranked = []
    for index, mapping in enumerate(sts.role_mappings):
        path = (*here, "roleMappings", index)
        if (mapping.claim is None) == (mapping.matcher is None):
            report.error(resource, (*path, "claim"), "one-of",
                         "exactly one of claim and matcher must be set")
        elif mapping.matcher is not None:
            try:
                compile_matcher(mapping.matcher)
            except MatcherError as exc:
                report.error(resource, (*path, "matcher"), "cel", str(exc))
        if (mapping.claim is None) != (mapping.matcher is None):
            rank = mapping.priority if mapping.priority is not None else 2**31
            ranked.append((rank, index, RoleRule(mapping.claim, mapping.role_arn,
                                                 mapping.matcher)))
    url, variable = sts_url(sts.region, resolver.environ)
    if variable is not None:
        problem = (None if url.startswith(("https://", "http://")) else
                   "is not an http(s) URL")
        if problem is None and url.startswith("http://") and not is_loopback_url(url):
            problem = "must use https; plain http only to a loopback host"
        if problem is not None:
            report.error(resource, here, "sts-endpoint",
                         f"uses STS at ${variable} of vmcp's environment, which {problem}")
    if resource.broken:
        return None
    return AwsStsAuth(
        config=config, region=sts.region, service=sts.service, sts_url=url,
        role_rules=tuple(rule for _, _, rule in sorted(ranked, key=lambda r: r[:2])),
        fallback_role_arn=sts.fallback_role_arn, role_claim=sts.role_claim,
        session_duration=sts.session_duration, session_name_claim=sts.session_name_claim,
        subject_provider=sts.subject_provider_name)


def _obo(resolver: Resolver, resource: Resource, obo: OnBehalfOf,
         config: str) -> OnBehalfOfAuth | None:
    here = ("spec", "obo")
    report = resolver.report
    for value, name in ((obo.tenant_id, "tenantId"), (obo.client_id, "clientId"),
                        (obo.client_secret_ref, "clientSecretRef")):
        if value is None:
            report.error(resource, (*here, name), "required",
                         "is required (the on-behalf-of grant is made by a confidential client "
                         "of one tenant)")
    if obo.audience is None and not obo.scopes:
        report.error(resource, (*here, "scopes"), "required",
                     "at least one of audience and scopes must be set (the scope requested)")
    authority = obo.authority or ENTRA_AUTHORITY
    _endpoint(resolver, resource, (*here, "authority"), authority)
    skew = obo.cache_skew.total_seconds() if obo.cache_skew is not None else None
    secret = (resolver.secret(resource, (*here, "clientSecretRef"), obo.client_secret_ref)
              if obo.client_secret_ref is not None else None)
    if resource.broken or secret is None or obo.client_id is None or obo.tenant_id is None:
        return None
    return OnBehalfOfAuth(
        config=config, token_url=f"{authority}/{obo.tenant_id}/oauth2/v2.0/token",
        client_id=obo.client_id, client_secret=secret,
        scope=" ".join(obo.scopes) if obo.scopes else str(obo.audience),
        subject_provider=obo.subject_token_provider_name, cache_skew=skew)


def _xaa(resolver: Resolver, resource: Resource, xaa: CrossAppAccess,
         config: str) -> CrossAppAccessAuth | None:
    here = ("spec", "xaa")
    _endpoint(resolver, resource, (*here, "idpTokenUrl"), xaa.idp_token_url)
    _endpoint(resolver, resource, (*here, "targetTokenUrl"), xaa.target_token_url,
              "spec.xaa.insecureTargetTokenUrl", xaa.insecure_target_token_url)
    idp_secret = _client(resolver, resource, here, xaa.idp_client_id, xaa.idp_client_secret_ref,
                         "idpClientId", "idpClientSecretRef", secret_needed=True)
    target_secret = _client(resolver, resource, here, xaa.target_client_id,
                            xaa.target_client_secret_ref, "targetClientId",
                            "targetClientSecretRef", secret_needed=True)
    if resource.broken:
        return None
    return CrossAppAccessAuth(
        config=config, idp_token_url=xaa.idp_token_url, target_token_url=xaa.target_token_url,
        audience=xaa.target_audience, idp_client_id=xaa.idp_client_id,
        idp_client_secret=idp_secret, target_client_id=xaa.target_client_id,
        target_client_secret=target_secret, resource=xaa.target_resource, scopes=xaa.scopes,
        subject_provider=xaa.subject_provider_name, subject_token_type=xaa.subject_token_type)
