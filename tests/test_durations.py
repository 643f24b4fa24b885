"""Go-style durations: the grammar of time.ParseDuration, positive values, canonical text."""

import pytest

from vmcp_trio.resources.durations import Duration, DurationError, parse_duration

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("30s", 30 * S),
        ("10m", 600 * S),
        ("1h", 3600 * S),
        ("1h30m", 5400 * S),
        ("2h45m30s", (2 * 3600 + 45 * 60 + 30) * S),
        ("1.5h", 5400 * S),
        (".5s", S // 2),
        ("1.s", S),
        ("250ms", 250_000_000),
        ("10us", 10_000),
        ("10\u00b5s", 10_000),
        ("10\u03bcs", 10_000),
        ("7ns", 7),
        ("0", 0),
        ("+5m", 300 * S),
        ("1h1h", 7200 * S),
    ],
)
def test_parses_go_durations(text: str, nanoseconds: int) -> None:
    assert parse_duration(text) == Duration(nanoseconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "duration string"),
        ("7d", "Go durations have no days"),
        ("5", "missing a unit"),
        ("-1h", "must not be negative"),
        ("1 h", "unknown unit"),
        (" 1h", "duration string"),
        ("h", "expected a number"),
        (".s", "expected a number"),
        ("1.2.3s", "missing a unit"),
        ("1x", "unknown unit"),
        ("\u0661s", "expected a number"),  # Arabic-Indic digit one: Go takes ASCII only
        ("9999999999h", "too large"),
        ("1" * 80 + "s", "too long"),
    ],
)
def test_refuses_what_go_refuses(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message):
        parse_duration(text)


def test_refuses_non_strings() -> None:
    with pytest.raises(DurationError):
        parse_duration(30)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("90m", "1h30m"), ("3600s", "1h"), ("1.5s", "1.5s"), ("250ms", "250ms"), ("0", "0s"),
     ("168h", "168h"), ("1m0.5s", "1m0.5s"), ("1500us", "1.5ms"), ("7ns", "7ns")],
)
def test_str_is_canonical_and_round_trips(text: str, canonical: str) -> None:
    value = parse_duration(text)
    assert str(value) == canonical
    assert parse_duration(str(value)) == value


def test_durations_order_and_convert() -> None:
    assert parse_duration("59s") < parse_duration("1m") < parse_duration("1h")
    assert parse_duration("1m30s").total_seconds() == 90.0
    assert Duration.of(hours=1, minutes=30) == parse_duration("1h30m")
