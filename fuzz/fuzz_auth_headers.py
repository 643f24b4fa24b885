"""Fuzz the authentication headers: bearer_token and parse_challenges accept or raise
HeaderError, and every challenge parsed, formatted again with challenge(), parses back to
itself (when its values hold no control characters, which challenge() refuses)."""

from __future__ import annotations

import re

from vmcp_trio.auth.headers import HeaderError, bearer_token, challenge, parse_challenges

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def TestOneInput(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        token = bearer_token(text)
    except HeaderError:
        pass
    else:
        if token is None or not _TOKEN68.fullmatch(token) or token not in text:
            raise AssertionError(f"{text!r} gave the bearer token {token!r}")
    try:
        challenges = parse_challenges(text)
    except HeaderError:
        return
    for scheme, params in challenges:
        if any(_CONTROL.search(value) for value in params.values()):
            continue
        formatted = challenge(scheme, list(params.items()))
        again = parse_challenges(formatted)
        if again != [(scheme, params)]:
            raise AssertionError(f"{formatted!r} parsed to {again!r}, not {(scheme, params)!r}")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
