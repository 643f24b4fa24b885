"""MCP log levels (RFC 5424 severities, as ``logging/setLevel`` and ``notifications/message``
name them) and how they compare (no I/O).

A level asks for messages *at or above* it: ``debug`` is the most verbose, ``emergency`` the
least. An unknown level asks for nothing and an unknown message level is never wanted (a
message the gateway cannot rank is not guessed into a client's stream).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LOG_LEVELS", "level_wanted", "most_verbose"]

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def level_wanted(message_level: object, asked: str | None) -> bool:
    """A message at ``message_level`` reaches a client that asked for ``asked``."""
    if asked not in LOG_LEVELS or message_level not in LOG_LEVELS:
        return False
    return LOG_LEVELS.index(str(message_level)) >= LOG_LEVELS.index(asked)


def most_verbose(levels: Iterable[str]) -> str | None:
    """The level that lets through what each of ``levels`` wants (None for none)."""
    known = [level for level in levels if level in LOG_LEVELS]
    return min(known, key=LOG_LEVELS.index) if known else None
