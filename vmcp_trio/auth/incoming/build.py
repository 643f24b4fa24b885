"""The :class:`Authenticator` of a configuration's incoming mode.

* ``anonymous``: :class:`AnonymousAuthenticator`.
* ``oidc`` + ``inline``: JWTs of the issuer, keys from ``jwksUrl`` or the issuer's discovery
  document (``jwks_uri``), both behind the SSRF guard (``insecureAllowHTTP``,
  ``jwksAllowPrivateIP``); with ``clientSecretRef`` also opaque tokens by introspection.
* ``oidc`` + ``kubernetes``: service-account tokens. The issuer, when not configured, is learnt
  in-cluster: ``KUBERNETES_SERVICE_HOST``/``_PORT`` name the API server, whose
  ``/.well-known/openid-configuration`` (asked with the mounted service-account token, trusting
  the mounted CA) says the issuer; the keys come from the API server's ``/openid/v1/jwks`` (the
  document's ``jwks_uri`` is often a public URL the pod cannot reach). ``serviceAccount`` and
  ``namespace`` restrict which accounts may call, from the token's ``kubernetes.io`` claims.
* ``oidc`` + ``oidcConfigRef`` to the embedded authorization server: keys of this process (the
  authorization server's own :class:`~.authenticator.KeySource`).
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...defaults import SERVICE_ACCOUNT_DIR
from ...http.client import HttpClient
from ...resources.plan import (
    AnonymousIncoming,
    EmbeddedIncoming,
    IncomingPlan,
    KubernetesIncoming,
    OIDCIncoming,
)
from ..identity import Identity
from ..oauth.discovery import DiscoveryError, FetchError, discover, fetch_json
from .authenticator import AnonymousAuthenticator, Authenticator, JwtAuthenticator, KeySource
from .introspection import Introspector
from .jwks import JwksCache

__all__ = ["AuthSettings", "IncomingAuthError", "IssuerMetadata", "bearer_from_file",
           "build_authenticator"]

log = logging.getLogger("vmcp.auth")



class IncomingAuthError(Exception):
    """The incoming mode cannot be set up (the message says what is missing)."""


@dataclass(frozen=True)
class AuthSettings:
    """Deployment knobs of incoming auth (``vmcp serve`` flags)."""

    leeway: float = 30.0
    required_scopes: tuple[str, ...] = ()
    introspection_cache_ttl: float = 60.0
    service_account_dir: str = SERVICE_ACCOUNT_DIR


class IssuerMetadata:
    """An issuer's discovery document, fetched when first needed and kept once it worked (also
    the embedded authorization server's, for its trusted issuers)."""

    def __init__(self, client: HttpClient, issuer: str, *, allow_http: bool,
                 allow_private: bool,
                 headers: Callable[[], list[tuple[str, str]]] = list,
                 private_switch: str | None = None) -> None:
        self.client = client
        self.issuer = issuer
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.headers = headers
        """Sent with the discovery request (``jwksAuthTokenPath``'s bearer token)."""
        self.private_switch = private_switch
        """The setting that allows private addresses, named when one is refused."""
        self._document: dict[str, Any] | None = None

    async def get(self) -> dict[str, Any]:
        if self._document is None:
            self._document = await discover(self.client, self.issuer,
                                            allow_http=self.allow_http,
                                            allow_private=self.allow_private,
                                            headers=self.headers(),
                                            switch=self.private_switch)
        return self._document

    def endpoint(self, name: str, configured: str | None) -> Callable[[], Awaitable[str]]:
        async def url() -> str:
            if configured:
                return configured
            value = (await self.get()).get(name)
            if not isinstance(value, str):
                raise DiscoveryError(f"the issuer's metadata has no {name}")
            return value
        return url


def bearer_from_file(path: Path) -> Callable[[], list[tuple[str, str]]]:
    """An ``Authorization: Bearer`` header with the token in ``path``, read at each request
    (a rotated token is picked up); none while the file is missing or empty (the fetch then
    fails as the issuer says, and is retried)."""
    def headers() -> list[tuple[str, str]]:
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            log.warning("jwksAuthTokenPath %s cannot be read", path)
            return []
        return [("authorization", f"Bearer {token}")] if token else []
    return headers


def build_authenticator(plan: IncomingPlan, settings: AuthSettings, client: HttpClient, *,
                        embedded_keys: KeySource | None = None,
                        still_valid: Callable[[Identity], bool] | None = None,
                        first_seen_valid: Callable[[Identity], Awaitable[bool]] | None = None
                        ) -> Authenticator:
    if isinstance(plan, AnonymousIncoming):
        return AnonymousAuthenticator()
    if isinstance(plan, OIDCIncoming):
        return _oidc(plan, settings, client)
    if isinstance(plan, KubernetesIncoming):
        return _kubernetes(plan, settings)
    if isinstance(plan, EmbeddedIncoming):
        if embedded_keys is None:
            raise IncomingAuthError("incoming auth through oidcConfigRef needs the embedded "
                                    "authorization server (authServerConfig)")
        return JwtAuthenticator(issuer=plan.issuer, audience=plan.audience, keys=embedded_keys,
                                required_scopes=settings.required_scopes,
                                scopes_supported=plan.scopes, leeway=settings.leeway,
                                still_valid=still_valid, first_seen_valid=first_seen_valid)
    raise IncomingAuthError(f"unknown incoming mode {plan!r}")


