"""Producers must not deadlock each other: not on new keys that share an index gap, not on
overlapping batches given in different orders.

Deadlocks would be retried when sqldelay owns the transaction, so these tests run the offers
in transactions of their own (``connection=`` is never retried) and count the deadlocks.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, OfferOutcome, create_schema, drop_schema
from sqldelay.dialects import ErrorKind, OfferRow
from sqldelay.dialects.common import RETRIED
from sqldelay.retry_counts import counting

from ..conftest import unique_name
from ..helpers import wait_for


@pytest.fixture
def one_queue(engine):
    """A blocking queue: what is tested is each database's locking, once per database
    (a fixture named ``queue`` would run these on every front end's target). In a table of
    its own, so that what the producers' locks meet is each other's alone; the three-party
    test at the end runs on the session table, consumers and all."""
    name = unique_name("sqd_offers")
    create_schema(engine, table_name=name)
    yield DelayedQueue(engine, unique_name("q"), table_name=name)
    drop_schema(engine, table_name=name)


def _offer(queue: DelayedQueue, engine: sa.Engine, batch: list[Message], callers: bool) -> None:
    """Offer ``batch`` in sqldelay's own transaction, or (``callers``) in one of the caller's
    at READ COMMITTED, as the README advises, where nothing retries it: committed, or rolled
    back and its error raised."""
    if not callers:
        queue.offer_many(batch)
        return
    with engine.connect() as conn:
        queue.dao.begin_read_committed(conn)
        try:
            queue.offer_many(batch, connection=conn)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise


class _PauseAfterFirstStatement:
    """A Connection that waits at ``barrier`` once the offer's first statement has run (the
    locking read of the keys, or the insert where the offer starts with it), so two producers
    hold what that statement locked at the same time."""

    def __init__(self, conn: sa.Connection, barrier: threading.Barrier) -> None:
        self._conn, self._barrier, self._paused = conn, barrier, False

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def execute(self, statement, *args, **kwargs):
        return self._pause(self._conn.execute(statement, *args, **kwargs))

    def exec_driver_sql(self, sql, *args, **kwargs):
        return self._pause(self._conn.exec_driver_sql(sql, *args, **kwargs))

    def _pause(self, result):
        if not self._paused:
            self._paused = True
            self._barrier.wait()
        return result


def test_producers_of_new_keys_in_one_index_gap_do_not_deadlock(one_queue, engine):
    # Ascending new keys after every existing one: under InnoDB's REPEATABLE READ each
    # producer's locking read takes a gap lock on the same gap, and each insert then waits
    # for the other's gap lock (error 1213). Every dialect's offer transaction must avoid it.
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: two offer transactions cannot interleave")
    one_queue.offer("order-1000", {"n": 1000})
    barrier = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []
    outcomes: list[list[OfferOutcome]] = []

    def produce(key: str) -> None:
        with engine.connect() as conn:
            try:
                one_queue.dao.begin_read_committed(conn)
                one_queue.dao.begin_write(conn)
                outcomes.append(one_queue.dao.offer(
                    _PauseAfterFirstStatement(conn, barrier), one_queue.pkind,
                    [OfferRow(key, b"{}", 0, True)], 0))
                conn.commit()
            except BaseException as exc:
                errors.append(exc)
                conn.rollback()

    threads = [threading.Thread(target=produce, args=(k,)) for k in ("order-1001", "order-1002")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and outcomes == [[OfferOutcome.CREATED]] * 2
    assert one_queue.contains("order-1001") and one_queue.contains("order-1002")


@pytest.mark.slow
def test_overlapping_batches_in_opposite_orders_do_not_deadlock(one_queue, engine):
    # Two producers offer the same 400 keys (half already queued, so updated; half new) in
    # opposite orders, each in its own transaction, twenty times. Locking in input order
    # would have them meet in the middle, each holding what the other needs next.
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: two offer transactions cannot interleave")
    rounds, size = 20, 400
    deadlocks: list[BaseException] = []
    other: list[BaseException] = []

    def produce(keys: list[str], n: int, start: threading.Barrier) -> None:
        batch = [Message(k, {"round": n, "by": keys[0]}) for k in keys]
        with engine.connect() as conn:
            try:
                one_queue.dao.begin_read_committed(conn)
                start.wait()
                one_queue.offer_many(batch, connection=conn)
                conn.commit()
            except sa.exc.DBAPIError as exc:
                conn.rollback()
                transient = one_queue.dao.classify(exc) is ErrorKind.TRANSIENT
                (deadlocks if transient else other).append(exc)

    for n in range(rounds):
        keys = [f"r{n}-{i:04}" for i in range(size)]
        one_queue.offer_many([Message(k, {"round": -1}) for k in keys[::2]])  # half exist already
        start = threading.Barrier(2, timeout=30)
        threads = [threading.Thread(target=produce, args=(order, n, start))
                   for order in (keys, keys[::-1])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert other == []
    assert deadlocks == []
    assert one_queue.stats().due == rounds * size


def test_the_offers_locking_read_locks_the_rows_in_id_order(one_queue, engine):
    # A locking read locks rows in the order it reads them. Left to itself, MariaDB read a
    # queue's existing keys through whichever path the table's statistics made cheapest:
    # the whole table (a small one), the queue's part of another index, the unique index;
    # producers planned differently locked the same rows in different orders and
    # deadlocked, and through the unique index an offer deadlocked with the acks, which lock
    # the rows through the primary key. The offer reads the ids first, unlocked, then locks
    # the rows by primary key: one range of it, in id order. This table, only the queue's
    # own 200 messages, is one read whole.
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("the optimizer choosing the offer's read path is InnoDB's (MySQL, MariaDB)")
    keys = [f"key-{i:04}" for i in range(200)]
    one_queue.offer_many([Message(k, 0) for k in keys])
    dao = one_queue.dao
    with engine.connect() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE {dao.table.name}").all()
        ids = conn.execute(dao._existing_ids, {"b_kind": one_queue.pkind, "keys": keys})
        read = dao._existing_by_id.params(b_kind=one_queue.pkind, ids=sorted(ids.scalars()))
        sql = read.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        plan = conn.exec_driver_sql(f"EXPLAIN FORMAT=TRADITIONAL {sql}").mappings().one()
    assert (plan["type"], plan["key"]) == ("range", "PRIMARY")
    assert "filesort" not in (plan["Extra"] or "")  # read in the order it locks



def test_an_acks_locking_read_locks_the_rows_in_id_order(one_queue, engine):
    # An ack of several claim batches locks its rows first (``lock_acked``), in the order
    # offers lock them: one range of the primary key, read in order, however many of the
    # table's rows it names (39 of 40 here; a read of the whole table would lock them all).
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("the optimizer choosing the ack's read path is InnoDB's (MySQL, MariaDB)")
    one_queue.offer_many([Message(f"key-{i:02}", 0) for i in range(40)])
    dao = one_queue.dao
    with engine.connect() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE {dao.table.name}").all()
        ids = sorted(conn.execute(sa.select(dao.table.c.id)).scalars())[1:]
        read = dao._acked_by_id.params(ids=ids)
        sql = read.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        plan = conn.exec_driver_sql(f"EXPLAIN FORMAT=TRADITIONAL {sql}").mappings().one()
    assert (plan["type"], plan["key"]) == ("range", "PRIMARY")
    assert "filesort" not in (plan["Extra"] or "")


def test_an_ack_that_gives_way_meets_no_lock_but_on_its_own_messages(one_queue, engine):
    # An ack in sqldelay's own transaction fails at once where it would wait for a lock,
    # and runs again. It must meet only the locks of the messages it acks: one that met
    # those of others (a read of the whole table or index, as the optimizer may plan on a
    # small one) would be run again for as long as any other message was held.
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("InnoDB's acks alone give way")
    one_queue.offer_many([Message(f"key-{i:02}", 0) for i in range(40)])
    claimed = one_queue.poll_many(40)
    kept = claimed[20]
    acked = [env for env in claimed if env is not kept]
    t = one_queue.dao.table
    with engine.connect() as holder:
        holder.execute(sa.select(t.c.id).where(t.c.id == kept.row_id).with_for_update()).one()
        with counting() as retries:
            assert one_queue.ack_many(acked) == len(acked)
        holder.rollback()
    assert retries.retries == 0
    left = [one_queue.contains(env.key) for env in (kept, acked[0], acked[-1])]
    assert left == [True, False, False]


def test_an_ack_that_gave_way_waits_for_its_own_messages_alone(one_queue, engine):
    # An ack of grouped messages runs at READ COMMITTED. Its DELETE, which fails at once
    # where it would wait, passes over the row of a message an offer has replaced (its lock
    # is no longer the ack's), deletes the rows after it, and stops at one of its own that
    # another transaction holds: undone, the locks of the rows it deleted kept. A producer
    # locks the replaced message's row meanwhile, then wants a row the ack kept. Waiting
    # for every row of its batch in id order, the ack waited for the replaced one, held by
    # the producer, which waited for the ack: a deadlock (MariaDB 10.11, the offer and ack
    # load test with groups, InnoDB's deadlock log). It waits for its own messages alone.
    if engine.dialect.name != "mariadb":
        pytest.skip("MariaDB's ack gives way with a DELETE that passes over rows; MySQL's "
                    "first locks every row it names with a read that does not wait; "
                    "PostgreSQL's and SQLite's never give way")
    queue, due, t = one_queue, datetime.now(UTC) - timedelta(hours=1), one_queue.dao.table
    queue.offer_many([Message(f"m{g}", 0, due, group=f"g{g}") for g in range(10)])
    claimed = sorted(queue.poll_many(10), key=lambda env: env.row_id)
    replaced, wanted, held = claimed[3], claimed[5], claimed[7]
    assert queue.offer(replaced.key, 1, due, group=replaced.group) is OfferOutcome.UPDATED
    ack = queue.ack_many_call(claimed)
    assert ack is not None
    gave_way, go_on = threading.Event(), threading.Event()

    class Pausing:  # the ack's connection, paused after its first statement, failed or not
        def __init__(self, conn: sa.Connection) -> None:
            self._conn, self._paused = conn, False

        def __getattr__(self, name):
            return getattr(self._conn, name)

        def execute(self, statement, *args, **kwargs):
            try:
                return self._conn.execute(statement, *args, **kwargs)
            finally:
                if not self._paused:
                    self._paused = True
                    gave_way.set()
                    go_on.wait(30)

    def lock(conn: sa.Connection, env) -> list:
        return conn.execute(sa.select(t.c.id).where(t.c.id == env.row_id)
                            .with_for_update()).all()

    def acker(conn: sa.Connection) -> int:
        queue.dao.begin_read_committed(conn)  # as the executor begins an ack freeing groups
        conn.info[RETRIED] = True  # and runs it again: it gives way rather than wait
        try:
            acked = ack.op(Pausing(conn))
        finally:
            del conn.info[RETRIED]  # the pool keeps the connection's info
        conn.commit()
        return acked

    with (engine.connect() as producer, engine.connect() as holder,
          engine.connect() as acking_conn):
        queue.dao.begin_read_committed(producer)
        producing, acking_session = _session(producer), _session(acking_conn)
        lock(holder, held)
        acking, acked = _in_background(acker, acking_conn)
        assert gave_way.wait(30)
        assert lock(producer, replaced)
        wanting, got = _in_background(lock, producer, wanted)
        _until_waiting(engine, lambda: producing, "the producer to wait for the ack",
                       lambda: not wanting.is_alive())
        go_on.set()
        _until_waiting(engine, lambda: acking_session, "the ack to wait",
                       lambda: not acking.is_alive())
        holder.rollback()
        acking.join(60)
        wanting.join(60)
        producer.commit()
    assert acked == [9]
    assert got == [[]]  # acked meanwhile


@pytest.mark.slow
@pytest.mark.parametrize("callers", [True, False], ids=["connection", "own transaction"])
def test_producers_of_the_same_keys_in_shuffled_orders_never_deadlock(one_queue, engine,
                                                                       caplog, callers):
    # Four producers offer the same 200 keys, each call in an order of its own, twenty
    # times each: in the callers' own transactions (``connection=``, never retried: every
    # deadlock reaches the caller), or in sqldelay's, which retries a deadlock (logged at
    # DEBUG): either way none may happen. Half the keys exist from the start, queued in an
    # order of their own (their ids follow neither the keys nor any producer's order).
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: two offer transactions cannot interleave")
    caplog.set_level(logging.DEBUG, logger="sqldelay")
    producers, rounds = 4, 20
    keys = [f"key-{i:04}" for i in range(200)]
    first = keys[::2]
    random.Random(0).shuffle(first)
    for i in range(0, len(first), 10):
        one_queue.offer_many([Message(k, -1) for k in first[i:i + 10]])
    deadlocks: list[BaseException] = []
    other: list[BaseException] = []
    start = threading.Barrier(producers, timeout=60)

    def produce(n: int) -> None:
        shuffle = random.Random(n).shuffle
        for r in range(rounds):
            order = keys[:]
            shuffle(order)
            batch = [Message(k, {"by": n, "round": r}) for k in order]
            try:
                start.wait()
                _offer(one_queue, engine, batch, callers)
            except sa.exc.DBAPIError as exc:
                transient = one_queue.dao.classify(exc) is ErrorKind.TRANSIENT
                (deadlocks if transient else other).append(exc)
            except BaseException as exc:  # the others stop at the barrier, not in 60 s
                other.append(exc)
                start.abort()
                return

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    retried = [r for r in caplog.records if r.getMessage().startswith("retrying after")]
    assert other == []
    assert deadlocks == [] and retried == []
    assert one_queue.stats().due == len(keys)


def test_producers_of_the_same_new_keys_with_opposite_update_flags_do_not_deadlock(
        one_queue, engine):
    # Two producers offer the same new keys, each its own half to be updated and the other
    # half only created, in shuffled orders, in transactions of their own (never retried),
    # forty times each. An offer sending its chunk as one statement per flag locked its
    # update=False keys first: each producer then waited for the keys the other had
    # inserted by its first statement (PostgreSQL: 18 to 38 of the 80 offers failed, 40P01).
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: two offer transactions cannot interleave")
    rounds, size = 40, 50
    deadlocks: list[BaseException] = []
    other: list[BaseException] = []
    outcomes: list[list[OfferOutcome]] = []

    def produce(n: int, start: threading.Barrier, keys: list[str]) -> None:
        order = keys[:]
        random.Random(n).shuffle(order)
        # this producer updates the keys of its own parity, the other those of the other
        batch = [Message(k, {"by": n}, update=i % 2 == n % 2) for i, k in
                 sorted(enumerate(keys), key=lambda ik: order.index(ik[1]))]
        with engine.connect() as conn:
            try:
                one_queue.dao.begin_read_committed(conn)  # the README's advice for MySQL
                start.wait()
                outcomes.append(one_queue.offer_many(batch, connection=conn))
                conn.commit()
            except sa.exc.DBAPIError as exc:
                conn.rollback()
                transient = one_queue.dao.classify(exc) is ErrorKind.TRANSIENT
                (deadlocks if transient else other).append(exc)

    for r in range(rounds):
        keys = [f"r{r}-{i:03}" for i in range(size)]
        start = threading.Barrier(2, timeout=30)
        threads = [threading.Thread(target=produce, args=(2 * r + n, start, keys))
                   for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert other == []
    assert deadlocks == []
    assert one_queue.stats().due == rounds * size
    # each key created once, by one producer or the other
    assert sum(got.count(OfferOutcome.CREATED) for got in outcomes) == rounds * size


@pytest.mark.slow
@pytest.mark.parametrize("callers", [True, False], ids=["connection", "own transaction"])
def test_overlapping_batches_and_consumers_on_one_table_never_deadlock(engine, table_name,
                                                                       caplog, callers):
    # The three-party case, on the session table the other tests use: two producers offer
    # overlapping batches in opposite orders (in their own READ COMMITTED transactions, as
    # the README advises, or in sqldelay's, which would retry a deadlock and log it) while
    # two consumers claim and ack. No deadlock may reach a caller. It once failed twice in
    # full runs on MariaDB, when the offers' locking read walked whichever index the
    # optimizer chose (a743197) and acks could scan the table (5085b53), and in 2 runs of 40
    # alone when an ack waited for a key that an offer's failed insert held (see
    # test_an_ack_gives_way_to_an_offer_whose_insert_met_its_key). On PostgreSQL
    # nothing is retried either. On MariaDB sqldelay still retries some claims and offers
    # (0 to 3 a run here): InnoDB's deadlock log shows the claim's SKIP LOCKED read "waiting"
    # ("lock_mode X locks rec but not gap waiting" on PRIMARY) for a row an offer's locking
    # read holds while that read waits for a row the claim holds. The claim would have
    # skipped the row; MariaDB 10.11 reports a deadlock all the same (the README's
    # Transactions paragraph).
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: two transactions cannot interleave")
    one_queue = DelayedQueue(engine, unique_name("q"), table_name=table_name)
    caplog.set_level(logging.DEBUG, logger="sqldelay")
    rounds, size = 12, 300
    problems: list[BaseException] = []
    produced = threading.Event()
    handled: list[str] = []

    def produce(n: int, start: threading.Barrier) -> None:
        for r in range(rounds):
            keys = [f"r{r}-{i:04}" for i in range(size)]
            order = keys if n == 0 else keys[::-1]
            batch = [Message(k, {"by": n}) for k in order]
            try:
                start.wait()
                _offer(one_queue, engine, batch, callers)
            except BaseException as exc:
                problems.append(exc)
                start.abort()
                return

    def consume() -> None:
        consumer = DelayedQueue(engine, one_queue.name, table_name=one_queue.dao.table.name)
        try:
            while True:
                batch = consumer.poll_many(50)
                if not batch:
                    if produced.is_set() and consumer.stats().due == 0:
                        return
                    continue
                handled.extend(e.key for e in batch)
                consumer.ack_many(batch)
        except BaseException as exc:
            problems.append(exc)

    start = threading.Barrier(2, timeout=60)
    producers = [threading.Thread(target=produce, args=(n, start)) for n in range(2)]
    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join()
    produced.set()
    for t in consumers:
        t.join(120)
    retried = [r for r in caplog.records if r.getMessage().startswith("retrying after")]
    assert problems == []
    if engine.dialect.name == "postgresql":
        assert [r.getMessage()[:300] for r in retried] == []
    assert set(handled) == {f"r{r}-{i:04}" for r in range(rounds) for i in range(size)}


def _waits_for_a_lock(engine: sa.Engine, session: int) -> bool:
    """Whether the database session ``session`` is waiting for a row lock now."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            sql = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        else:
            sql = ("SELECT trx_state = 'LOCK WAIT' FROM information_schema.INNODB_TRX "
                   "WHERE trx_mysql_thread_id = %s")
        return bool(conn.exec_driver_sql(sql, (session,)).scalar())


