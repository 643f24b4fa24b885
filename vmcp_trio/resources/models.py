"""Shapes of the declarative resources: every field of the seed, ToolHive's names, our extensions.

These models check shape only: field names (unknown fields are errors), types, enums, required
fields and single-field formats. Rules that relate fields to each other or to other documents
live in :mod:`vmcp_trio.resources.rules`, which reports them with exact paths.

Field names are ToolHive's (camelCase) so existing ``toolhive.stacklok.dev`` manifests of these
kinds load unchanged, in the shapes of every release ``toolhive/FIELDS.md`` lists: ``groupRef`` as
a string or ``{name}``, the gateway settings under ``spec.config`` or directly under ``spec``.
ToolHive's fields that vmcp accepts without acting on them (Kubernetes workload settings, features
not implemented yet) are not here: :mod:`.toolhive_fields` sets them aside before these models run.
Where ToolHive has a field the seed does not mention and we act on it,
it is here under ToolHive's name (``jwksAllowPrivateIP``, ``insecureAllowHTTP``, ``proxyPort``,
``subjectTokenType`` ...). Our standalone extensions are marked "extension". The base model is
:mod:`.base_model`'s, MCPExternalAuthConfig's blocks are in :mod:`.external_auth_models`, the
authorization server's (``authServerConfig``) in :mod:`.authserver_models`, and its trusted issuers
and delegate clients in :mod:`.trust_models`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, Strict
from pydantic_core import PydanticCustomError

from .authserver_models import AuthServerConfig, SentinelConfig
from .base_model import Model, Scopes, SecretKeyRef
from .external_auth_models import ExternalAuthConfigSpec
from .fields import (
    Bool,
    DnsLabel,
    DnsSubdomain,
    DurationText,
    HeaderName,
    HostPort,
    NonEmpty,
    Port,
    Str,
    UrlText,
)
from .webhook_models import WebhookConfigSpec

__all__ = [
    "KIND_MODELS",
    "AuthzConfig",
    "AuthzConfigSpec",
    "CompositeToolDefinitionSpec",
    "ConfigMapResource",
    "Envelope",
    "ExternalAuthConfigSpec",
    "GatewayConfig",
    "GroupSpec",
    "IncomingAuth",
    "InlineOIDC",
    "KubernetesOIDC",
    "MCPServerSpec",
    "Metadata",
    "Model",
    "OIDCConfigSpec",
    "OutgoingAuth",
    "RemoteProxySpec",
    "SecretKeyRef",
    "SecretResource",
    "ServerEntrySpec",
    "ServiceAccountOIDC",
    "SharedInlineOIDC",
    "SharedServiceAccountOIDC",
    "StaticBackend",
    "TelemetryConfigSpec",
    "ToolConfigSpec",
    "VirtualMCPServerSpec",
]


class NameRef(Model):
    name: DnsSubdomain


def _name_or_ref(value: object) -> object:
    """``groupRef: my-group`` (ToolHive up to v0.19) means ``groupRef: {name: my-group}``."""
    return {"name": value} if isinstance(value, str) else value


GroupRef = Annotated[NameRef, BeforeValidator(_name_or_ref)]
"""A reference to an MCPGroup, written as an object ``{name}`` or as the name alone."""

# --- metadata and envelope -------------------------------------------------------------------


class Metadata(Model):
    name: DnsSubdomain
    namespace: DnsLabel | None = None
    labels: dict[Str, Str] = Field(default_factory=dict)
    annotations: dict[Str, Str] = Field(default_factory=dict)


class Envelope(Model):
    """The fields every resource has; ``spec`` is checked by the kind's own model."""

    api_version: NonEmpty
    kind: NonEmpty
    metadata: Metadata
    spec: Any = None
    """Checked by the kind's own spec model."""
    status: Any = None
    """Ignored: status is written by controllers, not by users."""


# --- OIDC (incoming) ---------------------------------------------------------------------------


class ConfigMapKeySelector(Model):
    """Kubernetes' ``configMapKeyRef``: a key of a ConfigMap."""

    name: DnsSubdomain
    key: NonEmpty
    optional: Bool | None = None


class CABundleRef(Model):
    config_map_ref: ConfigMapKeySelector


