"""Real errors from each backend are classified, and transient ones retried."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, SchemaMissingError, create_schema
from sqldelay.dialects import ErrorKind, OfferRow
from sqldelay.retry_counts import counting
from sqldelay.worker_base import is_outage

from ..conftest import DATABASES, FRONTS, Target, unique_name
from ..fronts import AsyncFront, Front


@pytest.fixture
def one_queue(engine, table_name):
    """A blocking queue: the errors are the database's, classified once per database."""
    return DelayedQueue(engine, unique_name("q"), table_name=table_name)


def provoke(engine, statement_pairs):
    """Two connections run their first statements, then each other's second: a deadlock.

    Returns the error one of them got (the database picks the victim).
    """
    errors: list[sa.exc.DBAPIError] = []
    both_hold = threading.Barrier(2, timeout=30)

    def side(first, second):
        with engine.connect() as conn:
            try:
                conn.execute(first)
                both_hold.wait()
                conn.execute(second)
            except sa.exc.DBAPIError as exc:
                errors.append(exc)
            finally:
                conn.rollback()

    threads = [threading.Thread(target=side, args=pair) for pair in statement_pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_duplicate_key_and_missing_table(one_queue, engine):
    one_queue.offer("k", 1)
    table = one_queue.dao.table
    row = one_queue.dao.row_params(one_queue.pkind, [OfferRow("k", b"1", 0, True)], 0)[0]
    with engine.connect() as conn, pytest.raises(sa.exc.IntegrityError) as caught:
        conn.execute(sa.insert(table), row)
    assert one_queue.dao.classify(caught.value) is ErrorKind.DUPLICATE_KEY
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as caught:
        conn.execute(sa.text("SELECT * FROM sqldelay_absent_table"))
    assert one_queue.dao.classify(caught.value) is ErrorKind.MISSING_TABLE
    # a schema problem, not an outage to wait out (SQLite says it with an OperationalError)
    assert not is_outage(caught.value, [one_queue])
    if engine.dialect.name == "sqlite":  # the claim names its index there
        with engine.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
            conn.exec_driver_sql(f"SELECT * FROM {table.name} INDEXED BY sqldelay_absent_ix")
        assert one_queue.dao.classify(caught.value) is ErrorKind.MISSING_TABLE
        assert not is_outage(caught.value, [one_queue])


def test_an_offer_whose_reads_never_find_the_key_its_insert_meets_says_so(one_queue, engine,
                                                                          monkeypatch):
    # A transaction reading a snapshot older than another's insert of a key (a caller's at
    # SNAPSHOT or SERIALIZABLE isolation, where the read of the offer's keys takes no current
    # look) never sees the key its insert fails on; the offer raised nothing and went round
    # for ever. Here the offer's read is made to find nothing, as such a snapshot would.
    if engine.dialect.name == "postgresql":
        pytest.skip("an offer there is one statement, which updates the key it meets")
    one_queue.offer("k", 1)
    monkeypatch.setattr(one_queue.dao, "existing_rows", lambda *args, **kwargs: [])
    with engine.connect() as conn, pytest.raises(sa.exc.IntegrityError) as caught:
        one_queue.offer("k", 2, connection=conn)
    assert one_queue.dao.classify(caught.value) is ErrorKind.DUPLICATE_KEY
    assert any("its transaction may read a snapshot" in note and "redo the transaction" in note
               for note in getattr(caught.value, "__notes__", []))
    monkeypatch.undo()
    assert one_queue.get("k").payload == 1


@pytest.mark.parametrize("front_end", [f for f in ("sync", "async") if f in FRONTS])
def test_a_dropped_claim_index_stops_a_worker_with_an_error_naming_it(tmp_path, front_end):
    """SQLite's claim reads through its index by name: without it every claim fails, which
    is no outage to wait out but a schema to repair."""
    if "sqlite" not in DATABASES:
        pytest.skip("SQLDELAY_TEST_BACKENDS leaves out sqlite")
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    engine = sa.create_engine(url)
    create_schema(engine)
    index = DelayedQueue(engine, "q").dao.claim_index
    front = Front(engine) if front_end == "sync" else AsyncFront(
        Target("sqlite", "aiosqlite").async_url(url))
    try:
        queue = front.queue("q")
        queue.offer("k", 1)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP INDEX {index}")
        worker = front.worker(queue, lambda envelope: None,
                              idle_poll=timedelta(milliseconds=50), listeners=[])
        ended: list[BaseException | int] = []

        def drain():
            try:
                ended.append(worker.drain())
            except BaseException as exc:  # what the caller of drain() gets
                ended.append(exc)

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        thread.join(30)
        if thread.is_alive():
            worker.stop()
            thread.join(30)
            pytest.fail("the worker kept waiting for the database instead of stopping")
        [error] = ended
        assert isinstance(error, SchemaMissingError), repr(error)
        assert index in str(error) and "does not exist" in str(error)
        assert queue.get("k").deliveries == 0  # the message is still there, never claimed
    finally:
        if front_end == "async":
            front.close()
        engine.dispose()


def test_deadlocks_and_busy_databases_are_transient(one_queue, engine):
    table = one_queue.dao.table
    if engine.dialect.name == "sqlite":
        # SQLite has no row locks: the transient error is a second writer meeting the lock
        other = sa.create_engine(engine.url, connect_args={"timeout": 0})
        with engine.connect() as holder:
            one_queue.dao.begin_write(holder)
            with other.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
                one_queue.dao.begin_write(conn)
            holder.rollback()
        other.dispose()
        assert one_queue.dao.classify(caught.value) is ErrorKind.TRANSIENT
        return
    one_queue.offer("a", 1)
    one_queue.offer("b", 2)

    def touch(key):
        return sa.update(table).where(table.c.pkind == one_queue.pkind, table.c.pkey == key) \
            .values(deliveries=table.c.deliveries + 1)

    errors = provoke(engine, [(touch("a"), touch("b")), (touch("b"), touch("a"))])
    assert len(errors) == 1
    assert one_queue.dao.classify(errors[0]) is ErrorKind.TRANSIENT


def test_transient_errors_are_retried_and_others_are_not(make_queue, front):
    class Transient(sa.exc.DBAPIError):
        pass

    executor = front.executor(_ClassifyAs(make_queue().dao, Transient))
    calls = []

    def flaky(conn):
        calls.append(1)
        if len(calls) < 3:
            raise Transient("UPDATE …", {}, Exception("deadlock"))
        return "done"

    assert front.run(executor.run, flaky, write=True) == "done" and len(calls) == 3

    def broken(conn):
        calls.append(1)
        raise ValueError("a programming error")

    calls.clear()
    with pytest.raises(ValueError):
        front.run(executor.run, broken, write=True)
    assert len(calls) == 1


def test_retries_and_deadlocks_are_counted_while_someone_counts(one_queue, engine, front):
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite has no row locks, so no deadlocks: one writer at a time")
    table = one_queue.dao.table
    one_queue.offer("a", 1)
    one_queue.offer("b", 2)

    def touch(key):
        return sa.update(table).where(table.c.pkind == one_queue.pkind, table.c.pkey == key) \
            .values(deliveries=table.c.deliveries + 1)

    [deadlock] = provoke(engine, [(touch("a"), touch("b")), (touch("b"), touch("a"))])

    class Busy(sa.exc.DBAPIError):  # transient, and no deadlock
        pass

    executor = front.executor(_ClassifyAs(one_queue.dao, (Busy, type(deadlock))))
    failures: list[BaseException] = []

    def flaky(conn):
        if failures:
            raise failures.pop(0)
        return "done"

    failures[:] = [deadlock, Busy("UPDATE …", {}, Exception("busy"))]
    assert front.run(executor.run, flaky, write=True) == "done"  # nobody counting
    with counting() as seen:
        failures[:] = [deadlock, Busy("UPDATE …", {}, Exception("busy"))]
        assert front.run(executor.run, flaky, write=True) == "done"
        assert front.run(executor.run, flaky, write=True) == "done"  # no retry
    assert (seen.retries, seen.deadlocks) == (2, 1)


class _ClassifyAs:
    """The real DAO, except that one exception class counts as transient."""

    def __init__(self, dao, transient):
        self._dao, self._transient = dao, transient

    def __getattr__(self, name):
        return getattr(self._dao, name)

    def classify(self, exc):
        return ErrorKind.TRANSIENT if isinstance(exc, self._transient) else ErrorKind.OTHER