def _oidc(plan: OIDCIncoming, settings: AuthSettings, client: HttpClient) -> JwtAuthenticator:
    if plan.ca_bundle is not None:  # the issuer's endpoints chain to a private CA
        client = HttpClient.trusting(plan.ca_bundle)
    headers = list if plan.jwks_auth_token_path is None \
        else bearer_from_file(Path(plan.jwks_auth_token_path))
    metadata = IssuerMetadata(client, plan.issuer, allow_http=plan.insecure_allow_http,
                              allow_private=plan.jwks_allow_private_ip, headers=headers,
                              private_switch="jwksAllowPrivateIP")
    jwks = JwksCache(plan.issuer, metadata.endpoint("jwks_uri", plan.jwks_url), client,
                     allow_http=plan.insecure_allow_http,
                     allow_private=plan.jwks_allow_private_ip, headers=headers,
                     private_switch="jwksAllowPrivateIP")
    introspector = None
    if plan.client_secret is not None or plan.introspection_url is not None:
        introspector = Introspector(
            metadata.endpoint("introspection_endpoint", plan.introspection_url), client,
            issuer=plan.issuer, audience=plan.audience, client_id=plan.client_id or "",
            client_secret=plan.client_secret.text() if plan.client_secret else None,
            allow_http=plan.insecure_allow_http, allow_private=plan.jwks_allow_private_ip,
            max_ttl=settings.introspection_cache_ttl)
    authenticator = JwtAuthenticator(
        issuer=plan.issuer, audience=plan.audience, keys=jwks, introspector=introspector,
        required_scopes=settings.required_scopes, scopes_supported=plan.scopes,
        leeway=settings.leeway, supervised=((f"JWKS of {plan.issuer}", jwks.run),))
    jwks.on_removed = authenticator.key_removed
    return authenticator


def _kubernetes(plan: KubernetesIncoming, settings: AuthSettings) -> JwtAuthenticator:
    account_dir = Path(settings.service_account_dir)
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
        "KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise IncomingAuthError("oidcConfig type kubernetes: not running in a cluster "
                                "(KUBERNETES_SERVICE_HOST is not set)")
    api_server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    context = ssl.create_default_context()
    ca = account_dir / "ca.crt"
    if plan.use_cluster_auth and ca.exists():
        context.load_verify_locations(cafile=str(ca))
    client = HttpClient(ssl_context=context)
    headers = bearer_from_file(account_dir / "token") if plan.use_cluster_auth else list

    async def jwks_url() -> str:
        return plan.jwks_url or f"{api_server}/openid/v1/jwks"

    jwks = JwksCache(plan.issuer or api_server, jwks_url, client, allow_private=True,
                     headers=headers)
    async def learn_issuer() -> None:
        """The service-account issuer the API server announces, before serving starts."""
        if not authenticator.issuer:
            url = f"{api_server}/.well-known/openid-configuration"
            try:
                status, _, document = await fetch_json(client, url, headers=headers())
            except FetchError as exc:
                raise IncomingAuthError(f"cannot read the API server's OIDC discovery: "
                                        f"{exc}") from None
            issuer = document.get("issuer") if isinstance(document, dict) else None
            if status != 200 or not isinstance(issuer, str) or not issuer:
                raise IncomingAuthError(f"{url} (HTTP {status}) announces no issuer")
            authenticator.issuer = jwks.issuer = issuer
            authenticator.authorization_servers = (issuer,)
            if introspector is not None:
                introspector.issuer = issuer

    introspector = None
    if plan.introspection_url is not None:  # opaque tokens, asked without credentials
        introspection_url = plan.introspection_url

        async def endpoint() -> str:
            return introspection_url
        introspector = Introspector(endpoint, client, issuer=plan.issuer or "",
                                    audience=plan.audience, allow_private=True,
                                    max_ttl=settings.introspection_cache_ttl)
    authenticator = JwtAuthenticator(
        issuer=plan.issuer or "", audience=plan.audience, keys=jwks, introspector=introspector,
        required_scopes=settings.required_scopes, scopes_supported=plan.scopes,
        leeway=settings.leeway, restrict=_service_account_rule(plan.service_account,
                                                               plan.namespace),
        supervised=(("JWKS of the Kubernetes API server", jwks.run),), prepare=learn_issuer)
    jwks.on_removed = authenticator.key_removed
    return authenticator


def _service_account_rule(name: str | None,
                          namespace: str | None) -> Callable[[dict[str, Any]], str | None] | None:
    """The ``serviceAccount``/``namespace`` restriction, read from the token's claims."""
    if name is None and namespace is None:
        return None

    def check(claims: dict[str, Any]) -> str | None:
        k8s = claims.get("kubernetes.io")
        k8s = k8s if isinstance(k8s, dict) else {}
        account = k8s.get("serviceaccount")
        account_name = account.get("name") if isinstance(account, dict) else None
        if namespace is not None and k8s.get("namespace") != namespace:
            return "the service account's namespace is not allowed"
        if name is not None and account_name != name:
            return "the service account is not allowed"
        return None

    return check