class SharedInlineOIDC(Model):
    """An external OIDC issuer whose tokens vmcp validates (MCPOIDCConfig ``inline``).

    The audience is not here: it belongs to whoever references the issuer."""

    issuer: UrlText
    client_id: NonEmpty | None = None
    client_secret_ref: SecretKeyRef | None = None
    jwks_url: UrlText | None = None
    introspection_url: UrlText | None = None
    jwks_allow_private_ip: Bool = Field(False, alias="jwksAllowPrivateIP")
    protected_resource_allow_private_ip: Bool = Field(
        False, alias="protectedResourceAllowPrivateIP"
    )
    insecure_allow_http: Bool = Field(False, alias="insecureAllowHTTP")
    ca_bundle_ref: CABundleRef | None = None
    """CA certificates (PEM, in a ConfigMap) the issuer's TLS certificate may also chain to."""
    jwks_auth_token_path: NonEmpty | None = None
    """A file holding the bearer token the issuer's discovery and JWKS requests carry (read
    at each fetch: a rotated token is picked up)."""


class InlineOIDC(SharedInlineOIDC):
    """``incomingAuth.oidcConfig.inline``: the issuer plus the audience and advertised scopes."""

    audience: NonEmpty | None = None
    scopes: Scopes | None = None


class ServiceAccountOIDC(Model):
    """Service-account tokens of the cluster the gateway runs in (MCPOIDCConfig
    ``kubernetesServiceAccount``); the issuer is detected in-cluster unless given."""

    issuer: UrlText | None = None
    jwks_url: UrlText | None = None
    service_account: NonEmpty | None = None
    namespace: DnsLabel | None = None
    use_cluster_auth: Bool | None = None


class SharedServiceAccountOIDC(ServiceAccountOIDC):
    """MCPOIDCConfig ``kubernetesServiceAccount``: as above plus where a token that is not a
    JWT is introspected."""

    introspection_url: UrlText | None = None


class KubernetesOIDC(ServiceAccountOIDC):
    """``incomingAuth.oidcConfig.kubernetes``: as above plus the audience."""

    audience: NonEmpty | None = None


class OIDCConfig(Model):
    """``incomingAuth.oidcConfig``: ToolHive defaults ``type`` to ``kubernetes``."""

    type: Literal["inline", "kubernetes"] = "kubernetes"
    inline: InlineOIDC | None = None
    kubernetes: KubernetesOIDC | None = None
    resource_url: UrlText | None = None


class OIDCConfigRef(Model):
    """``incomingAuth.oidcConfigRef``; ToolHive keeps the audience here, the seed beside it."""

    name: DnsSubdomain
    audience: NonEmpty | None = None
    scopes: Scopes | None = None
    resource_url: UrlText | None = None


