"""The Streamable HTTP rules, both sides: every branch of vmcp_trio/protocol/streamable.py (and
the 2026-07-28 request headers of stateless_requests.metadata_headers)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.protocol.sse import SSEError, SSEParser
from vmcp_trio.protocol.stateless_requests import metadata_headers
from vmcp_trio.protocol.streamable import (
    ACCEPT_ANSWERS,
    MAX_RETRY_SECONDS,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    PostAnswer,
    Rejection,
    Resumption,
    Sent,
    StreamAnswer,
    accepts,
    check_get,
    check_method,
    check_post,
    check_version,
    delete_headers,
    is_stateless,
    media_type,
    post_answer,
    post_headers,
    stream_answer,
    stream_headers,
)

JSON, SSE = "application/json", "text/event-stream"


# --- the client's requests ------------------------------------------------------------------------

def test_initialize_carries_no_session_and_no_version() -> None:
    assert post_headers() == [("accept", ACCEPT_ANSWERS), ("content-type", JSON)]
    assert ACCEPT_ANSWERS == "application/json, text/event-stream"


@pytest.mark.parametrize(("version", "sent_version"), [
    ("2025-03-26", False), ("2025-06-18", True), ("2025-11-25", True), ("2026-07-28", True),
    ("2027-01-01", True)])
def test_later_requests_carry_the_session_and_the_version_where_the_revision_has_it(
        version: str, sent_version: bool) -> None:
    expected = [("mcp-session-id", "s1")]
    if sent_version:
        expected.append(("mcp-protocol-version", version))
    assert post_headers(version, "s1") == [("accept", ACCEPT_ANSWERS), ("content-type", JSON),
                                           *expected]
    assert stream_headers(version, "s1") == [("accept", SSE), *expected]
    assert delete_headers(version, "s1") == expected


def test_a_server_that_gave_no_session_id_gets_none() -> None:
    assert post_headers("2025-11-25") == [
        ("accept", ACCEPT_ANSWERS), ("content-type", JSON),
        ("mcp-protocol-version", "2025-11-25")]


def test_a_resuming_get_carries_the_last_event_id() -> None:
    assert stream_headers("2025-11-25", "s1", "s1-7") == [
        ("accept", SSE), ("mcp-session-id", "s1"), ("mcp-protocol-version", "2025-11-25"),
        ("last-event-id", "s1-7")]
    assert stream_headers() == [("accept", SSE)]


def test_a_stateless_request_mirrors_its_method_name_and_marked_params() -> None:
    schema = {"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    params = {"name": "query", "arguments": {"region": "eu-west"}}
    assert metadata_headers("tools/call", params, schema) == [
        ("mcp-method", "tools/call"), ("mcp-name", "query"), ("Mcp-Param-Region", "eu-west")]
    assert metadata_headers("tools/call", params) == [("mcp-method", "tools/call"),
                                                      ("mcp-name", "query")]
    assert metadata_headers("resources/read", {"uri": " x "}) == [
        ("mcp-method", "resources/read"), ("mcp-name", "=?base64?IHgg?=")]
    assert metadata_headers("prompts/get", {"name": 5}) == [("mcp-method", "prompts/get")]
    assert metadata_headers("tools/list", {}) == [("mcp-method", "tools/list")]


@pytest.mark.parametrize(("value", "media"), [
    (None, ""), ("", ""), ("application/json", JSON), ("Application/JSON; charset=utf-8", JSON),
    (" text/event-stream ;x=1", SSE), ("text/plain", "text/plain")])
def test_media_type(value: str | None, media: str) -> None:
    assert media_type(value) == media


# --- what the server's answers to a POST mean -----------------------------------------------------

@pytest.mark.parametrize("status", [400, 404, 405])
def test_initialize_refused_with_400_404_or_405_means_the_legacy_transport(status: int) -> None:
    for media in ("", JSON):
        assert post_answer(status, media, Sent.INITIALIZE,
                           in_session=False) is PostAnswer.NOT_STREAMABLE


@pytest.mark.parametrize("sent", [Sent.REQUEST, Sent.NO_REQUEST])
def test_404_in_a_session_means_the_session_is_gone(sent: Sent) -> None:
    for media in ("", JSON, SSE):
        assert post_answer(404, media, sent, in_session=True) is PostAnswer.SESSION_GONE
    # Without a session a 404 is an error like any other.
    assert post_answer(404, JSON, sent, in_session=False) is PostAnswer.JSON
    assert post_answer(404, "", sent, in_session=False) is PostAnswer.FAILED


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("sent", list(Sent))
def test_401_and_403_ask_for_a_credential(status: int, sent: Sent) -> None:
    assert post_answer(status, JSON, sent, in_session=True) is PostAnswer.UNAUTHORIZED


@pytest.mark.parametrize("status", [200, 202, 204])
def test_a_2xx_takes_notifications_and_responses_whatever_its_body(status: int) -> None:
    for media in ("", JSON, SSE):
        assert post_answer(status, media, Sent.NO_REQUEST,
                           in_session=True) is PostAnswer.ACCEPTED


def test_what_a_request_is_answered_with() -> None:
    for sent in (Sent.INITIALIZE, Sent.DISCOVER, Sent.REQUEST):
        assert post_answer(200, JSON, sent, in_session=False) is PostAnswer.JSON
        assert post_answer(500, JSON, sent, in_session=False) is PostAnswer.JSON
        assert post_answer(200, SSE, sent, in_session=False) is PostAnswer.STREAM
        assert post_answer(500, "text/html", sent, in_session=False) is PostAnswer.FAILED
        assert post_answer(500, SSE, sent, in_session=False) is PostAnswer.FAILED
        # 202 is no answer to a request; nor is a redirect or a media type of neither kind
        assert post_answer(202, "", sent, in_session=False) is PostAnswer.UNEXPECTED
        assert post_answer(302, "", sent, in_session=False) is PostAnswer.UNEXPECTED
        assert post_answer(200, "text/plain", sent, in_session=False) is PostAnswer.UNEXPECTED
    assert post_answer(422, "", Sent.REQUEST, in_session=False) is PostAnswer.FAILED


def test_notifications_refused_are_failures_or_json_errors() -> None:
    assert post_answer(400, JSON, Sent.NO_REQUEST, in_session=True) is PostAnswer.JSON
    assert post_answer(400, "", Sent.NO_REQUEST, in_session=True) is PostAnswer.FAILED
    assert post_answer(302, "", Sent.NO_REQUEST, in_session=True) is PostAnswer.UNEXPECTED


def test_discover_refused_without_json_means_the_handshake_era() -> None:
    for status in (400, 404, 405, 406, 415):
        assert post_answer(status, "", Sent.DISCOVER, in_session=False) is \
            PostAnswer.HANDSHAKE_ERA
        assert post_answer(status, JSON, Sent.DISCOVER, in_session=False) is PostAnswer.JSON
    assert post_answer(500, "", Sent.DISCOVER, in_session=False) is PostAnswer.FAILED


# --- what the server's answer to a GET means ------------------------------------------------------

def test_a_get_opens_the_stream_or_hears_there_is_none() -> None:
    assert stream_answer(200, SSE) is StreamAnswer.OPEN
    assert stream_answer(405, "") is StreamAnswer.NONE
    assert stream_answer(405, JSON) is StreamAnswer.NONE
    for status, media in ((200, JSON), (200, ""), (404, SSE), (401, ""), (500, JSON)):
        assert stream_answer(status, media) is StreamAnswer.REFUSED


# --- resumption -----------------------------------------------------------------------------------

def test_no_event_id_no_resumption() -> None:
    resumption = Resumption(SSEParser())
    resumption.parser.feed(b"data: {}\n\n")
    assert resumption.last_event_id is None and resumption.reconnect() is None
    assert resumption.attempts == 0


def test_the_last_event_id_and_retry_outlive_a_connection() -> None:
    resumption = Resumption(SSEParser())
    resumption.parser.feed(b"id: s-1\nretry: 1500\ndata:\n\nid: s-2\ndata: {}\n\n")
    assert resumption.last_event_id == "s-2"
    assert resumption.retry_delay == 1.5
    assert resumption.reconnect() == 1.5 and resumption.attempts == 1
    resumption.parser.feed(b"id: s-3\ndata: {}\n\n")  # the next connection, same parser
    assert stream_headers(last_event_id=resumption.last_event_id)[-1] == ("last-event-id", "s-3")


def test_an_empty_id_clears_the_last_event_id() -> None:
    resumption = Resumption(SSEParser())
    resumption.parser.feed(b"id: s-1\ndata: {}\n\nid\ndata: {}\n\n")
    assert resumption.last_event_id is None and resumption.reconnect() is None
    assert stream_headers("2025-11-25", "s1", resumption.last_event_id)[-1] == (
        "mcp-protocol-version", "2025-11-25")


def test_each_connection_is_parsed_afresh_but_for_the_id_and_retry() -> None:
    resumption = Resumption(SSEParser(max_event_bytes=64), max_attempts=2)
    first = resumption.parser
    first.feed(b"retry: 300\nid: e1\ndata:\n\ndata: {\"half\": ")  # broken off mid-event
    assert resumption.reconnect() == 0.3
    assert resumption.parser is not first and resumption.last_event_id == "e1"
    assert resumption.parser.feed(b"data: 1\n\n")[0].data == "1"  # not glued to the half
    with pytest.raises(SSEError):
        resumption.parser.feed(b"x" * 100)  # a line over the bound breaks this connection only
    fresh = resumption.next_connection()
    assert fresh.feed(b"data: 2\n\n")[0].data == "2"
    assert (fresh.last_event_id, fresh.retry, fresh.max_event_bytes) == ("e1", 300, 64)


def test_retry_is_capped_and_zero_or_none_leaves_the_wait_to_the_caller() -> None:
    resumption = Resumption(SSEParser())
    assert resumption.retry_delay is None
    resumption.parser.feed(b"retry: 0\nid: a\ndata:\n\n")
    assert resumption.retry_delay is None and resumption.reconnect() == 0.0
    resumption.parser.feed(b"retry: 999999999\n\n")
    assert resumption.retry_delay == MAX_RETRY_SECONDS


def test_attempts_are_bounded_when_asked() -> None:
    parser = SSEParser()
    parser.last_event_id = "from another replica"
    bounded = Resumption(parser, max_attempts=3)
    assert [bounded.reconnect() for _ in range(4)] == [0.0, 0.0, 0.0, None]
    unbounded = Resumption(parser)
    assert all(unbounded.reconnect() == 0.0 for _ in range(10))


# --- the server's checks --------------------------------------------------------------------------

def error(rejection: object) -> tuple[int, int, str, tuple[tuple[str, str], ...]]:
    """A rejection's status, code, message and headers (and its body is the error, id null)."""
    assert isinstance(rejection, Rejection)
    body = orjson.loads(rejection.body())
    assert body["id"] is None and body["error"]["code"] == rejection.error.code == -32600
    return rejection.status, rejection.error.code, rejection.error.message, rejection.headers


