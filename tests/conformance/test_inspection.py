"""Inspecting a queue table, as an operator (the CLI, metrics, a dashboard) does: every queue
with its counts in one read, and one queue's messages by state, page by page, on every target.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqldelay import (
    InvalidArgumentError,
    Message,
    OfferOutcome,
    QueuedMessage,
    StrSerializer,
)
from sqldelay.listeners import QueueListener

from ..conftest import unique_name

MIN = timedelta(minutes=1)


def mine(summaries, *names):
    return {(s.queue, s.type_name): s for s in summaries if s.queue in names}


def test_queues_counts_every_state_and_the_dead_letters(front, make_queue, table_name, clock):
    q = make_queue()
    strs = make_queue(q.name, serializer=StrSerializer())  # same name, another payload type
    only_dead = make_queue()
    start = clock.now()
    q.offer("a", 1, start)
    q.offer("b", 2, start)
    q.offer("c", 3, start)
    q.offer("later", 4, start + 10 * MIN)
    strs.offer("s", "text", start)
    held = q.poll_many(2)  # a and b: in flight
    letters = front.dead_letters(q)
    letters.bury(held[1], "boom")  # b: a dead letter
    only_dead.offer("x", 1, start)
    front.dead_letters(only_dead).bury(only_dead.poll(), "boom")
    clock.advance(2 * MIN)

    got = mine(front.inspector(table_name=table_name, clock=clock).queues(), q.name,
               only_dead.name)
    assert set(got) == {(q.name, "json"), (q.name, "str"), (only_dead.name, "json")}
    s = got[q.name, "json"]
    assert (s.due, s.scheduled, s.in_flight, s.dead_letters) == (1, 1, 1, 1)
    assert s.oldest_due_age == 2 * MIN  # c, due since start
    s = got[q.name, "str"]
    assert (s.due, s.scheduled, s.in_flight, s.dead_letters) == (1, 0, 0, 0)
    s = got[only_dead.name, "json"]
    assert (s.due, s.scheduled, s.in_flight, s.dead_letters, s.oldest_due_age) == \
        (0, 0, 0, 1, None)

    clock.advance(10 * MIN)  # a's lock (5 minutes) ran out: due again, as is "later"
    s = mine(front.inspector(table_name=table_name, clock=clock).queues(), q.name)[
        q.name, "json"]
    assert (s.due, s.scheduled, s.in_flight) == (3, 0, 0)


def test_flow_controls_reads_what_was_set_for_the_queues_asked_or_every_one(
        front, make_queue, table_name):
    paused, limited, plain = make_queue(), make_queue(), make_queue()
    paused.pause()
    limited.set_rate_limit(10, per=timedelta(seconds=2))
    limited.set_concurrency_limit(3)
    inspector = front.inspector(table_name=table_name)
    asked = inspector.flow_controls([(q.name, "json") for q in (paused, limited, plain)])
    assert set(asked) == {(paused.name, "json"), (limited.name, "json")}  # plain has none
    assert asked[(paused.name, "json")].paused
    got = asked[(limited.name, "json")]
    assert (got.paused, got.rate_limit, got.rate_period, got.concurrency_limit) == (
        False, 10, timedelta(seconds=2), 3)
    assert asked.items() <= inspector.flow_controls().items()


def test_peek_by_state_with_prefix_and_pages(front, make_queue, table_name, clock):
    q = make_queue()
    start = clock.now()
    for i in range(5):  # one due time: pages follow the row order
        q.offer(f"due_{i}", {"n": i}, start)
    q.offer("due%x", {"n": "pct"}, start)  # LIKE metacharacters in the prefix are literal
    q.offer("other", {"n": "o"}, start - MIN)
    q.offer("future", {"n": "f"}, start + MIN)
    clock.advance(timedelta(seconds=1))
    inspector = front.inspector(table_name=table_name, clock=clock)

    keys, after = [], None
    while True:
        page = inspector.peek(q.name, "due", limit=2, key_prefix="due_", after=after)
        assert len(page.messages) <= 2
        keys += [m.key for m in page.messages]
        if page.next_after is None:
            break
        after = page.next_after
    assert keys == [f"due_{i}" for i in range(5)]

    everything = inspector.peek(q.name, "due", limit=100).messages
    assert [m.key for m in everything][0] == "other"  # earliest due first
    assert {m.key for m in everything} == {"other", "due%x", *keys}
    assert all(isinstance(m, QueuedMessage) and not m.in_flight for m in everything)
    assert [m.payload for m in everything if m.key == "due_3"] == [{"n": 3}]

    [future] = inspector.peek(q.name, "scheduled").messages
    assert future.key == "future" and future.scheduled_at == start + MIN
    assert inspector.peek(q.name, "in_flight").messages == []

    env = q.poll(by="me")  # "other", earliest due
    [held] = inspector.peek(q.name, "in_flight").messages
    assert held.key == env.key and held.in_flight and held.locked_until == env.locked_until
    assert env.key not in {m.key for m in inspector.peek(q.name, "due", limit=100).messages}
    assert inspector.peek(unique_name("nothing"), "due").messages == []

    q.offer("future2", {"n": "f2"}, start + MIN)  # beside "future", at the same due time
    first = inspector.peek(q.name, "scheduled", limit=1)
    assert [m.key for m in first.messages] == ["future"]
    assert [m.key for m in inspector.peek(q.name, "scheduled", limit=1,
                                          after=first.next_after).messages] == ["future2"]
    clock.advance(2 * MIN)  # both fell due: the next page of scheduled ones is empty
    late = front.inspector(table_name=table_name, clock=clock)
    assert late.peek(q.name, "scheduled", after=first.next_after).messages == []
    assert [m.key for m in late.peek(q.name, "due", limit=100, key_prefix="future").messages] \
        == ["future", "future2"]


@pytest.mark.parametrize("kwargs, problem", [
    ({"state": "late"}, "state must be one of due, in_flight, scheduled"),
    ({"limit": 0}, "limit must be a positive integer"),
    ({"after": "nonsense"}, "after must be the next_after of an earlier page"),
])
def test_peek_refuses_bad_input(front, table_name, kwargs, problem):
    inspector = front.inspector(table_name=table_name)
    with pytest.raises(InvalidArgumentError, match=problem):
        inspector.peek("q", **kwargs)


def test_stuck_messages_are_found_and_given_back(make_queue, clock):
    q = make_queue(acquire_timeout=timedelta(hours=1))
    q.offer_many([Message("early", 1), Message("late", 2)])
    early = q.poll()
    clock.advance(40 * MIN)
    late = q.poll()
    assert (early.key, late.key) == ("early", "late")

    assert [m.key for m in q.stuck(30 * MIN)] == ["early"]  # held 40 minutes; late just now
    assert q.release_stuck(30 * MIN) == 1
    assert not q.get("early").in_flight and q.get("late").in_flight
    assert not early.ack()  # its holder lost it
    assert late.ack()
    assert q.stuck(timedelta(0)) == [] and q.release_stuck(timedelta(0)) == 0


def test_queue_listeners_hear_offers_on_both_fronts(make_queue):
    heard = []

    class Recorder(QueueListener):
        def offered(self, queue, outcomes):
            heard.append((queue, list(outcomes)))

    q = make_queue(listeners=[Recorder()])
    q.offer_many([Message("a", 1), Message("b", 2)])
    q.offer("a", 1, q.get("a").scheduled_at)
    assert heard == [(q.name, [OfferOutcome.CREATED] * 2), (q.name, [OfferOutcome.IGNORED])]
    with pytest.raises(InvalidArgumentError, match="QueueListener"):
        make_queue(listeners=[object()])


def test_queues_page_by_page_by_prefix(front, make_queue, table_name, clock):
    """A table of many queues is read a page at a time, in one order, each queue once, with
    the same counts as the whole list; a queue with dead letters only is on its page too; a
    prefix keeps the queues whose name starts with it (LIKE's metacharacters literal)."""
    base = unique_name("pg")
    queues = [make_queue(f"{base}_{i}") for i in range(5)]
    for i, q in enumerate(queues):
        q.offer("k", i, clock.now())
    strs = make_queue(f"{base}_2", serializer=StrSerializer())
    strs.offer("s", "text", clock.now() + MIN)
    dead = make_queue(f"{base}%x")  # dead letters only; % is no wildcard
    dead.offer("x", 1, clock.now())
    front.dead_letters(dead).bury(dead.poll(), "boom")
    inspector = front.inspector(table_name=table_name, clock=clock)

    seen, after = [], None
    while True:
        page = inspector.queues_page(limit=2, after=after, prefix=base)
        assert len(page.queues) <= 2
        seen += page.queues
        after = page.next_after
        if after is None:
            break
    names = [(s.queue, s.type_name) for s in seen]
    assert len(names) == len(set(names)) == 7
    assert set(names) == set(mine(inspector.queues(), *(n for n, _ in names)))
    assert {(s.queue, s.type_name): (s.due, s.scheduled, s.dead_letters) for s in seen} == {
        **{(q.name, "json"): (1, 0, 0) for q in queues}, (strs.name, "str"): (0, 1, 0),
        (dead.name, "json"): (0, 0, 1)}
    page = inspector.queues_page(limit=50, prefix=f"{base}%")
    assert [(s.queue, s.dead_letters) for s in page.queues] == [(dead.name, 1)]
    assert page.next_after is None
    with pytest.raises(InvalidArgumentError):
        inspector.queues_page(limit=0)
