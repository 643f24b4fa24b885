"""Finding OAuth metadata, and the bounded JSON fetch that every auth document goes through.

Rules it keeps:

* :func:`fetch_json` is the one bounded JSON exchange of the auth code (metadata, JWKS,
  introspection, token and registration endpoints): at most :data:`MAX_DOCUMENT_BYTES`, within
  a timeout; :class:`FetchError` names the URL and what failed.
* Every metadata URL is put through the SSRF guard (:func:`~vmcp_trio.auth.ssrf.check_fetch_url`,
  with the caller's ``allow_http``/``allow_private``) before it is fetched, and connected to
  through the guard it gives. A refused URL ends
  the search at once with :class:`DiscoveryError`: the next candidate is on the same host.
* Candidates are tried in order: no answer, or an answer that is not 200 with a JSON object,
  moves on to the next. The first document found is the answer, and it must be about what was
  asked for, else :class:`DiscoveryError` at once, without trying further (against mix-up and
  impersonation): an issuer's ``issuer`` must equal the issuer exactly (RFC 8414 section 3.3,
  simple string comparison); a protected resource's ``resource`` must be the resource (RFC 9728
  section 3.3), compared as URLs (scheme and host in lower case, a default port dropped, a
  trailing slash ignored).
* Optional list members (``scopes_supported``...) are read leniently: the string items of a JSON
  array, and an empty tuple for anything else. Endpoints are not: an authorization server
  without an ``authorization_endpoint`` or ``token_endpoint`` is refused.

Two orders of the well-known locations of an authorization server's metadata:

* :func:`discover`, for an issuer from vmcp's configuration (incoming OIDC, an upstream ``oidc``
  provider): OpenID providers by configuration, so OIDC Discovery's
  ``{issuer}/.well-known/openid-configuration`` first, then RFC 8414's
  ``/.well-known/oauth-authorization-server{path}``. It returns the raw document (its users read
  ``jwks_uri``, ``introspection_endpoint``...).
* :func:`authorization_server_metadata`, for an issuer that a protected resource names (an MCP
  client's discovery): the MCP order (2025-06-18 and later) of
  :func:`authorization_server_metadata_urls`, RFC 8414 first; the result is checked
  (:func:`read_authorization_server_metadata`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import trio

from ...http.client import ConnectGuard, HttpClient, HttpError
from ..ssrf import UnsafeUrl, check_fetch_url

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "AuthorizationServerMetadata",
    "DiscoveryError",
    "FetchError",
    "ProtectedResource",
    "ResourceMismatch",
    "authorization_server_metadata",
    "authorization_server_metadata_urls",
    "canonical_uri",
    "discover",
    "fetch_json",
    "protected_resource_metadata",
    "read_authorization_server_metadata",
]

MAX_DOCUMENT_BYTES = 512 * 1024
FETCH_TIMEOUT = 10.0

_OAUTH_AS = "/.well-known/oauth-authorization-server"  # RFC 8414
_OIDC = "/.well-known/openid-configuration"  # OpenID Connect Discovery 1.0
_PROTECTED_RESOURCE = "/.well-known/oauth-protected-resource"  # RFC 9728
_DEFAULT_PORTS = {"https": 443, "http": 80}


class FetchError(Exception):
    """A document could not be fetched or read; the message names the URL and what failed."""


class DiscoveryError(FetchError):
    """No usable metadata: the message says where vmcp looked and what was wrong."""


class ResourceMismatch(DiscoveryError):
    """A protected resource metadata document that is another resource's: never a reason to
    look elsewhere (it may be an attacker's)."""


@dataclass(frozen=True)
class ProtectedResource:
    """A protected resource's metadata (RFC 9728). ``authorization_servers`` may be empty (RFC
    9728 makes it optional; MCP requires one: the caller decides)."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...]


@dataclass(frozen=True)
class AuthorizationServerMetadata:
    """An authorization server's metadata (RFC 8414), checked: the endpoints are there, the
    authorization endpoint is a web URL, the token endpoint passed the SSRF guard."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    code_challenge_methods_supported: tuple[str, ...]
    scopes_supported: tuple[str, ...]
    document: dict[str, Any] = field(repr=False, compare=False)
    """The whole document, for the members not named above."""


async def fetch_json(client: HttpClient, url: str, *, method: str = "GET",
                     headers: Iterable[tuple[str, str]] = (), body: bytes = b"",
                     timeout: float = FETCH_TIMEOUT, guard: ConnectGuard | None = None
                     ) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, decoded JSON)`` of one bounded exchange (lower-case header names),
    connected through ``guard`` (the SSRF guard :func:`~vmcp_trio.auth.ssrf.check_fetch_url`
    gave) within the same deadline."""
    try:
        with trio.fail_after(timeout):
            status, raw_headers, data = await client.request(
                method, url, headers=[("accept", "application/json"), *headers], body=body,
                limit=MAX_DOCUMENT_BYTES, guard=guard)
    except trio.TooSlowError:
        raise FetchError(f"{url[:200]} did not answer within {timeout:g}s") from None
    except HttpError as exc:
        raise FetchError(f"{url[:200]}: {exc}") from None
    header_map = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
    try:
        document = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        raise FetchError(f"{url[:200]} answered HTTP {status} with a body that is not "
                         "JSON") from None
    return status, header_map, document


# --- where metadata lives ----------------------------------------------------------------------

def _at(url: str, well_known: str, *, insert: bool) -> str:
    """``url`` with a well-known path inserted before its path (RFC 8414, RFC 9728) or, with
    ``insert=False``, appended to it (OIDC Discovery)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc,
                       well_known + path if insert else path + well_known, "", ""))


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """Where an MCP client looks for an authorization server's metadata, in order (MCP
    2025-06-18 and later): for an issuer with a path, RFC 8414 path-insert, OIDC path-insert,
    OIDC path-append; without one, RFC 8414 then OIDC."""
    if urlsplit(issuer).path.rstrip("/"):
        return [_at(issuer, _OAUTH_AS, insert=True), _at(issuer, _OIDC, insert=True),
                _at(issuer, _OIDC, insert=False)]
    return [_at(issuer, _OAUTH_AS, insert=True), _at(issuer, _OIDC, insert=True)]


