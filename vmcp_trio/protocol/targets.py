"""Request-targets: which ones a server of this package accepts, and how a forwarder puts one on
its target's origin (no I/O).

The HTTP parsers under the servers accept any visible characters as a request-target, so the
rules are kept here, once, for every server (the gateway, ``vmcp proxy``, the tunnel relay and
agent, the OAuth callback server) and for the tunnel's request heads:

* Only the origin-form is served (RFC 9112 section 3.2.1: an absolute path, then an optional
  query): a target that does not start with ``/`` (``@host/x``, ``%40host``,
  ``.attacker.example/x``, ``http://host/x``, ``*``) is refused, and so is one holding a ``#``,
  a backslash, a byte outside visible ASCII, or a percent-encoded control character
  (``%0d%0a``, ``%00``): none has a meaning to an MCP server, and each has been a way to make a
  forwarder send something else than it was asked.
* A forwarder never trusts string joining to make the next hop's URL: :func:`forwarded_url`
  keeps the request's path and query exactly as the client encoded them (the remote sees the
  same bytes, ``%2F`` stays ``%2F``), puts them on the target's origin, and parses the result
  with the parser the HTTP client uses (``urllib.parse.urlsplit``) to check that it still names
  that origin, before anything is sent.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote, urlsplit

__all__ = ["forwarded_url", "target_problem"]

_VISIBLE = re.compile(r"[\x21-\x7e]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def target_problem(raw_path: str, query: str, path: str | None = None) -> str | None:
    """Why a request-target (``raw_path`` and ``query`` as received; ``path`` percent-decoded,
    else decoded here) is not one this package serves, or None. The reason names the rule,
    never the target."""
    if not raw_path.startswith("/"):
        return "the request-target must be an absolute path (origin-form: /path?query)"
    if not (_VISIBLE.fullmatch(raw_path) and _VISIBLE.fullmatch(query)):
        return "the request-target holds a character that is not visible ASCII"
    if "#" in raw_path or "#" in query or "\\" in raw_path or "\\" in query:
        return "the request-target holds a '#' or a backslash"
    if _CONTROL.search(unquote(raw_path) if path is None else path):
        return "the request-target's path holds a percent-encoded control character"
    return None


@functools.lru_cache(maxsize=64)  # a forwarder has one target
def _split_origin(origin: str) -> tuple[str, str]:
    parts = urlsplit(origin)
    return parts.scheme, parts.netloc


def forwarded_url(origin: str, raw_path: str, query: str) -> str:
    """``raw_path`` and ``query`` (as received, still percent-encoded) on ``origin``
    (``scheme://host[:port]``); raises :class:`ValueError` when the result would not name that
    origin (a target that :func:`target_problem` accepts never does)."""
    url = f"{origin}{raw_path}" + (f"?{query}" if query else "")
    parts = urlsplit(url)
    if target_problem(raw_path, query) is not None or (
            parts.scheme, parts.netloc) != _split_origin(origin):
        raise ValueError("the request-target would leave the target's origin")
    return url