class AuthzInline(Model):
    """``authzConfig.inline``: Cedar policies, one per string, and static entities (a JSON
    string of Cedar's entity format)."""

    policies: tuple[NonEmpty, ...] = Field(min_length=1)
    entities_json: Str = "[]"
    primary_upstream_provider: Annotated[str, Strict(), Field(
        pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", min_length=1, max_length=63)] | None = None
    """Deprecated in ToolHive for ``authServerConfig.primaryUpstreamProvider``."""


class ConfigMapKey(Model):
    """``authzConfig.configMap``: a key of a ``v1`` ConfigMap holding ToolHive's authz.json."""

    name: DnsSubdomain
    key: NonEmpty = "authz.json"


class AuthzConfig(Model):
    """``incomingAuth.authzConfig``: Cedar policies given inline or in a ConfigMap."""

    type: Literal["configMap", "inline"] = "configMap"
    inline: AuthzInline | None = None
    config_map: ConfigMapKey | None = None
    group_claim_name: Annotated[str, Strict(), Field(min_length=1, max_length=253)] | None = None
    role_claim_name: Annotated[str, Strict(), Field(min_length=1, max_length=253)] | None = None
    group_entity_type: Annotated[str, Strict(), Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=63)] | None = None


class IncomingAuth(Model):
    type: Literal["anonymous", "oidc"]
    oidc_config: OIDCConfig | None = None
    oidc_config_ref: OIDCConfigRef | None = None
    audience: NonEmpty | None = None
    authz_config: AuthzConfig | None = None
    authz_config_ref: NameRef | None = None
    """An MCPAuthzConfig (``type: cedarv1``) in the same namespace."""


class AuthzConfigSpec(Model):
    """MCPAuthzConfig: an authorizer's configuration shared by several resources. ``type``
    names the authorizer (vmcp implements ToolHive's ``cedarv1``); ``config`` is its block as
    ToolHive's authz.json has it under ``cedar`` (snake_case keys)."""

    type: NonEmpty
    config: dict[str, Any]


# --- rate limits and audit (spec.config) ---------------------------------------------------------


class BucketSpec(Model):
    max_tokens: Annotated[int, Strict(), Field(ge=1)]
    refill_period: DurationText


class ToolRateLimit(Model):
    name: NonEmpty
    shared: BucketSpec | None = None
    global_: BucketSpec | None = Field(default=None, alias="global")
    """ToolHive's newer name of ``shared``."""
    per_user: BucketSpec | None = None


class RateLimiting(Model):
    """``config.rateLimiting``: token buckets for the whole server (``shared``, or ``global``),
    each user (``perUser``) and each tool (``tools[]``), on ``tools/call``."""

    shared: BucketSpec | None = None
    global_: BucketSpec | None = Field(default=None, alias="global")
    per_user: BucketSpec | None = None
    tools: tuple[ToolRateLimit, ...] = ()


class Audit(Model):
    """``config.audit``: ToolHive's audit log settings."""

    enabled: Bool = False
    component: Str = ""
    event_types: tuple[NonEmpty, ...] = ()
    exclude_event_types: tuple[NonEmpty, ...] = ()
    include_request_data: Bool = False
    include_response_data: Bool = False
    log_file: NonEmpty | None = None
    max_data_size: Annotated[int, Strict(), Field(ge=0)] = 1024
    detect_application_errors: Bool = True
    max_delegation_depth: Annotated[int, Strict(), Field(ge=1)] = 10


class OIDCConfigSpec(Model):
    """MCPOIDCConfig: a shared issuer definition (``type: inline``; ToolHive also allows
    ``kubernetesServiceAccount``). The audience comes from the referencing ``oidcConfigRef``."""

    type: Literal["inline", "kubernetesServiceAccount"]
    inline: SharedInlineOIDC | None = None
    kubernetes_service_account: SharedServiceAccountOIDC | None = None


# --- outgoing ----------------------------------------------------------------------------------


class BackendAuth(Model):
    type: Literal["externalAuthConfigRef", "discovered"]
    external_auth_config_ref: NameRef | None = None


class OutgoingAuth(Model):
    source: Literal["discovered", "inline"] = "discovered"
    backends: dict[Str, BackendAuth] = Field(default_factory=dict)
    default: BackendAuth | None = None
    """For a backend without a ``backends`` entry (inline), or whose MCPServer names no
    ``externalAuthConfigRef`` (discovered)."""


# --- session storage ---------------------------------------------------------------------------


class SessionStorage(Model):
    """``spec.sessionStorage``: where the replicas of a gateway keep what they share (ToolHive's
    names: ``provider``, ``address``, ``db``, ``keyPrefix``, ``passwordRef``). Extensions:
    ``sentinelConfig`` (as ``authServerConfig.storage.redis``) and ``hmacSecretRefs``, the
    secrets every replica derives the same keys from (the first derives new values, all are
    accepted: rotation)."""

    provider: Literal["memory", "redis"]
    address: HostPort | None = None
    db: Annotated[int, Field(ge=0, le=1_000_000, strict=True)] | None = None
    key_prefix: Annotated[str, Field(min_length=1, max_length=256, strict=True)] | None = None
    password_ref: SecretKeyRef | None = None
    sentinel_config: SentinelConfig | None = None
    hmac_secret_refs: Annotated[tuple[SecretKeyRef, ...], Field(max_length=5)] = ()


# --- aggregation (extension, ToolHive's names) -------------------------------------------------


class ToolAnnotations(Model):
    title: Str | None = None
    read_only_hint: Bool | None = None
    destructive_hint: Bool | None = None
    idempotent_hint: Bool | None = None
    open_world_hint: Bool | None = None


class ToolOverride(Model):
    name: NonEmpty | None = None
    description: Str | None = None
    annotations: ToolAnnotations | None = None
    """Replace the tool's annotations of these names (the others stay the backend's)."""


class WorkloadTools(Model):
    workload: DnsSubdomain
    filter: tuple[NonEmpty, ...] | None = None
    overrides: dict[Str, ToolOverride] = Field(default_factory=dict)
    tool_config_ref: NameRef | None = None
    """An MCPToolConfig whose filter and overrides complete the inline ones (as in ToolHive: a
    non-empty inline ``filter`` wins, an inline override of a tool wins over the config's)."""
    exclude_all: Bool = False
    """None of this workload's tools is listed (composite tools still call them)."""


class ConflictResolutionConfig(Model):
    prefix_format: Annotated[str, Field(max_length=128, strict=True)] = "{workload}_"
    priority_order: tuple[DnsSubdomain, ...] = ()


class Aggregation(Model):
    conflict_resolution: Literal["prefix", "priority", "manual"] = "prefix"
    conflict_resolution_config: ConflictResolutionConfig = Field(
        default_factory=ConflictResolutionConfig
    )
    tools: tuple[WorkloadTools, ...] = ()
    exclude_all_tools: Bool = False
    """No backend tool is listed: clients see the composite tools only, which call them."""
    default_tool_visibility: Literal["allow", "deny"] | None = None
    """``deny``: a backend without a ``tools`` entry lists no tool."""


# --- operational settings (extension, ToolHive's names) ------------------------------------------


class Timeouts(Model):
    default: DurationText | None = None
    per_workload: dict[DnsSubdomain, DurationText] = Field(default_factory=dict)


class CircuitBreaker(Model):
    enabled: Bool = False
    failure_threshold: Annotated[int, Field(ge=1, le=100, strict=True)] | None = None
    timeout: DurationText | None = None


class FailureHandling(Model):
    health_check_interval: DurationText | None = None
    health_check_timeout: DurationText | None = None
    unhealthy_threshold: Annotated[int, Field(ge=1, le=100, strict=True)] | None = None
    partial_failure_mode: Literal["fail", "best_effort"] = "fail"
    circuit_breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)