def _until_waiting(engine: sa.Engine, session: Callable[[], int | None], what: str,
                   done: Callable[[], object] = lambda: False) -> None:
    """Return once the session ``session()`` names (None: none yet) waits for a row lock,
    or ``done()`` is true. InnoDB fills INNODB_TRX from a cache it refreshes only when the
    table has not been read for 0.1 s: polled more often, it never showed the wait."""
    wait_for(lambda: done() or ((sid := session()) is not None
                                and _waits_for_a_lock(engine, sid)),
             30, what, interval=0.01 if engine.dialect.name == "postgresql" else 0.15)


def test_an_ack_of_two_claim_batches_and_an_offer_of_their_keys_do_not_deadlock(
        one_queue, engine):
    # A worker acks together what its handlers finished, often of two claims: one deletion
    # per claim batch. Here the first batch holds the row of higher id and key (b), the
    # second the lower (a). The ack pauses after its first statement while an offer of a and
    # b, which locks the rows in id order (MariaDB) or key order (PostgreSQL), the same
    # here, waits for it; then the ack goes on. Deleting batch by batch, the ack held b and
    # wanted a, the offer held a and wanted b: a deadlock, which in transactions of their
    # own sqldelay retried (MariaDB 10.11: 205 in 10 s of the torture below). The ack locks
    # both rows first, in the offers' order, and the offer waits.
    name = engine.dialect.name
    if name == "sqlite":
        pytest.skip("one writer at a time: two transactions cannot interleave")
    one_queue.offer_many([Message("a", 0), Message("b", 0, priority=1)])
    first, second = one_queue.poll(), one_queue.poll()
    assert (first.key, second.key) == ("b", "a") and first.lock != second.lock
    ack = one_queue.ack_many_call([first, second])
    assert ack is not None
    paused, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    outcomes: list[list[OfferOutcome]] = []
    acked: list[int] = []

    class Pausing(_PauseAfterFirstStatement):
        def _pause(self, result):
            if not self._paused:
                self._paused = True
                paused.set()
                go_on.wait(30)
            return result

    def acker() -> None:
        with engine.connect() as conn:
            try:
                acked.append(ack.op(Pausing(conn, threading.Barrier(1))))
                conn.commit()
            except BaseException as exc:
                errors.append(exc)

    def producer(conn: sa.Connection) -> None:
        try:
            outcomes.append(one_queue.offer_many([Message("a", 1), Message("b", 1)],
                                                 connection=conn))
            conn.commit()
        except BaseException as exc:
            errors.append(exc)

    with engine.connect() as conn:
        one_queue.dao.begin_read_committed(conn)  # the README's advice for MySQL
        session = _session(conn)
        threads = [threading.Thread(target=acker), threading.Thread(target=producer,
                                                                    args=(conn,))]
        threads[0].start()
        assert paused.wait(30)
        threads[1].start()
        _until_waiting(engine, lambda: session, "the offer to wait or end",
                       lambda: not threads[1].is_alive())
        go_on.set()
        for t in threads:
            t.join(60)
    if errors:
        raise errors[0]
    # the ack deleted both messages; the offer, after it, wrote them anew
    assert acked == [2] and outcomes == [[OfferOutcome.CREATED] * 2]
    assert one_queue.contains("a") and one_queue.contains("b")


