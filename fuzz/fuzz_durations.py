"""Fuzz the Go duration parser: it parses or raises DurationError, and what it parses
prints canonically and parses back to the same value."""

from __future__ import annotations

from vmcp_trio.resources.durations import DurationError, parse_duration


def TestOneInput(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        value = parse_duration(text)
    except DurationError:
        return
    if value.nanoseconds < 0 or parse_duration(str(value)) != value:
        raise AssertionError(f"{text!r} parsed to {value!r}, which does not round-trip")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
