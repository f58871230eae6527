"""Flow control on every target: priorities, groups, pause, the concurrency cap and the rate
limit, each as a consumer sees it. The processes and timings that prove them under load are
in test_flow_control_load.py."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    FakeClock,
    InvalidArgumentError,
    Message,
    OfferOutcome,
    RetryPolicy,
    SystemClock,
    WorkerListener,
)
from sqldelay.dialects import postgresql

from ..helpers import in_thread, wait_for

S = timedelta(seconds=1)


# ---- priorities -----------------------------------------------------------------------------

def test_higher_priority_first_among_due_messages_then_due_order(queue, clock):
    now = clock.now()
    queue.offer_many([
        Message("news-1", 1, now - 3 * S), Message("news-2", 2, now - 2 * S),
        Message("reset", 3, now - 1 * S, priority=10),
        Message("alert-late", 4, now, priority=10), Message("low", 5, now - 9 * S, priority=-1),
        Message("urgent-tomorrow", 6, now + 86_400 * S, priority=100),  # never claimed early
    ])
    got = queue.poll_many(10)
    assert [e.key for e in got] == ["reset", "alert-late", "news-1", "news-2", "low"]
    assert [e.priority for e in got] == [10, 10, 0, 0, -1]
    assert queue.poll() is None


def test_an_update_may_change_the_priority(queue, clock):
    now = clock.now()
    queue.offer_many([Message("a", 1, now - S), Message("b", 2, now)])
    assert queue.offer("b", 2, now) is OfferOutcome.IGNORED
    assert queue.offer("b", 2, now, priority=5) is OfferOutcome.UPDATED
    assert queue.get("b").priority == 5
    assert [e.key for e in queue.poll_many(2)] == ["b", "a"]


@pytest.mark.parametrize("priority", [1.5, "1", True, 2**31, -(2**31) - 1])
def test_bad_priorities_are_refused_before_anything_is_written(queue, priority):
    with pytest.raises(InvalidArgumentError, match="priority"):
        queue.offer_many([Message("a", 1), Message("b", 1, priority=priority)])
    assert not queue.contains("a")


@pytest.mark.parametrize("group, problem", [("", "empty"), ("g" * 201, "201 characters"),
                                            ("a\x00b", "NUL"), (7, "must be a str")])
def test_bad_groups_are_refused_before_anything_is_written(queue, group, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        queue.offer_many([Message("a", 1), Message("b", 1, group=group)])
    assert not queue.contains("a")


# ---- groups ------------------------------------------------------------------------------

def test_one_message_per_group_in_flight_taken_in_order(make_queue, clock):
    queue = make_queue(acquire_timeout=30 * S)
    now = clock.now()
    queue.offer_many(
        [Message(f"o7-{i}", i, now - (10 - i) * S, group="order:7") for i in range(3)]
        + [Message(f"o8-{i}", i, now - (10 - i) * S, group="order:8") for i in range(2)]
        + [Message("loose", 0, now)])
    first = queue.poll_many(10)  # at most one per group, each group's first
    assert sorted(e.key for e in first) == ["loose", "o7-0", "o8-0"]
    assert {e.group for e in first} == {"order:7", "order:8", None}
    assert queue.poll_many(10) == []  # both groups in flight
    by_key = {e.key: e for e in first}
    assert by_key["o7-0"].ack() is True  # acked: the group's next goes
    assert [e.key for e in queue.poll_many(10)] == ["o7-1"]
    assert by_key["o8-0"].release() is True  # released: due now again, and first again
    assert [e.key for e in queue.poll_many(10)] == ["o8-0"]


def test_a_message_released_for_an_immediate_retry_stays_its_groups_head(make_queue, clock):
    # A claim reads the time before its statement runs; a release that commits in between,
    # due "now" by its own later reading, made the head not yet due for that claim, which
    # took the group's next message (3 order violations in 5,123 PostgreSQL messages).
    queue = make_queue(acquire_timeout=30 * S)
    start = clock.now()
    queue.offer_many([Message(f"k{i}", i, start - (5 - i) * S, group="g") for i in range(3)])
    head = queue.poll()
    assert head.key == "k0"
    clock.advance(2 * S)
    assert head.release() is True
    earlier = FakeClock(clock.now() - S)  # a claim whose reading is a second older
    behind = make_queue(queue.name, clock=earlier, acquire_timeout=30 * S)
    assert [(e.key, e.attempt) for e in behind.poll_many(10)] == [("k0", 2)]


def test_a_message_put_off_lets_its_group_go_on_and_goes_first_once_due_again(make_queue,
                                                                              clock):
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"k{i}", i, clock.now() - (5 - i) * S, group="g")
                      for i in range(3)])
    first = queue.poll()
    assert first.key == "k0" and first.release(delay=10 * S) is True
    nxt = queue.poll_many(10)  # the group's next due message goes meanwhile
    assert [e.key for e in nxt] == ["k1"] and nxt[0].ack() is True
    clock.advance(11 * S)  # k0 is due again: ahead of k2, due earlier, by its first due time
    again = queue.poll_many(10)
    assert [(e.key, e.attempt) for e in again] == [("k0", 2)]


def test_a_group_whose_holder_vanished_resumes_when_the_lock_expires(make_queue, clock):
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"k{i}", i, clock.now() - (5 - i) * S, group="g") for i in range(2)])
    held = queue.poll()
    assert held.key == "k0" and queue.poll() is None
    clock.advance(31 * S)  # the holder never acked: its lock, and the group's, expire
    again = queue.poll()
    assert (again.key, again.attempt) == ("k0", 2)  # the same message first, redelivered
    assert held.ack() is False and again.ack() is True
    assert queue.poll().key == "k1"


def test_extending_a_grouped_message_keeps_its_group(make_queue, clock):
    queue = make_queue(acquire_timeout=10 * S)
    queue.offer_many([Message(f"k{i}", i, clock.now() - (5 - i) * S, group="g") for i in range(2)])
    env = queue.poll()
    clock.advance(8 * S)
    assert env.extend(10 * S) is True
    clock.advance(8 * S)  # past the first expiry, within the extension
    assert queue.poll() is None
    assert env.ack() is True and queue.poll().key == "k1"


def test_an_expired_lock_is_not_extended_once_its_group_went_on(make_queue, clock):
    queue = make_queue(acquire_timeout=30 * S)
    other = make_queue(queue.name)  # another consumer of the same queue
    queue.offer("m1", 1, at=clock.now() - 5 * S, group="g")
    late = queue.poll()
    assert late.key == "m1"
    # m2 goes first in the group once it is free: it was asked for before m1
    queue.offer("m2", 2, at=clock.now() - 10 * S, group="g")
    clock.advance(31 * S)  # m1's holder is late: its lock, and the group's turn, expire
    taken = other.poll_many(10)
    assert [e.key for e in taken] == ["m2"]  # the group's turn, now another consumer's
    assert queue.extend(late) is False  # as its ack would be: two in flight in one group
    assert other.poll_many(10) == []  # m1 is due again, its group held by m2
    assert queue.stats().in_flight == 1
    assert taken[0].ack() is True
    assert [(e.key, e.attempt) for e in other.poll_many(10)] == [("m1", 2)]


def test_an_expired_lock_is_not_extended_once_its_place_under_the_cap_went(make_queue,
                                                                          clock):
    queue = make_queue(acquire_timeout=30 * S)
    other = make_queue(queue.name)
    queue.set_concurrency_limit(1)
    queue.offer_many([Message("m1", 1, clock.now() - 5 * S), Message("m2", 2, clock.now())])
    late = queue.poll()
    assert late.key == "m1"
    clock.advance(31 * S)  # m1's lock expired: it no longer counts against the cap
    assert [e.key for e in other.poll_many(10)] == ["m2"]  # due before m1's expiry
    assert queue.extend(late) is False  # or 2 would be in flight under a cap of 1
    assert queue.stats().in_flight == 1


def test_an_expired_lock_nothing_took_is_extended(make_queue, clock):
    # an ungrouped message of a queue without a cap holds nothing another claim can take
    # from it but the message itself, which a claim would have locked anew
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer("m", 1, at=clock.now() - 5 * S)
    late = queue.poll()
    clock.advance(31 * S)
    assert queue.extend(late) is True
    assert queue.poll() is None and late.ack() is True


def test_a_dead_letter_frees_its_group(make_queue, front, clock):
    queue = make_queue()
    queue.offer_many([Message(f"k{i}", i, clock.now() - (5 - i) * S, group="g") for i in range(2)])
    handled = []

    def handler(envelope):
        handled.append(envelope.key)
        if envelope.key == "k0":
            raise RuntimeError("give up")

    front.worker(queue, handler, retry=RetryPolicy.fixed(S, max_attempts=1),
                 listeners=[]).drain()
    assert handled == ["k0", "k1"]
    [dead] = front.dead_letters(queue).list(queue.name)
    assert (dead.key, dead.group) == ("k0", "g")
    assert front.dead_letters(queue).requeue([dead.id]) == 1
    back = queue.get("k0")
    assert back.group == "g" and queue.poll().key == "k0"


def test_an_ungrouped_message_behind_a_long_group_is_claimed_beside_its_head(make_queue, clock):
    # the claim reads the first due messages in claim order (a few times the batch) to find
    # free groups; an ungrouped message further on still fills the room the groups leave
    queue = make_queue(acquire_timeout=30 * S)
    now = clock.now()
    queue.offer_many([Message(f"a{i:03}", i, now - 200 * S + i * S, group="a")
                      for i in range(150)] + [Message("late", 0, now)])
    assert [e.key for e in queue.poll_many(10)] == ["a000", "late"]


def test_an_ungrouped_message_whose_holder_vanished_comes_back_from_behind_a_long_group(
        make_queue, clock):
    # as above, with both claimed and never acked: once their locks expire they are due
    # behind the whole group, further than the walk reads. PostgreSQL's claim learns that
    # the queue has an ungrouped message to take from the expired locks too: its group index
    # holds only the ungrouped messages waiting, not the claimed ones
    queue = make_queue(acquire_timeout=30 * S)
    now = clock.now()
    queue.offer_many([Message(f"a{i:03}", i, now - 200 * S + i * S, group="a")
                      for i in range(150)] + [Message("late", 0, now)])
    assert [e.key for e in queue.poll_many(10)] == ["a000", "late"]
    clock.advance(31 * S)
    assert [(e.key, e.attempt) for e in queue.poll_many(10)] == [("a000", 2), ("late", 2)]


@pytest.mark.parametrize("busy_read", [None, 3], ids=["busy groups read", "three read"])
@pytest.mark.parametrize("limit", [2, 10])
def test_a_claim_finds_free_groups_behind_more_busy_groups_than_it_walks(
        make_queue, engine, clock, monkeypatch, busy_read, limit):
    # the walk (four times the batch and 16) passes over the messages of groups in flight
    # without counting them. On PostgreSQL it reads the busy groups' names once, no more than
    # it walks messages nor than a bound (here made three), and past that probes each
    # message's group: a claim of 2 walks 24 messages, fewer than the 30 busy groups
    if busy_read is not None:
        if engine.dialect.name != "postgresql":
            pytest.skip("only PostgreSQL's walk reads the busy groups up to a bound")
        monkeypatch.setattr(postgresql, "_BUSY_READ", busy_read)
    queue = make_queue(acquire_timeout=30 * S)
    now = clock.now()
    queue.offer_many([Message(f"b{i:02}-{j}", 0, now - (100 - j) * S, group=f"b{i:02}")
                      for i in range(30) for j in range(2)]
                     + [Message(f"free{i}", 0, now - S, group=f"f{i}") for i in range(3)])
    assert len(queue.poll_many(30)) == 30  # each b group's first message, in flight
    # the next 30 due messages in claim order are of busy groups
    assert [e.key for e in queue.poll_many(limit)] == ["free0", "free1", "free2"][:limit]


@pytest.mark.parametrize("transaction", ["its own", "the caller's"])
def test_a_claim_whose_groups_were_taken_while_it_walked_walks_again(
        make_queue, engine, front, clock, monkeypatch, transaction):
    # PostgreSQL's walk locks the groups it saw free in its snapshot; a claim of the same
    # groups that committed while the walk ran has released their locks by then, and the
    # heads' claim, whose snapshot is later, finds the groups busy. Here that other claim
    # commits just after the walk, from another connection, as it would from another process
    if engine.dialect.name != "postgresql":
        pytest.skip("only PostgreSQL's grouped claim walks the messages before it locks")
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"{g}{i}", 0, clock.now() - (10 - i) * S, group=g)
                      for g in "abcd" for i in range(2)])
    t, dao = queue.dao.table, queue.dao
    walk, walked = dao._walk, []

    def walk_then_taken(conn, gated, own_transaction, params):
        row = walk(conn, gated, own_transaction, params)
        if not walked:
            walked.append(json.loads(row[0]))
            with engine.begin() as other:
                other.execute(sa.update(t).where(
                    t.c.pkind == params["b_kind"], t.c.pkey.in_([f"{g}0" for g in walked[0]]))
                    .values(lock_uuid="other", scheduled_at=params["b_now"] + 30_000))
        return row

    monkeypatch.setattr(dao, "_walk", walk_then_taken)
    if transaction == "its own":
        got = queue.poll_many(2)
    else:
        with front.connect() as conn:
            got = queue.poll_many(2, connection=conn)
            conn.commit()
    assert walked == [["a", "b"]]
    assert [e.key for e in got] == ["c0", "d0"]  # not nothing, with c and d free all along


def test_a_group_met_for_the_first_time_keeps_its_place_in_claim_order(make_queue, clock):
    # a claim that meets a group without a row yet makes the row; the group's head must still
    # go before the later messages of groups that have one
    queue = make_queue(acquire_timeout=30 * S)
    now = clock.now()
    queue.offer_many([Message(f"old{i}", i, now - 10 * S, group="old") for i in range(2)])
    first = queue.poll()
    assert first.key == "old0" and first.ack() is True  # "old" has its row, free again
    queue.offer("new", 0, at=now - 5 * S, priority=1, group="new")
    assert [e.key for e in queue.poll_many(1)] == ["new"]
    assert [e.key for e in queue.poll_many(1)] == ["old1"]


def test_controls_set_beside_groups_since_the_last_claim_hold_at_once(make_queue, clock):
    queue = make_queue()
    other = make_queue(queue.name)  # another object of the same queue, as another process
    queue.offer_many([Message(f"{g}{i}", i, clock.now() - (5 - i) * S, group=g)
                      for g in ("x", "y", "z") for i in range(2)])
    assert [e.key for e in queue.poll_many(1)] == ["x0"]  # claimed as a grouped queue
    other.pause()
    assert queue.poll_many(10) == []
    other.resume()
    other.set_concurrency_limit(2)
    assert [e.key for e in queue.poll_many(10)] == ["y0"]  # x0 and y0 in flight: the cap
    other.set_concurrency_limit(None)
    assert [e.key for e in queue.poll_many(10)] == ["z0"]


def test_a_grouped_claim_in_the_callers_transaction_keeps_groups_serial_and_rolls_back(
        make_queue, front, clock):
    # the claim takes the group-aware path in the caller's transaction: once for groups met
    # for the first time, once beside a concurrency cap (the path that locks the settings)
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"{g}{i}", i, clock.now() - (5 - i) * S, group=g)
                      for g in ("x", "y") for i in range(3)] + [Message("loose", 0)])
    for cap in (None, 10):
        queue.set_concurrency_limit(cap)
        with front.connect() as conn:
            got = queue.poll_many(10, connection=conn)
            assert sorted(e.key for e in got) == ["loose", "x0", "y0"]
            assert queue.poll_many(10, connection=conn) == []  # both groups held, in here too
            conn.rollback()  # the claims, and the groups' marks, undone with the transaction
        assert queue.stats().in_flight == 0
    with front.connect() as conn:
        got = queue.poll_many(10, connection=conn)
        conn.commit()
    assert sorted(e.key for e in got) == ["loose", "x0", "y0"]
    assert queue.poll_many(10) == []  # committed: the groups stay held outside it
    assert queue.ack_many(got) == 3
    assert sorted(e.key for e in queue.poll_many(10)) == ["x1", "y1"]


def test_a_claim_passes_over_a_group_an_open_claim_took_and_still_once_it_commits(
        make_queue, engine, front, clock):
    queue = make_queue(acquire_timeout=30 * S)
    if not queue.dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: one claim "
                    "at a time")
    queue.offer_many([Message(f"{g}{i}", i, clock.now() - (5 - i) * S, group=g)
                      for g in ("x", "y") for i in range(2)])
    # each group met once before (where groups have rows, a claim meeting a new group makes
    # its row, and a second claim would wait for the first to commit that row)
    assert all(e.release() for e in queue.poll_many(10))
    with front.connect() as conn:
        held = queue.poll_many(1, connection=conn)  # x0, not committed yet
        assert [e.key for e in held] == ["x0"]
        # x0 looks unclaimed outside the open transaction, but its group is taken
        assert [e.key for e in queue.poll_many(10)] == ["y0"]
        conn.commit()
    assert queue.poll_many(10) == []  # committed: x0 in flight holds x
    assert queue.ack_many(held) == 1
    assert [e.key for e in queue.poll_many(10)] == ["x1"]


def test_a_grouped_claim_at_repeatable_read_is_refused_on_postgresql(make_queue, engine,
                                                                     front, clock):
    # its second statement would see the transaction's first snapshot, not the claims that
    # committed since, and could take a second message of a group
    if engine.dialect.name != "postgresql":
        pytest.skip("only PostgreSQL reads a group's state from its messages")
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"x{i}", i, clock.now() - (5 - i) * S, group="x")
                      for i in range(2)])
    with front.connect() as conn:
        conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        with pytest.raises(InvalidArgumentError, match="needs READ COMMITTED.*REPEATABLE READ"):
            queue.poll_many(10, connection=conn)
        conn.rollback()
    assert queue.stats().in_flight == 0
    assert [e.key for e in queue.poll_many(10)] == ["x0"]


def test_a_group_row_is_kept_while_the_group_has_messages_and_dropped_with_the_last(
        make_queue, engine, table_name, clock):
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message(f"{g}{i}", i, clock.now() - (5 - i) * S, group=g)
                      for g in ("x", "y") for i in range(2)])

    def rows() -> dict:
        return _group_rows(engine, table_name, queue)

    # PostgreSQL keeps no group rows: a group is held by its message in flight alone
    rows_kept = engine.dialect.name != "postgresql"
    first = queue.poll_many(10)
    assert sorted(e.key for e in first) == ["x0", "y0"]
    assert rows() == ({"x": True, "y": True} if rows_kept else {})
    assert queue.poll_many(10) == []
    assert queue.ack_many(first) == 2
    assert rows() == ({"x": False, "y": False} if rows_kept else {})  # freed, messages left
    second = queue.poll_many(10)
    assert sorted(e.key for e in second) == ["x1", "y1"]
    assert queue.ack_many(second) == 2
    assert rows() == {}  # both emptied: no row left behind


def _group_rows(engine, table_name, queue) -> dict:
    """The rows of ``queue``'s groups: whether each is held."""
    groups = sa.table(f"{table_name}_groups", sa.column("pkind"), sa.column("group_key"),
                      sa.column("lock_uuid"))
    with engine.connect() as conn:
        return {r.group_key: r.lock_uuid is not None for r in conn.execute(
            sa.select(groups.c.group_key, groups.c.lock_uuid)
            .where(groups.c.pkind == queue.pkind))}