def test_an_ack_takes_its_rows_in_the_order_offers_take_them(one_queue, engine):
    # One claim batch of b (offered first: the lower id) and a. A producer, in a
    # transaction of its own, replaces a, then b: the key order, in which an offer of both
    # takes them. Between the two, a consumer acks the batch. Deleting in its plan's order
    # (here by id: b, then a), the ack held b and waited for a, which the producer held,
    # and the producer's offer of b then waited for the ack: a deadlock. Taking its rows in
    # key order, the ack waits for a holding nothing, and goes on after the producer's
    # commit, finding both messages replaced (its lock no longer holds: nothing deleted).
    name = engine.dialect.name
    if name == "sqlite":
        pytest.skip("one writer at a time: two transactions cannot interleave")
    if name != "postgresql":
        pytest.skip("MariaDB's lock order is the ids' (offers lock the rows they update by "
                    "id), which a producer writing a, then b does not follow here")
    one_queue.offer("b", 0)
    one_queue.offer("a", 0)
    batch = one_queue.poll_many(2)
    assert sorted(e.key for e in batch) == ["a", "b"] and len({e.lock for e in batch}) == 1
    assert batch[0].key == "b" and batch[0].row_id < batch[1].row_id
    errors: list[BaseException] = []
    acked: list[int] = []
    sessions: list[int] = []

    def consumer() -> None:
        with engine.connect() as conn:
            try:
                sessions.append(_session(conn))
                acked.append(one_queue.ack_many(batch, connection=conn))
                conn.commit()
            except BaseException as exc:
                errors.append(exc)

    with engine.connect() as conn:
        assert one_queue.offer_many([Message("a", 1)], connection=conn) == [
            OfferOutcome.UPDATED]
        acking = threading.Thread(target=consumer)
        acking.start()
        _until_waiting(engine, lambda: sessions[0] if sessions else None,
                       "the ack to wait for a", lambda: errors)
        assert one_queue.offer_many([Message("b", 1)], connection=conn) == [
            OfferOutcome.UPDATED]
        conn.commit()
        acking.join(60)
    if errors:
        raise errors[0]
    assert acked == [0]
    assert sorted((e.key, e.payload) for e in one_queue.poll_many(2)) == [("a", 1), ("b", 1)]


