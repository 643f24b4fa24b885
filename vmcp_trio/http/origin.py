"""Who may talk to a local HTTP endpoint: the ``Origin`` and DNS-rebinding guards (no I/O).

A browser page of any site can send requests to ``http://127.0.0.1:PORT``; with DNS rebinding it
can even make them same-origin under its own host name. So, as the MCP transport spec asks:

* an ``Origin`` header, when present, must be same-origin (``http(s)://{Host}``) or one the
  operator allowed;
* on a loopback listener, the ``Host`` header must name a loopback host (``localhost``,
  ``127.0.0.1``, ``[::1]``, any port): a rebound name is refused.

:class:`OriginGuard` says why a request is refused (for a 403), or None.
"""

from __future__ import annotations

from collections.abc import Iterable

from .asgi import HttpRequest

__all__ = ["OriginGuard"]

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


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
        if self.loopback_bind and _host_name(host).lower() not in _LOOPBACK_HOSTS:
            return "Host must name a loopback address when the server listens on loopback"
        return None
