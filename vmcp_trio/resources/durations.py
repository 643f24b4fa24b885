"""Go-style duration strings (``30s``, ``10m``, ``1h30m``, ``1.5h``, ``250ms``).

The resources are written for ToolHive's operator, which parses durations with Go's
``time.ParseDuration``; we accept exactly that grammar so the same manifests load:
a sequence of ``<decimal number><unit>`` terms with units ``ns``, ``us`` (also ``µs``/``μs``),
``ms``, ``s``, ``m``, ``h``. There is no ``d`` unit in Go; we say so in the error instead of
guessing, because ``1d`` silently meaning something else is worse than an error.

Values are kept as whole nanoseconds (like Go's ``time.Duration``) so two parses of the same
text compare equal and ``str()`` gives a canonical, round-trippable spelling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Duration", "DurationError", "parse_duration"]

_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
# Go's limit: an int64 count of nanoseconds (about 292 years).
_MAX_NS = 2**63 - 1
_MAX_TEXT = 64
_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


class DurationError(ValueError):
    """The text is not a Go duration; the message says why without quoting more than needed."""


@dataclass(frozen=True, order=True)
class Duration:
    """A non-negative span of time in whole nanoseconds."""

    nanoseconds: int

    SECOND: ClassVar[int] = 1_000_000_000

    @classmethod
    def of(cls, *, hours: int = 0, minutes: int = 0, seconds: int = 0, ms: int = 0) -> Duration:
        total_ms = ((hours * 60 + minutes) * 60 + seconds) * 1000 + ms
        return cls(total_ms * 1_000_000)

    def total_seconds(self) -> float:
        return self.nanoseconds / self.SECOND

    def __str__(self) -> str:
        """Canonical spelling, e.g. ``1h30m``, ``45s``, ``1.5s``, ``250ms``, ``0s``."""
        ns = self.nanoseconds
        if ns == 0:
            return "0s"
        if ns < self.SECOND:
            for unit, size in (("ms", 1_000_000), ("us", 1_000), ("ns", 1)):
                if ns >= size:
                    return _decimal(ns, size) + unit
        hours, rest = divmod(ns, 3600 * self.SECOND)
        minutes, rest = divmod(rest, 60 * self.SECOND)
        out = ""
        if hours:
            out += f"{hours}h"
        if minutes:
            out += f"{minutes}m"
        if rest:
            out += _decimal(rest, self.SECOND) + "s"
        return out


def _decimal(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def parse_duration(text: str) -> Duration:
    """Parse a Go duration string; negative durations are refused (nothing here may be negative)."""
    if not isinstance(text, str):
        raise DurationError("must be a duration string such as '30s', '10m' or '1h30m'")
    if len(text) > _MAX_TEXT:
        raise DurationError(f"is too long for a duration (at most {_MAX_TEXT} characters)")
    s = text.strip()
    if s != text or not s:
        raise DurationError("must be a duration string such as '30s', '10m' or '1h30m'")
    if s[0] in "+-":
        if s[0] == "-" and s[1:] not in ("0", ""):
            raise DurationError("must not be negative")
        s = s[1:]
    if s == "0":
        return Duration(0)
    if not s:
        raise DurationError("must be a duration string such as '30s', '10m' or '1h30m'")
    total = 0
    pos = 0
    while pos < len(s):
        match = _TERM.match(s, pos)
        assert match is not None  # the pattern can match the empty string
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise DurationError("is not a Go duration: expected a number such as '30s', '1h30m'")
        if not unit:
            raise DurationError(
                "is missing a unit: use one of ns, us, ms, s, m, h (for example '30s')"
            )
        size = _UNITS_NS.get(unit)
        if size is None:
            hint = " (Go durations have no days: write 168h for 7 days)" if unit == "d" else ""
            raise DurationError(
                f"has an unknown unit {unit[:8]!r}: use one of ns, us, ms, s, m, h{hint}"
            )
        value = int(whole or "0") * size
        if frac:
            # Exact decimal arithmetic: Go truncates the fraction to whole nanoseconds.
            value += int(frac) * size // 10 ** len(frac)
        total += value
        if total > _MAX_NS:
            raise DurationError("is too large (at most about 292 years)")
        pos = match.end()
    return Duration(total)
