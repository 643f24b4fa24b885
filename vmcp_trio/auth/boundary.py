"""Boundary 1 at the HTTP door: who is calling, the challenge when nobody is, and the RFC 9728
document that tells a client where to log in. One home for ``vmcp serve`` and ``vmcp proxy``.

Rules it keeps:

* The token comes from the ``Authorization: Bearer`` header only (RFC 6750 section 2.1): a
  malformed header is 400 ``invalid_request``; a token in the query string is refused (it would
  end up in access logs), even next to a header.
* A refusal is a JSON body ``{"error", "error_description"}`` and, for 400/401/403, a
  ``WWW-Authenticate: Bearer`` challenge with ``resource_metadata`` (and ``scope``: the required
  scopes, else the advertised ones; ``error`` only when a token was presented); 503 (the keys or
  the introspection endpoint cannot be reached) carries ``Retry-After``. The description never
  contains the token.
* The protected resource's canonical URL and its metadata follow :mod:`.metadata`: the
  configured resource URL, else the trusted forwarded headers, else the request's own scheme and
  ``Host``. The document is readable from any origin (CORS), with ``GET``/``HEAD`` only.
* The authenticator can be swapped (a reload): each request uses the one current when it
  arrived.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..http.asgi import HttpRequest, Send, send_empty, send_json
from ..runtime.logs import note
from .caller import Caller
from .headers import HeaderError, bearer_credential, check_token68
from .incoming.authenticator import Authenticator, AuthFailure
from .metadata import METADATA_PATH, bearer_challenge, resource_metadata, resource_url

__all__ = ["IncomingBoundary"]

log = logging.getLogger("vmcp.http")

_CORS = [("access-control-allow-origin", "*"),
         ("access-control-allow-methods", "GET, OPTIONS"),
         ("access-control-allow-headers", "mcp-protocol-version, authorization"),
         ("access-control-max-age", "3600")]


class IncomingBoundary:
    def __init__(self, authenticator: Authenticator, *, path: str, default_host: str,
                 configured_resource: str | None = None, trust_forwarded: bool = False,
                 scopes_supported: tuple[str, ...] | None = None,
                 on_refusal: Callable[[AuthFailure], None] | None = None,
                 passthrough: tuple[str, ...] = ()) -> None:
        self.authenticator = authenticator
        self.passthrough = passthrough
        """Request headers (lower-case names) the caller carries on to the backends."""
        self.path = path
        """The protected endpoint's path (``/mcp``)."""
        self.default_host = default_host
        """``host:port`` of the listener, for a request without ``Host``."""
        self.configured_resource = configured_resource
        self.trust_forwarded = trust_forwarded
        self.scopes_supported = scopes_supported
        """Scopes the document advertises (None: the authenticator's)."""
        self.on_refusal = on_refusal
        self.metadata_paths = frozenset({METADATA_PATH, METADATA_PATH + path})
        """Where the RFC 9728 document is served (the path-suffixed and the root form)."""

    def resource(self, request: HttpRequest) -> str:
        """The canonical URL of the protected endpoint (see :mod:`.metadata`)."""
        return resource_url(
            self.configured_resource, scheme=request.scheme,
            host=request.header("host") or self.default_host, path=self.path,
            forwarded_proto=request.header("x-forwarded-proto"),
            forwarded_host=request.header("x-forwarded-host"),
            trust_forwarded=self.trust_forwarded)

    def _scopes(self) -> tuple[str, ...]:
        if self.scopes_supported is not None:
            return self.scopes_supported
        return self.authenticator.scopes_supported

    async def serve_metadata(self, request: HttpRequest, send: Send) -> None:
        """RFC 9728, readable by browser clients from any origin (CORS)."""
        if request.method == "OPTIONS":
            await send_empty(send, 204, _CORS)
            return
        if request.method not in ("GET", "HEAD"):
            await send_json(send, 405, {"error": "method not allowed"}, [("allow", "GET")])
            return
        await send_json(send, 200, resource_metadata(
            self.resource(request), self.authenticator.authorization_servers, self._scopes()),
            [*_CORS, ("cache-control", "public, max-age=300")])

    def _forwarded(self, request: HttpRequest) -> tuple[tuple[str, str], ...]:
        if not self.passthrough:
            return ()
        return tuple((name, value) for name in self.passthrough
                     if (value := request.header(name)) is not None)

    async def authenticate(self, request: HttpRequest, send: Send) -> Caller | None:
        """Who is calling, or None after answering 400/401/403/503 with a challenge."""
        auth = self.authenticator
        if auth.anonymous:
            identity = await auth.authenticate(None)
            note(subject=identity.subject)
            return Caller(identity, address=request.client_group,
                          forwarded=self._forwarded(request))
        try:
            if request.query_string and "access_token" in request.query:
                raise AuthFailure(400, "invalid_request", "tokens in the query string are "
                                  "refused: send it in the Authorization header")
            try:
                token = bearer_credential(request.header("authorization"))
                known = auth.cached(token) if token is not None else None
                if known is None and token is not None:
                    check_token68(token)  # a token found verified was well formed
            except HeaderError as exc:
                raise AuthFailure(400, "invalid_request", exc.reason) from None
            identity = known if known is not None else await auth.authenticate(token)
            note(subject=identity.subject)
            return Caller(identity, token, request.client, self._forwarded(request))
        except AuthFailure as failure:
            if self.on_refusal is not None:
                self.on_refusal(failure)
            log.info("refused %s %s: %s", request.method, request.path, failure)
            await self.refuse(request, send, failure)
            return None

    async def refuse(self, request: HttpRequest, send: Send, failure: AuthFailure) -> None:
        """Answer ``failure`` (see the module docstring)."""
        headers: list[tuple[str, str]] = []
        if failure.status in (400, 401, 403):
            auth = self.authenticator
            scopes = auth.required_scopes or self._scopes()
            headers.append(("www-authenticate", bearer_challenge(
                self.resource(request), scopes=scopes, error=failure.error,
                description=failure.description)))
        if failure.status == 503:
            headers.append(("retry-after", "5"))
        body: dict[str, str] = {"error": failure.error or "unauthorized",
                                "error_description": failure.description}
        await send_json(send, failure.status, body, headers)
