"""Backend health: one supervised checker per backend, and what a change of state sets off.

Each checker (:meth:`HealthMonitor.check_forever`, a supervised task) probes its backend every
``healthCheckInterval`` with an MCP ``ping`` (for a backend that speaks 2026-07-28, which has no
``ping``: ``server/discover``) bounded by
``healthCheckTimeout``: over a health session of its own for an HTTP backend (initialized once,
again after a failure; with the backend's credential only when it is everyone's, a
``headerInjection`` or ``bearerToken``: a probe calls for no user), through the shared process
for a stdio backend. A backend is
*unhealthy* after ``unhealthyThreshold`` consecutive failures and *healthy* again after one
success; until its first probe it is *unknown* (and used). Its first check is logged either
way: ``is healthy`` (INFO), or a WARNING naming why it failed (a backend down when the gateway
starts, or added down by a reload, is said at once, not only once it is unhealthy).

With ``circuitBreaker.enabled`` each checker is also a circuit breaker, as ToolHive's is:
``failureThreshold`` failures in a row *open* the circuit, which makes the backend unhealthy
at once (whatever ``unhealthyThreshold`` says) and stops its checks for ``timeout``: a backend
that is restarting or overloaded is left alone, and every request for it is refused at once
(no client waits on it). A failure is a failed check, or (:meth:`HealthMonitor.call_timed_out`)
a request the backend took and did not answer within its timeout, which a hung backend gives
long before enough checks fail; a passed check starts the count again (answered requests do
not: they are not watched, so that the request path pays nothing for the breaker). Then the
circuit is *half-open*: one check, and only one, goes; it passing closes the circuit (healthy,
the backend back in every catalog), it failing opens the circuit for another ``timeout``. A
reload that turns the breaker off closes an open circuit at its next check.

When a backend becomes unhealthy or healthy again, :meth:`HealthMonitor.run` calls
``on_change`` (the gateway's): sessions drop it from (or add it back to) their catalog and receive
``list_changed`` notifications, which is how a client learns its tool list changed.

A checker that crashes is restarted by the supervisor; it never takes serving down.

What ``/api/backends/health`` and ``/readyz`` say about the backends is computed here too
(:meth:`HealthMonitor.report`, :meth:`HealthMonitor.ready`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import trio

from ..auth.caller import Caller
from ..auth.outgoing.strategies import StaticCredential
from ..protocol.jsonrpc import ErrorResponse, Message
from ..resources.plan import GatewayPlan, HttpEndpoint
from ..runtime.supervisor import Supervisor
from .backends.base import BackendAuthRequired, BackendError
from .backends.links import BackendLinks, HttpLink, SessionCredentials

__all__ = ["BackendHealth", "HealthMonitor"]

log = logging.getLogger("vmcp.health")

State = Literal["unknown", "healthy", "unhealthy"]
Circuit = Literal["closed", "open", "half-open"]


@dataclass
class BackendHealth:
    name: str
    state: State = "unknown"
    consecutive_failures: int = 0
    last_error: str | None = None
    last_check: float | None = None
    """Wall-clock time (``time.time()``) of the last probe."""
    latency_ms: float | None = None
    circuit: Circuit = "closed"
    reopens_at: float | None = None
    """While the circuit is open: when (``time.time()``) its half-open check goes."""

    @property
    def usable(self) -> bool:
        return self.state != "unhealthy"


def _nobody() -> Caller | None:
    """A health check calls for no one: only a credential that is everyone's goes with it."""
    return None


async def _drop(message: Message) -> None:
    """Health sessions ignore what backends send them unasked."""