class Operational(Model):
    timeouts: Timeouts = Field(default_factory=Timeouts)
    failure_handling: FailureHandling = Field(default_factory=FailureHandling)


# --- kinds -------------------------------------------------------------------------------------


class StaticBackend(Model):
    """``config.backends[]``: a backend at a URL, written in the configuration (ToolHive's
    static mode) rather than found by its ``groupRef``; it joins the group's backends."""

    name: DnsSubdomain
    url: UrlText
    transport: Literal["sse", "streamable-http"]
    type: Literal["entry", ""] = ""
    ca_bundle_path: NonEmpty | None = None
    """PEM CA certificates (a file on the gateway's machine) for an ``entry`` backend."""
    metadata: dict[Str, Str] = Field(default_factory=dict)
    """Free labels of the backend; nothing is done with them."""


class GatewayConfig(Model):
    """``spec.config``: ToolHive's embedded vMCP configuration (since v0.6.17). The settings it
    shares with ``spec`` mean the same in either place (:mod:`.gateway_config` merges them)."""

    group_ref: DnsSubdomain | None = None
    aggregation: Aggregation | None = None
    operational: Operational | None = None
    session_storage: SessionStorage | None = None
    rate_limiting: RateLimiting | None = None
    audit: Audit | None = None
    composite_tools: tuple[dict[Str, Any], ...] | None = None
    """Checked field by field by :mod:`.composite_plan` (its rules, its paths)."""
    composite_tool_refs: tuple[NameRef, ...] | None = None
    backends: tuple[StaticBackend, ...] = ()
    passthrough_headers: Annotated[tuple[HeaderName, ...], Field(max_length=32)] | None = None


class TelemetryConfigRef(Model):
    """``telemetryConfigRef``: an MCPTelemetryConfig, and the service name traces carry."""

    name: DnsSubdomain
    service_name: NonEmpty | None = None


class VirtualMCPServerSpec(Model):
    group_ref: GroupRef | None = None
    """Required here or as ``config.groupRef``."""
    incoming_auth: IncomingAuth
    outgoing_auth: OutgoingAuth = Field(default_factory=OutgoingAuth)
    auth_server_config: AuthServerConfig | None = None
    session_storage: SessionStorage | None = None
    aggregation: Aggregation | None = None
    operational: Operational | None = None
    audit: Audit | None = None
    composite_tools: tuple[dict[Str, Any], ...] | None = None
    composite_tool_refs: tuple[NameRef, ...] | None = None
    telemetry_config_ref: TelemetryConfigRef | None = None
    config: GatewayConfig | None = None
    passthrough_headers: Annotated[tuple[HeaderName, ...], Field(max_length=32)] | None = None
    """Client request headers sent on to every backend as they came (this one wins over
    ``config.passthroughHeaders``, as in ToolHive)."""


