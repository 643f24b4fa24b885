"""The outgoing strategies: what a backend receives in place of the client's token.

* ``none``: nothing.
* ``headerInjection`` / ``bearerToken``: one header with a Secret's value (``Authorization:
  Bearer <token>`` for the latter), the same for every caller.
* ``upstreamInject``: ``Authorization: Bearer`` with the calling user's stored upstream access
  token of ``providerName`` (the embedded authorization server keeps them per session: the
  ``tsid`` of the user's access token).
* ``tokenExchange``: an RFC 8693 exchange (:mod:`.exchange`, cached) whose subject is the
  caller's validated incoming token (vmcp's own JWT when the embedded authorization server issued
  it), or with ``subjectProviderName`` the user's stored upstream access token of that provider.

A strategy computes headers for a :class:`~vmcp_trio.auth.caller.Caller` (who the request is for);
when it cannot, it raises :class:`CredentialError`, which the gateway turns into a JSON-RPC error
naming the backend. The client's own ``Authorization`` is never forwarded: backends receive only
what a strategy returns.
"""

from __future__ import annotations

from typing import Protocol

from ...http.client import HttpClient
from ...resources.plan import (
    NoOutgoingAuth,
    OutgoingPlan,
    StaticCredentialAuth,
    TokenExchangeAuth,
    UpstreamInjectAuth,
)
from ..caller import Caller
from .exchange import ExchangeError, TokenExchanger
from .shared_exchange import SharedExchangeCache

ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"

__all__ = ["CredentialError", "OutgoingStrategy", "UpstreamTokens", "build_strategy"]


class CredentialError(Exception):
    """No credential for this backend and caller (the message says why, never a token)."""


class UpstreamTokens(Protocol):
    """Where the stored upstream tokens live (the embedded authorization server)."""

    async def upstream_access_token(self, session_id: str, provider: str) -> str | None: ...

    async def upstream_id_token(self, session_id: str, provider: str) -> str | None: ...


class OutgoingStrategy(Protocol):
    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]: ...


class NoCredential:
    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return []


def _session_of_caller(caller: Caller | None) -> str:
    session = caller.identity.claims.get("tsid") if caller is not None else None
    if not isinstance(session, str):
        raise CredentialError("the caller has no session of the embedded authorization "
                              "server (upstream tokens come from its login)")
    return session


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
        token = await self.tokens.upstream_access_token(_session_of_caller(caller),
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

    async def _subject(self, caller: Caller | None) -> str:
        if self.plan.subject_provider is not None:
            if self.tokens is None:
                raise CredentialError(f"{self.plan.config} names subjectProviderName, which "
                                      "needs the embedded authorization server")
            wants_id_token = self.plan.subject_token_type == ID_TOKEN_TYPE
            read = (self.tokens.upstream_id_token if wants_id_token
                    else self.tokens.upstream_access_token)
            token = await read(_session_of_caller(caller), self.plan.subject_provider)
            if token is None:
                raise CredentialError(f"no {self.plan.subject_provider} token is stored for "
                                      "this session (log in again)")
            return token
        if caller is None or caller.token is None:
            raise CredentialError("the request carries no token to exchange (anonymous "
                                  "incoming auth?)")
        return caller.token

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        try:
            exchanged = await self.exchanger.exchange(
                await self._subject(caller), audience=self.plan.audience, scopes=self.plan.scopes,
                subject_type=self.plan.subject_token_type)
        except ExchangeError as exc:
            raise CredentialError(str(exc)) from None
        if self.plan.header_name:
            return [(self.plan.header_name.lower(), exchanged.access_token)]
        return [("authorization", f"Bearer {exchanged.access_token}")]


def build_strategy(plan: OutgoingPlan, *, client: HttpClient,
                   exchangers: dict[tuple[str, str | None], TokenExchanger],
                   tokens: UpstreamTokens | None, cache: bool = True,
                   shared: SharedExchangeCache | None = None) -> OutgoingStrategy:
    """The strategy of one backend. Exchangers are shared per (tokenUrl, clientId), so that
    backends exchanging at one service share its cache (and, with ``shared``, the replicas
    share it too)."""
    if isinstance(plan, NoOutgoingAuth):
        return NoCredential()
    if isinstance(plan, UpstreamInjectAuth):
        return UpstreamInject(plan, tokens)
    if isinstance(plan, StaticCredentialAuth):
        return StaticCredential(plan)
    key = (plan.token_url, plan.client_id)
    exchanger = exchangers.get(key)
    if exchanger is None:
        exchanger = exchangers[key] = TokenExchanger(
            client, token_url=plan.token_url, client_id=plan.client_id,
            client_secret=plan.client_secret.value.decode() if plan.client_secret else None,
            cache=cache, shared=shared if cache else None)
    return TokenExchange(plan, exchanger, tokens)
