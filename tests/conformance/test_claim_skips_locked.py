"""Row locks: a claim passes over rows another transaction holds and returns the due rows
behind them, and claims and acks lock, and wait for, only the rows they take.

The first defect guarded against is Oracle's: a poll that picks the first N rows and only then
skips the locked ones returns nothing while due messages wait. The others are InnoDB's, on
small and near-empty tables. The tests run on every backend with row locks; on Oracle and SQL
Server only where their container can start (conftest.py).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, create_schema, drop_schema

from ..conftest import unique_name
from .test_history import Statements


def test_claim_returns_due_rows_behind_rows_locked_elsewhere(make_queue, engine, clock):
    queue = make_queue()
    if not queue.dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    keys = [f"k{i}" for i in range(5)]
    start = clock.now()
    queue.offer_many([Message(k, k, start - timedelta(seconds=10 - i)) for i, k in enumerate(keys)])
    with engine.connect() as other:
        # hold the two earliest rows the way a producer updating them would (on MySQL the
        # plain locking read of the keys, at REPEATABLE READ on a table of five rows, went
        # through the due index and locked every row)
        held = queue.dao.existing_rows(other, queue.pkind, keys[:2])
        assert sorted(r.pkey for r in held) == keys[:2]
        assert [e.key for e in queue.poll_many(2)] == ["k2", "k3"]
        other.rollback()
    assert [e.key for e in queue.poll_many(5)] == ["k0", "k1", "k4"]


@pytest.fixture
def fresh_table(engine):
    """A new queue table of its own (no statistics yet, nothing of other tests), with its
    history table, where rows can be locked one by one."""
    if not DelayedQueue(engine, "probe").dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    name = unique_name("sqd_small")
    create_schema(engine, table_name=name, history=True)
    yield name
    drop_schema(engine, table_name=name)


def test_a_claim_locks_only_what_it_takes_in_a_new_small_table(fresh_table, engine):
    # A locking read locks every row it examines: a plan that reads all due messages and
    # sorts them (what MariaDB chose for a table without statistics) would lock all of them,
    # and the second of two concurrent claims would find nothing while 30 messages wait.
    queue = DelayedQueue(engine, "small", table_name=fresh_table)
    queue.offer_many([Message(f"m{i}", i) for i in range(40)])
    with engine.connect() as conn, conn.begin():
        first = queue.poll_many(10, connection=conn)  # its transaction stays open
        second = queue.poll_many(10)
        assert len(first) == len(second) == 10
        assert not {e.key for e in first} & {e.key for e in second}


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_an_ack_waits_for_no_other_consumer_in_a_new_small_table(fresh_table, engine, history):
    # An ack deletes its messages by id. On a table this small MariaDB planned that DELETE as
    # a read of the whole table (cheaper, by its costs, than 25 lookups), and a DELETE waits
    # for the lock of every row it reads: the ack waited for every open claim (under load,
    # for seconds: acks of 25 caught reading 61 to 144 rows). A queue keeping history acks
    # with another statement, which says what it deleted.
    queue = DelayedQueue(engine, "small", table_name=fresh_table, history=history)
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


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_an_ack_of_nearly_every_message_of_a_small_table_waits_for_no_other_consumer(
        fresh_table, engine, history):
    # An ack of 39 of a table's 40 messages, one held by another consumer's open claim, in
    # the caller's transaction at the database's default level. MariaDB planned the DELETE
    # by id as a read of the whole table once the ids listed reached the rows it thought the
    # table held, and at REPEATABLE READ waited for the other consumer's row, outside the
    # ack's own list: two such acks deadlocked. (The other claim takes exactly what is due:
    # one that asked for more would read on past it and, at REPEATABLE READ, lock the next
    # entry of its index, one of the ack's rows.) A queue keeping history acks with
    # statements that say what they deleted.
    queue = DelayedQueue(engine, "small", table_name=fresh_table, history=history)
    queue.offer_many([Message(f"m{i}", i) for i in range(40)])

    def ack() -> int:
        with engine.connect() as conn:
            acked = queue.ack_many(mine, connection=conn)
            conn.commit()
            return acked

    pool = ThreadPoolExecutor(1)
    with engine.connect() as conn, conn.begin():
        # the first message, its lock kept while the transaction is open: a read of the
        # table in its primary key's order meets it first
        assert [e.key for e in queue.poll_many(1, connection=conn)] == ["m0"]
        mine = queue.poll_many(40)
        assert len(mine) == 39
        acking = pool.submit(ack)
        try:
            assert acking.result(timeout=30) == 39
        finally:
            conn.rollback()
            pool.shutdown()
    assert queue.stats().due == 1


def test_an_ack_reaches_its_messages_by_primary_key_even_listing_every_row(fresh_table,
                                                                           engine):
    # What EXPLAIN says of the ack's DELETE, as sent (on MariaDB after the SET STATEMENT
    # that keeps it from waiting for a lock), where its ids are every row of the table: the
    # primary key's range, never a read of the table (type ALL)
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("the plan of a DELETE by id is in question on InnoDB alone")
    queue = DelayedQueue(engine, "small", table_name=fresh_table)
    queue.offer_many([Message(f"m{i}", i) for i in range(4)])
    held = queue.poll_many(4)
    with engine.connect() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE {fresh_table}").all()
    plans = []

    def explain(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("SET STATEMENT "):
            statement = statement.partition(" FOR ")[2]
        if statement.startswith("DELETE"):
            cursor.execute(f"EXPLAIN FORMAT=TRADITIONAL {statement}", parameters)
            plans.extend(dict(zip([d[0] for d in cursor.description], row, strict=True))
                         for row in cursor.fetchall())

    sa.event.listen(engine, "before_cursor_execute", explain)
    try:
        assert queue.ack_many(held) == 4
    finally:
        sa.event.remove(engine, "before_cursor_execute", explain)
    assert [(p["type"], p["key"]) for p in plans] == [("range", "PRIMARY")]
    assert queue.stats().due == 0


class _PauseAfterRead:
    """A Connection that, once the claim's first statement (its locking read) has run, says
    so through ``read`` and waits at ``barrier``: two claims then hold what their reads locked
    at the same time when they mark their messages."""

    def __init__(self, conn: sa.Connection, read: threading.Event,
                 barrier: threading.Barrier) -> None:
        self._conn, self._read, self._barrier, self._paused = conn, read, barrier, False

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def execute(self, statement, *args, **kwargs):
        result = self._conn.execute(statement, *args, **kwargs)
        if not self._paused:
            self._paused = True
            result = result.freeze()
            self._read.set()
            self._barrier.wait()
            return result()
        return result


@pytest.mark.parametrize("level", [None, "READ COMMITTED"], ids=["default level", "rc"])
def test_a_claim_in_an_open_transaction_keeps_no_lock_on_what_it_passed(fresh_table, engine,
                                                                         clock, level):
    # Walking the messages in claim order, a claim passes those of a higher priority that
    # are not yet due. InnoDB kept them locked (at READ COMMITTED too) to the end of the
    # caller's transaction: once due, a concurrent claim skipped them and took a lower
    # priority instead.
    queue = DelayedQueue(engine, "small", table_name=fresh_table, clock=clock)
    now = clock.now()
    queue.offer_many([Message("urgent", 1, now + timedelta(seconds=5), priority=5),
                      Message("first", 2, now - timedelta(seconds=2)),
                      Message("second", 3, now - timedelta(seconds=1))])
    options = {} if level is None else {"isolation_level": level}
    with engine.connect().execution_options(**options) as conn, conn.begin():
        assert [e.key for e in queue.poll_many(1, connection=conn)] == ["first"]
        clock.advance(timedelta(seconds=10))  # "urgent" is due, its transaction still open
        assert [e.key for e in queue.poll_many(1)] == ["urgent"]


def test_two_claims_of_a_near_empty_queue_do_not_deadlock(fresh_table, engine):
    # Each claim finds fewer due messages than it wants, so its read reaches the end of the
    # claim index; at InnoDB's REPEATABLE READ it then locks the gap there, and marking its
    # messages moves their entries into that gap (their due time becomes the lock's
    # expiry): each claim waits for the other's gap lock, deadlock 1213. The claims here run
    # in transactions as sqldelay opens them for a queue without a backlog, but not retried.
    queue = DelayedQueue(engine, "small", table_name=fresh_table)
    queue.offer_many([Message("m0", 0), Message("m1", 1)])
    now = int(time.time() * 1000) + 1000
    barrier = threading.Barrier(2, timeout=30)
    taken: list[str] = []
    errors: list[BaseException] = []

    def claim(read: threading.Event) -> None:
        with engine.connect() as conn:
            try:
                queue.dao.begin_read_committed(conn)
                queue.dao.begin_write(conn)
                rows = queue.dao.claim(_PauseAfterRead(conn, read, barrier), queue.pkind,
                                       now, 5, f"lock-{id(read)}", now + 60_000)
                conn.commit()
                taken.extend(r.key for r in rows)
            except BaseException as exc:
                errors.append(exc)
                conn.rollback()

    with engine.connect() as holder:
        # m0 is held elsewhere while the first claim reads: it takes m1 alone
        assert [e.key for e in queue.poll_many(1, connection=holder)] == ["m0"]
        first_read, second_read = threading.Event(), threading.Event()
        first = threading.Thread(target=claim, args=(first_read,))
        first.start()
        assert first_read.wait(30)
        holder.rollback()  # m0 is due again: the second claim takes it
    second = threading.Thread(target=claim, args=(second_read,))
    second.start()
    for t in (first, second):
        t.join()
    assert errors == []
    assert sorted(taken) == ["m0", "m1"]


def test_claims_run_at_read_committed_unless_the_queue_has_a_backlog(engine, table_name):
    # what the test above needs of sqldelay's own claims on MySQL and MariaDB; a claim after
    # one that took all it asked for stops at its LIMIT, short of the gap, and keeps the
    # default level, where InnoDB's locking reads are cheaper
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip(f"{engine.dialect.name} runs every claim at its default level")
    queue = DelayedQueue(engine, unique_name("q"), table_name=table_name)
    queue.offer_many([Message(f"m{i}", i) for i in range(25)])
    levels = []
    for want in (10, 10, 10, 10):  # 10 (none before), 10 (backlog), 5 (backlog), 0
        with Statements(engine) as claim:
            queue.poll_many(want)
        levels.append(claim.sent[0] == "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    assert levels == [True, False, False, True]
