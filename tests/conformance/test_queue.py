"""The queue's behaviour, identical on every backend."""

from __future__ import annotations

import re
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from sqldelay import (
    BytesSerializer,
    Delivery,
    InvalidArgumentError,
    Message,
    OfferOutcome,
    PayloadError,
    StrSerializer,
)

C, U, IG = OfferOutcome.CREATED, OfferOutcome.UPDATED, OfferOutcome.IGNORED
SEC = timedelta(seconds=1)


def test_offer_outcomes(queue, clock):
    at = clock.now()
    assert queue.offer("k", {"v": 1}, at) is C
    assert queue.offer("k", {"v": 1}, at) is IG  # nothing would change
    assert queue.offer("k", {"v": 2}, at) is U  # new payload
    assert queue.offer("k", {"v": 2}, at + SEC) is U  # new due time
    assert queue.offer("k", {"v": 3}, at, update=False) is IG  # insert-if-absent
    stored = queue.get("k")
    assert stored.payload == {"v": 2} and stored.scheduled_at == at + SEC


def test_offer_many_outcomes_in_input_order_with_repeated_keys(queue, clock):
    queue.offer("old", 1)
    queue.offer("same", 1, clock.now())
    outcomes = queue.offer_many([
        Message("new", 1), Message("old", 2), Message("same", 1, clock.now()),
        Message("old", 3, update=False), Message("new", 4), Message("new", 4),
    ])
    assert outcomes == [C, U, IG, IG, U, IG]
    assert queue.get("new").payload == 4 and queue.get("old").payload == 2


def test_an_offer_of_new_keys_and_one_that_exists_writes_each(make_queue):
    # where the dialect inserts first (MySQL), this queue's second offer tries to insert all
    # six, meets "old", and must leave no part of that insert behind for the usual offer
    queue, other = make_queue(), make_queue()
    queue.offer("old", 0)
    outcomes = other.offer_many([Message(f"new{i}", i) for i in range(3)] + [Message("old", 9)])
    assert outcomes == [C, C, C, C]  # "old" of the other queue is a key of its own
    outcomes = queue.offer_many([Message(f"new{i}", i) for i in range(5)] + [Message("old", 5)])
    assert outcomes == [C, C, C, C, C, U]
    assert [queue.get(f"new{i}").payload for i in range(5)] == [0, 1, 2, 3, 4]
    assert queue.get("old").payload == 5 and other.get("old").payload == 9


def test_offer_many_of_nothing(queue):
    assert queue.offer_many([]) == []


def test_delivery_in_due_order_and_only_when_due(queue, clock):
    now = clock.now()
    for i, delay in enumerate([30, 10, 20, 0]):
        queue.offer(f"m{i}", i, now + delay * SEC)
    assert [e.key for e in queue.poll_many(10)] == ["m3"]
    clock.advance(25 * SEC)
    assert [e.key for e in queue.poll_many(10)] == ["m1", "m2"]
    assert queue.poll() is None
    clock.advance(5 * SEC)
    env = queue.poll()
    assert (env.key, env.payload, env.scheduled_at) == ("m0", 0, now + 30 * SEC)


def test_equal_due_times_are_first_in_first_out(queue, clock):
    queue.offer_many([Message(f"k{i:03}", i, clock.now()) for i in range(100)])
    assert [e.payload for e in queue.poll_many(100)] == list(range(100))


def test_envelope_fields(queue, clock):
    created = clock.now()
    queue.offer("k", {"a": [1, "ü"]}, created + SEC)
    clock.advance(2 * SEC)
    env = queue.poll()
    assert env.key == "k" and env.payload == {"a": [1, "ü"]}
    assert env.scheduled_at == created + SEC and env.created_at == created
    assert env.delivery is Delivery.FIRST and env.attempt == 1
    assert env.locked_until == clock.now() + queue.acquire_timeout
    assert env.scheduled_at.tzinfo is not None


def test_ack_deletes(queue):
    queue.offer("k", 1)
    env = queue.poll()
    assert env.ack() is True
    assert not queue.contains("k") and queue.poll() is None
    assert env.ack() is False


