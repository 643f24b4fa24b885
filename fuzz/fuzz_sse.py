"""Fuzz the SSE parser and encoder (vmcp_trio/protocol/sse.py): any bytes, fed in any chunks
(empty ones too), give the events they give fed whole, and nothing escapes but SSEError. Chunks
may only make it come sooner, on a line longer than max_event_bytes (which is checked only
while the line is still unfinished), and the events before it agree (as far as both got: the
events a feed completes before it raises are not returned). No event's
data is longer than max_event_bytes, and the retry: a stream sets is one a reconnection can wait
(Resumption.retry_delay, at most MAX_RETRY_SECONDS). And every event the encoder writes (the
gateway's encode_event: data of any lines and line endings, an id, an event type, a retry,
comments between) parses back to itself; a field it cannot write (CR, LF or NUL) is ValueError.

The input: a byte seeding where the stream is cut into chunks (a multiple of 8: byte by byte),
a byte of flags (bits 0-1: max_event_bytes, 8, 64, 512 or the default), then the stream. The
same bytes, split at NUL, are also events to encode: each a byte of flags (bit 0: an id, 1: an
event type, 2: a retry, 3: a comment before it, 4: data as text, not bytes) then, separated by
0x1e, its data, id, event type (also the comment's text) and retry (big-endian)."""

from __future__ import annotations

import random
import re

from vmcp_trio.protocol.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    Event,
    SSEError,
    SSEParser,
    encode_comment,
    encode_event,
)
from vmcp_trio.protocol.streamable import MAX_RETRY_SECONDS, Resumption

MAX_EVENT_BYTES = (8, 64, 512, DEFAULT_MAX_EVENT_BYTES)
_LINE = re.compile(rb"[^\r\n]*")


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def chunks(stream: bytes, seed: int) -> list[bytes]:
    """``stream`` cut at a few points drawn from ``seed``, an empty chunk after each that ends in
    CR (where one matters) and where a point is drawn twice."""
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(12)))
    if seed % 8 == 0 and len(stream) <= 512:  # byte by byte
        cuts = list(range(1, len(stream)))
    parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    return [piece for part in parts for piece in ((part, b"") if part.endswith(b"\r")
                                                 else (part,))]


def parse(parts: list[bytes], max_event_bytes: int) -> tuple[list[Event], SSEParser, str]:
    """The events, the parser after them, and the SSEError that ended them ("" for none)."""
    parser = SSEParser(max_event_bytes)
    events: list[Event] = []
    try:
        for part in parts:
            events += parser.feed(part)
    except SSEError as exc:
        return events, parser, str(exc) or "SSEError"
    return events, parser, ""


def check_parser(stream: bytes, seed: int, max_event_bytes: int) -> None:
    whole, parser, error = parse([stream], max_event_bytes)
    cut = chunks(stream, seed)
    split, split_parser, split_error = parse(cut, max_event_bytes)
    what = f"{stream[:200]!r} in {len(cut)} chunks"
    if not split_error:
        check(not error and split == whole, f"{what}: {split!r}, whole: {whole!r} {error}")
        check((split_parser.last_event_id, split_parser.retry)
              == (parser.last_event_id, parser.retry), f"{what}: the parser's state")
    else:
        shorter = min(len(split), len(whole))  # (a feed that raises drops its own events)
        check(split[:shorter] == whole[:shorter], f"{what}: {split!r} before {split_error!r},"
                                                  f" whole: {whole!r}")
        longest = max(len(line) for line in _LINE.findall(stream))
        check(bool(error) or ("longer than" in split_error and longest > max_event_bytes),
              f"{what}: {split_error!r}, not fed whole")
    for event in whole:
        check(len(event.data) <= max_event_bytes, f"{what}: {len(event.data)} characters")
    if not error:
        delay = Resumption(parser).retry_delay
        check(delay is None or 0 < delay <= MAX_RETRY_SECONDS, f"retry delay {delay!r}")


def encoded_events(records: list[bytes]) -> tuple[bytes, list[Event]]:
    """The stream the encoder writes for ``records``, and the events it must parse to."""
    out: list[bytes] = []
    expected: list[Event] = []
    last_id: str | None = None
    retry: int | None = None
    for record in records:
        flags = record[0] if record else 0
        fields = [*record[1:].split(b"\x1e", 3), b"", b"", b""]
        data, id_text, event_text = fields[0], fields[1].decode(errors="replace"), \
            fields[2].decode(errors="replace")
        ident = id_text if flags & 1 else None
        event = event_text if flags & 2 else None
        new_retry = int.from_bytes(fields[3][:7], "big") if flags & 4 else None
        payload: str | bytes = data.decode(errors="replace") if flags & 16 else data
        bad = any(c in text for text in (ident or "", event or "") for c in "\r\n\0")
        try:
            raw = encode_event(payload, id=ident, event=event, retry=new_retry)
            if flags & 8:
                raw = encode_comment(event_text) + raw
        except ValueError:
            check(bad or (flags & 8 != 0 and any(c in event_text for c in "\r\n\0")),
                  f"encode_event refused {record!r}")
            continue
        check(not bad, f"encode_event wrote {ident!r}, {event!r}")
        out.append(raw)
        last_id = ident if ident is not None else last_id
        retry = new_retry if new_retry is not None else retry
        text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").decode(errors="replace")
        expected.append(Event(text, event or "message", last_id, retry))
    return b"".join(out), expected


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    seed, stream = data[0], data[2:]
    check_parser(stream, seed, MAX_EVENT_BYTES[data[1] & 3])
    written, expected = encoded_events(stream.split(b"\0"))
    for parts in ([written], chunks(written, seed)):
        events, _, error = parse(parts, DEFAULT_MAX_EVENT_BYTES)
        check(not error and events == expected,
              f"{written[:300]!r} parsed to {events!r}, not {expected!r} {error}")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
