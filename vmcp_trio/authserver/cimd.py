"""Client ID Metadata Documents: clients whose ``client_id`` is an https URL.

MCP 2026-07-28 ("Client Registration") has authorization servers SHOULD support OAuth Client ID
Metadata Documents (draft-ietf-oauth-client-id-metadata-document): a client with no prior
relationship to the server names itself by an https URL, and the server fetches the JSON document
there to learn its name and redirect URIs. :class:`ClientDocuments` fetches, checks and caches
them for the authorization server:

* the URL must be a Client Identifier URL (:func:`~.validation.check_client_id_url`) and pass the
  SSRF guard (:func:`~vmcp_trio.auth.ssrf.check_fetch_url`: https and public addresses only,
  unless ``insecureAllowHTTP``, as for the upstream providers; draft section 8.6);
* one GET, no redirect followed (draft section 5), within :data:`FETCH_TIMEOUT` (the lookup of
  the name, the wait for one of the :data:`FETCHES_AT_ONCE` fetches, the connection and the
  body together), reading at most :data:`MAX_DOCUMENT_BYTES` (5 KB, draft section 8.7); only
  200 with a JSON content type. The connection goes to the addresses the SSRF guard checked
  (no second lookup: no DNS rebinding) and is closed after: every document host is one an
  anonymous caller chose, so none is kept idle;
* the document's rules: :func:`~.validation.validate_client_document` (its ``client_id`` is the
  URL exactly, public clients only, the registration rules for the rest);
* cached in memory per process as its ``Cache-Control`` says, between :data:`MIN_CACHE` and
  :data:`MAX_CACHE` seconds (``cimd.cacheFallbackTtl``, default :data:`DEFAULT_CACHE`, without
  one; ``no-store``, ``no-cache`` or ``max-age=0``: not cached), bounded (``cimd.cacheMaxSize``,
  default :data:`MAX_CACHED`, least recently used out). ``cimd.enabled: false`` turns them off:
  a URL is then an unknown client id. Failures and
  invalid documents are never cached (draft section 5.2).

Errors are :class:`ClientDocumentError`; the message says what was wrong without quoting the
document (attacker-chosen text), and ``unavailable`` tells a host that could not be reached (worth
retrying) from a document that is wrong.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict

import orjson
import trio

from ..auth.ssrf import UnsafeUrl, check_fetch_url
from ..http.client import ConnectGuard, HttpClient, HttpError
from .storage import RegisteredClient
from .validation import OAuthError, check_client_id_url, validate_client_document

__all__ = ["DEFAULT_CACHE", "FETCHES_AT_ONCE", "FETCH_TIMEOUT", "MAX_CACHE", "MAX_CACHED",
           "MAX_DOCUMENT_BYTES", "MIN_CACHE", "ClientDocumentError", "ClientDocuments",
           "is_client_id_url"]

MAX_DOCUMENT_BYTES = 5 * 1024
FETCH_TIMEOUT = 5.0
DEFAULT_CACHE = 300.0
MIN_CACHE = 60.0
MAX_CACHE = 24 * 3600.0
MAX_CACHED = 1000
FETCHES_AT_ONCE = 16

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\s*(?:[,=]|$)", re.IGNORECASE)
_JSON_TYPE = re.compile(r"application/(?:[a-z0-9.+-]+\+)?json", re.IGNORECASE)


class ClientDocumentError(Exception):
    """The client's metadata document cannot be used; the message says why. ``unavailable``:
    its host could not be reached or failed (a timeout, a connection error, a 5xx)."""

    def __init__(self, message: str, *, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


def is_client_id_url(client_id: str, *, allow_http: bool) -> bool:
    """Whether ``client_id`` is meant as a Client Identifier URL. The ids this server issues at
    registration are random base64url text, so they never start with a scheme. The scheme is
    case-insensitive (RFC 3986 3.1), as :func:`~.validation.check_client_id_url` reads it."""
    scheme = client_id[:8].lower()
    return scheme == "https://" or (allow_http and scheme.startswith("http://"))


def cache_lifetime(cache_control: str | None, default: float = DEFAULT_CACHE) -> float:
    """Seconds to keep a document served with this ``Cache-Control`` (0: not at all;
    ``default`` without a max-age)."""
    if not cache_control:
        return default
    if _NO_CACHE.search(cache_control):
        return 0.0
    match = _MAX_AGE.search(cache_control)
    if match is None:
        return default
    seconds = int(match.group(1)[:9])
    return 0.0 if seconds == 0 else min(MAX_CACHE, max(MIN_CACHE, float(seconds)))


class ClientDocuments:
    def __init__(self, *, allow_http: bool, allow_private: bool,
                 timeout: float = FETCH_TIMEOUT, max_cached: int = MAX_CACHED,
                 enabled: bool = True, default_lifetime: float = DEFAULT_CACHE) -> None:
        self.client = HttpClient(max_idle_per_origin=0)
        """Its own, keeping no connection: each document host is a new origin an anonymous
        caller chose, and idle connections to such hosts would pile up."""
        self._fetching = trio.CapacityLimiter(FETCHES_AT_ONCE)
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.timeout = timeout
        self.max_cached = max_cached
        self.enabled = enabled
        """False (``cimd.enabled: false``): a URL is no client id here (an unknown client)."""
        self.default_lifetime = default_lifetime
        """How long a document is cached when its host sends no max-age
        (``cimd.cacheFallbackTtl``)."""
        self._cache: OrderedDict[str, tuple[float, RegisteredClient]] = OrderedDict()
        self.fetches = 0
        """Documents fetched by this process (for tests)."""

    def is_document_client(self, client_id: str) -> bool:
        return self.enabled and is_client_id_url(client_id, allow_http=self.allow_http)

    async def resolve(self, url: str) -> RegisteredClient:
        """The client described by the document at ``url`` (from the cache while it is fresh).
        Raises ClientDocumentError."""
        now = time.monotonic()
        cached = self._cache.get(url)
        if cached is not None:
            if cached[0] > now:
                self._cache.move_to_end(url)
                return cached[1]
            del self._cache[url]
        client, lifetime = await self._fetch(url)
        if lifetime > 0:
            self._cache[url] = (now + lifetime, client)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return client

    async def _fetch(self, url: str) -> tuple[RegisteredClient, float]:
        try:
            check_client_id_url(url, allow_http=self.allow_http)
        except OAuthError as exc:
            raise ClientDocumentError(exc.description) from None
        try:
            guard = check_fetch_url(url, allow_http=self.allow_http,
                                    allow_private=self.allow_private,
                                    switch="authServerConfig.insecureAllowHTTP")
        except UnsafeUrl as exc:
            raise ClientDocumentError(f"the client_id URL is refused: {exc}") from None
        self.fetches += 1
        try:
            with trio.fail_after(self.timeout):
                async with self._fetching:
                    status, content_type, cache_control, body = await self._get(url, guard)
        except trio.TooSlowError:
            raise ClientDocumentError(f"the client's metadata document did not arrive within "
                                      f"{self.timeout:g}s", unavailable=True) from None
        except HttpError as exc:
            raise ClientDocumentError(f"the client's metadata document could not be fetched: "
                                      f"{exc}", unavailable=True) from None
        if status != 200:
            reason = " (redirects are not followed)" if 300 <= status < 400 else ""
            raise ClientDocumentError(f"the client_id URL answered HTTP {status}{reason}",
                                      unavailable=status >= 500)
        if content_type is None or not _JSON_TYPE.fullmatch(content_type.split(";")[0].strip()):
            raise ClientDocumentError("the client's metadata document is not served as JSON "
                                      "(Content-Type: application/json)")
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ClientDocumentError("the client's metadata document is not valid "
                                      "JSON") from None
        try:
            metadata = validate_client_document(document, url)
        except OAuthError as exc:
            raise ClientDocumentError(exc.description) from None
        now = time.time()
        lifetime = cache_lifetime(cache_control, self.default_lifetime)
        return RegisteredClient(
            client_id=url, redirect_uris=metadata.redirect_uris,
            token_endpoint_auth_method="none", grant_types=metadata.grant_types,
            client_name=metadata.client_name, scope=metadata.scope, secret_sha256=None,
            created_at=now, expires_at=now + lifetime,
            application_type=metadata.application_type), lifetime

    async def _get(self, url: str, guard: ConnectGuard | None
                   ) -> tuple[int, str | None, str | None, bytes]:
        """``(status, Content-Type, Cache-Control, body)``; a body over the limit is an error,
        read no further (the connection is closed)."""
        async with self.client.stream("GET", url, headers=[("accept", "application/json")],
                                      guard=guard) as response:
            if response.status != 200:
                return response.status, None, None, b""
            parts: list[bytes] = []
            size = 0
            async for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_DOCUMENT_BYTES:
                    raise ClientDocumentError(f"the client's metadata document is larger than "
                                              f"{MAX_DOCUMENT_BYTES // 1024} KB")
                parts.append(chunk)
            return (response.status, response.header("content-type"),
                    response.header("cache-control"), b"".join(parts))