class HealthMonitor:
    def __init__(self, plan: GatewayPlan, links: BackendLinks,
                 on_change: Callable[[str, bool], Awaitable[None]]) -> None:
        self.plan = plan
        self.links = links
        self.on_change = on_change
        """Told ``(backend, usable)`` when a backend becomes unhealthy or healthy again."""
        self.backends = {b.name: BackendHealth(b.name) for b in plan.backends}
        self._links: dict[str, HttpLink] = {}

    def update(self, plan: GatewayPlan, gone: set[str], new: set[str]) -> None:
        """A reload: forget the backends ``gone``, start from "unknown" for those ``new`` (the
        checkers themselves are started and stopped by whoever supervises them)."""
        self.plan = plan
        for name in gone:
            self.backends.pop(name, None)
            self._links.pop(name, None)  # its checker, stopped, closes what it opened
        for name in new:
            self.backends[name] = BackendHealth(name)

    def usable(self, backend: str) -> bool:
        health = self.backends.get(backend)
        return health is None or health.usable

    def circuit_closed(self, backend: str) -> bool:
        health = self.backends.get(backend)
        return health is None or health.circuit == "closed"

    def known_up(self, backend: str) -> bool:
        """Its last check passed (not merely: not yet failed enough to be unhealthy)."""
        health = self.backends.get(backend)
        return health is None or health.state == "healthy"

    async def check_forever(self, name: str) -> None:
        """The checker of one backend (a supervised task)."""
        operational = self.plan.operational
        interval = operational.health_check_interval.total_seconds()
        timeout = operational.health_check_timeout.total_seconds()
        threshold = operational.unhealthy_threshold
        health = self.backends[name]
        async with trio.open_nursery() as nursery:
            probes = Supervisor(nursery)
            while True:
                if health.circuit == "open":
                    if health.reopens_at is not None:
                        await trio.sleep(max(0.0, health.reopens_at - time.time()))
                    health.circuit, health.reopens_at = "half-open", None
                started = trio.current_time()
                error: str | None = None
                try:
                    with trio.fail_after(timeout):
                        await self._probe(name, probes)
                except trio.TooSlowError:
                    process = self.links.stdio.get(name)
                    if process is not None and not process.ready.is_set():
                        error = f"is not running ({process.last_error or 'starting'})"
                    else:
                        error = f"no answer to ping within {timeout:g}s"
                except BackendAuthRequired:
                    error = None  # up: it wants the credential of a caller the probe lacks
                except BackendError as exc:
                    error = exc.detail
                await self._record(health, error, trio.current_time() - started, threshold)
                if health.reopens_at is None:  # an open circuit waits at the loop's top
                    await trio.sleep(interval)

    async def _record(self, health: BackendHealth, error: str | None, elapsed: float,
                      threshold: int) -> None:
        health.last_check = time.time()
        before = health.state
        if error is None:
            health.consecutive_failures = 0
            health.last_error = None
            health.latency_ms = round(elapsed * 1000, 3)
            health.state = "healthy"
        else:
            health.consecutive_failures += 1
            health.last_error = error
            await self._forget_link(health.name)
            if health.consecutive_failures >= threshold:
                health.state = "unhealthy"
        self._break_or_mend(health, error)
        if before != health.state:
            log.log(logging.WARNING if health.state == "unhealthy" else logging.INFO,
                    "backend %s is %s%s", health.name, health.state,
                    f" ({health.last_error})" if health.last_error else "")
            if before != "unknown" or health.state == "unhealthy":
                await self.on_change(health.name, health.usable)
        elif health.state == "unknown" and health.consecutive_failures == 1:
            breaker = self.plan.operational.circuit_breaker
            log.warning("backend %s failed its first check (%s); it is marked unhealthy "
                        "after %d failed checks in a row", health.name, health.last_error,
                        min(threshold, breaker.failure_threshold) if breaker else threshold)

    def _break_or_mend(self, health: BackendHealth, error: str | None) -> None:
        """The circuit after a check (see the module docstring); an open circuit makes the
        backend unhealthy."""
        breaker = self.plan.operational.circuit_breaker
        if breaker is None or error is None:
            if health.circuit != "closed":
                log.info("backend %s: circuit closed (%s)", health.name,
                         "the check after it opened passed" if error is None
                         else "the circuit breaker was turned off")
            health.circuit, health.reopens_at = "closed", None
            return
        if health.circuit == "half-open" or (
                health.circuit == "closed"
                and health.consecutive_failures >= breaker.failure_threshold):
            wait = breaker.timeout.total_seconds()
            log.warning("backend %s: circuit open after %d failures in a row (%s): no "
                        "check and no request for %gs", health.name,
                        health.consecutive_failures, error, wait)
            health.circuit, health.reopens_at = "open", time.time() + wait
            health.state = "unhealthy"

    async def call_timed_out(self, name: str, detail: str) -> None:
        """A request to ``name`` got no answer within its timeout (``detail`` says which): with
        the circuit breaker on and the circuit closed, a failure like a failed check."""
        health = self.backends.get(name)
        if health is None or health.circuit != "closed" \
                or self.plan.operational.circuit_breaker is None:
            return
        health.consecutive_failures += 1
        health.last_error = f"a request {detail}"
        before = health.state
        self._break_or_mend(health, health.last_error)
        if before != health.state:
            await self.on_change(name, health.usable)

    async def _forget_link(self, name: str) -> None:
        link = self._links.pop(name, None)
        if link is not None:
            await link.aclose()

    async def _probe(self, name: str, supervisor: Supervisor) -> None:
        endpoint = self.links.endpoints[name]
        if isinstance(endpoint, HttpEndpoint):
            link = self._links.get(name)
            if link is None:
                timeout = self.plan.operational.health_check_timeout.total_seconds()
                strategy = self.links.strategies.get(name)
                credentials = (SessionCredentials(name, strategy, _nobody)
                               if isinstance(strategy, StaticCredential) else None)
                link = await self.links.connect_http(name, endpoint, supervisor, {}, _drop,
                                                     timeout, listen=False,
                                                     credentials=credentials)
                self._links[name] = link
            reply = await link.call("ping", None, _drop)
        else:
            process = self.links.stdio[name]
            await process.ready.wait()  # bounded by the probe's timeout
            reply = await process.request("ping", None, owner="", sink=_drop)
        if isinstance(reply, ErrorResponse):
            raise BackendError(name, f"answered ping with an error: {reply.error.message[:200]}")

    # --- what the operational endpoints say ---------------------------------------------------

    def report(self) -> list[dict[str, Any]]:
        """``/api/backends/health``: one entry per backend."""
        out: list[dict[str, Any]] = []
        for name, endpoint in self.links.endpoints.items():
            health = self.backends[name]
            entry: dict[str, Any] = {
                "name": name, "status": health.state,
                "consecutiveFailures": health.consecutive_failures,
                "lastError": health.last_error, "lastCheck": health.last_check,
                "latencyMs": health.latency_ms,
            }
            if self.plan.operational.circuit_breaker is not None:
                entry.update(circuit=health.circuit, circuitReopensAt=health.reopens_at)
            if isinstance(endpoint, HttpEndpoint):
                entry.update(transport=endpoint.transport, url=endpoint.url)
            else:
                process = self.links.stdio[name]
                entry.update(transport="stdio", process=process.state,
                             restarts=process.restarts)
            out.append(entry)
        return out

    def not_ready(self) -> str | None:
        """Why the backends cannot serve (None: they can): all of them must be healthy under
        partialFailureMode fail, at least one under best_effort (a gateway with no backends is
        ready)."""
        waiting = sorted(name for name, health in self.backends.items()
                         if health.state != "healthy")
        if self.plan.operational.partial_failure_mode == "fail":
            if waiting:
                return (f"not healthy: {', '.join(waiting)} "
                        "(partialFailureMode: fail needs every backend)")
            return None
        if self.backends and len(waiting) == len(self.backends):
            return "no backend is healthy"
        return None
