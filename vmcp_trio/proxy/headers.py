"""Which headers cross the proxy, in each direction, and which an operator may inject (no I/O).

Rules it keeps (RFC 9110 section 7.6.1, and the proxy's two boundaries):

* Hop-by-hop headers never cross: ``Connection`` and every header it names, ``Keep-Alive``,
  ``Proxy-Connection``, ``Proxy-Authenticate``, ``Proxy-Authorization``, ``TE``, ``Trailer``,
  ``Transfer-Encoding``, ``Upgrade``. ``Host`` and ``Content-Length`` are the HTTP client's to
  set for the next hop.
* What a client says of where it came from never crosses: ``Forwarded``, ``X-Forwarded-*``
  and ``X-Real-IP`` are dropped, and none is added (a remote that reads them would take a
  client's word for its address; the remote sees the proxy, or the agent, as its client).
* Everything else (``Mcp-Session-Id``, ``MCP-Protocol-Version``, ``Last-Event-ID``, ``Accept``,
  ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``, ``traceparent``, ...) is end-to-end and
  crosses unchanged, in order.
* ``Authorization`` crosses to the remote only when the proxy neither validates incoming tokens
  (the client's token is then for the proxy) nor holds an outgoing credential (which replaces
  it): with no auth at all the proxy is transparent and the client may authenticate to the
  remote itself.
* Injected headers (``--remote-forward-headers``) are added after the client's, replacing a
  client header of the same name. An operator may not inject ``Host``, a hop-by-hop header,
  ``Content-Length``, ``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``, ``Proxy-*``, nor
  ``Authorization`` when another outgoing credential is set: :func:`check_injected` says why,
  naming the header.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["HOP_BY_HOP", "InjectedHeader", "check_injected", "parse_injected",
           "request_headers", "response_headers"]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"})
_SET_BY_CLIENT = frozenset({"host", "content-length"})
_CLAIMED_ORIGIN = frozenset({"forwarded", "x-real-ip"})
"""With every ``x-forwarded-*``: where a request came from, which only a trusted hop may say."""
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

InjectedHeader = tuple[str, str]
"""``(name, value)`` of a header the proxy adds to every forwarded request."""


def _claims_origin(name: str) -> bool:
    return name in _CLAIMED_ORIGIN or name.startswith("x-forwarded-")


def _named_by_connection(headers: Iterable[tuple[str, str]]) -> set[str]:
    named: set[str] = set()
    for name, value in headers:
        if name == "connection":
            named.update(part.strip().lower() for part in value.split(",") if part.strip())
    return named


def request_headers(incoming: Sequence[tuple[bytes, bytes]], *, forward_authorization: bool,
                    injected: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The headers of the request to the remote: the client's end-to-end headers (lower-case
    names), then ``injected`` (which replace the client's of the same names)."""
    decoded = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in incoming]
    dropped = HOP_BY_HOP | _SET_BY_CLIENT | _named_by_connection(decoded)
    replaced = {name.lower() for name, _ in injected}
    if not forward_authorization:
        replaced.add("authorization")
    kept = [(k, v) for k, v in decoded
            if k not in dropped and k not in replaced and not _claims_origin(k)]
    return [*kept, *((name.lower(), value) for name, value in injected)]


def response_headers(upstream: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The remote's response headers as the client gets them: hop-by-hop ones dropped (the
    server in front of the client frames the body itself)."""
    named = _named_by_connection((k.decode("latin-1").lower(), v.decode("latin-1"))
                                 for k, v in upstream)
    dropped = HOP_BY_HOP | {"content-length"} | named
    return [(k, v) for k, v in upstream if k.decode("latin-1").lower() not in dropped]


def parse_injected(spec: str) -> InjectedHeader:
    """``Name=Value`` (or ``Name=<secret name>``); raises ValueError naming what is wrong."""
    name, sep, value = spec.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"{spec.partition('=')[0][:100]!r} is not Name=Value")
    if not set(name) <= _TOKEN_CHARS:
        raise ValueError(f"{name[:100]!r} is not a valid header name")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"the value of {name} holds a line break or NUL")
    return name, value


def check_injected(name: str, *, authorization_in_use: bool) -> str | None:
    """Why ``name`` may not be injected, or None."""
    lower = name.lower()
    if lower == "host":
        return "Host is the target's, set by the proxy"
    if lower in HOP_BY_HOP:
        return f"{name} is a hop-by-hop header (RFC 9110 section 7.6.1)"
    if lower == "content-length":
        return "Content-Length is computed for each request"
    if lower.startswith("proxy-"):
        return f"{name} is for proxies, not for the remote server"
    if _claims_origin(lower):
        return f"{name} would let the proxy forge where a request came from"
    if lower == "authorization" and authorization_in_use:
        return "Authorization already carries the outgoing credential (--remote-auth, a " \
               "bearer token or token exchange)"
    return None