def _configured_issuer_urls(issuer: str) -> list[str]:
    """Where a configured (OpenID) issuer's metadata lives, in order: OIDC path-append, then
    RFC 8414 path-insert."""
    return [_at(issuer, _OIDC, insert=False), _at(issuer, _OAUTH_AS, insert=True)]


def _protected_resource_urls(resource: str) -> list[str]:
    """RFC 9728 path-insert (keeping the resource's query), then the root form."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    root = urlunsplit((parts.scheme, parts.netloc, _PROTECTED_RESOURCE, "", ""))
    if not path and not parts.query:
        return [root]
    return [urlunsplit((parts.scheme, parts.netloc, _PROTECTED_RESOURCE + path, parts.query,
                        "")), root]


def _canonical(url: str) -> tuple[object, ...] | None:
    """``url`` as what identifies a resource, or None when it is not an absolute URL."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not scheme or not parts.hostname:
        return None
    if port == _DEFAULT_PORTS.get(scheme):
        port = None
    return (scheme, parts.username, parts.password, parts.hostname, port,
            parts.path.rstrip("/"), parts.query, parts.fragment)


def canonical_uri(url: str) -> str:
    """The canonical URI of an MCP server (RFC 8707 / the MCP spec): lower-case scheme and
    host, no default port, no fragment, no trailing slash."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    port = f":{parts.port}" if parts.port and parts.port != default else ""
    path = parts.path.rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{host}{port}{path}{query}"


def _covers(named: str, resource: str) -> bool:
    """Whether a metadata document's ``resource`` stands for ``resource``: the same URL, or
    one of its parents (same origin, its path a whole-segment prefix and no query), as the MCP
    SDKs allow a server's metadata to name its origin or a base path."""
    given, wanted = _canonical(named), _canonical(resource)
    if given is None or wanted is None:
        return False
    if given == wanted:
        return True
    if given[:5] != wanted[:5] or given[6] or given[7]:
        return False
    base, path = str(given[5]), str(wanted[5])
    return path.startswith(base + "/") or not base


# --- fetching ----------------------------------------------------------------------------------

async def _first_document(client: HttpClient, urls: list[str], *, refused: str, missing: str,
                          allow_http: bool, allow_private: bool,
                          headers: Iterable[tuple[str, str]] = (), switch: str | None = None
                          ) -> tuple[str, dict[str, Any]]:
    """``(url, document)`` of the first candidate that answers 200 with a JSON object."""
    problems: list[str] = []
    for url in urls:
        try:
            guard = check_fetch_url(url, allow_http=allow_http, allow_private=allow_private,
                                    switch=switch)
        except UnsafeUrl as exc:
            raise DiscoveryError(f"{refused}: {exc}") from None
        try:
            status, _, document = await fetch_json(client, url, guard=guard, headers=headers)
        except FetchError as exc:
            problems.append(str(exc))
            continue
        if status != 200 or not isinstance(document, dict):
            problems.append(f"{url} answered HTTP {status}")
            continue
        return url, document
    raise DiscoveryError(f"{missing}: {'; '.join(problems)}")


