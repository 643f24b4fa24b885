"""Rules of a VirtualMCPServer, and its resolution into a :class:`GatewayPlan`.

The backends are the MCPServers, MCPServerEntries and MCPRemoteProxies whose ``groupRef`` names
the gateway's group, and the static ones of ``spec.config.backends`` (:mod:`.static_backends`:
one named like a member is that member, at the URL listed), in name order; an MCPRemoteProxy's
own Cedar policies go with it. Incoming auth is resolved
to one of four modes (anonymous, external OIDC, Kubernetes service accounts, the embedded
authorization server); each backend gets an outgoing strategy by the seed's rules:

* ``source: discovered``: the backend's own ``externalAuthConfigRef``; none means no auth.
* ``source: inline``: only the backends listed under ``backends`` get a strategy (``type:
  externalAuthConfigRef`` names it, ``type: discovered`` takes the backend's own); the rest
  get none.

A strategy that needs stored upstream tokens (``upstreamInject``, or ``tokenExchange`` with
``subjectProviderName``) needs an ``authServerConfig`` that defines the named provider, and an
incoming mode that validates that server's own tokens, since the stored tokens are found through
the user's login session.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import replace

from . import authserver_models as am
from . import models as m
from . import remote_rules
from .authserver_rules import resolve_auth_server
from .composite_rules import resolve_composites
from .durations import Duration
from .gateway_config import Placed, gateway_settings
from .plan import (
    DEFAULT_SERVICE_ACCOUNT_AUDIENCE,
    AggregationPlan,
    AnonymousIncoming,
    AwsStsAuth,
    BackendPlan,
    CircuitBreakerPlan,
    CrossAppAccessAuth,
    EmbeddedIncoming,
    Endpoint,
    GatewayPlan,
    HttpEndpoint,
    IncomingPlan,
    KubernetesIncoming,
    NoOutgoingAuth,
    OIDCIncoming,
    OnBehalfOfAuth,
    OperationalPlan,
    OutgoingPlan,
    SecretValue,
    StaticCredentialAuth,
    TokenExchangeAuth,
    UpstreamInjectAuth,
    WorkloadToolsPlan,
)
from .policy_rules import resolve_audit, resolve_authz, resolve_rate_limits
from .problems import PathPart
from .report import Resource
from .resolver import Resolver
from .session_rules import resolve_session_storage
from .static_backends import static_backends
from .telemetry_rules import resolve_telemetry
from .trust_rules import check_trust_targets

__all__ = ["resolve_gateway"]

INCOMING = ("spec", "incomingAuth")
DEFAULT_SCOPES = ("openid",)


def resolve_gateway(resolver: Resolver, gateway: Resource) -> GatewayPlan | None:
    """Check one VirtualMCPServer; its plan when it and everything it uses are valid."""
    spec: m.VirtualMCPServerSpec = gateway.spec
    report = resolver.report
    errors_before = report.error_count
    settings = gateway_settings(report, gateway)
    if settings is None:
        return None
    group, group_path = settings.group.value, settings.group.path
    group_ok = resolver.ref(gateway, group_path, "MCPGroup", group) is not None
    members = _members(resolver, gateway, group)
    static = static_backends(report, gateway, (spec.config or m.GatewayConfig()).backends,
                             ("spec", "config", "backends"))
    if group_ok and not members and not static:
        report.warn(gateway, group_path, "empty-group",
                    f"MCPGroup {gateway.namespace}/{group} has no MCPServers yet: the gateway "
                    "starts with no backends")
    member_names = sorted({*(r.name or "" for r in members), *static})

    auth_server = None
    if spec.auth_server_config is not None:
        auth_server = resolve_auth_server(resolver, gateway, spec.auth_server_config)
    incoming = _incoming(resolver, gateway, spec)
    if spec.auth_server_config is not None and incoming is not None and not isinstance(
            incoming, EmbeddedIncoming):
        report.warn(gateway, ("spec", "authServerConfig"), "auth-server-unused",
                    "is set, but incomingAuth does not accept its tokens: clients that log in "
                    "there are refused (use oidcConfigRef to an MCPOIDCConfig with issuer "
                    f"{spec.auth_server_config.issuer})")
    _check_backend_entries(resolver, gateway, spec.outgoing_auth, group, member_names)
    embedded = spec.auth_server_config if isinstance(incoming, EmbeddedIncoming) else None
    if embedded is not None and isinstance(incoming, EmbeddedIncoming):
        check_trust_targets(resolver, gateway, embedded, incoming.resources, incoming.scopes)
        for index, scope in enumerate(embedded.baseline_client_scopes):
            if scope not in incoming.scopes:
                report.error(gateway, ("spec", "authServerConfig", "baselineClientScopes", index),
                             "scope", f"{scope!r} is not among the scopes this server offers "
                             f"(oidcConfigRef.scopes: {', '.join(incoming.scopes)})")
    backends: list[BackendPlan] = []
    shared_storage = settings.session_storage.value is not None \
        and settings.session_storage.value.provider == "redis"
    for member in members:
        outgoing = _outgoing(resolver, gateway, spec, member.name or "", member, incoming)
        endpoint = _static_or_own(static, member.name or "", resolver.endpoints.get(member.key))
        authz = limits = None
        if isinstance(member.spec, m.RemoteProxySpec) or (
                isinstance(member.spec, m.MCPServerSpec)
                and (member.spec.url is not None or member.spec.command is not None)):
            authz = resolve_authz(resolver, gateway, member.spec.authz_config,
                                  member.spec.authz_config_ref, embedded, owner=member,
                                  at=("spec",))
            limits = resolve_rate_limits(
                resolver, member, Placed(member.spec.rate_limiting, ("spec", "rateLimiting")),
                authenticated=spec.incoming_auth.type == "oidc", shared_storage=shared_storage)
        if outgoing is not None and endpoint is not None and _headers_fit(
                resolver, gateway, member, endpoint, outgoing):
            backends.append(BackendPlan(member.name or "", endpoint, outgoing, authz, limits,
                                        resolver.backend_webhooks.get(member.key)))
    for name, static_endpoint in static.items():
        outgoing = _outgoing(resolver, gateway, spec, name, None, incoming)
        if outgoing is not None and static_endpoint is not None and all(
                r.name != name for r in members):
            backends.append(BackendPlan(name, static_endpoint, outgoing))
    aggregation = _aggregation(resolver, gateway, settings.aggregation.value,
                               settings.aggregation.path, group, member_names)
    if aggregation is not None:
        aggregation = replace(aggregation, backend_tools=tuple(
            resolver.backend_tools[m.key] for m in members if m.key in resolver.backend_tools))
    operational = _operational(resolver, gateway, settings.operational.value,
                               settings.operational.path, group, member_names)
    shared = resolve_session_storage(resolver, gateway, settings.session_storage.value,
                                     auth_server.hmac_secrets if auth_server else (),
                                     settings.session_storage.path)
    authz = resolve_authz(resolver, gateway, spec.incoming_auth.authz_config,
                          spec.incoming_auth.authz_config_ref, embedded)
    rate_limits = resolve_rate_limits(
        resolver, gateway, settings.rate_limiting,
        authenticated=spec.incoming_auth.type == "oidc", shared_storage=shared_storage)
    audit = resolve_audit(resolver, gateway, settings.audit)
    audited = frozenset(member.name or "" for member in members
                        if isinstance(member.spec, m.MCPServerSpec) and member.spec.audit
                        and member.spec.audit.enabled
                        and (member.spec.url is not None or member.spec.command is not None))
    if audit is not None and audited and not audit.enabled:
        audit = replace(audit, enabled=True, backends=audited)
    composites = resolve_composites(resolver, gateway, settings.composite_tools,
                                    settings.composite_tool_refs)
    telemetry = resolve_telemetry(resolver, gateway, spec.telemetry_config_ref)
    passthrough = _passthrough_headers(resolver, gateway, spec, backends)

    if (report.error_count != errors_before or incoming is None or aggregation is None
            or operational is None or len(backends) != len(member_names) or shared is None
            or audit is None or composites is None
            or (spec.auth_server_config is not None and auth_server is None)):
        return None
    session_storage, fleet_secrets = shared
    return GatewayPlan(
        name=gateway.name or "",
        namespace=gateway.namespace or "",
        group=group,
        incoming=incoming,
        backends=tuple(sorted(backends, key=lambda backend: backend.name)),
        aggregation=aggregation,
        auth_server=auth_server,
        operational=operational,
        session_storage=session_storage,
        fleet_secrets=fleet_secrets,
        authz=authz,
        rate_limits=rate_limits,
        audit=audit,
        composite_tools=composites,
        telemetry=telemetry,
        passthrough_headers=passthrough,
    )


def _passthrough_headers(resolver: Resolver, gateway: Resource, spec: m.VirtualMCPServerSpec,
                         backends: Sequence[BackendPlan]) -> tuple[str, ...]:
    """``passthroughHeaders`` (``spec``'s, else ``spec.config``'s), lower-cased: none that the
    transport or a proxy sets, none of the client's credentials, none a backend already gets
    (its static headers, its strategy's header)."""
    names = spec.passthrough_headers
    path: tuple[PathPart, ...] = ("spec", "passthroughHeaders")
    if names is None and spec.config is not None:
        names, path = spec.config.passthrough_headers, ("spec", "config", "passthroughHeaders")
    taken: dict[str, str] = {}
    for backend in backends:
        if isinstance(backend.endpoint, HttpEndpoint):
            for header in backend.endpoint.headers:
                taken.setdefault(header.name.lower(), backend.name)
        own = getattr(backend.outgoing, "header_name", None)
        if isinstance(own, str):
            taken.setdefault(own.lower(), backend.name)
    kept: list[str] = []
    for index, name in enumerate(names or ()):
        lower = name.lower()
        problem = remote_rules.header_problem(name)
        if lower in ("authorization", "cookie"):
            problem = ("is the client's credential: it never reaches a backend (outgoingAuth "
                       "decides what each backend gets)")
        elif lower in taken:
            problem = f"is set for backend {taken[lower]!r} already (its headers or credentials)"
        if problem is not None:
            resolver.report.error(gateway, (*path, index), "header", problem)
        elif lower not in kept:
            kept.append(lower)
    return tuple(kept)


BACKEND_KINDS = ("MCPServer", "MCPServerEntry", "MCPRemoteProxy")
"""The kinds whose ``groupRef`` makes them a backend of the group (ToolHive's vMCP discovers
all three)."""


def _members(resolver: Resolver, gateway: Resource, group: str) -> list[Resource]:
    """The group's backends in name order; a name two kinds share is an error (a backend is
    known by its name) and keeps the first kind's."""
    found: dict[str, Resource] = {}
    for kind in BACKEND_KINDS:
        for r in resolver.of_kind(kind):
            if (r.namespace != gateway.namespace or r.spec.group_ref is None
                    or r.spec.group_ref.name != group):
                continue
            first = found.get(r.name or "")
            if first is not None:
                resolver.report.error(r, ("metadata", "name"), "duplicate-backend",
                                      f"{first.kind} {first.namespace}/{first.name} of group "
                                      f"{group} has the same name: backends are known by name")
                continue
            found[r.name or ""] = r
    return [found[name] for name in sorted(found)]


def _static_or_own(static: dict[str, HttpEndpoint | None], name: str,
                   own: Endpoint | None) -> Endpoint | None:
    """Where a member is reached: at the URL ``spec.config.backends`` lists for its name (with
    its own static headers), else at its own endpoint; None when either is broken."""
    if name not in static:
        return own
    listed = static[name]
    if listed is None or own is None:
        return None
    return replace(listed, headers=own.headers) if isinstance(own, HttpEndpoint) else listed


def _headers_fit(resolver: Resolver, gateway: Resource, member: Resource, endpoint: Endpoint,
                 outgoing: OutgoingPlan) -> bool:
    """No static header of the backend is one its outgoing strategy sets."""
    if not isinstance(endpoint, HttpEndpoint) or not endpoint.headers:
        return True
    if isinstance(outgoing, UpstreamInjectAuth):
        sets = "authorization"
    elif isinstance(outgoing, TokenExchangeAuth):
        sets = (outgoing.header_name or "authorization").lower()
    elif isinstance(outgoing, StaticCredentialAuth):
        sets = outgoing.header
    else:
        return True
    for header in endpoint.headers:
        if header.name.lower() == sets:
            resolver.report.error(
                member, ("spec", "headerForward"), "header-conflict",
                f"sets {header.name}, which backend {member.name!r}'s outgoing auth "
                f"({outgoing.strategy}, as VirtualMCPServer {gateway.namespace}/{gateway.name} "
                "decides) sets too: give the credential in one place")
            return False
    return True


# --- incoming ------------------------------------------------------------------------------------


def _incoming(resolver: Resolver, gateway: Resource,
              spec: m.VirtualMCPServerSpec) -> IncomingPlan | None:
    report = resolver.report
    incoming = spec.incoming_auth
    if incoming.type == "anonymous":
        for alias, value in (("oidcConfig", incoming.oidc_config),
                             ("oidcConfigRef", incoming.oidc_config_ref),
                             ("audience", incoming.audience)):
            if value is not None:
                report.error(gateway, (*INCOMING, alias), "unused-field",
                             "is used only with type oidc")
        report.warn(gateway, (*INCOMING, "type"), "anonymous",
                    "is anonymous: no credentials are checked and all access control is off; "
                    "for development only, never in production")
        return AnonymousIncoming()
    if (incoming.oidc_config is None) == (incoming.oidc_config_ref is None):
        report.error(gateway, INCOMING, "one-of",
                     "type oidc needs exactly one of oidcConfig (an external issuer or "
                     "Kubernetes) or oidcConfigRef (an MCPOIDCConfig, as used with the embedded "
                     "authorization server)")
        return None
    if incoming.oidc_config is not None:
        if incoming.audience is not None:
            report.error(gateway, (*INCOMING, "audience"), "unused-field",
                         "is used only with oidcConfigRef; with oidcConfig set "
                         "oidcConfig.inline.audience or oidcConfig.kubernetes.audience")
        return _oidc_config(resolver, gateway, incoming.oidc_config)
    assert incoming.oidc_config_ref is not None
    return _oidc_config_ref(resolver, gateway, incoming, incoming.oidc_config_ref,
                            spec.auth_server_config)


def _oidc_config(resolver: Resolver, gateway: Resource,
                 config: m.OIDCConfig) -> IncomingPlan | None:
    report = resolver.report
    here = (*INCOMING, "oidcConfig")
    if config.type == "kubernetes":
        if config.inline is not None:
            report.error(gateway, (*here, "inline"), "unused-field",
                         "must not be set when type is kubernetes (the default type; set "
                         "type: inline to validate tokens of an external issuer)")
            return None
        k8s = config.kubernetes or m.KubernetesOIDC()
        for alias, url in (("issuer", k8s.issuer), ("jwksUrl", k8s.jwks_url)):
            if url is not None and url.lower().startswith("http://"):
                report.error(gateway, (*here, "kubernetes", alias), "https",
                             "must use https (the Kubernetes API server always does)")
        return KubernetesIncoming(
            audience=k8s.audience or DEFAULT_SERVICE_ACCOUNT_AUDIENCE,
            issuer=k8s.issuer,
            jwks_url=k8s.jwks_url,
            service_account=k8s.service_account,
            namespace=k8s.namespace,
            use_cluster_auth=k8s.use_cluster_auth is not False,
            resource_url=config.resource_url,
        )
    if config.kubernetes is not None:
        report.error(gateway, (*here, "kubernetes"), "unused-field",
                     "must not be set when type is inline")
    inline = config.inline
    if inline is None:
        report.error(gateway, (*here, "inline"), "required", "is required when type is inline")
        return None
    for alias, value in (("clientId", inline.client_id), ("audience", inline.audience)):
        if value is None:
            report.error(gateway, (*here, "inline", alias), "required",
                         "is required for inline OIDC")
    secret = resolver.check_inline_oidc(gateway, (*here, "inline"), inline)
    if inline.audience is None:
        return None
    return _oidc_plan(inline, inline.audience, inline.scopes or DEFAULT_SCOPES,
                      config.resource_url, secret)


def _oidc_plan(inline: m.SharedInlineOIDC, audience: str, scopes: tuple[str, ...],
               resource_url: str | None, secret: SecretValue | None,
               ca_bundle: str | None = None) -> OIDCIncoming:
    return OIDCIncoming(
        ca_bundle=ca_bundle,
        issuer=inline.issuer,
        audience=audience,
        client_id=inline.client_id,
        client_secret=secret,
        jwks_url=inline.jwks_url,
        introspection_url=inline.introspection_url,
        scopes=scopes,
        resource_url=resource_url,
        jwks_allow_private_ip=inline.jwks_allow_private_ip,
        protected_resource_allow_private_ip=inline.protected_resource_allow_private_ip,
        insecure_allow_http=inline.insecure_allow_http,
        jwks_auth_token_path=inline.jwks_auth_token_path,
    )


def _oidc_config_ref(resolver: Resolver, gateway: Resource, incoming: m.IncomingAuth,
                     ref: m.OIDCConfigRef,
                     auth_server: am.AuthServerConfig | None) -> IncomingPlan | None:
    report = resolver.report
    here = (*INCOMING, "oidcConfigRef")
    if ref.audience and incoming.audience and ref.audience != incoming.audience:
        report.error(gateway, (*INCOMING, "audience"), "conflict",
                     "differs from oidcConfigRef.audience; set only one of them")
    audience = ref.audience or incoming.audience
    if audience is None:
        report.error(gateway, (*here, "audience"), "required",
                     "is required with oidcConfigRef (here or as spec.incomingAuth.audience): "
                     "the audience tokens must carry, usually this gateway's /mcp URL")
    target = resolver.ref(gateway, (*here, "name"), "MCPOIDCConfig", ref.name)
    if target is None or audience is None:
        return None
    shared: m.OIDCConfigSpec = target.spec
    scopes = ref.scopes or DEFAULT_SCOPES
    if auth_server is not None:
        issuer = shared.inline.issuer if shared.inline is not None else None
        if issuer != auth_server.issuer:
            has = f"has issuer {issuer}" if issuer else f"is of type {shared.type}"
            report.error(gateway, (*here, "name"), "issuer-mismatch",
                         f"MCPOIDCConfig {target.namespace}/{target.name} {has}, but with "
                         "authServerConfig it must be type inline with issuer equal to "
                         f"spec.authServerConfig.issuer ({auth_server.issuer})")
            return None
        return EmbeddedIncoming(auth_server.issuer, audience, scopes, ref.resource_url)
    if shared.inline is not None:
        secret = None
        if shared.inline.client_secret_ref is not None:
            secret = resolver.secret(target, ("spec", "inline", "clientSecretRef"),
                                     shared.inline.client_secret_ref)
        ca_bundle = None
        if shared.inline.ca_bundle_ref is not None:
            ca_bundle = remote_rules.read_ca_bundle(
                resolver, target, shared.inline.ca_bundle_ref, ("spec", "inline", "caBundleRef"),
                shared.inline.issuer)
        return _oidc_plan(shared.inline, audience, scopes, ref.resource_url, secret, ca_bundle)
    sa = shared.kubernetes_service_account or m.SharedServiceAccountOIDC()
    return KubernetesIncoming(
        audience=audience,
        issuer=sa.issuer,
        jwks_url=sa.jwks_url,
        service_account=sa.service_account,
        namespace=sa.namespace,
        use_cluster_auth=sa.use_cluster_auth is not False,
        scopes=scopes,
        resource_url=ref.resource_url,
        introspection_url=sa.introspection_url,
    )


# --- outgoing ------------------------------------------------------------------------------------


def _check_backend_entries(resolver: Resolver, gateway: Resource, outgoing: m.OutgoingAuth,
                           group: str, member_names: Sequence[str]) -> None:
    report = resolver.report
    path = ("spec", "outgoingAuth", "backends")
    entries: list[tuple[tuple[PathPart, ...], str | None, m.BackendAuth]] = []
    if outgoing.default is not None:
        entries.append((("spec", "outgoingAuth", "default"), None, outgoing.default))
    if outgoing.source == "discovered" and outgoing.backends:
        report.error(gateway, path, "unused-field",
                     "is used only with source: inline (with source: discovered each MCPServer's "
                     "own externalAuthConfigRef applies)")
    else:
        entries += [((*path, name), name, entry) for name, entry in outgoing.backends.items()]
    for here, name, entry in entries:
        if name is not None and name not in member_names:
            members = ", ".join(member_names) or "none"
            report.error(gateway, here, "group-member",
                         f"names no MCPServer of group {group} (its members: {members})")
        ref = entry.external_auth_config_ref
        if entry.type == "externalAuthConfigRef":
            if ref is None:
                report.error(gateway, (*here, "externalAuthConfigRef"), "required",
                             "is required when type is externalAuthConfigRef")
            else:
                resolver.ref(gateway, (*here, "externalAuthConfigRef", "name"),
                             "MCPExternalAuthConfig", ref.name)
        elif ref is not None:
            report.error(gateway, (*here, "externalAuthConfigRef"), "unused-field",
                         "must not be set when type is discovered (the MCPServer's own "
                         "externalAuthConfigRef applies)")


def _outgoing(resolver: Resolver, gateway: Resource, spec: m.VirtualMCPServerSpec, name: str,
              member: Resource | None, incoming: IncomingPlan | None) -> OutgoingPlan | None:
    """The strategy of backend ``name`` (``member``: its resource; None for a static backend,
    which has no ``externalAuthConfigRef`` of its own); None when what it refers to is invalid
    (already reported)."""
    outgoing = spec.outgoing_auth
    own = member.spec.external_auth_config_ref if member is not None else None
    where: tuple[Resource, tuple[PathPart, ...]] = (member or gateway,
                                                    ("spec", "externalAuthConfigRef"))
    default = outgoing.default
    if outgoing.source == "discovered":
        entry = default if own is None else None
    else:
        entry = outgoing.backends.get(name, default)
    if outgoing.source == "discovered" and entry is None:
        ref = own
    else:
        if entry is None:
            return NoOutgoingAuth()
        ref = own if entry.type == "discovered" else entry.external_auth_config_ref
        if entry.type != "discovered":
            where = (gateway, ("spec", "outgoingAuth",
                               *(("backends", name) if entry is not default else ("default",)),
                               "externalAuthConfigRef"))
    if ref is None:
        return NoOutgoingAuth()
    config = resolver.index.get(("MCPExternalAuthConfig", gateway.namespace or "", ref.name))
    if config is not None and config.key in resolver.unimplemented_auth:
        resolver.report.error(
            where[0], (*where[1], "name"), "not-implemented",
            f"backend {name!r} would use MCPExternalAuthConfig {config.namespace}/"
            f"{config.name} of type {resolver.unimplemented_auth[config.key]}, which is not "
            "implemented yet: refused rather than sent without its credentials")
        return None
    if config is None or not config.usable or config.key not in resolver.strategies:
        return None
    strategy = resolver.strategies[config.key]
    auth_server = spec.auth_server_config
    if (isinstance(strategy, CrossAppAccessAuth | AwsStsAuth)
            and strategy.subject_provider is None
            and auth_server is not None and auth_server.upstream_providers):
        # As ToolHive's operator fills it in: the first upstream provider's token.
        strategy = replace(strategy, subject_provider=auth_server.upstream_providers[0].name)
    if not _check_strategy_context(resolver, gateway, spec, name, config, strategy, incoming):
        return None
    return strategy


def _check_strategy_context(resolver: Resolver, gateway: Resource,
                            spec: m.VirtualMCPServerSpec, backend: str, config: Resource,
                            strategy: OutgoingPlan, incoming: IncomingPlan | None) -> bool:
    report = resolver.report
    errors_before = report.error_count
    uses = f"backend {backend!r} uses MCPExternalAuthConfig {config.namespace}/{config.name}"
    needs: list[tuple[str, tuple[PathPart, ...]]] = []
    if isinstance(strategy, UpstreamInjectAuth):
        needs.append((strategy.provider, ("spec", "upstreamInject", "providerName")))
    elif isinstance(strategy, TokenExchangeAuth | AwsStsAuth | OnBehalfOfAuth
                    | CrossAppAccessAuth):
        if strategy.subject_provider is not None:
            needs.append((strategy.subject_provider, strategy.subject_field))
        elif isinstance(strategy, CrossAppAccessAuth):  # its subject is a login's ID token
            needs.append(("", strategy.subject_field))
        elif isinstance(incoming, AnonymousIncoming):
            report.error(gateway, (*INCOMING, "type"), "subject-token",
                         f"must not be anonymous: {uses} ({strategy.strategy}), which exchanges "
                         "the caller's token, and anonymous callers have none")
    if not needs:
        return report.error_count == errors_before
    auth_server = spec.auth_server_config
    if auth_server is None:
        report.error(gateway, ("spec", "authServerConfig"), "required",
                     f"is required: {uses}, which needs upstream tokens stored by the embedded "
                     "authorization server")
        return False
    if auth_server.disable_upstream_token_injection:
        report.error(gateway, ("spec", "authServerConfig", "disableUpstreamTokenInjection"),
                     "conflict", f"is true, so the logins' upstream tokens are not kept, but "
                     f"{uses} ({strategy.strategy}), which needs them")
        return False
    names = [p.name for p in auth_server.upstream_providers]
    for provider, path in needs:
        if provider not in names:
            report.error(config, path, "provider-name",
                         f"names upstream provider {provider!r}, but VirtualMCPServer "
                         f"{gateway.namespace}/{gateway.name} (for backend {backend!r}) defines "
                         f"only: {', '.join(names)}", blame=False)
    if incoming is not None and not isinstance(incoming, EmbeddedIncoming):
        report.error(gateway, INCOMING, "embedded-auth-required",
                     f"must validate the embedded authorization server's tokens (type oidc with "
                     f"oidcConfigRef to an MCPOIDCConfig whose issuer is {auth_server.issuer}): "
                     f"{uses}, which finds the user's upstream tokens through that login")
    return report.error_count == errors_before


# --- aggregation ---------------------------------------------------------------------------------


def _aggregation(resolver: Resolver, gateway: Resource, aggregation: m.Aggregation,
                 path: tuple[PathPart, ...], group: str,
                 member_names: Sequence[str]) -> AggregationPlan | None:
    report = resolver.report
    errors_before = report.error_count
    config = aggregation.conflict_resolution_config
    config_path = (*path, "conflictResolutionConfig")
    if aggregation.conflict_resolution == "prefix":
        problem = prefix_format_problem(config.prefix_format)
        if problem is not None:
            report.error(gateway, (*config_path, "prefixFormat"), "prefix-format", problem)
    if aggregation.conflict_resolution == "priority" and not config.priority_order:
        report.error(gateway, (*config_path, "priorityOrder"), "required",
                     "is required when conflictResolution is priority: list the backends, "
                     "highest priority first")
    elif aggregation.conflict_resolution != "priority" and config.priority_order:
        report.warn(gateway, (*config_path, "priorityOrder"), "unused-field",
                    "is ignored: it is used only with conflictResolution: priority")
    _unique_members(resolver, gateway,
                    [((*config_path, "priorityOrder", i), name)
                     for i, name in enumerate(config.priority_order)],
                    group, member_names)
    _unique_members(resolver, gateway,
                    [((*path, "tools", i, "workload"), t.workload)
                     for i, t in enumerate(aggregation.tools)],
                    group, member_names)
    tools: list[WorkloadToolsPlan] = []
    for i, t in enumerate(aggregation.tools):
        if t.filter:
            remote_rules.check_filter_names(resolver, gateway, (*path, "tools", i, "filter"),
                                            t.filter, dict(t.overrides))
        inline = WorkloadToolsPlan(
            workload=t.workload,
            filter=t.filter,
            overrides=tuple(remote_rules.override_plan(tool, o)
                            for tool, o in sorted(t.overrides.items())),
            exclude_all=t.exclude_all,
        )
        if t.tool_config_ref is not None:
            shared = remote_rules.tool_config_plan(
                resolver, gateway, (*path, "tools", i, "toolConfigRef"), t.tool_config_ref,
                t.workload)
            if shared is not None:
                inline = remote_rules.merge_tool_config(inline, shared)
        tools.append(inline)
    if report.error_count != errors_before:
        return None
    return AggregationPlan(
        conflict_resolution=aggregation.conflict_resolution,
        prefix_format=config.prefix_format,
        priority_order=config.priority_order,
        tools=tuple(tools),
        exclude_all_tools=aggregation.exclude_all_tools,
        unlisted_tools_visible=aggregation.default_tool_visibility != "deny",
    )


def _unique_members(resolver: Resolver, gateway: Resource,
                    items: Sequence[tuple[tuple[PathPart, ...], str]], group: str,
                    member_names: Sequence[str]) -> None:
    """Each named backend is a member of the group and is named once."""
    members = ", ".join(member_names) or "none"
    seen: set[str] = set()
    for here, name in items:
        if name not in member_names:
            resolver.report.error(gateway, here, "group-member",
                                  f"{name!r} is not an MCPServer of group {group} "
                                  f"(its members: {members})")
        elif name in seen:
            resolver.report.error(gateway, here, "duplicate-name", f"{name!r} is listed twice")
        seen.add(name)


def prefix_format_problem(prefix_format: str) -> str | None:
    """Why a prefix format is unusable, or None: it must contain ``{workload}`` and nothing else
    in braces, so that every backend gets a distinct prefix."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(prefix_format) if f is not None]
    except ValueError:
        fields = ["?"]
    if "workload" not in fields or any(f != "workload" for f in fields):
        return ("must contain {workload} and no other placeholder (for example '{workload}_' "
                "or '{workload}.')")
    return None


# --- operational ---------------------------------------------------------------------------------

TIMEOUT_RANGE = (Duration.of(seconds=1), Duration.of(hours=1))
HEALTH_TIMEOUT_RANGE = (Duration.of(ms=100), Duration.of(minutes=5))


def _operational(resolver: Resolver, gateway: Resource, operational: m.Operational,
                 path: tuple[PathPart, ...], group: str,
                 member_names: Sequence[str]) -> OperationalPlan | None:
    report = resolver.report
    errors_before = report.error_count
    defaults = OperationalPlan()

    def ranged(where: tuple[PathPart, ...], value: Duration | None, default: Duration,
               bounds: tuple[Duration, Duration]) -> Duration:
        if value is None:
            return default
        low, high = bounds
        if not low <= value <= high:
            report.error(gateway, where, "duration-range",
                         f"must be between {low} and {high} (got {value})")
        return value

    timeouts = operational.timeouts
    default_timeout = ranged((*path, "timeouts", "default"), timeouts.default,
                             defaults.default_timeout, TIMEOUT_RANGE)
    per_workload = []
    _unique_members(resolver, gateway,
                    [((*path, "timeouts", "perWorkload", name), name)
                     for name in timeouts.per_workload], group, member_names)
    for name, value in sorted(timeouts.per_workload.items()):
        per_workload.append((name, ranged((*path, "timeouts", "perWorkload", name), value,
                                          value, TIMEOUT_RANGE)))
    failure = operational.failure_handling
    here = (*path, "failureHandling")
    interval = ranged((*here, "healthCheckInterval"), failure.health_check_interval,
                      defaults.health_check_interval, TIMEOUT_RANGE)
    health_timeout = ranged((*here, "healthCheckTimeout"), failure.health_check_timeout,
                            defaults.health_check_timeout, HEALTH_TIMEOUT_RANGE)
    if health_timeout > interval:
        report.error(gateway, (*here, "healthCheckTimeout"), "duration-range",
                     f"must not be longer than healthCheckInterval ({interval})")
    breaker = failure.circuit_breaker
    circuit = CircuitBreakerPlan(
        breaker.failure_threshold or CircuitBreakerPlan.failure_threshold,
        ranged((*here, "circuitBreaker", "timeout"), breaker.timeout,
               CircuitBreakerPlan.timeout, TIMEOUT_RANGE)) if breaker.enabled else None
    if report.error_count != errors_before:
        return None
    return OperationalPlan(
        default_timeout=default_timeout,
        per_workload_timeouts=tuple(per_workload),
        health_check_interval=interval,
        health_check_timeout=health_timeout,
        unhealthy_threshold=failure.unhealthy_threshold or defaults.unhealthy_threshold,
        partial_failure_mode=failure.partial_failure_mode,
        circuit_breaker=circuit,
    )