def test_an_ack_in_the_callers_transaction_drops_the_group_it_empties_there(
        make_queue, front, engine, table_name, clock):
    # where the dialect drops emptied groups in a transaction after the ack's (MySQL,
    # MariaDB), in the caller's transaction the drop is part of it: undone with it
    queue = make_queue(acquire_timeout=30 * S)
    queue.offer_many([Message("x0", 0, clock.now() - S, group="x")])
    rows_kept = engine.dialect.name != "postgresql"  # as above
    first = queue.poll_many(10)
    with front.connect() as conn:
        assert queue.ack_many(first, connection=conn) == 1
        conn.rollback()
    assert queue.stats().in_flight == 1 and _group_rows(engine, table_name, queue) == (
        {"x": True} if rows_kept else {})
    with front.connect() as conn:
        assert queue.ack_many(first, connection=conn) == 1
        conn.commit()
    assert queue.stats().in_flight == 0 and _group_rows(engine, table_name, queue) == {}


# ---- pause, caps, rate limits --------------------------------------------------------------

def test_pause_stops_claims_at_once_and_resume_restarts_them(make_queue, clock):
    queue = make_queue()
    queue.offer("before", 1)
    queue.pause()
    assert queue.flow_control().paused
    assert queue.offer("during", 2) is OfferOutcome.CREATED  # offers still land
    assert queue.poll_many(10) == []
    other = make_queue()  # another queue of the table is not paused
    other.offer("x", 1)
    assert other.poll().key == "x"
    queue.resume()
    assert sorted(e.key for e in queue.poll_many(10)) == ["before", "during"]


