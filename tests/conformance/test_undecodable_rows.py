"""A row that cannot be read (written by an older version, by hand or by another client) is a
dead letter with the reason, never an exception that stops a worker; the rest of its batch is
handled."""

from __future__ import annotations

import sqlalchemy as sa

from sqldelay import Message, queue_table

# past what a datetime holds (the year 9999 ends at 253,402,300,799,999 ms)
BEYOND_9999_MS = 10**16


def spoil(engine, table_name: str, queue, key: str, **values) -> None:
    t = queue_table(sa.MetaData(), table_name)
    with engine.begin() as conn:
        changed = conn.execute(sa.update(t).where(t.c.pkind == queue.pkind, t.c.pkey == key)
                               .values(**values)).rowcount
    assert changed == 1


def test_undecodable_rows_become_dead_letters_and_the_rest_of_the_batch_is_handled(
        make_queue, front, engine, table_name):
    q = make_queue()
    q.offer_many([Message(f"k{i}", i) for i in range(4)])
    spoil(engine, table_name, q, "k1", payload=b"not json")
    spoil(engine, table_name, q, "k2", scheduled_at_initially=BEYOND_9999_MS)
    spoiled = q.get("k1")  # a read shows it, and why it cannot be handled
    assert spoiled.payload is None and "JSONDecodeError" in spoiled.unreadable
    assert q.get("k2").scheduled_at.year == 9999 and q.get("k0").unreadable is None
    handled = []
    worker = front.worker(q, lambda envelope: handled.append(envelope.key), batch_size=4,
                          listeners=[])
    assert worker.drain() == 2
    assert sorted(handled) == ["k0", "k3"]
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)
    letters = {d.key: d for d in front.dead_letters(q).list(q.name)}
    assert sorted(letters) == ["k1", "k2"]
    assert "cannot be read" in letters["k1"].last_error
    assert "JSONDecodeError" in letters["k1"].last_error  # the serializer's own reason
    assert "OverflowError" in letters["k2"].last_error
    assert letters["k1"].payload == b"not json"  # kept as it was, for a person to see
    assert letters["k2"].scheduled_at.year == 9999  # kept at the last time it can be read


def test_a_claim_with_undecodable_rows_returns_the_others(make_queue, engine, table_name):
    q = make_queue()
    q.offer_many([Message("good", 1), Message("bad", 2)])
    spoil(engine, table_name, q, "bad", payload=b"{")
    assert [e.key for e in q.poll_many(10)] == ["good"]
    assert q.get("bad") is None and q.poll() is None
