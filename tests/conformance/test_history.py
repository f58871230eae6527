"""History: each message's timeline, written with the changes it records, kept after the
message is done; and the producer and holder on the message itself. Timelines run on every
target; the crash, the load and the statement counts once per database."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    DelayedQueue,
    EventKind,
    FakeClock,
    History,
    InvalidArgumentError,
    Message,
    RetryPolicy,
    SystemClock,
)
from sqldelay.history import process_actor

from ..conftest import unique_name
from ..helpers import in_thread, wait_for

S = timedelta(seconds=1)


def timeline(queue, key) -> list[tuple]:
    return [(e.kind, e.actor, e.attempt) for e in queue.history(key)]


# ---- timelines, on every target ---------------------------------------------------------------

def test_offer_update_claim_fail_retry_ack(make_queue, clock):
    queue = make_queue(history=True)
    queue.offer("order:7", {"v": 1}, by="shop")
    queue.offer("order:7", {"v": 1}, by="shop")  # changes nothing: no event by default
    queue.offer("order:7", {"v": 2}, clock.now() + S, by="admin")
    clock.advance(S)
    first = queue.poll(by="worker-a")
    assert (first.enqueued_by, first.claimed_by, first.attempt) == ("admin", "worker-a", 1)
    assert queue.release(first, delay=S, error="SMTP timeout")
    clock.advance(S)
    second = queue.poll(by="worker-b")
    assert second.ack()
    assert timeline(queue, "order:7") == [
        (EventKind.OFFERED, "shop", None), (EventKind.UPDATED, "admin", None),
        (EventKind.CLAIMED, "worker-a", 1), (EventKind.FAILED, "worker-a", 1),
        (EventKind.CLAIMED, "worker-b", 2), (EventKind.ACKED, "worker-b", 2)]
    events = queue.history("order:7")
    assert "SMTP timeout" in events[3].detail
    assert events[3].at < events[4].at  # the retry came a second later
    assert queue.get("order:7") is None  # done, and the story is still there


def test_a_worker_failing_then_succeeding_is_in_the_history(make_queue, clock, front):
    queue = make_queue(history=True)
    queue.offer("k", 1)
    calls = []

    def handler(envelope):
        calls.append(envelope.attempt)
        if envelope.attempt == 1:
            raise ValueError("first try fails")

    worker = front.worker(queue, handler, name="billing-worker",
                          retry=RetryPolicy.fixed(timedelta(0), max_attempts=3), listeners=[])
    assert worker.drain() == 2
    wait_for(lambda: queue.get("k") is None, what="the ack")
    assert [(kind, actor) for kind, actor, _ in timeline(queue, "k")] == [
        (EventKind.OFFERED, process_actor()), (EventKind.CLAIMED, "billing-worker"),
        (EventKind.FAILED, "billing-worker"), (EventKind.CLAIMED, "billing-worker"),
        (EventKind.ACKED, "billing-worker")]
    assert "ValueError: first try fails" in queue.history("k")[2].detail


def test_dead_letter_requeue_ack(make_queue, clock, front):
    queue = make_queue(history=True)
    queue.offer("k", 1, by="shop")
    front.worker(queue, lambda envelope: 1 / 0, name="w", listeners=[],
                 retry=RetryPolicy.fixed(S, max_attempts=1)).drain()
    letters = front.dead_letters(queue)
    [dead] = letters.list(queue.name)
    assert dead.enqueued_by == "shop"
    assert letters.requeue([dead.id], by="operator") == 1
    back = queue.poll(by="w2")
    assert back.enqueued_by == "shop" and back.attempt == 1
    assert back.ack()
    kinds = timeline(queue, "k")
    assert kinds == [(EventKind.OFFERED, "shop", None), (EventKind.CLAIMED, "w", 1),
                     (EventKind.DEAD_LETTERED, "w", 1), (EventKind.REQUEUED, "operator", None),
                     (EventKind.CLAIMED, "w2", 1), (EventKind.ACKED, "w2", 1)]
    assert "ZeroDivisionError" in queue.history("k")[2].detail


def test_the_cli_prints_a_timeline(make_queue, clock, backend_url, table_name, capsys,
                                   monkeypatch):
    from sqldelay.cli import main

    monkeypatch.delenv("COLUMNS", raising=False)  # piped, as to a grep: a row a line
    queue = make_queue(history=True)
    queue.offer("order:7", 1, by="shop")
    queue.poll(by="w1").ack()
    db = ["--url", backend_url, "--table", table_name]
    assert main(["history", *db, queue.name, "order:7"]) == 0
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]  # a table's rows, one a line
            for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("offered", "shop", ""), ("claimed", "w1", "1"), ("acked", "w1", "1")]
    assert main(["history", *db, queue.name, "order:7", "--json"]) == 0
    assert '"event": "claimed"' in capsys.readouterr().out.splitlines()[1]
    assert main(["history", *db, queue.name, "nope"]) == 1
    assert "no history for key 'nope'" in capsys.readouterr().err
    assert main(["history", "--url", backend_url, "--table", "nowhere", queue.name,
                 "order:7"]) == 1
    error = capsys.readouterr().err  # the command names what is missing and what makes it
    assert "the queue table 'nowhere' does not exist" in error and "sqldelay migrate" in error


def test_drops_clears_and_dead_letter_drops_are_recorded(make_queue, clock, front):
    queue = make_queue(history=History(ignored=True))
    queue.offer_many([Message(f"k{i}", i) for i in range(5)], by="seed")
    queue.offer("k0", 0, by="again")  # unchanged: recorded as ignored here
    assert queue.drop("k1", by="ops")
    assert not queue.drop("k1", by="ops")  # nothing to drop: no event
    assert queue.clear(by="ops") == 4
    front.worker(queue, print, listeners=[]).drain()  # nothing left to handle
    queue.offer("k9", 9)
    front.worker(queue, lambda e: 1 / 0, listeners=[],
                 retry=RetryPolicy.fixed(S, max_attempts=1)).drain()
    letters = front.dead_letters(queue)
    assert letters.drop([d.id for d in letters.list(queue.name)], by="ops") == 1
    assert [k for k, *_ in timeline(queue, "k0")] == [
        EventKind.OFFERED, EventKind.IGNORED, EventKind.CLEARED]
    assert timeline(queue, "k1")[-1] == (EventKind.DROPPED, "ops", None)
    assert [k for k, *_ in timeline(queue, "k9")][-1] is EventKind.DROPPED
    assert [k for k, *_ in timeline(queue, "k4")] == [EventKind.OFFERED, EventKind.CLEARED]


def test_the_producer_and_holder_are_on_the_message(make_queue, clock):
    recorded, plain = make_queue(history=True), make_queue()
    recorded.offer("a", 1)
    plain.offer("b", 1)
    plain.offer("c", 1, by="named")
    assert recorded.get("a").enqueued_by == process_actor()  # the default with history
    assert plain.get("b").enqueued_by is None  # without history, nothing is written...
    assert plain.get("c").enqueued_by == "named"  # ...but what is given
    held = recorded.poll(by="w-1")
    assert recorded.get("a").claimed_by == "w-1" and held.claimed_by == "w-1"
    assert recorded.release(held)
    assert recorded.get("a").claimed_by is None  # not in flight: nobody holds it
    assert plain.poll().claimed_by is None


def test_history_is_per_queue_and_survives_reoffers_of_the_key(make_queue, clock):
    queue, other = make_queue(history=True), make_queue(history=True)
    queue.offer("k", 1)
    other.offer("k", 1)
    queue.poll().ack()
    queue.offer("k", 2)  # the key again, after the first message is done
    assert [k for k, *_ in timeline(queue, "k")] == [
        EventKind.OFFERED, EventKind.CLAIMED, EventKind.ACKED, EventKind.OFFERED]
    assert [k for k, *_ in timeline(other, "k")] == [EventKind.OFFERED]


def test_retention_prunes_only_what_is_older_than_asked(make_queue, clock):
    queue = make_queue(history=timedelta(days=1))
    queue.offer_many([Message(f"old{i}", i) for i in range(7)])
    clock.advance(timedelta(days=2))
    queue.offer_many([Message(f"new{i}", i) for i in range(3)])
    assert queue.prune_history(batch=2) == 7  # in batches of 2, each its own transaction
    assert all(queue.history(f"old{i}") == [] for i in range(7))
    assert all(len(queue.history(f"new{i}")) == 1 for i in range(3))
    assert queue.prune_history(timedelta(hours=1)) == 0  # the new ones are not an hour old
    assert queue.get("old0") is not None  # pruning history leaves messages alone


def test_a_worker_prunes_the_history_of_its_queues(make_queue, clock, front):
    queue = make_queue(history=timedelta(hours=1))
    queue.offer("old", 1, clock.now() + timedelta(days=1))
    clock.advance(timedelta(hours=2))
    worker = front.worker(queue, print, listeners=[], idle_poll=timedelta(minutes=5),
                          wake_ups=False)
    thread = in_thread(worker.run)
    try:
        wait_for(lambda: queue.history("old") == [], what="the worker's pruning")
    finally:
        worker.stop()
        thread.join(20)
    assert queue.get("old") is not None


def test_bad_history_arguments_are_refused(make_queue, front):
    with pytest.raises(InvalidArgumentError, match="history must be"):
        make_queue(history="yes")
    with pytest.raises(InvalidArgumentError, match="retention must be positive"):
        make_queue(history=timedelta(0))
    queue = make_queue()
    with pytest.raises(InvalidArgumentError, match="keeps no history"):
        queue.history("k")
    with pytest.raises(InvalidArgumentError, match="by"):
        queue.offer("k", 1, by="")
    with pytest.raises(InvalidArgumentError, match="by"):
        queue.offer("k", 1, by="x" * 201)
    with pytest.raises(InvalidArgumentError, match="no history retention"):
        make_queue(history=True).prune_history()
    with pytest.raises(InvalidArgumentError, match="name"):
        front.worker(queue, print, name="\x00")
    assert queue.get("k") is None  # nothing written


# ---- a consumer killed while it holds a message -------------------------------------------

HOLDER = """
import sys
from datetime import timedelta
import sqlalchemy as sa
from sqldelay import DelayedQueue
queue = DelayedQueue(sa.create_engine(sys.argv[1]), sys.argv[2], table_name=sys.argv[3],
                     acquire_timeout=timedelta(minutes=1), history=True)