def test_pause_reaches_a_running_worker_at_its_next_claim(make_queue, front):
    queue = make_queue(clock=SystemClock())
    handled = []
    got = threading.Event()

    def handler(envelope):
        handled.append(envelope.key)
        got.set()

    worker = front.worker(queue, handler, idle_poll=timedelta(milliseconds=50), wake_ups=False,
                          listeners=[])
    thread = in_thread(worker.run)
    try:
        queue.offer("first", 1)
        assert got.wait(20)
        queue.pause()
        got.clear()
        queue.offer("while-paused", 2)
        for _ in range(5):  # a few idle polls of the worker, none of which may claim it
            assert not got.wait(0.1)
        assert handled == ["first"] and queue.get("while-paused").deliveries == 0
        queue.resume()
        assert got.wait(20)
    finally:
        worker.stop()
        thread.join(20)
    assert handled == ["first", "while-paused"]


def test_resume_wakes_a_listening_worker(make_queue, front):
    queue = make_queue(clock=SystemClock())
    if not queue.dao.notifications:
        pytest.skip(f"{queue.dao.name} has no notifications (workers see a resume at idle_poll)")
    got = threading.Event()
    ready = threading.Event()
    queue.pause()
    queue.offer("waiting", 1)
    # idle for five minutes: only the resume's notification can bring the message in time
    worker = front.worker(queue, lambda envelope: got.set(), idle_poll=timedelta(minutes=5),
                          listeners=[IdleSignal(ready)])
    thread = in_thread(worker.run)
    try:
        assert ready.wait(20)
        assert not got.is_set()
        queue.resume()
        assert got.wait(20), "a resume did not wake a worker sleeping for 5 minutes"
    finally:
        worker.stop()
        thread.join(20)


