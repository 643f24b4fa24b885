"""What the proxy sends the remote server to prove who it is: the outgoing side of ``vmcp proxy``.

Each credential is an :class:`~vmcp_trio.auth.outgoing.strategies.OutgoingStrategy` (the
gateway's interface: headers for a caller, or :class:`CredentialError` saying why there are
none), plus :meth:`RemoteCredential.rejected`, which the forwarder calls once when the remote
answers 401 (or 403) to a request that carried it: True when a new value may work (a refresh,
a new login, a step-up to more scopes), so the request is sent again, once; False when nothing
would change (a static token).

* :class:`StaticBearer`: ``--remote-auth-bearer-token`` or ``-file``.
* :class:`Exchanged`: RFC 8693 (``--token-exchange-url``) with the gateway's strategy and its
  cached, single-flight exchanger; a 401 from the remote does not retry (the exchanged token is
  what the exchange service says it is).
* The OAuth login of ``--remote-auth``: :mod:`.remote_login`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from ..auth.caller import Caller
from ..auth.outgoing.strategies import CredentialError, OutgoingStrategy
from ..http.client import HttpClient, HttpResponse

__all__ = ["CredentialError", "Exchanged", "LoginPending", "RemoteCredential", "StaticBearer",
           "credential_headers", "posted", "renewed"]


class LoginPending(CredentialError):
    """No remote token can be had now (the login has not finished, or failed): 503."""


class RemoteCredential(OutgoingStrategy, Protocol):
    async def rejected(self, status: int, challenge: str | None) -> bool:
        """The remote refused the value sent last (``status`` 401 or 403, with its
        ``WWW-Authenticate``): whether a new one may work."""
        ...


class StaticBearer:
    def __init__(self, token: str) -> None:
        self._authorization = f"Bearer {token}"

    def __repr__(self) -> str:
        return "StaticBearer(<token>)"

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return [("authorization", self._authorization)]

    async def rejected(self, status: int, challenge: str | None) -> bool:
        return False


class Exchanged:
    def __init__(self, strategy: OutgoingStrategy) -> None:
        self.strategy = strategy

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return await self.strategy.headers(caller)

    async def rejected(self, status: int, challenge: str | None) -> bool:
        return False


async def credential_headers(credentials: Sequence[RemoteCredential], caller: Caller | None,
                             injected: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """``injected`` and the headers of each credential for ``caller`` (raises
    CredentialError, :class:`LoginPending` among them)."""
    added = list(injected)
    for credential in credentials:
        added += await credential.headers(caller)
    return added


async def renewed(credentials: Sequence[RemoteCredential], status: int,
                  challenge: str | None) -> bool:
    """After the remote refused a request: whether one of ``credentials`` has a new value worth
    one more try (each is asked)."""
    again = False
    for credential in credentials:
        again = await credential.rejected(status, challenge) or again
    return again


@asynccontextmanager
async def posted(client: HttpClient, url: str, transport: Sequence[tuple[str, str]],
                 body: bytes, credentials: Sequence[RemoteCredential],
                 injected: Sequence[tuple[str, str]] = ()) -> AsyncIterator[HttpResponse]:
    """The response to a POST of ``body`` with the ``transport`` headers, ``injected`` and the
    credentials'; a 401 or 403 asks the credentials once for new values (:func:`renewed`) and
    the POST goes again, whose response is the caller's whatever it is (raises HttpError,
    :class:`LoginPending`)."""
    for attempt in (1, 2):
        headers = [*transport, *await credential_headers(credentials, None, injected)]
        async with client.stream("POST", url, headers=headers, body=body) as response:
            if response.status in (401, 403) and attempt == 1 and await renewed(
                    credentials, response.status, response.header("www-authenticate")):
                continue
            yield response
            return