@pytest.mark.parametrize("accept", [ACCEPT_ANSWERS, "*/*", "text/event-stream;q=1, "
                                    "APPLICATION/JSON", "application/json, */*;q=0.1"])
def test_a_post_with_the_right_media_types_passes(accept: str) -> None:
    assert check_post("application/json", accept) is None
    assert check_post("Application/JSON; charset=utf-8", accept) is None
    assert check_post(" application/json ;charset=utf-8", accept) is None


@pytest.mark.parametrize("content_type", [None, "", "text/plain",
                                          "application/x-www-form-urlencoded",
                                          "application/json-seq", "application/jsonl"])
def test_a_post_that_is_not_json_is_415(content_type: str | None) -> None:
    assert error(check_post(content_type, ACCEPT_ANSWERS)) == (
        415, -32600, "Unsupported Media Type: Content-Type must be application/json", ())


@pytest.mark.parametrize("accept", [None, "", "application/json", "text/event-stream",
                                    "application/*", "text/html"])
def test_a_post_that_does_not_accept_both_is_406(accept: str | None) -> None:
    assert error(check_post("application/json", accept)) == (
        406, -32600, "Not Acceptable: the Accept header must list application/json and "
                     "text/event-stream", ())


def test_a_get_must_accept_an_event_stream() -> None:
    assert check_get("text/event-stream") is None and check_get("*/*") is None
    for accept in (None, "application/json", "text/*"):
        assert error(check_get(accept)) == (
            406, -32600, "Not Acceptable: the Accept header must list text/event-stream", ())


