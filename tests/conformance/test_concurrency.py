"""Many producers and consumers at once, on every backend, with the real clock.

Each key is offered by two producers (one with update=False, one with update=True and the
same payload and due time), so every offer after the first of a live message is IGNORED;
a key is created again only when its message was already consumed. So for every key the
number of CREATED outcomes must equal the number of acked deliveries, no message may be held
by two consumers at once, and nothing may be left at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from sqldelay import Delivery, FakeClock, Message, OfferOutcome, SystemClock, queue_base

from ..fronts import unwrap

# keys, each offered twice; fewer where calls carry one message (or, for the asyncio tasks,
# one to twenty-five): the contention, not the count, is what these tests are after
MESSAGES = 5000
ONE_AT_A_TIME = 2000
PRODUCERS = 4
CONSUMERS = 4
DEADLINE = 240.0


@pytest.mark.parametrize(("batched", "always_first"), [(False, False), (True, False), (True, True)],
                         ids=["poll", "poll_many", "poll_many_always_inserting_first"])
def test_producers_and_consumers(make_queue, batched, always_first, front, monkeypatch):
    if front.is_async:
        pytest.skip("threads: the asyncio front end's concurrency is its tasks' (below); "
                    "threads calling it through the test's portal would test the portal")
    queue = make_queue(clock=SystemClock(), acquire_timeout=timedelta(minutes=10))
    if always_first:
        # every offer tries its plain insert first, however often the keys exist already
        # (QueueDao.inserts_first): half of them meet keys another producer has inserted
        if not queue.dao.inserts_first:
            pytest.skip(f"{queue.dao.name} offers its usual way only")
        monkeypatch.setattr(queue_base, "_FIRST_BACKOFF", 0)
    due = SystemClock().now() - timedelta(seconds=1)
    # producer p offers the keys of slices p and p+1: every key is offered twice
    count = MESSAGES if batched else ONE_AT_A_TIME
    slices = [list(range(s, count, PRODUCERS)) for s in range(PRODUCERS)]
    created: Counter[str] = Counter()
    acked: Counter[str] = Counter()
    held: set[str] = set()
    overlaps: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    producers_done = threading.Event()

    def produce(p: int) -> None:
        update = p % 2 == 1
        keys = slices[p] + slices[(p + 1) % PRODUCERS]
        messages = [Message(f"key-{k}", {"k": k}, due, update) for k in keys]
        if batched:
            outcomes = []
            for i in range(0, len(messages), 100):
                outcomes += queue.offer_many(messages[i:i + 100])
        else:
            outcomes = [queue.offer(m.key, m.payload, m.at, update=m.update) for m in messages]
        assert OfferOutcome.UPDATED not in outcomes  # same payload and due time: never changed
        with lock:
            created.update(m.key for m, o in zip(messages, outcomes, strict=True)
                           if o is OfferOutcome.CREATED)

    def consume() -> None:
        idle_since = None
        while time.monotonic() < start + DEADLINE:
            batch = queue.poll_many(25) if batched else [e for e in [queue.poll()] if e]
            if not batch:
                if producers_done.is_set():
                    # two empty polls a moment apart after the producers finished: drained
                    if idle_since is not None and time.monotonic() - idle_since > 0.2:
                        return
                    idle_since = idle_since or time.monotonic()
                continue
            idle_since = None
            with lock:
                for env in batch:
                    if env.key in held:
                        overlaps.append(env.key)
                    held.add(env.key)
                    assert env.delivery is Delivery.FIRST
            with lock:
                for env in batch:
                    held.discard(env.key)
            assert queue.ack_many(batch) == len(batch)
            with lock:
                acked.update(env.key for env in batch)

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    start = time.monotonic()
    producers = [threading.Thread(target=guarded, args=(produce, p)) for p in range(PRODUCERS)]
    consumers = [threading.Thread(target=guarded, args=(consume,)) for _ in range(CONSUMERS)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join()
    producers_done.set()
    for t in consumers:
        t.join()
    if errors:
        raise errors[0]
    assert not overlaps, f"held by two consumers at once: {overlaps[:5]}"
    assert set(created) == {f"key-{k}" for k in range(count)}
    assert acked == created  # every created message delivered and acked exactly once
    stats = queue.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)


CONSUMER_SCRIPT = """
import sys, sqlalchemy as sa
from datetime import timedelta
from sqldelay import DelayedQueue
queue = DelayedQueue(sa.create_engine(sys.argv[1]), sys.argv[2], table_name=sys.argv[3],
                     acquire_timeout=timedelta(minutes=1))
claimed = queue.poll_many(int(sys.argv[4]))
print(" ".join(sorted(e.key for e in claimed)), flush=True)
sys.stdin.read()  # hold the messages until killed
"""
ASYNC_CONSUMER_SCRIPT = """
import asyncio, sys
from datetime import timedelta
from sqlalchemy.ext.asyncio import create_async_engine
from sqldelay import AsyncDelayedQueue

