"""Whose token an outgoing strategy presents for a caller, and how it says it has none.

One job: the subject token of the strategies that trade the user's token for a credential of
their own (token exchange, on-behalf-of, Cross-App Access, AWS STS): the caller's validated
token, or with a provider name the user's token of that upstream provider, stored by the
embedded authorization server at login (found through the ``tsid`` of the caller's vmcp token).
A strategy that cannot have one raises :class:`CredentialError`, which the gateway turns into a
JSON-RPC error naming the backend; its message never holds a token.
"""

from __future__ import annotations

from typing import Protocol

from ..caller import Caller

__all__ = ["CredentialError", "UpstreamTokens", "session_of_caller", "subject_token"]


class CredentialError(Exception):
    """No credential for this backend and caller (the message says why, never a token)."""


class UpstreamTokens(Protocol):
    """Where the stored upstream tokens live (the embedded authorization server)."""

    async def upstream_access_token(self, session_id: str, provider: str) -> str | None: ...

    async def upstream_id_token(self, session_id: str, provider: str) -> str | None: ...


def session_of_caller(caller: Caller | None) -> str:
    session = caller.identity.claims.get("tsid") if caller is not None else None
    if not isinstance(session, str):
        raise CredentialError("the caller has no session of the embedded authorization "
                              "server (upstream tokens come from its login)")
    return session


async def subject_token(caller: Caller | None, *, provider: str | None,
                        tokens: UpstreamTokens | None, config: str,
                        id_token: bool = False) -> str:
    """The caller's token; with ``provider``, the user's stored access token of that provider
    (its ID token with ``id_token``)."""
    if provider is not None:
        if tokens is None:
            raise CredentialError(f"{config} names an upstream provider, which needs the "
                                  "embedded authorization server")
        read = tokens.upstream_id_token if id_token else tokens.upstream_access_token
        token = await read(session_of_caller(caller), provider)
        if token is None:
            raise CredentialError(f"no {provider} {'ID token' if id_token else 'token'} is "
                                  "stored for this session (log in again)")
        return token
    if caller is None or caller.token is None:
        raise CredentialError("the request carries no token to exchange (anonymous "
                              "incoming auth?)")
    return caller.token
