"""Token exchange with delegation (RFC 8693) at ``/oauth/token``, for the delegate clients.

One job: decide whether the calling client may act for the subject of a token, and describe the
delegated access token (``sub`` the subject, ``act`` the actor, RFC 8693 section 4.1), as
ToolHive's embedded server does. Only ``delegateClients`` may exchange (the confidential clients
the operator declared; a registered client never holds this grant). Rules kept here:

* ``subject_token`` with ``subject_token_type`` access_token or jwt; ``requested_token_type``,
  when given, access_token; ``actor_token`` and ``actor_token_type`` together or not at all.
* The subject token is one of ours (signature, ``iss``, ``aud`` one of our resources, ``exp``;
  its login session still live) or one of a trusted issuer with ``expectedAudience`` (that
  audience; :mod:`.trusted`); never an ID token; it has a ``sub``.
* The actor is the calling client, or the ``sub`` of an ``actor_token``: one of ours, issued to
  the calling client (its ``client_id``), so that a leaked actor token serves no other client.
* Consent (RFC 8693 section 4.4): a ``may_act`` claim in the subject token names who may act,
  and only that actor may (``may_act.iss``, when present, must be this server; a trusted
  issuer's must carry it, and that issuer must have ``allowMayAct``); without ``may_act``, one
  of our tokens may be exchanged by any delegate client, and a trusted issuer's only when its
  ``actorClaim`` (default ``azp``) is in ``allowedActors`` or its ``actorMatcher`` (CEL over
  the subject token's ``claims``) is true. A trusted issuer's tokens are
  exchanged only by its ``allowedDelegateClients`` (``*``: every delegate client).
* Scopes: those asked for (``scope``), each one the client's (``delegateClients[].scopes``)
  and the subject token's, else ``invalid_scope``; none when none are asked for.
* Audience: ``resource`` or ``audience`` (one), else the client's only audience; one of the
  client's audiences and our resources, and one the subject token names (delegation narrows,
  never widens), else ``invalid_target``.
* The delegated token: ``sub`` the subject's (``<issuer>#<sub>`` for a trusted issuer's), the
  subject's ``name``/``email`` and login session (``tsid``: it ends with that session),
  ``client_id`` the calling client, ``act`` ``{iss: this server, sub: actor}`` with the trusted
  issuer nested under it (``{iss, sub: its actor}``) and the subject token's own ``act`` under
  that (re-issued with each hop's ``iss``/``sub`` only: nothing else of it is signed again), at
  most :data:`MAX_DELEGATION_DEPTH` hops and :data:`MAX_ACT_BYTES`; it lives no longer than the
  subject token; no refresh token.
* Errors follow RFC 8693 section 2.2.2: a token that is invalid, or unacceptable by this policy
  (an actor ``may_act`` does not name, say), is ``invalid_request``; an audience that cannot be
  served is ``invalid_target``. (ToolHive answers ``invalid_grant`` for a refused consent.)
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from ..auth.claims_matcher import ClaimsMatcher, compile_matcher
from ..auth.incoming.authenticator import token_scopes
from ..auth.incoming.jwks import KeysUnavailable
from ..auth.jwt import TokenError, check_claims, parse_jws, verify_signature
from ..auth.oauth.tokens import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE
from ..resources.plan import DelegateClientPlan, TrustedIssuerPlan
from .endpoints import AccessGrant
from .keys import SigningKeys
from .storage import RegisteredClient
from .trusted import TrustedIssuers, refuse_id_token
from .validation import OAuthError, parse_scope

__all__ = ["MAX_ACT_BYTES", "MAX_DELEGATION_DEPTH", "ExchangeGrant"]

JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
TOKEN_TYPES = (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE)
MAX_DELEGATION_DEPTH = 10
MAX_ACT_BYTES = 8 * 1024


def _refused(what: str, reason: str) -> OAuthError:
    return OAuthError("invalid_request", f"the {what} is not acceptable: {reason}")


def _may_act(claims: dict[str, Any], issuer: str, *, external: bool) -> str | None:
    """The actor a token's ``may_act`` names (None without one); raises TokenError when it is
    malformed, or names another issuer's party (its ``iss`` must be ours, and present in a
    trusted issuer's token)."""
    if claims.get("may_act") is None:
        return None
    may_act = claims["may_act"]
    if not isinstance(may_act, dict) or not isinstance(may_act.get("sub"), str) or not \
            may_act["sub"]:
        raise TokenError("may_act is not an object with a sub")
    if ("iss" in may_act or external) and may_act.get("iss") != issuer:
        raise TokenError("may_act does not name a party of this authorization server (iss)")
    return str(may_act["sub"])


