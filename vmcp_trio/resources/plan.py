"""The resolved plan: what one VirtualMCPServer will run, with every reference followed.

A plan is built only from documents that passed every rule, so the parts that run on it (the
gateway, the authorization server, the outgoing-auth strategies) never re-check configuration.
Everything here is a frozen dataclass of strings, numbers, tuples and other plan objects: two
loads of the same files give equal plans, which is what hot reload compares.

Secrets are :class:`SecretValue` objects. Their ``repr``/``str`` is ``<redacted>`` so a plan can be
logged or printed safely; equality compares the bytes in constant time.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal
from urllib.parse import quote

from .durations import Duration

if TYPE_CHECKING:  # the templates' engine is loaded only by a configuration that has some
    from .composite_plan import WorkflowPlan

__all__ = [
    "AUDIT_EVENT_TYPES",
    "AggregationPlan",
    "AnonymousIncoming",
    "AuthServerPlan",
    "AwsStsAuth",
    "BackendPlan",
    "ClientDocumentsPlan",
    "CrossAppAccessAuth",
    "EmbeddedIncoming",
    "Endpoint",
    "GatewayPlan",
    "HttpEndpoint",
    "IncomingPlan",
    "KubernetesIncoming",
    "MemoryStorage",
    "NoOutgoingAuth",
    "OAuth2Provider",
    "OIDCIncoming",
    "OIDCProvider",
    "OnBehalfOfAuth",
    "OperationalPlan",
    "OutgoingPlan",
    "ProviderPlan",
    "RedisStorage",
    "RedisTlsPlan",
    "RoleRule",
    "SecretValue",
    "StaticHeader",
    "StdioEndpoint",
    "StoragePlan",
    "TokenExchangeAuth",
    "TokenResponseMappingPlan",
    "ToolOverridePlan",
    "UpstreamInjectAuth",
    "UserInfoPlan",
    "WebhookPlan",
    "WebhooksPlan",
    "WorkloadToolsPlan",
]

REDACTED = "<redacted>"


@dataclass(frozen=True, eq=False)
class SecretValue:
    """A secret's bytes and where they came from (``namespace/name[key]``), never printed."""

    source: str
    value: bytes = field(repr=False)

    def __repr__(self) -> str:
        return f"SecretValue({self.source}, {REDACTED})"

    def __str__(self) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretValue):
            return NotImplemented
        return self.source == other.source and hmac.compare_digest(self.value, other.value)

    def __hash__(self) -> int:
        return hash(self.source)

    def text(self) -> str:
        """The value as text (UTF-8), for client secrets and passwords."""
        return self.value.decode("utf-8")


# --- incoming (boundary 1) ---------------------------------------------------------------------


@dataclass(frozen=True)
class AnonymousIncoming:
    """No checks: development only."""

    mode: Literal["anonymous"] = "anonymous"


@dataclass(frozen=True)
class OIDCIncoming:
    """Tokens of an external issuer, validated as JWTs (and by introspection with a secret)."""

    issuer: str
    audience: str
    client_id: str | None = None
    client_secret: SecretValue | None = None
    jwks_url: str | None = None
    introspection_url: str | None = None
    scopes: tuple[str, ...] = ()
    resource_url: str | None = None
    jwks_allow_private_ip: bool = False
    protected_resource_allow_private_ip: bool = False
    insecure_allow_http: bool = False
    ca_bundle: str | None = None
    """PEM CA certificates the issuer's endpoints may also chain to (``caBundleRef``)."""
    jwks_auth_token_path: str | None = None
    """``jwksAuthTokenPath``: the bearer token of the discovery and JWKS requests is in it."""
    mode: Literal["oidc"] = "oidc"


DEFAULT_SERVICE_ACCOUNT_AUDIENCE = "toolhive"
"""ToolHive's default audience for service-account tokens; kept so its manifests mean the same."""


