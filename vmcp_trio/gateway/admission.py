"""What a caller's request must pass before the gateway works on it: policies, then rate limits.

One job: for one request of one identity, say whether it goes on or the refusal it gets, and
which list items the identity may see. The rules it keeps:

* Authorization policies (:mod:`~vmcp_trio.auth.policy.cedar`) first: the checks a request
  needs (:mod:`~vmcp_trio.auth.policy.mcp_checks`) must all allow it; a denial is JSON-RPC
  error 403 (``call denied by authorization policy``), answered with HTTP 403, before the
  request reaches a backend or touches a rate limit. Lists keep only what the identity may use
  (each item checked as its use would be).
* Then rate limits (:mod:`~vmcp_trio.auth.policy.rate_limits`), for ``tools/call`` only (as
  ToolHive): -32029 with ``retryAfterSeconds``, HTTP 429 with ``Retry-After``. A denied call
  takes no token. Redis unreachable lets calls through, counted in
  ``vmcp_rate_limit_unavailable_total`` with a warning at most once a minute.
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

from ..auth.identity import ANONYMOUS, Identity
from ..auth.jwt import TokenError, parse_jws
from ..auth.outgoing.strategies import UpstreamTokens
from ..auth.policy.cedar import CedarPolicies
from ..auth.policy.mcp_checks import DENIED, checks_for, denial_message, item_check
from ..auth.policy.rate_limits import Admission, refusal, retry_after_seconds
from ..protocol.jsonrpc import TOO_BUSY, ErrorObject, ErrorResponse, Request
from ..runtime.metrics import Metrics
from ..runtime.redis import StorageUnavailable

__all__ = ["Gate", "RateLimiter", "Refusal"]

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
                 tokens: UpstreamTokens | None = None) -> None:
        self.policies = policies
        self.limiter = limiter
        self.metrics = metrics
        self.primary_upstream = primary_upstream
        self.tokens = tokens
        self._allowed = metrics.authz_decisions.labels("allowed")
        """The counter of allowed decisions (labels() costs ~2 µs: once, not per call)."""
        self._upstream_claims: OrderedDict[str, tuple[float, dict[str, Any] | None]] = \
            OrderedDict()
        self._warned_at = -WARN_EVERY

    @property
    def active(self) -> bool:
        return self.policies is not None or self.limiter is not None

    async def claims(self, identity: Identity) -> Mapping[str, Any] | None:
        """The claims the policies see for ``identity`` (None: none can be had: deny)."""
        if identity is ANONYMOUS:
            return ANONYMOUS_CLAIMS
        session = identity.claims.get("tsid")
        if self.primary_upstream is None or self.tokens is None or not isinstance(session, str):
            return identity.claims
        now = time.monotonic()
        kept = self._upstream_claims.get(session)
        if kept is None or kept[0] <= now:
            kept = (now + UPSTREAM_CLAIMS_SECONDS, await self._read_upstream(session))
            self._upstream_claims[session] = kept
            while len(self._upstream_claims) > MAX_UPSTREAM_CLAIMS:
                self._upstream_claims.popitem(last=False)
        self._upstream_claims.move_to_end(session)
        upstream = kept[1]
        if upstream is None:
            return None
        return upstream or identity.claims

    async def _read_upstream(self, session: str) -> dict[str, Any] | None:
        """The upstream login's claims; {} for "the token's own"; None: no such login."""
        assert self.tokens is not None and self.primary_upstream is not None
        access = await self.tokens.upstream_access_token(session, self.primary_upstream)
        if not access:
            return None
        claims = _jwt_claims(access)
        if claims is None:
            id_token = await self.tokens.upstream_id_token(session, self.primary_upstream)
            claims = _jwt_claims(id_token) if id_token else None
        return claims or {}

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
                    log.warning("authorization cannot be decided now: %s", exc)
                    return Refusal(ErrorResponse(request.id, ErrorObject(
                        TOO_BUSY, "authorization cannot be decided now (the login's storage "
                                  "is unreachable); try again shortly")), 503,
                        (("retry-after", "5"),))
                for check in checks:
                    if claims is None or not self.policies.allowed(claims, check):
                        self.metrics.authz_decisions.labels("denied").inc()
                        return Refusal(ErrorResponse(request.id, ErrorObject(
                            DENIED, denial_message(check))), DENIED)
                self._allowed.inc()
        if self.limiter is not None and request.method == "tools/call":
            name = params.get("name")
            admission = await self.limiter.admit(
                None if identity is ANONYMOUS else f"{identity.issuer} {identity.subject}",
                name if isinstance(name, str) else None)
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
                      items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of a list the identity may use."""
        if self.policies is None:
            return list(items)
        claims = await self.claims(identity)
        if claims is None:
            return []
        policies = self.policies
        return [item for item in items if policies.allowed(claims, item_check(list_method, item))]