print(queue.poll(by="doomed").key, flush=True)
sys.stdin.read()  # hold it until killed
"""


def test_a_redelivery_after_a_killed_consumer_shows_the_lost_lock(backend_url, engine,
                                                                 table_name):
    queue = DelayedQueue(engine, unique_name("q"), table_name=table_name, history=True)
    queue.offer("k", 1, by="shop")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, backend_url, queue.name, table_name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "k"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    later = DelayedQueue(engine, queue.name, table_name=table_name, history=True,
                         clock=FakeClock(SystemClock().now() + timedelta(minutes=2)))
    again = later.poll(by="survivor")
    assert again.attempt == 2
    assert again.ack()
    assert timeline(later, "k") == [
        (EventKind.OFFERED, "shop", None), (EventKind.CLAIMED, "doomed", 1),
        (EventKind.LOCK_EXPIRED, "doomed", 1), (EventKind.CLAIMED, "survivor", 2),
        (EventKind.ACKED, "survivor", 2)]
    assert "survivor" in later.history("k")[2].detail


# ---- no change without its event, no event without its change ---------------------------------

CRASHER = """
import os, signal, sys
import sqlalchemy as sa
from sqldelay import DelayedQueue, FakeClock
engine = sa.create_engine(sys.argv[1])
queue = DelayedQueue(engine, sys.argv[2], table_name=sys.argv[3], history=True,
                     clock=FakeClock())
