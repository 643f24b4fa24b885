"""What a caller's request must pass before the gateway works on it: policies, then rate limits.

One job: for one request of one identity, say whether it goes on or the refusal it gets, and
which list items the identity may see; and the same for what a backend has of its own (an
MCPRemoteProxy's ``authzConfig``, an MCPServer's webhooks: what ToolHive's proxy in front of it
enforces). The rules it keeps:

* Authorization policies (:mod:`~vmcp_trio.auth.policy.cedar`) first: the checks a request
  needs (:mod:`~vmcp_trio.auth.policy.mcp_checks`) must all allow it; a denial is JSON-RPC
  error 403 (``call denied by authorization policy``), answered with HTTP 403, before the
  request reaches a backend or touches a rate limit. Lists keep only what the identity may use
  (each item checked as its use would be).
* Then rate limits (:mod:`~vmcp_trio.auth.policy.rate_limits`), for ``tools/call`` only (as
  ToolHive): -32029 with ``retryAfterSeconds``, HTTP 429 with ``Retry-After``. A denied call
  takes no token. Redis unreachable lets calls through, counted in
  ``vmcp_rate_limit_unavailable_total`` with a warning at most once a minute.
* A request routed to a backend then meets the backend's webhooks
  (:mod:`~vmcp_trio.auth.policy.webhooks`: mutating, then validating), which see it under the
  backend's own names and may change its params; then the backend's own policies and rate
  limits judge the request as the webhooks left it (ToolHive's proxy runs its webhooks before
  its authorization too). The list requests the gateway makes to build its catalog are its
  own, not a caller's, and meet no webhook.
* A backend's own policies decide the requests routed to it, under its own names (before the
  gateway's prefix or renames, as the pod sees them), with ``MCP::"<backend>"`` as their
  server, after the gateway's: a denial is the same JSON-RPC error 403, and the items of that
  backend they do not let the caller use are left out of lists. They see the claims the
  gateway's policies see (the gateway's caller is whom vmcp calls the backend for).
* Whose claims the policies see: the token's, or with ``primaryUpstreamProvider`` the claims of
  the identity's upstream login at that provider (the embedded authorization server's stored
  access token when it is a JWT, as ToolHive; else the stored ID token; else the token's own
  claims, which mirror the upstream subject). The upstream tokens were received from the
  provider's token endpoint, so their claims are read without a second signature check; they
  are kept per login session for :data:`UPSTREAM_CLAIMS_SECONDS` (bounded) so a call does not
  read the storage. A login without the provider's token is denied; storage unreachable is
  a 503 to retry (never an allow).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..auth.caller import Caller
from ..auth.identity import ANONYMOUS, Identity
from ..auth.jwt import TokenError, parse_jws
from ..auth.outgoing.strategies import UpstreamTokens
from ..auth.policy.cedar import CedarCheck, CedarPolicies
from ..auth.policy.mcp_checks import DENIED, checks_for, denial_message, item_check
from ..auth.policy.rate_limits import Admission, refusal, retry_after_seconds
from ..auth.policy.webhooks import WebhookRefusal, Webhooks
from ..protocol.jsonrpc import TOO_BUSY, ErrorObject, ErrorResponse, Request
from ..runtime.metrics import Metrics
from ..runtime.shared_storage import StorageUnavailable
from .aggregation import Catalog

__all__ = ["BackendPolicies", "Gate", "RateLimiter", "Refusal"]

log = logging.getLogger("vmcp.admission")

UPSTREAM_CLAIMS_SECONDS = 30.0
MAX_UPSTREAM_CLAIMS = 4096
WARN_EVERY = 60.0
ANONYMOUS_CLAIMS = {"sub": "anonymous", "iss": "toolhive-local", "aud": "toolhive",
                    "email": "anonymous@localhost", "name": "Anonymous User"}
"""What policies see of an anonymous caller: ToolHive's anonymous claims (without times)."""


class RateLimiter(Protocol):
    async def admit(self, user: str | None, tool: str | None) -> Admission: ...


@dataclass(frozen=True)
class Refusal:
    """A request that may not go on: its JSON-RPC error, HTTP status and headers."""

    reply: ErrorResponse
    status: int
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BackendPolicies:
    """A backend's own policies, the upstream login whose claims they see (None: the
    token's), its own rate limits (on ``tools/call``, by the backend's tool names), and its
    webhooks."""

    policies: CedarPolicies | None
    primary_upstream: str | None = None
    limiter: RateLimiter | None = None
    webhooks: Webhooks | None = None


