"""Rules of ``VirtualMCPServer.spec.authServerConfig``, the embedded authorization server.

Checked here: https (unless ``insecureAllowHTTP``), an issuer usable in RFC 8414 discovery,
signing keys that load and are strong enough, HMAC secrets of at least 32 bytes, token
lifespans within sane ranges, upstream providers (unique DNS-label names, the block matching
``type``, their Secrets, a ``redirectUri`` that is vmcp's callback ``{issuer}/oauth/callback``,
an OIDC ``subjectClaim``), the storage block, and (:mod:`.trust_rules`) confidential clients
and trusted issuers. The result is an
:class:`~vmcp_trio.resources.plan.AuthServerPlan` with ToolHive's defaults filled in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ..auth.ssrf import is_loopback_host
from . import authserver_models as am
from . import models as m
from .durations import Duration
from .plan import (
    AuthServerPlan,
    ClientDocumentsPlan,
    OAuth2Provider,
    OIDCProvider,
    ProviderPlan,
    RegistrationPlan,
    SecretValue,
    TokenResponseMappingPlan,
    UserInfoPlan,
)
from .problems import PathPart
from .report import Resource
from .resolver import Resolver
from .storage_rules import resolve_auth_storage
from .trust_rules import (
    check_confidential_transport,
    resolve_delegate_clients,
    resolve_trusted_issuers,
)

__all__ = ["LIFESPAN_RANGES", "hmac_secret_problem", "resolve_auth_server", "secret_list"]

SPEC = ("spec", "authServerConfig")
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]+")
SWITCH = "spec.authServerConfig.insecureAllowHTTP"

LIFESPAN_RANGES: dict[str, tuple[Duration, Duration, Duration]] = {
    # field alias: (minimum, maximum, default), as ToolHive validates them
    "accessTokenLifespan": (Duration.of(minutes=1), Duration.of(hours=24), Duration.of(hours=1)),
    "refreshTokenLifespan": (Duration.of(hours=1), Duration.of(hours=720),
                             Duration.of(hours=168)),
    "authCodeLifespan": (Duration.of(seconds=30), Duration.of(minutes=10),
                         Duration.of(minutes=10)),
}
MIN_HMAC_BYTES = 32
MIN_RSA_BITS = 2048
_EC_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)


def resolve_auth_server(resolver: Resolver, owner: Resource,
                        config: am.AuthServerConfig) -> AuthServerPlan | None:
    errors_before = resolver.report.error_count
    https = config.insecure_allow_http
    _check_base_url(resolver, owner, (*SPEC, "issuer"), config.issuer, https)
    base = config.issuer
    if config.authorization_endpoint_base_url is not None:
        _check_base_url(resolver, owner, (*SPEC, "authorizationEndpointBaseUrl"),
                        config.authorization_endpoint_base_url, https)
        base = config.authorization_endpoint_base_url

    signing = _signing_keys(resolver, owner, config.signing_key_secret_refs)
    hmacs = _hmac_secrets(resolver, owner, config.hmac_secret_refs)
    lifespans = _lifespans(resolver, owner, config.token_lifespans)
    providers = _providers(resolver, owner, config)
    storage = resolve_auth_storage(resolver, owner, config.storage)
    check_confidential_transport(resolver, owner, config)
    trusted = resolve_trusted_issuers(resolver, owner, config)
    delegates = resolve_delegate_clients(resolver, owner, config.delegate_clients)
    documents = _client_documents(resolver, owner, config.cimd)
    _check_registration_extras(resolver, owner, config)
    if resolver.report.error_count != errors_before or storage is None:
        return None
    return AuthServerPlan(
        issuer=config.issuer,
        authorization_endpoint=base.rstrip("/") + "/oauth/authorize",
        providers=providers,
        signing_keys=signing,
        hmac_secrets=hmacs,
        access_token_lifespan=lifespans["accessTokenLifespan"],
        refresh_token_lifespan=lifespans["refreshTokenLifespan"],
        auth_code_lifespan=lifespans["authCodeLifespan"],
        storage=storage,
        insecure_allow_http=https,
        allow_confidential_clients=config.confidential_registration,
        trusted_issuers=trusted,
        delegate_clients=delegates,
        client_documents=documents,
        baseline_client_scopes=config.baseline_client_scopes,
        upstream_token_injection=not config.disable_upstream_token_injection,
        force_confidential_redirect_uris=config.force_confidential_redirect_uris,
    )


def _client_documents(resolver: Resolver, owner: Resource,
                      config: am.ClientDocumentsConfig | None) -> ClientDocumentsPlan:
    """``cimd``. Without it clients may still name themselves by their metadata document
    (vmcp's default, as MCP 2026-07-28 has authorization servers support them); ``enabled:
    false`` turns that off."""
    if config is None:
        return ClientDocumentsPlan()
    default = ClientDocumentsPlan()
    fallback = config.cache_fallback_ttl or default.fallback_lifetime
    if not Duration.of(seconds=1) <= fallback <= Duration.of(hours=24):
        resolver.report.error(owner, (*SPEC, "cimd", "cacheFallbackTtl"), "duration-range",
                              f"must be between 1s and 24h (got {fallback})")
    return ClientDocumentsPlan(config.enabled, config.cache_max_size or default.max_cached,
                               fallback)


def _check_registration_extras(resolver: Resolver, owner: Resource,
                               config: am.AuthServerConfig) -> None:
    """``baselineClientScopes`` are scope tokens; ``forceConfidentialRedirectUris`` need
    confidential registration and name https redirect URIs off this machine (a loopback
    client is public by construction, OAuth 2.1 section 2.1)."""
    for index, scope in enumerate(config.baseline_client_scopes):
        if not _SCOPE_TOKEN.fullmatch(scope):
            resolver.report.error(owner, (*SPEC, "baselineClientScopes", index), "scope",
                                  "is not a scope token (printable ASCII, no space, quote or "
                                  "backslash)")
    if config.force_confidential_redirect_uris and not config.confidential_registration:
        resolver.report.error(owner, (*SPEC, "forceConfidentialRedirectUris"), "requires",
                              "needs allowConfidentialClientRegistration: true")
    for index, uri in enumerate(config.force_confidential_redirect_uris):
        parts = urlsplit(uri)
        if parts.scheme != "https" or not parts.hostname or parts.fragment or parts.query \
                or is_loopback_host(parts.hostname):
            resolver.report.error(owner, (*SPEC, "forceConfidentialRedirectUris", index),
                                  "redirect-uri", "must be an https URI of a host other than "
                                  "this machine's, without query or fragment")


def _check_base_url(resolver: Resolver, owner: Resource, path: Sequence[PathPart], url: str,
                    allow_http: bool) -> None:
    """RFC 8414 issuers have no query or fragment; a trailing slash would double in paths."""
    resolver.require_https(owner, path, url, allow_http, SWITCH)
    parts = urlsplit(url)
    if parts.query or url.endswith("?"):
        resolver.report.error(owner, path, "issuer", "must not have a ?query")
    elif url.endswith("/"):
        resolver.report.error(owner, path, "issuer", "must not end with '/'")


def secret_list(resolver: Resolver, owner: Resource, where: tuple[PathPart, ...],
                refs: Sequence[m.SecretKeyRef], when_empty: str | None, rule: str,
                problem: Callable[[bytes], str | None]) -> tuple[SecretValue, ...]:
    """Resolve the list of Secret refs at ``where``, each checked by ``problem``; warn
    ``when_empty`` when there is none."""
    if not refs and when_empty is not None:
        resolver.report.warn(owner, where, "ephemeral-keys", when_empty)
    values: list[SecretValue] = []
    for index, ref in enumerate(refs):
        path = (*where, index)
        value = resolver.secret(owner, path, ref)
        if value is None:
            continue
        reason = problem(value.value)
        if reason is not None:
            resolver.report.error(owner, (*path, "key"), rule, f"Secret {value.source}: {reason}")
            continue
        values.append(value)
    return tuple(values)


def _signing_keys(resolver: Resolver, owner: Resource,
                  refs: Sequence[m.SecretKeyRef]) -> tuple[SecretValue, ...]:
    return secret_list(
        resolver, owner, (*SPEC, "signingKeySecretRefs"), refs,
        "is empty: an ephemeral signing key is generated at startup, so after a restart issued "
        "tokens no longer verify and every user must log in again (set it for production)",
        "signing-key", signing_key_problem)


def _hmac_secrets(resolver: Resolver, owner: Resource,
                  refs: Sequence[m.SecretKeyRef]) -> tuple[SecretValue, ...]:
    return secret_list(
        resolver, owner, (*SPEC, "hmacSecretRefs"), refs,
        "is empty: an ephemeral HMAC secret is generated at startup, so after a restart "
        "authorization codes and refresh tokens no longer decode and every user must log in "
        "again (set it for production)",
        "hmac-secret", hmac_secret_problem)


def signing_key_problem(pem: bytes) -> str | None:
    """Why ``pem`` cannot sign our JWTs, or None. Never includes key material."""
    try:
        key = load_pem_private_key(pem, password=None)
    except TypeError:
        return "is an encrypted PEM key; store it unencrypted in the Secret"
    except (ValueError, UnsupportedAlgorithm):
        return ("is not a PEM private key (expected PKCS#1 RSA, SEC1 EC or PKCS#8 "
                "RSA/EC/Ed25519; 'vmcp keys generate' writes one)")
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            return f"RSA key has {key.key_size} bits; at least {MIN_RSA_BITS} are required"
        return None
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, _EC_CURVES):
            return f"EC curve {key.curve.name} is not supported; use P-256, P-384 or P-521"
        return None
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return None
    return "unsupported key type; use RSA (>= 2048 bits), EC P-256/P-384/P-521 or Ed25519"


def hmac_secret_problem(secret: bytes) -> str | None:
    if len(secret) < MIN_HMAC_BYTES:
        return f"an HMAC secret must be at least {MIN_HMAC_BYTES} bytes long"
    return None


def _lifespans(resolver: Resolver, owner: Resource,
               config: am.TokenLifespans | None) -> dict[str, Duration]:
    given = {
        "accessTokenLifespan": config.access_token_lifespan if config else None,
        "refreshTokenLifespan": config.refresh_token_lifespan if config else None,
        "authCodeLifespan": config.auth_code_lifespan if config else None,
    }
    out: dict[str, Duration] = {}
    for alias, value in given.items():
        low, high, default = LIFESPAN_RANGES[alias]
        if value is None:
            out[alias] = default
            continue
        if not low <= value <= high:
            resolver.report.error(owner, (*SPEC, "tokenLifespans", alias), "duration-range",
                                  f"must be between {low} and {high} (got {value})")
        out[alias] = value
    if out["refreshTokenLifespan"] < out["accessTokenLifespan"]:
        resolver.report.error(owner, (*SPEC, "tokenLifespans", "refreshTokenLifespan"),
                              "duration-range", "must not be shorter than accessTokenLifespan")
    return out


def _providers(resolver: Resolver, owner: Resource,
               config: am.AuthServerConfig) -> tuple[ProviderPlan, ...]:
    seen: dict[str, int] = {}
    plans: list[ProviderPlan] = []
    https = config.insecure_allow_http
    for index, provider in enumerate(config.upstream_providers):
        path = (*SPEC, "upstreamProviders", index)
        if provider.name in seen:
            resolver.report.error(owner, (*path, "name"), "duplicate-name",
                                  f"upstream provider {provider.name!r} is already defined at "
                                  f"upstreamProviders[{seen[provider.name]}]")
        seen.setdefault(provider.name, index)
        wanted, other = ("oidcConfig", "oauth2Config")
        if provider.type == "oauth2":
            wanted, other = other, wanted
        present = {"oidcConfig": provider.oidc_config, "oauth2Config": provider.oauth2_config}
        if present[wanted] is None:
            resolver.report.error(owner, (*path, wanted), "required",
                                  f"is required when type is {provider.type}")
        if present[other] is not None:
            resolver.report.error(owner, (*path, other), "unused-field",
                                  f"must not be set when type is {provider.type}")
        block = present[wanted]
        callback = f"{config.issuer}/oauth/callback"
        if block is not None and block.redirect_uri not in (None, callback):
            resolver.report.error(owner, (*path, wanted, "redirectUri"), "redirect-uri",
                                  f"must be {callback}, where vmcp serves the login's callback "
                                  "(its default: it may be left out)")
        if provider.type == "oidc" and provider.oidc_config is not None:
            plan: ProviderPlan | None = _oidc_provider(resolver, owner, path, provider.name,
                                                      provider.oidc_config, https)
        elif provider.type == "oauth2" and provider.oauth2_config is not None:
            plan = _oauth2_provider(resolver, owner, path, provider.name,
                                    provider.oauth2_config, https)
        else:
            plan = None
        if plan is not None:
            plans.append(plan)
    return tuple(plans)


def _oidc_provider(resolver: Resolver, owner: Resource, path: Sequence[PathPart], name: str,
                   config: am.OIDCUpstream, https: bool) -> OIDCProvider:
    here = (*path, "oidcConfig")
    resolver.require_https(owner, (*here, "issuerUrl"), config.issuer_url, https, SWITCH)
    secret = None
    if config.client_secret_ref is not None:
        secret = resolver.secret(owner, (*here, "clientSecretRef"), config.client_secret_ref)
    scopes = config.scopes if config.scopes is not None else ("openid", "offline_access")
    if "openid" not in scopes:
        resolver.report.error(owner, (*here, "scopes"), "scopes",
                              "must include 'openid' for an OIDC provider (without it no ID "
                              "token is issued; use type oauth2 for plain OAuth 2.0)")
    user_info = None
    if config.user_info_override is not None:
        user_info = _user_info(resolver, owner, (*here, "userInfoOverride"),
                               config.user_info_override, https)
    return OIDCProvider(name, config.issuer_url, config.client_id, secret, scopes,
                        config.subject_claim or "sub", user_info,
                        _authorization_params(resolver, owner, here,
                                              config.additional_authorization_params))


_FRAMEWORK_PARAMS = frozenset({"response_type", "client_id", "redirect_uri", "scope", "state",
                               "code_challenge", "code_challenge_method", "nonce"})


def _authorization_params(resolver: Resolver, owner: Resource, here: Sequence[PathPart],
                          params: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``additionalAuthorizationParams``, never one of the parameters vmcp sets itself."""
    for name in params:
        if name in _FRAMEWORK_PARAMS:
            resolver.report.error(owner, (*here, "additionalAuthorizationParams", name),
                                  "reserved", "is set by vmcp for every login; it cannot be "
                                  "configured")
    return tuple(sorted(params.items()))


def _user_info(resolver: Resolver, owner: Resource, here: Sequence[PathPart],
               info: am.UserInfo, https: bool) -> UserInfoPlan:
    resolver.require_https(owner, (*here, "endpointUrl"), info.endpoint_url, https, SWITCH)
    mapping = info.field_mapping or am.FieldMapping()
    return UserInfoPlan(
        endpoint_url=info.endpoint_url,
        http_method=info.http_method,
        additional_headers=tuple(sorted(info.additional_headers.items())),
        subject_fields=mapping.subject_fields or ("sub",),
        name_fields=mapping.name_fields or ("name",),
        email_fields=mapping.email_fields or ("email",),
    )


def _registration(resolver: Resolver, owner: Resource, here: Sequence[PathPart],
                  config: am.OAuth2Upstream, https: bool) -> RegistrationPlan | None:
    """``dcrConfig``, or None when the provider has a configured client id (or either is
    wrong: reported)."""
    report, dcr = resolver.report, config.dcr_config
    if dcr is None:
        if config.client_id is None:
            report.error(owner, (*here, "clientId"), "required",
                         "is required (or dcrConfig, for vmcp to register itself at the "
                         "provider)")
        return None
    if config.client_id is not None:
        report.error(owner, (*here, "dcrConfig"), "one-of",
                     "must not be set with clientId: the registration gives the client id")
        return None
    if config.client_secret_ref is not None:
        report.error(owner, (*here, "clientSecretRef"), "unused-field",
                     "must not be set with dcrConfig: the registration gives the secret")
        return None
    at = (*here, "dcrConfig")
    if (dcr.discovery_url is None) == (dcr.registration_endpoint is None):
        report.error(owner, at, "one-of",
                     "needs exactly one of discoveryUrl and registrationEndpoint")
        return None
    for alias, url in (("discoveryUrl", dcr.discovery_url),
                       ("registrationEndpoint", dcr.registration_endpoint)):
        resolver.require_https(owner, (*at, alias), url, https, SWITCH)
    token = None
    if dcr.initial_access_token_ref is not None:
        token = resolver.secret(owner, (*at, "initialAccessTokenRef"),
                                dcr.initial_access_token_ref)
    return RegistrationPlan(dcr.registration_endpoint, dcr.discovery_url, token, dcr.software_id,
                            dcr.software_statement)


def _oauth2_provider(resolver: Resolver, owner: Resource, path: Sequence[PathPart], name: str,
                     config: am.OAuth2Upstream, https: bool) -> OAuth2Provider:
    here = (*path, "oauth2Config")
    https = https or config.insecure_allow_http
    for alias, url in (("authorizationEndpoint", config.authorization_endpoint),
                       ("tokenEndpoint", config.token_endpoint)):
        resolver.require_https(owner, (*here, alias), url, https, SWITCH)
    registration = _registration(resolver, owner, here, config, https)
    secret = None
    if config.client_secret_ref is not None:
        secret = resolver.secret(owner, (*here, "clientSecretRef"), config.client_secret_ref)
    user_info = None
    if config.user_info is not None:
        user_info = _user_info(resolver, owner, (*here, "userInfo"), config.user_info, https)
    identity = config.identity_from_token
    if identity is not None and user_info is not None:
        resolver.report.error(owner, (*here, "identityFromToken"), "one-of",
                              "must not be set with userInfo: the user is known from one of "
                              "them")
    token_mapping = None
    if config.token_response_mapping is not None:
        tm = config.token_response_mapping
        token_mapping = TokenResponseMappingPlan(
            access_token_path=tm.access_token_path,
            scope_path=tm.scope_path or "scope",
            refresh_token_path=tm.refresh_token_path or "refresh_token",
            expires_in_path=tm.expires_in_path or "expires_in",
        )
    return OAuth2Provider(
        name, config.authorization_endpoint, config.token_endpoint, config.client_id or "",
        secret, config.scopes, user_info, token_mapping, registration,
        None if identity is None else (identity.subject_path, identity.name_path,
                                       identity.email_path),
        _authorization_params(resolver, owner, here, config.additional_authorization_params),
        config.insecure_allow_http, config.allow_private_ips)
