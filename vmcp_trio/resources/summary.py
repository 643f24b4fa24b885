"""A short human summary of a resolved plan, as ``vmcp validate`` prints it.

Secrets appear only as ``<redacted>``; everything else (URLs, names, audiences) is shown so the
reader can check that the references went where they meant them to.
"""

from __future__ import annotations

from .plan import (
    REDACTED,
    AnonymousIncoming,
    AuthServerPlan,
    AwsStsAuth,
    BackendPlan,
    Bucket,
    CrossAppAccessAuth,
    EmbeddedIncoming,
    GatewayPlan,
    HttpEndpoint,
    IncomingPlan,
    KubernetesIncoming,
    NoOutgoingAuth,
    OAuth2Provider,
    OIDCIncoming,
    OnBehalfOfAuth,
    OutgoingPlan,
    RedisStorage,
    SecretValue,
    StaticCredentialAuth,
    UpstreamInjectAuth,
)

__all__ = ["describe_plan"]


def _secret(value: SecretValue | None) -> str:
    return REDACTED if value is not None else "none"


def _incoming(plan: IncomingPlan) -> str:
    if isinstance(plan, AnonymousIncoming):
        return "anonymous (development only: no credentials checked)"
    if isinstance(plan, OIDCIncoming):
        text = f"oidc, issuer {plan.issuer}, audience {plan.audience}"
        if plan.client_secret is not None:
            text += f", introspection with client {plan.client_id} (secret {REDACTED})"
        elif plan.introspection_url is not None:
            text += f", introspection at {plan.introspection_url} (no client credentials)"
        return text
    if isinstance(plan, KubernetesIncoming):
        issuer = plan.issuer or "the in-cluster API server"
        text = f"kubernetes service accounts, issuer {issuer}, audience {plan.audience}"
        if plan.introspection_url is not None:
            text += f", other tokens introspected at {plan.introspection_url}"
        return text
    assert isinstance(plan, EmbeddedIncoming)
    return f"embedded authorization server, issuer {plan.issuer}, audience {plan.audience}"


def _outgoing(plan: OutgoingPlan, incoming: IncomingPlan) -> str:
    if isinstance(plan, NoOutgoingAuth):
        return "none"
    if isinstance(plan, UpstreamInjectAuth):
        return f"upstreamInject of provider {plan.provider} ({plan.config})"
    if isinstance(plan, StaticCredentialAuth):
        return f"{plan.strategy}: header {plan.header} from {plan.value.source} ({plan.config})"
    if plan.subject_provider is not None:
        subject = f"the stored token of provider {plan.subject_provider}"
    elif isinstance(incoming, EmbeddedIncoming):
        subject = "vmcp's own JWT"
    else:
        subject = "the caller's validated token"
    if isinstance(plan, AwsStsAuth):
        return (f"awsSts: AssumeRoleWithWebIdentity at {plan.sts_url} with {subject}, requests "
                f"signed (SigV4) for {plan.service} in {plan.region} ({plan.config})")
    if isinstance(plan, OnBehalfOfAuth):
        return (f"obo at {plan.token_url} for scope {plan.scope}, assertion {subject}, client "
                f"{plan.client_id} secret {REDACTED} ({plan.config})")
    if isinstance(plan, CrossAppAccessAuth):
        return (f"xaa: the ID token of provider {plan.subject_provider} for an ID-JAG at "
                f"{plan.idp_token_url}, then an access token at {plan.target_token_url} for "
                f"{plan.audience} ({plan.config})")
    text = (f"tokenExchange at {plan.token_url} for audience {plan.audience}, subject "
            f"{subject} ({plan.config})")
    if plan.client_secret is not None:
        text += f", client {plan.client_id} secret {REDACTED}"
    return text


def _backend(backend: BackendPlan, incoming: IncomingPlan) -> str:
    endpoint = backend.endpoint
    if isinstance(endpoint, HttpEndpoint):
        where = f"{endpoint.transport} {endpoint.url}"
        if endpoint.in_cluster:
            where += " (in-cluster)"
        if endpoint.headers:
            where += f" (headers: {', '.join(h.name for h in endpoint.headers)})"
    else:
        where = "stdio " + " ".join([endpoint.command, *endpoint.args])
        if endpoint.env:
            where += f" (env: {', '.join(k for k, _ in endpoint.env)})"
    outgoing = _outgoing(backend.outgoing, incoming)
    text = f"    {backend.name}: {where}\n      outgoing auth: {outgoing}"
    if backend.authz is not None:
        text += f"\n      its own policies: {len(backend.authz.policies)} Cedar policies"
    if backend.webhooks is not None:
        hooks = backend.webhooks
        text += (f"\n      webhooks ({hooks.source}): {len(hooks.mutating)} mutating, "
                 f"{len(hooks.validating)} validating")
    return text


