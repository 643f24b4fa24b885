"""The HTTP authentication headers: ``Authorization: Bearer`` (RFC 6750 2.1) in, and
``WWW-Authenticate`` challenges (RFC 9110 11.6.1) out and, from upstream servers, back in.

Error reasons name the header and the problem, never the credential.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEADER_LENGTH", "HeaderError", "bearer_credential", "bearer_token", "challenge",
           "check_token68", "parse_challenges"]

MAX_HEADER_LENGTH = 16 * 1024


class HeaderError(Exception):
    """A malformed authentication header. ``reason`` is safe to show: it names the header and
    never contains the credential."""

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# A token68 where one may stand: it ends the challenge (end of value or a list comma follows).
_TOKEN68_HERE = re.compile(r"([A-Za-z0-9\-._~+/]+=*)[ \t]*(?=,|\Z)")
_SPACES = re.compile(r"[ \t]+")
_OWS = re.compile(r"[ \t]*")
_SEPARATORS = re.compile(r"[ \t,]*")  # OWS and empty list elements
_EQUALS = re.compile(r"[ \t]*=[ \t]*")  # BWS "=" BWS
_PARAM_START = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*=")
# qdtext and quoted-pair: anything but controls (HTAB is allowed), '"' and '\' unescaped.
_QUOTED = re.compile(r'"((?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[^\x00-\x08\x0a-\x1f\x7f])*)"')
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _skip(pattern: re.Pattern[str], value: str, pos: int) -> int:
    """Where a run of ``pattern`` (which matches the empty string) starting at ``pos`` ends."""
    match = pattern.match(value, pos)
    return pos if match is None else match.end()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an "Authorization: Bearer <token>" header (scheme case-insensitive, exactly
    one space-separated token68 per RFC 6750 2.1: [A-Za-z0-9-._~+/]+=*). None when the header
    is absent. Raises HeaderError for another scheme, an empty or malformed token, or a header
    longer than 16 KiB."""
    credential = bearer_credential(authorization)
    if credential is not None:
        check_token68(credential)
    return credential


def bearer_credential(authorization: str | None) -> str | None:
    """:func:`bearer_token` but for the token's own syntax, which :func:`check_token68` checks:
    a caller that finds the credential among tokens already verified (which were well formed)
    need not check it again (~1-2 us for a JWT)."""
    if authorization is None:
        return None
    if len(authorization) > MAX_HEADER_LENGTH:
        raise HeaderError("the Authorization header is longer than 16 KiB")
    value = authorization.strip(" \t")
    # Never echo the scheme: a client that forgot "Bearer " would see its token in the error.
    if value[:6].lower() != "bearer" or (len(value) > 6 and value[6] not in " \t"):
        raise HeaderError("the Authorization header does not use the Bearer scheme")
    rest = value[6:]
    token = rest.lstrip(" ")
    if not token:
        raise HeaderError("the Authorization header has an empty Bearer token")
    if rest[0] != " ":
        raise HeaderError("the Authorization header's Bearer token is malformed")
    return token


def check_token68(token: str) -> None:
    """HeaderError unless ``token`` is one token68 (RFC 6750 2.1)."""
    if not _TOKEN68.fullmatch(token):
        raise HeaderError("the Authorization header's Bearer token is malformed")


def challenge(scheme: str, params: list[tuple[str, str]]) -> str:
    """Format a WWW-Authenticate challenge: Bearer resource_metadata="...", scope="a b",
    error="..."; values quoted with \\ and " escaped; refuse (ValueError) control characters in
    values. A parameter named "" is the challenge's token68 (``Basic abc==``), as
    parse_challenges returns it, and must then be the only one."""
    if not _TOKEN.fullmatch(scheme):
        raise ValueError("the auth scheme is not an HTTP token")
    parts: list[str] = []
    seen: set[str] = set()
    for name, value in params:
        if name == "":
            if len(params) != 1 or not _TOKEN68.fullmatch(value):
                raise ValueError("a token68 must be the only parameter and be token68 syntax")
            return f"{scheme} {value}"
        if not _TOKEN.fullmatch(name):
            raise ValueError("a parameter name is not an HTTP token")
        if name.lower() in seen:
            raise ValueError(f"parameter {name} appears twice")
        seen.add(name.lower())
        if _CONTROL.search(value):
            raise ValueError(f"the value of parameter {name} contains a control character")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{name}="{escaped}"')
    return f"{scheme} {', '.join(parts)}" if parts else scheme


def parse_challenges(value: str) -> list[tuple[str, dict[str, str]]]:
    """Parse a WWW-Authenticate header value into (scheme lowercased, params with lowercased
    names) per RFC 9110 11.6.1 (auth-param lists, quoted-strings with escapes, token68, several
    challenges separated by commas). A token68 is returned as the parameter named "". Raises
    HeaderError on malformed input (including a parameter given twice in one challenge);
    bounded input length (16 KiB)."""
    if len(value) > MAX_HEADER_LENGTH:
        raise HeaderError("the WWW-Authenticate header is longer than 16 KiB")
    challenges: list[tuple[str, dict[str, str]]] = []
    end = len(value)
    pos = _skip(_SEPARATORS, value, 0)
    while pos < end:
        scheme = _TOKEN.match(value, pos)
        if scheme is None:
            raise HeaderError("the WWW-Authenticate header has a malformed auth scheme")
        params: dict[str, str] = {}
        challenges.append((scheme.group().lower(), params))
        pos = scheme.end()
        spaces = _SPACES.match(value, pos)
        if spaces is not None and spaces.end() < end and value[spaces.end()] != ",":
            pos = spaces.end()
            token68 = _TOKEN68_HERE.match(value, pos)
            if token68 is not None:
                params[""] = token68.group(1)
                pos = token68.end()
            else:
                pos = _parse_params(value, pos, params)
        pos = _skip(_OWS, value, pos)
        if pos < end:
            if value[pos] != ",":
                raise HeaderError("the WWW-Authenticate header has a malformed challenge")
            pos = _skip(_SEPARATORS, value, pos)
    return challenges


def _parse_params(value: str, pos: int, params: dict[str, str]) -> int:
    """Parse ``#auth-param`` into ``params`` from ``pos``; returns where the challenge ends (at a
    comma that starts the next challenge, or the end of the value)."""
    end = len(value)
    while True:
        name = _TOKEN.match(value, pos)
        equals = _EQUALS.match(value, name.end()) if name is not None else None
        if name is None or equals is None:
            raise HeaderError("the WWW-Authenticate header has a malformed parameter")
        pos = equals.end()
        if value.startswith('"', pos):
            quoted = _QUOTED.match(value, pos)
            if quoted is None:
                raise HeaderError("the WWW-Authenticate header has a malformed quoted string")
            param = _ESCAPED.sub(r"\1", quoted.group(1))
            pos = quoted.end()
        else:
            token = _TOKEN.match(value, pos)
            if token is None:
                raise HeaderError("the WWW-Authenticate header has a parameter without a value")
            param = token.group()
            pos = token.end()
        key = name.group().lower()
        if key in params:
            raise HeaderError("the WWW-Authenticate header repeats a parameter in a challenge")
        params[key] = param
        after = _skip(_OWS, value, pos)
        if after >= end:
            return after
        if value[after] != ",":
            raise HeaderError("the WWW-Authenticate header has a malformed parameter list")
        following = _skip(_SEPARATORS, value, after)
        if following >= end or _PARAM_START.match(value, following) is None:
            return after  # the next challenge (or nothing) follows
        pos = following