@dataclass(frozen=True)
class KubernetesIncoming:
    """Service-account tokens; the issuer is detected in-cluster unless given."""

    audience: str = DEFAULT_SERVICE_ACCOUNT_AUDIENCE
    issuer: str | None = None
    jwks_url: str | None = None
    service_account: str | None = None
    namespace: str | None = None
    use_cluster_auth: bool = True
    scopes: tuple[str, ...] = ()
    resource_url: str | None = None
    introspection_url: str | None = None
    """Where a token that is not a JWT is introspected (RFC 7662, without credentials)."""
    mode: Literal["kubernetes"] = "kubernetes"


@dataclass(frozen=True)
class EmbeddedIncoming:
    """JWTs of our own embedded authorization server, verified with in-process keys."""

    issuer: str
    audience: str
    scopes: tuple[str, ...] = ()
    resource_url: str | None = None
    mode: Literal["embedded"] = "embedded"

    @property
    def resources(self) -> tuple[str, ...]:
        """What the authorization server issues tokens for: the audience and resource URL."""
        return tuple(dict.fromkeys(r for r in (self.audience, self.resource_url) if r))


IncomingPlan = AnonymousIncoming | OIDCIncoming | KubernetesIncoming | EmbeddedIncoming


# --- outgoing (boundary 2) ---------------------------------------------------------------------


@dataclass(frozen=True)
class NoOutgoingAuth:
    strategy: Literal["none"] = "none"


@dataclass(frozen=True)
class UpstreamInjectAuth:
    """Send the user's stored upstream access token of ``provider``."""

    provider: str
    config: str
    """``namespace/name`` of the MCPExternalAuthConfig, for logs and errors."""
    strategy: Literal["upstreamInject"] = "upstreamInject"


@dataclass(frozen=True)
class TokenExchangeAuth:
    """RFC 8693 exchange; the subject is vmcp's JWT, or ``subject_provider``'s stored token."""

    config: str
    token_url: str
    audience: str
    client_id: str | None = None
    client_secret: SecretValue | None = None
    scopes: tuple[str, ...] = ()
    subject_token_type: str = "urn:ietf:params:oauth:token-type:access_token"
    subject_provider: str | None = None
    header_name: str | None = None
    """Header carrying the exchanged token; ``None`` replaces ``Authorization``."""
    strategy: Literal["tokenExchange"] = "tokenExchange"
    subject_field: ClassVar[tuple[str, ...]] = ("spec", "tokenExchange", "subjectProviderName")


@dataclass(frozen=True)
class StaticCredentialAuth:
    """One header with a fixed secret value on every request (``headerInjection``, and
    ``bearerToken`` as ``Authorization: Bearer``)."""

    header: str
    """Lower case."""
    value: SecretValue
    config: str
    strategy: Literal["headerInjection", "bearerToken"] = "headerInjection"


@dataclass(frozen=True)
class RoleRule:
    """An ``awsSts.roleMappings`` rule: ``role_arn`` when the caller's role claim holds
    ``claim``, or (``matcher``) when the CEL expression is true of the caller's claims."""

    claim: str | None
    role_arn: str
    matcher: str | None = None


@dataclass(frozen=True)
class AwsStsAuth:
    """AssumeRoleWithWebIdentity at ``sts_url`` with the caller's token (or ``subject_provider``'s
    stored access token), then every request SigV4-signed for ``service`` in ``region``."""

    config: str
    region: str
    service: str
    sts_url: str
    role_rules: tuple[RoleRule, ...]
    """In the order they are tried (by ``priority``, then as written): the first match wins."""
    fallback_role_arn: str | None
    role_claim: str = "groups"
    session_duration: int = 3600
    session_name_claim: str = "sub"
    subject_provider: str | None = None
    """None in an MCPExternalAuthConfig's own plan: a gateway with ``authServerConfig`` fills in
    its first upstream, else the caller's token is the web identity."""
    strategy: Literal["awsSts"] = "awsSts"
    subject_field: ClassVar[tuple[str, ...]] = ("spec", "awsSts", "subjectProviderName")


