"""Dynamic client registration (RFC 7591), the client side: vmcp registering itself with an
authorization server that it has no client id at.

Rules it keeps:

* The registration endpoint passes the SSRF guard (``allow_http``/``allow_private``) before it
  is called; the request is one bounded JSON POST (:func:`.discovery.fetch_json`).
* What is asked for is fixed but for the caller's few choices: the authorization code grant with
  refresh tokens (``grant_types`` ``authorization_code`` and ``refresh_token``, ``response_types``
  ``code``), the redirect URIs, the client name, the scope when given, the client authentication
  method (``none`` by default: a native public client with PKCE) and the application type.
* The answer must be 201 (RFC 7591 section 3.2.1; 200 is accepted, some servers send it) with a
  JSON object holding a ``client_id``, else :class:`RegistrationError` naming the status and the
  server's error code and description (section 3.2.2). A server that registers a confidential
  client (a ``client_secret_*`` method) must give its secret. The server's choice of method
  wins over the one asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...http.client import HttpClient
from ..ssrf import UnsafeUrl, check_fetch_url
from .discovery import FetchError, fetch_json
from .tokens import DEVICE_CODE, ClientAuthMethod, oauth_error

__all__ = ["RegisteredClient", "RegistrationError", "register_client"]


class RegistrationError(Exception):
    """The registration failed; the message says where and why (never the client secret)."""


@dataclass(frozen=True)
class RegisteredClient:
    client_id: str
    client_secret: str | None = field(repr=False)
    token_endpoint_auth_method: str
    document: dict[str, Any] = field(repr=False, compare=False)
    """The whole answer (``client_secret_expires_at``, ``registration_access_token``...)."""


async def register_client(client: HttpClient, registration_endpoint: str, *,
                          redirect_uris: Sequence[str], client_name: str,
                          scope: str | None = None,
                          token_endpoint_auth_method: ClientAuthMethod = "none",  # noqa: S107
                          application_type: str = "native",
                          initial_access_token: str | None = None,
                          extra_metadata: Mapping[str, str] | None = None,
                          device: bool = False, allow_http: bool,
                          allow_private: bool) -> RegisteredClient:
    """Register a client for the authorization code flow (``device``: for the device
    authorization grant, RFC 8628, with no redirect URI); raises :class:`RegistrationError`.
    ``initial_access_token``: the bearer token a server that restricts registration asks for
    (RFC 7591 section 3); ``extra_metadata``: more members, such as ``software_id``."""
    try:
        guard = check_fetch_url(registration_endpoint, allow_http=allow_http,
                                allow_private=allow_private)
    except UnsafeUrl as exc:
        raise RegistrationError(f"the registration endpoint is refused: {exc}") from None
    metadata: dict[str, Any] = {
        "redirect_uris": list(redirect_uris), "client_name": client_name,
        "grant_types": [DEVICE_CODE if device else "authorization_code", "refresh_token"],
        "response_types": [] if device else ["code"],
        "token_endpoint_auth_method": token_endpoint_auth_method,
        "application_type": application_type}
    if scope:
        metadata["scope"] = scope
    metadata.update(extra_metadata or {})
    headers = [("content-type", "application/json")]
    if initial_access_token:
        headers.append(("authorization", f"Bearer {initial_access_token}"))
    try:
        status, _, document = await fetch_json(
            client, registration_endpoint, method="POST", headers=headers,
            body=orjson.dumps(metadata), guard=guard)
    except FetchError as exc:
        raise RegistrationError(f"the client registration failed: {exc}") from None
    if status not in (200, 201):
        error = oauth_error(document)
        raise RegistrationError(f"{registration_endpoint[:200]} refused the client registration "
                                f"(HTTP {status})" + (f": {error[1]}" if error else ""))
    client_id = document.get("client_id") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(client_id, str) or not client_id:
        raise RegistrationError(f"{registration_endpoint[:200]} answered the client registration "
                                "without a client_id")
    secret = document.get("client_secret")
    secret = secret if isinstance(secret, str) and secret else None
    method = document.get("token_endpoint_auth_method")
    method = method if isinstance(method, str) and method else token_endpoint_auth_method
    if method in ("client_secret_basic", "client_secret_post") and secret is None:
        raise RegistrationError(f"{registration_endpoint[:200]} registered a client with "
                                f"{method} but gave no client_secret")
    return RegisteredClient(client_id, secret, method, document)