def _session(conn: sa.Connection) -> int:
    """The database session id of ``conn``."""
    return conn.exec_driver_sql("SELECT pg_backend_pid()" if conn.dialect.name == "postgresql"
                                else "SELECT CONNECTION_ID()").scalar_one()


def test_a_key_inserted_while_an_offer_waited_for_its_rows_is_locked_not_met_by_its_insert(
        one_queue, engine):
    # An offer of a (absent) and c (there) locks c, waiting for whoever holds it, and in
    # that time another producer inserts a. InnoDB: inserting a then failed on it, and the
    # failed insert kept a shared lock on a's index entry and the gap before it to the end
    # of the transaction. A second producer (its caller's transaction) then took a to update
    # it and inserted 0, in that gap, while the first, going on, waited to lock a: a
    # deadlock. Reading again the keys it did not find, once it holds the rows it found,
    # the offer locks a as it locked c, holding no gap, and waits for the second producer.
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("InnoDB's locks: on PostgreSQL an offer of a key inserted meanwhile "
                    "updates it in the same statement; SQLite has one writer at a time")
    one_queue.offer("c", 0)  # so the offer's plain insert fails, and it takes the usual way
    main = threading.current_thread()
    locking_reads: list[str] = []
    inserted_meanwhile, steering = [], []
    second: list[list[OfferOutcome] | BaseException] = []
    sessions: list[int] = []

    def second_producer() -> None:
        with engine.connect() as conn:
            one_queue.dao.begin_read_committed(conn)  # the README's advice for MySQL
            sessions.append(_session(conn))
            try:
                second.append(one_queue.offer_many([Message("0", 2), Message("a", 2)],
                                                   connection=conn))
                conn.commit()
            except BaseException as exc:
                second.append(exc)

    def steer(conn, cursor, statement, parameters, context, executemany):
        if threading.current_thread() is not main or steering:
            return
        steering.append(True)
        try:
            if len(locking_reads) == 1 and not inserted_meanwhile:
                # the statement after the locking read of c: a is inserted meanwhile
                inserted_meanwhile.append(statement)
                with engine.begin() as other:
                    other.execute(sa.insert(one_queue.dao.table), one_queue.dao.row_params(
                        one_queue.pkind, [OfferRow("a", b"1", 0, True)], 0))
            if "FOR UPDATE" in statement:
                locking_reads.append(statement)
                if len(locking_reads) == 2:  # the offer is about to lock a
                    producing.start()
                    _until_waiting(engine, lambda: sessions[0] if sessions else None,
                                   "the second producer to end or wait", lambda: second)
        finally:
            steering.clear()

    producing = threading.Thread(target=second_producer)
    sa.event.listen(engine, "before_cursor_execute", steer)
    try:
        with counting() as retries:
            first = one_queue.offer_many([Message("a", 1), Message("c", 1)])
    finally:
        sa.event.remove(engine, "before_cursor_execute", steer)
        if producing.is_alive():
            producing.join(60)
    assert inserted_meanwhile and len(locking_reads) >= 2
    assert second == [[OfferOutcome.CREATED, OfferOutcome.UPDATED]]
    assert first == [OfferOutcome.UPDATED, OfferOutcome.UPDATED]
    assert retries.deadlocks == 0
    assert one_queue.get("a").payload == 1 and one_queue.get("0").payload == 2


