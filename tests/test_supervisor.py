"""The supervisor: restarts with backoff, what is logged, what is counted, and that no failure of
a supervised task reaches its nursery. Time is trio's autojump clock: backoffs take no time."""

from __future__ import annotations

import itertools
import logging

import pytest
import trio
import trio.testing

from vmcp_trio.runtime.supervisor import (
    NEVER_RESTART,
    RECONNECT,
    RestartPolicy,
    Retry,
    Supervisor,
)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_crash_is_restarted_with_growing_backoff_and_counted(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    runs: list[float] = []
    restarted: list[str] = []

    async def flaky() -> None:
        runs.append(trio.current_time())
        if len(runs) < 5:
            raise KeyError("boom")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, on_restart=restarted.append)
        health = supervisor.start_soon("flaky", flaky, policy=RestartPolicy(initial=1, cap=4))
        await trio.sleep(60)
        assert len(runs) == 5 and health.state == "running" and health.restarts == 4
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    for gap, nominal in zip(gaps, (1, 2, 4, 4), strict=True):  # doubling, capped, +-20% jitter
        assert nominal * 0.8 <= gap <= nominal * 1.2 + 0.01
    assert restarted == ["flaky"] * 4
    crashes = [r for r in caplog.records if r.getMessage() == "flaky crashed"]
    assert len(crashes) == 4 and all(r.exc_info for r in crashes)
    assert supervisor.tasks["flaky"].last_error == "KeyError: 'boom'"


async def test_an_expected_failure_is_one_line_and_may_name_its_delay(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    runs: list[float] = []

    async def stream() -> None:
        runs.append(trio.current_time())
        raise Retry("the stream ended", after=7)

    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        Supervisor(nursery).start_soon("stream", stream)
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert 7 * 0.8 <= runs[1] - runs[0] <= 7 * 1.2
    lines = [r for r in caplog.records if "the stream ended" in r.getMessage()]
    assert lines and not any(r.exc_info for r in lines)
    assert lines[0].getMessage() == "stream: the stream ended"


async def test_start_returns_after_a_first_failure_and_the_task_keeps_trying(
        autojump_clock: trio.testing.MockClock) -> None:
    attempts = 0

    async def connect(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise Retry("down")
        task_status.started()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery)
        health = await supervisor.start("connection", connect)
        assert attempts == 1 and health.state == "backoff" and health.last_error == "down"
        await trio.sleep(10)
        assert attempts == 3 and health.state == "running"
        nursery.cancel_scope.cancel()


async def test_a_task_that_returns_is_done_unless_its_policy_restarts_it(
        autojump_clock: trio.testing.MockClock) -> None:
    counts = {"once": 0, "again": 0}

    async def once(key: str) -> None:
        counts[key] += 1

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery)
        done = supervisor.start_soon("once", once, "once")
        again = supervisor.start_soon("again", once, "again",
                                      policy=RestartPolicy(initial=1, restart_on_return=True))
        await trio.sleep(10.5)
        nursery.cancel_scope.cancel()
    assert counts["once"] == 1 and done.state == "done"
    assert counts["again"] >= 8 and again.restarts >= counts["again"] - 1


async def test_never_restart_leaves_the_task_failed(
        autojump_clock: trio.testing.MockClock) -> None:
    async def broken() -> None:
        raise ValueError("no")

    async with trio.open_nursery() as nursery:
        health = Supervisor(nursery).start_soon("broken", broken, policy=NEVER_RESTART)
        await trio.sleep(5)
    assert health.state == "failed" and health.restarts == 0


async def test_a_long_run_starts_the_backoff_over(autojump_clock: trio.testing.MockClock) -> None:
    runs: list[float] = []

    async def sometimes_long() -> None:
        runs.append(trio.current_time())
        if len(runs) == 4:
            await trio.sleep(100)  # a good long run
        raise Retry("ended")

    async with trio.open_nursery() as nursery:
        Supervisor(nursery).start_soon("t", sometimes_long,
                                       policy=RestartPolicy(initial=1, cap=30, reset_after=50))
        await trio.sleep(120)
        nursery.cancel_scope.cancel()
    after_long_run = runs[4] - runs[3] - 100
    assert 0.8 <= after_long_run <= 1.2


async def test_a_retry_that_made_progress_starts_the_backoff_over(
        autojump_clock: trio.testing.MockClock) -> None:
    """A client that connected (``reset=True``) waits the first delay again, then doubles from
    there; failures in a row keep doubling, however long each took (RECONNECT)."""
    runs: list[float] = []

    async def connection() -> None:
        runs.append(trio.current_time())
        if len(runs) == 2:
            await trio.sleep(90)  # a slow failure: no reset under RECONNECT
        raise Retry("ended", reset=len(runs) == 4)

    async with trio.open_nursery() as nursery:
        Supervisor(nursery).start_soon("t", connection, policy=RECONNECT)
        await trio.sleep(120)
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    gaps[1] -= 90
    for gap, nominal in zip(gaps, (1, 2, 4, 1, 2, 4), strict=False):
        assert nominal * 0.8 <= gap <= nominal * 1.2 + 0.01, gaps


async def test_failures_that_meet_a_cancellation_are_logged_and_the_cancellation_goes_on(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    """A task whose child crashed while its scope was being cancelled: the crash is this task's
    (logged), the cancellation is the outer scope's (the supervisor's nursery ends as asked)."""

    async def parent() -> None:
        async with trio.open_nursery() as inner:
            async def child() -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    raise RuntimeError("cleanup failed")

            inner.start_soon(child)
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        Supervisor(nursery).start_soon("parent", parent)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert any(r.getMessage() == "parent crashed" for r in caplog.records)


async def test_a_stopped_task_ends_for_good_and_leaves_the_table(
        autojump_clock: trio.testing.MockClock) -> None:
    runs = 0

    async def forever(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal runs
        runs += 1
        task_status.started()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery)
        health = await supervisor.start("worker", forever)
        assert supervisor.tasks == {"worker": health} and health.state == "running"
        health.stop()
        await trio.sleep(1)
        assert health.state == "stopped" and "worker" not in supervisor.tasks and runs == 1
        again = await supervisor.start("worker", forever)  # a new task of the same name
        health.stop()  # stopping the old one again touches nothing of the new
        await trio.sleep(1)
        assert supervisor.tasks == {"worker": again} and again.state == "running"
        nursery.cancel_scope.cancel()