@dataclass(frozen=True)
class OnBehalfOfAuth:
    """Entra ID's on-behalf-of grant (RFC 7523 JWT bearer, ``requested_token_use=on_behalf_of``)
    at ``token_url``: the caller's token (or ``subject_provider``'s) for one for ``scope``."""

    config: str
    token_url: str
    client_id: str
    client_secret: SecretValue
    scope: str
    subject_provider: str | None = None
    cache_skew: float | None = None
    """Seconds before expiry a cached token stops being used; None: the cache's default."""
    strategy: Literal["obo"] = "obo"
    subject_field: ClassVar[tuple[str, ...]] = ("spec", "obo", "subjectTokenProviderName")


@dataclass(frozen=True)
class CrossAppAccessAuth:
    """Cross-App Access: the user's ID token of ``subject_provider`` exchanged at the IdP for an
    ID-JAG (RFC 8693), then the ID-JAG for an access token at the resource's authorization
    server (RFC 7523)."""

    config: str
    idp_token_url: str
    target_token_url: str
    audience: str
    idp_client_id: str | None = None
    idp_client_secret: SecretValue | None = None
    target_client_id: str | None = None
    target_client_secret: SecretValue | None = None
    resource: str | None = None
    scopes: tuple[str, ...] = ()
    subject_provider: str | None = None
    """None in an MCPExternalAuthConfig's own plan: a gateway fills in its first upstream."""
    subject_token_type: str = "urn:ietf:params:oauth:token-type:id_token"
    strategy: Literal["xaa"] = "xaa"
    subject_field: ClassVar[tuple[str, ...]] = ("spec", "xaa", "subjectProviderName")


OutgoingPlan = (NoOutgoingAuth | UpstreamInjectAuth | TokenExchangeAuth | StaticCredentialAuth
                | AwsStsAuth | OnBehalfOfAuth | CrossAppAccessAuth)


# --- backends ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StaticHeader:
    """A header sent on every request to one backend (``headerForward``); a value from a
    Secret stays a :class:`SecretValue` (never printed)."""

    name: str
    value: str | SecretValue

    def text(self) -> str:
        return self.value.text() if isinstance(self.value, SecretValue) else self.value


@dataclass(frozen=True)
class HttpEndpoint:
    url: str
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    in_cluster: bool = False
    """True when the URL came from the in-cluster template rather than ``spec.url``."""
    headers: tuple[StaticHeader, ...] = ()
    """Static headers of an MCPServerEntry's or MCPRemoteProxy's ``headerForward``."""
    ca_bundle: str | None = None
    """PEM CA certificates the server's TLS certificate may also chain to (an
    MCPServerEntry's ``caBundleRef``)."""


@dataclass(frozen=True)
class StdioEndpoint:
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    working_dir: str | None = None


Endpoint = HttpEndpoint | StdioEndpoint


@dataclass(frozen=True)
class BackendPlan:
    name: str
    endpoint: Endpoint
    outgoing: OutgoingPlan = NoOutgoingAuth()
    authz: AuthzPlan | None = None
    """The backend's own policies (an MCPRemoteProxy's ``authzConfig``), for the calls routed
    to it, besides the gateway's."""
    rate_limits: RateLimitRules | None = None
    """The backend's own rate limits (an MCPRemoteProxy's ``rateLimiting``), on the calls
    routed to it, besides the gateway's; tools by the backend's names."""
    webhooks: WebhooksPlan | None = None
    """The webhooks of an MCPServer's ``webhookConfigRef``, on the requests routed to it."""


@dataclass(frozen=True)
class WebhookPlan:
    """One webhook of an MCPWebhookConfig (see :mod:`vmcp_trio.auth.policy.webhooks`)."""

    name: str
    url: str
    timeout_seconds: float = 10.0
    fail_open: bool = False
    """``failurePolicy: ignore``: an unreachable or broken webhook lets the request go on."""
    ca_certificates: SecretValue | None = None
    client_certificate: SecretValue | None = None
    client_key: SecretValue | None = None
    verify: bool = True
    hmac_secret: SecretValue | None = None


@dataclass(frozen=True)
class WebhooksPlan:
    """An MCPWebhookConfig: the mutating webhooks in order, then the validating ones."""

    source: str
    """``namespace/name`` of the MCPWebhookConfig."""
    mutating: tuple[WebhookPlan, ...] = ()
    validating: tuple[WebhookPlan, ...] = ()