@pytest.mark.parametrize("update", [True, False], ids=["update", "if absent"])
def test_an_offer_in_a_transaction_at_the_default_level_takes_a_key_inserted_meanwhile(
        one_queue, engine, update):
    # The caller's transaction runs at the database's default level: InnoDB's REPEATABLE
    # READ, whose plain reads see the snapshot of the transaction's first read. The offer
    # found k absent there and inserted it, waiting for another transaction's insert of k;
    # that one committed, the insert failed on k, and the offer's next read of its keys,
    # from the same snapshot, found k absent again: it inserted k again, and again, for
    # ever. The offer reads what is committed now once an insert met a key.
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: the second insert cannot begin before the first "
                    "commits")
    with engine.connect() as first:
        assert one_queue.offer("k", 1, connection=first) is OfferOutcome.CREATED
        with engine.connect() as second:
            session = _session(second)
            offering, out = _in_background(
                lambda: (one_queue.offer("k", 2, update=update, connection=second),
                         second.commit())[0])
            try:
                _until_waiting(engine, lambda: session, "the second offer to wait for k",
                               lambda: out)
                first.commit()
                offering.join(30)
            finally:
                if offering.is_alive():  # looping: end it, and its connection with it
                    with engine.connect() as killer:
                        killer.exec_driver_sql(
                            f"SELECT pg_terminate_backend({session})"
                            if engine.dialect.name == "postgresql" else f"KILL {session}")
                    offering.join(30)
    assert out == [OfferOutcome.UPDATED if update else OfferOutcome.IGNORED]
    assert one_queue.get("k").payload == (2 if update else 1)


@pytest.mark.parametrize("level", ["read committed", "default"])
def test_producers_updating_a_key_inserted_while_they_waited_do_not_deadlock(
        one_queue, engine, level):
    # Two producers, each in its caller's transaction, offer k (update=True) while a third
    # inserts it: both insert k too and wait for the third. It commits; on InnoDB both
    # inserts fail, each keeping a shared lock on k's entry of the unique index, and one of
    # them locks the row. Its update, an INSERT … ON DUPLICATE KEY UPDATE, then wanted that
    # entry exclusively, held shared by the other producer, which waited for the row: a
    # deadlock, every time (MariaDB 10.11, at either level). The update goes through the
    # primary key and leaves the key's entry alone.
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: the inserts cannot wait for each other")
    def offer(conn: sa.Connection, payload: int) -> OfferOutcome:
        if level == "read committed":
            one_queue.dao.begin_read_committed(conn)  # the README's advice for MySQL
        outcome = one_queue.offer("k", payload, connection=conn)
        conn.commit()
        return outcome

    with engine.connect() as first:
        assert one_queue.offer("k", 1, connection=first) is OfferOutcome.CREATED
        outs = _waiting_for(engine, first, [partial(offer, payload=p) for p in (2, 3)])
    assert outs == [[OfferOutcome.UPDATED]] * 2
    assert one_queue.get("k").payload in (2, 3)


def _waiting_for(engine: sa.Engine, first: sa.Connection,
                 calls: list[Callable[[sa.Connection], object]]) -> list[list]:
    """Run each of ``calls`` on a connection of its own, in the background; once each waits
    for a lock (or has ended), commit ``first``: what each call returned or raised."""
    others = []
    for call in calls:
        conn = engine.connect()
        others.append((conn, _session(conn), *_in_background(call, conn)))
    try:
        for _, session, _, out in others:
            _until_waiting(engine, lambda s=session: s, "the others to wait for the first",
                           lambda o=out: o)
        first.commit()
        for _, _, running, _ in others:
            running.join(60)
    finally:
        for conn, *_ in others:
            conn.close()
    return [out for *_, out in others]