def _env_list_or_map(value: object) -> object:
    """``env`` as Kubernetes' ``[{name, value}]`` (ToolHive) or as a plain map (extension);
    ``env:`` with no value is no variable, as in Kubernetes."""
    if value is None:
        return {}
    if not isinstance(value, list):
        return value
    out: dict[object, object] = {}
    for index, item in enumerate(value):
        if not isinstance(item, dict) or set(item) - {"name", "value"} or "name" not in item:
            raise PydanticCustomError(
                "env", "item {index} must be {{name: ..., value: ...}}", {"index": index}
            )
        if item["name"] in out:
            raise PydanticCustomError("env", "variable {name!r} is set twice",
                                      {"name": str(item["name"])[:64]})
        out[item["name"]] = item.get("value", "")
    return out


EnvName = Annotated[str, Strict(), Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=256)]


class Enabled(Model):
    enabled: Bool = False


class MCPServerSpec(Model):
    transport: Literal["stdio", "streamable-http", "sse"] | None = None
    proxy_mode: Literal["sse", "streamable-http"] | None = None
    """How ToolHive's proxy serves a stdio server in the cluster (the in-cluster URL's path)."""
    group_ref: GroupRef | None = None
    external_auth_config_ref: NameRef | None = None
    proxy_port: Port | None = None
    port: Port | None = None
    """ToolHive's name for ``proxyPort`` up to v0.10."""
    # Standalone extensions: a running server's URL, or a stdio server that vmcp starts.
    url: UrlText | None = None
    command: NonEmpty | None = None
    args: tuple[Str, ...] = ()
    env: Annotated[dict[EnvName, Str], BeforeValidator(_env_list_or_map)] = Field(
        default_factory=dict
    )
    working_dir: NonEmpty | None = None
    tool_config_ref: NameRef | None = None
    """An MCPToolConfig; vmcp applies it to a server it reaches by ``url`` or starts. A server
    at its in-cluster URL has it applied by ToolHive's proxy (vmcp leaves it alone)."""
    tools: tuple[NonEmpty, ...] | None = None
    """The tools to keep (ToolHive's filter before MCPToolConfig), as :attr:`tool_config_ref`."""
    authz_config: AuthzConfig | None = None
    """Cedar policies for the calls to this server, as for an MCPRemoteProxy's."""
    authz_config_ref: NameRef | None = None
    rate_limiting: RateLimiting | None = None
    """Token buckets on the calls to this server, as for an MCPRemoteProxy's."""
    audit: Enabled | None = None
    """Its requests are recorded in the gateway's audit log, whether or not every request is."""
    webhook_config_ref: NameRef | None = None
    """An MCPWebhookConfig whose webhooks see (and may change or refuse) each request to it."""


# --- remote backends and their tools (ToolHive v0.10+) -------------------------------------------

class HeaderFromSecret(Model):
    header_name: HeaderName
    value_secret_ref: SecretKeyRef


class HeaderForward(Model):
    """``headerForward``: static headers added to every request to the remote backend."""

    add_plaintext_headers: dict[HeaderName, Str] = Field(default_factory=dict)
    add_headers_from_secret: tuple[HeaderFromSecret, ...] = ()


class RemoteBackendSpec(Model):
    """What MCPServerEntry and MCPRemoteProxy share: a remote MCP server at ``remoteUrl``."""

    group_ref: GroupRef | None = None
    remote_url: UrlText | None = None
    external_auth_config_ref: NameRef | None = None
    header_forward: HeaderForward | None = None
    allow_private_endpoint: Bool = False


class ServerEntrySpec(RemoteBackendSpec):
    """MCPServerEntry (ToolHive v0.16+): a remote server vMCP reaches directly, no pod."""

    group_ref: GroupRef
    remote_url: UrlText
    transport: Literal["streamable-http", "sse"]
    ca_bundle_ref: CABundleRef | None = None
    """The CA certificates (PEM, in a ConfigMap) that the server's TLS certificate is
    verified against, besides the system's."""


