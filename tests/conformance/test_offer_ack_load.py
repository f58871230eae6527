"""Offers and acks of the same keys at once, under load, on every target: four producers offer
overlapping, shuffled batches of 50 of 200 keys (two in their own transactions through
``connection=``, two in sqldelay's) while two workers claim and ack, for a bounded time; with
the messages in no group, or in 20 groups (grouped claims, and acks that free the groups).

What is checked comes from the producers' and handlers' own records: no offer failed, every
offer was answered (created or updated: each payload is new), each key's last offer was
handled once the workers had drained the queue, and no message (one offer's payload) was
handled twice while its claim was live. How many deadlocks sqldelay retried for its own
transactions, and how many reached the producers that pass ``connection=`` (and so retry
their transaction themselves, as an application must), is printed (``pytest -rP``); on
PostgreSQL there must be next to none, on MariaDB some remain (the test says which).
"""

from __future__ import annotations

import collections
import logging
import random
import re
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import Message, OfferOutcome, SystemClock
from sqldelay.dialects import ErrorKind

from ..helpers import wait_for
from .test_claims_in_callers_transaction import read_committed

KEYS = [f"k{i:03}" for i in range(200)]
PRODUCERS, BATCH = 4, 50
PRODUCING = 10.0  # seconds per target: eight targets, a minute or less per database
ATTEMPTS = 10  # a caller's own retries of its transaction, as sqldelay's own offers get


