"""The token endpoint, the client side (RFC 6749 section 3.2): one request with client
authentication, OAuth error answers, and reading a token response.

Rules it keeps:

* :func:`token_request` is one POST of an ``application/x-www-form-urlencoded`` form, JSON
  wanted, bounded in time (``timeout``) and size (:data:`.discovery.MAX_DOCUMENT_BYTES`). It
  checks no URL: a token endpoint is checked once, where it is learnt (a configured one by the
  configuration rules, a discovered one by :func:`.discovery.read_authorization_server_metadata`),
  not on every request.
* Client authentication is :class:`ClientCredentials`'s ``method``: ``client_secret_basic`` (the
  RFC 6749 section 2.3.1 encoding of :func:`basic_authorization`), ``client_secret_post`` (id and
  secret in the form), ``none`` (a public client names itself in the form, section 3.2.1),
  ``private_key_jwt`` (a fresh assertion signed with the client's key, RFC 7523 section 2.2:
  :func:`client_assertion`); no credentials at all sends nothing.
* An OAuth error answer (an ``error`` member, RFC 6749 section 5.2) is an error wherever it
  appears, even in a 200 (GitHub's way). Every failure is a :class:`TokenEndpointError`: the HTTP
  status and the server's error code when there are some, and a message that never holds a
  secret: the server's ``error_description`` is kept (one line, bounded) but every secret value
  the request carried (the client secret, a code, a verifier, a token) is cut out of it first.
* :func:`parse_token_response` reads the tokens through ``tokenResponseMapping`` dot paths
  (``data.auth.token``; a number indexes an array), the standard member names by default.
  ``expires_in`` may be a number or a string of digits; 0 means "not said" (as Go's oauth2 has
  it), not "already expired".
"""

from __future__ import annotations

import base64
import math
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, quote_plus, urlencode

from ...http.client import ConnectGuard, HttpClient
from ...resources.plan import TokenResponseMappingPlan
from ..signing import SigningKey, compact_jws
from .discovery import FetchError, fetch_json

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "DEVICE_CODE",
    "ID_JAG",
    "ID_TOKEN_TYPE",
    "JWT_BEARER",
    "TOKEN_EXCHANGE",
    "ClientAuthMethod",
    "ClientCredentials",
    "TokenEndpointError",
    "TokenResponse",
    "basic_authorization",
    "client_assertion",
    "first_text",
    "oauth_error",
    "parse_token_response",
    "token_request",
]

#: expires_in beyond this (about 300 years) is not a lifetime but garbage.
MAX_EXPIRES_IN = 10**10
_MESSAGE_LIMIT = 200
# The standard token response: what an unmapped answer is read with.
_STANDARD_MAPPING = TokenResponseMappingPlan(access_token_path="access_token")
# Form members that carry nothing secret; every other value is cut out of error descriptions.
_PUBLIC_FORM_FIELDS = frozenset({"grant_type", "redirect_uri", "scope", "audience", "resource",
                                 "client_id", "subject_token_type", "actor_token_type",
                                 "requested_token_type"})

ClientAuthMethod = Literal["client_secret_basic", "client_secret_post", "none",
                          "private_key_jwt"]
JWT_BEARER_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
"""RFC 8693's grant."""
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
"""RFC 7523's grant (an assertion for a token)."""
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
"""RFC 8628's grant (a login on another device)."""
"""An Identity Assertion JWT Authorization Grant (enterprise-managed authorization)."""
ASSERTION_SECONDS = 60
"""How long a ``private_key_jwt`` client assertion is valid (it is made for one request)."""


