"""Boundary 1: who is calling. Each incoming mode is an :class:`Authenticator`.

:meth:`Authenticator.authenticate` turns the request's bearer token (or its absence) into an
:class:`~vmcp_trio.auth.identity.Identity`, or raises :class:`AuthFailure` saying which status
and RFC 6750 error the client gets. The hot path for a known token is one hash and one dict
lookup in the verified-token cache; a first-seen JWT is parsed, its claims checked, its
signature verified with a key from the issuer's in-memory JWKS, and the result cached until its
``exp``; a token that is not a JWT goes to introspection when a client secret is configured.

Order of the checks for a JWT: the claims first (issuer, audience, times, typ: no I/O, and a
token of another issuer must not make us refetch keys), then the key by ``kid`` (an unknown kid
may refetch the JWKS, rate-limited), then the signature with the algorithm pinned to that key.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...runtime.supervisor import NamedTask
from ..identity import ANONYMOUS, Identity
from ..jwt import TokenError, VerifyKey, check_claims, parse_jws, verify_signature
from ..token_cache import VerifiedTokenCache
from .introspection import IntrospectionUnavailable, Introspector
from .jwks import JwksCache, KeysUnavailable

__all__ = ["AnonymousAuthenticator", "AuthFailure", "Authenticator", "JwtAuthenticator",
           "KeySource", "token_scopes"]


@dataclass
class AuthFailure(Exception):
    """Why a request is refused: the HTTP status (401, 403, 503), the RFC 6750 error code (None
    when no token was presented: the challenge then carries no error), and a description safe
    to show (it never contains the token)."""

    status: int
    error: str | None
    description: str

    def __str__(self) -> str:
        return f"{self.status} {self.error or 'no token'}: {self.description}"


class KeySource(Protocol):
    async def key_for(self, kid: str | None) -> VerifyKey | None: ...


class Authenticator:
    """The interface; :class:`AnonymousAuthenticator` and :class:`JwtAuthenticator` implement
    it."""

    anonymous = False
    issuer = ""
    authorization_servers: tuple[str, ...] = ()
    scopes_supported: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()

    async def prepare(self) -> None:
        """What must be known before serving (raises IncomingAuthError: the mode cannot be set
        up, an operator's mistake)."""

    def supervised(self) -> list[NamedTask]:
        """The mode's long-lived tasks (key refreshers), for the supervisor (``task_status``)."""
        return []

    async def authenticate(self, token: str | None) -> Identity:
        raise NotImplementedError

    def cached(self, token: str) -> Identity | None:
        """The identity of a token this mode verified already and still trusts (None: not
        known, :meth:`authenticate` it); raises AuthFailure when it was revoked since. The
        token's syntax need not have been checked: one found here was well formed."""
        return None

    def health(self) -> dict[str, Any]:
        """What ``/readyz`` and ``/api`` report about this mode's caches."""
        return {}


class AnonymousAuthenticator(Authenticator):
    """Development only: no checks; every request is the same local identity."""

    anonymous = True

    async def authenticate(self, token: str | None) -> Identity:
        return ANONYMOUS


def token_scopes(claims: dict[str, Any]) -> set[str]:
    """The scopes a token grants: ``scope`` (space-separated, RFC 9068/8693) or ``scp``."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return set(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return {s for s in scp if isinstance(s, str)}
    if isinstance(scp, str):
        return set(scp.split())
    return set()


class JwtAuthenticator(Authenticator):
    """Bearer JWTs of one issuer (OIDC, Kubernetes service accounts, the embedded authorization
    server), and opaque tokens by introspection when an :class:`Introspector` is given."""

    def __init__(self, *, issuer: str, audience: str | None, keys: KeySource,
                 introspector: Introspector | None = None,
                 required_scopes: tuple[str, ...] = (), scopes_supported: tuple[str, ...] = (),
                 leeway: float = 30.0, cache_entries: int = 10_000,
                 restrict: Callable[[dict[str, Any]], str | None] | None = None,
                 supervised: tuple[NamedTask, ...] = (),
                 prepare: Callable[[], Awaitable[None]] | None = None,
                 authorization_servers: tuple[str, ...] | None = None,
                 still_valid: Callable[[Identity], bool] | None = None,
                 first_seen_valid: Callable[[Identity], Awaitable[bool]] | None = None
                 ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.keys = keys
        self.introspector = introspector
        self.required_scopes = required_scopes
        self.scopes_supported = scopes_supported
        self.leeway = leeway
        self.restrict = restrict
        self._supervised = supervised
        self._prepare = prepare
        self.still_valid = still_valid
        """Checked on every request, cache hits too: the embedded authorization server says
        here whether a token's session was revoked (in memory: no I/O)."""
        self.first_seen_valid = first_seen_valid
        """Checked once per token, before it is cached: the revocations this process may not
        have heard of (another replica's, made before this one started)."""
        self.authorization_servers = (authorization_servers if authorization_servers is not None
                                      else (issuer,))
        self.cache: VerifiedTokenCache[Identity] = VerifiedTokenCache(max_entries=cache_entries)

    async def prepare(self) -> None:
        if self._prepare is not None:
            await self._prepare()

    def supervised(self) -> list[NamedTask]:
        return list(self._supervised)

    def health(self) -> dict[str, Any]:
        keys = self.keys
        if not isinstance(keys, JwksCache):
            return {"issuer": self.issuer}
        return {"issuer": self.issuer, "keys": keys.state, "keyCount": len(keys.keys),
                "lastError": keys.last_error}

    def key_removed(self, thumbprint: str) -> None:
        """A key left the issuer's JWKS: tokens it verified are no longer trusted."""
        self.cache.drop_key(thumbprint)

    def cached(self, token: str) -> Identity | None:
        hit = self.cache.get(token, time.time())
        if hit is not None and self.still_valid is not None and not self.still_valid(hit):
            raise AuthFailure(401, "invalid_token", "the token was revoked")
        return hit

    async def authenticate(self, token: str | None) -> Identity:
        if token is None:
            raise AuthFailure(401, None, "a bearer token is required")
        hit = self.cached(token)
        if hit is not None:
            return hit
        now = time.time()
        try:
            if token.count(".") == 2:
                claims, expires, key_id = await self._verify_jwt(token, now)
            elif self.introspector is not None:
                claims = await self.introspector.introspect(token)
                exp = claims.get("exp")
                expires = float(exp) if isinstance(exp, int | float) else now + 60.0
                key_id = "introspection"
            else:
                raise TokenError("the token is not a JWT (and no introspection is configured)")
        except TokenError as exc:
            raise AuthFailure(401, "invalid_token", exc.reason) from None
        except (KeysUnavailable, IntrospectionUnavailable) as exc:
            raise AuthFailure(503, "temporarily_unavailable",
                              f"the issuer cannot be reached to check the token: {exc}") from None
        # An introspected client-credentials token may name only its client (RFC 7662: sub
        # is optional); that client is then the caller.
        subject = claims.get("sub") or claims.get("client_id")
        if not isinstance(subject, str) or not subject:
            raise AuthFailure(401, "invalid_token", "the token has no sub claim")
        if self.restrict is not None:
            reason = self.restrict(claims)
            if reason is not None:
                raise AuthFailure(401, "invalid_token", reason)
        missing = set(self.required_scopes) - token_scopes(claims)
        if missing:
            raise AuthFailure(403, "insufficient_scope",
                              f"the token lacks the scopes {' '.join(sorted(missing))}")
        identity = Identity(str(claims.get("iss") or self.issuer), subject, claims)
        if (self.still_valid is not None and not self.still_valid(identity)) or (
                self.first_seen_valid is not None and not await self.first_seen_valid(identity)):
            raise AuthFailure(401, "invalid_token", "the token was revoked")
        self.cache.put(token, identity, expires=expires, key_id=key_id, now=now)
        return identity

    async def _verify_jwt(self, token: str, now: float) -> tuple[dict[str, Any], float, str]:
        parsed = parse_jws(token)
        check_claims(parsed, issuer=self.issuer, audience=self.audience, now=now,
                     leeway=self.leeway)
        key = await self.keys.key_for(parsed.kid)
        if key is None:
            raise TokenError("the token's signing key (kid) is not one of the issuer's keys")
        verify_signature(parsed, key)
        return parsed.claims, float(parsed.claims["exp"]), key.thumbprint
