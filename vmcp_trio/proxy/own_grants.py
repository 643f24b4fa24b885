"""The remote logins with no user at a browser: the token request's form for each.

One job: say what ``vmcp proxy --remote-auth`` sends the remote's token endpoint when nobody
logs in: ``--remote-auth-client-credentials`` (the client's own ``client_credentials`` grant),
``--remote-auth-assertion-file`` (workload identity federation, SEP-1933: the workload's JWT as
the assertion of RFC 7523's JWT-bearer grant) or ``--remote-auth-idp-token-url``
(enterprise-managed authorization, SEP-990: the user's ID token exchanged at the identity
provider, RFC 8693, for an ID-JAG whose audience is the remote's authorization server and whose
resource is the remote, then the ID-JAG as the assertion). :mod:`.remote_login` sends the form,
as the client, with the resource. The rules it keeps:

* A token kept in a file (the workload's JWT, the user's ID token) is read at each request:
  whoever writes it (the kubelet, a sign-in agent) may renew it. It is a secret: never printed
  or logged (the token request cuts it out of any error).
* An identity provider that answers without ``issued_token_type`` ID-JAG is an error, not a
  token passed on.
"""

from __future__ import annotations

import trio

from ..auth.oauth.discovery import AuthorizationServerMetadata
from ..auth.oauth.tokens import (
    ID_JAG,
    ID_TOKEN_TYPE,
    JWT_BEARER,
    TOKEN_EXCHANGE,
    ClientCredentials,
    token_request,
)
from ..http.client import HttpClient
from .settings import RemoteAuthSettings

__all__ = ["GrantFailed", "grant_without_user"]


class GrantFailed(Exception):
    """The grant's form cannot be made; the message says why (never a token)."""


async def grant_without_user(settings: RemoteAuthSettings, metadata: AuthorizationServerMetadata,
                             client: HttpClient, *, scopes: tuple[str, ...], resource: str,
                             timeout: float) -> tuple[dict[str, str], str]:
    """The token request's form and what to call it in messages (``timeout``: of the
    identity provider's exchange, when there is one)."""
    scope = {"scope": " ".join(scopes)} if scopes else {}
    if settings.client_credentials:
        return {"grant_type": "client_credentials", **scope}, "client credentials grant"
    if settings.assertion_file is not None:
        assertion = await _read_token(settings.assertion_file, "assertion")
        return ({"grant_type": JWT_BEARER, "assertion": assertion, **scope},
                "JWT-bearer grant of the workload's assertion")
    jag = await _id_jag(settings, metadata, client, scopes=scopes, resource=resource,
                        timeout=timeout)
    return {"grant_type": JWT_BEARER, "assertion": jag, **scope}, "JWT-bearer grant of the ID-JAG"


async def _read_token(path: str, what: str) -> str:
    """A token kept in a file, read now."""
    try:
        token = (await trio.Path(path).read_text("utf-8")).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise GrantFailed(f"the {what} cannot be read from {path}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise GrantFailed(f"{path} holds no {what}")
    return token


async def _id_jag(settings: RemoteAuthSettings, metadata: AuthorizationServerMetadata,
                  client: HttpClient, *, scopes: tuple[str, ...], resource: str,
                  timeout: float) -> str:
    assert settings.idp_token_url and settings.idp_client_id and settings.id_token_file
    form = {"grant_type": TOKEN_EXCHANGE,
            "subject_token": await _read_token(settings.id_token_file, "ID token"),
            "subject_token_type": ID_TOKEN_TYPE, "requested_token_type": ID_JAG,
            "audience": metadata.issuer, "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    document = await token_request(
        client, settings.idp_token_url, form,
        ClientCredentials(settings.idp_client_id, None, "none"), timeout=timeout,
        what="exchange of the ID token for an ID-JAG")
    jag = document.get("access_token")
    if document.get("issued_token_type") != ID_JAG or not isinstance(jag, str) or not jag:
        raise GrantFailed(f"the identity provider at {settings.idp_token_url} answered without "
                          "an ID-JAG (issued_token_type)")
    return jag