async def main():
    queue = AsyncDelayedQueue(create_async_engine(sys.argv[1]), sys.argv[2],
                              table_name=sys.argv[3], acquire_timeout=timedelta(minutes=1))
    claimed = await queue.poll_many(int(sys.argv[4]))
    print(" ".join(sorted(e.key for e in claimed)), flush=True)
    await asyncio.to_thread(sys.stdin.read)  # hold the messages until killed

asyncio.run(main())
"""


def test_killed_consumer_loses_nothing(backend_url, make_queue, table_name, target, front):
    queue = make_queue(clock=SystemClock())
    queue.offer_many([Message(f"m{i}", i) for i in range(30)])
    script, url = ((ASYNC_CONSUMER_SCRIPT, target.async_url(backend_url)) if target.is_async
                   else (CONSUMER_SCRIPT, backend_url))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, url, queue.name, table_name, "20"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = set(proc.stdout.readline().split())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(held) == 20
    assert queue.stats().in_flight == 20
    # until the lock expires only the 10 unclaimed messages can be had
    rest = queue.poll_many(100)
    assert {e.key for e in rest} == {f"m{i}" for i in range(30)} - held
    assert queue.ack_many(rest) == 10
    # after the timeout the killed consumer's messages come back as redeliveries
    later = front.queue(queue.name, table_name=table_name,
                        clock=FakeClock(SystemClock().now() + timedelta(minutes=1, seconds=1)))
    redelivered = later.poll_many(100)
    assert {e.key for e in redelivered} == held
    assert all(e.attempt == 2 for e in redelivered)
    assert later.ack_many(redelivered) == 20
    assert later.stats().due == 0


def test_two_hundred_asyncio_tasks_produce_and_consume(make_queue, front):
    """The asyncio front end's own concurrency: 100 producer and 100 consumer tasks on one
    event loop and one engine, over 2,000 keys each offered twice; some of each kind work one
    message at a time, the rest in batches."""
    if not front.is_async:
        pytest.skip("tasks of the asyncio front end; the threads above cover the blocking one")
    queue = unwrap(make_queue(clock=SystemClock(), acquire_timeout=timedelta(minutes=10)))
    due = SystemClock().now() - timedelta(seconds=1)
    tasks = 100
    slices = [list(range(s, ONE_AT_A_TIME, tasks)) for s in range(tasks)]
    created: Counter[str] = Counter()
    acked: Counter[str] = Counter()
    held: set[str] = set()
    overlaps: list[str] = []

    async def produce(p: int) -> None:
        keys = slices[p] + slices[(p + 1) % tasks]
        messages = [Message(f"key-{k}", {"k": k}, due, p % 2 == 1) for k in keys]
        outcomes = []
        if p % 10 == 0:  # a tenth of the producers offer one at a time, the rest in batches
            for m in messages:
                outcomes.append(await queue.offer(m.key, m.payload, m.at, update=m.update))
        else:
            for i in range(0, len(messages), 10):
                outcomes += await queue.offer_many(messages[i:i + 10])
        assert OfferOutcome.UPDATED not in outcomes
        created.update(m.key for m, o in zip(messages, outcomes, strict=True)
                       if o is OfferOutcome.CREATED)

    async def consume(producing: asyncio.Task, batched: bool) -> None:
        empty_since = None
        while True:
            batch = (await queue.poll_many(25) if batched
                     else [e for e in [await queue.poll()] if e])
            if not batch:
                if producing.done():
                    if empty_since is not None and time.monotonic() - empty_since > 0.2:
                        return
                    empty_since = empty_since or time.monotonic()
                # a hundred consumers polling every 10 ms spent the event loop on empty polls
                # and starved the producers of it (31 s through psycopg's driver; 7 s at 50 ms)
                await asyncio.sleep(0.05)
                continue
            empty_since = None
            for env in batch:
                if env.key in held:
                    overlaps.append(env.key)
                held.add(env.key)
            await asyncio.sleep(0)  # let other tasks run while these are held
            held.difference_update(env.key for env in batch)
            assert await queue.ack_many(batch) == len(batch)
            acked.update(env.key for env in batch)

    async def scenario() -> None:
        producing = asyncio.ensure_future(asyncio.gather(*(produce(p) for p in range(tasks))))
        consumers = (consume(producing, batched=c % 4 != 0) for c in range(tasks))
        await asyncio.wait_for(asyncio.gather(producing, *consumers), DEADLINE)

    front.run(scenario)
    assert not overlaps, f"held by two consumers at once: {overlaps[:5]}"
    assert set(created) == {f"key-{k}" for k in range(ONE_AT_A_TIME)}
    assert acked == created
    stats = front.run(queue.stats)
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)
