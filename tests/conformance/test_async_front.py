"""What only the asyncio front end has: ``async def`` handlers, the AsyncConnection they get in
transactional mode, and a schedule shared by a blocking and an asyncio process.

Everything else the asyncio front end does is the blocking suite's, run on its targets.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    AsyncDelayedQueue,
    AsyncWorker,
    CronService,
    DelayedQueue,
    Message,
    OfferOutcome,
    ProcessingMode,
    RetryPolicy,
)

from ..conftest import unique_name
from ..fronts import unwrap

S = timedelta(seconds=1)


@pytest.fixture
def async_queue(async_url, front, make_queue):
    """A queue of the async target, used inside coroutines run with ``front.run``."""
    return unwrap(make_queue())


def test_async_handlers_are_awaited_and_failures_retried(async_queue, front, clock):
    q = async_queue
    calls: list[tuple[str, int]] = []

    async def handler(envelope):
        calls.append((envelope.key, envelope.attempt))
        await asyncio.sleep(0)  # a handler that awaits
        if envelope.key == "bad":
            raise ValueError("no")

    async def scenario():
        await q.offer_many([Message(f"k{i}", i) for i in range(20)] + [Message("bad", 0)])
        worker = AsyncWorker(q, handler, concurrency=5, batch_size=7, listeners=[],
                             retry=RetryPolicy.fixed(S, max_attempts=2))
        first = await worker.drain()
        clock.advance(S)
        second = await worker.drain()
        return first, second, await q.stats()

    first, second, stats = front.run(scenario)
    assert (first, second) == (21, 1)
    assert sorted(calls) == sorted([(f"k{i}", 1) for i in range(20)] + [("bad", 1), ("bad", 2)])
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)


def test_async_handlers_that_suspend_run_side_by_side_up_to_the_concurrency(async_queue, front):
    # a batch wakes one handler task, and each one that suspends lets the next one in: all
    # five must get in, and no sixth, though the batch brought ten
    q = async_queue
    inside: list[str] = []
    peak = 0
    five_inside = asyncio.Event()
    waited_in_vain: list[str] = []

    async def handler(envelope):
        nonlocal peak
        inside.append(envelope.key)
        peak = max(peak, len(inside))
        if len(inside) == 5:
            five_inside.set()
        try:
            await asyncio.wait_for(five_inside.wait(), 10)
        except TimeoutError:  # fewer than five got in meanwhile: let the rest through
            waited_in_vain.append(envelope.key)
            five_inside.set()
        finally:
            inside.remove(envelope.key)

    async def scenario():
        await q.offer_many([Message(f"k{i}", i) for i in range(10)])
        worker = AsyncWorker(q, handler, concurrency=5, batch_size=10, listeners=[])
        return await worker.drain()

    assert front.run(scenario) == 10
    assert (peak, waited_in_vain) == (5, [])


def test_transactional_async_handlers_write_through_the_async_connection(async_queue, front,
                                                                         engine, table_name):
    q = async_queue
    side = sa.Table(f"{table_name}_aside", sa.MetaData(),
                    sa.Column("k", sa.String(50), primary_key=True))
    side.create(engine, checkfirst=True)
    try:
        async def handler(envelope, conn):
            await conn.execute(side.insert().values(k=envelope.key))
            if envelope.key == "bad":
                raise RuntimeError("undo my insert")

        async def scenario():
            await q.offer_many([Message("good", 1), Message("bad", 2)])
            await AsyncWorker(q, handler, mode=ProcessingMode.TRANSACTIONAL, batch_size=10,
                              retry=RetryPolicy.fixed(10 * S), listeners=[]).drain()
            return await q.get("good"), await q.get("bad")

        good, bad = front.run(scenario)
        with engine.connect() as conn:
            assert conn.execute(sa.select(side.c.k)).scalars().all() == ["good"]
        assert good is None and bad.deliveries == 1 and not bad.in_flight
    finally:
        side.drop(engine)


def test_a_schedule_installed_by_a_blocking_and_an_asyncio_process_is_one(async_queue, front,
                                                                          engine, table_name,
                                                                          clock):
    aq = async_queue
    sq = DelayedQueue(engine, aq.name, table_name=table_name, clock=clock)

    async def install():
        cron = aq.cron()
        handle = await cron.install_periodic("beat", every=timedelta(minutes=1), payload="b",
                                             ahead=3)
        await handle.close()
        return handle.config_hash

    blocking = CronService(sq)
    handle = blocking.install_periodic("beat", every=timedelta(minutes=1), payload="b", ahead=3)
    handle.close()
    assert front.run(install) == handle.config_hash
    # the asyncio install found every tick stored already: nothing new
    [schedule] = blocking.list("beat")
    assert (schedule.config_hash, schedule.pending) == (handle.config_hash, 3)
    assert blocking.install_tick(handle.config_hash, "beat", []) == []
    assert blocking.uninstall("beat") == 3


def test_a_queue_needs_an_engine_of_its_own_front_end(engine, async_url):
    from sqldelay import InvalidArgumentError
    from sqldelay.engines import create_async_engine

    with pytest.raises(InvalidArgumentError, match="needs an AsyncEngine"):
        AsyncDelayedQueue(engine, unique_name("q"))
    async_engine = create_async_engine(async_url)
    with pytest.raises(InvalidArgumentError, match="with an AsyncEngine use AsyncDelayedQueue"):
        DelayedQueue(async_engine, unique_name("q"))
    asyncio.run(async_engine.dispose())


def test_offer_outcomes_match_the_blocking_front_end(async_queue, front, engine, table_name,
                                                     clock):
    # the same offers through both fronts answer the same outcomes on the same queue
    sq = DelayedQueue(engine, async_queue.name, table_name=table_name, clock=clock)
    at = clock.now()
    assert sq.offer("k", 1, at) is OfferOutcome.CREATED
    assert front.run(async_queue.offer, "k", 1, at) is OfferOutcome.IGNORED
    assert front.run(async_queue.offer, "k", 2, at) is OfferOutcome.UPDATED
    assert sq.offer("k", 2, at, update=False) is OfferOutcome.IGNORED
    assert sq.get("k").payload == 2
