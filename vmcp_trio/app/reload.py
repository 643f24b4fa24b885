"""Reloading the configuration of a running gateway (SIGHUP, and ``--watch``).

:class:`Reloader` is a supervised task. Asked to reload (:meth:`Reloader.request`, or a change
of the configuration files' content when it watches them), it loads and validates the files
again, off the event loop:

* Invalid: every problem is logged, and the old configuration keeps serving.
* Unchanged: one line says so.
* Changed: the new parts are built first (so a mode that cannot be set up, say an issuer that
  announces nothing, leaves everything as it was), then swapped in at once: backends added are
  started, removed ones retired (no new call goes to them; calls in flight finish within the
  backend's timeout; then the process or link is closed), changed ones both; sessions go on,
  and each hears ``list_changed`` (its lists may have changed); incoming auth, the
  authorization server and its storage apply to new requests (a storage block that did not
  change keeps its storage, and what it holds). What changed is logged, and
  ``vmcp_reloads_total{outcome}`` counts ``ok``, ``unchanged``, ``invalid`` and ``failed``.

A configuration accepted (``ok`` or ``unchanged``: the files were read and validated, and what
they say is what serves) sets ``vmcp_config_info{hash}`` to its digest and
``vmcp_config_loaded_timestamp_seconds`` to now; a refused one leaves both as they were.

Settings given as flags (listen address, bounds) are the process's, and do not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import trio

from ..auth.incoming.build import IncomingAuthError
from ..gateway.backends.stdio import StdioProcess
from ..resources.plan import BackendPlan, GatewayPlan, StdioEndpoint
from ..resources.problems import Problem
from ..runtime.logs import say
from ..runtime.supervisor import TaskHealth
from .parts import (
    KEY_REFRESH,
    GatewayProcess,
    audit_log_for,
    authenticator_for,
    authorization_server,
    readiness_of,
    start_backend_tasks,
    stdio_process,
    strategies_for,
    watch_backends,
    wire_authserver,
    wire_policies,
)

__all__ = ["Loaded", "Reloader", "changes"]

log = logging.getLogger("vmcp.reload")

class Loaded(NamedTuple):
    """What loading the configuration gave."""

    plan: GatewayPlan | None
    """None when invalid."""
    problems: list[Problem]
    why: str | None
    """Why there is no plan when no problem says it (no VirtualMCPServer of that name, say)."""
    digest: str = ""
    """The configuration's short hash (``vmcp_config_info``)."""


@dataclass(frozen=True)
class Changes:
    added: frozenset[str]
    removed: frozenset[str]
    changed: frozenset[str]
    """Backends whose endpoint or outgoing auth changed."""
    incoming: bool
    auth_server: bool
    other: bool
    """Aggregation or operational settings, or the composite tools."""
    policies: bool = False
    """Authorization policies (the gateway's or a backend's own), rate limits, or a backend's
    webhooks."""
    audit: bool = False

    @property
    def gone(self) -> set[str]:
        return set(self.removed | self.changed)

    @property
    def new(self) -> set[str]:
        return set(self.added | self.changed)

    def describe(self) -> str:
        parts = [f"{what} {', '.join(sorted(names))}" for what, names in (
            ("backends added:", self.added), ("removed:", self.removed),
            ("changed:", self.changed)) if names]
        parts += [what for what, flag in (("incoming auth", self.incoming),
                                          ("the authorization server", self.auth_server),
                                          ("aggregation, operational settings or composite tools",
                                           self.other),
                                          ("policies or rate limits", self.policies),
                                          ("audit", self.audit))
                  if flag]
        return "; ".join(parts)


def _own_policies(plan: GatewayPlan) -> dict[str, tuple[object, ...]]:
    """What each backend has of its own at the gate: policies, rate limits, webhooks."""
    return {b.name: own for b in plan.backends
            if any(own := (b.authz, b.rate_limits, b.webhooks))}


