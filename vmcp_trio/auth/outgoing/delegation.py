"""The user's token traded for a backend's through a JWT-bearer grant (RFC 7523): ``obo``
(Entra ID's on-behalf-of) and ``xaa`` (Cross-App Access, the ID-JAG of
draft-ietf-oauth-identity-assertion-authz-grant and of MCP's enterprise-managed authorization).

One job: the two strategies whose grant presents the user's assertion at a token endpoint.
Both send ``Authorization: Bearer <access token>``, cache it per user (:class:`~.cache.GrantCache`:
a digest of the subject token and the grant's parameters as the key, reused until shortly
before it expires, bounded, one grant for concurrent requests), and turn every failure into a
:class:`CredentialError` naming the step and the endpoint, never a token. Token requests go
through :class:`~.exchange.TokenEndpoint` (client authentication, answers read as tokens).

* :class:`OnBehalfOf`: ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` with the
  caller's token (or ``subjectTokenProviderName``'s stored access token) as ``assertion``,
  ``requested_token_use=on_behalf_of`` and the configured ``scope``, by the confidential client
  (Microsoft identity platform's OBO request). ``cacheSkew`` is the cache's margin.
* :class:`CrossAppAccess`: (1) at the IdP, an RFC 8693 exchange of the user's ID token of the
  login's provider for an ID-JAG (``requested_token_type=urn:ietf:params:oauth:token-type:id-jag``,
  ``audience`` the resource's authorization server, ``resource``, ``scope``); the answer must say
  ``issued_token_type`` id-jag and ``token_type`` N_A, and the ID-JAG (a JWT, read unverified:
  the resource's authorization server verifies it) must name exactly that audience and, when
  one was asked, the resource, as ToolHive checks against a confused deputy; (2) at the
  resource's authorization server, the JWT-bearer grant of the ID-JAG for an access token. Only
  that access token is cached: an ID-JAG is asked for anew when it is needed again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...http.client import HttpClient
from ...resources.plan import CrossAppAccessAuth, OnBehalfOfAuth, SecretValue
from ..caller import Caller
from ..jwt import TokenError, parse_jws
from ..oauth.tokens import ID_JAG, JWT_BEARER, TOKEN_EXCHANGE
from .cache import GrantCache, GrantError, grant_key
from .exchange import ExchangedToken, ExchangeError, TokenEndpoint
from .subject import CredentialError, UpstreamTokens, subject_token

__all__ = ["CrossAppAccess", "OnBehalfOf"]



def _secret(value: SecretValue | None) -> str | None:
    return None if value is None else value.value.decode()


async def _cached(grants: GrantCache[ExchangedToken], key: str,
                  fetch: Callable[[], Awaitable[tuple[ExchangedToken, float]]]
                  ) -> list[tuple[str, str]]:
    try:
        token = await grants.get(key, fetch)
    except GrantError as exc:
        raise CredentialError(str(exc)) from None
    return [("authorization", f"Bearer {token.access_token}")]


class OnBehalfOf:
    def __init__(self, plan: OnBehalfOfAuth, client: HttpClient,
                 tokens: UpstreamTokens | None) -> None:
        self.plan = plan
        self.tokens = tokens
        self.endpoint = TokenEndpoint(client, token_url=plan.token_url, client_id=plan.client_id,
                                      client_secret=plan.client_secret.value.decode())
        self.grants: GrantCache[ExchangedToken] = (
            GrantCache() if plan.cache_skew is None else GrantCache(margin=plan.cache_skew))

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        assertion = await subject_token(caller, provider=self.plan.subject_provider,
                                        tokens=self.tokens, config=self.plan.config)
        key = grant_key(assertion, self.plan.token_url, self.plan.client_id, self.plan.scope)
        return await _cached(self.grants, key, lambda: self._grant(assertion))

    async def _grant(self, assertion: str) -> tuple[ExchangedToken, float]:
        form = {"grant_type": JWT_BEARER, "assertion": assertion, "scope": self.plan.scope,
                "requested_token_use": "on_behalf_of"}
        token = self.endpoint.read(await self.endpoint.post(form, "on-behalf-of grant"),
                                   "on-behalf-of grant")
        return token, self.grants.reusable_until(token)


class CrossAppAccess:
    def __init__(self, plan: CrossAppAccessAuth, client: HttpClient,
                 tokens: UpstreamTokens | None) -> None:
        self.plan = plan
        self.tokens = tokens
        self.idp = TokenEndpoint(client, token_url=plan.idp_token_url,
                                 client_id=plan.idp_client_id,
                                 client_secret=_secret(plan.idp_client_secret))
        self.target = TokenEndpoint(client, token_url=plan.target_token_url,
                                    client_id=plan.target_client_id,
                                    client_secret=_secret(plan.target_client_secret))
        self.grants: GrantCache[ExchangedToken] = GrantCache()

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        plan = self.plan
        id_token = await subject_token(caller, provider=plan.subject_provider,
                                       tokens=self.tokens, config=plan.config, id_token=True)
        key = grant_key(id_token, plan.idp_token_url, plan.target_token_url, plan.audience,
                        plan.resource or "", " ".join(plan.scopes))
        return await _cached(self.grants, key, lambda: self._grant(id_token))

    async def _id_jag(self, id_token: str) -> str:
        plan = self.plan
        form = {"grant_type": TOKEN_EXCHANGE, "requested_token_type": ID_JAG,
                "subject_token": id_token, "subject_token_type": plan.subject_token_type,
                "audience": plan.audience}
        if plan.resource is not None:
            form["resource"] = plan.resource
        if plan.scopes:
            form["scope"] = " ".join(plan.scopes)
        what = "ID-JAG request"
        document = await self.idp.post(form, what)
        if document.get("issued_token_type") != ID_JAG:
            raise ExchangeError(f"the {what} answer's issued_token_type is not {ID_JAG}")
        assertion = self.idp.read(document, what, ("N_A",)).access_token
        try:
            claims = parse_jws(assertion).claims
        except TokenError as exc:
            raise ExchangeError(f"the ID-JAG from {plan.idp_token_url} is not a JWT: "
                                f"{exc}") from None
        audience = claims.get("aud")
        if (audience if isinstance(audience, str) else
                audience[0] if isinstance(audience, list) and len(audience) == 1 else None
                ) != plan.audience:
            raise ExchangeError(f"the ID-JAG from {plan.idp_token_url} is not for audience "
                                f"{plan.audience} alone")
        resource = claims.get("resource")
        if plan.resource is not None and plan.resource not in (
                resource if isinstance(resource, list) else [resource]):
            raise ExchangeError(f"the ID-JAG from {plan.idp_token_url} is not for resource "
                                f"{plan.resource}")
        return assertion

    async def _grant(self, id_token: str) -> tuple[ExchangedToken, float]:
        form = {"grant_type": JWT_BEARER, "assertion": await self._id_jag(id_token)}
        if self.plan.scopes:
            form["scope"] = " ".join(self.plan.scopes)
        what = "JWT-bearer grant of the ID-JAG"
        token = self.target.read(await self.target.post(form, what), what)
        return token, self.grants.reusable_until(token)