def _prior_chain(act: object) -> list[dict[str, str]]:
    """The hops of a subject token's ``act`` (outermost first), each reduced to ``iss``/``sub``.
    Raises OAuthError when it is not a chain of objects each naming a party, or too deep."""
    hops: list[dict[str, str]] = []
    while act is not None:
        if not isinstance(act, dict) or len(hops) >= MAX_DELEGATION_DEPTH:
            raise _refused("subject token", "its act claim is not a delegation chain of at most "
                                            f"{MAX_DELEGATION_DEPTH} objects")
        hop = {k: act[k] for k in ("iss", "sub") if isinstance(act.get(k), str) and act[k]}
        if not hop:
            raise _refused("subject token", "a hop of its act claim names no party")
        hops.append(hop)
        act = act.get("act")
    return hops


def _nest(hops: Sequence[dict[str, str]]) -> dict[str, Any]:
    """``hops`` (outermost first) as one nested ``act`` claim."""
    nested: dict[str, Any] = {}
    for hop in reversed(hops):
        nested = {**hop, "act": nested} if nested else dict(hop)
    return nested


class ExchangeGrant:
    def __init__(self, *, keys: SigningKeys, issuer: str, resources: tuple[str, ...],
                 trusted: TrustedIssuers, delegates: Sequence[DelegateClientPlan],
                 session_revoked: Callable[[str], Awaitable[bool]],
                 access_lifetime: float) -> None:
        self.keys = keys
        self.issuer = issuer
        self.resources = resources
        self.trusted = trusted
        self.session_revoked = session_revoked
        self.access_lifetime = access_lifetime
        self.plans = {plan.client_id: plan for plan in delegates}
        self.delegates = {plan.client_id: RegisteredClient(
            client_id=plan.client_id, redirect_uris=(),
            token_endpoint_auth_method="client_secret_basic", grant_types=(TOKEN_EXCHANGE,),
            client_name=None, scope=" ".join(plan.scopes),
            secret_sha256=hashlib.sha256(plan.secret.value).hexdigest(), created_at=0.0,
            expires_at=float("inf")) for plan in delegates}
        """The delegate clients, as the token endpoint authenticates them (either secret
        method)."""
        self._matchers: dict[str, ClaimsMatcher] = {}

    async def grant(self, client: RegisteredClient, form: dict[str, str]) -> AccessGrant:
        plan = self.plans[client.client_id]  # only delegate clients hold this grant
        subject_token, actor_token = form.get("subject_token"), form.get("actor_token")
        if not subject_token or form.get("subject_token_type") not in TOKEN_TYPES:
            raise OAuthError("invalid_request", "subject_token and subject_token_type "
                             "(access_token or jwt) are required")
        if form.get("requested_token_type", ACCESS_TOKEN_TYPE) != ACCESS_TOKEN_TYPE:
            raise OAuthError("invalid_request", "requested_token_type must be access_token")
        if bool(actor_token) != ("actor_token_type" in form):
            raise OAuthError("invalid_request", "actor_token and actor_token_type go together")
        if actor_token and form["actor_token_type"] not in TOKEN_TYPES:
            raise OAuthError("invalid_request", "actor_token_type must be access_token or jwt")
        now = time.time()
        claims, external, may_act = await self._subject(subject_token, now)
        actor = client.client_id
        if actor_token:
            actor = await self._actor(actor_token, client, now)
        external_actor = self._consent(claims, external, may_act, client, actor)
        scopes = self._scopes(form.get("scope"), plan, claims)
        audience = self._audience(form, plan, claims)
        hops = [{"iss": self.issuer, "sub": actor}]
        if external is not None:  # where the delegation came from, and who asked there
            hops.append({"iss": external.issuer, **({"sub": external_actor}
                                                    if external_actor else {})})
        hops.extend(_prior_chain(claims.get("act")))
        if len(hops) > MAX_DELEGATION_DEPTH:
            raise _refused("subject token", "its delegation chain is too long")
        act = _nest(hops)
        if len(orjson.dumps(act)) > MAX_ACT_BYTES:
            raise _refused("subject token", "its delegation chain is too large")
        lifetime = min(float(claims["exp"]) - now, self.access_lifetime)
        if lifetime <= 0:
            raise _refused("subject token", "it has expired")
        session = claims.get("tsid") if external is None else None
        return AccessGrant(
            subject=claims["sub"] if external is None else f"{external.issuer}#{claims['sub']}",
            client_id=client.client_id, audience=audience, scopes=scopes, lifetime=lifetime,
            session_id=session if isinstance(session, str) else None,
            name=claims.get("name") if isinstance(claims.get("name"), str) else None,
            email=claims.get("email") if isinstance(claims.get("email"), str) else None,
            act=act)

    async def _own(self, token: str, now: float) -> dict[str, Any]:
        """The claims of one of our access tokens (raises TokenError)."""
        parsed = parse_jws(token)
        check_claims(parsed, issuer=self.issuer, audience=frozenset(self.resources), now=now,
                     leeway=0.0)
        key = await self.keys.key_for(parsed.kid)
        if key is None:
            raise TokenError("the token's signing key (kid) is not one of this server's keys")
        verify_signature(parsed, key)
        session = parsed.claims.get("tsid")
        if isinstance(session, str) and await self.session_revoked(session):
            raise TokenError("its login session ended")
        return parsed.claims

    async def _subject(self, token: str, now: float
                       ) -> tuple[dict[str, Any], TrustedIssuerPlan | None, str | None]:
        """The subject token's claims, the trusted issuer it comes from (None: ours), and the
        actor its ``may_act`` names (None without one)."""
        try:
            if parse_jws(token).claims.get("iss") == self.issuer:
                claims, external = await self._own(token, now), None
            else:
                external, claims = await self.trusted.verify(
                    token, lambda p: frozenset({p.expected_audience})
                    if p.expected_audience else None,
                    now=now, typs=frozenset({"at+jwt", "jwt"}))
            refuse_id_token(claims)
            if not isinstance(claims.get("sub"), str) or not claims["sub"]:
                raise TokenError("sub is missing")
            may_act = _may_act(claims, self.issuer, external=external is not None)
        except TokenError as exc:
            raise _refused("subject token", exc.reason) from None
        except KeysUnavailable as exc:
            raise OAuthError("temporarily_unavailable", f"the subject token's issuer keys "
                             f"cannot be fetched now: {exc}", status=503) from None
        return claims, external, may_act

    async def _actor(self, token: str, client: RegisteredClient, now: float) -> str:
        """The party an actor token names: one of ours, issued to the calling client."""
        try:
            claims = await self._own(token, now)
        except TokenError as exc:
            raise _refused("actor token", exc.reason) from None
        subject = claims.get("sub")
        if claims.get("client_id") != client.client_id or not isinstance(subject, str):
            raise _refused("actor token", "it was not issued to this client")
        return subject

    def _consent(self, claims: dict[str, Any], external: TrustedIssuerPlan | None,
                 may_act: str | None, client: RegisteredClient, actor: str) -> str | None:
        """Whether ``actor`` (through ``client``) may act for the subject (RFC 8693 section
        4.4); the trusted issuer's actor that allowed it, when its allowlist did."""
        if external is not None and not {"*", client.client_id} & set(
                external.allowed_delegate_clients):
            raise _refused("subject token", "its issuer does not allow this client to exchange "
                                            "its tokens (allowedDelegateClients)")
        if may_act is not None:
            if external is not None and not external.allow_may_act:
                raise _refused("subject token", "its issuer may not grant delegation by may_act "
                                                "(allowMayAct)")
            if may_act != actor:
                raise _refused("subject token", "its may_act does not name this actor")
            return None
        if external is None:
            return None  # one of ours: any delegate client may act for its subject
        value = claims.get(external.actor_claim)
        if isinstance(value, str) and value in external.allowed_actors:
            return value
        matcher = self._actor_matcher(external)
        if matcher is not None and matcher.matches(claims):
            return value if isinstance(value, str) else None
        raise _refused("subject token", "it has no may_act, and its client "
                                        f"({external.actor_claim}) is not in allowedActors"
                       + (" nor admitted by actorMatcher" if matcher is not None else ""))

    def _actor_matcher(self, external: TrustedIssuerPlan) -> ClaimsMatcher | None:
        """The issuer's ``actorMatcher``, compiled once (the configuration checked it)."""
        if external.actor_matcher is None:
            return None
        matcher = self._matchers.get(external.issuer)
        if matcher is None:
            matcher = self._matchers[external.issuer] = compile_matcher(external.actor_matcher)
        return matcher

    def _scopes(self, asked: str | None, plan: DelegateClientPlan,
                claims: dict[str, Any]) -> tuple[str, ...]:
        scopes = parse_scope(asked)
        granted = token_scopes(claims)
        for index, scope in enumerate(scopes):
            if scope not in plan.scopes or scope not in granted:
                raise OAuthError("invalid_scope", f"scope[{index}] is not one both the client "
                                                  "and the subject token hold")
        return scopes

    def _audience(self, form: dict[str, str], plan: DelegateClientPlan,
                  claims: dict[str, Any]) -> str:
        asked = {form[name] for name in ("resource", "audience") if form.get(name)}
        if len(asked) > 1:
            raise OAuthError("invalid_target", "resource and audience name different targets")
        usable = [a for a in plan.audiences if a in self.resources]
        if not asked and len(usable) != 1:
            raise OAuthError("invalid_request", "resource (or audience) is required: the client "
                                                "has no single audience")
        audience = asked.pop() if asked else usable[0]
        if audience not in usable:
            raise OAuthError("invalid_target", "the audience is not one this client may ask "
                                               "for")
        subject_aud = claims.get("aud")
        if audience != subject_aud and not (isinstance(subject_aud, list)
                                            and audience in subject_aud):
            raise OAuthError("invalid_target", "the audience is not one the subject token "
                                               "names (delegation never widens it)")
        return audience
