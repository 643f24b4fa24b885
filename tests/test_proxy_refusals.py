"""The words of the error a ``vmcp proxy stdio`` client gets when the remote refuses a message
with no JSON-RPC answer (:func:`vmcp_trio.proxy.refusals.refusal`)."""

from __future__ import annotations

import orjson

from vmcp_trio.proxy.refusals import refusal


def test_an_oauth_error_object_is_named_with_its_description() -> None:
    body = orjson.dumps({"error": "insufficient_scope",
                         "error_description": "Token has insufficient scope"})
    assert refusal(403, "application/json", body) == \
        "answered HTTP 403 (insufficient_scope: Token has insufficient scope)"
    assert refusal(401, "application/json", b'{"error": "invalid_token"}') == \
        "answered HTTP 401 (invalid_token)"


def test_a_description_is_one_bounded_line() -> None:
    body = orjson.dumps({"error": "invalid_token",
                         "error_description": "a\nb\x1b[31m" + "x" * 5000})
    said = refusal(401, "application/json", body)
    assert "\n" not in said and "\x1b" not in said and len(said) < 600


def test_any_other_body_gives_its_content_type_never_its_text() -> None:
    assert refusal(502, "text/html", b"<h1>secret internals</h1>") == \
        "answered HTTP 502 (text/html)"
    assert refusal(400, "application/json", b'{"detail": "x"}') == \
        "answered HTTP 400 (application/json)"
    assert refusal(500, "application/json", b"{not json") == "answered HTTP 500 (application/json)"
    assert refusal(202, "", b"") == "answered HTTP 202 (no content type)"
