"""The outgoing strategies: what a backend receives in place of the client's token.

* ``none`` (also ``unauthenticated``): nothing.
* ``headerInjection`` / ``bearerToken``: one header with a Secret's value (``Authorization:
  Bearer <token>`` for the latter), the same for every caller.
* ``upstreamInject``: ``Authorization: Bearer`` with the calling user's stored upstream access
  token of ``providerName`` (the embedded authorization server keeps them per session: the
  ``tsid`` of the user's access token).
* ``tokenExchange``: an RFC 8693 exchange (:mod:`.exchange`, cached) whose subject is the
  caller's validated incoming token (vmcp's own JWT when the embedded authorization server issued
  it), or with ``subjectProviderName`` the user's stored upstream access token of that provider.
* ``obo`` and ``xaa``: JWT-bearer grants of the user's assertion (:mod:`.delegation`).
* ``awsSts``: AWS STS credentials of the caller's role that sign each request (:mod:`.aws_sts`):
  a :class:`RequestSigner`, whose headers depend on the request itself.

A strategy computes headers for a :class:`~vmcp_trio.auth.caller.Caller` (who the request is for);
when it cannot, it raises :class:`CredentialError`, which the gateway turns into a JSON-RPC error
naming the backend. The client's own ``Authorization`` is never forwarded: backends receive only
what a strategy returns.
"""

from __future__ import annotations

from typing import Protocol, overload, runtime_checkable

from ...http.client import HttpClient
from ...resources.plan import (
    AwsStsAuth,
    CrossAppAccessAuth,
    NoOutgoingAuth,
    OnBehalfOfAuth,
    OutgoingPlan,
    StaticCredentialAuth,
    TokenExchangeAuth,
    UpstreamInjectAuth,
)
from ..caller import Caller
from ..oauth.tokens import ID_TOKEN_TYPE
from .aws_sts import AwsSts
from .delegation import CrossAppAccess, OnBehalfOf
from .exchange import ExchangeError, TokenExchanger
from .shared_exchange import SharedExchangeCache
from .sigv4 import OutgoingRequest
from .subject import CredentialError, UpstreamTokens, session_of_caller, subject_token

__all__ = ["BackendStrategy", "CredentialError", "OutgoingRequest", "OutgoingStrategy",
           "RequestSigner", "UpstreamTokens", "build_strategy"]


class OutgoingStrategy(Protocol):
    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]: ...


@runtime_checkable
class RequestSigner(Protocol):
    """A strategy whose headers sign the request they go with."""

    async def sign(self, caller: Caller | None,
                   request: OutgoingRequest) -> list[tuple[str, str]]: ...


BackendStrategy = OutgoingStrategy | RequestSigner
"""What a backend's outgoing auth is: headers for a caller, or a signature of each request."""


class NoCredential:
    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return []


class StaticCredential:
    """``headerInjection`` / ``bearerToken``: the same secret header on every request, whoever
    the caller (the backend's own credential; the caller's token is never passed on)."""

    def __init__(self, plan: StaticCredentialAuth) -> None:
        self.header = [(plan.header, plan.value.value.decode())]

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return self.header


class UpstreamInject:
    def __init__(self, plan: UpstreamInjectAuth, tokens: UpstreamTokens | None) -> None:
        self.plan = plan
        self.tokens = tokens

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        if self.tokens is None:
            raise CredentialError(f"{self.plan.config} needs the embedded authorization server")
        token = await self.tokens.upstream_access_token(session_of_caller(caller),
                                                        self.plan.provider)
        if token is None:
            raise CredentialError(f"no {self.plan.provider} token is stored for this session "
                                  "(log in again)")
        return [("authorization", f"Bearer {token}")]


class TokenExchange:
    def __init__(self, plan: TokenExchangeAuth, exchanger: TokenExchanger,
                 tokens: UpstreamTokens | None) -> None:
        self.plan = plan
        self.exchanger = exchanger
        self.tokens = tokens

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        try:
            subject = await subject_token(
                caller, provider=self.plan.subject_provider, tokens=self.tokens,
                config=self.plan.config, id_token=self.plan.subject_token_type == ID_TOKEN_TYPE)
            exchanged = await self.exchanger.exchange(
                subject, audience=self.plan.audience, scopes=self.plan.scopes,
                subject_type=self.plan.subject_token_type)
        except ExchangeError as exc:
            raise CredentialError(str(exc)) from None
        if self.plan.header_name:
            return [(self.plan.header_name.lower(), exchanged.access_token)]
        return [("authorization", f"Bearer {exchanged.access_token}")]


@overload
def build_strategy(plan: TokenExchangeAuth, *, client: HttpClient,
                   exchangers: dict[tuple[str, str | None], TokenExchanger],
                   tokens: UpstreamTokens | None, cache: bool = True,
                   shared: SharedExchangeCache | None = None) -> OutgoingStrategy: ...


@overload
def build_strategy(plan: OutgoingPlan, *, client: HttpClient,
                   exchangers: dict[tuple[str, str | None], TokenExchanger],
                   tokens: UpstreamTokens | None, cache: bool = True,
                   shared: SharedExchangeCache | None = None) -> BackendStrategy: ...


def build_strategy(plan: OutgoingPlan, *, client: HttpClient,
                   exchangers: dict[tuple[str, str | None], TokenExchanger],
                   tokens: UpstreamTokens | None, cache: bool = True,
                   shared: SharedExchangeCache | None = None) -> BackendStrategy:
    """The strategy of one backend. Exchangers are shared per (tokenUrl, clientId), so that
    backends exchanging at one service share its cache (and, with ``shared``, the replicas
    share it too); the other strategies keep their caches of their own."""
    if isinstance(plan, NoOutgoingAuth):
        return NoCredential()
    if isinstance(plan, UpstreamInjectAuth):
        return UpstreamInject(plan, tokens)
    if isinstance(plan, StaticCredentialAuth):
        return StaticCredential(plan)
    if isinstance(plan, AwsStsAuth):
        return AwsSts(plan, client, tokens)
    if isinstance(plan, OnBehalfOfAuth):
        return OnBehalfOf(plan, client, tokens)
    if isinstance(plan, CrossAppAccessAuth):
        return CrossAppAccess(plan, client, tokens)
    key = (plan.token_url, plan.client_id)
    exchanger = exchangers.get(key)
    if exchanger is None:
        exchanger = exchangers[key] = TokenExchanger(
            client, token_url=plan.token_url, client_id=plan.client_id,
            client_secret=plan.client_secret.value.decode() if plan.client_secret else None,
            cache=cache, shared=shared if cache else None)
    return TokenExchange(plan, exchanger, tokens)