# --- embedded authorization server -------------------------------------------------------------


@dataclass(frozen=True)
class UserInfoPlan:
    endpoint_url: str
    http_method: Literal["GET", "POST"] = "GET"
    additional_headers: tuple[tuple[str, str], ...] = ()
    subject_fields: tuple[str, ...] = ("sub",)
    name_fields: tuple[str, ...] = ("name",)
    email_fields: tuple[str, ...] = ("email",)


@dataclass(frozen=True)
class TokenResponseMappingPlan:
    access_token_path: str
    scope_path: str = "scope"
    refresh_token_path: str = "refresh_token"
    expires_in_path: str = "expires_in"


@dataclass(frozen=True)
class OIDCProvider:
    name: str
    issuer_url: str
    client_id: str
    client_secret: SecretValue | None = None
    scopes: tuple[str, ...] = ("openid", "offline_access")
    subject_claim: str = "sub"
    """The ID token's claim that names the user (``oidcConfig.subjectClaim``: Entra ID's
    ``oid``, whose ``sub`` differs per application)."""
    user_info: UserInfoPlan | None = None
    """``userInfoOverride``: the user's name and email from this endpoint (the subject stays
    the ID token's)."""
    authorization_params: tuple[tuple[str, str], ...] = ()
    type: Literal["oidc"] = "oidc"


@dataclass(frozen=True)
class RegistrationPlan:
    """``dcrConfig``: where vmcp registers itself at an upstream provider (RFC 7591): the
    registration endpoint, or the metadata document (RFC 8414) that names it."""
    registration_endpoint: str | None
    discovery_url: str | None
    initial_access_token: SecretValue | None = None
    software_id: str | None = None
    software_statement: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class OAuth2Provider:
    name: str
    authorization_endpoint: str
    token_endpoint: str
    client_id: str
    """The configured client id; empty when ``registration`` obtains one."""
    client_secret: SecretValue | None = None
    scopes: tuple[str, ...] = ()
    user_info: UserInfoPlan | None = None
    token_response_mapping: TokenResponseMappingPlan | None = None
    registration: RegistrationPlan | None = None
    identity_paths: tuple[str, str | None, str | None] | None = None
    """``identityFromToken``: the dot paths of the subject, name and email in the token
    response. With neither it nor ``user_info``, the user is known by the access token only
    (a new user at each login)."""
    authorization_params: tuple[tuple[str, str], ...] = ()
    allow_http: bool = False
    allow_private: bool = False
    type: Literal["oauth2"] = "oauth2"


ProviderPlan = OIDCProvider | OAuth2Provider


@dataclass(frozen=True)
class MemoryStorage:
    type: Literal["memory"] = "memory"


@dataclass(frozen=True)
class RedisTlsPlan:
    """TLS to Redis or its sentinels: the CA certificates that verify them (PEM; None: the
    system's), or no verification at all (``insecureSkipVerify``)."""
    ca_certificates: SecretValue | None = None
    verify: bool = True


@dataclass(frozen=True)
class RedisStorage:
    key_prefix: str
    master_name: str | None = None
    sentinel_addrs: tuple[str, ...] = ()
    addr: str | None = None
    db: int = 0
    username: SecretValue | None = None
    password: SecretValue | None = None
    dial_timeout: Duration = Duration.of(seconds=5)
    read_timeout: Duration = Duration.of(seconds=3)
    write_timeout: Duration = Duration.of(seconds=3)
    tls: RedisTlsPlan | None = None
    sentinel_tls: RedisTlsPlan | None = None
    cluster_mode: bool = False
    """``addr`` is a Redis Cluster's discovery endpoint (``clusterMode``)."""
    type: Literal["redis"] = "redis"


StoragePlan = MemoryStorage | RedisStorage


