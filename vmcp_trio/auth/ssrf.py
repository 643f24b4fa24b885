"""Where vmcp may fetch auth documents from: the SSRF guard for issuer-supplied URLs.

Discovery documents name further URLs (``jwks_uri``, ``introspection_endpoint``) that vmcp then
fetches from inside the cluster. A hostile or compromised issuer could point them at internal
services (the cloud metadata address, the Redis, the API server). So, as ToolHive does, these URLs
must be ``https`` and resolve only to public addresses, unless the configuration says otherwise
(``insecureAllowHTTP``, ``jwksAllowPrivateIP``: a development issuer on localhost, an issuer inside
the cluster).

The check resolves the name itself; the connection resolves it again (a DNS answer that changes in
between is not caught: pin addresses at the resolver if that matters to you).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import trio

__all__ = ["UnsafeUrl", "check_fetch_url", "is_loopback_host", "is_loopback_url"]


class UnsafeUrl(Exception):
    """A URL the guard refuses; the message says why (the URL is configuration, not secret)."""


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1): where plain http and private
    addresses are a developer's own machine."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    return is_loopback_host(urlsplit(url).hostname or "")


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_fetch_url(url: str, *, allow_http: bool, allow_private: bool) -> None:
    """Raise :class:`UnsafeUrl` unless vmcp may fetch ``url``."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UnsafeUrl(f"{url[:200]} is not an http(s) URL")
    if parts.scheme == "http" and not allow_http:
        raise UnsafeUrl(f"{url[:200]} uses plain http (set insecureAllowHTTP to allow it)")
    if allow_private:
        return
    try:
        infos = await trio.socket.getaddrinfo(parts.hostname, parts.port or 443,
                                              type=trio.socket.SOCK_STREAM)
    except OSError as exc:
        raise UnsafeUrl(f"cannot resolve {parts.hostname[:100]}: {exc}") from None
    for info in infos:
        address = str(info[4][0])
        if not _public(address):
            raise UnsafeUrl(f"{url[:200]} resolves to the non-public address {address} (set "
                            "jwksAllowPrivateIP to allow it)")