def test_redelivery_after_acquire_timeout_and_stale_ack(make_queue, clock):
    queue = make_queue(acquire_timeout=timedelta(seconds=30))
    queue.offer("k", "p")
    first = queue.poll()
    clock.advance(29 * SEC)
    assert queue.poll() is None  # still locked
    clock.advance(2 * SEC)
    second = queue.poll()
    assert (second.key, second.attempt, second.delivery) == ("k", 2, Delivery.REDELIVERY)
    assert first.ack() is False  # its lock was taken over: nothing deleted
    assert queue.contains("k")
    assert second.ack() is True and not queue.contains("k")


def test_update_while_in_flight_voids_the_lock(queue, clock):
    queue.offer("k", "old")
    env = queue.poll()
    assert queue.offer("k", "new") is U
    assert env.ack() is False  # the stale ack deletes nothing
    again = queue.poll()
    assert (again.payload, again.attempt) == ("new", 1)


def test_identical_offer_keeps_an_in_flight_lock(queue, clock):
    at = clock.now()
    queue.offer("k", "same", at)
    env = queue.poll()
    assert queue.offer("k", "same", at) is IG
    assert queue.poll() is None and env.ack() is True


def test_identical_offer_in_the_instant_of_creation_keeps_the_attempt_count(queue, clock):
    # an offer that changes nothing leaves the message as it was, its attempts included, even
    # made in the very millisecond the message was created (and beside a new message)
    at = clock.now()
    queue.offer("k", "same", at)
    assert queue.release(queue.poll()) is True
    assert queue.offer_many([Message("k", "same", at), Message("j", "new", at)]) == [IG, C]
    assert {env.key: env.attempt for env in queue.poll_many(10)} == {"k": 2, "j": 1}


@pytest.mark.parametrize("limit", [1, 50, 1000])
def test_poll_many_claims_up_to_limit(queue, limit):
    queue.offer_many([Message(f"k{i:04}", i) for i in range(limit + 7)])
    batch = queue.poll_many(limit)
    assert [e.payload for e in batch] == list(range(limit))
    assert len({e.key for e in batch}) == limit
    assert queue.stats().in_flight == limit
    assert queue.ack_many(batch) == limit
    assert [e.payload for e in queue.poll_many(1000)] == list(range(limit, limit + 7))


def test_ack_many_across_batches_counts_only_held_locks(make_queue, clock):
    queue = make_queue(acquire_timeout=timedelta(seconds=10))
    queue.offer_many([Message(f"k{i}", i) for i in range(4)])
    a = queue.poll_many(2)
    b = queue.poll_many(2)
    clock.advance(11 * SEC)
    retaken = queue.poll_many(1)  # takes over a[0]
    assert queue.ack_many(a + b) == 3
    assert queue.ack_many(retaken) == 1
    assert queue.stats().due == 0


def test_poll_many_acks_what_it_is_given_before_it_claims(make_queue, clock):
    queue = make_queue(acquire_timeout=timedelta(seconds=10))
    queue.offer_many([Message(f"k{i}", i) for i in range(4)])
    a = queue.poll_many(2)
    b = queue.poll_many(2)
    clock.advance(11 * SEC)  # every lock expired: each of these is due again
    retaken = queue.poll_many(1)  # takes over a[0], whose ack then deletes nothing
    assert [e.payload for e in retaken] == [0]
    queue.offer_many([Message(f"k{i}", i) for i in range(4, 6)])
    # the acked messages are gone, not claimed again, though their locks had expired
    after = queue.poll_many(10, ack=a + b)
    assert [e.payload for e in after] == [4, 5]
    assert queue.stats().in_flight == 3
    assert [e.payload for e in queue.poll_many(10, ack=retaken + after)] == []
    assert queue.stats().in_flight == queue.stats().due == 0


