"""Rules of a VirtualMCPServer's policies: Cedar authorization, rate limits and audit.

One job: check ``incomingAuth.authzConfig`` / ``authzConfigRef`` (and a backend's own, an
MCPRemoteProxy's ``authzConfig`` / ``authzConfigRef``), ``config.rateLimiting`` and ``audit``
(``spec.config.audit`` or ``spec.audit``) and resolve them into their plans, each problem at its
field. The rules kept, ToolHive's where it has them:

* Authorization: ``authzConfig`` and ``authzConfigRef`` exclude each other; ``authzConfig.type``
  names the block given (``inline`` <-> ``inline``, ``configMap`` <-> ``configMap``). A
  ConfigMap's key holds ToolHive's authz.json (``{"version", "type": "cedarv1", "cedar":
  {"policies", "entities_json", "group_claim_name", ...}}``, JSON or YAML), an MCPAuthzConfig
  that block as ``spec.config`` with ``spec.type: cedarv1`` (ToolHive's vMCP takes no other
  authorizer); the claim settings written on ``authzConfig`` win over the ConfigMap's. Every
  policy must parse (Cedar's own parser: the error names the policy's index and what Cedar
  found), ``entities_json`` must be Cedar entities, and at least one policy is required.
* Whose claims: with the embedded authorization server, the upstream login of
  ``authServerConfig.primaryUpstreamProvider``, else of the deprecated
  ``inline.primaryUpstreamProvider``, else of the first upstream provider (ToolHive's operator
  resolves it so); it must be a declared provider. Without it, the token's own claims. A
  backend's policies see the same claims (the gateway's caller is who calls it), with its own
  ``inline.primaryUpstreamProvider`` naming one of the gateway's providers, if it wants another.
* Rate limits: ``shared`` or its newer name ``global``, not both; ``perUser`` limits need
  authenticated callers (``incomingAuth.type: oidc``, as ToolHive's CRD says); one entry per
  tool. Without ``sessionStorage: redis`` the buckets are this process's own (ToolHive refuses
  that; vmcp allows it for one replica, and says so in a warning).
* Audit: event type names must be known (:data:`~.plan.AUDIT_EVENT_TYPES`).
"""

from __future__ import annotations

import json
from typing import Any

from . import authserver_models as am
from . import models as m
from .gateway_config import Placed
from .loading import load_text
from .plan import (
    AUDIT_EVENT_TYPES,
    AuditSettings,
    AuthzPlan,
    Bucket,
    RateLimitRules,
    ToolBuckets,
)
from .problems import PathPart
from .report import Resource
from .resolver import Resolver

__all__ = ["resolve_audit", "resolve_authz", "resolve_rate_limits"]

Path = tuple[PathPart, ...]
INCOMING = ("spec", "incomingAuth")
"""Where a gateway's authorization is written; a backend's is directly under ``spec``."""
_CEDAR_OPTIONS = ("group_claim_name", "role_claim_name", "group_entity_type")


def _policies_problem(policies: Any) -> tuple[Path, str] | None:
    """Why these policies cannot be used (the path within the list), or None."""
    import cedarpy  # here: only a configuration with policies loads the Cedar engine

    if not isinstance(policies, list | tuple) or not policies:
        return (), "needs at least one Cedar policy"
    for index, policy in enumerate(policies):
        if not isinstance(policy, str):
            return (index,), "must be a string (one Cedar policy)"
        try:
            cedarpy.policies_to_json_str(policy)
        except ValueError as exc:
            return (index,), f"is not a Cedar policy: {str(exc)[:300]}"
    return None


def _entities_problem(entities_json: Any) -> str | None:
    import cedarpy

    if not isinstance(entities_json, str):
        return "must be a string holding a JSON list of Cedar entities"
    try:
        entities = json.loads(entities_json or "[]")
        if not isinstance(entities, list) or not all(
                isinstance(e, dict) and isinstance(e.get("uid"), dict) for e in entities):
            return "must be a JSON list of Cedar entities ({uid: {type, id}, attrs, parents})"
        cedarpy.Entities.from_json_str(entities_json or "[]")
    except ValueError as exc:
        return f"is not Cedar entities: {str(exc)[:300]}"
    return None


def _cedar_block(resolver: Resolver, block: Any, where: Resource,
                 path: Path) -> dict[str, Any] | None:
    """ToolHive's ``cedar`` block (snake_case keys), checked; None when reported."""
    report = resolver.report
    if not isinstance(block, dict):
        report.error(where, path, "authz", "must be a mapping (ToolHive's cedar block: "
                     "policies, entities_json, ...)")
        return None
    known = {"policies", "entities_json", "primary_upstream_provider", *_CEDAR_OPTIONS}
    unknown = sorted(str(k) for k in block if k not in known)
    if unknown:
        report.error(where, (*path, unknown[0]), "unknown-field",
                     f"is not a field of the cedar block (known: {', '.join(sorted(known))})")
        return None
    problem = _policies_problem(block.get("policies"))
    if problem is not None:
        report.error(where, (*path, "policies", *problem[0]), "authz", problem[1])
        return None
    entities = block.get("entities_json", "[]")
    why = _entities_problem(entities)
    if why is not None:
        report.error(where, (*path, "entities_json"), "authz", why)
        return None
    return block