@dataclass(frozen=True)
class JwtBearerPlan:
    """A trusted issuer's RFC 7523 grant (``jwtBearerGrant``)."""

    max_assertion_age: Duration
    bindings: tuple[tuple[str, tuple[str, ...]], ...]
    """(assertion subject, the resources it may ask for)."""
    accepted_audiences: tuple[str, ...]
    """What an assertion's ``aud`` must name (default: the token endpoint and the issuer)."""


@dataclass(frozen=True)
class TrustedIssuerPlan:
    """An external issuer whose JWTs the authorization server accepts (``trustedIssuers``)."""

    issuer: str
    jwks_url: str | None = None
    allow_http: bool = False
    allow_private: bool = False
    jwt_bearer: JwtBearerPlan | None = None
    expected_audience: str | None = None
    """Set when its tokens may be RFC 8693 subject tokens (delegation)."""
    actor_claim: str = "azp"
    allowed_actors: tuple[str, ...] = ()
    actor_matcher: str | None = None
    """``actorMatcher``: a CEL expression over the subject token's claims that admits actors
    besides :attr:`allowed_actors`."""
    allow_may_act: bool = False
    allowed_delegate_clients: tuple[str, ...] = ()


@dataclass(frozen=True)
class DelegateClientPlan:
    """A confidential client declared for RFC 8693 token exchange (``delegateClients``)."""

    client_id: str
    secret: SecretValue
    scopes: tuple[str, ...]
    audiences: tuple[str, ...]


@dataclass(frozen=True)
class ClientDocumentsPlan:
    """``cimd``: whether clients may name themselves by their metadata document's URL, how
    many documents are cached, and for how long when the document's host does not say."""
    enabled: bool = True
    max_cached: int = 1000
    fallback_lifetime: Duration = Duration.of(minutes=5)


@dataclass(frozen=True)
class AuthServerPlan:
    issuer: str
    authorization_endpoint: str
    """``{authorizationEndpointBaseUrl or issuer}/oauth/authorize``, as discovery advertises it."""
    providers: tuple[ProviderPlan, ...]
    signing_keys: tuple[SecretValue, ...] = ()
    """PEM private keys; the first signs, all verify. Empty: an ephemeral key at startup."""
    hmac_secrets: tuple[SecretValue, ...] = ()
    """The first protects new codes and refresh tokens; all are accepted. Empty: ephemeral."""
    access_token_lifespan: Duration = Duration.of(hours=1)
    refresh_token_lifespan: Duration = Duration.of(hours=168)
    auth_code_lifespan: Duration = Duration.of(minutes=10)
    storage: StoragePlan = MemoryStorage()
    insecure_allow_http: bool = False
    allow_confidential_clients: bool = False
    """``allowConfidentialClientRegistration``."""
    trusted_issuers: tuple[TrustedIssuerPlan, ...] = ()
    delegate_clients: tuple[DelegateClientPlan, ...] = ()
    client_documents: ClientDocumentsPlan = field(default_factory=lambda: ClientDocumentsPlan())
    baseline_client_scopes: tuple[str, ...] = ()
    """Scopes every registration's answer includes (``baselineClientScopes``)."""
    upstream_token_injection: bool = True
    """False (``disableUpstreamTokenInjection``): the upstream tokens of logins are not kept,
    and no backend may use them."""
    force_confidential_redirect_uris: tuple[str, ...] = ()


# --- aggregation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolOverridePlan:
    tool: str
    name: str | None = None
    description: str | None = None
    annotations: tuple[tuple[str, str | bool], ...] = ()
    """MCP annotation names (``readOnlyHint``...) and the values that replace the tool's."""


@dataclass(frozen=True)
class WorkloadToolsPlan:
    workload: str
    filter: tuple[str, ...] | None = None
    """Tool names to keep (``None``: all), as the client sees them after ``overrides`` (as in
    ToolHive: a renamed tool is listed under its new name)."""
    overrides: tuple[ToolOverridePlan, ...] = ()
    exclude_all: bool = False
    """``excludeAll``: none of the workload's tools is listed."""


