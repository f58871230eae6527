"""A live worker never lets another consumer handle a message it holds: its acks leave as soon
as its handlers return (never waiting for the next claim), and with ``heartbeat=`` every
message it holds, waiting for a handler, being handled or waiting for its ack, keeps its lock.

Every count here comes from the handlers' own records (who started what), not from the
library's counters.
"""

from __future__ import annotations

import collections
import multiprocessing
import random
import threading
import time
from datetime import timedelta

import pytest

from sqldelay import Message, SystemClock

from ..fronts import unwrap
from ..helpers import around_claims, in_thread, wait_for

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


class Starts:
    """Each handler start, as (key, worker), written by the handlers themselves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []

    def add(self, key: str, worker: str) -> None:
        with self.lock:
            self.seen.append((key, worker))

    def twice(self) -> dict[str, int]:
        with self.lock:
            counts = collections.Counter(key for key, _ in self.seen)
        return {key: n for key, n in counts.items() if n > 1}

    def keys(self) -> set[str]:
        with self.lock:
            return {key for key, _ in self.seen}


def test_an_ack_leaves_while_the_rest_of_its_batch_is_still_being_handled(make_queue, clock,
                                                                         front):
    q = make_queue()
    q.offer_many([Message("quick", 1, clock.now() - 2 * S), Message("slow", 2, clock.now() - S)])
    release = threading.Event()

    def handler(envelope):
        if envelope.key == "slow":
            release.wait(30)

    # one handler, a batch of two: "slow" starts after "quick" returned, and holds the batch
    worker = front.worker(q, handler, batch_size=2, listeners=[])
    thread = in_thread(worker.drain)
    try:
        wait_for(lambda: not q.contains("quick"), what="the ack of the message handled first")
        assert q.contains("slow")  # its handler still runs: the ack did not wait for it
    finally:
        release.set()
        thread.join(20)
    assert not q.contains("slow")


def test_a_live_worker_with_a_heartbeat_keeps_its_batch_from_a_second_worker(make_queue,
                                                                            front):
    # handlers that take a sixth of the lock, a batch of eight: the batch outlives the lock
    # and its first messages wait for nothing once handled
    q = make_queue(clock=SystemClock(), acquire_timeout=1500 * MS)
    other = make_queue(q.name, clock=SystemClock(), acquire_timeout=1500 * MS)
    keys = [f"k{i}" for i in range(8)]
    q.offer_many([Message(k, i) for i, k in enumerate(keys)])
    starts = Starts()

    def handler_of(name):
        def handler(envelope):
            starts.add(envelope.key, name)
            time.sleep(0.25)  # the handler's work
        return handler

    first = front.worker(q, handler_of("first"), batch_size=8, heartbeat=250 * MS,
                         listeners=[])
    second = front.worker(other, handler_of("second"), batch_size=8, heartbeat=250 * MS,
                          idle_poll=50 * MS, listeners=[])
    threads = [in_thread(first.run)]
    try:
        wait_for(lambda: len(starts.keys()) >= 5, what="the first worker well into its batch")
        threads.append(in_thread(second.run))  # well past the batch's first lock expiry
        wait_for(lambda: starts.keys() == set(keys) and q.stats().in_flight == 0
                 and q.stats().due == 0, what="every message handled and acked")
    finally:
        first.stop()
        second.stop()
        for thread in threads:
            thread.join(30)
    assert starts.twice() == {}
    assert {worker for _, worker in starts.seen} == {"first"}


def test_a_message_whose_lock_was_lost_before_its_handler_started_is_not_handled(
        make_queue, clock, front):
    q = make_queue(acquire_timeout=10 * S)
    thief = make_queue(q.name, acquire_timeout=10 * S)
    q.offer_many([Message("a", 1, clock.now() - 2 * S), Message("b", 2, clock.now() - S)])
    starts = Starts()
    release = threading.Event()

    def handler(envelope):
        starts.add(envelope.key, "worker")
        if envelope.key == "a":
            envelope.extend(timedelta(hours=1))
            release.wait(30)

    # no heartbeat: "b" waits in the buffer while "a" runs (its lock renewed by its handler),
    # and the lock of "b" runs out
    worker = front.worker(q, handler, batch_size=2, listeners=[])
    drained = []
    thread = in_thread(lambda: drained.append(worker.drain()))
    try:
        wait_for(lambda: (q.get("a").locked_until or clock.now()) > clock.now() + 30 * S,
                 what="the first handler to renew its lock")
        clock.advance(11 * S)
        stolen = thief.poll()
        assert stolen is not None and stolen.key == "b"
    finally:
        release.set()
        thread.join(20)
    assert starts.seen == [("a", "worker")]  # "b" belongs to the thief now
    assert drained == [1]
    assert thief.ack(stolen)


def test_a_batch_claimed_beside_a_slow_claim_is_handled_and_kept_at_once(make_queue, front):
    """Where a worker claims two batches side by side (PostgreSQL, once its handlers waited
    for a full claim), the batch that arrives first goes to the handlers and under the
    heartbeat at once: it does not wait, its locks running out, for the other claim."""
    lock = 1 * S
    q = make_queue(clock=SystemClock(), acquire_timeout=lock)
    queue = unwrap(q)
    if not queue.dao.claims_side_by_side:
        pytest.skip(f"{queue.engine.dialect.name} claims one batch at a time")
    q.offer_many([Message(f"a{i}", i, q.now() - 2 * S) for i in range(2)]
                 + [Message(f"b{i}", i, q.now() - S) for i in range(4)])
    starts = Starts()
    started_b0 = []  # when the handler of b0 began, by the queue's clock
    slow_claim = threading.Event()  # holds the second claim of the pair back until set
    release = threading.Event()  # the handlers of b0 and b1 return when set
    # claim 1 takes a0 and a1 with the handler idle: the next claim is two at once (2, 3)
    around_claims(q, lambda n: n == 3 and slow_claim.wait(30))

    def handler(envelope):
        starts.add(envelope.key, "worker")
        if envelope.key == "b0":
            started_b0.append(q.now())
        if envelope.key in ("b0", "b1"):
            release.wait(30)

    worker = front.worker(q, handler, batch_size=2, heartbeat=lock / 5, listeners=[])
    thread = in_thread(worker.run)
    try:
        wait_for(lambda: started_b0, what="the handler of the first batch of the pair")
        # b0 runs, b1 waits for the one handler: the heartbeat renews both
        wait_for(lambda: all((q.get(k).locked_until or started_b0[0]) > started_b0[0] + lock
                             for k in ("b0", "b1")), what="the locks of b0 and b1 renewed")
    finally:
        slow_claim.set()
        release.set()
        worker.stop()
        thread.join(30)
    assert starts.twice() == {}


def _hog(stop) -> None:  # a process that keeps a core busy until told to stop
    while not stop.is_set():
        sum(range(10_000))


@pytest.mark.slow
def test_no_second_start_with_slow_handlers_many_workers_and_a_loaded_machine(make_queue,
                                                                            front, engine):
    """Handlers from a tenth of the lock to twice it, four workers of three handlers with
    batches larger than their concurrency, and both cores kept busy by other processes. The
    beat is a fifth of the lock: a renewal may wait for the database as long as four beats.
    On SQLite every renewal waits for its one writer, and a waiting writer polls: under this
    load one waited over a second while the other workers' claims went first, so the locks
    there are twice as long. The workers have an engine of their own: what they meet is
    their own load, not connections the suite's other tests left checked out."""
    lock = 4 * S if engine.dialect.name == "sqlite" else 2 * S
    own = front.create_engine()
    queues = [make_queue(clock=SystemClock(), acquire_timeout=lock, engine=own)]
    queues += [make_queue(queues[0].name, clock=SystemClock(), acquire_timeout=lock,
                          engine=own) for _ in range(3)]
    keys = [f"m{i}" for i in range(30)]
    durations = {k: random.uniform(0.1, 2.0) * lock.total_seconds() for k in keys}
    queues[0].offer_many([Message(k, i) for i, k in enumerate(keys)])
    starts = Starts()

    def handler_of(name):
        def handler(envelope):
            starts.add(envelope.key, name)
            time.sleep(durations[envelope.key])
        return handler

    workers = [front.worker(q, handler_of(f"w{i}"), concurrency=3, batch_size=5,
                            heartbeat=lock / 5, idle_poll=50 * MS, listeners=[])
               for i, q in enumerate(queues)]
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(2)]
    for hog in hogs:
        hog.start()
    threads = [in_thread(w.run) for w in workers]
    try:
        wait_for(lambda: starts.keys() == set(keys) and queues[0].stats().in_flight == 0
                 and queues[0].stats().due == 0, timeout=120, what="every message handled")
    finally:
        stop.set()
        for w in workers:
            w.stop()
        for thread in threads:
            thread.join(30)
        for hog in hogs:
            hog.join(10)
        front.dispose(own)
    assert starts.twice() == {}