class Retries(logging.Handler):
    """Counts sqldelay's retries of its own transactions (the executor logs each at DEBUG,
    "retrying after <error>"), by the error's first words."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.name == "sqldelay" and message.startswith("retrying after"):
            error = message[len("retrying after "):].split("\n")[0]
            with self._lock:
                self.seen[re.sub(r"\d{4,}", "N", error)[:90]] += 1


@pytest.fixture
def retries():
    logger, worker = logging.getLogger("sqldelay"), logging.getLogger("sqldelay.worker")
    handler, levels = Retries(), (logger.level, worker.level)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    worker.setLevel(logging.INFO)  # not a line per message handled
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(levels[0])
    worker.setLevel(levels[1])


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [False, True], ids=["ungrouped", "groups"])
def test_offers_and_acks_of_the_same_keys_lose_nothing(make_queue, front, target, retries,
                                                        grouped):
    # Deadlocks that remain (10 s a target, shared 2-core machine, MariaDB 10.11):
    # - MariaDB, 0 to 8 retried and 0 to 2 reaching callers a run (200 to 250 and 140 to
    #   180 before acks of several claim batches locked their rows in id order,
    #   ``lock_acked``; 1 to 8 and 0 to 8 before an offer read again the keys it had not
    #   found once it held the rows it had): an offer holds the rows it updates (locked in
    #   id order) when it inserts its new keys, and an insert waits for any transaction
    #   holding the key's unique-index entry, such as an ack deleting a row of that key
    #   that appeared after the offer's last read, while that transaction waits for a row
    #   the offer holds.
    # - PostgreSQL, 8 to 20 retried and 3 to 7 reaching callers a run, and 16 to 101
    #   offers made, before acks took their rows in key order, the offers' (``_taken``),
    #   and before a claim carrying acks ran them first, holding no row it had just
    #   claimed while waiting for an offer (1,500 to 2,400 offers a run since). None
    #   between offers and acks since; a claim can still meet one, rarely (2 in one run
    #   of about ten): its FOR UPDATE SKIP LOCKED, at READ COMMITTED, locks the newer
    #   versions of a row that an offer updated, and there PostgreSQL waits for another
    #   offer updating it again instead of skipping it (the claim's error: "while
    #   locking updated version of tuple"), while that offer waits for a row the claim
    #   holds. So a few retries are allowed here (the code before the fixes above had 11
    #   to 27), and none reaching a caller: the claim gives way (a lock wait bounded below
    #   the deadlock check, ``PostgresQueueDao._claim_statement``).
    # With groups:
    # - MariaDB, 91 to 108 retried and 5 to 7 reaching callers a run (the heads of a
    #   grouped claim already locked in id order), before acks that free groups ran at READ
    #   COMMITTED, empty groups were found by a plain read before their rows were dropped,
    #   a settings row was made with an exclusive lock and grouped claims passed over the
    #   heads others hold; 0 to 2 retried and 0 or 1 reaching callers since (the offers
    #   and acks above, and acks giving way). Up to 20 retries are allowed: 97 of the 113
    #   deadlocks logged in one run before had a drop in them.
    # - PostgreSQL, none reaching callers, but 21 to 27 claims a run that gave way to an
    #   offer holding the first message of a group they had won, and ran again, and a tenth
    #   of the offers made without groups (135 to 199), before grouped claims passed over
    #   the heads others hold; none, and 1,533 to 2,262 offers, since.
    queue = make_queue(clock=SystemClock())
    dao = queue.dao
    lock = threading.Lock()
    offers: list[tuple[float, float, list[Message], list[OfferOutcome]]] = []
    failed: list[BaseException] = []
    caller_deadlocks = collections.Counter[int]()  # by producer
    handled: list[tuple[str, str, str]] = []  # (envelope's key, payload, worker)
    stop = time.monotonic() + PRODUCING

    def offer_in_own_transaction(batch: list[Message], n: int) -> list[OfferOutcome]:
        for attempt in range(ATTEMPTS):
            with front.connect() as conn:
                conn = read_committed(conn)
                try:
                    outcomes = queue.offer_many(batch, connection=conn)
                    conn.commit()
                    return outcomes
                except sa.exc.DBAPIError as exc:
                    conn.rollback()
                    if dao.classify(exc) is not ErrorKind.TRANSIENT or attempt == ATTEMPTS - 1:
                        raise
                    with lock:
                        caller_deadlocks[n] += 1
        raise AssertionError("unreachable")

    def produce(n: int) -> None:
        rng = random.Random(n)
        seq = 0
        try:
            while time.monotonic() < stop:
                seq += 1
                batch = [Message(k, f"{n}-{seq}-{k}", group=f"g{int(k[1:]) % 20}" if grouped
                                 else None) for k in rng.sample(KEYS, BATCH)]
                began = time.monotonic()
                outcomes = (offer_in_own_transaction(batch, n) if n % 2
                            else queue.offer_many(batch))
                with lock:
                    offers.append((began, time.monotonic(), batch, outcomes))
        except BaseException as exc:
            with lock:
                failed.append(exc)

    def handler(envelope) -> None:
        with lock:
            handled.append((envelope.key, envelope.payload, threading.current_thread().name))

    workers = [front.worker(queue, handler, concurrency=4, batch_size=20,
                            idle_poll=timedelta(milliseconds=100)) for _ in range(2)]
    consuming = [threading.Thread(target=w.run, kwargs={"signals": False}, daemon=True)
                 for w in workers]
    producing = [threading.Thread(target=produce, args=(n,)) for n in range(PRODUCERS)]
    began = time.monotonic()
    for t in consuming + producing:
        t.start()
    try:
        for t in producing:
            t.join(PRODUCING + 120)
        assert not any(t.is_alive() for t in producing)

        def drained() -> bool:
            assert all(t.is_alive() for t in consuming), "a worker stopped"
            stats = queue.stats()
            return stats.due + stats.in_flight == 0

        wait_for(drained, 60, "the workers to drain the queue", interval=0.1)
    finally:
        for w in workers:
            w.stop()
        for t in consuming:
            t.join(60)
    took = time.monotonic() - began
    print(f"\n{target.name}: {len(offers)} offers of {BATCH} in {PRODUCING:.0f} s, "
          f"{len(handled)} messages handled, {took:.1f} s in all; sqldelay retried "
          f"{sum(retries.seen.values())} ({dict(retries.seen)}); deadlocks reaching the "
          f"connection= producers: {sum(caller_deadlocks.values())}")

    assert failed == []
    if target.database == "postgresql":
        assert sum(caller_deadlocks.values()) == 0
        assert sum(retries.seen.values()) <= 4
    elif target.database in ("mysql", "mariadb") and grouped:
        assert sum(retries.seen.values()) <= 20
    assert not any(t.is_alive() for t in consuming)
    # every offer answered, each message created or updated (its payload is new)
    assert all(len(outcomes) == BATCH and set(outcomes) <= {OfferOutcome.CREATED,
                                                             OfferOutcome.UPDATED}
               for _, _, _, outcomes in offers)
    offered = {m.payload: m.key for _, _, batch, _ in offers for m in batch}
    # what was handled was offered, under its own key, and each payload once: its claim
    # held for the whole run (acquire_timeout), so a second handling means two live claims
    assert [(key, p) for key, p, _ in handled if offered.get(p) != key] == []
    twice = {p: n for p, n in collections.Counter(p for _, p, _ in handled).items() if n > 1}
    assert twice == {}
    # each key's last offer was handled: the queue is empty, and an offer that committed
    # after it would have been another message. Which offer committed last is known up to
    # the calls that overlapped it in time: one of those last ones was handled.
    by_key: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for began_at, ended_at, batch, _ in offers:
        for m in batch:
            by_key[m.key].append((began_at, ended_at, m.payload))
    payloads = {p for _, p, _ in handled}
    lost = []
    for key, calls in by_key.items():
        latest_start = max(b for b, _, _ in calls)
        last = [p for _, e, p in calls if e >= latest_start]
        if not payloads.intersection(last):
            lost.append(key)
    assert lost == []
    assert offers