def _from_config_map(resolver: Resolver, owner: Resource, ref: m.ConfigMapKey,
                     at: Path) -> dict[str, Any] | None:
    report = resolver.report
    target = resolver.ref(owner, (*at, "configMap", "name"), "ConfigMap", ref.name)
    if target is None:
        return None
    config_map: m.ConfigMapResource = target.spec
    text = config_map.data.get(ref.key)
    if text is None:
        report.error(owner, (*at, "configMap", "key"), "reference",
                     f"ConfigMap {target.namespace}/{ref.name} has no key {ref.key!r}")
        return None
    docs, problems = load_text(text, f"ConfigMap {target.namespace}/{ref.name}[{ref.key}]")
    document = docs[0].body if len(docs) == 1 and not problems else None
    if not isinstance(document, dict) or document.get("type") != "cedarv1":
        report.error(target, ("data", ref.key), "authz",
                     "must be ToolHive's authz.json: {version, type: cedarv1, cedar: {...}}")
        return None
    return _cedar_block(resolver, document.get("cedar"), target, ("data", ref.key, "cedar"))


def _from_authz_config(resolver: Resolver, owner: Resource, config: m.AuthzConfig,
                       at: Path) -> dict[str, Any] | None:
    report = resolver.report
    if config.type == "inline":
        if config.inline is None or config.config_map is not None:
            report.error(owner, (*at, "inline"), "required",
                         "type inline needs the inline block (and no configMap)")
            return None
        block = {"policies": list(config.inline.policies),
                 "entities_json": config.inline.entities_json}
        found = _cedar_block(resolver, block, owner, (*at, "inline"))
        if found is not None and config.inline.primary_upstream_provider:
            found["primary_upstream_provider"] = config.inline.primary_upstream_provider
    else:
        if config.config_map is None or config.inline is not None:
            report.error(owner, (*at, "configMap"), "required",
                         "type configMap (the default) needs the configMap block (and no "
                         "inline)")
            return None
        found = _from_config_map(resolver, owner, config.config_map, at)
        if found is not None:
            found.pop("primary_upstream_provider", None)  # never from a ConfigMap (ToolHive)
    if found is None:
        return None
    for option in _CEDAR_OPTIONS:
        written = getattr(config, option)
        if written:
            found[option] = written
    return found


def _from_authz_ref(resolver: Resolver, owner: Resource, ref: m.NameRef,
                    at: Path) -> dict[str, Any] | None:
    target = resolver.ref(owner, (*at, "name"), "MCPAuthzConfig", ref.name)
    if target is None:
        return None
    spec: m.AuthzConfigSpec = target.spec
    if spec.type != "cedarv1":
        resolver.report.error(target, ("spec", "type"), "not-implemented",
                              f"authorizer {spec.type[:64]!r} is not implemented (vmcp, like "
                              "ToolHive's vMCP, takes cedarv1)")
        return None
    block = _cedar_block(resolver, dict(spec.config), target, ("spec", "config"))
    if block is not None:
        block.pop("primary_upstream_provider", None)
    return block


def _primary_upstream(resolver: Resolver, gateway: Resource, owner: Resource,
                      block: dict[str, Any], auth_server: am.AuthServerConfig | None,
                      at: Path) -> str | None:
    """Whose login's claims ``owner``'s policies see (see the module)."""
    if auth_server is None:
        return None
    names = [provider.name for provider in auth_server.upstream_providers]
    own, server = block.get("primary_upstream_provider"), auth_server.primary_upstream_provider
    chosen = ((server or own) if owner is gateway else (own or server)) or names[0]
    if chosen in names:
        return str(chosen)
    where: Resource = gateway
    path: Path = ("spec", "authServerConfig", "primaryUpstreamProvider")
    if chosen == own:
        where, path = owner, (*at, "authzConfig", "inline", "primaryUpstreamProvider")
    resolver.report.error(where, path, "reference",
                          f"names upstream provider {chosen!r}, which authServerConfig of "
                          f"VirtualMCPServer {gateway.namespace}/{gateway.name} does not declare "
                          f"(declared: {', '.join(names)})", blame=where is gateway)
    return None


