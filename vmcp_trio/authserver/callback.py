"""``/oauth/callback``: the end of each upstream leg, the next leg, and at the chain's end the code.

A login at ``/oauth/authorize`` (:mod:`.authorize`) sends the user to every configured upstream
provider in order, one leg each; every leg comes back here. Rules kept here:

* The leg is found by its internal ``state`` (the key of the
  :class:`~.storage.PendingAuthorization`, taken: single use), and its provider by the name the
  pending record stored, never by anything the request says (IdP mix-up).
* Towards the upstream providers vmcp is a client itself: the ``iss`` of their authorization
  response is checked (RFC 9207) before the response is acted on, its error included.
* The code is exchanged (with the leg's PKCE verifier and nonce, as the client the leg started
  as) and the tokens are kept in the pending record, keyed by the issuer they came from, with
  that client id and the scope granted (the one asked for when the provider does not say); the
  user's internal id is derived from the first leg's subject. Then the next leg starts.
* After the last leg the upstream tokens are stored under the login's new session id (none
  with ``disableUpstreamTokenInjection``: then no backend may use them), and the client gets
  its code (opaque, HMAC-protected, bound to the client, redirect URI, PKCE
  challenge, scopes and resource) with its ``state`` and our ``iss``.
* An upstream error, or a user who walks away, leaves nothing stored: the tokens of finished
  legs live only in the pending record, which expires. The client gets ``access_denied`` or
  ``server_error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from ..http.asgi import HttpRequest, Send
from .endpoints import AuditRecord, client_redirect, redirect, sha256, show_error
from .opaque import OpaqueTokens
from .storage import CodeGrant, PendingAuthorization, Storage, StoredUpstream
from .upstream import UpstreamError, UpstreamProvider

__all__ = ["CallbackEndpoint"]

log = logging.getLogger("vmcp.authserver")


class CallbackEndpoint:
    def __init__(self, storage: Storage, *, providers: Mapping[str, UpstreamProvider],
                 opaque: OpaqueTokens, issuer: str, callback_url: str, code_lifetime: float,
                 refresh_lifetime: float,
                 start_leg: Callable[[Send, PendingAuthorization], Awaitable[None]],
                 record: AuditRecord, keep_upstream: bool = True) -> None:
        self.storage = storage
        self.providers = providers
        self.opaque = opaque
        self.issuer = issuer
        self.callback_url = callback_url
        self.code_lifetime = code_lifetime
        self.refresh_lifetime = refresh_lifetime
        """How long the upstream tokens of a login are kept (as long as its refresh tokens)."""
        self.start_leg = start_leg
        self.record = record
        self.keep_upstream = keep_upstream
        """False (``disableUpstreamTokenInjection``): the upstream tokens are not kept; the
        providers only say who the user is."""

    async def serve(self, request: HttpRequest, send: Send) -> None:
        query = {k: v[0] for k, v in request.query.items() if v}
        pending = await self.storage.take_pending(query.get("state", ""))
        if pending is None:
            await show_error(send, 400, "this login is unknown, expired or already finished "
                                        "(state)")
            return
        name = pending.providers[pending.leg]
        provider = self.providers[name]
        try:  # RFC 9207: before the response is acted on, its error included
            await provider.check_response_issuer(request.query.get("iss", []))
        except UpstreamError as exc:
            log.warning("callback: %s", exc)
            await self._fail_chain(request, send, pending, "access_denied", str(exc)[:300])
            return
        if "error" in query or "code" not in query:
            detail = query.get("error", "no code")[:100]
            await self._fail_chain(request, send, pending, "access_denied",
                                   f"the login at {name} did not complete ({detail})")
            return
        try:
            tokens, identity = await provider.finish(
                code=query["code"], verifier=pending.verifier, nonce=pending.nonce,
                redirect_uri=self.callback_url, client_id=pending.upstream_client_id)
        except UpstreamError as exc:
            log.warning("callback: %s", exc)
            await self._fail_chain(request, send, pending, "server_error", str(exc)[:300])
            return
        if pending.subject is None:
            pending.subject = "u-" + sha256(f"{name}\0{identity.subject}")[:32]
        pending.name = pending.name or identity.name
        pending.email = pending.email or identity.email
        if self.keep_upstream:
            pending.upstream.append(StoredUpstream(
                session_id=pending.session_id, provider=name,
                access_token=tokens.access_token, refresh_token=tokens.refresh_token,
                expires_at=tokens.expires_at,
                scope=tokens.scope or " ".join(provider.plan.scopes) or None,  # RFC 6749 5.1
                subject=identity.subject, issued_at=time.time(), id_token=tokens.id_token,
                issuer=provider.issuer, client_id=pending.upstream_client_id))
        if pending.leg + 1 < len(pending.providers):
            pending.leg += 1
            await self.start_leg(send, pending)
            return
        now = time.time()
        for upstream in pending.upstream:
            await self.storage.put_upstream(upstream, now + self.refresh_lifetime)
        code, code_id = self.opaque.mint("code")
        await self.storage.put_code(CodeGrant(
            code_id=code_id, client_id=pending.client_id, redirect_uri=pending.redirect_uri,
            code_challenge=pending.code_challenge, scopes=pending.scopes,
            resource=pending.resource, subject=pending.subject, session_id=pending.session_id,
            name=pending.name, email=pending.email, expires_at=now + self.code_lifetime))
        self.record("login", "success", request, client_id=pending.client_id,
                    subject=pending.subject, provider=",".join(pending.providers))
        await redirect(send, client_redirect(self.issuer, pending.redirect_uri, {
            "code": code, "state": pending.client_state}))

    async def _fail_chain(self, request: HttpRequest, send: Send,
                          pending: PendingAuthorization, error: str, description: str) -> None:
        pending.upstream.clear()  # nothing of an abandoned chain is kept
        self.record("login", "failure", request, client_id=pending.client_id,
                    provider=pending.providers[pending.leg], reason=error)
        await redirect(send, client_redirect(self.issuer, pending.redirect_uri, {
            "error": error, "error_description": description, "state": pending.client_state}))