held = queue.poll_many(10, by="crasher")

@sa.event.listens_for(engine, "before_cursor_execute")
def die_before_the_events(conn, cursor, statement, parameters, context, executemany):
    if "_history" in statement:  # the change is sent, its events are next: die
        os.kill(os.getpid(), signal.SIGKILL)

queue.ack_many(held)
"""


def test_a_crash_between_a_change_and_its_events_leaves_neither(backend_url, engine,
                                                               table_name):
    queue = DelayedQueue(engine, unique_name("q"), table_name=table_name, history=True,
                         clock=FakeClock())
    queue.offer_many([Message(f"k{i}", i) for i in range(3)])
    done = subprocess.run([sys.executable, "-c", CRASHER, backend_url, queue.name, table_name],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    # the acks were sent but never committed: the messages are still held, not acked
    assert queue.stats().in_flight == 3
    for i in range(3):
        assert [k for k, *_ in timeline(queue, f"k{i}")] == [EventKind.OFFERED,
                                                              EventKind.CLAIMED]


def test_a_rolled_back_transaction_leaves_no_events(engine, table_name):
    queue = DelayedQueue(engine, unique_name("q"), table_name=table_name, history=True)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        queue.offer("k", 1, connection=conn)
        raise RuntimeError("the business write failed")
    assert queue.history("k") == [] and queue.get("k") is None


# ---- what history costs in statements ----------------------------------------------------------

class Statements:
    """The statements an engine sends while in use."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine, self.sent = engine, []

    def __enter__(self) -> Statements:
        sa.event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *exc) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.sent.append(" ".join(statement.split()))


