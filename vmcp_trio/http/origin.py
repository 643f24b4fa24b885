"""Who may talk to a local HTTP endpoint: the ``Origin`` and DNS-rebinding guards (no I/O).

A browser page of any site can send requests to ``http://127.0.0.1:PORT``; with DNS rebinding it
can even make them same-origin under its own host name. So, as the MCP transport spec asks:

* an ``Origin`` header, when present, must be same-origin (``http(s)://{Host}``) or one the
  operator allowed;
* on a loopback listener, the ``Host`` header must name a loopback host (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port): a rebound name is refused. ``Host`` is read strictly as
  ``host[:port]`` (RFC 9110 section 7.2; the port digits only): ``localhost:80@evil.example``
  or ``localhost evil`` names no loopback host.

:class:`OriginGuard` says why a request is refused (for a 403), or None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .asgi import HttpRequest

__all__ = ["OriginGuard", "host_of"]

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\[\]:@/\\\s]+)(?::[0-9]*)?")
"""``host[:port]``: a bracketed IPv6 address or a name without ``:@/\\``, brackets or
spaces, then digits."""


def host_of(host: str) -> str | None:
    """The host of a ``Host`` value, or None when the value is not ``host[:port]``."""
    match = _HOST.fullmatch(host)
    return match.group(1) if match else None


class OriginGuard:
    def __init__(self, bind_host: str, allowed_origins: Iterable[str] = ()) -> None:
        self.loopback_bind = bind_host in ("127.0.0.1", "localhost", "::1")
        self.allowed_origins = frozenset(allowed_origins)

    def refusal(self, request: HttpRequest) -> str | None:
        origin = request.header("origin")
        host = request.header("host") or ""
        if origin is not None and origin not in self.allowed_origins and origin not in (
                f"http://{host}", f"https://{host}"):
            return "Origin is not allowed"
        if self.loopback_bind and (host_of(host) or "").lower() not in _LOOPBACK_HOSTS:
            return "Host must name a loopback address when the server listens on loopback"
        return None
