"""``--remote-auth-device-code``: the remote login on another device (RFC 8628).

One job: ask the authorization server's ``device_authorization_endpoint`` for a user code, show
it with the verification URL, and poll the token endpoint until the user approved, refused, or
the time ran out. :mod:`.remote_login` decides when (instead of the browser login) and keeps
the tokens. The rules it keeps:

* The endpoint comes from the authorization server's metadata and goes through the SSRF guard
  as every URL a document names (private addresses only when the login is local).
* The device code is a secret: never printed or logged (the user code and the URL are for the
  user, and printed on stderr).
* Polling waits ``interval`` seconds (5 without one) between requests, 5 more after each
  ``slow_down``; ``authorization_pending`` goes on; ``access_denied``, ``expired_token`` or any
  other answer ends the login with that reason; so does the end of ``expires_in`` or the
  configured ``--remote-auth-timeout``, whichever comes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from ..auth.oauth.discovery import AuthorizationServerMetadata
from ..auth.oauth.tokens import (
    DEVICE_CODE,
    ClientCredentials,
    TokenEndpointError,
    TokenResponse,
    parse_token_response,
    token_request,
)
from ..auth.ssrf import UnsafeUrl, check_fetch_url, fetch_guard
from ..http.client import HttpClient

__all__ = ["DEFAULT_INTERVAL", "DeviceLoginFailed", "device_tokens"]

DEFAULT_INTERVAL = 5.0
SLOW_DOWN = 5.0

Show = Callable[[str, str, float], None]
"""Tell the user: (the URL to open, the user code, seconds left)."""


class DeviceLoginFailed(Exception):
    """The device login ended without tokens; the message says why (never a code)."""


async def device_tokens(client: HttpClient, metadata: AuthorizationServerMetadata,
                        credentials: ClientCredentials, *, scopes: tuple[str, ...],
                        resource: str, local: bool, timeout: float, request_timeout: float,
                        show: Show) -> TokenResponse:
    """A login through the device authorization grant (see the module docstring):
    ``timeout`` for the whole login, ``request_timeout`` for each request."""
    endpoint = metadata.document.get("device_authorization_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise DeviceLoginFailed(f"the authorization server {metadata.issuer} offers no device "
                                "login (device_authorization_endpoint)")
    try:
        guard = check_fetch_url(endpoint, allow_http=local, allow_private=local)
    except UnsafeUrl as exc:
        raise DeviceLoginFailed(f"the device authorization endpoint is refused: {exc}") from None
    form = {"resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    try:
        answer = await token_request(client, endpoint, form, credentials,
                                     timeout=request_timeout, what="device authorization request",
                                     guard=guard, issuer=metadata.issuer)
    except TokenEndpointError as exc:
        raise DeviceLoginFailed(str(exc)) from None
    device_code, user_code = answer.get("device_code"), answer.get("user_code")
    uri = answer.get("verification_uri_complete") or answer.get("verification_uri")
    if not all(isinstance(value, str) and value for value in (device_code, user_code, uri)):
        raise DeviceLoginFailed("the device authorization answer lacks device_code, user_code "
                                "or verification_uri")
    assert isinstance(device_code, str) and isinstance(user_code, str) and isinstance(uri, str)
    seconds = min(timeout, _number(answer.get("expires_in"), timeout))
    interval = _number(answer.get("interval"), DEFAULT_INTERVAL)
    deadline = time.monotonic() + seconds
    await trio.to_thread.run_sync(show, uri, user_code, seconds, abandon_on_cancel=True)
    poll = {"grant_type": DEVICE_CODE, "device_code": device_code, "resource": resource}
    token_guard = fetch_guard(allow_private=local)
    while time.monotonic() + interval < deadline:
        await trio.sleep(interval)
        try:
            document = await token_request(
                client, metadata.token_endpoint, poll, credentials, timeout=request_timeout,
                what="device code", guard=token_guard, issuer=metadata.issuer)
        except TokenEndpointError as exc:
            if exc.oauth_error == "authorization_pending":
                continue
            if exc.oauth_error == "slow_down":
                interval += SLOW_DOWN
                continue
            raise DeviceLoginFailed(str(exc)) from None
        return parse_token_response(document, now=time.time())
    raise DeviceLoginFailed(f"the code was not approved within {seconds:.0f}s")


def _number(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default