class RemoteProxySpec(RemoteBackendSpec):
    """MCPRemoteProxy: in ToolHive a proxy pod in front of ``remoteUrl``; vmcp connects to
    ``remoteUrl`` directly (see :mod:`.remote_rules`)."""

    remote_url_legacy: UrlText | None = Field(None, alias="remoteURL")
    """``remoteURL``, the field's name up to ToolHive v0.15."""
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    tool_config_ref: NameRef | None = None
    authz_config: AuthzConfig | None = None
    """Cedar policies for the calls to this backend (the pod's, in ToolHive)."""
    authz_config_ref: NameRef | None = None
    rate_limiting: RateLimiting | None = None
    """Token buckets on the calls to this backend (the pod's, in ToolHive), besides the
    gateway's; tools named as this backend names them."""


class ToolConfigSpec(Model):
    """MCPToolConfig: an allow-list of tool names and overrides keyed by the original name."""

    tools_filter: tuple[NonEmpty, ...] = ()
    tools_override: dict[NonEmpty, ToolOverride] = Field(default_factory=dict)


class TelemetryHeaderFromSecret(Model):
    name: NonEmpty
    secret_key_ref: SecretKeyRef


class TracingSettings(Enabled):
    sampling_rate: Annotated[str, Strict(), Field(pattern=r"^(0(\.\d+)?|1(\.0+)?)$")] = "0.05"


class OpenTelemetrySettings(Model):
    enabled: Bool = False
    endpoint: NonEmpty | None = None
    headers: dict[Str, Str] = Field(default_factory=dict)
    sensitive_headers: tuple[TelemetryHeaderFromSecret, ...] = ()
    insecure: Bool = False
    resource_attributes: dict[Str, Str] = Field(default_factory=dict)
    metrics: Enabled | None = None
    tracing: TracingSettings | None = None
    use_legacy_attributes: Bool = True
    ca_bundle_ref: CABundleRef | None = None


class TelemetryConfigSpec(Model):
    """MCPTelemetryConfig: ToolHive's OpenTelemetry settings, honoured for the traces of the
    gateway that names it in ``telemetryConfigRef`` (:mod:`.telemetry_rules`)."""

    open_telemetry: OpenTelemetrySettings | None = None
    prometheus: Enabled | None = None


class GroupSpec(Model):
    description: Str | None = None


class CompositeToolDefinitionSpec(Model):
    """VirtualMCPCompositeToolDefinition: one composite tool. Its fields are checked by
    :mod:`.composite_plan` (ToolHive's rules), so the model keeps them as given."""

    model_config = ConfigDict(extra="allow", frozen=True, hide_input_in_errors=True)


class ConfigMapResource(Model):
    """``v1`` ConfigMap: text a resource refers to (an authz.json, say)."""

    api_version: NonEmpty
    kind: NonEmpty
    metadata: Metadata
    data: dict[Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)], Str] = Field(
        default_factory=dict
    )
    binary_data: dict[Str, Str] = Field(default_factory=dict)
    immutable: Bool | None = None


class SecretResource(Model):
    """``v1`` Secret. Values are never echoed; ``data`` is base64 (checked in the rules)."""

    api_version: NonEmpty
    kind: NonEmpty
    metadata: Metadata
    type: NonEmpty = "Opaque"
    data: dict[Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)], Str] = Field(
        default_factory=dict
    )
    string_data: dict[
        Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)], Str
    ] = Field(default_factory=dict)
    immutable: Bool | None = None


KIND_MODELS: dict[str, type[Model]] = {
    "VirtualMCPServer": VirtualMCPServerSpec,
    "MCPGroup": GroupSpec,
    "MCPServer": MCPServerSpec,
    "MCPExternalAuthConfig": ExternalAuthConfigSpec,
    "MCPOIDCConfig": OIDCConfigSpec,
    "MCPServerEntry": ServerEntrySpec,
    "MCPRemoteProxy": RemoteProxySpec,
    "MCPToolConfig": ToolConfigSpec,
    "MCPTelemetryConfig": TelemetryConfigSpec,
    "MCPAuthzConfig": AuthzConfigSpec,
    "VirtualMCPCompositeToolDefinition": CompositeToolDefinitionSpec,
    "MCPWebhookConfig": WebhookConfigSpec,
}
"""Spec model of each kind under ``{api_group}/v1beta1`` and ``/v1alpha1`` (the same schema).
Secret is ``v1`` and has no spec."""
