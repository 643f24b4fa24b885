"""Fetching an issuer's metadata: OpenID Connect discovery and RFC 8414.

:func:`fetch_json` is the one bounded JSON GET/POST of the auth code (discovery, JWKS,
introspection). :func:`discover` finds an issuer's metadata the way RFC 8414 section 3 and OIDC
Discovery say: ``{issuer}/.well-known/openid-configuration`` first, then
``/.well-known/oauth-authorization-server{path}``; the document's ``issuer`` must equal the
configured issuer exactly (RFC 8414 section 3.3, against mix-up attacks).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import trio

from ..http.client import HttpClient, HttpError
from .ssrf import UnsafeUrl, check_fetch_url

__all__ = ["DiscoveryError", "FetchError", "discover", "fetch_json", "well_known_urls"]

MAX_DOCUMENT_BYTES = 512 * 1024
FETCH_TIMEOUT = 10.0


class FetchError(Exception):
    """A document could not be fetched or read; the message names the URL and what failed."""


class DiscoveryError(FetchError):
    pass


async def fetch_json(client: HttpClient, url: str, *, method: str = "GET",
                     headers: Iterable[tuple[str, str]] = (), body: bytes = b"",
                     timeout: float = FETCH_TIMEOUT) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, decoded JSON)`` of one bounded exchange (lower-case header names)."""
    try:
        with trio.fail_after(timeout):
            status, raw_headers, data = await client.request(
                method, url, headers=[("accept", "application/json"), *headers], body=body,
                limit=MAX_DOCUMENT_BYTES)
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


def well_known_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may live, in the order clients try them."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [issuer.rstrip("/") + "/.well-known/openid-configuration",
            urlunsplit((parts.scheme, parts.netloc,
                        "/.well-known/oauth-authorization-server" + path, "", ""))]


async def discover(client: HttpClient, issuer: str, *, allow_http: bool,
                   allow_private: bool) -> dict[str, Any]:
    """The issuer's metadata document; raises :class:`DiscoveryError` saying what failed."""
    problems: list[str] = []
    for url in well_known_urls(issuer):
        try:
            await check_fetch_url(url, allow_http=allow_http, allow_private=allow_private)
        except UnsafeUrl as exc:
            raise DiscoveryError(f"the issuer's metadata URL is refused: {exc}") from None
        try:
            status, _, document = await fetch_json(client, url)
        except FetchError as exc:
            problems.append(str(exc))
            continue
        if status != 200 or not isinstance(document, dict):
            problems.append(f"{url} answered HTTP {status}")
            continue
        if document.get("issuer") != issuer:
            raise DiscoveryError(f"{url} names the issuer {str(document.get('issuer'))[:200]!r}, "
                                 f"not {issuer!r}")
        return document
    raise DiscoveryError(f"no metadata for the issuer {issuer}: {'; '.join(problems)}")
