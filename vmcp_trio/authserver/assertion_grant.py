"""The JWT-bearer grant (RFC 7523 section 2.1) at ``/oauth/token``, for trusted issuers.

One job: turn an assertion a trusted issuer signed (``trustedIssuers[].jwtBearerGrant``) into
one access token for one resource, as ToolHive's embedded server does. No client
authentication is needed (the assertion is the credential); credentials a request carries
anyway are checked by the token endpoint. Rules kept here:

* ``assertion`` and ``resource`` (RFC 8707) each exactly once (the form refuses repeats).
* The assertion: signed by a trusted issuer enabled for the grant, with the algorithm of its
  key (:mod:`.trusted`); ``aud`` one of ``acceptedAudiences`` (default: this token endpoint
  and this issuer); ``typ`` absent or ``JWT`` (an ID-JAG is not a plain assertion); ``sub`` a
  string; ``iat`` and ``exp`` present, ``exp`` not past (no leeway: a used assertion is
  remembered only until then), ``exp - iat`` at most ``maxAssertionAge``, ``iat`` and ``nbf``
  not ahead by more than :data:`~.trusted.LEEWAY`; ``jti``, when present, a string of at most
  256 characters; not an ID token.
* Its subject has a ``subjectBindings`` entry (else ``invalid_grant``) whose
  ``allowedResources`` hold the resource asked for (else ``invalid_target``).
* Replay: each assertion is accepted once, by whichever replica sees it first (the storage's
  :meth:`~.storage.Storage.consume_assertion`), keyed by its issuer and ``jti`` (a hash of the
  whole assertion when it has none), until it expires. It is used up before the token is
  signed: a failure after that never makes it usable again.
* The token: ``sub`` ``<issuer>#<subject>`` (an external subject can never be taken for one of
  this server's users), ``client_id`` ``jwt-bearer-<hash of issuer and subject>``, ``aud`` the
  resource, no scopes, no refresh token; it lives no longer than the assertion would have.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ..auth.incoming.jwks import KeysUnavailable
from ..auth.jwt import TokenError
from ..protocol import base64url
from ..resources.plan import TrustedIssuerPlan
from .endpoints import AccessGrant, sha256
from .storage import Storage
from .trusted import TrustedIssuers
from .validation import OAuthError

__all__ = ["AssertionGrant"]

MAX_JTI_CHARS = 256


def _accepted(plan: TrustedIssuerPlan) -> frozenset[str] | None:
    grant = plan.jwt_bearer
    return None if grant is None else frozenset(grant.accepted_audiences)


def _check_times(plan: TrustedIssuerPlan, claims: dict[str, Any], now: float) -> float:
    """The assertion's ``exp``, once its times and subject are acceptable (raises TokenError);
    :func:`~vmcp_trio.auth.jwt.check_claims` has checked the types and the leeway already."""
    assert plan.jwt_bearer is not None
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(iat, int | float) or isinstance(iat, bool):
        raise TokenError("iat is missing")
    assert isinstance(exp, int | float)
    if exp <= now:
        raise TokenError("the assertion has expired")
    if exp - iat > plan.jwt_bearer.max_assertion_age.total_seconds():
        raise TokenError("the assertion lives longer than maxAssertionAge (exp - iat)")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise TokenError("sub is missing")
    jti = claims.get("jti")
    if jti is not None and (not isinstance(jti, str) or not 0 < len(jti) <= MAX_JTI_CHARS):
        raise TokenError(f"jti is not a string of 1 to {MAX_JTI_CHARS} characters")
    return float(exp)


class AssertionGrant:
    def __init__(self, trusted: TrustedIssuers, storage: Storage, *,
                 access_lifetime: float) -> None:
        self.trusted = trusted
        self.storage = storage
        self.access_lifetime = access_lifetime

    @property
    def enabled(self) -> bool:
        return self.trusted.any(lambda plan: plan.jwt_bearer is not None)

    async def grant(self, form: dict[str, str]) -> AccessGrant:
        assertion, resource = form.get("assertion"), form.get("resource")
        if not assertion:
            raise OAuthError("invalid_request", "assertion is required")
        if not resource:
            raise OAuthError("invalid_request", "exactly one resource is required (RFC 8707)")
        now = time.time()
        try:
            plan, claims = await self.trusted.verify(assertion, _accepted, now=now,
                                                     typs=frozenset({"jwt"}))
            expires = _check_times(plan, claims, now)
        except TokenError as exc:
            raise OAuthError("invalid_grant", f"the assertion is not acceptable: "
                                              f"{exc.reason}") from None
        except KeysUnavailable as exc:
            raise OAuthError("temporarily_unavailable", f"the assertion's issuer keys cannot "
                             f"be fetched now: {exc}", status=503) from None
        assert plan.jwt_bearer is not None
        subject: str = claims["sub"]
        allowed = dict(plan.jwt_bearer.bindings).get(subject)
        if allowed is None:
            raise OAuthError("invalid_grant", "the assertion's subject is not bound to this "
                                              "grant (subjectBindings)")
        if resource not in allowed:
            raise OAuthError("invalid_target", "the resource is not one the assertion's "
                                               "subject may ask for")
        jti = claims.get("jti") or "sha256:" + sha256(assertion)
        if not await self.storage.consume_assertion(sha256(f"{plan.issuer}\0{jti}"), expires):
            raise OAuthError("invalid_grant", "the assertion was already used")
        digest = hashlib.sha256(f"{plan.issuer}\0{subject}".encode()).digest()
        return AccessGrant(
            subject=f"{plan.issuer}#{subject}",
            client_id="jwt-bearer-" + base64url.encode(digest)[:22], audience=resource,
            scopes=(), lifetime=min(self.access_lifetime, expires - time.time()))
