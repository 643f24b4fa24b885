"""Translating messages between the protocol's two eras, with no I/O: the one home of it.

The handshake revisions (2025-03-26 to 2025-11-25) negotiate once per session; 2026-07-28 has
no session, so every request carries in its ``_meta`` what a session used to hold (the
protocol version, the client's capabilities and info, its log level), and every result says
what it is (``resultType``; ``ttlMs`` and ``cacheScope`` on lists and reads). A gateway in
between translates what crosses from one era to the other:

* :func:`params_for_handshake`: a 2026-07-28 request's params, as a handshake backend takes
  them: the envelope's ``_meta`` keys and the round-trip fields (``inputResponses``,
  ``requestState``) removed; everything else (the ``progressToken``, other ``_meta``) kept. (An
  SDK 2.x server refuses a request carrying the 2026-07-28 envelope on a handshake
  connection.)
* :func:`meta_for_stateless`: the ``_meta`` a request takes to a 2026-07-28 backend: the
  caller's own when it speaks 2026-07-28 itself, else the session's values filled in; a Tasks
  extension declaration only for a backend that declares the extension too.
* :func:`complete_result`: a handshake backend's result, as a 2026-07-28 client expects it.
* :func:`result_for_handshake`: a 2026-07-28 backend's complete result, without the fields a
  handshake client does not know (a ``CreateTaskResult`` stays whole: only a client that
  declared the Tasks extension gets one, and it knows the shape whatever its era).

What a translation needs of the wire (headers, streams, retries of input requests) stays with
the code that does the I/O; what it does to messages is here.
"""

from __future__ import annotations

from typing import Any

from .revisions import STATELESS
from .stateless_requests import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    LOG_LEVEL,
    PROTOCOL_VERSION,
    SERVER_INFO,
)
from .tasks_extension import capabilities_for_backend, is_task_result

__all__ = ["CACHEABLE", "ENVELOPE_META", "ROUND_TRIP_FIELDS", "complete_result",
           "meta_for_stateless", "params_for_handshake", "result_for_handshake"]

ENVELOPE_META = frozenset({PROTOCOL_VERSION, CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL})
"""The ``_meta`` keys of a 2026-07-28 request that a session holds in the handshake era."""
ROUND_TRIP_FIELDS = ("inputResponses", "requestState")
"""A 2026-07-28 retry's answers to input requests, and the state it carries back."""
STATELESS_RESULT_FIELDS = ("resultType", "ttlMs", "cacheScope")
"""Result fields a handshake client does not know."""
CACHEABLE = frozenset({"tools/list", "prompts/list", "resources/list",
                       "resources/templates/list", "resources/read", "server/discover",
                       "skills/list", "skills/get"})
"""Results that say how long they may be cached (``ttlMs``, ``cacheScope``)."""
SKILL_RESULTS = frozenset({"skills/list", "skills/get"})
"""Results whose cache fields the Skills extension defines on every protocol revision."""


def params_for_handshake(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """A request's params without what only 2026-07-28 carries (unchanged when there is
    none of it: the common handshake case copies nothing)."""
    if not params:
        return params
    meta = params.get("_meta")
    envelope = isinstance(meta, dict) and not ENVELOPE_META.isdisjoint(meta)
    if not envelope and not any(field in params for field in ROUND_TRIP_FIELDS):
        return params
    cleaned = {k: v for k, v in params.items() if k not in ROUND_TRIP_FIELDS}
    if envelope:
        assert isinstance(meta, dict)
        kept = {k: v for k, v in meta.items() if k not in ENVELOPE_META}
        if kept:
            cleaned["_meta"] = kept
        else:
            del cleaned["_meta"]
    return cleaned


def meta_for_stateless(params: dict[str, Any], *, capabilities: dict[str, Any],
                       client_info: dict[str, Any], log_level: str | None,
                       backend_capabilities: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The ``_meta`` of a request to a 2026-07-28 backend, and whether the caller speaks
    2026-07-28 itself (its params carry the envelope: its capabilities and log level are then
    its own; the gateway's client info replaces the client's, as the backend's client is the
    gateway). A Tasks declaration goes only to a backend whose ``backend_capabilities``
    declare the extension."""
    given = params.get("_meta")
    meta = dict(given) if isinstance(given, dict) else {}
    stateless_caller = PROTOCOL_VERSION in meta
    meta[PROTOCOL_VERSION] = STATELESS.version
    own = meta.get(CLIENT_CAPABILITIES)
    meta[CLIENT_CAPABILITIES] = capabilities_for_backend(
        own if isinstance(own, dict) else capabilities, backend_capabilities)
    meta[CLIENT_INFO] = client_info
    if not stateless_caller and log_level is not None:
        meta[LOG_LEVEL] = log_level
    return meta, stateless_caller


def complete_result(method: str, result: dict[str, Any],
                    server_info: dict[str, Any]) -> dict[str, Any]:
    """A handshake backend's result (or the gateway's own), made a complete 2026-07-28
    result: ``resultType``, the cache fields of a list or read, ``serverInfo`` in ``_meta``."""
    completed = dict(result)
    completed.setdefault("resultType", "complete")
    if method in CACHEABLE and completed["resultType"] == "complete":
        completed.setdefault("ttlMs", 0)
        completed.setdefault("cacheScope", "private")
    meta = completed.get("_meta")
    completed["_meta"] = {**(meta if isinstance(meta, dict) else {}), SERVER_INFO: server_info}
    return completed


def result_for_handshake(result: dict[str, Any], method: str = "") -> dict[str, Any]:
    """A 2026-07-28 backend's complete result to ``method``, as a handshake client knows
    results (the Skills extension's results keep their cache fields: it defines them on every
    wire)."""
    if is_task_result(result) or not any(field in result for field in STATELESS_RESULT_FIELDS):
        return result
    dropped = ("resultType",) if method in SKILL_RESULTS else STATELESS_RESULT_FIELDS
    return {k: v for k, v in result.items() if k not in dropped}
