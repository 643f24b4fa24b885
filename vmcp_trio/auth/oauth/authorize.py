"""The authorization request (RFC 6749 section 4.1.1) as a URL: sans-IO, no state of its own.

Rules it keeps:

* The authorization code flow with PKCE S256 always: ``response_type=code`` and
  ``code_challenge_method=S256`` are not the caller's to choose.
* The endpoint's own query is kept (RFC 6749 section 3.1: it MUST be retained); the request's
  parameters follow it. Values are percent-encoded with ``%20`` for spaces (never ``+``, which
  some servers read literally), so scopes join as ``read%20write``.
* Parameter order: ``response_type``, ``client_id``, ``redirect_uri``, the scopes (under
  ``scope_param_name``, omitted when there are none), ``state``, ``code_challenge``,
  ``code_challenge_method``, ``resource`` (RFC 8707, when given), then ``extra`` (``nonce``,
  provider-specific parameters). An ``extra`` parameter may not repeat one of these: ValueError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

__all__ = ["authorization_url"]


def authorization_url(endpoint: str, *, client_id: str, redirect_uri: str, state: str,
                      code_challenge: str, scopes: Sequence[str], resource: str | None = None,
                      scope_param_name: str = "scope",
                      extra: Iterable[tuple[str, str]] = ()) -> str:
    """Where to send the user's browser to ask for an authorization code."""
    params = [("response_type", "code"), ("client_id", client_id),
              ("redirect_uri", redirect_uri)]
    if scopes:
        params.append((scope_param_name, " ".join(scopes)))
    params += [("state", state), ("code_challenge", code_challenge),
               ("code_challenge_method", "S256")]
    if resource is not None:
        params.append(("resource", resource))
    ours = {name for name, _ in params}
    for name, value in extra:
        if name in ours:
            raise ValueError(f"the authorization request sets {name!r} itself")
        params.append((name, value))
    parts = urlsplit(endpoint)
    query = urlencode(params, quote_via=quote)
    return urlunsplit((parts.scheme, parts.netloc, parts.path,
                       f"{parts.query}&{query}" if parts.query else query, parts.fragment))