def test_an_ack_gives_way_to_an_offer_whose_insert_met_its_key(one_queue, engine):
    # A producer, in its caller's transaction, finds k absent and inserts it; another
    # producer inserted k meanwhile, and a consumer claimed it. The failed insert keeps a
    # shared lock on k's entry of the unique index to the end of the transaction (InnoDB),
    # and the offer, going round again, locks k's row to compare it. An ack of k that took
    # the row first waited for that entry to delete it: a deadlock, and InnoDB rolled back
    # the offer, which had written nothing, where nothing could run it again. The ack, in a
    # transaction of sqldelay's own, gives way instead of waiting for the entry (rolled
    # back, run again after a backoff), and after the offer's commit the offer has replaced
    # the message: the ack finds its lock void.
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("InnoDB's locks: on PostgreSQL an offer of a key inserted meanwhile "
                    "updates it in the same statement; SQLite has one writer at a time")
    claimed: list = []
    acked: list[bool | BaseException] = []

    def ack() -> None:
        try:
            acked.append(one_queue.ack(claimed[0]))
        except BaseException as exc:
            acked.append(exc)

    acking = threading.Thread(target=ack)

    def lock_waits() -> int:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                                        "WHERE trx_state = 'LOCK WAIT'").scalar_one()

    class Steered(_PauseAfterFirstStatement):
        def _run(self, run, *args, **kwargs):
            try:
                result = run(*args, **kwargs)
            except sa.exc.IntegrityError:  # k met: the ack comes now, before the offer's lock
                acking.start()
                wait_for(lambda: acked or retries.retries or lock_waits(), 30,
                         "the ack to wait, fail or end")
                raise
            if not self._paused:  # k read absent: inserted and claimed meanwhile
                self._paused = True
                with engine.begin() as other:
                    other.execute(sa.insert(one_queue.dao.table), one_queue.dao.row_params(
                        one_queue.pkind, [OfferRow("k", b"1", 0, True)], 0))
                claimed.append(one_queue.poll())
            return result

        def execute(self, statement, *args, **kwargs):
            return self._run(self._conn.execute, statement, *args, **kwargs)

        def exec_driver_sql(self, sql, *args, **kwargs):
            return self._run(self._conn.exec_driver_sql, sql, *args, **kwargs)

    with counting() as retries, engine.connect() as conn:
        one_queue.dao.begin_read_committed(conn)  # the README's advice for MySQL
        try:
            outcomes = one_queue.dao.offer(Steered(conn, threading.Barrier(1)), one_queue.pkind,
                                           [OfferRow("k", b"2", 0, True)], 0)
            conn.commit()
        finally:
            if acking.is_alive():
                acking.join(60)
    assert claimed[0].key == "k"
    assert outcomes == [OfferOutcome.UPDATED]
    assert acked == [False]  # replaced under it: its lock void, nothing deleted
    assert retries.deadlocks == 0
    assert one_queue.get("k").payload == 2


def test_an_ack_in_the_callers_transaction_waits_for_locks_as_ever(one_queue, engine):
    # Only sqldelay's own transactions, which it runs again, give way; the caller's
    # transaction, on a connection of the same pool just used by them, waits as before
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("InnoDB's acks alone give way")
    one_queue.offer_many([Message("a", 1), Message("b", 2)])
    first, second = one_queue.poll(), one_queue.poll()
    sent: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    def unwaiting(statements: list[str]) -> list[str]:
        # MariaDB: the DELETE with no lock wait; MySQL: the keys locked by a NOWAIT read first
        return [s for s in statements
                if s.startswith("SET STATEMENT innodb_lock_wait_timeout=0 FOR DELETE ")
                or s.rstrip().endswith(" NOWAIT")]

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        assert one_queue.ack(first)
        own, sent[:] = sent[:], []
        with engine.connect() as conn:
            assert one_queue.ack(second, connection=conn)
            conn.commit()
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert len(unwaiting(own)) == 1
    assert unwaiting(sent) == []
    assert any("DELETE " in s for s in sent)
    assert one_queue.stats().due == 0


