"""What every client session uses of the process, and the count of requests at work in all.

:class:`SessionServices` is one object shared by every session: the plan (a reload replaces it
here, for all sessions at once), the backend links' factory, health, metrics, the signers of
``requestState`` values and task ids, the admission gate and the audit log, the bounds, and
with shared sessions the call log and the replica's id. A session reads it at each use, never
copies from it, so that a reload reaches sessions already open.

:class:`Workload` counts the requests being answered across all sessions, from their arrival
until their answer is on its way: what a drain waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ..resources.plan import GatewayPlan
from ..runtime.audit import AuditLog
from ..runtime.metrics import Metrics
from .admission import Gate
from .backends.links import BackendLinks
from .call_log import CallLog
from .health import HealthMonitor
from .parked_calls import RequestStateSigner
from .task_ids import TaskIds

__all__ = ["SessionServices", "Workload"]


class Workload:
    """The requests being answered now, across all sessions (see the module)."""

    def __init__(self) -> None:
        self.active = 0
        self._idle = trio.Event()
        self._idle.set()

    def enter(self) -> None:
        if self.active == 0:
            self._idle = trio.Event()
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


@dataclass
class SessionServices:
    plan: GatewayPlan
    links: BackendLinks
    health: HealthMonitor
    metrics: Metrics
    request_states: RequestStateSigner
    """Signs and checks 2026-07-28 ``requestState`` values."""
    task_ids: TaskIds
    """Seals the backends' task ids into the ids clients see."""
    forget: Callable[[Any], None]
    """Told a :class:`~.session.ClientSession` that ended, to drop it from the table."""
    stream_buffer_events: int = 256
    sse_retry_ms: int = 2000
    max_requests: int = 64
    """Requests of one session at work at once."""
    open_seconds: float = 0.75
    """How long a session's opening waits for each backend (``backend_open_seconds``)."""
    workload: Workload = field(default_factory=Workload)
    call_log: CallLog | None = None
    """Shared sessions: where calls answered over SSE are logged (:mod:`.call_log`)."""
    stream_key_prefix: str = ""
    """Shared sessions: the replica's id, before each response stream's key."""
    gate: Gate | None = None
    """Authorization policies and rate limits (:mod:`.admission`); None: neither."""
    audit: AuditLog = field(default_factory=AuditLog.disabled)
    """Where an event per request is recorded (``config.audit``)."""
