"""``/oauth/register``: dynamic client registration (RFC 7591).

A client registers with JSON metadata (:func:`~.validation.validate_client_metadata`: redirect
URIs, grant types, OpenID Connect Registration's ``application_type``) and gets a random
``client_id``. Rules kept here:

* Only a POST of ``application/json`` of at most ``MAX_REGISTRATION_BYTES``.
* Confidential clients (``client_secret_basic``/``client_secret_post``) only when the
  configuration allows them (``allowConfidentialClientRegistration``), with https redirect URIs
  of hosts other than loopback; their secret (256 random bits) is shown once, in this answer,
  and only its SHA-256 is kept. A registration naming one of ``forceConfidentialRedirectUris``
  exactly is one of them (``client_secret_post``) even when it asked for ``none``. A secret
  expires with the registration, ``CLIENT_LIFETIME`` after it (``client_secret_expires_at``;
  use does not extend it): the client then registers again.
* The scope of every registration includes ``baselineClientScopes``.
* The table cannot be filled: registrations are budgeted per client address and for every
  address together (:class:`~.rates.AddressRate`; 429 with ``Retry-After`` past either), and a
  public client that never completed a login is forgotten after ``UNUSED_CLIENT_LIFETIME``; its
  first login (at ``/oauth/token``) keeps it for ``CLIENT_LIFETIME``.

Clients may also skip registering and name themselves by the URL of their Client ID Metadata
Document (:mod:`.cimd`): those are never stored here.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from ..http.asgi import BodyTooLarge, HttpRequest, Send, send_json
from .endpoints import NO_STORE, sha256
from .rates import AddressRate
from .storage import RegisteredClient, Storage
from .validation import OAuthError, validate_client_metadata

__all__ = ["CLIENT_LIFETIME", "UNUSED_CLIENT_LIFETIME", "RegistrationEndpoint"]

MAX_REGISTRATION_BYTES = 64 * 1024
CLIENT_LIFETIME = 30 * 24 * 3600.0
UNUSED_CLIENT_LIFETIME = 24 * 3600.0
"""A public client that never completed a login is forgotten after a day (a registration flood
fades); its first login extends it to CLIENT_LIFETIME."""
REGISTRATIONS_PER_MINUTE = 20
REGISTRATIONS_PER_MINUTE_ALL = 120
"""Registrations from every address together (per replica)."""


class RegistrationEndpoint:
    def __init__(self, storage: Storage, *, allow_confidential: bool,
                 baseline_scopes: tuple[str, ...] = (),
                 force_confidential: tuple[str, ...] = ()) -> None:
        self.storage = storage
        self.allow_confidential = allow_confidential
        self.baseline_scopes = baseline_scopes
        """Added to every registration's scope (``baselineClientScopes``)."""
        self.force_confidential = frozenset(force_confidential)
        """Redirect URIs whose registrations get a secret even when they ask for none
        (``forceConfidentialRedirectUris``: clients that declare themselves public, then
        refuse an answer without a secret)."""
        self.rate = AddressRate(REGISTRATIONS_PER_MINUTE, REGISTRATIONS_PER_MINUTE_ALL)

    async def serve(self, request: HttpRequest, send: Send) -> None:
        if request.method != "POST":
            await send_json(send, 405, {"error": "invalid_request",
                                        "error_description": "use POST"}, [("allow", "POST")])
            return
        refused = self.rate.retry_after(request.client_group, time.monotonic())
        if refused is not None:
            wait, whose = refused
            await send_json(send, 429, {"error": "invalid_request", "error_description":
                                        "too many registrations from this address"
                                        if whose == "address" else
                                        "too many registrations at once; try again shortly"},
                            [("retry-after", str(wait))])
            return
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        try:
            if content_type != "application/json":
                raise OAuthError("invalid_client_metadata",
                                 "the registration must be JSON (Content-Type: "
                                 "application/json)")
            try:
                body = await request.body(MAX_REGISTRATION_BYTES)
            except BodyTooLarge:
                raise OAuthError("invalid_client_metadata", f"the registration is larger than "
                                 f"{MAX_REGISTRATION_BYTES} bytes") from None
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise OAuthError("invalid_client_metadata",
                                 "the registration is not valid JSON") from None
            metadata = validate_client_metadata(document,
                                                allow_confidential=self.allow_confidential)
        except OAuthError as exc:
            await send_json(send, exc.status, {"error": exc.error,
                                               "error_description": exc.description})
            return
        now = time.time()
        method = metadata.token_endpoint_auth_method
        if method == "none" and self.force_confidential.intersection(metadata.redirect_uris):
            method = "client_secret_post"  # RFC 7591 3.2.1: the server may substitute
        secret = None if method == "none" else secrets.token_urlsafe(32)
        scope = metadata.scope
        if self.baseline_scopes:
            scope = " ".join(dict.fromkeys([*(scope or "").split(), *self.baseline_scopes]))
        client = RegisteredClient(
            client_id=secrets.token_urlsafe(24), redirect_uris=metadata.redirect_uris,
            token_endpoint_auth_method=method,
            grant_types=metadata.grant_types, client_name=metadata.client_name,
            scope=scope, secret_sha256=sha256(secret) if secret else None,
            created_at=now,
            expires_at=now + (CLIENT_LIFETIME if secret else UNUSED_CLIENT_LIFETIME),
            application_type=metadata.application_type)
        await self.storage.put_client(client)
        answer: dict[str, Any] = {
            "client_id": client.client_id, "client_id_issued_at": int(now),
            "redirect_uris": list(client.redirect_uris),
            "token_endpoint_auth_method": client.token_endpoint_auth_method,
            "grant_types": list(client.grant_types), "response_types": ["code"],
            "application_type": client.application_type}
        if secret is not None:  # shown once; only its hash is kept
            answer["client_secret"] = secret
            answer["client_secret_expires_at"] = int(client.expires_at)
        if client.client_name:
            answer["client_name"] = client.client_name
        if client.scope:
            answer["scope"] = client.scope
        await send_json(send, 201, answer, NO_STORE)