class IdleSignal(WorkerListener):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def idle(self) -> None:
        self.event.set()


def test_the_concurrency_cap_counts_every_consumer(make_queue, clock):
    queue, other = make_queue(), None
    other = make_queue(queue.name)  # a second consumer of the same queue
    queue.offer_many([Message(f"k{i}", i) for i in range(10)])
    queue.set_concurrency_limit(3)
    assert queue.flow_control().concurrency_limit == 3
    first = queue.poll_many(2)
    assert len(first) == 2 and len(other.poll_many(10)) == 1  # 3 in flight in all
    assert queue.poll_many(10) == []
    assert first[0].ack()
    assert len(other.poll_many(10)) == 1
    queue.set_concurrency_limit(None)
    assert len(queue.poll_many(10)) == 6


def test_the_rate_limit_is_a_token_bucket_spent_by_every_consumer(make_queue, clock):
    queue = make_queue()
    other = make_queue(queue.name)
    queue.offer_many([Message(f"k{i}", i) for i in range(50)])
    queue.set_rate_limit(5, per=S)  # a bucket of 5, refilled at 5 a second
    control = queue.flow_control()
    assert (control.rate_limit, control.rate_period) == (5, S)
    assert len(queue.poll_many(3)) == 3 and len(other.poll_many(10)) == 2
    assert queue.poll_many(10) == []  # empty until the clock moves
    clock.advance(S / 5)  # one token back
    assert len(other.poll_many(10)) == 1
    clock.advance(10 * S)  # refilled, but never beyond the burst
    assert len(queue.poll_many(10)) == 5
    queue.set_rate_limit(None)
    assert len(queue.poll_many(100)) == 50 - 11