def _round(queue: DelayedQueue, n: int) -> None:
    queue.offer_many([Message(f"k{i}", i) for i in range(n)])
    queue.ack_many(queue.poll_many(n))


def test_history_costs_one_statement_per_chunk_and_nothing_when_off(engine, table_name):
    plain = DelayedQueue(engine, unique_name("q"), table_name=table_name, clock=FakeClock())
    recorded = DelayedQueue(engine, unique_name("q"), table_name=table_name, history=True,
                            clock=FakeClock())
    _round(plain, 5)  # warm: the drivers' and the library's first-use statements
    _round(recorded, 5)
    with Statements(engine) as off:
        _round(plain, 50)
    with Statements(engine) as on:
        _round(recorded, 50)
    # off: the history table is never touched and nobody is named on the messages
    assert not any("_history" in s for s in off.sent)
    assert not any(s.startswith("INSERT") and "enqueued_by" in s for s in off.sent)
    assert not any(f"{column}{eq}" in s for s in off.sent
                   for column in ("enqueued_by", "claimed_by") for eq in ("=", " ="))
    # on: one events statement for the offer's chunk, one for the claim, one for the acks,
    # and where a DELETE cannot say what it deleted, or cannot say it and reach its rows
    # through the primary key at once (MySQL and MariaDB: ``MySQLQueueDao.delete_which``),
    # a locking read of what the acks take; where the plain offer of new keys is an insert
    # alone (MySQL's ``inserts_first``), the offer that writes events also sends the usual
    # way's SET TRANSACTION and locking read; where the offer's, the claim's or the ack's own
    # statement writes its events (PostgreSQL's ``offer_writes_history``,
    # ``claim_writes_history``, ``ack_writes_history``), it sends nothing more than without them
    assert sum("_history" in s for s in on.sent) == 3
    in_offer = plain.dao.offer_writes_history
    in_claim = plain.dao.claim_writes_history
    in_ack = plain.dao.ack_writes_history
    usual_way = 2 if plain.dao.inserts_first and not in_offer else 0
    reads_first = not plain.dao.delete_returning or engine.dialect.name in ("mysql", "mariadb")
    assert len(on.sent) - len(off.sent) == (3 - in_offer - in_claim - in_ack + reads_first
                                          + usual_way)


