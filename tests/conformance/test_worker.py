"""The Worker on every backend: retry schedules, dead letters, transactional mode, lock
extension, idle sleeping and wake-ups, listeners."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    InvalidArgumentError,
    Message,
    ProcessingMode,
    RetryPolicy,
    SystemClock,
    WorkerListener,
)

from ..conftest import unique_name
from ..helpers import around_claims, in_thread, wait_for

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


class Recorder(WorkerListener):
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def _add(self, *event):
        with self.lock:
            self.events.append(event)

    def picked(self, envelopes):
        self._add("picked", len(envelopes))

    def started(self, envelope):
        self._add("started", envelope.key, envelope.attempt)

    def succeeded(self, envelope, elapsed):
        self._add("succeeded", envelope.key)

    def failed(self, envelope, error, retry_in):
        self._add("failed", envelope.key, str(error), retry_in)

    def dead_lettered(self, envelope, error):
        self._add("dead_lettered", envelope.key, str(error))

    def idle(self):
        self._add("idle")


@pytest.mark.parametrize("mode", list(ProcessingMode))
def test_retry_schedule_is_exact_then_dead_letter_then_requeue(make_queue, clock, mode, front):
    q = make_queue()
    q.offer("k", {"n": 1})
    calls = []

    def handler(envelope, *conn):
        calls.append((clock.now(), envelope.attempt))
        raise RuntimeError(f"attempt {envelope.attempt} failed")

    policy = RetryPolicy.exponential(S, 2, max_delay=3 * S, max_attempts=4)
    worker = front.worker(q, handler, retry=policy, mode=mode, listeners=[])
    start = clock.now()
    assert worker.drain() == (1 if mode is ProcessingMode.AT_LEAST_ONCE else 0)
    for wait in (S, 2 * S, 3 * S):  # 1 s, 2 s, then the 3 s cap
        clock.advance(wait - MS)
        worker.drain()
        assert len(calls) == len(set(calls)) and calls[-1][0] < clock.now()  # not yet due
        clock.advance(MS)
        worker.drain()
    assert calls == [(start, 1), (start + S, 2), (start + 3 * S, 3), (start + 6 * S, 4)]
    assert q.get("k") is None

    letters = front.dead_letters(q)
    [dead] = letters.list(q.name)
    assert (dead.key, dead.attempts, dead.queue) == ("k", 4, q.name)
    assert dead.last_error.startswith("RuntimeError: attempt 4 failed")
    assert q.serializer.decode(dead.payload) == {"n": 1}
    assert dead.failed_at == clock.now()

    assert letters.requeue([dead.id]) == 1
    assert letters.list(q.name) == []
    back = q.poll()
    assert (back.key, back.payload, back.attempt) == ("k", {"n": 1}, 1)


def test_max_attempts_three_calls_the_handler_three_times(make_queue, clock, front):
    q = make_queue()
    q.offer_many([Message(f"k{i}", i) for i in range(5)])
    calls = []

    def handler(envelope):
        calls.append(envelope.key)
        raise ValueError("no")

    worker = front.worker(q, handler, concurrency=3, batch_size=2, listeners=[],
                    retry=RetryPolicy.fixed(timedelta(0), max_attempts=3))
    worker.drain()
    assert sorted(calls) == sorted([f"k{i}" for i in range(5)] * 3)
    assert front.dead_letters(q).count(q.name) == 5
    assert q.stats().due == 0


def test_dead_letters_drop_and_filter_by_queue(make_queue, clock, front):
    a, b = make_queue(), make_queue()
    for q in (a, b):
        q.offer("x", 1)
        front.worker(q, lambda e: 1 / 0, retry=RetryPolicy.fixed(S, max_attempts=1),
               listeners=[]).drain()
    letters = front.dead_letters(a)
    [da] = letters.list(a.name)
    [db] = letters.list(b.name)
    assert "ZeroDivisionError" in da.last_error
    assert letters.drop([da.id]) == 1
    assert letters.list(a.name) == [] and letters.count(b.name) == 1
    assert letters.requeue(letters.ids(b.name)) == 1
    assert b.contains("x") and not a.contains("x")
    with pytest.raises(InvalidArgumentError):
        letters.drop(db.id)


def test_dead_letter_move_is_skipped_when_the_lock_was_lost(make_queue, clock, front):
    q = make_queue()
    q.offer("k", 1)
    env = q.poll()
    q.offer("k", 2)  # an update voids the lock
    assert front.dead_letters(q).bury(env, "boom") is False
    assert front.dead_letters(q).count(q.name) == 0
    assert q.get("k").payload == 2


def test_a_long_error_of_four_byte_characters_fits_the_dead_letter(make_queue, front):
    # 3,000 characters outside the BMP (4 bytes in UTF-8, 2 units in UTF-16) and a NUL, which
    # PostgreSQL text cannot hold: stored cut to the column's 2,000 characters, NUL replaced
    q = make_queue()
    q.offer("k", 1)
    error = "\x00" + "🦄" * 3000
    assert front.dead_letters(q).bury(q.poll(), error) is True
    [dead] = front.dead_letters(q).list(q.name)
    assert dead.last_error == "\ufffd" + "🦄" * 1998 + "…"


@pytest.fixture
def side_table(engine, table_name):
    table = sa.Table(f"{table_name}_side", sa.MetaData(),
                     sa.Column("k", sa.String(50), primary_key=True))
    table.create(engine, checkfirst=True)
    with engine.begin() as conn:
        conn.execute(table.delete())
    yield table
    table.drop(engine)


def test_transactional_mode_leaves_no_trace_when_the_handler_fails(make_queue, clock,
                                                                   engine, side_table, front):
    q = make_queue()
    q.offer_many([Message("good", 1), Message("bad", 2)])

    def handler(envelope, conn):
        conn.execute(side_table.insert().values(k=envelope.key))
        if envelope.key == "bad":
            raise RuntimeError("undo me")

    worker = front.worker(q, handler, mode=ProcessingMode.TRANSACTIONAL, batch_size=10,
                    retry=RetryPolicy.fixed(10 * S), listeners=[])
    worker.drain()
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(side_table.c.k)).scalars()) == ["good"]
    assert q.get("good") is None
    bad = q.get("bad")
    assert bad.deliveries == 1 and not bad.in_flight
    assert q.stats().scheduled == 1  # rescheduled 10 s on, not due

    clock.advance(10 * S)
    front.worker(q, lambda e, c: c.execute(side_table.insert().values(k="bad-again")),
           mode=ProcessingMode.TRANSACTIONAL, listeners=[]).drain()
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(side_table.c.k)).scalars()) == ["bad-again", "good"]
    assert q.stats().due == 0 and q.get("bad") is None


def test_a_transaction_that_dies_mid_batch_undoes_claim_and_work(make_queue, clock, engine,
                                                                 side_table, front):
    """A handler that breaks out of the worker (not an Exception) rolls everything back."""
    q = make_queue()
    q.offer("k", 1)

    class Fatal(BaseException):
        pass

    def handler(envelope, conn):
        conn.execute(side_table.insert().values(k="k"))
        raise Fatal()

    with pytest.raises(Fatal):
        front.worker(q, handler, mode=ProcessingMode.TRANSACTIONAL, listeners=[]).drain()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(side_table)).scalar() == 0
    message = q.get("k")
    assert message.deliveries == 0 and not message.in_flight


def test_envelope_extend_prevents_redelivery(make_queue, clock, front):
    q = make_queue(acquire_timeout=timedelta(minutes=5))
    other = make_queue(q.name)
    q.offer("long", 1)
    extended, release = threading.Event(), threading.Event()
    calls = []

    def handler(envelope):
        calls.append(envelope.attempt)
        assert envelope.extend(timedelta(minutes=30))
        extended.set()
        release.wait(30)

    worker = front.worker(q, handler, listeners=[])
    thread = in_thread(worker.drain)
    assert extended.wait(20)
    clock.advance(timedelta(minutes=10))  # the first lock would have expired
    assert other.poll() is None
    release.set()
    thread.join(20)
    assert calls == [1] and q.get("long") is None


def test_heartbeat_renews_the_lock_of_a_running_handler(make_queue, clock, front):
    q = make_queue(acquire_timeout=30 * S)
    other = make_queue(q.name)
    q.offer("long", 1)
    running, release = [], threading.Event()

    def handler(envelope):
        running.append(envelope)
        release.wait(30)

    worker = front.worker(q, handler, heartbeat=timedelta(milliseconds=20), listeners=[])
    thread = in_thread(worker.drain)
    wait_for(lambda: running, what="the handler")
    for _ in range(3):  # 60 s in all: twice the acquire timeout
        clock.advance(20 * S)
        target = clock.now() + 25 * S
        wait_for(lambda t=target: running[0].locked_until >= t, what="a heartbeat")
        assert other.poll() is None
    release.set()
    thread.join(20)
    assert q.get("long") is None


def test_a_raising_handler_never_kills_the_worker_and_listeners_see_it_all(make_queue, clock,
                                                                           front):
    q = make_queue()
    q.offer_many([Message("ok", 1), Message("bad", 2)])
    recorder = Recorder()

    class Broken(WorkerListener):
        def started(self, envelope):
            raise RuntimeError("a broken listener is ignored")

    def handler(envelope):
        if envelope.key == "bad":
            raise KeyError("missing")

    worker = front.worker(q, handler, batch_size=2, listeners=[Broken(), recorder],
                    retry=RetryPolicy.fixed(S, max_attempts=2))
    worker.drain()
    clock.advance(S)
    worker.drain()
    events = recorder.events
    assert ("picked", 2) in events and ("succeeded", "ok") in events
    assert ("failed", "bad", "'missing'", S) in events
    assert ("dead_lettered", "bad", "'missing'") in events
    assert sorted(e for e in events if e[0] == "started") == [
        ("started", "bad", 1), ("started", "bad", 2), ("started", "ok", 1)]
    assert ("idle",) not in events  # drain() returns instead of idling


@pytest.mark.parametrize("setup", ["one queue", "two queues", "a cap in the worker"])
def test_handlers_that_wait_for_claims_get_batches_side_by_side_from_one_queue(make_queue, front,
                                                                             setup):
    # Handlers that finish a batch before the next claim comes back wait for the claims: a
    # worker of one queue then claims several batches at once (on PostgreSQL, where that
    # gains), up to four and as many as its engine's pool keeps beside the ack loop's
    # connection, never more, in two claims side by side that share them; with several
    # queues, or a cap in the worker, a batch at a time.
    queues = [make_queue() for _ in range(2 if setup == "two queues" else 1)]
    keys = set()
    for n, queue in enumerate(queues):
        queue.offer_many([Message(f"{n}-{i}", i) for i in range(600)])
        keys |= {f"{n}-{i}" for i in range(600)}
    handled = []
    lock = threading.Lock()

    def handler(envelope):
        with lock:
            handled.append(envelope.key)

    claiming, most = set(), []  # the claims under way; the most at any time

    def enter(n):
        with lock:
            claiming.add(n)
            most.append(len(claiming))

    def leave(n):
        with lock:
            claiming.discard(n)

    for queue in queues:
        around_claims(queue, enter, leave)
    recorder = Recorder()
    limits = {queues[0].name: 1000} if setup == "a cap in the worker" else None
    worker = front.worker({q.name: q for q in queues}, handler, concurrency=2, batch_size=50,
                          limits=limits, listeners=[recorder])
    assert worker.drain() == len(keys)
    assert sorted(handled) == sorted(keys)  # each once
    side_by_side = setup == "one queue" and queues[0].dao.name == "postgresql"
    pool = queues[0].engine.pool.size()
    batches = max(2, min(4, pool - 1)) if side_by_side else 1
    assert max(most) == min(2, batches)
    # each claim its share of the batches, all of them at most batches * batch_size
    assert max(event[1] for event in recorder.events if event[0] == "picked") == \
        50 * batches // min(2, batches)


def test_idle_worker_sleeps_until_the_next_due_time_not_the_idle_poll(make_queue, front):
    q = make_queue(clock=SystemClock())
    got = threading.Event()
    q.offer("soon", 1, q.clock.now() + timedelta(milliseconds=300))
    worker = front.worker(q, lambda e: got.set(), idle_poll=timedelta(minutes=5), wake_ups=False,
                    listeners=[])
    thread = in_thread(worker.run)
    try:
        assert got.wait(20), "a worker with a 5-minute idle poll missed a message due in 300 ms"
    finally:
        worker.stop()
        thread.join(20)
    assert not thread.is_alive() and q.get("soon") is None


def test_stop_releases_claimed_but_unstarted_messages(make_queue, front):
    q = make_queue(clock=SystemClock())
    q.offer_many([Message(f"k{i}", i) for i in range(6)])
    started, release = threading.Event(), threading.Event()

    def handler(envelope):
        started.set()
        release.wait(30)

    worker = front.worker(q, handler, concurrency=1, batch_size=6, listeners=[])
    thread = in_thread(worker.run)
    assert started.wait(20)
    stopper = in_thread(worker.stop)
    stopper.join()
    wait_for(lambda: q.stats().in_flight == 1, what="the release of unstarted messages")
    release.set()
    thread.join(20)
    stats = q.stats()
    assert (stats.due, stats.in_flight) == (5, 0)


def test_wake_up_on_offer_reaches_a_sleeping_worker(make_queue, engine, table_name, front):
    q = make_queue(clock=SystemClock())
    if not q.dao.notifications:
        pytest.skip(f"{engine.dialect.name} has no notifications (polling only)")
    got = threading.Event()
    worker = front.worker(q, lambda e: got.set(), idle_poll=timedelta(minutes=5), listeners=[])
    thread = in_thread(worker.run)
    try:
        channel = f'LISTEN "sqldelay_{table_name}"'

        def listening():
            with engine.connect() as conn:  # a fresh transaction: a fresh statistics snapshot
                return conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE query = :q"),
                    {"q": channel}).scalar() > 0

        wait_for(listening, what="the worker to listen")
        q.offer("now", 1)
        assert got.wait(20), "a NOTIFY did not wake a worker sleeping for 5 minutes"
    finally:
        worker.stop()
        thread.join(20)


def test_an_offer_in_this_process_wakes_a_sleeping_worker(make_queue, front):
    # on every database, notifications or not: the worker sleeps for five minutes
    q = make_queue(clock=SystemClock())
    idle = threading.Event()
    handled: list[tuple[str, object]] = []

    class Idle(WorkerListener):
        def idle(self) -> None:
            idle.set()

    worker = front.worker(q, lambda e: handled.append((e.key, SystemClock().now())),
                          idle_poll=timedelta(minutes=5), listeners=[Idle()])
    thread = in_thread(worker.run)
    try:
        assert idle.wait(20), "the worker did not go idle"
        q.offer("now", 1)
        wait_for(lambda: handled, what="an offer to wake the sleeping worker")
        soon = SystemClock().now() + timedelta(milliseconds=500)
        q.offer("soon", 2, at=soon)  # due long before the worker meant to look again
        wait_for(lambda: len(handled) == 2, what="a message due soon to wake the worker")
        assert handled[1][0] == "soon" and handled[1][1] >= soon
    finally:
        worker.stop()
        thread.join(20)


def test_only_offers_due_now_notify(make_queue, engine, table_name):
    q = make_queue(clock=SystemClock())
    if not q.dao.notifications:
        pytest.skip(f"{engine.dialect.name} has no notifications (polling only)")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'LISTEN "sqldelay_{table_name}"')
        driver = conn.connection.driver_connection
        q.offer("later", 1, q.clock.now() + timedelta(hours=1))
        q.offer_many([Message(f"now{i}", i) for i in range(5)])  # one transaction, one notify
        q.offer("now0", 0, update=False)  # ignored: nothing new to do
        notes = [n.payload for n in driver.notifies(timeout=0.5)]
    assert notes == [q.pkind]


def test_bad_worker_arguments_are_rejected(make_queue, front):
    q = make_queue()
    for kwargs in ({"concurrency": 0}, {"batch_size": -1}, {"idle_poll": timedelta(0)},
                   {"retry": 3}, {"heartbeat": timedelta(hours=1)},
                   {"heartbeat": S, "mode": ProcessingMode.TRANSACTIONAL},
                   {"listeners": [object()]}):
        with pytest.raises(InvalidArgumentError):
            front.worker(q, print, **kwargs)
    with pytest.raises(InvalidArgumentError):
        front.worker(q, "not callable")


def test_an_asynchronous_handler_is_awaited_or_refused_never_acked_unrun(make_queue, front):
    # the blocking Worker would call it without awaiting it: every message acked, none run
    q = make_queue()
    q.offer("a", 1)
    ran = []

    async def handler(envelope):
        ran.append(envelope.key)

    class Registry:  # an object whose __call__ is async def, as a task registry's is
        async def __call__(self, envelope):
            ran.append(envelope.key)

    if front.is_async:
        assert front.worker(q, Registry(), listeners=[]).drain() == 1
        assert ran == ["a"]
    else:
        for refused in (handler, Registry()):
            with pytest.raises(InvalidArgumentError, match="asynchronous"):
                front.worker(q, refused)
        assert q.contains("a") and ran == []


def test_a_message_its_handler_acked_itself_gets_no_second_ack(make_queue, front):
    # a handler (a task registry keeping a result) that acks its message in its own
    # transaction: the worker's ack after it would delete nothing, a round trip for nothing
    q = make_queue()
    q.offer_many([Message("self", 1), Message("worker", 2)])
    table = q.dao.table.name
    deletes: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        # an ack alone, or one riding on the next claim (PostgreSQL: a CTE of the claim's)
        if f"DELETE FROM {table} " in " ".join(statement.split()) + " ":
            deletes.append(statement)

    def handler(envelope):
        if envelope.key == "self":
            assert envelope.ack()

    events = front.events_of(front.engine)
    sa.event.listen(events, "before_cursor_execute", count)
    try:
        assert front.worker(q, handler, batch_size=1, listeners=[]).drain() == 2
    finally:
        sa.event.remove(events, "before_cursor_execute", count)
    assert not q.contains("self") and not q.contains("worker")
    # the handler's ack of "self", the worker's of "worker" (with "self" acked again, the
    # ack of "self" rides on the claim of "worker" or goes alone: a third)
    assert len(deletes) == 2


def test_dead_letters_cli_lists_requeues_and_drops(make_queue, clock, backend_url, table_name,
                                                   capsys, front):
    from sqldelay.cli import main

    q = make_queue()
    q.offer_many([Message("a", 1), Message("b", 2)])
    front.worker(q, lambda e: 1 / 0, retry=RetryPolicy.fixed(S, max_attempts=1),
                 listeners=[]).drain()
    db = ["--url", backend_url, "--table", table_name]

    assert main(["dead-letters", "list", *db, "--queue", q.name, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted((r["key"], r["attempts"]) for r in rows) == [("a", 1), ("b", 1)]
    assert all("ZeroDivisionError" in r["last_error"] for r in rows)
    id_of = {r["key"]: str(r["id"]) for r in rows}

    assert main(["dead-letters", "requeue", *db, id_of["a"]]) == 0
    assert main(["dead-letters", "drop", *db, "--all", "--queue", q.name, "--yes"]) == 0
    assert capsys.readouterr().out.splitlines() == ["requeued 1 dead letter(s)",
                                                    "dropped 1 dead letter(s)"]
    assert q.contains("a") and not q.contains("b")
    assert front.dead_letters(q).count(q.name) == 0
    assert main(["dead-letters", "requeue", *db]) == 1
    assert "ids or --all" in capsys.readouterr().err


def test_dead_letters_of_queues_whose_names_differ_in_case_or_wildcards_stay_apart(make_queue,
                                                                                  front):
    names = [unique_name("Mail"), None, None]
    names[1] = names[0].lower()
    names[2] = names[0].replace("_", "%", 1)
    queues = [make_queue(name) for name in names]
    for q in queues:
        q.offer("k", q.name)
        assert front.dead_letters(q).bury(q.poll(), "gave up")
    dead = front.dead_letters(queues[0])
    for q in queues:
        assert [d.payload for d in dead.list(q.name)] == [f'"{q.name}"'.encode()]
        assert dead.count(q.name) == 1
    dead.drop(dead.ids(queues[0].name) + dead.ids(queues[1].name) + dead.ids(queues[2].name))