def test_methods() -> None:
    for method in ("POST", "GET", "DELETE"):
        assert check_method(method, stateless=False) is None
    assert check_method("POST", stateless=True) is None
    for method in ("GET", "DELETE"):
        assert error(check_method(method, stateless=True)) == (
            405, -32600, "Method not allowed: protocol revision 2026-07-28 has no GET stream "
                         "and no sessions", (("allow", "POST"),))
    for stateless in (False, True):
        assert error(check_method("PUT", stateless=stateless)) == (
            405, -32600, "Method not allowed: use POST, GET or DELETE",
            (("allow", "GET, POST, DELETE"),))


def test_the_session_header_and_an_unknown_session() -> None:
    assert error(SESSION_REQUIRED) == (
        400, -32600, "Bad Request: the Mcp-Session-Id header is required", ())
    assert error(SESSION_NOT_FOUND) == (
        404, -32600, "Session not found: it ended or never existed; initialize a new one", ())


def test_the_version_header_of_a_handshake_request() -> None:
    for version in (None, "2025-03-26", "2025-06-18", "2025-11-25"):
        assert check_version(version) is None
    assert error(check_version("2026-07-28")) == (
        400, -32600, "Bad Request: unsupported MCP-Protocol-Version '2026-07-28'", ())
    status, _, message, _ = error(check_version("x" * 100))
    assert status == 400 and message.endswith(repr("x" * 40))


def test_which_era_a_request_is_of() -> None:
    assert is_stateless("2026-07-28", None)
    assert is_stateless("2099-01-01", None)  # unknown: it hears which versions we speak
    assert not is_stateless("2026-07-28", "s1")  # names a session: the handshake front
    assert not is_stateless("2025-11-25", None)
    assert not is_stateless(None, None)


def test_a_rejection_carries_the_request_id_when_known() -> None:
    assert orjson.loads(SESSION_NOT_FOUND.body(7))["id"] == 7


@given(st.text(max_size=80))
def test_accepts_is_total_and_star_star_accepts_all(accept: str) -> None:
    assert accepts(accept + ", */*", "a/b", "c/d")
    result = accepts(accept, JSON, SSE)
    assert result == (check_post(JSON, accept) is None)
