"""A claim made in the caller's own transaction (``connection=``) holds what it returns, as a
claim in a transaction of sqldelay's own does: two such claims never both get one message, and
an ack never deletes a message its claim did not take.

SQLite has no row locks: a claim there must take the database's write lock before it reads,
in the caller's transaction too (Python's sqlite3 driver runs a SELECT outside any transaction
and begins one only at the next write). Every count below comes from the claimants' and
handlers' own records, not from the library's counters.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, FakeClock

from ..conftest import unique_name

ROUNDS = 60


def read_committed(conn):
    """``conn`` at READ COMMITTED where the README advises it for claims in the caller's
    transaction (MySQL/MariaDB, whose REPEATABLE READ locks index gaps)."""
    if conn.dialect.name in ("mysql", "mariadb"):
        return conn.execution_options(isolation_level="READ COMMITTED")
    return conn


def test_two_claims_in_callers_transactions_never_both_get_one_message(make_queue, front):
    q = make_queue()
    both = threading.Barrier(2, timeout=30)
    got: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)  # round -> claims
    acked: list[tuple[int, bool]] = []
    record = threading.Lock()
    errors: list[BaseException] = []

    def claimant(name: str) -> None:
        try:
            for n in range(ROUNDS):
                if name == "a":
                    q.offer(f"m{n}", n)
                both.wait()  # the message is there: both claim it at once
                with front.connect() as conn:
                    envelope = q.poll(by=name, connection=conn)
                    conn.commit()
                if envelope is not None:
                    ok = q.ack(envelope)
                    with record:
                        got[n].append((name, envelope.key))
                        acked.append((n, ok))
                both.wait()  # the round is over for both before the next message
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
            both.abort()

    threads = [threading.Thread(target=claimant, args=(name,)) for name in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    twice = {n: claims for n, claims in got.items() if len(claims) > 1}
    assert not twice, f"one message claimed by both claimants: {twice}"
    assert sorted(got) == list(range(ROUNDS))  # each message was claimed by one of them
    assert all(key == f"m{n}" for n, claims in got.items() for _, key in claims)
    assert [n for n, ok in acked if not ok] == []
    assert q.stats().due == 0 and q.stats().in_flight == 0


@pytest.mark.slow
def test_claims_and_acks_in_callers_transactions_beside_producers_lose_nothing(make_queue,
                                                                              front):
    # each producer offers its next key once the last is handled (or gone), so the queue is
    # often empty and its newest row just acked (deleted) when a key is offered: SQLite then
    # gives the new message the deleted one's id, and a claim or an ack that reached a
    # message by id alone takes the new message for the old
    q = make_queue()
    offered = [[f"p{p}-{i}" for i in range(120)] for p in range(2)]
    handled: list[tuple[str, str]] = []  # (key, consumer), written by the handlers
    failed_acks: list[str] = []
    changed = threading.Condition()
    producing = threading.Event()
    errors: list[BaseException] = []
    deadline = time.monotonic() + 90

    def producer(keys: list[str]) -> None:
        try:
            for key in keys:
                q.offer(key, key)
                with changed:  # handled, or lost (gone from the queue unhandled)
                    while (key not in {k for k, _ in handled} and q.contains(key)
                           and time.monotonic() < deadline):
                        changed.wait(0.05)
        except BaseException as exc:
            errors.append(exc)

    def consumer(name: str) -> None:
        try:
            while time.monotonic() < deadline:
                with front.connect() as conn:
                    conn = read_committed(conn)
                    envelopes = q.poll_many(2, by=name, connection=conn)
                    for envelope in envelopes:  # handled, then acked in the same transaction
                        with changed:
                            handled.append((envelope.key, name))
                        if not q.ack(envelope, connection=conn):
                            with changed:
                                failed_acks.append(envelope.key)
                    conn.commit()
                with changed:
                    changed.notify_all()
                if not envelopes and not producing.is_set() and q.stats().due == 0:
                    return
        except BaseException as exc:
            errors.append(exc)

    producing.set()
    making = [threading.Thread(target=producer, args=(keys,)) for keys in offered]
    taking = [threading.Thread(target=consumer, args=(f"c{i}",)) for i in range(3)]
    for t in [*making, *taking]:
        t.start()
    for t in making:
        t.join(120)
    producing.clear()
    for t in taking:
        t.join(120)
    assert not any(t.is_alive() for t in [*making, *taking])
    assert not errors, errors
    counts = collections.Counter(key for key, _ in handled)
    every = {k for keys in offered for k in keys}
    twice = {k: n for k, n in counts.items() if n > 1}
    lost = every - set(counts)  # never handled, and not in the queue either (below)
    assert (len(twice), len(lost), len(failed_acks)) == (0, 0, 0), (twice, lost, failed_acks)
    assert set(counts) == every
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)


def test_claims_in_transactions_begun_by_the_caller_on_sqlite_wait_for_each_other(
        backend_url, table_name):
    # SQLAlchemy's recipe for SQLite transactions: the driver in autocommit, a BEGIN (deferred,
    # no lock yet) sent when the connection begins. Two claims there both read before either
    # writes; the second's write then fails (SQLITE_BUSY: its snapshot is stale) unless each
    # claim takes the write lock before it reads, and waits for it
    if not backend_url.startswith("sqlite"):
        pytest.skip("SQLite's transactions alone begin without taking the write lock")
    engine = sa.create_engine(backend_url)

    @sa.event.listens_for(engine, "connect")
    def connect(dbapi_connection, record):
        dbapi_connection.isolation_level = None  # the driver begins nothing of its own

    @sa.event.listens_for(engine, "begin")
    def begin(conn):
        conn.exec_driver_sql("BEGIN")

    q = DelayedQueue(engine, unique_name("q"), table_name=table_name, clock=FakeClock())
    both = threading.Barrier(2, timeout=30)
    got: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def claimant() -> None:
        try:
            for n in range(ROUNDS // 2):
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")  # the transaction has begun, and read
                    both.wait()
                    got.extend((n, e.key) for e in q.poll_many(1, connection=conn))
                    conn.commit()
                both.wait()
                if threading.current_thread() is threads[0]:
                    q.offer(f"m{n + 1}", n + 1)
                both.wait()
        except BaseException as exc:
            errors.append(exc)
            both.abort()

    q.offer("m0", 0)
    threads = [threading.Thread(target=claimant) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        engine.dispose()
    assert not errors, errors
    assert sorted(got) == [(n, f"m{n}") for n in range(ROUNDS // 2)]
