"""Recurring tasks: the cron service installs ticks that run a task with arguments, checked
at install as ``defer`` checks them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqldelay import (
    AsyncDelayedQueue,
    AsyncTasks,
    AsyncWorker,
    DelayedQueue,
    FakeClock,
    Inspector,
    InvalidArgumentError,
    Tasks,
    Worker,
)
from sqldelay.schedules import daily

from ..conftest import unique_name
from . import run_on_async_engine
from .test_tasks import FAST


def stored(queue, clock=None) -> list:
    """The messages of ``queue`` not yet due (the ticks installed)."""
    inspector = Inspector(queue.engine, table_name=queue.dao.table.name, clock=clock)
    return inspector.peek(queue.name, "scheduled", limit=100).messages


def test_the_cron_service_runs_a_task_with_its_arguments(engine, table_name):
    clock = FakeClock()
    queue = DelayedQueue(engine, unique_name("rq"), table_name=table_name, clock=clock)
    tasks = Tasks(queue)
    runs = []

    @tasks.task(name="reports.nightly", priority=7)
    def nightly(scope: str, depth: int = 1):
        runs.append((scope, depth))

    cron = queue.cron()
    try:
        handle = cron.install_task(nightly, timedelta(hours=1), kwargs={"scope": "all"},
                                   ahead=2)
        assert handle.prefix == "reports.nightly"
        [installed] = cron.list("reports.nightly")
        assert installed.pending == 2
        assert {m.priority for m in stored(queue, clock)} == {7}  # the task's priority

        clock.advance(timedelta(hours=1, minutes=1))
        Worker(queue, tasks, retry=FAST).drain()
        assert runs == [("all", 1)]

        # other arguments are another configuration: its ticks replace those waiting
        cron.install_task(nightly, timedelta(hours=1), kwargs={"scope": "eu", "depth": 2},
                          ahead=2)
        [installed] = cron.list("reports.nightly")
        assert installed.pending == 2 and installed.config_hash != handle.config_hash
        clock.advance(timedelta(hours=1))
        Worker(queue, tasks, retry=FAST).drain()
        assert runs == [("all", 1), ("eu", 2)]
    finally:
        cron.close()


def test_a_recurring_tasks_arguments_are_checked_at_install(engine, table_name):
    queue = DelayedQueue(engine, unique_name("rq"), table_name=table_name)
    other = DelayedQueue(engine, unique_name("rq"), table_name=table_name)
    tasks = Tasks(queue)

    @tasks.task
    def report(scope: str):
        pass

    cron = queue.cron()
    try:
        with pytest.raises(InvalidArgumentError, match="unexpected keyword argument.*'scop'"):
            cron.install_task(report, "0 3 * * *", kwargs={"scop": "all"})
        with pytest.raises(InvalidArgumentError, match="missing a required argument"):
            cron.install_task(report, "0 3 * * *")
        with pytest.raises(InvalidArgumentError, match="'scope' is not JSON-serialisable"):
            cron.install_task(report, "0 3 * * *", kwargs={"scope": object()})
        with pytest.raises(InvalidArgumentError, match="install it with that queue's cron"):
            other.cron().install_task(report, "0 3 * * *", kwargs={"scope": "all"})
        with pytest.raises(InvalidArgumentError, match="takes a task"):
            cron.install_task(lambda: None, "0 3 * * *")
        with pytest.raises(InvalidArgumentError, match="a schedule is"):
            cron.install_task(report, 3600, kwargs={"scope": "all"})
        assert cron.list() == [] and stored(queue) == []  # nothing installed

        # a Schedule as it is, and a prefix of one's own
        cron.install_task(report, daily([3], "Europe/Paris"), kwargs={"scope": "fr"},
                          prefix="report-fr", ahead=1)
        [tick] = stored(queue)
        assert tick.key.startswith("report-fr/")
        assert tick.payload == {"task": report.name, "kwargs": {"scope": "fr"}}
    finally:
        cron.close()


def test_the_async_cron_service_runs_a_task(async_url, table_name):
    async def scenario(engine):
        clock = FakeClock()
        queue = AsyncDelayedQueue(engine, unique_name("arq"), table_name=table_name,
                                  clock=clock)
        tasks = AsyncTasks(queue)
        runs = []

        @tasks.task
        async def tick(n: int):
            runs.append(n)

        cron = queue.cron()
        try:
            with pytest.raises(InvalidArgumentError, match="unexpected keyword"):
                await cron.install_task(tick, "@hourly", kwargs={"m": 1})
            await cron.install_task(tick, "@hourly", kwargs={"n": 5}, ahead=1)
            clock.advance(timedelta(hours=1, minutes=1))
            await AsyncWorker(queue, tasks, retry=FAST).drain()
            assert runs == [5]
        finally:
            await cron.close()

    run_on_async_engine(async_url, scenario)