@dataclass(frozen=True)
class AggregationPlan:
    conflict_resolution: Literal["prefix", "priority", "manual"] = "prefix"
    prefix_format: str = "{workload}_"
    priority_order: tuple[str, ...] = ()
    tools: tuple[WorkloadToolsPlan, ...] = ()
    backend_tools: tuple[WorkloadToolsPlan, ...] = ()
    """A backend's own MCPToolConfig (``toolConfigRef`` of an MCPServer reached by ``url`` or
    ``command``, or of an MCPRemoteProxy): applied first, as ToolHive's proxy in front of the
    backend would, then :attr:`tools` on what it leaves."""
    exclude_all_tools: bool = False
    """No backend tool is listed (``excludeAllTools``)."""
    unlisted_tools_visible: bool = True
    """False (``defaultToolVisibility: deny``): a backend without a :attr:`tools` entry lists
    no tool."""


# --- operational -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CircuitBreakerPlan:
    """``failureHandling.circuitBreaker`` when enabled: open after ``failure_threshold`` failures
    in a row (failed health checks, requests not answered in time), then no check (and no
    request) for ``timeout``."""

    failure_threshold: int = 5
    timeout: Duration = Duration.of(seconds=60)


@dataclass(frozen=True)
class OperationalPlan:
    default_timeout: Duration = Duration.of(seconds=30)
    per_workload_timeouts: tuple[tuple[str, Duration], ...] = ()
    health_check_interval: Duration = Duration.of(seconds=30)
    health_check_timeout: Duration = Duration.of(seconds=10)
    unhealthy_threshold: int = 3
    partial_failure_mode: Literal["fail", "best_effort"] = "fail"
    circuit_breaker: CircuitBreakerPlan | None = None

    def timeout_for(self, backend: str) -> Duration:
        return dict(self.per_workload_timeouts).get(backend, self.default_timeout)


# --- the whole -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuthzPlan:
    """Cedar authorization (``incomingAuth.authzConfig``, ``authzConfigRef``, or a backend's
    ``authzConfig``), as ToolHive configures its ``cedarv1`` authorizer
    (:mod:`vmcp_trio.auth.policy.cedar` decides)."""

    policies: tuple[str, ...]
    entities_json: str = "[]"
    group_claim_name: str | None = None
    role_claim_name: str | None = None
    group_entity_type: str = "THVGroup"
    primary_upstream_provider: str | None = None
    """Whose claims the policies see: that upstream login's (embedded authorization server)."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket: ``maxTokens`` refilled evenly over ``refillPeriod`` (in seconds)."""

    max_tokens: int
    refill_seconds: float

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"maxTokens must be at least 1, not {self.max_tokens!r}")
        if not (0 < self.refill_seconds < math.inf):
            raise ValueError(f"refillPeriod must be positive, not {self.refill_seconds!r}")

    @property
    def rate(self) -> float:
        """Tokens a second."""
        return self.max_tokens / self.refill_seconds


@dataclass(frozen=True, slots=True)
class ToolBuckets:
    """One entry of ``rateLimiting.tools[]``: the tool's own buckets, on top of the server's."""

    shared: Bucket | None = None
    per_user: Bucket | None = None


@dataclass(frozen=True, slots=True)
class RateLimitRules:
    """A ``rateLimiting`` block; ``tools`` maps a tool's name to its buckets
    (:mod:`vmcp_trio.auth.policy.rate_limits` enforces it)."""

    shared: Bucket | None = None
    per_user: Bucket | None = None
    tools: Mapping[str, ToolBuckets] = field(default_factory=dict)


AUDIT_EVENT_TYPES = frozenset({
    "mcp_initialize", "mcp_tool_call", "mcp_tools_list", "mcp_resource_read",
    "mcp_resources_list", "mcp_prompt_get", "mcp_prompts_list", "mcp_notification", "mcp_ping",
    "mcp_logging", "mcp_completion", "mcp_roots_list_changed", "mcp_request", "http_request",
    "sse_connection",
    *(f"vmcp_workflow_{what}" for what in ("started", "completed", "failed", "timed_out",
                                           "step_started", "step_completed", "step_failed",
                                           "step_skipped")),
    *(f"vmcp_auth_{what}" for what in ("login", "token_issued", "token_refreshed",
                                       "token_revoked", "denied"))})