class _StoppedAt:
    """gdb attached to the PostgreSQL server process ``pid`` on this machine, which it stops
    at its next call of ``function`` (one the server exports) until ``release``."""

    def __init__(self, pid: int, function: str) -> None:
        self._gdb = subprocess.Popen(
            ["gdb", "-q", "-nx", "-p", str(pid)], stdin=subprocess.PIPE, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        # PostgreSQL signals its processes with SIGUSR1 (cache invalidations to catch up on,
        # another session's DROP DATABASE), which gdb stops the process at unless told: the
        # process then waited for ever, short of its breakpoint (one run in eight, with other
        # tests beside it)
        self._send("set pagination off", "set confirm off",
                   "handle SIGUSR1 SIGUSR2 nostop noprint pass", f"break {function}",
                   "echo armed\\n", "continue")
        try:
            wait_for(lambda: any(line.endswith("armed\n") for line in self.lines), 60,
                     f"gdb to attach to process {pid}", meanwhile=self._alive)
        except BaseException:
            self.release()  # a process gdb holds stopped would hold its locks for ever
            raise

    def _read(self) -> None:
        assert self._gdb.stdout is not None
        self.lines.extend(self._gdb.stdout)

    def _send(self, *commands: str) -> None:
        assert self._gdb.stdin is not None
        self._gdb.stdin.write("".join(f"{c}\n" for c in commands))
        self._gdb.stdin.flush()

    def _alive(self) -> None:
        assert self._gdb.poll() is None, "gdb ended:\n" + "".join(self.lines)

    def wait_stopped(self) -> None:
        try:
            wait_for(lambda: any("Breakpoint 1," in line for line in self.lines), 30,
                     "the server process to reach the breakpoint", meanwhile=self._alive)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; gdb said:\n{''.join(self.lines)}") from None

    def release(self) -> None:
        """Detach gdb, the process running on without the breakpoint. gdb reads no command
        while the process runs, so it is interrupted first (SIGINT, which it keeps from the
        process); killed only where it does not end then, which would leave the
        breakpoint's trap in a running process."""
        if self._gdb.poll() is None:
            self._gdb.send_signal(signal.SIGINT)
            self._send("delete", "detach", "quit")
        try:
            self._gdb.wait(30)
        except subprocess.TimeoutExpired:
            self._gdb.kill()
            self._gdb.wait(30)
            raise


@contextlib.contextmanager
def _on_one_connection(engine: sa.Engine, queue: DelayedQueue,
                       *setup: str) -> Iterator[tuple[DelayedQueue, int]]:
    """``queue`` on an engine of one connection, and that connection's database session,
    which every call of the queue then uses; ``setup``'s statements run and committed as it
    connects; the engine closed at the end."""
    one = sa.create_engine(engine.url, pool_size=1, max_overflow=0)

    def set_up(dbapi_connection, record) -> None:
        cursor = dbapi_connection.cursor()
        for statement in setup:
            cursor.execute(statement)
        cursor.close()
        dbapi_connection.commit()  # the pool's rollback would undo it

    if setup:
        sa.event.listen(one, "connect", set_up)
    try:
        with one.connect() as conn:
            session = _session(conn)
        yield DelayedQueue(one, queue.name, table_name=queue.dao.table.name), session
    finally:
        one.dispose()


def _steerable(engine: sa.Engine, pid: int) -> None:
    """Skip, saying why, where the PostgreSQL server process ``pid`` is not on this machine;
    fail where gdb, which steers it, is missing."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        name = ""
    if name not in ("postgres", "postmaster"):
        pytest.skip(f"the PostgreSQL server of {engine.url.host} is not on this machine "
                    "(gdb stops one of its processes)")
    if shutil.which("gdb") is None:
        pytest.fail("gdb is needed to steer the server (apt-get install gdb)", pytrace=False)


@contextlib.contextmanager
def _claimer_stopped_at(engine: sa.Engine, queue: DelayedQueue, function: str,
                        first: Callable[[DelayedQueue], object] = lambda claimer: None,
                        ) -> Iterator[tuple[DelayedQueue, _StoppedAt]]:
    """``queue`` on an engine of one connection, having run ``first``, and gdb armed to stop
    its server process at ``function``, whose deadlock check comes 4 s after a wait begins;
    released, and the engine closed, at the end. (``first`` runs before gdb is armed: a call
    of the test's own thread stopped there would wait for ever.)"""
    with _on_one_connection(engine, queue, "SET deadlock_timeout = '4s'") as (claimer, pid):
        _steerable(engine, pid)
        first(claimer)
        stopped = _StoppedAt(pid, function)
        try:
            yield claimer, stopped
        finally:
            stopped.release()


def _in_background(call, *args) -> tuple[threading.Thread, list]:
    """``call(*args)`` started in a thread, and the list that gets what it returned or
    raised."""
    out: list = []

    def run() -> None:
        try:
            out.append(call(*args))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _offer_in(o: sa.Connection, queue: DelayedQueue, batch: list[Message]) -> list:
    outcomes = queue.offer_many(batch, connection=o)
    o.commit()
    return outcomes


@pytest.mark.parametrize("grouped", [False, True], ids=["ungrouped", "groups"])
def test_a_claim_gives_way_to_an_offer_updating_what_it_meets(one_queue, engine, grouped):
    # A claim, FOR UPDATE SKIP LOCKED, has locked b and meets a, which producer P is updating.
    # P commits just then, as the claim checks whether P still runs: PostgreSQL then locks
    # a's newer versions too, and waits for the transaction updating the newest, producer O,
    # where SKIP LOCKED would have skipped a. O, in its caller's transaction, updated a and
    # waits for b: a deadlock. PostgreSQL rolls back the one whose deadlock check runs first,
    # a wait's deadlock_timeout after it began: O, which began to wait first. The window is
    # microseconds wide; gdb holds the claim's server process in it. The claim, in a
    # transaction of sqldelay's own, gives way after half its deadlock_timeout instead and
    # is run again. Here the claim's deadlock check comes 4 s after its wait begins, O's 3 s
    # after its own: without that, O's first; with it, the claim gives up at 2 s. The same
    # for a grouped claim, b and a the first messages of their groups (g1's turn first),
    # which passes over the heads others hold, and meets a so too. The claimer has claimed
    # once before (w), and knows which claim the queue takes: a first claim tries the plain
    # one, whose bound would hold for the grouped one after it.
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's SKIP LOCKED; the other databases' claims have tests of "
                    "their own locks")
    queue, due = one_queue, datetime.now(UTC) - timedelta(hours=1)
    ga, gb, gw = ("g2", "g1", "g0") if grouped else (None, None, None)
    queue.offer_many([Message("a", 0, due + timedelta(seconds=1), group=ga),
                      Message("b", 0, due, group=gb),
                      Message("w", 0, due - timedelta(seconds=1), group=gw)])
    warmed: list[list[str]] = []
    with (_claimer_stopped_at(engine, queue, "ConditionalXactLockTableWait",
                              lambda c: warmed.append([m.key for m in c.poll_many(1)]))
          as (claimer, stopped), engine.connect() as p, engine.connect() as o):
        assert warmed == [["w"]]
        queue.offer_many([Message("a", 1, due, group=ga)], connection=p)  # P updates a
        claiming, claimed = _in_background(claimer.poll_many, 10)
        stopped.wait_stopped()  # the claim holds b, and asks whether P still runs
        p.commit()
        o.exec_driver_sql("SET LOCAL deadlock_timeout = '3s'")
        opid = o.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        offering, offered = _in_background(
            _offer_in, o, queue, [Message("a", 2, due, group=ga), Message("b", 2, due, group=gb)])
        _until_waiting(engine, lambda: opid, "O to wait for b")
        stopped.release()
        offering.join(60)
        claiming.join(60)
    assert offered == [[OfferOutcome.UPDATED, OfferOutcome.UPDATED]], offered
    assert isinstance(claimed[0], list), claimed
    assert [queue.get(k).payload for k in "ab"] == [2, 2]


def test_a_grouped_claim_passes_over_a_group_whose_head_another_transaction_holds(
        one_queue, engine):
    # A grouped claim, having won its groups, locks their first messages. Here the caller's
    # transaction O has updated a, the head of group g2, and b is the head of g1. A claim
    # that waited for a head held the others it had locked meanwhile: in the groups' order,
    # it held b and waited for a, and O offering b next closed a circle (InnoDB rolled O
    # back, the transaction that had written less; PostgreSQL's claim gave way after half
    # its deadlock timeout and ran again); in the offers' order, it held up the other
    # groups as long as O's transaction ran. It passes over a head another transaction
    # holds, as a plain claim passes over a message, and g2 waits for the next claim.
    if engine.dialect.name not in ("postgresql", "mysql", "mariadb"):
        pytest.skip("SQLite has one writer at a time; lock waits are watched on "
                    "PostgreSQL and InnoDB only (SQL Server's and Oracle's heads: "
                    "tests/unit/test_sql_mssql.py, test_sql_oracle.py)")
    queue, due = one_queue, datetime.now(UTC) - timedelta(hours=1)
    later = due + timedelta(seconds=1)  # b first in claim order: g1's turn first
    queue.offer_many([Message("a", 0, later, group="g2")])
    queue.offer_many([Message("b", 0, due, group="g1")])
    with (_on_one_connection(engine, queue) as (claimer, session), counting() as retries,
          engine.connect() as o):
        queue.dao.begin_read_committed(o)  # the README's advice for MySQL
        first = queue.offer_many([Message("a", 1, later, group="g2")], connection=o)
        claiming, claimed = _in_background(claimer.poll_many, 10)
        _until_waiting(engine, lambda: session, "the claim to end",
                       lambda: not claiming.is_alive())
        waited = claiming.is_alive()  # or it waits for a lock
        o.commit()
        claiming.join(60)
        then = claimer.poll_many(10)
    assert not waited
    assert first == [OfferOutcome.UPDATED]
    assert [(m.key, m.payload) for m in claimed[0]] == [("b", 0)]
    assert [(m.key, m.payload) for m in then] == [("a", 1)]
    assert retries.retries == 0


def test_producers_marking_a_new_queue_as_grouped_at_once_do_not_deadlock(one_queue, engine):
    # The first offers of grouped messages to a queue make its settings row and mark it
    # grouped, each in its caller's transaction here. The first makes the row; the others,
    # which did not see it, insert it too and wait for the first. InnoDB's INSERT IGNORE then
    # gave each a shared lock on the row, which two of them both had to raise to update it:
    # a deadlock, one caller rolled back. They wait for each other in turn instead.
    if engine.dialect.name not in ("postgresql", "mysql", "mariadb"):
        pytest.skip("the circle is InnoDB's; SQLite has one writer at a time, and "
                    "SQL Server's and Oracle's locks were not run against here")
    with engine.connect() as first:
        one_queue.dao.begin_read_committed(first)  # the README's advice for MySQL
        assert one_queue.offer_many([Message("a", 1, group="ga")], connection=first) == [
            OfferOutcome.CREATED]
        outs = _waiting_for(engine, first, [partial(_offer_grouped_in, queue=one_queue, key=k)
                                            for k in "bc"])
    assert outs == [[[OfferOutcome.CREATED]]] * 2
    assert sorted(e.key for e in one_queue.poll_many(3)) == ["a", "b", "c"]


def _offer_grouped_in(conn: sa.Connection, queue: DelayedQueue, key: str) -> list:
    queue.dao.begin_read_committed(conn)
    return _offer_in(conn, queue, [Message(key, 1, group=f"g{key}")])


def test_dropping_empty_groups_waits_for_no_offer(one_queue, engine):
    # An ack that frees groups then drops the rows of those it left empty, in a transaction
    # of its own. On InnoDB that drop, a DELETE finding the empty groups with NOT EXISTS,
    # read the group index with shared locks: here it locked b1's entry, and waited for b2's,
    # which the caller's transaction O holds, updating b2; O, updating b1 next, waited for
    # the drop: a deadlock, the drop rolled back and run again. The drop finds the empty
    # groups by a plain read now, and locks only the rows of those it deletes.
    if engine.dialect.name not in ("postgresql", "mysql", "mariadb"):
        pytest.skip("the circle is InnoDB's; SQLite has one writer at a time, and "
                    "SQL Server's and Oracle's locks were not run against here")
    queue, due = one_queue, datetime.now(UTC) - timedelta(hours=1)
    queue.offer_many([Message("a1", 0, due, group="g1"), Message("b1", 0, due, group="g1"),
                      Message("a2", 0, due, group="g2"), Message("b2", 0, due, group="g2")])
    with (_on_one_connection(engine, queue) as (acker, session), counting() as retries,
          engine.connect() as o):
        claimed = acker.poll_many(10)
        assert sorted(e.key for e in claimed) == ["a1", "a2"]
        queue.dao.begin_read_committed(o)  # the README's advice for MySQL
        first = queue.offer_many([Message("b2", 1, due, group="g2", priority=1)],
                                 connection=o)
        acking, acked = _in_background(acker.ack_many, claimed)
        _until_waiting(engine, lambda: session, "the ack and drop to end",
                       lambda: not acking.is_alive())
        then = queue.offer_many([Message("b1", 1, due, group="g1", priority=1)],
                                connection=o)
        o.commit()
        acking.join(60)
    assert first == then == [OfferOutcome.UPDATED]
    assert acked == [2]
    assert sorted((e.key, e.payload) for e in queue.poll_many(10)) == [("b1", 1), ("b2", 1)]
    assert retries.retries == 0


def test_an_ack_freeing_groups_waits_for_no_claim_of_other_groups(one_queue, engine):
    # A claim in the caller's transaction C holds the row of group g5, which it took. An ack
    # of messages of the nine other groups frees their rows. At REPEATABLE READ that UPDATE,
    # which InnoDB read as a range of the groups' rows, took next-key locks on the rows it
    # passed, g5's too, and waited for C (and in the load test with groups C waited for an
    # offer, which waited for a message the ack had deleted: a deadlock). At READ COMMITTED
    # it passes over a row it does not change. The drop of the nine rows, left empty, that
    # follows waited for g5's too where it was planned as a read of the whole table.
    if engine.dialect.name not in ("postgresql", "mysql", "mariadb"):
        pytest.skip("the circle is InnoDB's; SQLite has one writer at a time, and "
                    "SQL Server's and Oracle's locks were not run against here")
    queue, due = one_queue, datetime.now(UTC) - timedelta(hours=1)
    queue.offer_many([Message(f"m{g}", 0, due, group=f"g{g}") for g in range(10) if g != 5])
    claimed = queue.poll_many(10)
    queue.offer_many([Message("m5", 0, due, group="g5")])
    with _on_one_connection(engine, queue) as (acker, session), engine.connect() as c:
        queue.dao.begin_read_committed(c)  # the README's advice for MySQL
        assert [e.key for e in queue.poll_many(10, connection=c)] == ["m5"]
        acking, acked = _in_background(acker.ack_many, claimed)
        _until_waiting(engine, lambda: session, "the ack to end",
                       lambda: not acking.is_alive())
        waited = acking.is_alive()  # or it waits for a lock
        c.commit()
        acking.join(60)
    assert not waited
    assert acked == [9]
