"""Fuzz Client ID Metadata Documents (vmcp_trio/authserver/cimd.py and the rules it applies from
validation.py): the client_id URL (``check_client_id_url``), a document judged against the URL it
came from (``validate_client_document``), its ``Cache-Control`` (``cache_lifetime``), and the
whole of ``ClientDocuments.resolve`` for a URL that would be fetched, its one GET answered from
the input (``_get``, the only I/O, replaced; run under ``trio.run`` for its deadline).

Only OAuthError (the rules) and ClientDocumentError (``resolve``) escape, and neither message
quotes the document. What is accepted keeps the rules: a client_id URL is https (http only when
allowed) with a host and a path, no fragment, no user information, no . or .. segment; a
document's ``client_id`` is the URL exactly, it holds no secret and names no authentication but
none, it has a client name, its 1 to 10 redirect URIs are absolute and https, http on a loopback
host, or a private-use scheme, without fragment or user information, and it reads as the same
registration ``validate_client_metadata`` makes of it; ``resolve`` gives such a client only from a
200 answer served as JSON, cached exactly when ``cache_lifetime`` says to, within its bounds.

The input: a byte of flags (bit 0: http allowed; bit 1: private addresses allowed; bits 2-3: the
answer's status, 200, 200, 302 or 503), then lines: the client_id URL, the Content-Type, the
Cache-Control, and the rest is the document. A document is also judged against its own
``client_id``, so that mutations of either keep finding documents that match."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
import trio

from vmcp_trio.auth.ssrf import UnsafeUrl, check_fetch_url
from vmcp_trio.authserver.cimd import (
    MAX_CACHE,
    MIN_CACHE,
    ClientDocumentError,
    ClientDocuments,
    cache_lifetime,
)
from vmcp_trio.authserver.validation import (
    OAuthError,
    check_client_id_url,
    validate_client_document,
    validate_client_metadata,
)
from vmcp_trio.http.client import ConnectGuard

STATUSES = (200, 200, 302, 503)
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_JSON = re.compile(r"application/(?:[a-z0-9.+-]+\+)?json")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def check_url(url: str, allow_http: bool) -> bool:
    try:
        check_client_id_url(url, allow_http=allow_http)
    except OAuthError:
        return False
    parts = urlsplit(url)
    check(parts.scheme in (("https", "http") if allow_http else ("https",))
          and bool(parts.hostname) and "@" not in parts.netloc and "#" not in url
          and not _CONTROL.search(url) and url.isascii() and parts.path.startswith("/")
          and all(unquote(s) not in (".", "..") for s in parts.path.split("/")),
          f"accepted the client_id URL {url!r}")
    return True


def check_uri(uri: str) -> None:
    parts = urlsplit(uri)
    check(uri.isascii() and not _CONTROL.search(uri) and "#" not in uri
          and "@" not in parts.netloc and bool(parts.scheme) and (
              (parts.scheme == "https" and bool(parts.hostname))
              or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "::1", "localhost"))
              or "." in parts.scheme), f"accepted the redirect URI {uri!r}")


def check_document(document: Any, url: str) -> None:
    try:
        metadata = validate_client_document(document, url)
    except OAuthError as exc:
        check_quiet(str(exc), document, url)
        return
    name = document.get("client_name")
    check(document["client_id"] == url and not {"client_secret", "client_secret_expires_at"}
          & document.keys() and document.get("token_endpoint_auth_method", "none") == "none"
          and isinstance(name, str) and name.strip() != "" and metadata.client_name == name
          and 1 <= len(metadata.redirect_uris) <= 10 and metadata.public,
          f"accepted the document {document!r} from {url!r}")
    for uri in metadata.redirect_uris:
        check_uri(uri)
    check(metadata == validate_client_metadata(document, allow_confidential=False),
          "a document reads as another registration")


def check_quiet(message: str, document: Any, url: str) -> None:
    """An error never quotes the document's text (attacker-chosen)."""
    values = list(document.values()) if isinstance(document, dict) else []
    for value in values + [v for item in values if isinstance(item, list) for v in item]:
        if isinstance(value, str) and len(value) >= 24 and value not in url:
            check(value not in message, f"the error {message!r} quotes the document")


class Documents(ClientDocuments):
    """The one fetch answered from the input (one instance: its HTTP client costs ~20 ms)."""

    answer: tuple[int, str | None, str | None, bytes]

    async def _get(self, url: str, guard: ConnectGuard | None
                   ) -> tuple[int, str | None, str | None, bytes]:
        return self.answer


DOCUMENTS = Documents(allow_http=False, allow_private=False)


def check_resolve(url: str, flags: int, content_type: str, cache_control: str, body: bytes,
                  document: Any) -> None:
    documents, status = DOCUMENTS, STATUSES[flags >> 2 & 3]
    documents.allow_http, documents.allow_private = bool(flags & 1), bool(flags & 2)
    documents.answer = (status, content_type, cache_control, body)
    documents._cache.clear()
    try:
        client = trio.run(documents.resolve, url)
    except ClientDocumentError as exc:
        check_quiet(str(exc), document, url)
        check(exc.unavailable == (status >= 500), "unavailable is not a 5xx answer")
        return
    lifetime = cache_lifetime(cache_control)
    check(status == 200 and bool(_JSON.fullmatch(content_type.split(";")[0].strip().lower()))
          and client.client_id == url and client.token_endpoint_auth_method == "none"
          and client.redirect_uris == validate_client_document(document, url).redirect_uris
          and (url in documents._cache) == (lifetime > 0), f"resolved {client!r}")


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    flags = data[0]
    url, content_type, cache_control, body = (data[1:].split(b"\n", 3) + [b""] * 3)[:4]
    url_text = url.decode("utf-8", errors="replace")
    cache_text = cache_control.decode("latin-1")
    lifetime = cache_lifetime(cache_text)
    check(lifetime == 0 or MIN_CACHE <= lifetime <= MAX_CACHE, f"cached for {lifetime!r}")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    check_document(document, url_text)
    if isinstance(document, dict) and isinstance(document.get("client_id"), str):
        check_document(document, document["client_id"])
    if not check_url(url_text, bool(flags & 1)):
        return
    try:
        check_fetch_url(url_text, allow_http=bool(flags & 1), allow_private=bool(flags & 2))
    except UnsafeUrl:
        return  # never fetched (the SSRF guard's rules are not this harness's)
    check_resolve(url_text, flags, content_type.decode("latin-1"), cache_text, body, document)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