def test_poll_many_acks_a_message_handed_out_twice_under_both_its_locks(queue):
    # A consumer that handled a message and then, before acking it, the message that
    # replaced it (an offer of its key: the same row, claimed again under a new lock), acks
    # both at once. Only the second's lock holds, whichever comes first: it is deleted.
    queue.offer("k", 1)
    first = queue.poll()
    assert queue.offer("k", 2) is OfferOutcome.UPDATED
    second = queue.poll()
    assert (first.row_id, second.payload) == (second.row_id, 2)
    assert queue.poll_many(10, ack=[first, second]) == []
    assert not queue.contains("k")
    assert queue.stats().in_flight == 0


def test_release_now_and_later(queue, clock):
    queue.offer("k", 1)
    env = queue.poll()
    assert queue.release(env) is True
    again = queue.poll()
    assert again.attempt == 2
    assert again.release(delay=10 * SEC) is True
    assert queue.poll() is None
    clock.advance(10 * SEC)
    assert queue.poll().attempt == 3
    assert env.release() is False  # stale


def test_extend_keeps_the_lock(make_queue, clock):
    queue = make_queue(acquire_timeout=timedelta(seconds=10))
    queue.offer("k", 1)
    env = queue.poll()
    clock.advance(8 * SEC)
    assert queue.extend(env, 10 * SEC) is True
    clock.advance(8 * SEC)
    assert queue.poll() is None
    assert env.locked_until == clock.now() + 2 * SEC
    assert env.ack() is True


def test_get_contains_drop(queue, clock):
    assert queue.get("k") is None and not queue.contains("k") and not queue.drop("k")
    queue.offer("k", [1, 2], clock.now() + SEC)
    got = queue.get("k")
    assert (got.payload, got.deliveries, got.in_flight) == ([1, 2], 0, False)
    clock.advance(SEC)
    queue.poll()
    got = queue.get("k")
    assert (got.deliveries, got.in_flight) == (1, True)
    assert queue.drop("k") is True and not queue.contains("k")


def test_stats_and_clear(make_queue, clock):
    queue = make_queue(acquire_timeout=timedelta(seconds=60))
    now = clock.now()
    queue.offer_many([Message("due1", 1, now - 5 * SEC), Message("due2", 2, now),
                      Message("later", 3, now + 60 * SEC), Message("held", 4, now - 9 * SEC)])
    assert queue.poll().key == "held"
    stats = queue.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (2, 1, 1)
    assert stats.oldest_due_age == 5 * SEC
    other = make_queue()
    other.offer("x", 1)
    assert queue.clear() == 4
    empty = queue.stats()
    assert (empty.due, empty.scheduled, empty.in_flight, empty.oldest_due_age) == (0, 0, 0, None)
    assert other.contains("x")


def test_queues_and_payload_types_are_separate(make_queue, engine, table_name):
    name = "shared-name"
    as_json = make_queue(name)
    as_bytes = make_queue(name, serializer=BytesSerializer())
    as_json.offer("k", {"j": 1})
    as_bytes.offer("k", b"\x00\xff")
    assert as_bytes.poll().payload == b"\x00\xff"
    assert as_json.poll().payload == {"j": 1}
    assert as_json.clear() == 1 and as_bytes.clear() == 1


def test_unicode_keys_at_the_length_limit_and_exact_key_matching(make_queue):
    queue = make_queue(serializer=StrSerializer())
    long_key = "🦄" * 199 + "é"
    # quotes, a backslash and control characters, which MySQL's drivers escape into the SQL
    keys = [long_key, "Key", "key", "key ", "k%_\\", "ключ", 'q"\'', "tab\tline\nend\x01"]
    if queue.dao.name == "mssql":  # compares text ignoring trailing spaces: refuses such keys
        with pytest.raises(InvalidArgumentError, match="trailing spaces"):
            queue.offer("key ", "key ")
        keys.remove("key ")
    assert queue.offer_many([Message(k, k, group=k) for k in keys]) == [C] * len(keys)
    for k in keys:
        got = queue.get(k)
        assert (got.key, got.group) == (k, k)
    assert sorted(e.payload for e in queue.poll_many(10)) == sorted(keys)