async def _issuer_document(client: HttpClient, issuer: str, urls: list[str], *,
                           allow_http: bool, allow_private: bool,
                           headers: Iterable[tuple[str, str]] = (),
                           switch: str | None = None) -> dict[str, Any]:
    url, document = await _first_document(
        client, urls, refused="the issuer's metadata URL is refused",
        missing=f"no metadata for the issuer {issuer}", allow_http=allow_http,
        allow_private=allow_private, headers=headers, switch=switch)
    if document.get("issuer") != issuer:
        raise DiscoveryError(f"{url} names the issuer {str(document.get('issuer'))[:200]!r}, "
                             f"not {issuer!r}")
    return document


async def discover(client: HttpClient, issuer: str, *, allow_http: bool,
                   allow_private: bool, headers: Iterable[tuple[str, str]] = (),
                   switch: str | None = None) -> dict[str, Any]:
    """The metadata document of an issuer from the configuration (OIDC Discovery first, see the
    module's rules; ``headers``: sent with each request, such as the bearer token an issuer
    inside the cluster asks for; ``switch``: the setting that allows a private address, which
    a refusal names); raises :class:`DiscoveryError` saying what failed."""
    return await _issuer_document(client, issuer, _configured_issuer_urls(issuer),
                                  allow_http=allow_http, allow_private=allow_private,
                                  headers=headers, switch=switch)


def _strings(document: dict[str, Any], name: str) -> tuple[str, ...]:
    value = document.get(name)
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str))


async def read_authorization_server_metadata(document: dict[str, Any], *, allow_http: bool,
                                             allow_private: bool
                                             ) -> AuthorizationServerMetadata:
    """The checked metadata of a document whose ``issuer`` was already matched: the
    ``authorization_endpoint`` (where the browser goes) must be an https URL (http too with
    ``allow_http``), the ``token_endpoint`` (which vmcp calls) must pass the SSRF guard. The
    ``registration_endpoint`` is checked when it is used (:func:`.registration.register_client`).
    Raises :class:`DiscoveryError`."""
    issuer = str(document.get("issuer"))
    endpoints: dict[str, str] = {}
    for name in ("authorization_endpoint", "token_endpoint"):
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise DiscoveryError(f"the metadata of {issuer} has no {name}")
        endpoints[name] = value
    parts = urlsplit(endpoints["authorization_endpoint"])
    if not parts.hostname or parts.scheme not in (("https", "http") if allow_http
                                                  else ("https",)):
        raise DiscoveryError(f"the metadata of {issuer} names an authorization_endpoint that "
                             f"is not an {'http(s)' if allow_http else 'https'} URL")
    try:
        check_fetch_url(endpoints["token_endpoint"], allow_http=allow_http,
                        allow_private=allow_private)
    except UnsafeUrl as exc:
        raise DiscoveryError(f"the token_endpoint is refused: {exc}") from None
    registration = document.get("registration_endpoint")
    return AuthorizationServerMetadata(
        issuer, endpoints["authorization_endpoint"], endpoints["token_endpoint"],
        registration if isinstance(registration, str) and registration else None,
        _strings(document, "code_challenge_methods_supported"),
        _strings(document, "scopes_supported"), document)


async def authorization_server_metadata(client: HttpClient, issuer: str, *, allow_http: bool,
                                        allow_private: bool) -> AuthorizationServerMetadata:
    """The checked metadata of an authorization server that a protected resource names, looked
    for in the MCP order (:func:`authorization_server_metadata_urls`); its ``issuer`` must be
    ``issuer`` exactly. Raises :class:`DiscoveryError`."""
    document = await _issuer_document(client, issuer, authorization_server_metadata_urls(issuer),
                                      allow_http=allow_http, allow_private=allow_private)
    return await read_authorization_server_metadata(document, allow_http=allow_http,
                                                    allow_private=allow_private)


async def protected_resource_metadata(client: HttpClient, resource: str, *,
                                      metadata_url: str | None, allow_http: bool,
                                      allow_private: bool) -> ProtectedResource:
    """The metadata of the protected resource ``resource`` (RFC 9728): from ``metadata_url``
    (the ``resource_metadata`` of a 401's challenge) when given, else from the well-known URL
    derived from the resource (path-insert, then the root form). Its ``resource`` must be
    ``resource`` or a parent of it (compared as URLs, :func:`_covers`). Raises
    :class:`DiscoveryError`."""
    url, document = await _first_document(
        client, [metadata_url] if metadata_url is not None else _protected_resource_urls(resource),
        refused="the protected resource metadata URL is refused",
        missing=f"no protected resource metadata for {resource}", allow_http=allow_http,
        allow_private=allow_private)
    named = document.get("resource")
    if not isinstance(named, str) or not _covers(named, resource):
        raise ResourceMismatch(f"{url} is the metadata of the resource {str(named)[:200]!r}, "
                             f"not of {resource!r}")
    return ProtectedResource(named, _strings(document, "authorization_servers"),
                             _strings(document, "scopes_supported"))
