"""The diagnostics listener of ``vmcp serve`` (``--diagnostics-port``): the operator's status
view and the probes, on a port of their own that MCP clients never reach.

Paths (GET or HEAD only; anything else is 405, an unknown path 404):

* ``/`` and ``/status``: the status page (:mod:`.status_page`), HTML for a person;
* ``/status.json``: the same document as JSON (:mod:`.status`), what ``vmcp status`` reads;
* the probes (:mod:`vmcp_trio.http.probes`): ``/health``, ``/healthz``, ``/livez``,
  ``/readyz``, ``/metrics``, answered as on the main port.

Rules it keeps:

* Loopback by default (``--diagnostics-host 127.0.0.1``). On a loopback listener the ``Host``
  header must name a loopback host and an ``Origin`` must be the page's own
  (:class:`~vmcp_trio.http.origin.OriginGuard`: 403 otherwise), so a web page in the
  operator's browser cannot read the status through DNS rebinding. Bound elsewhere (a pod's
  address, for a scraper), any ``Host`` is let in: who reaches the port is the network's
  decision.
* Read-only, and nothing secret on it (:mod:`.status`); no token is asked, as for the probes:
  it is for the operator's network, never the public one.
* A fault ends its request only (500 naming the request id); the probes write no access
  record.
"""

from __future__ import annotations

import logging

import orjson

from ..http.asgi import HttpRequest, Receive, Scope, Send, http_request, send_bytes, send_json
from ..http.origin import OriginGuard
from ..http.probes import PROBE_PATHS, Probes
from ..proxy.served import serve_contained
from .parts import GatewayProcess
from .status import status_document
from .status_page import PAGE_HEADERS, status_page

__all__ = ["DiagnosticsApp"]

log = logging.getLogger("vmcp.diagnostics")

PAGE_PATHS = frozenset({"/", "/status"})
JSON_PATH = "/status.json"


class DiagnosticsApp:
    def __init__(self, process: GatewayProcess, bind_host: str) -> None:
        self.process = process
        self.guard = OriginGuard(bind_host)
        self.probes = Probes(process.app.ready, process.metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = await http_request(scope, receive, send, body_timeout=5.0)
        if request is not None:
            await serve_contained(request, send, self.route, what="status view", log=log,
                                  quiet_paths=PROBE_PATHS)

    async def route(self, request: HttpRequest, send: Send) -> None:
        refusal = self.guard.refusal(request)
        if refusal is not None:
            await send_json(send, 403, {"error": "forbidden", "error_description": refusal})
            return
        if request.method not in ("GET", "HEAD"):
            await send_json(send, 405, {"error": "method_not_allowed", "error_description":
                                        "the status view is read-only: GET or HEAD"},
                            [("allow", "GET, HEAD")])
            return
        path = request.path
        if path in PAGE_PATHS:
            page = status_page(await status_document(self.process))
            await send_bytes(send, 200, page.encode(), "text/html; charset=utf-8",
                             PAGE_HEADERS)
        elif path == JSON_PATH:
            document = await status_document(self.process)
            await send_bytes(send, 200, orjson.dumps(document, option=orjson.OPT_INDENT_2),
                             "application/json", PAGE_HEADERS)
        elif not await self.probes.answer(path, send):
            await send_json(send, 404, {"error": "not_found", "error_description":
                                        f"no such page: {path[:100]}; the status is at / "
                                        f"and {JSON_PATH}"})
