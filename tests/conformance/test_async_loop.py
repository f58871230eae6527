"""Event-loop hygiene of the asyncio front end: no call holds the loop for more than a few
milliseconds, and waiting on the database never holds it at all.

Each test runs its own loop in asyncio's debug mode, where every step of the loop that takes
longer than ``slow_callback_duration`` is reported; here a report fails the test.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from datetime import timedelta

import sqlalchemy as sa

from sqldelay import (
    AsyncDeadLetters,
    AsyncDelayedQueue,
    AsyncWorker,
    DelayedQueue,
    Message,
    ProcessingMode,
    RetryPolicy,
    SystemClock,
)
from sqldelay.engines import create_async_engine

from ..conftest import unique_name

# what one step of the loop may hold it, in debug mode (which itself slows steps down)
FEW_MS = 0.025
S = timedelta(seconds=1)


def _runqueue_wait() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU (Linux schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def run_watched(scenario, engine) -> list[str]:
    """Run ``scenario()`` on a fresh loop in debug mode; the steps that held the loop longer
    than FEW_MS. A step holds the loop for its wall time less the time the machine kept the
    thread off the CPU: a busy machine stretches every step, which is not the step's doing,
    while computing or blocking on I/O inside a step holds the loop whatever the load. The
    loop is watched once ``engine`` has made its first connection, which imports parts of
    the driver and of SQLAlchemy's dialect: an application pays that once, at start-up.
    What the test session holds already is frozen out of the garbage collector meanwhile: a
    collection of the oldest generation walks every object the process holds (330 ms for 2
    million here), so late in a full run one falling inside a step charges it with the
    earlier tests' objects; such a run failed on two steps of 26 and 34 ms."""
    reports: list[str] = []
    watching = [False]
    step = asyncio.events.Handle._run

    def timed_step(handle) -> None:
        if not watching[0]:
            return step(handle)
        started, waited = time.perf_counter(), _runqueue_wait()
        try:
            return step(handle)
        finally:
            held = time.perf_counter() - started - (_runqueue_wait() - waited)
            if held > FEW_MS:
                reports.append(f"{handle!r} held the loop for {held * 1000:.1f} ms")

    async def main():
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
        watching[0] = True
        await scenario()

    asyncio.events.Handle._run = timed_step
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(main(), debug=True)
    finally:
        gc.unfreeze()
        asyncio.events.Handle._run = step
    return reports


def test_no_call_holds_the_loop_for_more_than_a_few_ms(async_url, table_name):
    # the engine is made before the loop runs, as an application does at start-up: making
    # one imports its driver, a one-time cost that is not a call of sqldelay's
    engine = create_async_engine(async_url)

    async def scenario():
        try:
            q = AsyncDelayedQueue(engine, unique_name("loop"), table_name=table_name)
            now = SystemClock().now()
            await q.offer("one", {"n": 1})
            await q.offer_many([Message(f"k{i}", {"n": i}, now) for i in range(100)])
            env = await q.poll()
            await env.extend(timedelta(minutes=1))
            await env.release()
            batch = await q.poll_many(100)
            await q.ack_many([e for e in batch if e.key != "k77"])
            await q.release(next(e for e in batch if e.key == "k77"))
            await q.get("k1"), await q.contains("k1"), await q.stats(), await q.next_due()
            cron = q.cron()
            handle = await cron.install_periodic("tick", timedelta(minutes=1), payload={})
            await cron.list()
            await handle.close()
            await cron.uninstall("tick")

            async def handler(envelope):
                if envelope.key == "k77":
                    raise ValueError("dead letter me")

            retry = RetryPolicy.fixed(timedelta(0), max_attempts=1)
            await AsyncWorker(q, handler, concurrency=10, batch_size=50, retry=retry,
                              listeners=[]).drain()
            await q.offer_many([Message(f"t{i}", i) for i in range(20)])
            await AsyncWorker(q, lambda e, conn: None, concurrency=2, batch_size=10,
                              mode=ProcessingMode.TRANSACTIONAL, listeners=[]).drain()
            dead = AsyncDeadLetters.of(q)
            assert await dead.requeue(await dead.ids(q.name)) == 1
            await q.clear()
        finally:
            await engine.dispose()

    assert run_watched(scenario, engine) == []


def test_waiting_on_a_database_lock_leaves_the_loop_free(async_url, engine, table_name):
    # Another connection holds the row (SQLite: the database) for 0.3 s while an offer waits
    # for it. A ticker on the same loop must keep ticking every few milliseconds meanwhile.
    name = unique_name("locked")
    holding, release = threading.Event(), threading.Event()
    DelayedQueue(engine, name, table_name=table_name).offer("k", 1)

    def hold():
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                table = sa.Table(table_name, sa.MetaData(), autoload_with=conn)
                conn.execute(sa.select(table.c.id).where(table.c.pkey == "k")
                             .with_for_update()).all()
            holding.set()
            release.wait(10)
            conn.rollback()

    holder = threading.Thread(target=hold)
    gaps: list[float] = []

    async_engine = create_async_engine(async_url)

    async def scenario():
        try:
            q = AsyncDelayedQueue(async_engine, name, table_name=table_name)
            ticking = True

            async def tick():
                last = time.perf_counter()
                while ticking:
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.ensure_future(tick())
            holder.start()
            await asyncio.to_thread(holding.wait, 10)
            asyncio.get_running_loop().call_later(0.3, release.set)
            began = time.perf_counter()
            await q.offer("k", 2)  # waits for the lock
            waited = time.perf_counter() - began
            ticking = False
            await ticker
            assert waited >= 0.25, f"the offer did not wait for the lock ({waited:.3f} s)"
        finally:
            await async_engine.dispose()

    try:
        reports = run_watched(scenario, async_engine)
    finally:
        release.set()
        holder.join(10)
    assert reports == []
    assert max(gaps) < 0.1, f"the loop stood still for {max(gaps):.3f} s"
