"""CronService on every backend: ticks stored ahead, reconfiguration, uninstall, many installers.

The queues run on the shared FakeClock (2030-01-01 00:00 UTC at the start), so a test moves
time by advancing it; only the background-installer tests wait for another thread, by polling
with a deadline.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from sqldelay import (
    CronMessage,
    CronService,
    DelayedQueue,
    InvalidArgumentError,
    OfferOutcome,
)
from sqldelay.cron_base import tick_key

from ..helpers import wait_for

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
START = datetime(2030, 1, 1, tzinfo=UTC)
DEADLINE = 30.0


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def drain(q: DelayedQueue) -> list[tuple[str, object]]:
    """Poll and ack everything due now; (key, payload) in delivery order."""
    got = []
    while batch := q.poll_many(100):
        for env in batch:
            got.append((env.key, env.payload))
            assert env.ack()
    return got


def keys_of(handle, *ats: datetime) -> list[str]:
    return [tick_key(handle.prefix, handle.config_hash, at) for at in ats]


def test_install_stores_ahead_ticks_and_delivers_each_at_its_time(make_queue, clock):
    q = make_queue()
    cron = q.cron()
    with cron.install_cron("nightly-report", "0 2 * * *", payload={"kind": "report"},
                           tz="Europe/Bucharest", ahead=4) as handle:
        days = [utc(2030, 1, d) for d in (2, 3, 4, 5)]  # 02:00 EET is 00:00 UTC
        assert all(q.contains(k) for k in keys_of(handle, *days))
        [listed] = cron.list()
        assert (listed.prefix, listed.config_hash) == ("nightly-report", handle.config_hash)
        assert (listed.next_at, listed.pending, listed.in_flight) == (days[0], 4, 0)
        assert drain(q) == []
        clock.set(days[0])
        assert drain(q) == [(keys_of(handle, days[0])[0], {"kind": "report"})]
        assert cron.list()[0].next_at == days[1]
    assert not handle.running


def test_payload_fn_makes_each_payload_and_reinstalling_adds_nothing(make_queue, clock):
    q = make_queue()
    cron = q.cron()
    with cron.install_daily("digest", at_hours=[8, 20], tz="UTC", ahead=3,
                            payload_fn=lambda when: {"at": when.isoformat()}) as handle:
        first = handle.config_hash
    with cron.install_daily("digest", at_hours=[20, 8], tz="UTC", ahead=3,
                            payload_fn=lambda when: {"at": when.isoformat()}) as handle:
        assert handle.config_hash == first
    assert [(s.pending, s.next_at) for s in cron.list()] == [(3, utc(2030, 1, 1, 8))]
    clock.set(utc(2030, 1, 2, 8))
    assert [p for _, p in drain(q)] == [{"at": f"2030-01-0{d}T{h}:00:00+00:00"}
                                        for d, h in ((1, "08"), (1, 20), (2, "08"))]


def test_reconfiguration_replaces_exactly_the_old_configurations_future_ticks(make_queue,
                                                                              clock):
    q = make_queue()
    cron = q.cron()
    other = cron.install_periodic("other", every=HOUR, payload="other", ahead=3)
    q.offer("nightly", "a plain message", START + HOUR)
    q.offer("nightly-manual", "another", START + HOUR)
    old = cron.install_periodic("nightly", every=HOUR, payload="A", ahead=3)
    old_keys = keys_of(old, utc(2030, 1, 1, 1), utc(2030, 1, 1, 2), utc(2030, 1, 1, 3))
    clock.set(utc(2030, 1, 1, 1, 1))  # A's 01:00 tick is due, not yet taken
    new = cron.install_cron("nightly", "30 * * * *", payload="B", ahead=2)
    assert not old.running  # the service stopped its installer of the old configuration
    assert new.config_hash != old.config_hash
    # A's due tick stays (its time came under A); A's future ticks are gone; B's are stored
    assert [q.contains(k) for k in old_keys] == [True, False, False]
    assert all(q.contains(k) for k in keys_of(new, utc(2030, 1, 1, 1, 30), utc(2030, 1, 1, 2, 30)))
    assert [(s.prefix, s.config_hash, s.pending) for s in cron.list()] == sorted([
        ("nightly", old.config_hash, 1), ("nightly", new.config_hash, 2),
        ("other", other.config_hash, 3)])
    assert q.contains("nightly") and q.contains("nightly-manual")
    cron.close()


def test_uninstall_removes_exactly_the_current_ticks(make_queue):
    q = make_queue()
    cron = q.cron()
    cron.install_periodic("sync", every=MINUTE * 15, payload=1, ahead=3)
    kept = cron.install_periodic("sync2", every=MINUTE * 15, payload=1, ahead=3)
    q.offer("sync", "a plain message", START + HOUR)
    assert cron.uninstall("sync") == 3
    assert [(s.prefix, s.pending) for s in cron.list()] == [("sync2", 3)]
    assert q.contains("sync")
    assert q.stats().scheduled == 4
    assert cron.uninstall("sync") == 0
    # the low level: only the named configuration goes
    assert cron.uninstall_tick("0123456789abcdef", "sync2") == 0
    assert cron.uninstall_tick(kept.config_hash, "sync2") == 3
    assert cron.list() == []
    cron.close()


def test_install_tick_and_uninstall_tick(make_queue, clock, front):
    q = make_queue()
    cron = front.cron(q)
    ats = [START + MINUTE * i for i in (1, 2, 3)]
    msgs = [CronMessage(at, {"n": i}) for i, at in enumerate(ats)]
    assert cron.install_tick("v1", "job", msgs) == [OfferOutcome.CREATED] * 3
    assert cron.install_tick("v1", "job", msgs) == [OfferOutcome.IGNORED] * 3
    assert [q.get(tick_key("job", "v1", at)).payload for at in ats] == [{"n": 0}, {"n": 1},
                                                                        {"n": 2}]
    assert cron.install_tick("v2", "job", msgs[:1]) == [OfferOutcome.CREATED]
    assert [(s.config_hash, s.pending) for s in cron.list("job")] == [("v2", 1)]
    assert cron.uninstall_tick("v2", "job") == 1
    assert cron.list() == []


def test_three_concurrent_installers_store_and_deliver_each_tick_once(make_queue, clock, front):
    name = make_queue().name
    services = [front.cron(make_queue(name)) for _ in range(3)]
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def install(cron: CronService) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                cron.install_periodic("sync", every=MINUTE, payload="tick", ahead=20)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=install, args=(s,)) for s in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in services:
        s.close()
    assert errors == []
    q = services[0].queue
    assert [s.pending for s in services[0].list()] == [20]
    clock.advance(MINUTE * 25)
    delivered = drain(q)
    assert len(delivered) == 20
    assert sorted(Counter(k for k, _ in delivered).values()) == [1] * 20
    assert [q.get(k) for k, _ in delivered] == [None] * 20


def test_prefixes_with_like_wildcards_touch_only_themselves(make_queue):
    q = make_queue()
    cron = q.cron()
    prefixes = ["a%", "a_b", "aXb", "a!", "a!b", "ab", "a", "a%b"]
    for p in prefixes:
        cron.install_periodic(p, every=HOUR, payload=p, ahead=2)
    cron.install_periodic("a%", every=HOUR, payload="changed", ahead=2)  # reconfigure
    cron.install_periodic("a_b", every=HOUR, payload="changed", ahead=2)
    assert cron.uninstall("a!") == 2
    assert cron.uninstall("a") == 2
    found = {s.prefix: s.pending for s in cron.list()}
    assert found == {p: 2 for p in prefixes if p not in ("a!", "a")}
    assert cron.list("a%")[0].pending == 2
    cron.close()


def test_prefixes_differing_in_case_are_distinct(make_queue):
    q = make_queue()
    cron = q.cron()
    cron.install_periodic("Report", every=HOUR, payload=1, ahead=2)
    cron.install_periodic("report", every=HOUR, payload=1, ahead=2)
    assert cron.uninstall("report") == 2
    assert [(s.prefix, s.pending) for s in cron.list()] == [("Report", 2)]
    cron.close()


def test_an_in_flight_tick_survives_reconfiguration_and_uninstall(make_queue, clock):
    q = make_queue()
    cron = q.cron()
    old = cron.install_periodic("job", every=MINUTE, payload="A", ahead=3)
    clock.set(START + MINUTE)
    env = q.poll()
    assert (env.key, env.payload) == (keys_of(old, START + MINUTE)[0], "A")
    new = cron.install_periodic("job", every=MINUTE, payload="B", ahead=3)
    assert q.contains(env.key)
    assert not any(q.contains(k) for k in keys_of(old, START + 2 * MINUTE, START + 3 * MINUTE))
    assert cron.uninstall("job") == 3
    assert [(s.config_hash, s.pending, s.in_flight) for s in cron.list()] == [
        (old.config_hash, 0, 1)]
    assert env.ack()
    assert not new.running
    assert cron.list() == []


def test_bad_input_is_rejected_before_anything_is_written(make_queue):
    q = make_queue()
    cron = q.cron()
    cron.install_periodic("keep", every=HOUR, payload=1, ahead=2)
    bad = [
        (lambda: cron.install_cron("x", "61 * * * *"), "cron expression"),
        (lambda: cron.install_cron("x", "0 2 * * *", tz="Mars/Olympus"), "time zone"),
        (lambda: cron.install_cron("x", "0 2 * * *", ahead=0), "ahead"),
        (lambda: cron.install_periodic("a/b", every=HOUR), "must not contain '/'"),
        (lambda: cron.install_periodic("", every=HOUR), "prefix"),
        (lambda: cron.install_periodic("x", every=HOUR, payload=1, payload_fn=str), "not both"),
        (lambda: cron.install_tick("h", "keep", [CronMessage(datetime(2030, 1, 2), 1)]),
         "naive"),
        (lambda: cron.install_tick("h/1", "keep", []), "config_hash"),
        (lambda: cron.install_tick("h", "keep", [CronMessage(START + HOUR, object())]),
         "payload|serializ|JSON"),
        (lambda: cron.uninstall("a/b"), "must not contain '/'"),
    ]
    for call, message in bad:
        with pytest.raises(InvalidArgumentError, match=message):
            call()
    assert [(s.prefix, s.pending) for s in cron.list()] == [("keep", 2)]
    assert q.stats().scheduled == 2
    cron.close()


def test_background_installer_keeps_ticks_ahead_until_closed(make_queue, clock, front):
    q = make_queue()
    cron = front.cron(q, refresh=timedelta(milliseconds=10))
    handle = cron.install_periodic("beat", every=MINUTE, payload="b", ahead=2)
    assert cron.list()[0].pending == 2
    clock.set(START + MINUTE)  # the first tick is due: one more is needed to keep two ahead
    third = keys_of(handle, START + 3 * MINUTE)[0]
    wait_for(lambda: q.contains(third), DEADLINE, "the installer to store the third tick")
    handle.close()
    assert not handle.running


def test_background_installer_carries_on_while_the_database_is_unreachable(
        table_name, clock, caplog, front):
    engine = front.create_engine(poolclass=NullPool)
    down = threading.Event()
    refused = threading.Semaphore(0)

    @sa.event.listens_for(front.events_of(engine), "do_connect")
    def refuse(dialect, conn_rec, cargs, cparams):
        if down.is_set():
            refused.release()
            raise ConnectionRefusedError("database unreachable (test)")

    try:
        q = front.queue(f"cron_down_{id(engine)}", engine=engine, table_name=table_name,
                        clock=clock)
        cron = front.cron(q, refresh=timedelta(milliseconds=10))
        with caplog.at_level(logging.WARNING, logger="sqldelay.cron"):
            handle = cron.install_periodic("beat", every=MINUTE, payload="b", ahead=2)
            down.set()
            clock.set(START + MINUTE)
            assert refused.acquire(timeout=DEADLINE) and refused.acquire(timeout=DEADLINE)
            down.clear()
            third = keys_of(handle, START + 3 * MINUTE)[0]
            wait_for(lambda: q.contains(third), DEADLINE, "the installer to recover")
            handle.close()
        assert not handle.running
        failures = [r for r in caplog.records if r.name == "sqldelay.cron"]
        assert failures and "beat" in failures[0].getMessage()
        assert isinstance(failures[0].exc_info[1], ConnectionRefusedError)
        cron.uninstall("beat")
    finally:
        front.dispose(engine)