def _connection(backend: BackendPlan) -> BackendPlan:
    """``backend`` without what the gate applies (a change there reconnects nothing)."""
    return replace(backend, authz=None, rate_limits=None, webhooks=None)


def changes(old: GatewayPlan, new: GatewayPlan) -> Changes:
    before = {b.name: b for b in old.backends}
    after = {b.name: b for b in new.backends}
    return Changes(
        added=frozenset(after.keys() - before.keys()),
        removed=frozenset(before.keys() - after.keys()),
        changed=frozenset(n for n in before.keys() & after.keys()
                          if _connection(before[n]) != _connection(after[n])),
        incoming=old.incoming != new.incoming,
        auth_server=old.auth_server != new.auth_server,
        other=(old.aggregation, old.operational, old.name, old.composite_tools) != (
            new.aggregation, new.operational, new.name, new.composite_tools),
        policies=(old.authz, old.rate_limits, _own_policies(old)) != (
            new.authz, new.rate_limits, _own_policies(new)),
        audit=old.audit != new.audit)


class Reloader:
    def __init__(self, process: GatewayProcess, load: Callable[[], Loaded], *,
                 fingerprint: Callable[[], str] | None = None, poll: float = 2.0) -> None:
        self.process = process
        self.load = load
        """Loads and validates the configuration (blocking: it runs in a thread)."""
        self.fingerprint = fingerprint
        """The configuration files' content, summed up (``--watch``); None: not watched."""
        self.poll = poll
        self._requested = trio.Event()

    def request(self) -> None:
        """Reload soon (SIGHUP)."""
        self._requested.set()

    async def run(self) -> None:
        """Reload when asked, or when the files change (a supervised task)."""
        seen = await self._fingerprint()
        while True:
            with trio.move_on_after(self.poll if self.fingerprint is not None else float("inf")):
                await self._requested.wait()
            now = await self._fingerprint()
            if self._requested.is_set() or now != seen:
                self._requested = trio.Event()
                seen = now
                await self.reload()

    async def _fingerprint(self) -> str | None:
        if self.fingerprint is None:
            return None
        return await trio.to_thread.run_sync(self.fingerprint)

    async def reload(self) -> str:
        """Load, validate and apply the configuration; the outcome (also counted)."""
        loaded = await trio.to_thread.run_sync(self.load)
        outcome = await self._reload(loaded)
        self.process.reload_tried(outcome)
        if outcome in ("ok", "unchanged"):
            self.process.config_loaded(loaded.digest)
        return outcome

    async def _reload(self, loaded: Loaded) -> str:
        plan, problems, why, _ = loaded
        for problem in problems:
            say(str(problem), level=problem.severity.value, **problem.as_dict())
        if plan is None:
            reason = why or f"{sum(p.severity.value == 'error' for p in problems)} error(s)"
            say(f"vmcp: reload refused: {reason}; the old configuration keeps serving",
                level="error")
            return "invalid"
        process = self.process
        if plan.session_storage != process.plan.session_storage:
            say("vmcp: reload refused: spec.sessionStorage changed; it takes effect on a "
                "restart (every replica must agree on it); the old configuration keeps "
                "serving", level="error")
            return "invalid"
        if plan.telemetry != process.plan.telemetry:
            say("vmcp: reload: telemetryConfigRef changed; traces keep their settings until "
                "the next start", level="warning")
        diff = changes(process.plan, plan)
        if not diff.describe():
            say("vmcp: reload: the configuration is unchanged")
            return "unchanged"
        try:
            await apply(process, plan, diff)
        except IncomingAuthError as exc:
            say(f"vmcp: reload refused: incoming auth: {exc}; the old configuration keeps "
                "serving", level="error")
            return "failed"
        say(f"vmcp: reloaded: {diff.describe()}", changes=diff.describe())
        return "ok"


