"""Where vmcp may fetch auth documents from: the SSRF guard for URLs a peer or a document supplies.

Discovery documents name further URLs (``jwks_uri``, ``token_endpoint``, a registration
endpoint), a client names the URL of its metadata document, and vmcp then fetches them from
inside the cluster. A hostile or compromised peer could point them at internal services (the
cloud metadata address, the Redis, the API server). So, as ToolHive does, these URLs must be
``https`` and reach only public addresses, unless the configuration says otherwise
(``insecureAllowHTTP``, ``jwksAllowPrivateIP``: a development issuer on localhost, an issuer
inside the cluster).

Two steps, one rule:

* :func:`check_fetch_url` refuses at once what the URL itself shows (its scheme; an address
  literal that is not public), with no lookup, and gives the :class:`PublicAddresses` guard the
  fetch must use (None when private addresses are allowed).
* The guard is asked by the HTTP client for the addresses to connect to (the client's
  ``guard``): it resolves the name once and refuses when any answer is not public, and the
  client connects to those very addresses (TLS still checks the name). There is no second
  lookup, so a DNS answer that changes between a check and the connection (rebinding) cannot
  send the connection inside. A guarded connection is never pooled or reused.

Not public (:func:`is_public`): what Python's ``ipaddress`` does not call global (loopback,
private, link-local, shared 100.64/10, documentation, reserved), multicast, and the IPv6 forms
that carry an IPv4 address (mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4
``2002::/16``: judged by the IPv4 address inside), the local NAT64 prefix ``64:ff9b:1::/48``,
IPv4-compatible ``::/96``, IPv4-translated ``::ffff:0:0:0/96`` and site-local ``fec0::/10``.

Lookups of names a peer chose run in worker threads under their own limit (8 at once), inside
the caller's deadline, and a lookup abandoned at the deadline does not hold one of trio's
default threads: a name whose DNS never answers cannot stall the process's other lookups.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import trio

from ..http.client import HttpError

__all__ = ["PUBLIC_ONLY", "PublicAddresses", "UnsafeUrl", "check_fetch_url", "fetch_guard",
           "is_loopback_host", "is_loopback_url", "is_public"]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NEVER_PUBLIC = tuple(ipaddress.ip_network(net) for net in (
    "64:ff9b:1::/48", "::/96", "::ffff:0:0:0/96", "fec0::/10"))
LOOKUPS_AT_ONCE = 8


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


def is_public(address: str) -> bool:
    """Whether an IP address (a string, IPv6 possibly with a zone) is a public one."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
        address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif any(ip in net for net in _NEVER_PUBLIC):
            return False
    return ip.is_global and not ip.is_multicast


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


def _hint(switch: str | None) -> str:
    """What a refusal says to do: the setting that allows private addresses for this fetch,
    when the caller knows it."""
    return f"set {switch} to allow it" if switch else "private addresses are refused here"


class PublicAddresses:
    """The connect guard of fetches that may reach public addresses only (see above);
    ``switch``: the setting a refusal names."""

    def __init__(self, switch: str | None = None) -> None:
        self.switch = switch
        self._limiter: trio.CapacityLimiter | None = None

    async def addresses(self, host: str, port: int) -> Sequence[str]:
        """The addresses to connect to for ``host``; raises :class:`HttpError` when the name
        does not resolve or any of its addresses is not public."""
        if _literal(host):
            found = [host]
        else:
            if self._limiter is None:
                self._limiter = trio.CapacityLimiter(LOOKUPS_AT_ONCE)
            try:
                infos = await trio.to_thread.run_sync(
                    socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM,
                    limiter=self._limiter, abandon_on_cancel=True)
            except OSError as exc:
                raise HttpError(f"cannot resolve {host[:100]}: {exc}") from None
            found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in found:
            if not is_public(address):
                raise HttpError(f"{host[:100]} resolves to the non-public address {address} "
                                f"({_hint(self.switch)})")
        return found


PUBLIC_ONLY = PublicAddresses()
_NAMED: dict[str, PublicAddresses] = {}


def fetch_guard(*, allow_private: bool, switch: str | None = None) -> PublicAddresses | None:
    """The connect guard a fetch uses (one per ``switch``, the setting its refusals name), or
    None when private addresses are allowed."""
    if allow_private:
        return None
    if switch is None:
        return PUBLIC_ONLY
    return _NAMED.setdefault(switch, PublicAddresses(switch))


def check_fetch_url(url: str, *, allow_http: bool, allow_private: bool,
                    switch: str | None = None) -> PublicAddresses | None:
    """Raise :class:`UnsafeUrl` when ``url`` shows it may not be fetched; else the connect
    guard its fetch must go through (:func:`fetch_guard`). No lookup is made here.
    ``switch``: the setting that allows private addresses for this fetch, which a refusal
    names (a generic word without it)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise UnsafeUrl(f"{url[:200]} is not an http(s) URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise UnsafeUrl(f"{url[:200]} is not an http(s) URL")
    if parts.scheme == "http" and not allow_http:
        raise UnsafeUrl(f"{url[:200]} uses plain http (set insecureAllowHTTP to allow it)")
    if not allow_private and (is_loopback_host(host) or host.endswith(".localhost") or (
            _literal(host) and not is_public(host))):
        raise UnsafeUrl(f"{url[:200]} names a non-public address ({_hint(switch)})")
    return fetch_guard(allow_private=allow_private, switch=switch)
