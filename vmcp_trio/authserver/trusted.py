"""The external issuers the authorization server trusts (``trustedIssuers``): their keys, and the
verification of their JWTs (RFC 7523 assertions, RFC 8693 subject tokens).

One job: say whether a JWT is one a trusted issuer signed, and hand back that issuer's
configuration and the token's claims; what each grant then requires of them is the grant's.
The verification is the incoming authenticator's (:mod:`vmcp_trio.auth.jwt`), in its order:
the claims first (no I/O, and a token of an issuer that is not trusted never makes us fetch
keys), then the key the token names, then the signature with the algorithm pinned to that key.
Rules kept here:

* ``iss`` must be a trusted issuer's, exactly; the issuer must be enabled for the use (the
  caller says which audiences it accepts, or that it is not enabled); ``aud`` must name one of
  them; ``exp``, ``nbf`` and ``iat`` are judged with :data:`LEEWAY` for clocks that differ
  (ToolHive's one minute); ``typ``, when present, is one the caller accepts.
* Keys come only from the issuer's JWKS (``jwksUrl``, else the ``jwks_uri`` of its discovery
  document), each fetched by a :class:`~vmcp_trio.auth.incoming.jwks.JwksCache`: behind the
  SSRF guard with the issuer's own ``insecureAllowHTTP`` and ``allowPrivateIPs``, refreshed by a
  supervised task, an unknown ``kid`` refetching at most once per 30 s.
* An ID token is never taken for an access token or an assertion: ``at_hash`` or ``c_hash``
  refuse it (:func:`refuse_id_token`).
* Failures are :class:`~vmcp_trio.auth.jwt.TokenError` (a reason that never quotes the token)
  or :class:`~vmcp_trio.auth.incoming.jwks.KeysUnavailable` (the issuer's keys could never be
  fetched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..auth.incoming.build import IssuerMetadata
from ..auth.incoming.jwks import JwksCache
from ..auth.jwt import TokenError, check_claims, parse_jws, verify_signature
from ..http.client import HttpClient
from ..resources.plan import TrustedIssuerPlan
from ..runtime.supervisor import NamedTask

__all__ = ["LEEWAY", "TrustedIssuers", "refuse_id_token"]

LEEWAY = 60.0
"""Seconds of clock difference tolerated with an external issuer."""

Audiences = Callable[[TrustedIssuerPlan], frozenset[str] | None]
"""What a use accepts in ``aud`` from an issuer: None when the issuer is not enabled for it."""


def refuse_id_token(claims: dict[str, Any]) -> None:
    """``at_hash`` and ``c_hash`` exist only in ID tokens (OpenID Connect Core 3.3.2.11)."""
    if "at_hash" in claims or "c_hash" in claims:
        raise TokenError("the token is an ID token (it has at_hash or c_hash)")


class TrustedIssuers:
    def __init__(self, plans: Sequence[TrustedIssuerPlan], client: HttpClient) -> None:
        self.issuers: dict[str, tuple[TrustedIssuerPlan, JwksCache]] = {}
        for plan in plans:
            metadata = IssuerMetadata(client, plan.issuer, allow_http=plan.allow_http,
                                      allow_private=plan.allow_private,
                                      private_switch="trustedIssuers[].allowPrivateIPs")
            self.issuers[plan.issuer] = (plan, JwksCache(
                plan.issuer, metadata.endpoint("jwks_uri", plan.jwks_url), client,
                allow_http=plan.allow_http, allow_private=plan.allow_private,
                private_switch="trustedIssuers[].allowPrivateIPs"))

    def supervised(self) -> list[NamedTask]:
        """Each issuer's key refresher, for the supervisor."""
        return [(f"JWKS of trusted issuer {issuer}", jwks.run)
                for issuer, (_, jwks) in self.issuers.items()]

    def any(self, enabled: Callable[[TrustedIssuerPlan], bool]) -> bool:
        """Whether some trusted issuer is enabled for a use."""
        return any(enabled(plan) for plan, _ in self.issuers.values())

    async def verify(self, token: str, audiences: Audiences, *, now: float,
                     typs: frozenset[str]) -> tuple[TrustedIssuerPlan, dict[str, Any]]:
        """The issuer that signed ``token`` and its verified claims (see the module docstring).
        Raises TokenError or KeysUnavailable."""
        parsed = parse_jws(token)
        issuer = parsed.claims.get("iss")
        entry = self.issuers.get(issuer) if isinstance(issuer, str) else None
        if entry is None:
            raise TokenError("iss is missing" if issuer is None else "iss is not a trusted issuer")
        plan, jwks = entry
        accepted = audiences(plan)
        if accepted is None:
            raise TokenError("the issuer is not trusted for this grant")
        check_claims(parsed, issuer=plan.issuer, audience=accepted, now=now, leeway=LEEWAY,
                     typs=typs)
        key = await jwks.key_for(parsed.kid)
        if key is None:
            raise TokenError("the token's signing key (kid) is not one of the issuer's keys")
        verify_signature(parsed, key)
        refuse_id_token(parsed.claims)
        return plan, parsed.claims