def test_one_megabyte_payloads(make_queue):
    blob = bytes(range(256)) * 4096  # 1 MiB, every byte value
    queue = make_queue(serializer=BytesSerializer())
    queue.offer("big", blob)
    assert queue.poll().payload == blob
    text = make_queue()
    doc = {"text": "x" * (1 << 20)}
    text.offer("big", doc)
    assert text.poll().payload == doc


def test_offer_many_splits_large_payloads_into_statements_the_server_accepts(make_queue):
    # 20 MiB in one call: more than MariaDB's default max_allowed_packet (16 MiB)
    queue = make_queue(serializer=BytesSerializer())
    blobs = {f"b{i:02}": bytes([i]) * (1 << 20) for i in range(20)}
    assert queue.offer_many([Message(k, v) for k, v in blobs.items()]) == [C] * 20
    got = queue.poll_many(20)
    assert {e.key: e.payload for e in got} == blobs


def test_a_large_offer_many_lands_whole_and_a_repeated_key_in_order(queue):
    # several statements' worth (an offer statement takes at most 1,000 rows): one call,
    # one transaction, written chunk by chunk; the key repeated at the end is applied last
    n = 2_500
    batch = [Message("dup", "first"), *(Message(f"k{i:05}", {"n": i}) for i in range(n)),
             Message("dup", "last")]
    assert queue.offer_many(batch) == [C] * (n + 1) + [U]
    assert queue.stats().due == n + 1
    assert queue.get("dup").payload == "last"
    assert [queue.get(f"k{i:05}").payload for i in (0, 999, 1_000, n - 1)] \
        == [{"n": 0}, {"n": 999}, {"n": 1_000}, {"n": n - 1}]


def test_bad_input_in_the_middle_of_a_large_batch_writes_nothing(queue):
    queue.offer("kept", "original")
    good = [Message(f"k{i}", i) for i in range(2_500)]
    for bad, problem in ((Message("b", object()), "not JSON-serializable"),
                         (Message("n", 1, datetime(2030, 1, 1)), "naive"),
                         (("a", 1), "Message objects; item 1501")):
        with pytest.raises(InvalidArgumentError, match=problem):
            queue.offer_many([Message("kept", "changed"), *good[:1_500], bad, *good[1_500:]])
    assert queue.get("kept").payload == "original"
    assert queue.stats().due == 1