# ---- under load, once per database -------------------------------------------------------------

def test_concurrent_producers_and_consumers_leave_a_consistent_history(engine, table_name):
    """4 producers offer 5,000 keys (each about twice, so some updates race claims), 4
    consumers claim and ack, some producers' transactions roll back. Per key the history
    agrees with what the test saw: one acked event per acknowledged message, attempts rising
    within each message's life, every ack by the consumer whose claim it followed, and no
    event of a rolled-back offer."""
    name = unique_name("q")
    queue = DelayedQueue(engine, name, table_name=table_name, history=True)
    keys = [f"k{i}" for i in range(5000)]
    acked: Counter[str] = Counter()  # by key, the acks of the one-by-one consumers
    batch_acks: Counter[str] = Counter()  # by consumer, what the batch consumers' acks said
    rolled_back: set[str] = set()
    lock = threading.Lock()
    producing = threading.Event()
    errors = []

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for start in range(0, len(keys), 250):
                batch = rng.sample(keys[start:start + 250], 125)
                queue.offer_many([Message(k, seed) for k in batch], by=f"p{seed}")
                if rng.random() < 0.2:  # a business transaction that fails after its offer
                    doomed = [f"rb{seed}-{start}-{j}" for j in range(3)]
                    try:
                        with engine.begin() as conn:
                            queue.offer_many([Message(k, 0) for k in doomed], connection=conn)
                            raise LookupError("rolled back")
                    # in the caller's transaction nothing is retried: at MySQL's REPEATABLE
                    # READ its gap locks may deadlock with the other producers, which rolls
                    # it back just the same
                    except (LookupError, sa.exc.OperationalError):
                        with lock:
                            rolled_back.update(doomed)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    def consume(n: int) -> None:
        # even consumers ack one by one (each ack says whether it went), odd ones in batches
        consumer = DelayedQueue(engine, name, table_name=table_name, history=True)
        try:
            while producing.is_set() or consumer.stats().due:
                got = consumer.poll_many(50, by=f"c{n}")
                if n % 2 == 0:
                    done = [e.key for e in got if consumer.ack(e)]
                    with lock:
                        acked.update(done)
                else:
                    went = consumer.ack_many(got)
                    with lock:
                        batch_acks[f"c{n}"] += went
        except Exception as exc:  # surfaced below
            errors.append(exc)

    producing.set()
    producers = [in_thread(lambda s=s: produce(s)) for s in range(4)]
    consumers = [in_thread(lambda n=n: consume(n)) for n in range(4)]
    for t in producers:
        t.join(600)
    producing.clear()
    for t in consumers:
        t.join(600)
    assert errors == []
    assert queue.stats().due == 0

    h = sa.Table(f"{table_name}_history", sa.MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(h.c.pkey, h.c.kind, h.c.actor, h.c.attempt)
                            .where(h.c.pkind == queue.pkind).order_by(h.c.id)).all()
    events: dict[str, list] = defaultdict(list)
    for r in rows:
        events[r.pkey].append(r)
    assert not rolled_back & set(events)  # no event of a rolled-back offer
    by_batches: Counter[str] = Counter()
    for key, story in events.items():
        kinds = [e.kind for e in story]
        single = sum(e.kind == "acked" and e.actor in ("c0", "c2") for e in story)
        assert single == acked[key], (key, kinds)
        assert kinds.count("acked") <= kinds.count("offered") + kinds.count("updated")
        holder, attempt = None, 0
        for e in story:
            if e.kind in ("offered", "updated"):
                attempt = 0  # a new or replaced message starts its attempts again
            elif e.kind == "claimed":
                assert e.attempt == attempt + 1, (key, kinds)
                holder, attempt = e.actor, e.attempt
            elif e.kind == "acked":
                assert (e.actor, e.attempt) == (holder, attempt), (key, story)
                if e.actor in ("c1", "c3"):
                    by_batches[e.actor] += 1
    assert by_batches == batch_acks