def test_setting_the_same_rate_limit_again_leaves_the_bucket_as_it_is(make_queue, clock):
    # A process that sets its queue's limit at every start (or every few seconds) must not
    # refill the bucket each time: 10 a second set again every 0.25 s let 239 claims
    # through in 5 s, where 60 were allowed
    queue = make_queue()
    other = make_queue(queue.name)  # another process, setting the same limit
    queue.offer_many([Message(f"k{i}", i) for i in range(50)])
    queue.set_rate_limit(5, per=S)
    assert len(queue.poll_many(10)) == 5  # the bucket spent
    other.set_rate_limit(5, per=S)
    assert queue.poll_many(10) == []  # still spent
    clock.advance(S / 5)
    queue.set_rate_limit(5, per=timedelta(milliseconds=1000))  # the same, said otherwise
    assert len(other.poll_many(10)) == 1  # one token back, no more
    assert queue.poll_many(10) == []
    # a new limit, or a new period, is a new bucket, full
    queue.set_rate_limit(8, per=S)
    assert len(queue.poll_many(20)) == 8
    other.set_rate_limit(8, per=2 * S)
    assert len(other.poll_many(20)) == 8
    assert (queue.flow_control().rate_limit, queue.flow_control().rate_period) == (8, 2 * S)

def test_a_claim_whose_tokens_another_spent_first_takes_only_what_is_left(make_queue, front,
                                                                         engine):
    # Another consumer spends two of the three tokens while this claim runs: the claim must
    # not take three, nor lose or mark the messages it leaves. Where the claim charges the
    # bucket in its own statement, it waits for the settings row the other holds; elsewhere
    # it charges at its end, and the other spends between its read of the bucket and that.
    if engine.dialect.name == "sqlite":
        pytest.skip("one writer at a time: no claim can spend tokens while another runs")
    queue = make_queue()
    queue.offer_many([Message(f"k{i}", i) for i in range(5)])
    queue.set_rate_limit(3, per=timedelta(hours=1))
    settings = queue.dao.settings
    spend = (sa.update(settings).where(settings.c.pkind == queue.pkind)
             .values(tokens_milli=1000))
    if queue.dao.bucket_in_claim:
        got = []
        with engine.connect() as other:
            other.execute(spend)  # uncommitted: the settings row stays locked
            holder = other.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            claim = in_thread(lambda: got.extend(queue.poll_many(3)))
            wait_for(lambda: _waits_for(engine, holder),
                     what="the claim to wait for the settings row")
            other.commit()
        claim.join(20)
    else:
        spent = []

        def spend_first(conn, cursor, statement, parameters, context, executemany):
            if not spent and statement.startswith(f"UPDATE {settings.name} "):
                spent.append(statement)
                with engine.begin() as other:
                    other.execute(spend)

        events = front.events_of(front.engine)
        sa.event.listen(events, "before_cursor_execute", spend_first)
        try:
            got = queue.poll_many(3)
        finally:
            sa.event.remove(events, "before_cursor_execute", spend_first)
        assert spent, "the claim did not charge the bucket"
    assert [e.key for e in got] == ["k0"]
    assert queue.poll_many(3) == []  # the bucket is empty for the hour
    waiting = [queue.get(f"k{i}") for i in range(1, 5)]
    assert [(m.deliveries, m.in_flight) for m in waiting] == [(0, False)] * 4


