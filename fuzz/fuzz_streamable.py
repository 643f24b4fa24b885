"""Fuzz the Streamable HTTP rules (vmcp_trio/protocol/streamable.py): every function takes any
values and decides (nothing escapes but the SSE parser's SSEError, from feeding a stream), and
the decisions agree with the rules the module states and with each other: what an answer to a
POST or a GET means, the headers of a request, the server's checks and their rejections, and
the resumption of a stream fed across connections (its last event id never empty, its waits
within bounds, its attempts within the bound asked for).

The input: two bytes of HTTP status (big-endian, modulo 600), a byte of flags (bits 0-1: what
the POST sent; bit 2: it named a session; bit 3: the request is of the 2026-07-28 era; bit 4:
resumption attempts are bounded), then fields separated by NUL: a media type or Content-Type,
an Accept, an HTTP method, a protocol version, a session id (empty: none), then the stream's
bytes, an empty field marking a reconnection."""

from __future__ import annotations

import orjson

from vmcp_trio.protocol.revisions import HANDSHAKE_REVISIONS, Revision, revision
from vmcp_trio.protocol.sse import SSEError, SSEParser
from vmcp_trio.protocol.streamable import (
    EVENT_STREAM,
    JSON,
    MAX_RETRY_SECONDS,
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

MAX_ATTEMPTS = 3
SENT = list(Sent)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def check_post_answer(status: int, media: str, sent: Sent, in_session: bool) -> None:
    answer = post_answer(status, media, sent, in_session=in_session)
    what = f"{status} {media!r} to {sent.name} (session: {in_session}) -> {answer.name}"
    expected = {
        PostAnswer.NOT_STREAMABLE: sent is Sent.INITIALIZE and status in (400, 404, 405),
        PostAnswer.SESSION_GONE: status == 404 and in_session,
        PostAnswer.UNAUTHORIZED: status in (401, 403),
        PostAnswer.ACCEPTED: sent is Sent.NO_REQUEST and status < 300,
        PostAnswer.JSON: media == JSON,
        PostAnswer.HANDSHAKE_ERA: sent is Sent.DISCOVER and 400 <= status < 500,
        PostAnswer.FAILED: status >= 400,
        PostAnswer.STREAM: media == EVENT_STREAM and status < 400,
        PostAnswer.UNEXPECTED: sent is not Sent.NO_REQUEST or status >= 300,
    }
    check(expected[answer], what)
    for earlier in PostAnswer:  # the first rule that applies decides
        if earlier is answer:
            break
        check(not expected[earlier], what)


def check_headers(version: str | None, session_id: str | None, last_event_id: str | None) -> None:
    session = [("mcp-session-id", session_id)] if session_id is not None else []
    if version is not None and Revision(version).has_version_header:
        session.append(("mcp-protocol-version", version))
    post = post_headers(version, session_id)
    check(post == [("accept", f"{JSON}, {EVENT_STREAM}"), ("content-type", JSON), *session],
          f"POST headers {post!r}")
    get = stream_headers(version, session_id, last_event_id)
    resume = [("last-event-id", last_event_id)] if last_event_id is not None else []
    check(get == [("accept", EVENT_STREAM), *session, *resume], f"GET headers {get!r}")
    if session_id is not None:
        check(delete_headers(version, session_id) == session, "DELETE headers")


def check_rejection(rejection: Rejection | None, statuses: tuple[int, ...]) -> None:
    if rejection is None:
        return
    body = orjson.loads(rejection.body())
    check(rejection.status in statuses and body["id"] is None
          and body["error"] == {"code": -32600, "message": rejection.error.message},
          f"rejection {rejection!r}")


def check_server(content_type: str, accept: str, method: str, version: str | None,
                 session_id: str | None, stateless: bool) -> None:
    media = media_type(content_type)
    check(media == media_type(media) and media == media.lower() and ";" not in media,
          f"media type {media!r} of {content_type!r}")
    refused = check_post(content_type, accept)
    check((refused is None) == (media == JSON and accepts(accept, JSON, EVENT_STREAM)),
          f"POST {content_type!r} {accept!r}")
    check_rejection(refused, (415, 406))
    check(accepts(accept + ",*/*", JSON, EVENT_STREAM), f"*/* after {accept!r}")
    refused = check_get(accept)
    check((refused is None) == accepts(accept, EVENT_STREAM), f"GET {accept!r}")
    check_rejection(refused, (406,))
    refused = check_method(method, stateless=stateless)
    allowed = method == "POST" or (method in ("GET", "DELETE") and not stateless)
    check((refused is None) == allowed, f"method {method!r} (stateless: {stateless})")
    check_rejection(refused, (405,))
    refused = check_version(version)
    handshake = version is None or revision(version) in HANDSHAKE_REVISIONS
    check((refused is None) == handshake, f"version {version!r}")
    check_rejection(refused, (400,))
    check(is_stateless(version, session_id) == (not handshake and session_id is None),
          f"era of {version!r} {session_id!r}")


def check_resumption(chunks: list[bytes], bounded: bool) -> None:
    resumption = Resumption(SSEParser(max_event_bytes=256),
                            max_attempts=MAX_ATTEMPTS if bounded else None)
    for chunk in chunks:
        if not chunk:  # the connection ended: take it up again, if it can be
            before = (resumption.last_event_id, resumption.parser.retry, resumption.attempts)
            delay = resumption.reconnect()
            if delay is None:
                check(before[0] is None or (bounded and before[2] >= MAX_ATTEMPTS),
                      f"not resumed: {before!r}")
                resumption.next_connection()
            else:
                check(0 <= delay <= MAX_RETRY_SECONDS and before[0] is not None,
                      f"resumed after {delay!r}: {before!r}")
                check((resumption.last_event_id, resumption.parser.retry) == before[:2],
                      "a reconnection keeps the last event id and retry:")
            check(not bounded or resumption.attempts <= MAX_ATTEMPTS, "attempts bounded")
            continue
        try:
            resumption.parser.feed(chunk)
        except SSEError:
            resumption.next_connection()  # that connection broke; the next starts clean
        check(resumption.last_event_id != "", "an empty last event id is sent as none")
        delay = resumption.retry_delay
        check(delay is None or 0 < delay <= MAX_RETRY_SECONDS, f"retry delay {delay!r}")


def TestOneInput(data: bytes) -> None:
    if len(data) < 3:
        return
    status = int.from_bytes(data[:2], "big") % 600
    flags = data[2]
    fields = data[3:].split(b"\0")
    texts = [f.decode("utf-8", errors="replace") for f in fields[:5]]
    texts += [""] * (5 - len(texts))
    content_type, accept, method, version_text, session_text = texts
    version = version_text or None
    session_id = session_text or None
    sent, in_session = SENT[flags & 3], bool(flags & 4)
    check_post_answer(status, media_type(content_type), sent, in_session)
    answer = stream_answer(status, media_type(content_type))
    check((answer is StreamAnswer.NONE) == (status == 405)
          and (answer is StreamAnswer.OPEN) == (status == 200
                                                and media_type(content_type) == EVENT_STREAM),
          f"GET answered {status} {content_type!r} -> {answer.name}")
    check_headers(version, session_id, session_id)
    check_server(content_type, accept, method, version, session_id, bool(flags & 8))
    check_resumption(fields[5:], bool(flags & 16))


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
