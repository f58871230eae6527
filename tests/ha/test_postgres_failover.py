"""PostgreSQL failover under Patroni: a primary and a synchronous standby (streaming
replication, Patroni's synchronous mode, etcd), started by the test on loopback ports.

Producers (``offer``, ``offer_many``, and ``offer`` in the producer's own transaction) and two
consumers (a ``Worker`` over psycopg and an ``AsyncWorker`` over asyncpg, both with LISTEN
wake-ups) run through a multi-host URL with ``target_session_attrs=read-write`` while the
primary's postmaster is killed (SIGKILL) or, separately, switched over with ``patronictl
switchover``. Counted from their own records: every offer that returned is handled, no
message is handled again after its ack returned, both consumers carry on by themselves, and
wake-ups are back after the failover.

With asynchronous replication (Patroni's default), the same run with the primary killed may
lose what the old primary acknowledged within the standby's replication lag before the kill,
and nothing acknowledged earlier.
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, Worker, create_schema, patience
from tools import ha

from ..fronts import AsyncFront
from ..helpers import in_thread, wait_for
from .records import Records, record_acks, started_cluster

pytestmark = pytest.mark.ha

ACQUIRE = timedelta(seconds=10)
PATIENCE = 30.0  # seconds the producers' offers wait out the failover
IDLE_POLL = timedelta(seconds=5)  # long: a wake-up much sooner than this came by LISTEN


@pytest.fixture
def cluster():
    yield from started_cluster(lambda: ha.PatroniCluster(synchronous=True))


@pytest.fixture
def async_cluster():
    yield from started_cluster(lambda: ha.PatroniCluster(synchronous=False))


class Producers:
    """Three producer threads offering to both queues until stopped, each writing down what
    returned and what raised: ``offer``, ``offer_many`` (five at a time), and ``offer`` in a
    transaction of the producer's own (``connection=``), which is not retried for it; and a
    consumer that claims and acks in its own transactions."""

    def __init__(self, engine: sa.Engine, queues: list[DelayedQueue], records: Records):
        self.engine, self.queues, self.records = engine, queues, records
        self.stop = threading.Event()
        self.threads = [in_thread(self._offer), in_thread(self._offer_many),
                        in_thread(self._offer_in_transaction),
                        in_thread(self._claim_in_transaction)]

    def _paced(self, name: str, body) -> None:
        with patience(PATIENCE):  # above the default, as the figures in the docs were taken
            self._paced_patiently(name, body)

    def _paced_patiently(self, name: str, body) -> None:
        for n in itertools.count():
            if self.stop.wait(0.02):  # pacing, not synchronisation: about 50 calls a second
                return
            started = time.monotonic()
            try:
                keys, node = body(self.queues[n % 2], f"{name}-{n}")
            except sa.exc.DBAPIError as exc:
                self.records.offer_failed(name, exc, started)
            else:
                self.records.offer_returned(keys, started, node)

    def _offer(self) -> None:
        def body(q, key):
            q.offer(f"{q.name}:{key}", key)
            return [f"{q.name}:{key}"], None
        self._paced("offer", body)

    def _offer_many(self) -> None:
        def body(q, key):
            keys = [f"{q.name}:{key}.{i}" for i in range(5)]
            q.offer_many([Message(k, k) for k in keys])
            return keys, None
        self._paced("offer_many", body)

    def _offer_in_transaction(self) -> None:
        def body(q, key):
            with self.engine.begin() as conn:  # and which node took it, for the failover time
                q.offer(f"{q.name}:{key}", key, connection=conn)
                port = conn.exec_driver_sql("SELECT inet_server_port()").scalar_one()
            return [f"{q.name}:{key}"], port
        self._paced("in_transaction", body)

    def _claim_in_transaction(self) -> None:
        """A consumer of its own: claims, handles and acks in one transaction of its own
        (``connection=``), which is not retried for it either."""
        def body(q, _):
            with self.engine.begin() as conn:
                envelopes = q.poll_many(5, connection=conn)
                for envelope in envelopes:
                    self.records.handle(envelope.key, "caller", envelope.row_id)
                    q.ack(envelope, connection=conn)
            self.records.ack_returned([e.key for e in envelopes])
            return [], None
        self._paced("claim_in_transaction", body)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive(), "a producer hung"


def _wake_up_latency(cluster: ha.PatroniCluster, queue_name: str, records: Records) -> float:
    """The median time from an offer's commit to its handling, over five offers made through
    the primary's own address: a URL the consumers do not use, so no in-process wake-up
    reaches them and only the database's notification can."""
    engine = sa.create_engine(cluster.node_url(cluster.leader()), poolclass=sa.pool.NullPool)
    try:
        probe = DelayedQueue(engine, queue_name, acquire_timeout=ACQUIRE)
        latencies = []
        for n in range(5):
            key = f"{queue_name}:probe-{time.monotonic_ns()}-{n}"
            offered = time.monotonic()
            probe.offer(key, key)
            wait_for(lambda key=key: key in records.handled, 30, f"the probe {key} to be handled")
            latencies.append(records.handled[key][0][0] - offered)
        return statistics.median(latencies)
    finally:
        engine.dispose()


