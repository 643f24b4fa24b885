"""Shapes of the embedded authorization server (``authServerConfig``), in ToolHive's names.

One job: the models of the server's own settings, its upstream providers (``oidcConfig``,
``oauth2Config`` with ``userInfo``, ``identityFromToken``, ``tokenResponseMapping``,
``dcrConfig``) and its storage (``storage.redis``, shared with ``sessionStorage``'s Sentinel
block). Shape only, as in :mod:`.models`: what the fields mean together is
:mod:`.authserver_rules`'. The trust settings (``trustedIssuers``, ``delegateClients``) are
:mod:`.trust_models`'.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict

from .base_model import Model, Scopes, SecretKeyRef
from .fields import Bool, DnsLabel, DotPath, DurationText, HostPort, NonEmpty, Port, Str, UrlText
from .trust_models import DelegateClient, TrustedIssuer

__all__ = [
    "AuthServerConfig",
    "AuthorizationParams",
    "ClientDocumentsConfig",
    "FieldMapping",
    "IdentityFromToken",
    "OAuth2Upstream",
    "OIDCUpstream",
    "RedisACLUser",
    "RedisStorage",
    "RedisTLS",
    "SentinelConfig",
    "SentinelService",
    "Storage",
    "TokenLifespans",
    "TokenResponseMapping",
    "UpstreamProvider",
    "UpstreamRegistration",
    "UserInfo",
]


class FieldMapping(Model):
    subject_fields: tuple[NonEmpty, ...] | None = None
    name_fields: tuple[NonEmpty, ...] | None = None
    email_fields: tuple[NonEmpty, ...] | None = None


class UserInfo(Model):
    endpoint_url: UrlText
    http_method: Literal["GET", "POST"] = "GET"
    additional_headers: dict[
        Annotated[str, Field(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", max_length=256)], Str
    ] = Field(default_factory=dict)
    field_mapping: FieldMapping | None = None


class TokenResponseMapping(Model):
    access_token_path: DotPath
    scope_path: DotPath | None = None
    refresh_token_path: DotPath | None = None
    expires_in_path: DotPath | None = None


class UpstreamRegistration(Model):
    """``oauth2Config.dcrConfig``: vmcp registers itself at the provider (RFC 7591)."""
    discovery_url: UrlText | None = Field(None, max_length=2048)
    registration_endpoint: UrlText | None = Field(None, max_length=2048)
    initial_access_token_ref: SecretKeyRef | None = None
    software_id: Annotated[str, Strict(), Field(max_length=255)] | None = None
    software_statement: Annotated[str, Strict(), Field(max_length=16384)] | None = None


class IdentityFromToken(Model):
    """``oauth2Config.identityFromToken``: who the user is, read from the token response."""
    subject_path: DotPath
    name_path: DotPath | None = None
    email_path: DotPath | None = None


AuthorizationParams = Annotated[dict[
    Annotated[str, Field(pattern=r"^[A-Za-z0-9_.~-]+$", max_length=128)],
    Annotated[str, Strict(), Field(max_length=1024)]], Field(max_length=16)]
"""``additionalAuthorizationParams``: extra query parameters of the provider's authorization
URL (Google's ``access_type=offline``)."""


class OAuth2Upstream(Model):
    authorization_endpoint: UrlText
    token_endpoint: UrlText
    client_id: NonEmpty | None = None
    """Required unless ``dcrConfig`` obtains one."""
    dcr_config: UpstreamRegistration | None = Field(None, alias="dcrConfig")
    client_secret_ref: SecretKeyRef | None = None
    scopes: Scopes = ()
    user_info: UserInfo | None = None
    token_response_mapping: TokenResponseMapping | None = None
    redirect_uri: UrlText | None = None
    """Where the provider sends the user back: ``{issuer}/oauth/callback``, vmcp's callback."""
    identity_from_token: IdentityFromToken | None = None
    additional_authorization_params: AuthorizationParams = Field(default_factory=dict)
    insecure_allow_http: Bool = Field(False, alias="insecureAllowHTTP")
    """Plain http for this provider's endpoints (development only)."""
    allow_private_ips: Bool = Field(False, alias="allowPrivateIPs")
    """This provider may be reached at private addresses (inside the cluster)."""


class OIDCUpstream(Model):
    issuer_url: UrlText
    client_id: NonEmpty
    client_secret_ref: SecretKeyRef | None = None
    scopes: Scopes | None = None
    redirect_uri: UrlText | None = None
    """Where the provider sends the user back: ``{issuer}/oauth/callback``, vmcp's callback."""
    subject_claim: Annotated[str, Strict(), Field(pattern=r"^([a-zA-Z_][a-zA-Z0-9_]*)?$",
                                                  max_length=128)] | None = None
    """The ID token's claim that names the user (default ``sub``; Entra ID's ``oid``)."""
    user_info_override: UserInfo | None = None
    """Where the user's name and email come from instead of the ID token."""
    additional_authorization_params: AuthorizationParams = Field(default_factory=dict)


class UpstreamProvider(Model):
    name: DnsLabel
    type: Literal["oauth2", "oidc"]
    oauth2_config: OAuth2Upstream | None = Field(None, alias="oauth2Config")
    oidc_config: OIDCUpstream | None = None


class TokenLifespans(Model):
    access_token_lifespan: DurationText | None = None
    refresh_token_lifespan: DurationText | None = None
    auth_code_lifespan: DurationText | None = None


class SentinelService(Model):
    """The Kubernetes Service in front of the sentinels (reached by its cluster DNS name)."""
    name: DnsLabel
    namespace: DnsLabel | None = None
    port: Port = 26379


class SentinelConfig(Model):
    master_name: NonEmpty
    sentinel_addrs: Annotated[tuple[HostPort, ...], Field(max_length=16)] = ()
    sentinel_service: SentinelService | None = None
    db: Annotated[int, Field(ge=0, le=1_000_000, strict=True)] | None = None


class RedisTLS(Model):
    """TLS to Redis (``tls``) or to the sentinels (``sentinelTls``): present means on."""
    insecure_skip_verify: Bool = False
    ca_cert_secret_ref: SecretKeyRef | None = None


class RedisACLUser(Model):
    username_secret_ref: SecretKeyRef | None = None
    password_secret_ref: SecretKeyRef


class RedisStorage(Model):
    """``authServerConfig.storage.redis``; ``addr`` (a single Redis) is for development."""

    sentinel_config: SentinelConfig | None = None
    addr: HostPort | None = None
    db: Annotated[int, Field(ge=0, le=1_000_000, strict=True)] | None = None
    acl_user_config: RedisACLUser | None = Field(None, alias="aclUserConfig")
    dial_timeout: DurationText | None = None
    read_timeout: DurationText | None = None
    write_timeout: DurationText | None = None
    key_prefix: Annotated[str, Field(min_length=1, max_length=256, strict=True)] | None = None
    tls: RedisTLS | None = None
    sentinel_tls: RedisTLS | None = None
    cluster_mode: Bool = False
    """``addr`` is a Redis Cluster's discovery endpoint (managed cluster-mode services)."""


class Storage(Model):
    type: Literal["memory", "redis"] = "memory"
    redis: RedisStorage | None = None


class ClientDocumentsConfig(Model):
    """``authServerConfig.cimd``: clients known by their metadata document."""
    enabled: Bool
    cache_max_size: Annotated[int, Strict(), Field(ge=1, le=100_000)] | None = None
    cache_fallback_ttl: DurationText | None = None


class AuthServerConfig(Model):
    issuer: UrlText
    authorization_endpoint_base_url: UrlText | None = None
    signing_key_secret_refs: Annotated[tuple[SecretKeyRef, ...], Field(max_length=5)] = ()
    hmac_secret_refs: Annotated[tuple[SecretKeyRef, ...], Field(max_length=5)] = ()
    token_lifespans: TokenLifespans | None = None
    upstream_providers: Annotated[tuple[UpstreamProvider, ...], Field(min_length=1,
                                                                       max_length=16)]
    storage: Storage | None = None
    insecure_allow_http: Bool = Field(False, alias="insecureAllowHTTP")
    allow_confidential_client_registration: Bool = False
    """RFC 7591 registrations may ask for a client secret (client_secret_basic or
    client_secret_post); public clients (PKCE only) otherwise."""
    allow_confidential_clients: Bool | None = None
    """vmcp's earlier name of :attr:`allow_confidential_client_registration` (deprecated: a
    warning says so; the two must agree when both are given)."""
    insecure_allow_confidential_over_loopback_http: Bool = Field(
        False, alias="insecureAllowConfidentialOverLoopbackHTTP")
    trusted_issuers: Annotated[tuple[TrustedIssuer, ...], Field(max_length=20)] = ()
    delegate_clients: Annotated[tuple[DelegateClient, ...], Field(max_length=10)] = ()
    primary_upstream_provider: DnsLabel | None = None
    """The upstream login whose claims authorization policies see (default: the first)."""
    cimd: ClientDocumentsConfig | None = None
    baseline_client_scopes: Annotated[tuple[NonEmpty, ...], Field(max_length=10)] = ()
    disable_upstream_token_injection: Bool = False
    force_confidential_redirect_uris: Annotated[tuple[UrlText, ...], Field(max_length=10)] = ()
    """Redirect URIs whose registrations get a secret even when they ask for none."""

    @property
    def confidential_registration(self) -> bool:
        """Whether confidential clients may register, under either name."""
        return self.allow_confidential_client_registration or bool(
            self.allow_confidential_clients)
