"""Row locks: a claim passes over rows another transaction holds and returns the due rows
behind them, and claims and acks lock, and wait for, only the rows they take.

The first defect guarded against is Oracle's: a poll that picks the first N rows and only then
skips the locked ones returns nothing while due messages wait. The others are InnoDB's, on
small and near-empty tables. The tests run on every backend with row locks; on Oracle and SQL
Server only where their container can start (conftest.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from sqldelay import DelayedQueue, Message, create_schema, drop_schema

from ..conftest import unique_name


def test_claim_returns_due_rows_behind_rows_locked_elsewhere(make_queue, engine, clock):
    queue = make_queue()
    if not queue.dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    keys = [f"k{i}" for i in range(5)]
    start = clock.now()
    queue.offer_many([Message(k, k, start - timedelta(seconds=10 - i)) for i, k in enumerate(keys)])
    with engine.connect() as other:
        # hold the two earliest rows the way a producer updating them would
        held = other.execute(queue.dao.select_existing(queue.pkind, keys[:2])).fetchall()
        assert sorted(r.pkey for r in held) == keys[:2]
        assert [e.key for e in queue.poll_many(2)] == ["k2", "k3"]
        other.rollback()
    assert [e.key for e in queue.poll_many(5)] == ["k0", "k1", "k4"]


def test_a_claim_locks_only_what_it_takes_in_a_new_small_table(engine):
    # A locking read locks every row it examines: a plan that reads all due messages and
    # sorts them (what MariaDB chose for a table without statistics) would lock all of them,
    # and the second of two concurrent claims would find nothing while 30 messages wait.
    if not DelayedQueue(engine, "probe").dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    name = unique_name("sqd_small")
    create_schema(engine, table_name=name)
    try:
        queue = DelayedQueue(engine, "small", table_name=name)
        queue.offer_many([Message(f"m{i}", i) for i in range(40)])
        with engine.connect() as conn, conn.begin():
            first = queue.poll_many(10, connection=conn)  # its transaction stays open
            second = queue.poll_many(10)
            assert len(first) == len(second) == 10
            assert not {e.key for e in first} & {e.key for e in second}
    finally:
        drop_schema(engine, table_name=name)


def test_an_ack_waits_for_no_other_consumer_in_a_new_small_table(engine):
    # An ack deletes its messages by id. On a table this small MariaDB planned that DELETE as
    # a read of the whole table (cheaper, by its costs, than 25 lookups), and a DELETE waits
    # for the lock of every row it reads: the ack then waited for every open claim, and under
    # load acks and claims deadlocked (hundreds of 1213s in a run of the asyncio tasks' test).
    if not DelayedQueue(engine, "probe").dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    name = unique_name("sqd_small")
    create_schema(engine, table_name=name)
    try:
        queue = DelayedQueue(engine, "small", table_name=name)
        queue.offer_many([Message(f"m{i}", i) for i in range(40)])
        mine = queue.poll_many(25)
        pool = ThreadPoolExecutor(1)
        with engine.connect() as conn, conn.begin():
            held = queue.poll_many(10, connection=conn)  # their locks kept while it is open
            assert len(held) == 10
            acking = pool.submit(queue.ack_many, mine)
            try:
                # an ack that waits for this transaction waits until it ends
                assert acking.result(timeout=30) == 25
            finally:
                conn.rollback()
                pool.shutdown()
        assert queue.stats().due == 15
    finally:
        drop_schema(engine, table_name=name)