async def apply(process: GatewayProcess, plan: GatewayPlan, diff: Changes) -> None:
    """Build what changed, swap it in, retire what it replaced (see the module docstring)."""
    old_plan, settings, http = process.plan, process.settings, process.http
    # 1. Build (nothing running is touched yet: a failure here leaves everything as it was).
    authserver = process.authserver
    if diff.auth_server or diff.incoming:
        keep = (process.authserver.storage if process.authserver is not None
                and old_plan.auth_server is not None and plan.auth_server is not None
                and old_plan.auth_server.storage == plan.auth_server.storage else None)
        authserver = authorization_server(plan, http, keep)
    authenticator = process.authenticator
    if diff.incoming or authserver is not process.authserver:
        authenticator = authenticator_for(plan, settings, http, authserver)
        await authenticator.prepare()
    strategies = strategies_for(plan, settings, http, authserver, process.exchangers,
                                process.shared)
    stdio = {name: p for name, p in process.links.stdio.items() if name not in diff.gone}
    retired_stdio = [p for name, p in process.links.stdio.items() if name in diff.gone]
    for backend in plan.backends:
        if backend.name in diff.new and isinstance(backend.endpoint, StdioEndpoint):
            stdio[backend.name] = stdio_process(backend, plan, settings, process.metrics)
    # 2. Start the new parts' tasks, under names of their own.
    replaced_as = authserver is not process.authserver
    replaced_auth = authenticator is not process.authenticator
    old_tasks = {part: process.tasks.pop(part, []) for part in
                 (["authserver"] if replaced_as else []) + (["authenticator"] if replaced_auth
                                                            else [])
                 + [f"backend {name}" for name in diff.gone]}
    if replaced_as and authserver is not None:
        await process.start_tasks("authserver", authserver.supervised(), policy=KEY_REFRESH)
    if replaced_auth:
        await process.start_tasks("authenticator", authenticator.supervised(),
                                  policy=KEY_REFRESH)
    audit = process.audit
    if diff.audit:
        old_tasks["audit"] = process.tasks.pop("audit", [])
        audit = audit_log_for(plan, process.metrics)
        await process.start_tasks("audit", [("audit log writer", audit.run)])
    # 3. Swap, at once (no checkpoint between these).
    process.plan = plan
    process.authserver, process.authenticator = authserver, authenticator
    process.links.update(plan, strategies, stdio, set(diff.changed))
    process.gateway.health.update(plan, diff.gone, diff.new)
    process.app.update(authenticator, extra_endpoints=authserver.handle if authserver else None,
                       readiness=readiness_of(authserver, process.shared))
    process.audit = audit
    wire_authserver(process)
    watch_backends(process, added=set(diff.added), removed=set(diff.removed))
    process.gateway.update(plan, diff.gone, diff.new)
    old_gate = process.gateway.services.gate
    if diff.policies or diff.audit or replaced_as:
        wire_policies(process)
    for name in sorted(diff.new):
        await start_backend_tasks(process, name)
    # 4. Retire what was replaced: its tasks stop (a stdio process once no session uses it:
    # each lets go of it once connected anew and its calls there are done, so within twice
    # the backend's timeout).
    assert process.supervisor is not None
    if old_gate is not None and old_gate is not process.gateway.services.gate:
        await old_gate.aclose()  # its webhooks' idle connections (calls in flight finish)
    for part, handles in old_tasks.items():
        name = part.removeprefix("backend ")
        stdio_task = f"stdio backend {name}"
        for handle in handles:
            old_process = next((p for p in retired_stdio if p.name == name), None)
            if handle.name == stdio_task and old_process is not None:
                timeout = 2 * old_plan.operational.timeout_for(name).total_seconds()
                process.supervisor.nursery.start_soon(_retire, handle, old_process, timeout)
            else:
                handle.stop()


async def _retire(handle: TaskHealth, stdio: StdioProcess, timeout: float) -> None:
    with trio.move_on_after(timeout):
        while stdio.in_use:
            await trio.sleep(0.05)
    handle.stop()
