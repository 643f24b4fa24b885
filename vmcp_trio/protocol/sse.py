"""Server-Sent Events (the WHATWG "event stream" format): an encoder and an incremental parser.

No I/O: the encoder returns bytes, the parser is fed bytes and returns complete events. The
parser follows the HTML standard's interpretation rules: lines end in CRLF, LF or CR; a leading
BOM is skipped; ``:`` starts a comment; ``data`` lines are joined with ``\\n``; an ``id`` holding
NUL is ignored; ``retry`` takes ASCII digits only; an event is dispatched at a blank line, and one
with no data is not dispatched (but its ``id`` still updates the last event id).

Bounds: an event larger than ``max_event_bytes`` raises :class:`SSEError` (a backend cannot make
the gateway buffer without limit), and so does a line that grows past it without ending.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Event", "SSEError", "SSEParser", "encode_comment", "encode_event"]

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
MAX_RETRY = 10**18
"""The largest ``retry`` kept (milliseconds): more digits than that are read as it (Python
converts no more than 4,300 digits, nor divides an integer past 1e308 into a float)."""


class SSEError(Exception):
    """The stream broke a limit; the message says which."""


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    event: str = "message"
    id: str | None = None
    """The stream's last event id after this event (the spec's "last event ID buffer")."""
    retry: int | None = None


def encode_event(data: str | bytes, *, id: str | None = None, event: str | None = None,
                 retry: int | None = None) -> bytes:
    """One event. ``data`` may hold newlines; each line becomes its own ``data:`` field."""
    parts: list[bytes] = []
    if event is not None:
        parts.append(b"event: " + _field_value(event) + b"\n")
    if id is not None:
        parts.append(b"id: " + _field_value(id) + b"\n")
    if retry is not None:
        parts.append(b"retry: %d\n" % retry)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    parts.extend(b"data: " + line + b"\n" for line in raw.split(b"\n"))
    parts.append(b"\n")
    return b"".join(parts)


def _field_value(value: str) -> bytes:
    if any(ch in value for ch in "\r\n\0"):
        raise ValueError("an SSE field value must not contain CR, LF or NUL")
    return value.encode("utf-8")


def encode_comment(text: str = "") -> bytes:
    """A comment line (``: text``): keeps idle connections open through proxies."""
    return b": " + _field_value(text) + b"\n\n" if text else b":\n\n"


class SSEParser:
    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id: str | None = None
        self.retry: int | None = None
        self._buffer = bytearray()
        """The line being read (bytes after the last line ending)."""
        self._started = False
        self._data: list[str] = []
        self._data_size = 0
        self._event_type = ""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[Event]:
        """Consume bytes; return the events completed by them."""
        if not chunk:  # nothing: and a CR ending the last chunk may still be a CRLF's
            return []
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across chunks
        self._pending_cr = False
        if self._started and b"\n" not in chunk and b"\r" not in chunk:
            # No line ends here: keep the bytes (amortised, so a line dripped a byte at a
            # time costs its length, not its length squared) and look no further.
            self._buffer += chunk
            if len(self._buffer) > self.max_event_bytes:
                raise SSEError(f"an SSE line is longer than {self.max_event_bytes} bytes")
            return []
        buffer = bytes(self._buffer) + chunk
        if not self._started and buffer:
            if len(buffer) < 3 and b"\xef\xbb\xbf".startswith(buffer):
                self._buffer = bytearray(buffer)
                return []
            if buffer.startswith(b"\xef\xbb\xbf"):
                buffer = buffer[3:]
            self._started = True
        events: list[Event] = []
        start = 0
        length = len(buffer)
        while start < length:
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf != -1 else length)
            if cr != -1:
                end, next_start = cr, cr + 1
                if next_start < length and buffer[next_start] == 0x0A:
                    next_start += 1
                elif next_start == length:
                    self._pending_cr = True
            elif lf != -1:
                end, next_start = lf, lf + 1
            else:
                break
            event = self._line(buffer[start:end])
            if event is not None:
                events.append(event)
            start = next_start
        self._buffer = bytearray(buffer[start:])
        if len(self._buffer) > self.max_event_bytes:
            raise SSEError(f"an SSE line is longer than {self.max_event_bytes} bytes")
        return events

    def _line(self, raw: bytes) -> Event | None:
        if not raw:
            return self._dispatch()
        if raw[0] == 0x3A:  # ':' comment
            return None
        line = raw.decode("utf-8", errors="replace")
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":  # counted in bytes as received: "data:" and one space are not data
            self._data_size += len(raw) - (6 if raw[5:6] == b" " else 5) + 1
            if self._data_size > self.max_event_bytes:
                raise SSEError(f"an SSE event is larger than {self.max_event_bytes} bytes")
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            digits = value.lstrip("0")
            self.retry = int(digits or "0") if len(digits) <= 18 else MAX_RETRY
        return None

    def _dispatch(self) -> Event | None:
        data, event_type = self._data, self._event_type
        self._data, self._data_size, self._event_type = [], 0, ""
        if not data:
            return None
        return Event("\n".join(data), event_type or "message", self.last_event_id, self.retry)