"""The event type names ``audit.eventTypes`` and ``excludeEventTypes`` may use: ToolHive's, and
ours for authentication (:mod:`vmcp_trio.runtime.audit` writes them)."""


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """``spec.config.audit``, with ToolHive's defaults (:mod:`vmcp_trio.runtime.audit`)."""

    enabled: bool = False
    component: str = ""
    event_types: frozenset[str] = frozenset()
    exclude_event_types: frozenset[str] = frozenset()
    include_request_data: bool = False
    include_response_data: bool = False
    log_file: str | None = None
    max_data_size: int = 1024
    detect_application_errors: bool = True
    max_delegation_depth: int = 10
    backends: frozenset[str] | None = None
    """None: every request is recorded; else only those a backend of these served (the
    MCPServers with ``audit.enabled`` under a gateway whose own audit is off)."""

    def __post_init__(self) -> None:
        unknown = sorted((self.event_types | self.exclude_event_types) - AUDIT_EVENT_TYPES)
        if unknown:
            raise ValueError(f"audit: unknown event types: {', '.join(unknown)}")
        if self.max_data_size < 0:
            raise ValueError("audit: maxDataSize cannot be negative")
        if self.max_delegation_depth < 1:
            raise ValueError("audit: maxDelegationDepth must be at least 1")

    def wants(self, event_type: str) -> bool:
        """Whether an event of this type is written."""
        return (self.enabled and event_type not in self.exclude_event_types
                and (not self.event_types or event_type in self.event_types))


@dataclass(frozen=True)
class TelemetryPlan:
    """The OpenTelemetry settings of an MCPTelemetryConfig, as the standard ``OTEL_*``
    variables they mean (the process's own variables win over them), and the exporter's
    headers, some from Secrets."""

    variables: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, SecretValue], ...] = ()
    ca_bundle: str | None = None
    """PEM CA certificates the collector's certificate may chain to (``caBundleRef``: written
    to a file for ``OTEL_EXPORTER_OTLP_CERTIFICATE`` at start)."""

    def environment(self) -> dict[str, str]:
        """The variables, with ``OTEL_EXPORTER_OTLP_HEADERS`` when there are headers."""
        found = dict(self.variables)
        if self.headers:
            found["OTEL_EXPORTER_OTLP_HEADERS"] = ",".join(
                f"{quote(name, safe='')}={quote(value.value.decode(), safe='')}"
                for name, value in self.headers)
        return found


@dataclass(frozen=True)
class GatewayPlan:
    """One VirtualMCPServer, resolved."""

    name: str
    namespace: str
    group: str
    incoming: IncomingPlan
    backends: tuple[BackendPlan, ...]
    aggregation: AggregationPlan = AggregationPlan()
    auth_server: AuthServerPlan | None = None
    operational: OperationalPlan = OperationalPlan()
    session_storage: RedisStorage | None = None
    """The Redis the replicas share sessions through (``spec.sessionStorage``); None: memory,
    one process."""
    fleet_secrets: tuple[SecretValue, ...] = ()
    """What every replica derives the same keys from (``sessionStorage.hmacSecretRefs``, else
    ``authServerConfig.hmacSecretRefs``); empty: keys random per process."""
    authz: AuthzPlan | None = None
    rate_limits: RateLimitRules | None = None
    audit: AuditSettings = AuditSettings()
    composite_tools: tuple[WorkflowPlan, ...] = ()
    """The composite tools the gateway offers beside its backends' (:mod:`.composite_plan`)."""
    telemetry: TelemetryPlan | None = None
    """``telemetryConfigRef``'s OpenTelemetry settings (applied at start)."""
    passthrough_headers: tuple[str, ...] = ()
    """Client request headers (lower-case names) sent on to every backend as they came."""

    def answers_to(self, name: str) -> bool:
        """Whether ``--name`` picks it: ``NAME``, or ``NAMESPACE/NAME`` as vmcp lists it."""
        return name in (self.name, f"{self.namespace}/{self.name}")