def _redis(storage: RedisStorage) -> str:
    where = (f"sentinel master {storage.master_name} via {', '.join(storage.sentinel_addrs)}"
             if storage.master_name else f"redis {storage.addr}")
    return (f"{where}, db {storage.db}, prefix {storage.key_prefix}, "
            f"password {_secret(storage.password)}")


def _sessions(plan: GatewayPlan) -> str:
    secrets = (f"{len(plan.fleet_secrets)} fleet secret(s)" if plan.fleet_secrets
               else "keys random per process")
    if plan.session_storage is None:
        return f"  sessions: memory, one process (behind a balancer: sticky sessions); {secrets}"
    return f"  sessions: shared by the replicas through {_redis(plan.session_storage)}; {secrets}"


def _auth_server(plan: AuthServerPlan) -> list[str]:
    keys = f"{len(plan.signing_keys)} signing key(s)" if plan.signing_keys else "ephemeral keys"
    hmacs = (f"{len(plan.hmac_secrets)} HMAC secret(s)" if plan.hmac_secrets
             else "ephemeral HMAC secret")
    lines = [
        f"  authorization server: issuer {plan.issuer}",
        f"    authorization endpoint: {plan.authorization_endpoint}",
        f"    tokens: access {plan.access_token_lifespan}, refresh "
        f"{plan.refresh_token_lifespan}, code {plan.auth_code_lifespan}; {keys}, {hmacs}",
    ]
    storage = plan.storage
    if isinstance(storage, RedisStorage):
        lines.append(f"    storage: {_redis(storage)}")
    else:
        lines.append("    storage: memory (lost on restart)")
    lines.append("    upstream providers (login order):")
    for provider in plan.providers:
        if isinstance(provider, OAuth2Provider):
            where = f"oauth2 {provider.authorization_endpoint}"
        else:
            where = f"oidc {provider.issuer_url}"
        lines.append(f"      {provider.name}: {where}, client {provider.client_id}, "
                     f"secret {_secret(provider.client_secret)}")
    return lines


def _bucket(bucket: Bucket | None) -> str | None:
    return None if bucket is None else f"{bucket.max_tokens}/{bucket.refill_seconds:g}s"


def _policies(plan: GatewayPlan) -> str:
    """What the gateway checks and records besides authentication."""
    parts = []
    if plan.authz is not None:
        whose = (f"claims of the {plan.authz.primary_upstream_provider} login"
                 if plan.authz.primary_upstream_provider else "the token's claims")
        parts.append(f"{len(plan.authz.policies)} Cedar policies ({whose}, groups as "
                     f"{plan.authz.group_entity_type})")
    else:
        parts.append("no authorization policies")
    rules = plan.rate_limits
    if rules is not None:
        limits = [f"{what} {text}" for what, text in (("shared", _bucket(rules.shared)),
                                                      ("perUser", _bucket(rules.per_user)))
                  if text] + ([f"{len(rules.tools)} tool(s)"] if rules.tools else [])
        where = "the fleet's" if plan.session_storage is not None else "this process's"
        parts.append(f"rate limits ({where}): {', '.join(limits)}")
    if plan.audit.enabled:
        parts.append(f"audit to {plan.audit.log_file or 'stdout'}")
    if plan.composite_tools:
        parts.append("composite tools: " + ", ".join(p.name for p in plan.composite_tools))
    return "  policies: " + "; ".join(parts)


def describe_plan(plan: GatewayPlan) -> str:
    lines = [
        f"VirtualMCPServer {plan.namespace}/{plan.name} (group {plan.group})",
        f"  incoming auth: {_incoming(plan.incoming)}",
        f"  aggregation: {plan.aggregation.conflict_resolution}"
        + (f" ({plan.aggregation.prefix_format!r})"
           if plan.aggregation.conflict_resolution == "prefix" else ""),
        _sessions(plan),
        _policies(plan),
        f"  backends ({len(plan.backends)}):",
        *(_backend(b, plan.incoming) for b in plan.backends),
    ]
    if plan.auth_server is not None:
        lines.extend(_auth_server(plan.auth_server))
    return "\n".join(lines)
