"""Cedar authorization policies, decided as ToolHive's ``cedarv1`` authorizer decides them.

One job: say whether a caller (the claims of their token) may do one thing (an action on a
resource), with the Cedar engine itself (``cedarpy``); no policy language of our own. The
entities and values are ToolHive's (``pkg/authz/authorizers/cedar/core.go`` and ``entity.go``),
so that a ToolHive policy means the same here:

* The principal is ``Client::"<sub>"``. Every claim is an attribute ``claim_<name>`` of it and a
  key of the context. Its groups are its *parents*, of type ``groupEntityType`` (default
  ``THVGroup``): the claim ``groupClaimName`` (a top-level key, else a dotted path such as
  ``realm_access.roles``), else the first of ``groups``, ``roles``, ``cognito:groups`` present;
  then the roles of ``roleClaimName``, as parents of the same type. No group entity is created:
  ``principal in THVGroup::"eng"`` needs none; hierarchies come from ``entitiesJson``.
* The resource is ``Tool::"<name>"``, ``Prompt::"<name>"`` or ``Resource::"<uri>"`` (the URI with
  each of ``:/\\?&=#.`` and space made ``_``; the URI itself is the ``uri`` attribute), under
  the parent ``MCP::"<server>"`` (the VirtualMCPServer's name). Its attributes: ``name``,
  ``operation``, ``feature``, a tool's annotation hints (``readOnlyHint``...), and each
  scalar argument as ``arg_<name>`` (also in the context); an object, list or null argument
  is only ``arg_<name>_present``: its value is never exposed.
* Values convert as ToolHive's do: strings, booleans; numbers become ``decimal`` (JWT numbers
  are floats in Go: a policy compares them with ``decimal("...")``); lists become sets,
  objects records (10 levels deep at most), null is left out. A record key that is a Cedar
  JSON escape (``__entity``, ``__extn``, ``__expr``) is left out too, so that no claim or
  argument can forge an entity reference.
* Default deny; a ``forbid`` wins; and any error while evaluating a policy (an attribute read
  without ``has``, say) is a deny, even when another policy permits (as ToolHive).
* Static entities (``entitiesJson``) are parsed once; the request's own entities replace any
  static one with the same uid.

Decisions are cached: the same claims, action, resource and arguments get the same answer for
the life of the policies (Cedar has no clock here; a reload builds a new
:class:`CedarPolicies`). The cache is bounded (least recently used out) and skips requests whose
arguments are large. When no policy mentions ``arg_``, arguments are not given to Cedar at all
(no policy could read them), so calls that differ only in their arguments share one decision.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cedarpy
import orjson

__all__ = ["DEFAULT_GROUP_ENTITY_TYPE", "CedarCheck", "CedarPolicies", "resource_id_for_uri"]

log = logging.getLogger("vmcp.authz")

DEFAULT_GROUP_ENTITY_TYPE = "THVGroup"
DEFAULT_GROUP_CLAIMS = ("groups", "roles", "cognito:groups")
MAX_DEPTH = 10
CACHE_SIZE = 4096
CACHEABLE_ARGUMENTS = 2048
"""Bytes of arguments past which a decision is not cached (it would crowd out the rest)."""
_ESCAPES = frozenset({"__entity", "__extn", "__expr"})
_URI_SEPARATORS = str.maketrans(dict.fromkeys(":/\\?&=#. ", "_"))
_DROP = object()


def resource_id_for_uri(uri: str) -> str:
    """The id of a ``Resource`` entity: the URI with ToolHive's separators made ``_``."""
    return uri.translate(_URI_SEPARATORS)


def _decimal(number: float) -> Any:
    """A Cedar ``decimal`` (four digits after the point), or _DROP out of its range."""
    if not math.isfinite(number) or abs(number) >= 922_337_203_685_477:
        return _DROP
    text = f"{number:.4f}".rstrip("0")
    return {"__extn": {"fn": "decimal", "arg": text + "0" if text.endswith(".") else text}}


def cedar_value(value: Any, depth: int = 0) -> Any:
    """A JSON value as Cedar's JSON entity format has it, or _DROP when it has none here."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return _decimal(float(value))
    if depth >= MAX_DEPTH:
        return _DROP
    if isinstance(value, list):
        items = (cedar_value(item, depth + 1) for item in value)
        return [item for item in items if item is not _DROP]
    if isinstance(value, dict):
        record = {key: cedar_value(item, depth + 1) for key, item in value.items()
                  if isinstance(key, str) and key not in _ESCAPES}
        return {key: item for key, item in record.items() if item is not _DROP}
    return _DROP


def _prefixed(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    converted = ((f"{prefix}{key}", cedar_value(value)) for key, value in values.items())
    return {key: value for key, value in converted if value is not _DROP}


def argument_attributes(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """``arg_<name>`` for each scalar argument; ``arg_<name>_present`` for the others."""
    attributes: dict[str, Any] = {}
    for name, value in (arguments or {}).items():
        if isinstance(value, bool | str | int | float):
            converted = cedar_value(value)
            if converted is not _DROP:
                attributes[f"arg_{name}"] = converted
        else:
            attributes[f"arg_{name}_present"] = True
    return attributes


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """A claim by name: the top-level key, else a dotted path into nested objects."""
    if name in claims:
        return claims[name]
    node: Any = claims
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _names(value: Any) -> list[str] | None:
    """The strings of a list claim; None when the claim is absent or not a list."""
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return None


@dataclass(frozen=True)
class CedarCheck:
    """One thing a request asks to do: an action on a resource, with the resource's
    attributes (annotation hints) and the request's arguments."""

    action: str
    resource_type: str
    resource_id: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    arguments: Mapping[str, Any] | None = None
    key: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    """What the decision cache knows the check by, but for its arguments (computed when not
    given: a check made from another with new arguments passes the other's)."""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", (
                self.action, self.resource_type, self.resource_id,
                tuple(sorted(self.attributes.items())) if self.attributes else ()))


