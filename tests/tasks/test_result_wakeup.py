"""``handle.result()`` waiting for a task that a worker runs meanwhile: on PostgreSQL the
task's end (its result row, or its dead letter) is notified and wakes the wait at once, with
no poll to wait for; elsewhere the wait polls, backing off."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

from sqldelay import (
    AsyncDelayedQueue,
    AsyncTasks,
    AsyncWorker,
    DelayedQueue,
    RetryPolicy,
    TaskFailed,
    Tasks,
    Worker,
)

from ..conftest import unique_name
from . import run_on_async_engine

# the reads a handle makes anyway while notifications tell it of its task's end: long, so a
# test that finishes well inside it was woken by the notification
LONG = 60.0
ONCE = RetryPolicy.fixed(timedelta(0), max_attempts=1)


def waiting(handle, outcome: dict) -> tuple[threading.Thread, threading.Event]:
    """A thread waiting for ``handle``'s result, and an event set once its first read of the
    task's status has come back (so the task ends while it waits, not before it looks)."""
    looked = threading.Event()
    status = handle.status

    def spy(**kwargs):
        found = status(**kwargs)
        looked.set()
        return found

    handle.status = spy

    def wait() -> None:
        try:
            outcome["value"] = handle.result(timeout=LONG)
        except Exception as exc:  # what the test asserts on
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, looked


def test_a_waiting_result_wakes_when_the_task_ends(engine, table_name, target, monkeypatch):
    import sqldelay.tasks

    notifies = target.database == "postgresql"
    if notifies:
        monkeypatch.setattr(sqldelay.tasks, "_CHECK_EVERY", LONG)
    queue = DelayedQueue(engine, unique_name("wake"), table_name=table_name)
    tasks = Tasks(queue, results=True)

    @tasks.task
    def double(n: int) -> int:
        return 2 * n

    @tasks.task(retry=ONCE)
    def broken() -> None:
        raise ValueError("nope")

    for defer, expect in ((lambda: double.defer(n=21), "value"),
                          (lambda: broken.defer(), "error")):
        handle = defer()
        outcome: dict = {}
        thread, looked = waiting(handle, outcome)
        assert looked.wait(30)
        assert Worker(queue, tasks).drain() == 1
        ended = time.monotonic()
        thread.join(LONG)
        assert not thread.is_alive() and expect in outcome, outcome
        # notified: at once; polled: within the longest pause of its backoff (a second)
        assert outcome["at"] - ended < (0.5 if notifies else 2.0)
        if expect == "value":
            assert outcome["value"] == 42
        else:
            assert isinstance(outcome["error"], TaskFailed)
            assert "ValueError: nope" in outcome["error"].result.error


def test_an_awaited_result_wakes_when_the_task_ends(async_url, table_name, target,
                                                    monkeypatch):
    import sqldelay.tasks_async

    notifies = target.database == "postgresql"
    if notifies:
        monkeypatch.setattr(sqldelay.tasks_async, "_CHECK_EVERY", LONG)

    async def scenario(engine) -> None:
        queue = AsyncDelayedQueue(engine, unique_name("awake"), table_name=table_name)
        tasks = AsyncTasks(queue, results=True)

        @tasks.task
        async def triple(n: int) -> int:
            return 3 * n

        handle = await triple.defer(n=5)
        looked = asyncio.Event()
        status = handle.status

        async def spy(**kwargs):
            found = await status(**kwargs)
            looked.set()
            return found

        handle.status = spy
        waiter = asyncio.create_task(handle.result(timeout=LONG))
        await asyncio.wait_for(looked.wait(), 30)
        assert await AsyncWorker(queue, tasks).drain() == 1
        ended = time.monotonic()
        assert await asyncio.wait_for(waiter, LONG) == 15
        assert time.monotonic() - ended < (0.5 if notifies else 2.0)

    run_on_async_engine(async_url, scenario)


def test_waits_share_one_listening_connection(engine, table_name, target):
    if target.database != "postgresql":
        pytest.skip("notifications are PostgreSQL's")
    from sqldelay.tasks import _Listening

    queue = DelayedQueue(engine, unique_name("share"), table_name=table_name)
    tasks = Tasks(queue, results=True)

    @tasks.task
    def echo(n: int) -> int:
        return n

    handles = [echo.defer(n=i) for i in range(3)]
    outcomes: list[dict] = [{} for _ in handles]
    started = [waiting(h, o) for h, o in zip(handles, outcomes, strict=True)]
    for _, looked in started:
        assert looked.wait(30)
    [listening] = [found for found in _Listening._active.values()
                   if found.engine is engine and found.dao is queue.dao]
    assert len(listening.waiting) == 3
    Worker(queue, tasks).drain()
    for thread, _ in started:
        thread.join(LONG)
    assert [o["value"] for o in outcomes] == [0, 1, 2]
    assert listening.stop.is_set()  # the last one out stopped it
