"""``/oauth/token``: redeeming a code, rotating a refresh token, issuing the tokens.

The client authenticates as it registered (:func:`~.endpoints.authenticate_client`), then asks
for a grant it registered: ``authorization_code`` and ``refresh_token`` (here), token exchange
for a delegate client (:mod:`.exchange_grant`); the JWT-bearer grant needs no client, its
assertion is the credential (:mod:`.assertion_grant`; credentials given anyway are checked).
A grant the configuration does not enable is ``unsupported_grant_type``, one the client did not
register ``unauthorized_client``. Tokens we issue:

* Access tokens are JWTs signed with the first configured key (``iss``, ``sub``, ``aud``,
  ``exp``, ``iat``, ``jti``, ``client_id``, ``scope``/``scp``, ``tsid``: the session id that keys
  the upstream tokens; ``name`` and ``email`` when the upstream login gave them; ``act`` for a
  delegated token). The other grants issue an access token only (:class:`~.endpoints.AccessGrant`).
* Codes and refresh tokens are opaque and HMAC-protected (:mod:`.opaque`); a refresh token is
  ``<family id>~<token>``.

Rules kept here:

* A code works once, for the client it was issued to, with its redirect URI and PKCE verifier: a
  replay revokes the refresh tokens it issued and the login session.
* Refresh tokens rotate on every use; presenting an old one revokes the whole family and the
  session. A refresh may narrow the scopes, never widen them.
* ``resource`` (RFC 8707), bound to the code at ``/oauth/authorize``, is checked again: when
  given, it must be the one the authorization request named.
* A grant whose login session ended (here or at another replica) is refused.
* A client known by its metadata document keeps refreshing only while the document still
  describes a client. A registered client is kept for ``CLIENT_LIFETIME`` from its first
  redeemed code on, renewed while it is in use (:mod:`.registration`).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..auth.oauth.tokens import ACCESS_TOKEN_TYPE, JWT_BEARER, TOKEN_EXCHANGE
from ..http.asgi import HttpRequest, Send, send_json
from .assertion_grant import AssertionGrant
from .cimd import ClientDocumentError, ClientDocuments
from .endpoints import (
    NO_STORE,
    AccessGrant,
    AuditRecord,
    authenticate_client,
    has_credentials,
    read_form,
    send_oauth_error,
)
from .exchange_grant import ExchangeGrant
from .keys import SigningKeys
from .opaque import OpaqueTokens
from .registration import CLIENT_LIFETIME
from .storage import RefreshFamily, RegisteredClient, Storage
from .validation import OAuthError, check_resource, parse_scope, verify_pkce

__all__ = ["TokenEndpoint"]


class TokenEndpoint:
    def __init__(self, storage: Storage, *, documents: ClientDocuments, keys: SigningKeys,
                 opaque: OpaqueTokens, issuer: str, resources: tuple[str, ...],
                 access_lifetime: float, refresh_lifetime: float,
                 revoke_session: Callable[[str], Awaitable[None]],
                 session_revoked: Callable[[str], Awaitable[bool]],
                 record: AuditRecord, assertions: AssertionGrant,
                 exchange: ExchangeGrant) -> None:
        self.storage = storage
        self.documents = documents
        self.keys = keys
        self.opaque = opaque
        self.issuer = issuer
        self.resources = resources
        """The resource indicators (and audiences) this server issues tokens for."""
        self.access_lifetime = access_lifetime
        self.refresh_lifetime = refresh_lifetime
        self.revoke_session = revoke_session
        self.session_revoked = session_revoked
        self.record = record
        self.assertions = assertions
        self.exchange = exchange

    def grant_types(self) -> list[str]:
        """The grants answered here (discovery's ``grant_types_supported``): the JWT-bearer
        grant with a trusted issuer that enables it, token exchange with delegate clients."""
        types = ["authorization_code", "refresh_token"]
        if self.assertions.enabled:
            types.append(JWT_BEARER)
        if self.exchange.delegates:
            types.append(TOKEN_EXCHANGE)
        return types

    async def _client(self, request: HttpRequest, form: dict[str, str]) -> RegisteredClient:
        return await authenticate_client(request, form, self.storage, self.documents,
                                         self.exchange.delegates)

    async def serve(self, request: HttpRequest, send: Send) -> None:
        grant_type: str | None = None
        client_id: str | None = None
        try:
            form = await read_form(request)
            grant_type = form.get("grant_type")
            if grant_type not in self.grant_types():
                raise OAuthError("unsupported_grant_type", "grant_type must be one of "
                                 + ", ".join(self.grant_types()))
            if grant_type == JWT_BEARER:
                if has_credentials(request, form):  # not needed, but never ignored when given
                    await self._client(request, form)
                grant = await self.assertions.grant(form)
                client_id = grant.client_id
                answer, subject = self._access(grant), grant.subject
            else:
                client = await self._client(request, form)
                client_id = client.client_id
                if grant_type not in client.grant_types:
                    raise OAuthError("unauthorized_client", "the client is not registered for "
                                                            "this grant_type")
                if grant_type == "authorization_code":
                    answer, subject = await self._redeem_code(client, form)
                elif grant_type == "refresh_token":
                    answer, subject = await self._refresh(client, form)
                else:
                    grant = await self.exchange.grant(client, form)
                    answer = {**self._access(grant), "issued_token_type": ACCESS_TOKEN_TYPE}
                    subject = grant.subject
        except OAuthError as exc:
            known = grant_type if grant_type in self.grant_types() else (grant_type or "")[:40]
            self.record("token_refreshed" if grant_type == "refresh_token" else "token_issued",
                        "denied" if exc.status == 401 else "failure", request,
                        client_id=client_id, grant_type=known or None, reason=exc.error)
            await send_oauth_error(send, exc)
            return
        self.record("token_refreshed" if grant_type == "refresh_token" else "token_issued",
                    "success", request, client_id=client_id, subject=subject,
                    grant_type=grant_type)
        await send_json(send, 200, answer, NO_STORE)

    def _access(self, grant: AccessGrant) -> dict[str, Any]:
        """The token response of one access token (our JWT: the claims of every grant)."""
        now, lifetime = int(time.time()), max(int(grant.lifetime), 0)
        claims: dict[str, Any] = {
            "iss": self.issuer, "sub": grant.subject, "aud": [grant.audience], "iat": now,
            "exp": now + lifetime, "jti": secrets.token_urlsafe(16),
            "client_id": grant.client_id, "scope": " ".join(grant.scopes),
            "scp": list(grant.scopes)}
        for name, value in (("tsid", grant.session_id), ("name", grant.name),
                            ("email", grant.email), ("act", grant.act)):
            if value:
                claims[name] = value
        answer: dict[str, Any] = {"access_token": self.keys.sign(claims),
                                  "token_type": "Bearer", "expires_in": lifetime}
        if grant.scopes:
            answer["scope"] = " ".join(grant.scopes)
        return answer

    async def _redeem_code(self, client: RegisteredClient,
                           form: dict[str, str]) -> tuple[dict[str, Any], str]:
        """The token response and the subject it is for."""
        code_id = self.opaque.check("code", form.get("code", ""))
        if code_id is None:
            raise OAuthError("invalid_grant", "the code is invalid")
        grant, first = await self.storage.redeem_code(code_id)
        if grant is None:
            raise OAuthError("invalid_grant", "the code is unknown or expired")
        if not first:
            await self.revoke_session(grant.session_id)
            if grant.family_id is not None:
                await self.storage.revoke_family(grant.family_id)
            raise OAuthError("invalid_grant", "the code was already used; the tokens it "
                                              "issued are revoked")
        if grant.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the code was issued to another client")
        if form.get("redirect_uri", grant.redirect_uri) != grant.redirect_uri:
            raise OAuthError("invalid_grant", "redirect_uri differs from the authorization "
                                              "request's")
        verify_pkce(grant.code_challenge, "S256", form.get("code_verifier"))
        if await self.session_revoked(grant.session_id):
            raise OAuthError("invalid_grant", "the login session of this code ended")
        resource = self._same_resource(form, grant.resource)
        family_id = secrets.token_urlsafe(18)
        answer = await self._issue(client.client_id, grant.subject, grant.session_id,
                                   grant.scopes, resource, grant.name, grant.email, family_id,
                                   new_family=True)
        await self.storage.set_code_family(code_id, family_id)
        if self.documents.is_document_client(client.client_id):
            return answer, grant.subject  # not registered here: nothing to keep
        if client.secret_sha256 is not None:  # ends with its secret (client_secret_expires_at)
            if not client.used:
                await self.storage.put_client(dataclasses.replace(client, used=True))
        elif not client.used or client.expires_at - time.time() < CLIENT_LIFETIME / 2:
            await self.storage.put_client(dataclasses.replace(  # a client in use stays
                client, used=True, expires_at=time.time() + CLIENT_LIFETIME))
        return answer, grant.subject

    def _same_resource(self, form: dict[str, str], bound: str | None) -> str | None:
        """RFC 8707 at the token endpoint: a resource, when given, must be the one the
        authorization request named."""
        asked = check_resource(form.get("resource"), allowed=self.resources)
        if asked is not None and asked != bound:
            raise OAuthError("invalid_target", "resource differs from the authorization "
                                               "request's")
        return bound

    async def _refresh(self, client: RegisteredClient,
                       form: dict[str, str]) -> tuple[dict[str, Any], str]:
        """The token response and the subject it is for."""
        family_id, _, token = form.get("refresh_token", "").partition("~")
        presented = self.opaque.check("rt", token)
        family = await self.storage.get_family(family_id) if presented else None
        if family is None or presented is None:
            raise OAuthError("invalid_grant", "the refresh token is invalid or expired")
        if family.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the refresh token was issued to another client")
        if family.revoked:
            raise OAuthError("invalid_grant", "the refresh token was revoked")
        if await self.session_revoked(family.session_id):
            await self.storage.revoke_family(family_id)
            raise OAuthError("invalid_grant", "the login session of this refresh token ended")
        if self.documents.is_document_client(client.client_id):
            await self._document_still_valid(client.client_id)
        resource = self._same_resource(form, family.resource)
        scopes = family.scopes
        if form.get("scope"):
            narrowed = parse_scope(form["scope"])
            if not set(narrowed) <= set(scopes):
                raise OAuthError("invalid_scope", "scope may only narrow the granted scopes")
            scopes = narrowed
        return await self._issue(client.client_id, family.subject, family.session_id, scopes,
                                 resource, family.name, family.email, family_id,
                                 rotate_from=presented), family.subject

    async def _document_still_valid(self, client_id: str) -> None:
        """A client known by its metadata document keeps refreshing only while the document
        still describes a client (fetched again once the cached copy is stale)."""
        try:
            await self.documents.resolve(client_id)
        except ClientDocumentError as exc:
            if exc.unavailable:
                raise OAuthError("temporarily_unavailable", f"the client's metadata document "
                                 f"cannot be fetched now: {exc}", status=503) from None
            raise OAuthError("invalid_client", f"the client's metadata document is no longer "
                             f"valid: {exc}", status=401) from None

    async def _issue(self, client_id: str, subject: str, session_id: str,
                     scopes: tuple[str, ...], resource: str | None, name: str | None,
                     email: str | None, family_id: str, *, new_family: bool = False,
                     rotate_from: str | None = None) -> dict[str, Any]:
        now = int(time.time())
        refresh, refresh_id = self.opaque.mint("rt")
        refresh_expires = now + self.refresh_lifetime
        if new_family:
            await self.storage.put_family(RefreshFamily(
                family_id=family_id, current_id=refresh_id, client_id=client_id,
                subject=subject, session_id=session_id, scopes=scopes, resource=resource,
                name=name, email=email, expires_at=refresh_expires))
        else:
            assert rotate_from is not None
            rotated = await self.storage.rotate(family_id, rotate_from, refresh_id,
                                                refresh_expires)
            if rotated is None:
                await self.revoke_session(session_id)
                raise OAuthError("invalid_grant", "the refresh token was already used (reuse "
                                                  "after rotation); its family is revoked")
        audience = resource or (self.resources[0] if self.resources else self.issuer)
        return {**self._access(AccessGrant(subject, client_id, audience, scopes,
                                           self.access_lifetime, session_id, name, email)),
                "refresh_token": f"{family_id}~{refresh}"}
