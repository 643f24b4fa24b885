"""SSE: the encoder's output parses back, and the parser follows the WHATWG rules however the
bytes are split."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmcp_trio.protocol.sse import Event, SSEError, SSEParser, encode_comment, encode_event
from vmcp_trio.protocol.streamable import MAX_RETRY_SECONDS, Resumption


def parse_all(data: bytes, cuts: list[int] | None = None) -> list[Event]:
    parser = SSEParser()
    events: list[Event] = []
    points = sorted(set(cuts or []))
    start = 0
    for point in [*points, len(data)]:
        events += parser.feed(data[start:point])
        start = point
    return events


def test_round_trip_with_multiline_data_id_and_retry() -> None:
    raw = encode_event('{"a":\n1}', id="s1-5", event="message", retry=3000)
    assert parse_all(raw) == [Event('{"a":\n1}', "message", "s1-5", 3000)]


def test_line_endings_bom_comments_and_empty_events() -> None:
    raw = b"\xef\xbb\xbf: hello\r\ndata: a\r\rid: 7\ndata:b\n\nevent: x\n\n"
    assert parse_all(raw) == [Event("a", "message", None), Event("b", "message", "7")]


def test_priming_event_has_empty_data_and_sets_the_id() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: s1-0\ndata:\n\n") == [Event("", "message", "s1-0")]
    assert parser.last_event_id == "s1-0"


def test_id_with_nul_is_ignored_and_retry_needs_digits() -> None:
    parser = SSEParser()
    parser.feed(b"id: a\x00b\nretry: 1x\ndata: d\n\n")
    assert parser.last_event_id is None and parser.retry is None


def test_limits() -> None:
    parser = SSEParser(max_event_bytes=10)
    with pytest.raises(SSEError, match="larger than 10 bytes"):
        parser.feed(b"data: 123456\ndata: 123456\n")
    with pytest.raises(SSEError, match="longer than 10 bytes"):
        SSEParser(max_event_bytes=10).feed(b"data: " + b"x" * 20)
    # The bound counts bytes, not characters: four-byte characters fill it four times faster.
    wide = "\U0001F600" * 3  # 12 bytes, 3 characters
    with pytest.raises(SSEError, match="larger than 20 bytes"):
        SSEParser(max_event_bytes=20).feed(f"data: {wide}\ndata: {wide}\n".encode())
    [event] = SSEParser(max_event_bytes=20).feed(f"data:{wide}\n\n".encode())
    assert event.data == wide


def test_an_empty_chunk_between_a_cr_and_its_lf_does_not_end_the_event() -> None:
    """A transport may hand over an empty chunk: it must not make the LF of a CRLF split across
    chunks a blank line of its own (which dispatched the event's first line as an event)."""
    parser = SSEParser()
    events = parser.feed(b"data: x\r") + parser.feed(b"") + parser.feed(b"\ndata: y\r\n\r\n")
    assert events == [Event("x\ny")]


@pytest.mark.parametrize(("digits", "expected"), [
    ("3000", 3000), ("0" * 5000 + "3000", 3000), ("9" * 18, 10**18 - 1), ("1" + "0" * 18, 10**18),
    ("9" * 400, 10**18), ("9" * 5000, 10**18)])
def test_a_retry_of_any_length_is_read_and_a_reconnection_can_wait_it(digits: str,
                                                                      expected: int) -> None:
    """A ``retry:`` of thousands of digits raised ValueError (Python's int conversion limit),
    and one of hundreds OverflowError when a reconnection computed its delay: either broke
    the stream's reader with something other than SSEError. Past 10**18 ms it is read as that."""
    parser = SSEParser()
    assert parser.feed(f"retry: {digits}\ndata: x\n\n".encode()) == [
        Event("x", retry=expected)]
    assert Resumption(parser).retry_delay == min(expected / 1000, MAX_RETRY_SECONDS)


def test_comment_encoding() -> None:
    assert encode_comment() == b":\n\n"
    assert parse_all(encode_comment("keep-alive") + encode_event("x")) == [Event("x")]
    with pytest.raises(ValueError):
        encode_event("x", id="a\nb")


TEXT = st.characters(blacklist_categories=("Cs",))  # no lone surrogates: not encodable
ID = st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00")


@given(st.lists(st.tuples(st.text(TEXT, max_size=30), st.none() | st.text(ID, max_size=8)),
                max_size=5),
       st.lists(st.integers(0, 400), max_size=8), st.booleans())
def test_any_split_gives_the_same_events(items: list[tuple[str, str | None]],
                                         cuts: list[int], crlf: bool) -> None:
    raw = b"".join(encode_event(data, id=ident) for data, ident in items)
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    whole = parse_all(raw)
    assert parse_all(raw, [c for c in cuts if c <= len(raw)]) == whole
    expected = [d.replace("\r\n", "\n").replace("\r", "\n") for d, _ in items]
    assert [e.data for e in whole] == expected


def test_a_line_dripped_a_byte_at_a_time_costs_its_length_not_its_square() -> None:
    """A hostile backend sends an event one byte per packet: the parser keeps the bytes without
    copying or scanning what it holds again (it did both: about ten minutes of CPU for an
    event at the 4 MiB bound, one gateway core held by one backend). The bound below is an
    attack's, with a wide margin (about a second here), not a speed measurement."""
    parser = SSEParser()
    started = time.process_time()
    parser.feed(b"data: ")
    for _ in range(1024 * 1024):
        assert parser.feed(b"x") == []
    events = parser.feed(b"\n\n")
    assert time.process_time() - started < 20
    assert [len(event.data) for event in events] == [1024 * 1024]
    with pytest.raises(SSEError, match="longer than"):
        limited = SSEParser(max_event_bytes=1000)
        for _ in range(1001):
            limited.feed(b"y")