def _jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT-shaped token, unverified (see the module docstring); None when it
    is not one."""
    try:
        return parse_jws(token).claims
    except TokenError:
        return None


class Gate:
    """The policies and limits of one gateway (None: that part is off)."""

    def __init__(self, policies: CedarPolicies | None, limiter: RateLimiter | None,
                 metrics: Metrics, *, primary_upstream: str | None = None,
                 tokens: UpstreamTokens | None = None,
                 backends: Mapping[str, BackendPolicies] | None = None) -> None:
        self.policies = policies
        self.limiter = limiter
        self.metrics = metrics
        self.primary_upstream = primary_upstream
        self.tokens = tokens
        self.backends: Mapping[str, BackendPolicies] = backends or {}
        """The backends that have policies of their own, by name."""
        self._allowed = metrics.authz_decisions.labels("allowed")
        """The counter of allowed decisions (labels() costs ~2 µs: once, not per call)."""
        self._upstream_claims: OrderedDict[tuple[str, str],
                                           tuple[float, dict[str, Any] | None]] = OrderedDict()
        self._warned_at = -WARN_EVERY

    async def claims(self, identity: Identity,
                     primary_upstream: str | None = None) -> Mapping[str, Any] | None:
        """The claims policies see for ``identity`` (None: none can be had: deny), those of
        the login at ``primary_upstream`` (default: the gateway's policies')."""
        if identity is ANONYMOUS:
            return ANONYMOUS_CLAIMS
        provider = primary_upstream or self.primary_upstream
        session = identity.claims.get("tsid")
        if provider is None or self.tokens is None or not isinstance(session, str):
            return identity.claims
        now = time.monotonic()
        key = (session, provider)
        kept = self._upstream_claims.get(key)
        if kept is None or kept[0] <= now:
            kept = (now + UPSTREAM_CLAIMS_SECONDS, await self._read_upstream(session, provider))
            self._upstream_claims[key] = kept
            while len(self._upstream_claims) > MAX_UPSTREAM_CLAIMS:
                self._upstream_claims.popitem(last=False)
        self._upstream_claims.move_to_end(key)
        upstream = kept[1]
        if upstream is None:
            return None
        return upstream or identity.claims

    async def _read_upstream(self, session: str, provider: str) -> dict[str, Any] | None:
        """The upstream login's claims; {} for "the token's own"; None: no such login."""
        assert self.tokens is not None
        access = await self.tokens.upstream_access_token(session, provider)
        if not access:
            return None
        claims = _jwt_claims(access)
        if claims is None:
            id_token = await self.tokens.upstream_id_token(session, provider)
            claims = _jwt_claims(id_token) if id_token else None
        return claims or {}

    def _denied(self, request: Request, policies: CedarPolicies,
                claims: Mapping[str, Any] | None, checks: Sequence[CedarCheck]) -> Refusal | None:
        """The refusal when a check is not allowed (counted either way)."""
        for check in checks:
            if claims is None or not policies.allowed(claims, check):
                self.metrics.authz_decisions.labels("denied").inc()
                return Refusal(ErrorResponse(request.id, ErrorObject(
                    DENIED, denial_message(check))), DENIED)
        self._allowed.inc()
        return None

    async def refuse(self, identity: Identity, request: Request,
                     annotations: Callable[[str], Mapping[str, Any]]) -> Refusal | None:
        """None when ``request`` may go on; else why not."""
        params = request.params or {}
        if self.policies is not None:
            checks = checks_for(request.method, params, annotations)
            if checks:
                try:
                    claims = await self.claims(identity)
                except StorageUnavailable as exc:
                    return _undecided(request, exc)
                denied = self._denied(request, self.policies, claims, checks)
                if denied is not None:
                    return denied
        if self.limiter is not None and request.method == "tools/call":
            admission = await _admitted(self.limiter, identity, params)
            if not admission.allowed:
                self.metrics.rate_limited.labels(admission.limit or "").inc()
                seconds = retry_after_seconds(admission)
                return Refusal(refusal(request.id, admission), 429,
                               (("retry-after", str(seconds)),))
        return None

    def rate_limit_unavailable(self) -> None:
        """Told by a shared rate limiter when Redis could not be asked (the call went on)."""
        self.metrics.rate_limit_unavailable.inc()
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log.warning("rate limits are not enforced now: Redis is unreachable (calls go on "
                        "unlimited; counted in vmcp_rate_limit_unavailable_total)")

    async def visible(self, identity: Identity, list_method: str,
                      items: Sequence[dict[str, Any]], catalog: Catalog) -> list[dict[str, Any]]:
        """The items of a list the identity may use: by the gateway's policies, then by the
        own policies of the backend each comes from (``catalog`` says which, and its name
        there)."""
        kept = list(items)
        if self.policies is not None:
            claims = await self.claims(identity)
            policies = self.policies
            kept = [] if claims is None else [
                item for item in kept if policies.allowed(claims, item_check(list_method, item))]
        if not self.backends:
            return kept
        seen: dict[str, Mapping[str, Any] | None] = {}
        out = []
        for item in kept:
            backend, own_item = _backends_own(catalog, list_method, item)
            own = self.backends.get(backend)
            if own is None or own.policies is None:
                out.append(item)
                continue
            if backend not in seen:
                seen[backend] = await self.claims(identity, own.primary_upstream)
            claims = seen[backend]
            if claims is not None and own.policies.allowed(claims,
                                                           item_check(list_method, own_item)):
                out.append(item)
        return out

    async def admit_at(self, caller: Caller, backend: str, request: Request,
                       params: dict[str, Any],
                       hints: Mapping[str, Any]) -> dict[str, Any] | ErrorResponse:
        """What ``backend`` has of its own on ``request`` as routed to it (``params``: under
        the backend's own names; ``hints``: the tool's annotations): its webhooks, then its
        policies, then its rate limits. The params to send (as the webhooks left them), or
        the refusal."""
        own = self.backends.get(backend)
        if own is None:
            return params
        identity = caller.identity
        if own.webhooks is not None:
            try:
                params = await own.webhooks.review(identity, caller.address, request.id,
                                                   request.method, params)
            except WebhookRefusal as refused:
                return ErrorResponse(request.id, refused.error)
        checks = checks_for(request.method, params, lambda _: hints) if own.policies else []
        if own.policies is not None and checks:
            try:
                claims = await self.claims(identity, own.primary_upstream)
            except StorageUnavailable as exc:
                return _undecided(request, exc).reply
            denied = self._denied(request, own.policies, claims, checks)
            if denied is not None:
                return denied.reply
        if own.limiter is not None and request.method == "tools/call":
            admission = await _admitted(own.limiter, identity, params)
            if not admission.allowed:
                self.metrics.rate_limited.labels(f"{backend}: {admission.limit or ''}").inc()
                return refusal(request.id, admission)
        return params

    async def aclose(self) -> None:
        """Close the backends' webhook connections (a reload replaced this gate)."""
        for own in self.backends.values():
            if own.webhooks is not None:
                await own.webhooks.aclose()