def _waits_for(engine, holder: int) -> bool:
    """Whether a PostgreSQL session waits for a lock that the session ``holder`` (a
    backend's pid) holds."""
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE :holder = ANY(pg_blocking_pids(pid))"), {"holder": holder}).scalar() > 0


def test_each_claim_obeys_the_controls_set_since_the_one_before(make_queue, clock):
    # a queue object starts its claim from what its last claim found; a pause, a cap, groups
    # or a lifted limit set since (by anyone) must still hold at once
    queue = make_queue()
    queue.offer_many([Message(f"k{i}", i) for i in range(20)])
    queue.set_rate_limit(100)
    assert len(queue.poll_many(2)) == 2
    queue.pause()
    assert queue.poll_many(2) == []
    queue.resume()
    assert len(queue.poll_many(2)) == 2
    queue.set_concurrency_limit(5)
    assert len(queue.poll_many(10)) == 1  # 4 in flight already
    queue.set_concurrency_limit(None)
    queue.offer_many([Message("g1", 1, group="g"), Message("g2", 2, group="g")])
    assert sorted(e.key for e in queue.poll_many(100) if e.group) == ["g1"]
    queue.set_rate_limit(None)
    assert queue.poll_many(100) == []  # g2 waits for g1; every other message is in flight


def test_a_bucket_too_large_for_sql_arithmetic_still_limits(make_queue, clock):
    # 2**31 - 1 claims per 30 days: after 10 quiet days, the refill's product of elapsed
    # milliseconds and milli-tokens per period is beyond BIGINT; the claim must still work
    queue = make_queue()
    queue.offer_many([Message(f"k{i}", i) for i in range(3)])
    queue.set_rate_limit(2**31 - 1, per=timedelta(days=30))
    clock.advance(timedelta(days=10))
    assert len(queue.poll_many(10)) == 3


