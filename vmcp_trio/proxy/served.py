"""One HTTP request of ``vmcp proxy`` or ``vmcp tunnel relay``, served with its fault contained.

Rules it keeps:

* The request gets its id (the caller's ``X-Request-Id`` when sane, else a new one) and an access
  record before anything else, so every log line it causes carries the id.
* A fault ends this request only: a client that left is a debug line; a body that stopped
  arriving is 408; any other exception is logged with its traceback and answered 500 naming the
  request id, when the response has not started (once it has, the response ends where it was).
* Its access record is written once the response is done (not for the quiet paths, the probes).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Container

import trio

from ..http.asgi import BodyTimeout, ClientGone, HttpRequest, Send, StatusSend, send_json
from ..runtime.logs import ACCESS, REQUEST_ID, AccessRecord, adopt_request_id, log_access

__all__ = ["serve_contained"]

Route = Callable[[HttpRequest, Send], Awaitable[None]]


async def serve_contained(request: HttpRequest, send: Send, route: Route, *, what: str,
                          log: logging.Logger, quiet_paths: Container[str] = ()) -> None:
    """``route(request, send)`` with the rules above; ``what`` names the server in a 500."""
    started = StatusSend(send)
    adopt_request_id(request.header("x-request-id"))
    record = AccessRecord()
    ACCESS.set(record)
    began = trio.current_time()
    try:
        await route(request, started)
    except ClientGone as exc:
        log.debug("%s %s: %s", request.method, request.path[:200], exc)
    except BodyTimeout as exc:
        if not started.status:
            await send_json(started, 408, {"error": "request_timeout",
                                           "error_description": str(exc)})
    except Exception as exc:
        log.error("%s %s failed", request.method, request.path[:200], exc_info=exc)
        if not started.status:
            await send_json(started, 500, {
                "error": "internal_error", "error_description":
                    f"the {what} failed to serve this request (logged as request "
                    f"{REQUEST_ID.get()})"})
    finally:
        if request.path not in quiet_paths:
            log_access(request.method, request.path[:200], started.status,
                       trio.current_time() - began, record)
