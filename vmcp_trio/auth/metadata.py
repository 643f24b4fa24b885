"""RFC 9728 protected resource metadata, and the ``WWW-Authenticate`` challenges that point to it.

An MCP client that knows only the ``/mcp`` URL learns how to log in from here: a 401 names the
metadata document (``resource_metadata``), which names the authorization server(s).

The resource's canonical URL is, in order: the configured ``resourceUrl`` (right behind a
TLS-terminating load balancer), the ``X-Forwarded-Proto``/``X-Forwarded-Host`` of the request when
``--trust-forwarded-headers`` says a trusted proxy sets them, else the request's own scheme and
``Host``. RFC 9728 section 3.1: the document of ``https://h/mcp`` lives at
``https://h/.well-known/oauth-protected-resource/mcp`` (the root form is served too).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .headers import challenge

__all__ = ["METADATA_PATH", "bearer_challenge", "metadata_url", "resource_metadata",
           "resource_url"]

METADATA_PATH = "/.well-known/oauth-protected-resource"


def resource_url(configured: str | None, *, scheme: str, host: str, path: str,
                 forwarded_proto: str | None = None, forwarded_host: str | None = None,
                 trust_forwarded: bool = False) -> str:
    """The canonical URL of the resource at ``path`` (see the module docstring)."""
    if configured:
        return configured
    if trust_forwarded:
        scheme = (forwarded_proto or scheme).split(",")[0].strip().lower() or scheme
        host = (forwarded_host or host).split(",")[0].strip() or host
    return f"{scheme}://{host}{path}"


def metadata_url(resource: str) -> str:
    """Where the metadata of ``resource`` is served (RFC 9728 section 3.1)."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{parts.path.rstrip('/')}"


def resource_metadata(resource: str, authorization_servers: tuple[str, ...],
                      scopes: tuple[str, ...]) -> dict[str, Any]:
    document: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": list(authorization_servers),
        "bearer_methods_supported": ["header"],
    }
    if scopes:
        document["scopes_supported"] = list(scopes)
    return document


def bearer_challenge(resource: str, *, scopes: tuple[str, ...] = (), error: str | None = None,
                     description: str | None = None) -> str:
    """``Bearer resource_metadata="..."`` plus ``scope`` when there are scopes to ask for, and
    ``error``/``error_description`` only when a token was presented (RFC 6750 section 3.1)."""
    params = [("resource_metadata", metadata_url(resource))]
    if scopes:
        params.append(("scope", " ".join(scopes)))
    if error is not None:
        params.append(("error", error))
        if description:
            params.append(("error_description", description))
    return challenge("Bearer", params)
