"""Opaque tokens: RFC 7662 token introspection at the issuer, with a short-lived cache.

A token that is not a JWT goes to the issuer's ``introspection_endpoint`` (from discovery, or
configured), authenticated as the configured client with ``client_secret_basic`` (RFC 6749
section 2.3.1: id and secret form-encoded, then base64), or unauthenticated when no client
secret is configured (ToolHive's fallback: an endpoint that is only reachable from inside,
such as one in the cluster). The answer must say ``active: true``;
its ``aud``, when present, must contain the audience, its ``iss``, when present, must be the
issuer, and its ``exp``, when present, must lie ahead.

Answers are cached by the token's SHA-256: an active one until its ``exp`` but at most
``max_ttl`` seconds (so a revocation is noticed within that bound), an inactive one for
``negative_ttl`` seconds (so a client retrying a dead token does not hammer the issuer).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from ...http.client import HttpClient
from ..jwt import TokenError
from ..oauth.discovery import FetchError, fetch_json
from ..oauth.tokens import basic_authorization
from ..ssrf import UnsafeUrl, check_fetch_url
from ..token_cache import VerifiedTokenCache

__all__ = ["IntrospectionUnavailable", "Introspector"]

_NO_KEY = "introspection"
"""The cache's key id for introspection results (no signing key verified them)."""


class IntrospectionUnavailable(Exception):
    """The introspection endpoint could not give an answer (the message says why)."""


_INACTIVE: dict[str, Any] = {}
"""Cached for a token the issuer said is not active (compared by identity)."""


class Introspector:
    def __init__(self, endpoint: Callable[[], Awaitable[str]], client: HttpClient, *,
                 issuer: str, audience: str | None, client_id: str = "",
                 client_secret: str | None = None,
                 allow_http: bool = False, allow_private: bool = False,
                 max_ttl: float = 60.0, negative_ttl: float = 10.0,
                 max_entries: int = 10_000, timeout: float = 5.0) -> None:
        self._endpoint = endpoint
        self.client = client
        self.issuer = issuer
        self.audience = audience
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.max_ttl = max_ttl
        self.negative_ttl = negative_ttl
        self.timeout = timeout
        self._headers = [("content-type", "application/x-www-form-urlencoded")]
        if client_secret is not None:
            self._headers.append(("authorization",
                                  basic_authorization(client_id, client_secret)))
        self.cache: VerifiedTokenCache[dict[str, Any]] = VerifiedTokenCache(
            max_entries=max_entries, max_ttl=max_ttl)
        self.calls = 0

    async def introspect(self, token: str) -> dict[str, Any]:
        """The claims of an active token. Raises TokenError (inactive, wrong audience...) or
        :class:`IntrospectionUnavailable`."""
        now = time.time()
        claims = self.cache.get(token, now)
        if claims is None:
            answer = await self._ask(token)
            if answer is None:
                self.cache.put(token, _INACTIVE, expires=now + self.negative_ttl,
                               key_id=_NO_KEY, now=now)
                raise TokenError("the token is not active")
            self._check(answer, now)
            exp = answer.get("exp")
            expires = now + self.max_ttl
            if isinstance(exp, int | float) and not isinstance(exp, bool):
                expires = min(float(exp), expires)
            self.cache.put(token, answer, expires=expires, key_id=_NO_KEY, now=now)
            return answer
        if claims is _INACTIVE:
            raise TokenError("the token is not active")
        return claims

    async def _ask(self, token: str) -> dict[str, Any] | None:
        try:
            endpoint = await self._endpoint()
        except FetchError as exc:
            raise IntrospectionUnavailable(str(exc)) from None
        try:
            guard = check_fetch_url(endpoint, allow_http=self.allow_http,
                                    allow_private=self.allow_private,
                                    switch="jwksAllowPrivateIP")
        except UnsafeUrl as exc:
            raise IntrospectionUnavailable(f"the introspection endpoint is refused: "
                                           f"{exc}") from None
        self.calls += 1
        body = urlencode({"token": token, "token_type_hint": "access_token"}).encode()
        try:
            status, _, document = await fetch_json(
                self.client, endpoint, method="POST", body=body, timeout=self.timeout,
                headers=self._headers, guard=guard)
        except FetchError as exc:
            raise IntrospectionUnavailable(str(exc)) from None
        if status != 200 or not isinstance(document, dict):
            raise IntrospectionUnavailable(f"the introspection endpoint answered HTTP {status}")
        if document.get("active") is not True:
            return None
        return document

    def _check(self, claims: dict[str, Any], now: float) -> None:
        exp = claims.get("exp")
        if isinstance(exp, int | float) and not isinstance(exp, bool) and exp <= now:
            raise TokenError("the token has expired")
        iss = claims.get("iss")
        if iss is not None and iss != self.issuer:
            raise TokenError("the token is from another issuer")
        aud = claims.get("aud")
        if self.audience is not None and aud is not None:
            audiences = aud if isinstance(aud, list) else [aud]
            if self.audience not in audiences:
                raise TokenError("the token's audience does not include this server")