@pytest.mark.parametrize("call", [
    lambda q: q.set_rate_limit(0), lambda q: q.set_rate_limit(5, per=timedelta(0)),
    lambda q: q.set_rate_limit(1.5), lambda q: q.set_concurrency_limit(0),
    lambda q: q.set_concurrency_limit(-1), lambda q: q.set_rate_limit(2**31),
    lambda q: q.set_concurrency_limit(2**31)])
def test_bad_limits_are_refused(queue, call):
    before = queue.flow_control()
    with pytest.raises(InvalidArgumentError, match="limit|per"):
        call(queue)
    assert queue.flow_control() == before


# ---- a worker over several queues ---------------------------------------------------------

def test_a_worker_claims_from_its_queues_in_turn_within_each_cap(make_queue, front):
    busy, quiet = make_queue(), make_queue()
    busy.offer_many([Message(f"b{i}", i) for i in range(40)])
    quiet.offer_many([Message(f"q{i}", i) for i in range(4)])
    order: list[str] = []
    lock = threading.Lock()

    def handler(envelope):
        with lock:
            order.append(envelope.queue.name)

    worker = front.worker({"busy": busy, "quiet": quiet}, handler, concurrency=1, batch_size=2,
                          listeners=[])
    assert worker.drain() == 44
    # in turn: the quiet queue's 4 are done within its first turns, not after the 40
    assert order[:8].count(quiet.name) == 4
    with pytest.raises(InvalidArgumentError, match="not one of the worker's queues"):
        front.worker({"busy": busy}, handler, limits={"other": 1})


