"""The probe endpoints every vmcp server answers the same way: liveness, readiness and metrics.

``vmcp serve``, ``vmcp proxy``, ``vmcp tunnel relay`` and the tunnel agent's metrics listener
each route a request for one of :data:`PROBE_PATHS` to :meth:`Probes.answer`:

* ``/health``, ``/healthz``, ``/livez``: liveness, 200 ``{"status": "ok"}`` whenever the
  process answers at all (a restart would not help it otherwise);
* ``/readyz``: readiness, as the server decides it (its :data:`Readiness`): 200 when it can
  serve, else 503; the JSON body says why;
* ``/metrics``: the process's Prometheus text
  (:class:`~vmcp_trio.runtime.metrics.ProcessMetrics`).

They take no token, are never forwarded, and write no access record (the servers leave
:data:`PROBE_PATHS` out of their access logs: probed every few seconds, they would drown it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.metrics import CONTENT_TYPE, ProcessMetrics
from .asgi import Send, send_bytes, send_json

__all__ = ["LIVENESS_PATHS", "PROBE_PATHS", "Probes", "Readiness"]

LIVENESS_PATHS = frozenset({"/health", "/healthz", "/livez"})
PROBE_PATHS = LIVENESS_PATHS | {"/readyz", "/metrics"}

Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
"""Whether the server can serve now, and the JSON body that says so (or why not)."""


@dataclass(frozen=True, slots=True)
class Probes:
    readiness: Readiness
    metrics: ProcessMetrics

    async def answer(self, path: str, send: Send) -> bool:
        """Answer ``path`` when it is a probe's (True); False, with nothing sent, when not."""
        if path in LIVENESS_PATHS:
            await send_json(send, 200, {"status": "ok"})
        elif path == "/readyz":
            ready, body = await self.readiness()
            await send_json(send, 200 if ready else 503, body)
        elif path == "/metrics":
            await send_bytes(send, 200, self.metrics.render(), CONTENT_TYPE)
        else:
            return False
        return True
