"""Tasks over the queue (``sqldelay.Tasks``, ``sqldelay.AsyncTasks``) on every reachable
database: defer checks everything before it writes, a worker runs the tasks by name, messages
it cannot run go to the dead letters at once, each task retries by its own policy, and the
results of the tasks that keep them are written with the ack and read back by handles."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import (
    AsyncDelayedQueue,
    AsyncTasks,
    AsyncWorker,
    DeadLetters,
    DelayedQueue,
    FakeClock,
    InvalidArgumentError,
    OfferOutcome,
    ProcessingMode,
    RetryPolicy,
    TaskContext,
    TaskFailed,
    Tasks,
    TaskStatus,
    Worker,
)

from ..conftest import unique_name

FAST = RetryPolicy.fixed(timedelta(0), max_attempts=5)


@pytest.fixture
def tq(engine, table_name):
    return DelayedQueue(engine, unique_name("tq"), table_name=table_name)


@pytest.fixture
def tasks(tq):
    return Tasks(tq, results=True)


def drain(tasks, **settings) -> int:
    settings.setdefault("retry", FAST)
    return Worker(tasks.queue, tasks, **settings).drain()


def test_a_deferred_task_runs_in_a_worker_and_its_result_comes_back(tasks, tq):
    calls = []

    @tasks.task
    def add(a: int, b: int = 0) -> int:
        calls.append((a, b))
        return a + b

    @tasks.task(name="mul")
    async def mul(a, b):
        await asyncio.sleep(0)
        return {"product": a * b}

    h1 = add.defer(a=2, b=3)
    h2 = mul.defer(a=4, b=5)
    assert h1.outcome is OfferOutcome.CREATED and h1.task == add.name
    assert add.name == f"{__name__}.{add.__qualname__}"
    assert add(1, 1) == 2  # called here and now, not deferred
    waiting = h1.status()
    assert waiting.status is TaskStatus.QUEUED and waiting.kwargs == {"a": 2, "b": 3}
    assert tq.get(h1.key).payload == {"task": add.name, "kwargs": {"a": 2, "b": 3}}

    assert drain(tasks) == 2
    assert h1.result(timeout=5) == 5
    assert h2.result(timeout=5) == {"product": 20}
    done = h1.status()
    assert done.status is TaskStatus.SUCCEEDED and done.finished and done.attempts == 1
    assert done.finished_at >= done.started_at and done.kwargs == {"a": 2, "b": 3}
    assert calls == [(1, 1), (2, 3)]
    assert add.handle(h1.key).result(timeout=1) == 5  # a key kept elsewhere
    assert tq.stats().due == 0


def test_arguments_are_checked_before_anything_is_written(tasks, tq):
    @tasks.task
    def send(user_id: int, *, subject: str = "hi") -> None:
        pass

    with pytest.raises(InvalidArgumentError, match="missing a required argument: 'user_id'"):
        send.defer(subject="x")
    with pytest.raises(InvalidArgumentError, match=r"unexpected keyword argument\(s\) 'usr_id'"):
        send.defer(usr_id=1)
    with pytest.raises(InvalidArgumentError, match="argument 'subject' is not JSON-serialis"):
        send.defer(user_id=1, subject={1, 2})
    with pytest.raises(InvalidArgumentError, match="give at= or delay=, not both"):
        send.defer(user_id=1, at=datetime.now(UTC), delay=timedelta(1))
    with pytest.raises(InvalidArgumentError, match="priority"):
        send.defer(user_id=1, priority="high")
    with pytest.raises(InvalidArgumentError):  # one bad call: none of the batch is written
        send.defer_many([{"user_id": 1}, {"user_id": 2}, {"user": 3}])
    with pytest.raises(InvalidArgumentError, match="not JSON-serialisable"):
        send.defer_many([{"user_id": 1}, {"user_id": object()}])
    assert tq.stats().due == tq.stats().scheduled == 0
    assert len(send.defer_many([{"user_id": i} for i in range(3)])) == 3
    assert tq.stats().due == 3


def test_options_schedule_key_priority_and_group_the_message(tasks, tq):
    @tasks.task(priority=5, group="g1")
    def job(n):
        return n

    later = job.defer(n=1, delay=timedelta(hours=1))
    assert tq.get(later.key).scheduled_at > datetime.now(UTC) + timedelta(minutes=59)
    first = job.defer(n=2, key="only-one")
    again = job.defer(n=3, key="only-one")
    replaced = job.defer(n=4, key="only-one", replace=True, priority=9, group="g2")
    assert [first.outcome, again.outcome, replaced.outcome] == [
        OfferOutcome.CREATED, OfferOutcome.IGNORED, OfferOutcome.UPDATED]
    stored = tq.get("only-one")
    assert (stored.payload["kwargs"], stored.priority, stored.group) == ({"n": 4}, 9, "g2")
    assert tq.get(later.key).priority == 5 and tq.get(later.key).group == "g1"
    assert drain(tasks) == 1  # the later one waits
    assert replaced.result(timeout=1) == 4


def test_a_parameter_named_like_an_option_defers_through_enqueue(tasks):
    @tasks.task
    def store(key, value, *rest):
        return [key, value, *rest]

    with pytest.raises(InvalidArgumentError, match=r"parameter\(s\) key.*enqueue"):
        store.defer(key="a", value=1)
    handle = store.enqueue(["a", 1, 2], key="message-key")
    assert handle.key == "message-key"
    drain(tasks)
    assert handle.result(timeout=1) == ["a", 1, 2]


def test_defer_joins_the_callers_transaction(tasks, tq, engine):
    @tasks.task
    def job():
        pass

    with engine.connect() as conn:
        job.defer(connection=conn)
        conn.rollback()
    assert tq.stats().due == 0
    with engine.begin() as conn:
        handle = job.defer(connection=conn)
    assert handle.status().status is TaskStatus.QUEUED


def test_what_a_worker_cannot_run_goes_to_the_dead_letters_at_once(tasks, tq):
    @tasks.task
    def job(a):
        return a

    tq.offer("stray", {"task": "gone.task", "kwargs": {}})
    tq.offer("changed", {"task": job.name, "kwargs": {"b": 1}})
    tq.offer("no-task", [1, 2])
    good = job.defer(a=1)
    assert drain(tasks) == 4  # the worker goes on after each
    letters = {dl.key: dl for dl in DeadLetters.of(tq).list(tq.name)}
    assert set(letters) == {"stray", "changed", "no-task"}
    assert all(dl.attempts == 1 for dl in letters.values())
    assert "UnknownTaskError" in letters["stray"].last_error
    assert "'gone.task'" in letters["stray"].last_error
    assert "no longer fit" in letters["changed"].last_error
    assert "not a task message" in letters["no-task"].last_error
    assert good.result(timeout=1) == 1


def test_each_task_retries_by_its_own_policy(tasks, tq):
    attempts = {"once": 0, "default": 0}

    @tasks.task(retry=RetryPolicy.fixed(timedelta(0), max_attempts=1))
    def once():
        attempts["once"] += 1
        raise ValueError("no luck")

    @tasks.task
    def default():
        attempts["default"] += 1
        raise ValueError("no luck either")

    h_once, h_default = once.defer(), default.defer()
    drain(tasks, retry=RetryPolicy.fixed(timedelta(0), max_attempts=3))
    assert attempts == {"once": 1, "default": 3}
    with pytest.raises(TaskFailed, match="after 1 attempt") as failed:
        h_once.result(timeout=1)
    assert failed.value.result.status is TaskStatus.FAILED
    assert "ValueError: no luck" in failed.value.result.error
    assert h_default.status().attempts == 3


def test_a_registry_policy_applies_to_its_tasks_that_name_none(tq):
    tasks = Tasks(tq, retry=RetryPolicy.fixed(timedelta(0), max_attempts=2))
    runs = []

    @tasks.task
    def flaky():
        runs.append(1)
        raise RuntimeError("down")

    flaky.defer()
    drain(tasks, retry=RetryPolicy.fixed(timedelta(0), max_attempts=9))
    assert len(runs) == 2


def test_a_task_without_results_keeps_none(tq):
    tasks = Tasks(tq)

    @tasks.task
    def job():
        return 1

    @tasks.task(results=True)
    def kept():
        return 2

    handle, other = job.defer(), kept.defer()
    drain(tasks)
    with pytest.raises(InvalidArgumentError, match="keeps no results"):
        handle.result(timeout=0)
    assert handle.status() is None
    assert other.result(timeout=1) == 2


def test_results_are_pruned_after_their_retention(engine, table_name):
    clock = FakeClock()
    queue = DelayedQueue(engine, unique_name("tq"), table_name=table_name, clock=clock)
    tasks = Tasks(queue, results=timedelta(hours=1))

    @tasks.task
    def job(n):
        return n

    @tasks.task(results=timedelta(hours=3))
    def kept(n):
        return n

    handles = job.defer_many([{"n": i} for i in range(3)])
    other = kept.defer(n=9)
    drain(tasks)
    assert [h.result(timeout=1) for h in handles] == [0, 1, 2]
    clock.advance(timedelta(hours=2))
    assert tasks.prune_results() == 3
    assert all(h.status() is None for h in handles)
    assert other.result(timeout=1) == 9


def test_a_return_value_that_cannot_be_stored_is_a_dead_letter(tasks, tq):
    @tasks.task
    def job():
        return object()

    handle = job.defer()
    drain(tasks)
    with pytest.raises(TaskFailed, match="cannot be stored as JSON"):
        handle.result(timeout=1)
    assert handle.status().attempts == 1


def test_in_transactional_mode_the_result_and_the_tasks_writes_commit_with_the_ack(
        tasks, tq, engine, table_name):
    marks = sa.Table(unique_name("marks"), sa.MetaData(), sa.Column("n", sa.Integer))
    marks.create(engine)
    try:
        @tasks.task(context=True)
        def record(context: TaskContext, n: int) -> int:
            assert context.task == record.name and context.attempt == 1
            context.connection.execute(sa.insert(marks).values(n=n))
            if n < 0:
                raise ValueError("negative")
            return n * 10

        ok, bad = record.defer(n=3), record.defer(n=-1)
        Worker(tq, tasks, mode=ProcessingMode.TRANSACTIONAL,
               retry=RetryPolicy.fixed(timedelta(0), max_attempts=1)).drain()
        assert ok.result(timeout=1) == 30
        with pytest.raises(TaskFailed):
            bad.result(timeout=1)
        with engine.connect() as conn:
            assert list(conn.execute(sa.select(marks.c.n)).scalars()) == [3]
    finally:
        marks.drop(engine)


def test_result_waits_and_times_out(tasks):
    @tasks.task
    def job():
        return "done"

    handle = job.defer()
    with pytest.raises(TimeoutError, match="queued"):
        handle.result(timeout=0.05)


def test_registry_checks(tq, engine, table_name):
    from sqldelay import BytesSerializer

    with pytest.raises(InvalidArgumentError, match="serializer"):
        Tasks(DelayedQueue(engine, "raw", table_name=table_name, serializer=BytesSerializer()))
    tasks = Tasks(tq)

    @tasks.task(name="same")
    def one():
        pass

    with pytest.raises(InvalidArgumentError, match="already registered"):
        tasks.task(name="same")(lambda: None)
    with pytest.raises(InvalidArgumentError, match="takes a DelayedQueue"):
        Tasks("not a queue")
    assert "same" in tasks and tasks["same"] is one and len(tasks) == 1


def test_the_worker_command_runs_a_registry(backend_url, engine, table_name, tmp_path):
    """``sqldelay worker module:tasks`` loads a registry as it loads a handler."""
    name = unique_name("cliq")
    module = unique_name("mytasks")
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f"""
        import sqlalchemy as sa
        import sqldelay

        engine = sa.create_engine({backend_url!r})
        tasks = sqldelay.Tasks(sqldelay.DelayedQueue(engine, {name!r},
                                                     table_name={table_name!r}), results=True)

        @tasks.task(name="double")
        def double(n):
            return 2 * n
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        handle = importlib.import_module(module).double.defer(n=21)
    finally:
        sys.path.remove(str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "sqldelay.cli", "worker", f"{module}:tasks", "--url", backend_url,
         "--table", table_name, "--queue", name, "--drain"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "1 succeeded" in done.stdout
    queue = DelayedQueue(engine, name, table_name=table_name)
    tasks = Tasks(queue)
    assert tasks.handle(handle.key).status().return_value == 42


# ---- the asyncio front end --------------------------------------------------------------


def test_async_tasks_run_under_the_async_worker(async_url, table_name):
    from sqlalchemy.ext.asyncio import create_async_engine

    async def scenario():
        engine = create_async_engine(async_url)
        try:
            queue = AsyncDelayedQueue(engine, unique_name("atq"), table_name=table_name)
            tasks = AsyncTasks(queue, results=True)
            threads = []

            @tasks.task
            def blocking(n):
                import threading

                threads.append(threading.current_thread().name)
                return n + 1

            @tasks.task(retry=RetryPolicy.fixed(timedelta(0), max_attempts=1))
            async def awaited(n):
                await asyncio.sleep(0)
                if n < 0:
                    raise ValueError("negative")
                return n * 2

            handles = await blocking.defer_many([{"n": i} for i in range(3)])
            good, bad = await awaited.defer(n=5), await awaited.defer(n=-1)
            with pytest.raises(InvalidArgumentError, match=r"unexpected keyword argument\(s\) .m."):
                await awaited.defer(m=1)
            assert (await good.status()).status is TaskStatus.QUEUED
            worker = AsyncWorker(queue, tasks, concurrency=2, retry=FAST)
            assert await worker.drain() == 5
            assert [await h.result(timeout=5) for h in handles] == [1, 2, 3]
            assert await good.result(timeout=5) == 10
            with pytest.raises(TaskFailed, match="negative"):
                await bad.result(timeout=5)
            assert threads and "MainThread" not in threads  # plain functions off the loop
        finally:
            await engine.dispose()

    asyncio.run(scenario())


def test_async_tasks_in_transactional_mode(async_url, table_name):
    from sqlalchemy.ext.asyncio import create_async_engine

    async def scenario():
        engine = create_async_engine(async_url)
        try:
            queue = AsyncDelayedQueue(engine, unique_name("atx"), table_name=table_name)
            tasks = AsyncTasks(queue, results=True)

            @tasks.task(context=True)
            async def job(context, n):
                assert context.connection is not None
                return n

            handle = await job.defer(n=7)
            await AsyncWorker(queue, tasks, mode=ProcessingMode.TRANSACTIONAL).drain()
            assert await handle.result(timeout=5) == 7
        finally:
            await engine.dispose()

    asyncio.run(scenario())



def test_a_cron_message_with_a_task_payload_runs_as_that_task(engine, table_name):
    clock = FakeClock()
    queue = DelayedQueue(engine, unique_name("tq"), table_name=table_name, clock=clock)
    tasks = Tasks(queue)
    runs = []

    @tasks.task(name="nightly")
    def nightly(scope):
        runs.append(scope)

    queue.cron().install_periodic("nightly", timedelta(hours=1),
                                  payload={"task": "nightly", "kwargs": {"scope": "all"}})
    clock.advance(timedelta(hours=1, minutes=1))
    Worker(queue, tasks, retry=FAST).drain()
    assert runs == ["all"]
