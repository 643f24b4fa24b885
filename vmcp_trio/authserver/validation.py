"""The rules of OAuth requests, sans-IO: client registration (RFC 7591), redirect URI matching
(RFC 6749 3.1.2, RFC 8252), PKCE (RFC 7636), scopes (RFC 6749 3.3) and resource indicators
(RFC 8707). Each rule raises :class:`OAuthError` carrying the RFC error code, a description that
names the parameter or field (and, in a list, the index) and the HTTP status.

Descriptions never contain the offending value: some values are secrets (verifiers, codes), and
the rest are attacker-chosen text that would end up in logs and error pages.

URIs are checked with a strict RFC 3986 reading of our own rather than ``urllib.parse``, which
silently deletes tabs and newlines, accepts backslashes and unbalanced brackets, and so could
let a URI be judged as one thing and stored (and later followed by a browser) as another.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..auth.ssrf import is_loopback_host
from ..protocol import base64url

__all__ = [
    "APPLICATION_TYPES",
    "ERROR_CODES",
    "MAX_REDIRECT_URIS",
    "MAX_URI_CHARS",
    "SECRET_AUTH_METHODS",
    "SECRET_METHODS",
    "ClientMetadata",
    "OAuthError",
    "check_client_id_url",
    "check_pkce_request",
    "check_resource",
    "parse_scope",
    "redirect_uri_matches",
    "validate_client_document",
    "validate_client_metadata",
    "verify_pkce",
]

ERROR_CODES = frozenset({
    "invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
    "unsupported_grant_type", "invalid_scope", "invalid_redirect_uri", "invalid_client_metadata",
    "invalid_target", "access_denied", "unsupported_response_type", "temporarily_unavailable",
})

MAX_REDIRECT_URIS = 10
MAX_URI_CHARS = 2000
MAX_CLIENT_NAME_CHARS = 200
MAX_SCOPE_CHARS = 4000

SECRET_METHODS = ("client_secret_basic", "client_secret_post")
"""How a confidential client presents its secret at the token endpoint."""
AUTH_METHODS = ("none", *SECRET_METHODS)
SECRET_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "client_secret_jwt")
GRANT_TYPES = ("authorization_code", "refresh_token")
RESPONSE_TYPES = ("code",)
APPLICATION_TYPES = ("web", "native")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "[::1]", "localhost"})


class OAuthError(Exception):
    """An OAuth error response: ``error`` (the RFC 6749/7591/8707 code), ``description`` (names
    what was wrong, never echoes a value) and ``status`` (401 for invalid_client, else 400,
    unless given)."""

    error: str
    description: str
    status: int

    def __init__(self, error: str, description: str, status: int | None = None) -> None:
        if error not in ERROR_CODES:
            raise ValueError(f"unknown OAuth error code {error!r}")
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status if status is not None else 401 if error == "invalid_client" else 400


# --- URIs --------------------------------------------------------------------------------------

# RFC 3986 characters only: no spaces, controls, backslashes, quotes, braces or non-ASCII.
_URI_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# RFC 3986 appendix B, with the scheme required.
_URI = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(#.*)?")
_HOST_NAME = re.compile(r"[A-Za-z0-9\-.]+")
_PORT = re.compile(r"[0-9]{1,5}")


class _Uri(NamedTuple):
    scheme: str  # lower case
    authority: str | None  # None without "//"
    host: str  # "" without authority; IPv6 literals keep their brackets
    port: int | None


class _BadUri(Exception):
    """Why a URI is refused (the text is completed with the field name by the caller)."""


def _parse_uri(value: object) -> _Uri:
    """A strict parse of an absolute URI; raises _BadUri saying what is wrong."""
    if not isinstance(value, str):
        raise _BadUri("is not a string")
    if not value:
        raise _BadUri("is empty")
    if len(value) > MAX_URI_CHARS:
        raise _BadUri(f"is longer than {MAX_URI_CHARS} characters")
    if not _URI_CHARS.fullmatch(value) or _BAD_PERCENT.search(value):
        raise _BadUri("contains characters not allowed in a URI")
    match = _URI.fullmatch(value)
    if match is None:
        raise _BadUri("is not an absolute URI (no scheme)")
    scheme, authority, _path, _query, fragment = match.groups()
    if fragment is not None:
        raise _BadUri("has a fragment")
    host, port = "", None
    if authority is not None:
        if "@" in authority:
            raise _BadUri("has user information (user@) in its authority")
        host, port = _split_authority(authority)
    return _Uri(scheme.lower(), authority, host, port)


def _split_authority(authority: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _BadUri("has an unclosed IP literal")
        host, rest = authority[:end + 1], authority[end + 1:]
        try:
            ipaddress.IPv6Address(host[1:-1])  # no zone ids (% is refused) and no IPvFuture
        except ValueError:
            raise _BadUri("has an invalid IPv6 literal") from None
        if "%" in host:
            raise _BadUri("has an invalid IPv6 literal")
    else:
        host, colon, port_text = authority.partition(":")
        rest = colon + port_text
        if host and not _HOST_NAME.fullmatch(host):
            raise _BadUri("has an invalid host name")
    if not rest:
        return host.lower(), None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]):
        raise _BadUri("has an invalid port")
    port = int(rest[1:])
    if not 1 <= port <= 65535:
        raise _BadUri("has a port outside 1..65535")
    return host.lower(), port


def _check_redirect_uri(value: object) -> None:
    uri = _parse_uri(value)
    if uri.scheme == "https":
        if not uri.host:
            raise _BadUri("has no host")
    elif uri.scheme == "http":
        if uri.host not in LOOPBACK_HOSTS:
            raise _BadUri("uses http for a host other than loopback (127.0.0.1, [::1], "
                          "localhost): use https")
    elif "." not in uri.scheme:
        # RFC 8252 7.1: private-use schemes are reverse domain names. This also refuses
        # javascript:, data:, file:, vbscript: and every other browser-handled scheme.
        raise _BadUri("has a scheme that is neither https, http (loopback only) nor a "
                      "private-use scheme (reverse domain name such as com.example.app)")


def _check_https_url(value: object) -> None:
    uri = _parse_uri(value)
    if uri.scheme != "https":
        raise _BadUri("is not an https URL")
    if not uri.host:
        raise _BadUri("has no host")


_LOOPBACK_IP_URI = re.compile(r"http://(127\.0\.0\.1|\[::1\])(?::([0-9]{1,5}))?(?=[/?#]|\Z)")


def _without_loopback_port(uri: str) -> str | None:
    """``uri`` without its port when it is an http URI of a loopback IP literal, else None."""
    match = _LOOPBACK_IP_URI.match(uri)
    if match is None:
        return None
    port = match.group(2)
    if port is not None and not 1 <= int(port) <= 65535:
        return None
    return f"http://{match.group(1)}{uri[match.end():]}"


def redirect_uri_matches(registered: Sequence[str], requested: str) -> bool:
    """Whether ``requested`` is one of the ``registered`` redirect URIs: an exact string match
    (case-sensitive, no normalisation: another path, another case, an added query or a trailing
    slash all fail), except RFC 8252 7.3: for http URIs of the loopback IP literals 127.0.0.1
    and [::1] (not ``localhost``, which DNS or a hosts file may send elsewhere) any port matches
    when everything else is identical, since native apps listen on an ephemeral port."""
    if not isinstance(requested, str) or len(requested) > MAX_URI_CHARS:
        return False
    if requested in registered:
        return True
    stripped = _without_loopback_port(requested)
    if stripped is None:
        return False
    return any(isinstance(uri, str) and _without_loopback_port(uri) == stripped
               for uri in registered)


# --- client registration -----------------------------------------------------------------------


@dataclass(frozen=True)
class ClientMetadata:
    """A validated RFC 7591 registration request, defaults applied, lists de-duplicated."""

    redirect_uris: tuple[str, ...]
    token_endpoint_auth_method: str  # "none" (public) | "client_secret_basic" | "..._post"
    grant_types: tuple[str, ...]
    response_types: tuple[str, ...]
    client_name: str | None = None
    scope: str | None = None  # normalised: tokens de-duplicated, single spaces
    client_uri: str | None = None  # kept as given (validated as an https URL)
    logo_uri: str | None = None  # kept as given (validated as an https URL)
    application_type: str = "web"  # OpenID Connect Registration: "web" (default) | "native"

    @property
    def public(self) -> bool:
        return self.token_endpoint_auth_method == "none"


def _metadata_error(description: str) -> OAuthError:
    return OAuthError("invalid_client_metadata", description)


def _string_list(document: dict[str, object], name: str,
                 default: tuple[str, ...], allowed: Sequence[str]) -> tuple[str, ...]:
    value = document.get(name)
    if value is None:
        return default
    if not isinstance(value, list):
        raise _metadata_error(f"{name} is not an array")
    if not value:
        raise _metadata_error(f"{name} is empty")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _metadata_error(f"{name}[{index}] is not a string")
        if item not in allowed:
            raise _metadata_error(f"{name}[{index}] is not supported (supported: "
                                  f"{', '.join(allowed)})")
    return tuple(dict.fromkeys(value))


def _optional_url(document: dict[str, object], name: str) -> str | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _metadata_error(f"{name} is not a string")
    try:
        _check_https_url(value)
    except _BadUri as exc:
        raise _metadata_error(f"{name} {exc}") from None
    return value


_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                           "\u2066\u2067\u2068\u2069")


def _client_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _metadata_error("client_name is not a string")
    if not value.strip():
        raise _metadata_error("client_name is empty")
    if len(value) > MAX_CLIENT_NAME_CHARS:
        raise _metadata_error(f"client_name is longer than {MAX_CLIENT_NAME_CHARS} characters")
    # It is shown on the consent page: no control characters, no text direction overrides
    # (which can make "evil.example" read as "elpmaxe.live").
    if any(unicodedata.category(c) == "Cc" or c in _BIDI_CONTROLS for c in value):
        raise _metadata_error("client_name contains control characters")
    return value


def validate_client_metadata(document: object, *, allow_confidential: bool) -> ClientMetadata:
    """The rules of an RFC 7591 registration request (already JSON-decoded):

    * a JSON object; unknown fields are ignored;
    * ``redirect_uris`` required, 1 to 10 strings, each an absolute URI of at most 2000
      characters, without fragment or user information, and either https, or http for a
      loopback host (127.0.0.1, [::1], localhost), or a private-use scheme (RFC 8252 7.1: a
      scheme with a dot, like ``com.example.app:/callback``); duplicates are dropped;
    * ``token_endpoint_auth_method`` "none" (the default: a public client), or
      client_secret_basic / client_secret_post only when ``allow_confidential``, and then only
      with https redirect URIs of hosts other than loopback (ToolHive's rule: a native app
      cannot keep a secret);
    * ``grant_types`` (default authorization_code and refresh_token) only those two;
      ``response_types`` (default code) only code; consistent with each other (RFC 7591 2.1:
      authorization_code needs code, and code needs authorization_code);
    * ``client_name`` at most 200 characters, no control characters; ``scope`` RFC 6749 scope
      tokens (at most 4,000 characters); ``client_uri`` / ``logo_uri`` https URLs;
    * ``application_type`` (OpenID Connect Dynamic Client Registration 1.0, section 2; MCP
      2026-07-28 requires clients to send it): "web" or "native", default "web". It places no
      constraint on ``redirect_uris`` here: those are OpenID provider rules (a "web" default
      would refuse the custom schemes native apps use), MCP 2026-07-28 says servers that are no
      OpenID provider ignore the parameter, and this server is none; the loopback and
      private-use rules above already hold for every client.

    Raises OAuthError: invalid_redirect_uri for anything about ``redirect_uris``,
    invalid_client_metadata otherwise; the description names the field, and in a list the
    index (``redirect_uris[3]``)."""
    if not isinstance(document, dict):
        raise _metadata_error("the registration request is not a JSON object")
    redirect_uris = document.get("redirect_uris")
    if redirect_uris is None:
        raise OAuthError("invalid_redirect_uri", "redirect_uris is required")
    if not isinstance(redirect_uris, list):
        raise OAuthError("invalid_redirect_uri", "redirect_uris is not an array")
    if not 1 <= len(redirect_uris) <= MAX_REDIRECT_URIS:
        raise OAuthError("invalid_redirect_uri",
                         f"redirect_uris must hold 1 to {MAX_REDIRECT_URIS} URIs")
    for index, uri in enumerate(redirect_uris):
        try:
            _check_redirect_uri(uri)
        except _BadUri as exc:
            raise OAuthError("invalid_redirect_uri", f"redirect_uris[{index}] {exc}") from None

    method = document.get("token_endpoint_auth_method", "none")
    if not isinstance(method, str):
        raise _metadata_error("token_endpoint_auth_method is not a string")
    if method not in AUTH_METHODS:
        raise _metadata_error("token_endpoint_auth_method is not supported (supported: "
                              + ", ".join(AUTH_METHODS if allow_confidential else ("none",))
                              + ")")
    if method != "none" and not allow_confidential:
        raise _metadata_error("token_endpoint_auth_method must be none: only public clients "
                              "may register")
    if method != "none":
        for index, uri in enumerate(redirect_uris):
            parsed = _parse_uri(uri)
            if parsed.scheme != "https" or is_loopback_host(parsed.host):
                raise OAuthError("invalid_redirect_uri", f"redirect_uris[{index}] must be https "
                                 f"on a host other than loopback for {method}: a client on "
                                 "loopback or a private-use scheme is a native app, which "
                                 "cannot keep a secret (register it with none)")

    grant_types = _string_list(document, "grant_types", GRANT_TYPES, GRANT_TYPES)
    response_types = _string_list(document, "response_types", RESPONSE_TYPES, RESPONSE_TYPES)
    if "authorization_code" in grant_types and "code" not in response_types:
        raise _metadata_error("grant_types authorization_code needs response_types code")
    if "code" in response_types and "authorization_code" not in grant_types:
        raise _metadata_error("response_types code needs grant_types authorization_code")

    scope = document.get("scope")
    if scope is not None:
        if not isinstance(scope, str):
            raise _metadata_error("scope is not a string")
        try:
            scope = " ".join(parse_scope(scope)) or None
        except OAuthError as exc:
            raise _metadata_error(exc.description) from None

    application_type = document.get("application_type", "web")
    if not isinstance(application_type, str):
        raise _metadata_error("application_type is not a string")
    if application_type not in APPLICATION_TYPES:
        raise _metadata_error("application_type must be web or native")

    return ClientMetadata(
        redirect_uris=tuple(dict.fromkeys(redirect_uris)),
        token_endpoint_auth_method=method,
        grant_types=grant_types,
        response_types=response_types,
        client_name=_client_name(document.get("client_name")),
        scope=scope,
        client_uri=_optional_url(document, "client_uri"),
        logo_uri=_optional_url(document, "logo_uri"),
        application_type=application_type,
    )


# --- client ID metadata documents ----------------------------------------------------------------


def check_client_id_url(value: str, *, allow_http: bool = False) -> None:
    """A Client Identifier URL (draft-ietf-oauth-client-id-metadata-document section 3): https
    (http too with ``allow_http``, for development), a host, no user information, a path, no
    ``.`` or ``..`` segment (also percent-encoded), no fragment; a query is tolerated (SHOULD
    NOT). Raises OAuthError("invalid_client", ...)."""
    try:
        uri = _parse_uri(value)
    except _BadUri as exc:
        raise OAuthError("invalid_client", f"the client_id URL {exc}") from None
    if uri.scheme != "https" and not (allow_http and uri.scheme == "http"):
        raise OAuthError("invalid_client", "the client_id URL is not an https URL")
    if not uri.host:
        raise OAuthError("invalid_client", "the client_id URL has no host")
    match = _URI.fullmatch(value)
    path = match.group(3) if match is not None else ""
    if not path:
        raise OAuthError("invalid_client", "the client_id URL has no path")
    if any(segment.lower().replace("%2e", ".") in (".", "..") for segment in path.split("/")):
        raise OAuthError("invalid_client", "the client_id URL has a . or .. path segment")


def validate_client_document(document: object, url: str) -> ClientMetadata:
    """The rules of a Client ID Metadata Document fetched from ``url`` (the draft, sections 4
    and 4.1; MCP 2026-07-28 "Client ID Metadata Documents"): a JSON object whose ``client_id``
    is exactly ``url`` (simple string comparison), with ``client_name`` and ``redirect_uris``;
    no ``client_secret`` or ``client_secret_expires_at``, and no shared-secret
    ``token_endpoint_auth_method``. Only public clients are served (``none``, also when the
    document names no method, since no secret can exist): ``private_key_jwt`` is refused as
    unsupported. Then every rule of :func:`validate_client_metadata`. Raises OAuthError
    (invalid_client_metadata or invalid_redirect_uri) naming the field."""
    if not isinstance(document, dict):
        raise _metadata_error("the client's metadata document is not a JSON object")
    if document.get("client_id") != url:
        raise _metadata_error("the client_id of the client's metadata document is not the URL "
                              "it was fetched from")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise _metadata_error("a client's metadata document must not hold client_secret or "
                              "client_secret_expires_at")
    method = document.get("token_endpoint_auth_method", "none")
    if method in SECRET_AUTH_METHODS:
        raise _metadata_error("token_endpoint_auth_method of a client's metadata document "
                              "must not be a shared-secret method")
    if method != "none":
        raise _metadata_error("token_endpoint_auth_method of a client's metadata document "
                              "must be none (public clients only; private_key_jwt is not "
                              "supported)")
    if document.get("client_name") is None:
        raise _metadata_error("client_name is required in a client's metadata document")
    return validate_client_metadata(document, allow_confidential=False)


# --- PKCE --------------------------------------------------------------------------------------

_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


def check_pkce_request(challenge: str | None, method: str | None) -> None:
    """At /authorize: ``code_challenge`` is required and must be an S256 challenge (43
    characters of canonical base64url, a SHA-256 hash); ``code_challenge_method`` is required
    and must be S256. A missing method is refused rather than taken as "plain" (RFC 7636's
    default), since plain gives no protection against a stolen authorization request. Raises
    OAuthError("invalid_request", ...)."""
    if challenge is None:
        raise OAuthError("invalid_request", "code_challenge is required (PKCE with S256)")
    if method is None:
        raise OAuthError("invalid_request", "code_challenge_method is required and must be S256")
    if method != "S256":
        raise OAuthError("invalid_request", "code_challenge_method must be S256")
    if not isinstance(challenge, str) or len(challenge) != 43:
        raise OAuthError("invalid_request", "code_challenge is not 43 characters of base64url")
    try:
        decoded = base64url.decode(challenge, strict=True)
    except ValueError:
        decoded = b""
    if len(decoded) != 32:
        raise OAuthError("invalid_request", "code_challenge is not 43 characters of base64url")


def verify_pkce(challenge: str, method: str, verifier: str | None) -> None:
    """At /token: the ``code_verifier`` must be 43 to 128 characters of [A-Za-z0-9-._~] (RFC
    7636 4.1) and BASE64URL(SHA256(verifier)) must equal the stored challenge (compared in
    constant time). Only S256 is supported (anything else was refused at /authorize by
    :func:`check_pkce_request`). Raises OAuthError("invalid_grant", ...)."""
    if method != "S256":
        raise OAuthError("invalid_grant", "code_challenge_method is not S256")
    if verifier is None:
        raise OAuthError("invalid_grant", "code_verifier is required")
    if not isinstance(verifier, str) or not _VERIFIER.fullmatch(verifier):
        raise OAuthError("invalid_grant",
                         "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~")
    expected = base64url.encode(hashlib.sha256(verifier.encode("ascii")).digest())
    if not hmac.compare_digest(expected.encode("ascii"), challenge.encode("utf-8")):
        raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge")


# --- scope -------------------------------------------------------------------------------------

_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def parse_scope(value: str | None, *, allowed: Sequence[str] | None = None) -> tuple[str, ...]:
    """The scope tokens of a space-separated ``scope`` (RFC 6749 3.3: printable ASCII except
    space, double quote and backslash), de-duplicated in their order; () when absent or empty.
    Extra spaces are tolerated; any other separator (tab, newline) is refused. With
    ``allowed``, a token outside it is refused. Raises OAuthError("invalid_scope", ...), naming
    the position of the token (never its text)."""
    if value is None:
        return ()
    if not isinstance(value, str):
        raise OAuthError("invalid_scope", "scope is not a string")
    if len(value) > MAX_SCOPE_CHARS:
        raise OAuthError("invalid_scope", f"scope is longer than {MAX_SCOPE_CHARS} characters")
    tokens = [token for token in value.split(" ") if token]
    for index, token in enumerate(tokens):
        if not _SCOPE_TOKEN.fullmatch(token):
            raise OAuthError("invalid_scope",
                             f"scope[{index}] contains characters not allowed in a scope")
        if allowed is not None and token not in allowed:
            raise OAuthError("invalid_scope", f"scope[{index}] is not a supported scope")
    return tuple(dict.fromkeys(tokens))


# --- resource indicators -----------------------------------------------------------------------


def check_resource(value: str | list[str] | None, *, allowed: Sequence[str]) -> str | None:
    """The RFC 8707 ``resource`` of a request: at most one (several -> invalid_target: one
    token, one audience), an absolute URI without fragment, and one of ``allowed`` (the
    resources this server issues tokens for; compared exactly). None when absent (a list of
    the form-decoded values, empty or of one item, is accepted too). Raises
    OAuthError("invalid_target", ...)."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) > 1:
            raise OAuthError("invalid_target", "only one resource may be requested")
        if not value:
            return None
        value = value[0]
    if not isinstance(value, str):
        raise OAuthError("invalid_target", "resource is not a string")
    try:
        _parse_uri(value)
    except _BadUri as exc:
        raise OAuthError("invalid_target", f"resource {exc}") from None
    if value not in allowed:
        raise OAuthError("invalid_target", "resource is not a resource this server issues "
                         "tokens for")
    return value