@dataclass
class CedarPolicies:
    """Policies, static entities and the claim settings of one gateway; decides checks."""

    policies: Sequence[str]
    entities_json: str = "[]"
    server_name: str = ""
    group_claim_name: str | None = None
    role_claim_name: str | None = None
    group_entity_type: str = DEFAULT_GROUP_ENTITY_TYPE
    cache_size: int = CACHE_SIZE
    decisions: int = 0
    """Decisions made by the engine (cache misses), for the benchmark and tests."""

    def __post_init__(self) -> None:
        self._policy_set = cedarpy.PolicySet.from_str("\n".join(self.policies))
        static = orjson.loads(self.entities_json or "[]")
        self._static: dict[tuple[str, str], Any] = {
            (str(entity["uid"]["type"]), str(entity["uid"]["id"])): entity
            for entity in static}
        self._cache: OrderedDict[tuple[Any, ...], bool] = OrderedDict()
        self._fingerprints: OrderedDict[int, tuple[Mapping[str, Any], bytes]] = OrderedDict()
        """Claims fingerprints by the claims object (kept alive here, so its id stays its
        own): a verified token's claims come back as the same object on every call."""
        self._reads_arguments = any("arg_" in policy for policy in self.policies)
        """Whether any policy can read an argument (``arg_*``); when none can, arguments are
        left out of the request and of the cache key, so calls with new arguments hit it."""

    # --- the principal -------------------------------------------------------------------------

    def groups(self, claims: Mapping[str, Any]) -> list[str]:
        """The principal's groups and roles, in order, without repeats."""
        found = _names(_claim(claims, self.group_claim_name)) if self.group_claim_name else None
        if found is None:
            found = next((names for names in (_names(claims.get(name))
                                              for name in DEFAULT_GROUP_CLAIMS)
                          if names is not None), [])
        if self.role_claim_name:
            found = [*found, *(_names(_claim(claims, self.role_claim_name)) or [])]
        return list(dict.fromkeys(found))

    # --- deciding ------------------------------------------------------------------------------

    def allowed(self, claims: Mapping[str, Any], check: CedarCheck) -> bool:
        """Whether the caller with these claims may do ``check`` (cached)."""
        arguments = orjson.dumps(check.arguments, option=orjson.OPT_SORT_KEYS) \
            if check.arguments and self._reads_arguments else b""
        key: tuple[Any, ...] | None = None
        if len(arguments) <= CACHEABLE_ARGUMENTS:
            key = (self._fingerprint(claims), check.key, arguments)
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        if not self._reads_arguments and check.arguments:
            check = replace(check, arguments=None)
        decision = self._decide(claims, check)
        if key is not None:
            self._cache[key] = decision
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return decision

    def _fingerprint(self, claims: Mapping[str, Any]) -> bytes:
        known = self._fingerprints.get(id(claims))
        if known is not None and known[0] is claims:
            return known[1]
        fingerprint = hashlib.blake2b(orjson.dumps(claims, option=orjson.OPT_SORT_KEYS),
                                      digest_size=16).digest()
        self._fingerprints[id(claims)] = (claims, fingerprint)
        if len(self._fingerprints) > self.cache_size:
            self._fingerprints.popitem(last=False)
        return fingerprint

    def _decide(self, claims: Mapping[str, Any], check: CedarCheck) -> bool:
        self.decisions += 1
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            log.info("authorization denied: the token has no subject (sub)")
            return False
        claim_attributes = _prefixed("claim_", claims)
        arguments = argument_attributes(check.arguments)
        principal = {"type": "Client", "id": subject}
        action = {"type": "Action", "id": check.action}
        resource = {"type": check.resource_type, "id": check.resource_id}
        request_entities: list[dict[str, Any]] = [
            {"uid": principal, "attrs": claim_attributes,
             "parents": [{"type": self.group_entity_type, "id": group}
                         for group in self.groups(claims)]},
            {"uid": action, "attrs": {"operation": check.action}, "parents": []},
            {"uid": resource, "attrs": {**arguments, **check.attributes},
             "parents": [{"type": "MCP", "id": self.server_name}] if self.server_name else []},
        ]
        replaced = {(str(e["uid"]["type"]), str(e["uid"]["id"])) for e in request_entities}
        entities = [entity for uid, entity in self._static.items() if uid not in replaced]
        entities.extend(request_entities)
        result = cedarpy.is_authorized(
            {"principal": principal, "action": action, "resource": resource,
             "context": {**claim_attributes, **arguments}},
            self._policy_set, entities)
        errors = result.diagnostics.errors
        if errors:
            log.info("authorization denied: %d policy evaluation error(s), first: %s",
                     len(errors), errors[0][:300])
            return False
        return bool(result.allowed)