def _seconds(figures: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}s" for name, value in figures.items())


class WalPositions:
    """The primary's WAL position (``pg_current_wal_lsn()``, in bytes), sampled every 20 ms
    until the primary is gone, each with the time just before it was asked: whatever
    returned before that time is at or below that position."""

    def __init__(self, url: str) -> None:
        self.samples: list[tuple[float, int]] = []
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.stop = threading.Event()
        self.thread = in_thread(self._sample)

    def _sample(self) -> None:
        try:
            with self.engine.connect() as conn:
                while not self.stop.wait(0.02):  # pacing, not synchronisation
                    asked = time.monotonic()
                    lsn = conn.exec_driver_sql(
                        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").scalar_one()
                    self.samples.append((asked, int(lsn)))
        except sa.exc.DBAPIError:
            pass  # the primary is gone
        finally:
            self.engine.dispose()

    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def last_before(self, lsn: int) -> float:
        """The last time the primary was seen below ``lsn``: whatever returned before then
        had been written below ``lsn``."""
        return max(t for t, at in self.samples if at < lsn)


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _switchpoint(url: str) -> int:
    """Where the promoted standby's timeline leaves the old one: the end of the WAL it had
    received from the old primary (the last line of its newest timeline history file)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            files = conn.exec_driver_sql("SELECT pg_ls_dir('pg_wal')").scalars().all()
            newest = max(f for f in files if f.endswith(".history"))
            text = conn.exec_driver_sql(f"SELECT pg_read_file('pg_wal/{newest}')").scalar_one()
    finally:
        engine.dispose()
    return _lsn(text.strip().splitlines()[-1].split()[1])


def _walsenders(url: str) -> list[int]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.exec_driver_sql("SELECT pid FROM pg_stat_replication"
                                             " WHERE state = 'streaming'").scalars())
    finally:
        engine.dispose()


class Failover:
    """The run: consumers and producers through the multi-host URLs, the primary killed or
    switched over mid-run, until both consumers handled a message of the new primary and the
    producers offered again; then ``settled`` is waited for and the wake-ups measured."""

    def __init__(self, cluster: ha.PatroniCluster, failure: str,
                 settled: Callable[[Records, list[DelayedQueue]], bool], *,
                 stall: int | None = None):
        """``stall``: before the kill, hold the primary's WAL senders (SIGSTOP) until it has
        written that many bytes the standby does not have, and kill them with it, so that
        the failover loses them (with asynchronous replication)."""
        self.records = records = Records()
        self.failure = failure
        engine = sa.create_engine(cluster.url("psycopg"), pool_pre_ping=True, pool_size=10)
        create_schema(engine)
        front = AsyncFront(cluster.url("asyncpg"), pool_pre_ping=True)
        workers, threads = [], []
        producers = None
        try:
            sync_q = DelayedQueue(engine, "ha-sync", acquire_timeout=ACQUIRE)
            async_q = front.queue("ha-async", acquire_timeout=ACQUIRE)
            producers_q = [sync_q, DelayedQueue(engine, "ha-async", acquire_timeout=ACQUIRE)]
            for q in (sync_q, async_q):
                record_acks(q, records)
            workers = [Worker(sync_q, lambda e: records.handle(e.key, "Worker", e.row_id),
                              concurrency=4, batch_size=20, idle_poll=IDLE_POLL),
                       front.worker(async_q,
                                    lambda e: records.handle(e.key, "AsyncWorker", e.row_id),
                                    concurrency=4, batch_size=20, idle_poll=IDLE_POLL)]
            threads = [in_thread(w.run) for w in workers]
            self.before = {q: _wake_up_latency(cluster, q, records)
                           for q in ("ha-sync", "ha-async")}

            primary = cluster.node_url(cluster.leader())
            self.wal = WalPositions(primary) if stall is not None else None
            producers = Producers(engine, producers_q, records)
            wait_for(lambda: len(records.handled) >= 300, 60, "300 messages handled before")

            held = []
            if self.wal is not None:
                # the fixture saw the standby streaming; a walsender the load restarted
                # since (its standby reconnecting) is waited for
                held = wait_for(lambda: _walsenders(primary), 30, "a standby streaming")
                for pid in held:
                    os.kill(pid, signal.SIGSTOP)
                self.stalled_at = self.wal.last()
                wait_for(lambda: self.wal.last() - self.stalled_at >= stall, 30,
                         "the primary to write past what the standby has")
            self.killed_at = killed_at = time.monotonic()
            self.old = cluster.kill_primary() if failure == "kill" else cluster.switchover()
            for pid in held:
                os.kill(pid, signal.SIGKILL)  # they end with it, never sending what they held
            if self.wal is not None:
                self.wal.finish()
            alive = lambda: all(t.is_alive() for t in threads) or pytest.fail("a worker died")  # noqa: E731
            self.new = wait_for(lambda: cluster.leader() not in (None, self.old)
                                and cluster.leader(), 60, "a new primary")
            self.port = port = cluster.pg_ports[self.new]
            self.firsts = {
                who: wait_for(lambda who=who: records.first_handled_of(port, killed_at, who),
                              120, f"{who} to handle a message of the new primary",
                              meanwhile=alive)
                for who in ("Worker", "AsyncWorker")}
            if self.wal is not None:
                self.switchpoint = _switchpoint(cluster.node_url(self.new))
            resumed = time.monotonic()
            wait_for(lambda: records.offers_after(resumed) >= 200, 60,
                     "producers offering again after the failover")
            producers.finish()
            wait_for(lambda: settled(records, producers_q), 120, "the queues to settle",
                     meanwhile=alive)
            self.after = {q: _wake_up_latency(cluster, q, records)
                          for q in ("ha-sync", "ha-async")}
        finally:
            if self.wal is not None:
                self.wal.finish()
            if producers is not None:
                producers.stop.set()
            for worker in workers:
                worker.stop()
            for thread in threads:
                thread.join(60)
            front.close()
            engine.dispose()
        assert not any(t.is_alive() for t in threads), "a worker did not stop"

    def report(self) -> str:
        records, killed_at = self.records, self.killed_at
        failover = records.first_handled_of(self.port, killed_at) - killed_at
        return (f"\n[{self.failure}] {self.old} -> {self.new}: first message handled on the "
                f"new primary {failover:.2f}s after the {self.failure} (Worker "
                f"{self.firsts['Worker'] - killed_at:.2f}s, AsyncWorker "
                f"{self.firsts['AsyncWorker'] - killed_at:.2f}s); {len(records.offered)}"
                f" offers returned, {sum(map(len, records.offer_errors.values()))} raised "
                f"{dict((k, len(v)) for k, v in records.offer_errors.items())}; handled twice: "
                f"{len(records.handled_twice())} (an ack lost in the failover, or "
                f"{len(records.created_again())} created again by an offer sent again); "
                f"wake-up median "
                f"before {_seconds(self.before)} after {_seconds(self.after)}; slowest call "
                f"{max(records.offer_seconds):.2f}s")


@pytest.mark.parametrize("failure", ["kill", "switchover"])
def test_a_failover_loses_no_acknowledged_offer_or_ack(cluster, failure, capsys):
    run = Failover(cluster, failure, lambda records, queues: not records.lost())
    with capsys.disabled():
        print(run.report())
    assert not run.records.lost()
    # an offer whose commit the failover hid is sent again; if its message was handled and
    # acked meanwhile, that creates it again, a new row (docs/high-availability.md): no row
    # may come back after its ack
    created_again = run.records.created_again()
    assert {key: run.records.story(key) for key in run.records.acked_then_redelivered()
            if key not in created_again} == {}, f"{failure} at {run.killed_at}"


STALL = 64 * 1024  # bytes of WAL the standby lacks at the kill: far below Patroni's 1 MB


def _drained(records: Records, queues: list[DelayedQueue]) -> bool:
    """Every message still in the queues handled: what is missing then is lost."""
    return all((s.due, s.scheduled, s.in_flight) == (0, 0, 0)
               for s in (q.stats() for q in queues))


def test_asynchronous_replication_loses_only_what_the_standby_had_not_received(async_cluster,
                                                                               capsys):
    """Patroni's default, asynchronous replication: the primary killed under load while its
    standby lags ``STALL`` bytes behind (its WAL senders held). What is lost (offers that
    returned and were never handled, acks that returned and whose message came back) is
    only what the old primary acknowledged after the last WAL the new primary received
    (its timeline's switch point): nothing that returned while the old primary was still
    below that point."""
    run = Failover(async_cluster, "kill", _drained, stall=STALL)
    records, killed_at = run.records, run.killed_at
    lost = {key: records.offered[key] for key in records.lost()}
    created_again = records.created_again()  # as in the test above
    redelivered = {key: records.acked[key] for key in records.acked_then_redelivered()
                   if key not in created_again}
    safe = run.wal.last_before(run.switchpoint)  # what returned before this was received
    with capsys.disabled():
        print(f"{run.report()}; asynchronous replication, the standby "
              f"{run.wal.last() - run.switchpoint} bytes behind at the kill, received all "
              f"that returned up to {(killed_at - safe) * 1000:.0f} ms before it; lost "
              f"{len(lost)} offers (returned {_before(lost, killed_at)} before the kill), "
              f"{len(redelivered)} acks (returned {_before(redelivered, killed_at)} before)")
    too_early = {key: killed_at - t for key, t in {**lost, **redelivered}.items() if t <= safe}
    assert not too_early, f"lost though the new primary had received it: {too_early}"
    # the stall made something to lose: offers the old primary acknowledged after that point
    # (those the handlers took and acked before the kill are lost without a trace here)
    assert any(safe < t <= killed_at for t in records.offered.values())


def _before(returned: dict[str, float], moment: float) -> str:
    if not returned:
        return "-"
    ago = [moment - t for t in returned.values()]
    return f"{min(ago) * 1000:.0f} to {max(ago) * 1000:.0f} ms"
