"""The supervisor: every long-lived task runs under it, with a name, a restart policy and a health
state, and no crash of one reaches anything else.

Rules it keeps:

* A supervised task is an async function. It runs until it returns (it is *done*) or is
  cancelled (its nursery, or the process, is ending). Nothing else ends it: when it raises, the
  failure is logged and counted, and it is started again after a backoff: exponential from the
  policy's ``initial`` delay, doubling up to ``cap``, with +-20% jitter so that many tasks failing
  together do not retry together. A run that lasted ``reset_after`` seconds starts the backoff
  over.
* An expected failure raises :class:`Retry` (a stream that ended, a dependency that is down):
  it is logged as one line, without a traceback, and may name its own delay (a server's
  ``retry:`` hint). Any other exception is a crash: logged once with its traceback. Both count
  in ``vmcp_task_restarts_total{task}`` (through ``on_restart``).
* A :class:`Retry` with ``reset=True`` says the run got somewhere before it ended (a client
  connected, and its connection later ended): the backoff starts over, as after a long run. A
  client that keeps reconnecting to a server runs under :data:`RECONNECT` (1 s doubling to 30 s)
  and only a connection made starts its backoff over.
* A policy may also restart a task that returned (``restart_on_return``) or never restart one
  that failed (``restart=False``: a client session, which cannot be resumed, simply ends).
  :meth:`TaskHealth.stop` ends a task for good (a reload removed what it served).
* :meth:`Supervisor.start` returns once the task reports started (trio's ``task_status``), or
  once its first run failed: a dependency that is down delays nothing and stops nothing; the task
  keeps trying in the background and its state says so.
* A supervisor runs its tasks in one nursery and lists the live ones (not yet done or failed)
  in :attr:`Supervisor.tasks` with their :class:`TaskHealth`: the process has one for its own
  tasks, each client session one for the tasks of its backend links, all counting in the same
  metric. A session's supervisor shares the gateway's nursery with every other session's:
  :meth:`Supervisor.stop_all` ends its own tasks (each runs in a scope of its own) and waits
  for them.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import trio

__all__ = ["DEFAULT_POLICY", "NEVER_RESTART", "RECONNECT", "NamedTask", "RestartPolicy",
           "Retry", "Supervisor", "Task", "TaskHealth"]

log = logging.getLogger("vmcp.supervisor")

State = Literal["starting", "running", "backoff", "done", "failed", "stopped"]
Task = Callable[..., Awaitable[object]]
NamedTask = tuple[str, Task]
"""A task with the name it is supervised under (the ``task`` label of its metrics)."""


class Retry(Exception):
    """An expected failure: restart the task after the backoff (or ``after`` seconds), logging
    one line at ``level`` (the message; never a secret). ``reset``: the run got somewhere (a
    connection was made), so the backoff starts over."""

    def __init__(self, message: str, *, after: float | None = None,
                 level: int = logging.INFO, reset: bool = False) -> None:
        super().__init__(message)
        self.after = after
        self.level = level
        self.reset = reset


@dataclass(frozen=True)
class RestartPolicy:
    initial: float = 0.5
    """The first delay before a restart, in seconds."""
    cap: float = 30.0
    """The longest delay."""
    reset_after: float = 60.0
    """A run at least this long starts the backoff over."""
    restart: bool = True
    """False: a task that fails is not started again (state ``failed``)."""
    restart_on_return: bool = False
    """True: a task that returns is started again too, after ``initial``."""


DEFAULT_POLICY = RestartPolicy()
NEVER_RESTART = RestartPolicy(restart=False)
RECONNECT = RestartPolicy(initial=1.0, cap=30.0, reset_after=math.inf)
"""A client's connection to a server (the stdio bridge's GET stream, the tunnel agent's link to
its relay): 1 s doubling to 30 s; only a connection made (``Retry(reset=True)``) starts over."""


@dataclass(eq=False)  # each is one task's: compared (and kept in sets) by identity
class TaskHealth:
    name: str
    state: State = "starting"
    restarts: int = 0
    last_error: str | None = None
    """One line about the last failure (exception type and message)."""
    since: float = field(default_factory=trio.current_time)
    """When the task entered its state (trio clock)."""
    scope: trio.CancelScope = field(default_factory=trio.CancelScope, repr=False)

    def enter(self, state: State) -> None:
        self.state = state
        self.since = trio.current_time()

    def stop(self) -> None:
        """End the task for good (a reload removed what it served)."""
        self.scope.cancel()


class _Status:
    """The ``task_status`` a task sees: reports to its starter once, on the first run."""

    def __init__(self, health: TaskHealth, outer: trio.TaskStatus[None]) -> None:
        self.health = health
        self.outer: trio.TaskStatus[None] | None = outer

    def started(self, value: Any = None) -> None:
        self.health.enter("running")
        self.report()

    def report(self) -> None:
        outer, self.outer = self.outer, None
        if outer is not None:
            outer.started()


def _describe(error: BaseException) -> str:
    if isinstance(error, Retry):
        return str(error)
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in error.exceptions[:3])
    return f"{type(error).__name__}: {error}"[:300]


class Supervisor:
    def __init__(self, nursery: trio.Nursery, *,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.nursery = nursery
        self.on_restart = on_restart
        """Told the name of every task restarted (the metric)."""
        self.tasks: dict[str, TaskHealth] = {}
        self._live: dict[TaskHealth, None] = {}
        """Every task started and not yet over (two may share a name; a dict: an empty set
        costs 216 bytes, and every client session has a supervisor)."""
        self._none_live: trio.Event | None = None

    def _health(self, name: str) -> TaskHealth:
        health = self.tasks[name] = TaskHealth(name)
        self._live[health] = None
        return health

    async def stop_all(self) -> None:
        """End every task now and wait until each is over (a client session's end, whose
        tasks run in a nursery that outlives it)."""
        for health in self._live:
            health.stop()
        if self._live:
            self._none_live = trio.Event()
            await self._none_live.wait()

    async def start(self, name: str, fn: Task, *args: Any,
                    policy: RestartPolicy = DEFAULT_POLICY) -> TaskHealth:
        """Start a task that takes ``task_status`` (trio's start protocol); return once it
        reported started or its first run failed."""
        health = self._health(name)
        await self.nursery.start(partial(self._supervise, health, fn, args, policy, True),
                                 name=name)
        return health

    def start_soon(self, name: str, fn: Task, *args: Any,
                   policy: RestartPolicy = DEFAULT_POLICY) -> TaskHealth:
        """Start a task (without ``task_status``) at the next checkpoint."""
        health = self._health(name)
        self.nursery.start_soon(partial(self._supervise, health, fn, args, policy, False),
                                name=name)
        return health

    async def _supervise(self, health: TaskHealth, fn: Task,
                         args: tuple[Any, ...], policy: RestartPolicy, wants_status: bool, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        status = _Status(health, task_status)
        try:
            with health.scope:
                await self._keep_running(health, fn, args, policy, wants_status, status)
            status.report()
            if health.scope.cancelled_caught:
                self._finished(health, "stopped")
        finally:
            self._live.pop(health, None)
            if not self._live and self._none_live is not None:
                self._none_live.set()

    async def _keep_running(self, health: TaskHealth, fn: Task, args: tuple[Any, ...],
                            policy: RestartPolicy, wants_status: bool, status: _Status) -> None:
        delay = policy.initial
        while True:
            began = trio.current_time()
            health.enter("starting")
            if not wants_status:
                status.started()
            pause: float | None = None
            progressed = False
            try:
                if wants_status:
                    await fn(*args, task_status=status)
                else:
                    await fn(*args)
            except Retry as exc:
                health.last_error = str(exc)
                pause, progressed = exc.after, exc.reset
                log.log(exc.level, "%s: %s", health.name, exc)
            except Exception as exc:
                self._crashed(health, exc)
            except BaseExceptionGroup as group:
                # Failures that met a cancellation: the cancellation is someone else's (it goes
                # on up, as KeyboardInterrupt would); the failures are this task's.
                passing, failures = group.split(
                    lambda e: not isinstance(e, Exception | BaseExceptionGroup))
                if failures is not None:
                    self._crashed(health, failures)
                if passing is not None:
                    raise passing from None
            else:
                status.report()
                if not policy.restart_on_return:
                    self._finished(health, "done")
                    return
                pause = policy.initial
            status.report()
            if not policy.restart:
                self._finished(health, "failed")
                return
            if progressed or trio.current_time() - began >= policy.reset_after:
                delay = policy.initial
            wait = min(pause if pause is not None else delay, policy.cap)
            delay = min(delay * 2, policy.cap)
            health.enter("backoff")
            health.restarts += 1
            if self.on_restart is not None:
                self.on_restart(health.name)
            await trio.sleep(wait * (0.8 + 0.4 * random.random()))  # noqa: S311 - jitter

    def _finished(self, health: TaskHealth, state: State) -> None:
        health.enter(state)
        if self.tasks.get(health.name) is health:
            del self.tasks[health.name]

    @staticmethod
    def _crashed(health: TaskHealth, error: BaseException) -> None:
        health.last_error = _describe(error)
        log.error("%s crashed", health.name, exc_info=error)
