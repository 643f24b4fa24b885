"""Rules of the embedded authorization server's client secrets and trust settings.

One job: check, with exact paths, what lets the authorization server accept a credential that is
not a user's login: confidential clients (``allowConfidentialClientRegistration``,
``delegateClients``) and ``trustedIssuers`` (RFC 7523 assertions, RFC 8693 subject tokens), and
turn them into plans. Rules, ToolHive's unless said:

* Client secrets never cross a network in cleartext: with confidential registration or delegate
  clients, the issuer is https, or a loopback ``http://`` issuer with
  ``insecureAllowConfidentialOverLoopbackHTTP`` (development). (ToolHive also refuses
  ``insecureAllowHTTP`` beside them; vmcp's ``insecureAllowHTTP`` is what any ``http://`` issuer,
  loopback too, and a development upstream need, so the issuer's own scheme decides here.)
* A trusted issuer is not this server, appears once, has an https JWKS URL (or issuer, when the
  keys come from its discovery document) unless its own ``insecureAllowHTTP``, and names its
  ``jwksUrl`` when ``allowPrivateIPs`` (discovery must not choose a private address).
* ``jwtBearerGrant``: ``maxAssertionAge`` above zero, each subject bound once;
  ``acceptedAudiences`` defaults to this server's token endpoint and issuer (RFC 7523 section
  3; ToolHive's default is the token endpoint only).
* Delegation (``expectedAudience``, ``actorClaim``, ``allowedActors``, ``allowMayAct``,
  ``allowedDelegateClients``): an issuer without ``jwtBearerGrant`` needs ``expectedAudience``;
  any delegation field needs ``allowedDelegateClients``, whose ``*`` stands alone and never with
  ``allowMayAct``; its other entries name ``delegateClients`` (vmcp: no other client may
  exchange tokens); ``actorClaim`` names a claim that can hold an actor.
* Delegate clients: unique ids, secrets of at least 32 bytes.

What depends on the gateway's resource (its audience and scopes) is
:func:`check_trust_targets`', called once incoming auth is known: the resources a subject may
ask for and a delegate client's audiences are resources this server issues tokens for, its
scopes are scopes it supports, and ``acceptedAudiences`` names this server, never a resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from ..auth.claims_matcher import MatcherError, compile_matcher
from ..auth.ssrf import is_loopback_url
from . import authserver_models as am
from .plan import DelegateClientPlan, JwtBearerPlan, SecretValue, TrustedIssuerPlan
from .problems import PathPart
from .report import Resource
from .resolver import Resolver
from .trust_models import DelegateClient, TrustedIssuer

__all__ = ["MIN_DELEGATE_SECRET_BYTES", "check_confidential_transport", "check_trust_targets",
           "resolve_delegate_clients", "resolve_trusted_issuers"]

SPEC = ("spec", "authServerConfig")
MIN_DELEGATE_SECRET_BYTES = 32
RESERVED_ACTOR_CLAIMS = frozenset({"sub", "iss", "aud", "exp", "iat", "nbf", "jti", "name",
                                   "email", "scope", "scp", "may_act"})
"""Claims that identify the subject or the token, never the client that asked for it."""


def check_confidential_transport(resolver: Resolver, owner: Resource,
                                 config: am.AuthServerConfig) -> None:
    """Client secrets reach the token endpoint over TLS, or over loopback when allowed."""
    legacy = config.allow_confidential_clients
    if legacy is not None:
        if config.allow_confidential_client_registration and not legacy:
            resolver.report.error(owner, (*SPEC, "allowConfidentialClients"), "conflict",
                                  "differs from allowConfidentialClientRegistration (its "
                                  "earlier name): keep one")
        else:
            resolver.report.warn(owner, (*SPEC, "allowConfidentialClients"), "deprecated",
                                 "is allowConfidentialClientRegistration now (ToolHive's "
                                 "name); the earlier name still works")
    which = ("allowConfidentialClientRegistration"
             if config.confidential_registration else
             "delegateClients" if config.delegate_clients else None)
    if which is None or urlsplit(config.issuer).scheme == "https":
        return
    if not is_loopback_url(config.issuer):
        resolver.report.error(owner, (*SPEC, which), "cleartext-secrets",
                              "needs an https issuer: client secrets would cross the network "
                              "in cleartext")
    elif not config.insecure_allow_confidential_over_loopback_http:
        resolver.report.error(owner, (*SPEC, which), "cleartext-secrets",
                              "needs an https issuer, or insecureAllowConfidentialOverLoopback"
                              "HTTP: true for a loopback http issuer (development only)")


def resolve_trusted_issuers(resolver: Resolver, owner: Resource,
                            config: am.AuthServerConfig) -> tuple[TrustedIssuerPlan, ...]:
    seen: dict[str, int] = {}
    delegates = {client.client_id for client in config.delegate_clients}
    plans: list[TrustedIssuerPlan] = []
    for index, trusted in enumerate(config.trusted_issuers):
        path = (*SPEC, "trustedIssuers", index)
        if trusted.issuer_url.rstrip("/") == config.issuer.rstrip("/"):
            resolver.report.error(owner, (*path, "issuerUrl"), "trusted-issuer",
                                  "is this authorization server's own issuer (its tokens need "
                                  "no trust entry)")
        elif trusted.issuer_url in seen:
            first = seen[trusted.issuer_url]
            resolver.report.error(owner, (*path, "issuerUrl"), "duplicate-name",
                                  f"is already trusted at trustedIssuers[{first}]")
        seen.setdefault(trusted.issuer_url, index)
        plan = _trusted_issuer(resolver, owner, path, trusted, config.issuer, delegates)
        if plan is not None:
            plans.append(plan)
    return tuple(plans)


def _trusted_issuer(resolver: Resolver, owner: Resource, path: tuple[PathPart, ...],
                    trusted: TrustedIssuer, issuer: str,
                    delegates: set[str]) -> TrustedIssuerPlan | None:
    report = resolver.report
    errors_before = report.error_count
    switch = "trustedIssuers[].insecureAllowHTTP"
    if trusted.jwks_url is not None:
        resolver.require_https(owner, (*path, "jwksUrl"), trusted.jwks_url,
                               trusted.insecure_allow_http, switch)
    else:
        if not trusted.issuer_url.lower().startswith(("https://", "http://")):
            report.error(owner, (*path, "issuerUrl"), "url",
                         "must be an http(s) URL to discover the issuer's keys from (or set "
                         "jwksUrl)")
        resolver.require_https(owner, (*path, "issuerUrl"), trusted.issuer_url,
                               trusted.insecure_allow_http, switch)
        if trusted.allow_private_ips:
            report.error(owner, (*path, "allowPrivateIPs"), "required",
                         "needs jwksUrl: the issuer's discovery document must not choose a "
                         "private address to fetch keys from")
    grant = _jwt_bearer(resolver, owner, path, trusted, issuer)
    delegation = _delegation_problems(trusted, delegates)
    for where, message in delegation:
        report.error(owner, (*path, *where), "trusted-issuer", message)
    if trusted.actor_matcher is not None:
        try:
            compile_matcher(trusted.actor_matcher)
        except MatcherError as exc:
            report.error(owner, (*path, "actorMatcher"), "cel", str(exc))
    if report.error_count != errors_before:
        return None
    clients = trusted.allowed_delegate_clients or ()
    return TrustedIssuerPlan(
        issuer=trusted.issuer_url, jwks_url=trusted.jwks_url,
        allow_http=trusted.insecure_allow_http, allow_private=trusted.allow_private_ips,
        jwt_bearer=grant, expected_audience=trusted.expected_audience,
        actor_claim=trusted.actor_claim or "azp", allowed_actors=trusted.allowed_actors,
        actor_matcher=trusted.actor_matcher, allow_may_act=trusted.allow_may_act,
        allowed_delegate_clients=clients)


def _jwt_bearer(resolver: Resolver, owner: Resource, path: tuple[PathPart, ...],
                trusted: TrustedIssuer, issuer: str) -> JwtBearerPlan | None:
    grant = trusted.jwt_bearer_grant
    if grant is None:
        return None
    here = (*path, "jwtBearerGrant")
    if grant.max_assertion_age.total_seconds() <= 0:
        resolver.report.error(owner, (*here, "maxAssertionAge"), "duration-range",
                              "must be greater than zero")
    first: dict[str, int] = {}
    for index, binding in enumerate(grant.subject_bindings):
        if binding.subject in first:
            resolver.report.error(owner, (*here, "subjectBindings", index, "subject"),
                                  "duplicate-name", f"is already bound at subjectBindings"
                                                    f"[{first[binding.subject]}]")
        first.setdefault(binding.subject, index)
    return JwtBearerPlan(
        max_assertion_age=grant.max_assertion_age,
        bindings=tuple((b.subject, b.allowed_resources) for b in grant.subject_bindings),
        accepted_audiences=grant.accepted_audiences or (issuer.rstrip("/") + "/oauth/token",
                                                        issuer.rstrip("/")))


Problems = list[tuple[tuple[PathPart, ...], str]]
"""(path under the trusted issuer, why)."""


def _delegation_problems(trusted: TrustedIssuer, delegates: set[str]) -> Problems:
    """What is wrong with the issuer's RFC 8693 delegation fields."""
    delegating = bool(trusted.expected_audience or trusted.actor_claim or trusted.allowed_actors
                      or trusted.actor_matcher or trusted.allow_may_act)
    clients = trusted.allowed_delegate_clients or ()
    problems: Problems = []
    if trusted.jwt_bearer_grant is None and not trusted.expected_audience:
        problems.append((("expectedAudience",), "is required unless jwtBearerGrant is "
                                                "configured (the audience its subject tokens "
                                                "must name)"))
    elif delegating and not trusted.expected_audience:
        problems.append((("expectedAudience",), "is required with actorClaim, allowedActors, "
                                                "actorMatcher or allowMayAct"))
    if delegating and not clients:
        problems.append((("allowedDelegateClients",), "is required with expectedAudience, "
                                                      "actorClaim, allowedActors or allowMayAct "
                                                      "(\"*\" for every delegate client)"))
    if "*" in clients and len(clients) > 1:
        problems.append((("allowedDelegateClients",), "must not combine \"*\" with client ids"))
    if "*" in clients and trusted.allow_may_act:
        problems.append((("allowMayAct",), "must not be true when allowedDelegateClients is "
                                           "\"*\""))
    for index, client in enumerate(clients):
        if client != "*" and client not in delegates:
            problems.append((("allowedDelegateClients", index), "names no delegateClients entry "
                                                                "(only delegate clients may "
                                                                "exchange tokens)"))
    if trusted.actor_claim in RESERVED_ACTOR_CLAIMS:
        problems.append((("actorClaim",), "must name a claim that identifies a client (azp, "
                                          "appid, cid, client_id), not one of the token's own"))
    return problems


