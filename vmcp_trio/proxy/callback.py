"""The local OAuth callback server of ``vmcp proxy --remote-auth``: where the browser lands after
the login.

Rules it keeps:

* It listens on 127.0.0.1 only (``--remote-auth-callback-port``, default 8666) and only while a
  login waits; ``GET /callback`` is the redirect URI. Anything else is 404.
* A callback whose ``state`` is not the login's (compared in constant time) is refused with 400
  and does not end the wait (a stale tab, a forged link); the first one with the right
  ``state`` ends it: its ``code`` (and ``iss``), or the authorization server's ``error``.
* The page the browser shows says only whether the login finished; it never shows the code.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import partial

import trio

from ..http.asgi import Receive, Scope, Send, http_request, send_text
from ..http.serving import listen, serve, server_config

__all__ = ["CALLBACK_PATH", "CallbackResult", "CallbackServer"]

CALLBACK_PATH = "/callback"
_DONE_PAGE = ("<!doctype html><title>vmcp proxy</title><p>The login finished: you can close "
              "this window and go back to your MCP client.</p>")
_FAILED_PAGE = ("<!doctype html><title>vmcp proxy</title><p>The login did not finish: {}. "
                "See the terminal of vmcp proxy.</p>")


@dataclass(frozen=True)
class CallbackResult:
    code: str | None
    iss: str | None
    error: str | None
    """The authorization server's ``error`` (and description), when it refused."""


class _CallbackApp:
    def __init__(self, state: str) -> None:
        self.state = state
        self.result: CallbackResult | None = None
        self.arrived = trio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = await http_request(scope, receive, send)
        if request is None:
            return
        if request.path != CALLBACK_PATH or request.method != "GET":
            await send_text(send, 404, "not found")
            return
        query = {k: v[0] for k, v in request.query.items() if v}
        state = query.get("state", "")
        if self.result is not None or not hmac.compare_digest(state.encode(),
                                                            self.state.encode()):
            await send_text(send, 400, _FAILED_PAGE.format("this link is not the login's"),
                            content_type="text/html")
            return
        error = query.get("error")
        if error is not None:
            described = query.get("error_description")
            error = f"{error[:100]}" + (f" ({described[:300]})" if described else "")
        elif not query.get("code"):
            error = "the callback carries no code"
        self.result = CallbackResult(query.get("code"), query.get("iss"), error)
        page = _DONE_PAGE if error is None else _FAILED_PAGE.format("the authorization server "
                                                                   "refused")
        try:  # the page first: the server stops once the wait is over
            await send_text(send, 200 if error is None else 400, page,
                            content_type="text/html")
        finally:
            self.arrived.set()


class CallbackServer:
    """The callback of one login: listening from construction (raises ListenError when the
    port cannot be had, before anything waits), served by :meth:`wait`."""

    def __init__(self, port: int, state: str) -> None:
        self.app = _CallbackApp(state)
        self.config = server_config("127.0.0.1", port, max_header_bytes=16 * 1024,
                                    idle_seconds=10)
        self.sockets = listen(self.config)

    async def wait(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                   ) -> CallbackResult:
        """Serve until the login's callback arrives; reports the redirect URI once serving.
        The caller bounds the wait."""
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(partial(
                serve, self.app, self.config, self.sockets,
                shutdown_trigger=trio.sleep_forever))
            task_status.started(binds[0] + CALLBACK_PATH)
            await self.app.arrived.wait()
            nursery.cancel_scope.cancel()
        assert self.app.result is not None
        return self.app.result
