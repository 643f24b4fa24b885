"""Forwarding one HTTP request to the remote MCP server and its response back, as it arrives.

Rules it keeps:

* Transparent: the method, the path and query exactly as the client encoded them (put on the
  target's origin by :func:`~vmcp_trio.protocol.targets.forwarded_url`, which checks that the URL
  still names that origin: a request-target never steers the proxy, or its credentials, to
  another host), the end-to-end headers (:mod:`.headers`) and the body go to the remote; its
  status, end-to-end headers and
  body come back. The body of an SSE response (a POST's stream, the GET stream, a legacy
  ``/sse`` stream) is relayed chunk by chunk as the remote writes it: a progress notification
  reaches the client before the result.
* Bounded: a request body over ``max_body_bytes`` is refused with 413 before anything is sent
  (request bodies are read whole: an MCP POST is one JSON-RPC message, and a whole body can be
  sent again after a 401), and the bodies held at once are bounded in all and per client
  (:class:`~vmcp_trio.http.body_budget.BodyBudget`: 503 with ``Retry-After`` past it); a
  response is read only as fast as the client takes it (the server's
  ``send`` waits for the socket), so a slow client holds at most the socket buffers, never a
  growing queue.
* The client leaving while the remote's answer is being relayed ends the exchange with the
  remote at once (its stream is closed, so the remote sees the disconnect too). Until the
  remote's response head comes, nothing watches for it (watching costs a task per request,
  a fifth of the proxy's CPU per call): the remote's answer, when it comes, goes nowhere. An
  answer whose body came with its head is relayed in one write, unwatched.
* Outgoing credentials (:mod:`.credentials`) are asked for their headers per request; a 401 from
  the remote to a request that carried one asks it once whether a new value may work, and if so
  sends the request again, once. A credential that cannot be had is 401 with a challenge naming
  the cause (token exchange) or 503 with ``Retry-After`` (no remote login yet).
* Traces (when on, :mod:`vmcp_trio.runtime.tracing`): a span per forwarded request, a child of
  the trace context in the JSON-RPC request's ``_meta`` (SEP-414) or else its headers; the
  remote gets the span's context in both places instead. Off, nothing is parsed: the body and
  the trace headers cross unchanged.
* The remote unreachable or failing before its response started is 502 with a JSON body naming
  the target; a response that breaks off midway ends the client's response there (its framing
  shows the truncation).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..auth.caller import Caller
from ..auth.outgoing.strategies import CredentialError
from ..http.asgi import HttpRequest, Send, send_json, until_client_leaves
from ..http.body_budget import BodyBudget
from ..http.client import HttpClient, HttpError, HttpResponse, Origin
from ..protocol.targets import forwarded_url
from ..runtime import tracing
from .credentials import LoginPending, RemoteCredential, credential_headers, renewed
from .headers import request_headers, response_headers

__all__ = ["Forwarder", "RemoteRefused"]

log = logging.getLogger("vmcp.proxy")


class RemoteRefused(Exception):
    """A credential could not be had for this request: the status and the reason to show."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class Forwarder:
    target: str
    """``--target-uri``; requests go to its origin with their own path and query."""
    client: HttpClient
    credentials: Sequence[RemoteCredential] = ()
    injected: Sequence[tuple[str, str]] = ()
    forward_authorization: bool = True
    """The client's ``Authorization`` crosses (no incoming auth and no outgoing credential)."""
    max_body_bytes: int = 4 * 1024 * 1024
    bodies: BodyBudget = field(default_factory=BodyBudget)
    """What the request bodies being forwarded may hold in all, and per client."""
    origin: str = field(init=False)
    """``scheme://host[:port]`` of the target."""

    def __post_init__(self) -> None:
        origin, _ = Origin.of(self.target)
        self.origin = f"{origin.scheme}://{origin.host_header.decode('ascii')}"

    def url(self, request: HttpRequest) -> str:
        """The remote's URL for ``request`` (raises ValueError when it would leave the
        target's origin)."""
        return forwarded_url(self.origin, request.raw_path,
                             request.query_string.decode("latin-1"))

    async def _headers(self, request: HttpRequest, caller: Caller | None
                       ) -> list[tuple[str, str]]:
        try:
            added = await credential_headers(self.credentials, caller, self.injected)
        except LoginPending as exc:
            raise RemoteRefused(503, str(exc)) from None
        except CredentialError as exc:
            raise RemoteRefused(401, str(exc)) from None
        return tracing.replace_headers(request_headers(
            request.scope["headers"], forward_authorization=self.forward_authorization,
            injected=added))

    async def forward(self, request: HttpRequest, send: Send, caller: Caller | None) -> None:
        """Forward ``request`` and relay the answer (raises :class:`RemoteRefused` before
        anything was sent when a credential cannot be had)."""
        try:
            url = self.url(request)
        except ValueError as exc:
            await send_json(send, 400, {"error": "invalid_request", "error_description":
                                        str(exc)})
            return
        async with self.bodies.body(request, send, self.max_body_bytes,
                                    server="proxy") as body:
            if body is None:
                return
            with tracing.forward_span(request.method, request.path, request.headers, body,
                                      self.origin):
                await self._forward(request, send, caller, url, tracing.replace_body(body))

    async def _forward(self, request: HttpRequest, send: Send, caller: Caller | None, url: str,
                       body: bytes) -> None:
        headers = await self._headers(request, caller)
        again = await self._exchange(request, caller, url, headers, body, send,
                                     may_retry=bool(self.credentials))
        if again is not None:
            await self._exchange(request, caller, url, again, body, send, may_retry=False)

    async def _exchange(self, request: HttpRequest, caller: Caller | None, url: str,
                        headers: list[tuple[str, str]], body: bytes, send: Send, *,
                        may_retry: bool) -> list[tuple[str, str]] | None:
        """One exchange with the remote, relayed; or, after a 401 that a credential may fix,
        the headers to send the request again with (nothing relayed)."""
        try:
            async with self.client.stream(request.method, url, headers=headers,
                                          body=body) as response:
                if response.status in (401, 403) and may_retry and await renewed(
                        self.credentials, response.status, response.header("www-authenticate")):
                    try:
                        return await self._headers(request, caller)
                    except RemoteRefused as exc:
                        log.info("no new remote credential after a 401: %s", exc)
                await self._relay(request, response, send)
        except HttpError as exc:
            log.warning("%s %s: the remote failed: %s", request.method, request.path[:200], exc)
            await send_json(send, 502, {
                "error": "bad_gateway",
                "error_description": f"the remote MCP server {self.origin} did not answer: "
                                     f"{exc}"})
        return None

    async def _relay(self, request: HttpRequest, response: HttpResponse, send: Send) -> None:
        await send({"type": "http.response.start", "status": response.status,
                    "headers": response_headers(response.headers)})
        whole = response.arrived_whole()
        if whole is not None:
            await send({"type": "http.response.body", "body": whole, "more_body": False})
            return
        async with until_client_leaves(request):
            try:
                async for chunk in response.iter_bytes():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except HttpError as exc:
                log.info("the remote's response broke off: %s", exc)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