class TokenEndpointError(Exception):
    """The token endpoint refused or failed. ``oauth_error`` is its OAuth error code when it gave
    one (``invalid_grant`` on refresh means: log in again), ``status`` its HTTP status when it
    answered. The message never contains a token, a code, a verifier or a secret."""

    def __init__(self, message: str, *, oauth_error: str | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.oauth_error = oauth_error
        self.status = status


@dataclass(frozen=True)
class ClientCredentials:
    """Who vmcp is at a token endpoint. ``secret`` is required by the two ``client_secret_*``
    methods and refused with ``none``; ``private_key_jwt`` (RFC 7523 section 2.2) takes the
    ``key`` its assertions are signed with instead (ValueError otherwise)."""

    client_id: str
    secret: str | None = field(repr=False)
    method: ClientAuthMethod
    key: SigningKey | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.method == "private_key_jwt":
            if self.key is None or self.secret is not None:
                raise ValueError("client authentication private_key_jwt needs a key and no "
                                 "secret")
        elif (self.secret is None) != (self.method == "none"):
            raise ValueError(f"client authentication {self.method} "
                             + ("takes no secret" if self.method == "none" else "needs a secret"))


@dataclass(frozen=True)
class TokenResponse:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: float | None  # epoch seconds (from expires_in); None when not given
    scope: str | None
    token_type: str | None
    id_token: str | None = field(repr=False, default=None)
    document: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    """The whole answer (for members a configuration names, ``identityFromToken``)."""


def basic_authorization(client_id: str, secret: str) -> str:
    """The ``Authorization`` value of ``client_secret_basic``: RFC 6749 section 2.3.1 has both
    parts form-encoded (``application/x-www-form-urlencoded``) before the Basic encoding."""
    pair = f"{quote_plus(client_id, safe='')}:{quote_plus(secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode("ascii")).decode("ascii")


# --- reading provider JSON ---------------------------------------------------------------------

def _dig(document: object, path: str) -> object:
    """The value at a dot path (``data.auth.token``; a number indexes an array), or None."""
    node = document
    for part in path.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isascii() and part.isdigit():
            digits = part.lstrip("0") or "0"  # leading zeros name the same index, as in gjson
            if len(digits) >= 19:  # past any array (and int() refuses 4,300 digits)
                return None
            index = int(digits)
            node = node[index] if index < len(node) else None
        else:
            return None
        if node is None:
            return None
    return node


def _as_text(value: object) -> str | None:
    """A claim as text: a non-blank string as is; a number as an integer string when it is one
    (JSON decoders elsewhere turn GitHub's ``id`` 12345 into 12345.0: both give "12345")."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def first_text(document: object, paths: Sequence[str]) -> str | None:
    """The first of the dot paths that holds text (numbers as integer strings), as a
    ``fieldMapping`` reads a user document; None when none does."""
    for path in paths:
        text = _as_text(_dig(document, path))
        if text is not None:
            return text
    return None


def _seconds(value: object) -> float | None:
    """expires_in: a non-negative number, or a string of digits. Raises ValueError."""
    if value is None:
        return None
    number: float
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise ValueError("not a number")
    if not (math.isfinite(number) and 0 <= number <= MAX_EXPIRES_IN):
        raise ValueError("out of range")
    return number


def _clean(value: str, hidden: Iterable[str]) -> str:
    """Server-supplied text fit for a message and a log line: the ``hidden`` values cut out (as
    sent and form-encoded), then bounded, one line."""
    for secret in hidden:
        if secret:
            for spelling in (secret, quote_plus(secret, safe=""), quote(secret, safe="")):
                value = value.replace(spelling, "[redacted]")
    text = "".join(ch if ch.isprintable() else " " for ch in value[:_MESSAGE_LIMIT])
    return text + ("..." if len(value) > _MESSAGE_LIMIT else "")


def oauth_error(document: object, *, redact: Iterable[str] = ()) -> tuple[str, str] | None:
    """``(code, "code: description")`` of an OAuth error answer (RFC 6749 section 5.2, RFC 7591
    section 3.2.2), cleaned for a message; None when ``document`` is not one."""
    if not isinstance(document, dict):
        return None
    code = document.get("error")
    if not isinstance(code, str) or not code:
        return None
    hidden = tuple(redact)
    code = _clean(code, hidden)
    description = document.get("error_description")
    if isinstance(description, str) and description:
        return code, f"{code}: {_clean(description, hidden)}"
    return code, code


# --- the request -------------------------------------------------------------------------------

def client_assertion(credentials: ClientCredentials, audience: str) -> str:
    """A ``private_key_jwt`` assertion (RFC 7523 section 3): ``iss`` and ``sub`` the client,
    ``aud`` the authorization server, a fresh ``jti``, valid :data:`ASSERTION_SECONDS`."""
    assert credentials.key is not None
    now = int(time.time())
    return compact_jws(credentials.key, {
        "iss": credentials.client_id, "sub": credentials.client_id, "aud": audience,
        "jti": secrets.token_urlsafe(16), "iat": now, "exp": now + ASSERTION_SECONDS}, typ=None)


async def token_request(client: HttpClient, token_url: str, form: Mapping[str, str],
                        credentials: ClientCredentials | None, *, timeout: float,
                        what: str = "token request", guard: ConnectGuard | None = None,
                        issuer: str | None = None) -> dict[str, Any]:
    """The JSON object of a successful (200) answer to ``form``, client authentication applied.
    ``what`` names the request in messages ("authorization code", "refresh token"); ``guard``
    is the SSRF guard of a token endpoint a document named (each request connects through it,
    not only the discovery that checked the URL); ``issuer`` is the audience of a
    ``private_key_jwt`` assertion (default: the token endpoint). Raises
    :class:`TokenEndpointError`."""
    sent = dict(form)
    headers = [("content-type", "application/x-www-form-urlencoded")]
    hidden = [value for name, value in sent.items() if name not in _PUBLIC_FORM_FIELDS]
    if credentials is not None and credentials.method == "private_key_jwt":
        sent["client_id"] = credentials.client_id
        sent["client_assertion_type"] = JWT_BEARER_ASSERTION
        sent["client_assertion"] = client_assertion(credentials, issuer or token_url)
        hidden.append(sent["client_assertion"])
    elif credentials is not None:
        secret = credentials.secret  # None exactly when the method is "none"
        if secret is not None:
            hidden.append(secret)
        if credentials.method == "client_secret_basic" and secret is not None:
            headers.append(("authorization", basic_authorization(credentials.client_id, secret)))
        else:
            sent["client_id"] = credentials.client_id
            if secret is not None:
                sent["client_secret"] = secret
    try:
        status, _, document = await fetch_json(client, token_url, method="POST",
                                               headers=headers,
                                               body=urlencode(sent).encode("ascii"),
                                               timeout=timeout, guard=guard)
    except FetchError as exc:
        raise TokenEndpointError(f"the token endpoint failed: {exc}") from None
    error = oauth_error(document, redact=hidden)
    if error is not None:
        raise TokenEndpointError(f"the token endpoint refused the {what} (HTTP {status}): "
                                 f"{error[1]}", oauth_error=error[0], status=status)
    if status != 200:
        raise TokenEndpointError(f"the token endpoint answered HTTP {status} to the {what}",
                                 status=status)
    if not isinstance(document, dict):
        raise TokenEndpointError("the token endpoint's answer is not a JSON object",
                                 status=status)
    return document


def parse_token_response(document: dict[str, Any],
                         mapping: TokenResponseMappingPlan | None = None, *,
                         now: float) -> TokenResponse:
    """The tokens of a successful token response, through ``mapping`` (``tokenResponseMapping``)
    when given, else the standard member names; ``token_type`` and ``id_token`` are always
    top-level members. ``now`` (epoch seconds) turns ``expires_in`` into ``expires_at``. Raises
    :class:`TokenEndpointError` for a missing access token or an ``expires_in`` that is not a
    number of seconds."""
    mapping = mapping or _STANDARD_MAPPING
    access = _dig(document, mapping.access_token_path)
    if not isinstance(access, str) or not access:
        raise TokenEndpointError(f"the token response has no access token at "
                                 f"{mapping.access_token_path!r}")
    refresh = _dig(document, mapping.refresh_token_path)
    try:
        lifetime = _seconds(_dig(document, mapping.expires_in_path))
    except ValueError:
        raise TokenEndpointError(f"the token response's {mapping.expires_in_path!r} is not a "
                                 "number of seconds") from None
    scope = _dig(document, mapping.scope_path)
    if isinstance(scope, list) and all(isinstance(item, str) for item in scope):
        scope = " ".join(scope)
    token_type = document.get("token_type")
    id_token = document.get("id_token")
    return TokenResponse(
        access_token=access,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        expires_at=now + lifetime if lifetime else None,
        scope=scope if isinstance(scope, str) else None,
        token_type=token_type if isinstance(token_type, str) else None,
        id_token=id_token if isinstance(id_token, str) and id_token else None,
        document=document)