async def _admitted(limiter: RateLimiter, identity: Identity,
                    params: Mapping[str, Any]) -> Admission:
    """One ``tools/call`` through ``limiter``: the caller's own buckets unless anonymous, the
    tool's by the name in ``params``."""
    name = params.get("name")
    return await limiter.admit(
        None if identity is ANONYMOUS else f"{identity.issuer} {identity.subject}",
        name if isinstance(name, str) else None)


def _backends_own(catalog: Catalog, list_method: str,
                  item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The backend a listed item comes from ("" for the gateway's own, a composite tool) and
    the item under the backend's own name."""
    if list_method in ("tools/list", "prompts/list"):
        routes = catalog.tool_routes if list_method == "tools/list" else catalog.prompt_routes
        route = routes.get(str(item.get("name")))
        return ("", item) if route is None else (route.backend, {**item, "name": route.name})
    if list_method == "resources/templates/list":
        return catalog.template_owners.get(str(item.get("uriTemplate")), ""), item
    if list_method == "skills/list":
        owner = catalog.skills.owners.get(str(item.get("uri")))
        return ("", item) if owner is None else (owner[0], {**item, "uri": owner[1]})
    return catalog.resource_routes.get(str(item.get("uri")), ""), item


def _undecided(request: Request, exc: StorageUnavailable) -> Refusal:
    """503 to try again: the login's storage is unreachable (never an allow)."""
    log.warning("authorization cannot be decided now: %s", exc)
    return Refusal(ErrorResponse(request.id, ErrorObject(
        TOO_BUSY, "authorization cannot be decided now (the login's storage is unreachable); "
                  "try again shortly")), 503, (("retry-after", "5"),))