def test_a_worker_cap_holds_one_queue_to_n_at_once(make_queue, front):
    capped, free = make_queue(clock=SystemClock()), make_queue(clock=SystemClock())
    capped.offer_many([Message(f"c{i}", i) for i in range(12)])
    free.offer_many([Message(f"f{i}", i) for i in range(12)])
    running = {"capped": 0, "free": 0}
    most = {"capped": 0, "free": 0}
    lock = threading.Lock()
    release = threading.Event()

    def handler(envelope):
        name = "capped" if envelope.queue.name == capped.name else "free"
        with lock:
            running[name] += 1
            most[name] = max(most[name], running[name])
        release.wait(0.05)
        with lock:
            running[name] -= 1

    worker = front.worker({"capped": capped, "free": free}, handler, concurrency=6,
                          batch_size=6, limits={"capped": 2}, listeners=[])
    assert worker.drain() == 24
    assert most["capped"] <= 2 and most["free"] >= 3


def test_a_grouped_queue_under_a_worker_handles_each_group_in_order(make_queue, front):
    queue = make_queue(clock=SystemClock())
    now = queue.clock.now()
    queue.offer_many([Message(f"g{g}-{i}", [g, i], now - timedelta(seconds=100 - i), group=f"g{g}")
                      for g in range(5) for i in range(6)])
    seen: dict[int, list[int]] = {g: [] for g in range(5)}
    active: set[int] = set()
    overlaps = []
    lock = threading.Lock()

    def handler(envelope):
        g, i = envelope.payload
        with lock:
            if g in active:
                overlaps.append(envelope.key)
            active.add(g)
        threading.Event().wait(0.005)
        with lock:
            active.discard(g)
            seen[g].append(i)

    assert front.worker(queue, handler, concurrency=4, batch_size=4,
                        listeners=[]).drain() == 30
    wait_for(lambda: queue.stats().due == 0, what="the last acks")
    assert overlaps == [] and all(seen[g] == list(range(6)) for g in seen)