def resolve_delegate_clients(resolver: Resolver, owner: Resource,
                             clients: Sequence[DelegateClient]) -> tuple[DelegateClientPlan, ...]:
    seen: dict[str, int] = {}
    plans: list[DelegateClientPlan] = []
    for index, client in enumerate(clients):
        path = (*SPEC, "delegateClients", index)
        if client.client_id in seen:
            first = seen[client.client_id]
            resolver.report.error(owner, (*path, "clientId"), "duplicate-name",
                                  f"is already declared at delegateClients[{first}]")
            continue
        seen[client.client_id] = index
        secret: SecretValue | None = resolver.secret(owner, (*path, "clientSecretRef"),
                                                     client.client_secret_ref)
        if secret is None:
            continue
        if len(secret.value) < MIN_DELEGATE_SECRET_BYTES:
            resolver.report.error(owner, (*path, "clientSecretRef"), "client-secret",
                                  f"Secret {secret.source}: a delegate client's secret must be "
                                  f"at least {MIN_DELEGATE_SECRET_BYTES} bytes long")
            continue
        plans.append(DelegateClientPlan(client.client_id, secret, client.scopes,
                                        client.audiences))
    return tuple(plans)


def check_trust_targets(resolver: Resolver, owner: Resource, config: am.AuthServerConfig,
                        resources: tuple[str, ...], scopes: tuple[str, ...]) -> None:
    """What the trust settings name against the resources (audiences) and scopes the server
    issues tokens for (those of the gateway's ``oidcConfigRef``)."""
    report = resolver.report
    named = ", ".join(resources) or "none"
    for index, trusted in enumerate(config.trusted_issuers):
        if trusted.expected_audience is not None and trusted.expected_audience not in resources:
            report.warn(owner, (*SPEC, "trustedIssuers", index, "expectedAudience"), "resource",
                        f"is not a resource this server issues tokens for ({named}): a "
                        "delegated token's audience must be one its subject token names, so "
                        "no exchange of this issuer's tokens can succeed")
        grant = trusted.jwt_bearer_grant
        if grant is None:
            continue
        here = (*SPEC, "trustedIssuers", index, "jwtBearerGrant")
        for b_index, binding in enumerate(grant.subject_bindings):
            for r_index, resource in enumerate(binding.allowed_resources):
                if resource not in resources:
                    report.error(owner, (*here, "subjectBindings", b_index, "allowedResources",
                                         r_index), "resource",
                                 f"is not a resource this server issues tokens for ({named})")
        for a_index, audience in enumerate(grant.accepted_audiences):
            if audience in resources:
                report.error(owner, (*here, "acceptedAudiences", a_index), "resource",
                             "names a resource: an assertion's audience is this authorization "
                             "server (its issuer or token endpoint), never a resource")
    for index, client in enumerate(config.delegate_clients):
        at = (*SPEC, "delegateClients", index)
        for a_index, audience in enumerate(client.audiences):
            if audience not in resources:
                report.error(owner, (*at, "audiences", a_index), "resource",
                             f"is not a resource this server issues tokens for ({named})")
        for s_index, scope in enumerate(client.scopes):
            if scopes and scope not in scopes:
                report.error(owner, (*at, "scopes", s_index), "scope",
                             f"is not a scope this server supports ({', '.join(scopes)})")