def resolve_authz(resolver: Resolver, gateway: Resource, config: m.AuthzConfig | None,
                  ref: m.NameRef | None, auth_server: am.AuthServerConfig | None, *,
                  owner: Resource | None = None, at: Path = INCOMING) -> AuthzPlan | None:
    """The policies of ``authzConfig`` / ``authzConfigRef`` under ``at`` of ``owner``: the
    gateway (the default), or one of its backends, whose policies apply to the calls to it.
    ``auth_server`` is the gateway's when its callers log in there. None when there are none
    (or when reported)."""
    owner = owner or gateway
    if config is not None and ref is not None:
        resolver.report.error(owner, (*at, "authzConfigRef"), "conflict",
                              "authzConfig and authzConfigRef exclude each other: give one")
        return None
    if config is not None:
        block = _from_authz_config(resolver, owner, config, (*at, "authzConfig"))
    elif ref is not None:
        block = _from_authz_ref(resolver, owner, ref, (*at, "authzConfigRef"))
    else:
        return None
    if block is None:
        return None
    entity_type = block.get("group_entity_type") or "THVGroup"
    if not isinstance(entity_type, str) or "::" in entity_type:
        resolver.report.error(owner, (*at, "authzConfig", "groupEntityType"), "authz",
                              "must be a Cedar entity type name (no ::)")
        return None
    return AuthzPlan(
        policies=tuple(block["policies"]),
        entities_json=block.get("entities_json") or "[]",
        group_claim_name=block.get("group_claim_name") or None,
        role_claim_name=block.get("role_claim_name") or None,
        group_entity_type=entity_type,
        primary_upstream_provider=_primary_upstream(resolver, gateway, owner, block,
                                                    auth_server, at))


def _bucket(resolver: Resolver, gateway: Resource, spec: m.BucketSpec | None,
            path: Path) -> Bucket | None:
    if spec is None:
        return None
    seconds = spec.refill_period.total_seconds()
    if seconds <= 0:
        resolver.report.error(gateway, (*path, "refillPeriod"), "range", "must be positive")
        return None
    return Bucket(spec.max_tokens, seconds)


def _shared(resolver: Resolver, gateway: Resource, shared: m.BucketSpec | None,
            global_: m.BucketSpec | None, path: Path) -> Bucket | None:
    if shared is not None and global_ is not None:
        resolver.report.error(gateway, (*path, "global"), "conflict",
                              "and shared are the same limit (global is its newer name): "
                              "give one")
        return None
    which = "global" if global_ is not None else "shared"
    return _bucket(resolver, gateway, global_ or shared, (*path, which))


def resolve_rate_limits(resolver: Resolver, gateway: Resource,
                        placed: Placed[m.RateLimiting | None], *, authenticated: bool,
                        shared_storage: bool) -> RateLimitRules | None:
    """The rate limits' buckets; None when there are none (or when reported)."""
    limits, path = placed.value, placed.path
    if limits is None:
        return None
    report = resolver.report
    errors_before = report.error_count
    user_limited = limits.per_user is not None or any(t.per_user for t in limits.tools)
    if user_limited and not authenticated:
        report.error(gateway, (*path, "perUser"), "rate-limit",
                     "per-user limits need authenticated callers (incomingAuth.type: oidc)")
    tools: dict[str, ToolBuckets] = {}
    for index, tool in enumerate(limits.tools):
        where = (*path, "tools", index)
        if tool.name in tools:
            report.error(gateway, (*where, "name"), "duplicate",
                         f"tool {tool.name!r} has limits twice")
            continue
        tools[tool.name] = ToolBuckets(
            _shared(resolver, gateway, tool.shared, tool.global_, where),
            _bucket(resolver, gateway, tool.per_user, (*where, "perUser")))
    rules = RateLimitRules(_shared(resolver, gateway, limits.shared, limits.global_, path),
                           _bucket(resolver, gateway, limits.per_user, (*path, "perUser")),
                           tools)
    if report.error_count != errors_before:
        return None
    if not shared_storage:
        report.warn(gateway, path, "rate-limit-local",
                    "without sessionStorage: redis the buckets are this process's own: each "
                    "replica would allow the full rate")
    return rules


def resolve_audit(resolver: Resolver, gateway: Resource,
                  placed: Placed[m.Audit | None]) -> AuditSettings | None:
    """The audit log's settings (disabled when absent); None when reported."""
    audit, path = placed.value, placed.path
    if audit is None:
        return AuditSettings()
    for field, names in (("eventTypes", audit.event_types),
                         ("excludeEventTypes", audit.exclude_event_types)):
        for index, name in enumerate(names):
            if name not in AUDIT_EVENT_TYPES:
                resolver.report.error(gateway, (*path, field, index), "audit",
                                      f"is not an event type (known: "
                                      f"{', '.join(sorted(AUDIT_EVENT_TYPES))})")
                return None
    return AuditSettings(
        enabled=audit.enabled, component=audit.component,
        event_types=frozenset(audit.event_types),
        exclude_event_types=frozenset(audit.exclude_event_types),
        include_request_data=audit.include_request_data,
        include_response_data=audit.include_response_data, log_file=audit.log_file,
        max_data_size=audit.max_data_size,
        detect_application_errors=audit.detect_application_errors,
        max_delegation_depth=audit.max_delegation_depth)