def test_a_large_offer_many_does_not_hold_every_encoded_payload_at_once(make_queue):
    # 6,000 payloads of 10 KiB encoded (60 MiB) from one shared string (the caller's 10 KiB):
    # written chunk by chunk, the call holds a few statements' worth (4 MiB each) at most.
    # Python's own allocations are counted (tracemalloc), not the process's pages: nothing
    # else moves them.
    queue = make_queue(serializer=StrSerializer())
    text = "x" * 10_240
    batch = [Message(f"k{i}", text) for i in range(6_000)]
    tracemalloc.start()
    try:
        assert queue.offer_many(batch) == [C] * len(batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(batch) * len(text) / 2
    assert queue.stats().due == len(batch)


def test_connection_joins_the_callers_transaction(queue, front):
    with front.connect() as conn:
        queue.offer("rolled-back", 1, connection=conn)
        queue.offer_many([Message("rb2", 2)], connection=conn)
        assert queue.contains("rolled-back", connection=conn)
        conn.rollback()
    assert not queue.contains("rolled-back") and not queue.contains("rb2")
    with front.connect() as conn:
        queue.offer("committed", 1, connection=conn)
        conn.commit()
    with front.connect() as conn:
        env = queue.poll(connection=conn)
        conn.rollback()  # the claim is undone with the transaction
    assert queue.stats().in_flight == 0
    assert queue.poll().key == env.key == "committed"


def test_a_connection_of_the_other_front_end_is_refused(queue, engine, front):
    if not front.is_async:
        pytest.skip("the blocking front end is the one whose connection the others use")
    with engine.connect() as conn, pytest.raises(InvalidArgumentError, match="AsyncConnection"):
        queue.offer("k", 1, connection=conn)
    assert not queue.contains("k")


# ---- bad input: rejected before anything is written ----------------------------------------

@pytest.mark.parametrize("key, problem", [("", "empty"), ("x" * 201, "201 characters"),
                                          (42, "must be a str")])
def test_bad_keys(queue, key, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        queue.offer(key, 1)
    # among good ones, in a batch checked as a whole
    with pytest.raises(InvalidArgumentError, match=problem):
        queue.offer_many([Message("first", 1), Message(key, 2), Message("last", 3)])
    assert queue.stats().due == 0


@pytest.mark.parametrize("key, problem", [
    ("a\x00b", "contains a NUL character at position 1"),
    ("a\ud800", "lone surrogate U+D800 at position 1"),
])
def test_keys_some_database_cannot_store_are_refused_everywhere(queue, key, problem):
    # PostgreSQL text holds no NUL; no driver encodes a lone surrogate. Refused before any
    # I/O on every database, so a key that works on one works on all.
    queue.offer("kept", 1)
    with pytest.raises(InvalidArgumentError, match=re.escape(problem)):
        queue.offer_many([Message("first", 1), Message(key, 2)])
    with pytest.raises(InvalidArgumentError, match=re.escape(problem)):
        queue.get(key)
    assert queue.stats().due == 1 and not queue.contains("first")


@pytest.mark.parametrize("name", ["q\x00", "q\udfff"])
def test_queue_and_type_names_some_database_cannot_store_are_refused(make_queue, name):
    with pytest.raises(InvalidArgumentError, match="queue name"):
        make_queue(name)

    class Odd(BytesSerializer):
        type_name = name

    with pytest.raises(InvalidArgumentError, match="serializer.type_name"):
        make_queue(serializer=Odd())


@pytest.mark.parametrize("serializer, payload", [(BytesSerializer(), b""), (StrSerializer(), "")])
def test_empty_payloads_are_refused_on_every_database(make_queue, serializer, payload):
    # Oracle keeps a zero-length value as NULL: an empty payload cannot be stored everywhere
    queue = make_queue(serializer=serializer)
    with pytest.raises(PayloadError, match="zero bytes"):
        queue.offer("empty", payload)
    assert not queue.contains("empty")
    assert queue.offer("one byte", b"x" if payload == b"" else "x") is C


def test_a_payload_larger_than_the_server_takes_is_refused_before_sending(make_queue, engine):
    queue = make_queue(serializer=BytesSerializer())
    with engine.connect() as conn:
        budget = queue.dao.payload_budget(conn)
    if budget.message is None or budget.message > 64 << 20:
        pytest.skip(f"{engine.dialect.name} takes payloads up to {budget.message} bytes: "
                    "too large to send in a test")
    # every byte escaped in the statement (zeros): the largest payload still fits
    assert queue.offer("largest", bytes(budget.message)) is C
    with pytest.raises(InvalidArgumentError) as refused:
        queue.offer_many([Message("small", b"1"), Message("too big", bytes(budget.message + 1))])
    message = str(refused.value)
    assert f"{budget.message + 1:,} bytes" in message and f"at most {budget.message:,}" in message
    assert "max_allowed_packet" in message
    assert not queue.contains("small") and not queue.contains("too big")
    # a batch of several near the limit is cut so that each statement fits
    near = [Message(f"near{i}", bytes([i]) * (budget.message - 10)) for i in range(3)]
    assert queue.offer_many(near) == [C] * 3
    assert {e.key: len(e.payload) for e in queue.poll_many(10) if e.key.startswith("near")} \
        == {m.key: budget.message - 10 for m in near}


def test_bad_batch_writes_nothing(queue):
    queue.offer("kept", "original")
    batch = [Message("kept", "changed"), Message("a", 1), Message("b", object())]
    with pytest.raises(PayloadError, match="not JSON-serializable"):
        queue.offer_many(batch)
    with pytest.raises(InvalidArgumentError, match="naive"):
        queue.offer_many([Message("kept", "changed"), Message("n", 1, datetime(2030, 1, 1))])
    with pytest.raises(InvalidArgumentError, match="Message objects"):
        queue.offer_many([Message("kept", "changed"), ("a", 1)])
    assert queue.get("kept").payload == "original"
    assert queue.stats().due == 1


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_bad_limits(queue, limit):
    with pytest.raises(InvalidArgumentError, match="limit"):
        queue.poll_many(limit)


def test_bad_queue_names_and_timeouts(make_queue):
    with pytest.raises(InvalidArgumentError, match="queue name"):
        make_queue("q" * 61)
    with pytest.raises(InvalidArgumentError, match="acquire_timeout"):
        make_queue(acquire_timeout=timedelta(0))


def test_aware_non_utc_times_are_accepted(queue, clock):
    from zoneinfo import ZoneInfo

    at = clock.now().astimezone(ZoneInfo("Asia/Tokyo"))
    queue.offer("tz", 1, at)
    assert queue.get("tz").scheduled_at == at and queue.get("tz").scheduled_at.tzinfo == UTC


OUTSIDE_UTC_YEARS = [  # aware datetimes that fall outside years 1 to 9999 once in UTC
    (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "before the year 1"),
    (datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), "after the year 9999"),
]


@pytest.mark.parametrize(("at", "problem"), OUTSIDE_UTC_YEARS, ids=["year 0", "year 10000"])
def test_a_due_time_outside_the_utc_years_is_refused_before_anything_is_written(
        queue, front, at, problem):
    # stored, such a time could never be read back as a datetime: every read of the message
    # and every claim of its batch would fail
    with pytest.raises(InvalidArgumentError, match=f"at {re.escape(at.isoformat())} is "
                                                   f"{problem} in UTC"):
        queue.offer("k", 1, at)
    with pytest.raises(InvalidArgumentError, match=problem):
        queue.offer_many([Message("a", 1), Message("k", 1, at)])
    assert queue.get("k") is None and queue.get("a") is None
    queue.offer("d", 1)
    letters = front.dead_letters(queue)
    assert letters.bury(queue.poll(), "failed") is True
    [letter] = letters.list(queue.name)
    with pytest.raises(InvalidArgumentError, match=problem):
        letters.requeue([letter.id], at=at)
    assert [d.id for d in letters.list(queue.name)] == [letter.id] and queue.get("d") is None
    # the edges themselves are times a datetime holds
    first = datetime(1, 1, 1, tzinfo=UTC)
    last = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert queue.offer_many([Message("first", 1, first), Message("last", 1, last)]) == [C, C]
    assert (queue.get("first").scheduled_at, queue.get("last").scheduled_at) == (first, last)
    assert [e.key for e in queue.poll_many(10)] == ["first"]


def test_missing_table_says_how_to_create_it(front, clock):
    from sqldelay import SchemaMissingError

    queue = front.queue("q", table_name="sqldelay_no_such_table", clock=clock)
    with pytest.raises(SchemaMissingError, match="create_schema"):
        queue.offer("k", 1)
    with pytest.raises(SchemaMissingError, match="create_schema"):
        queue.poll()


def test_create_schema_is_idempotent(engine, table_name):
    from sqldelay import create_schema

    create_schema(engine, table_name=table_name)
    names = {ix["name"] for ix in sa.inspect(engine).get_indexes(table_name)}
    assert {f"{table_name}_kind_key_uq", f"{table_name}_kind_due_ix"} <= names


def test_a_release_or_an_extension_past_the_year_9999_is_refused_and_the_lock_holds(queue):
    queue.offer("k", 1)
    envelope = queue.poll()
    for call in (lambda: queue.release(envelope, delay=timedelta(days=3_000_000)),
                 lambda: queue.extend(envelope, timedelta(days=3_000_000))):
        with pytest.raises(InvalidArgumentError, match="after the year 9999"):
            call()
    assert queue.get("k").in_flight
    assert queue.ack(envelope)
