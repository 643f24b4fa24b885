"""``/oauth/revoke``: token revocation (RFC 7009).

The client authenticates as at the token endpoint (:func:`~.endpoints.authenticate_client`) and
names a token: one of its refresh tokens or access tokens. Rules kept here:

* Only the client a token was issued to may revoke it (section 2.1); for any other token, and for
  a token that is not ours, nothing is said either way: the answer is 200 all the same.
* A refresh token must be its family's current one (or the one it replaced, within the retry
  grace); an access token must verify with our keys and name our issuer and this client.
* Revoking either ends its whole login session (section 2.1 allows a server to revoke the related
  tokens): the refresh family is revoked, the session's upstream tokens are dropped, and its
  access tokens stop working, here and at every replica sharing the storage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..auth.jwt import TokenError, parse_jws, verify_signature
from ..http.asgi import HttpRequest, Send, send_empty
from .cimd import ClientDocuments
from .endpoints import NO_STORE, AuditRecord, authenticate_client, read_form, send_oauth_error
from .keys import SigningKeys
from .opaque import OpaqueTokens
from .storage import RegisteredClient, Storage
from .validation import OAuthError

__all__ = ["RevocationEndpoint"]


class RevocationEndpoint:
    def __init__(self, storage: Storage, *, documents: ClientDocuments, keys: SigningKeys,
                 opaque: OpaqueTokens, issuer: str,
                 revoke_session: Callable[[str], Awaitable[None]],
                 record: AuditRecord) -> None:
        self.storage = storage
        self.documents = documents
        self.keys = keys
        self.opaque = opaque
        self.issuer = issuer
        self.revoke_session = revoke_session
        self.record = record

    async def serve(self, request: HttpRequest, send: Send) -> None:
        """RFC 7009: always 200 for a well-formed request (an unknown token is no error)."""
        try:
            form = await read_form(request)
            client = await authenticate_client(request, form, self.storage, self.documents)
        except OAuthError as exc:
            await send_oauth_error(send, exc)
            return
        token = form.get("token", "")
        session = await self._revocable(token, client)
        if session is not None:
            family_id, subject = session
            if family_id is not None:
                await self.storage.revoke_family(family_id)
            await self.revoke_session(subject[0])
            self.record("token_revoked", "success", request, client_id=client.client_id,
                        subject=subject[1])
        await send_empty(send, 200, NO_STORE)

    async def _revocable(self, token: str, client: RegisteredClient
                         ) -> tuple[str | None, tuple[str, str]] | None:
        """What revoking ``token`` for ``client`` ends: ``(refresh family or None, (session
        id, subject))``; None when the token is not one of ours issued to this client."""
        family_id, _, opaque = token.partition("~")
        presented = self.opaque.check("rt", opaque) if opaque else None
        if presented is not None:
            family = await self.storage.get_family(family_id)
            if family is None or family.client_id != client.client_id or not (
                    family.is_current(presented) or presented == family.previous_id):
                return None
            return family_id, (family.session_id, family.subject)
        try:
            parsed = parse_jws(token)
            key = await self.keys.key_for(parsed.kid)
            if key is None:
                return None
            verify_signature(parsed, key)
        except TokenError:
            return None
        claims = parsed.claims
        if (claims.get("iss") != self.issuer or claims.get("client_id") != client.client_id
                or not isinstance(claims.get("tsid"), str)):
            return None
        return None, (claims["tsid"], str(claims.get("sub")))
