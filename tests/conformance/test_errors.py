"""Real errors from each backend are classified, and transient ones retried."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from sqldelay.dialects import ErrorKind, OfferRow
from sqldelay.executor import Executor


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


def test_duplicate_key_and_missing_table(queue, engine):
    queue.offer("k", 1)
    table = queue.dao.table
    row = queue.dao.row_params(queue.pkind, [OfferRow("k", b"1", 0, True)], 0)[0]
    with engine.connect() as conn, pytest.raises(sa.exc.IntegrityError) as caught:
        conn.execute(sa.insert(table), row)
    assert queue.dao.classify(caught.value) is ErrorKind.DUPLICATE_KEY
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as caught:
        conn.execute(sa.text("SELECT * FROM sqldelay_absent_table"))
    assert queue.dao.classify(caught.value) is ErrorKind.MISSING_TABLE


def test_deadlocks_and_busy_databases_are_transient(queue, engine):
    table = queue.dao.table
    if engine.dialect.name == "sqlite":
        # SQLite has no row locks: the transient error is a second writer meeting the lock
        other = sa.create_engine(engine.url, connect_args={"timeout": 0})
        with engine.connect() as holder:
            queue.dao.begin_write(holder)
            with other.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
                queue.dao.begin_write(conn)
            holder.rollback()
        other.dispose()
        assert queue.dao.classify(caught.value) is ErrorKind.TRANSIENT
        return
    queue.offer("a", 1)
    queue.offer("b", 2)

    def touch(key):
        return sa.update(table).where(table.c.pkind == queue.pkind, table.c.pkey == key) \
            .values(deliveries=table.c.deliveries + 1)

    errors = provoke(engine, [(touch("a"), touch("b")), (touch("b"), touch("a"))])
    assert len(errors) == 1
    assert queue.dao.classify(errors[0]) is ErrorKind.TRANSIENT


def test_transient_errors_are_retried_and_others_are_not(queue, engine):
    class Transient(sa.exc.DBAPIError):
        pass

    executor = Executor(engine, queue.dao)
    executor.dao = _ClassifyAs(queue.dao, Transient)
    calls = []

    def flaky(conn):
        calls.append(1)
        if len(calls) < 3:
            raise Transient("UPDATE …", {}, Exception("deadlock"))
        return "done"

    assert executor.run(flaky, write=True) == "done" and len(calls) == 3

    def broken(conn):
        calls.append(1)
        raise ValueError("a programming error")

    calls.clear()
    with pytest.raises(ValueError):
        executor.run(broken, write=True)
    assert len(calls) == 1


class _ClassifyAs:
    """The real DAO, except that one exception class counts as transient."""

    def __init__(self, dao, transient):
        self._dao, self._transient = dao, transient

    def __getattr__(self, name):
        return getattr(self._dao, name)

    def classify(self, exc):
        return ErrorKind.TRANSIENT if isinstance(exc, self._transient) else ErrorKind.OTHER

