"""Fuzz the OAuth callback of ``vmcp proxy --remote-auth`` (vmcp_trio/proxy/callback.py): the
query of the requests that reach its loopback server while a login waits. The parsing is not a
pure function: it lives in the callback's ASGI app (``_CallbackApp``, after ``http_request``),
so the app is driven here on ASGI messages; nothing in it waits, so each request runs to its end
in one step.

Nothing escapes, whatever the requests. Only ``GET /callback`` is served (anything else is 404);
a request whose ``state`` is not exactly the login's (its first value, compared as given), or
that comes after the login's answer, is refused with 400 and changes nothing; the first one with
the login's ``state`` ends the wait with exactly its first ``code``, ``iss`` and ``error`` (the
error and its description bounded), ``error`` set when there is no code, so that a result
without an error always has one. The page shown is one of the fixed pages: it never reflects the
query (neither the code nor anything an attacker put in a link).

The input: a byte of flags (bit 0: another path; bit 1: POST), then up to four query strings
separated by NUL, sent one after the other to the same login's server."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qs

from vmcp_trio.proxy.callback import _DONE_PAGE, _FAILED_PAGE, CALLBACK_PATH, _CallbackApp

STATE = "Wq3vXx9sO2kT_a0rYb-7LmN4pQ8zC1dE"  # the shape of secrets.token_urlsafe(24)
PAGES = {_DONE_PAGE, _FAILED_PAGE.format("this link is not the login's"),
         _FAILED_PAGE.format("the authorization server refused"), "not found"}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def run(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run a coroutine that never waits (the callback's app answers from the request alone)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise AssertionError("the callback waited for something")


def request(app: _CallbackApp, path: str, method: str, query: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    run(app({"type": "http", "method": method, "path": path, "query_string": query,
             "headers": [(b"host", b"127.0.0.1:8666")], "client": ("127.0.0.1", 50000)},
            receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    path = CALLBACK_PATH + "/x" if data[0] & 1 else CALLBACK_PATH
    method = "POST" if data[0] & 2 else "GET"
    app = _CallbackApp(STATE)
    for query in data[1:].split(b"\0")[:4]:
        before = app.result
        status, body = request(app, path, method, query)
        if body.startswith(b"{"):  # the request-target itself refused (http_request)
            check(status == 400 and app.result is before, "a refused target changed the login")
            continue
        check(body.decode() in PAGES, f"the page {body[:200]!r} is not one of the fixed pages")
        if path != CALLBACK_PATH or method != "GET":
            check(status == 404 and app.result is before, f"{method} {path} was served")
            continue
        one = {k: v[0] for k, v in parse_qs(query.decode("latin-1"),
                                            keep_blank_values=True).items()}
        if before is not None or one.get("state") != STATE:
            check(status == 400 and app.result is before,
                  f"state {one.get('state')!r} was taken (the login's answer: {before!r})")
            continue
        result, error, code = app.result, one.get("error"), one.get("code")
        check(result is not None and app.arrived.is_set() and result.code == code
              and result.iss == one.get("iss"), f"{one!r} gave {result!r}")
        assert result is not None
        if error is not None:
            check(result.error is not None and result.error.startswith(error[:100])
                  and len(result.error) <= 100 + 3 + 300, f"error {result.error!r}")
        else:
            check(result.error == (None if code else "the callback carries no code"),
                  f"{one!r} gave the error {result.error!r}")
        check((status == 200) == (result.error is None) and status in (200, 400)
              and (result.error is not None or bool(result.code)), f"{status}: {result!r}")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
