"""PostgreSQL failover under Patroni: a primary and a synchronous standby (streaming
replication, Patroni's synchronous mode, etcd), started by the test on loopback ports.

Producers (``offer``, ``offer_many``, and ``offer`` in the producer's own transaction) and two
consumers (a ``Worker`` over psycopg and an ``AsyncWorker`` over asyncpg, both with LISTEN
wake-ups) run through a multi-host URL with ``target_session_attrs=read-write`` while the
primary's postmaster is killed (SIGKILL) or, separately, switched over with ``patronictl
switchover``. Counted from their own records: every offer that returned is handled, no
message is handled again after its ack returned, both consumers carry on by themselves, and
wake-ups are back after the failover.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
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
                    self.records.handle(envelope.key, "caller")
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


@pytest.mark.parametrize("failure", ["kill", "switchover"])
def test_a_failover_loses_no_acknowledged_offer_or_ack(cluster, failure, capsys):
    engine = sa.create_engine(cluster.url("psycopg"), pool_pre_ping=True, pool_size=10)
    create_schema(engine)
    front = AsyncFront(cluster.url("asyncpg"), pool_pre_ping=True)
    records = Records()
    workers, threads = [], []
    producers = None
    try:
        sync_q = DelayedQueue(engine, "ha-sync", acquire_timeout=ACQUIRE)
        async_q = front.queue("ha-async", acquire_timeout=ACQUIRE)
        producers_q = [sync_q, DelayedQueue(engine, "ha-async", acquire_timeout=ACQUIRE)]
        for q in (sync_q, async_q):
            record_acks(q, records)
        workers = [Worker(sync_q, lambda e: records.handle(e.key, "Worker"), concurrency=4,
                          batch_size=20, idle_poll=IDLE_POLL),
                   front.worker(async_q, lambda e: records.handle(e.key, "AsyncWorker"),
                                concurrency=4, batch_size=20, idle_poll=IDLE_POLL)]
        threads = [in_thread(w.run) for w in workers]
        before = {q: _wake_up_latency(cluster, q, records) for q in ("ha-sync", "ha-async")}

        producers = Producers(engine, producers_q, records)
        wait_for(lambda: len(records.handled) >= 300, 60, "300 messages handled before")

        killed_at = time.monotonic()
        old = cluster.kill_primary() if failure == "kill" else cluster.switchover()
        alive = lambda: all(t.is_alive() for t in threads) or pytest.fail("a worker died")  # noqa: E731
        new = wait_for(lambda: cluster.leader() not in (None, old) and cluster.leader(), 60,
                       "a new primary")
        port = cluster.pg_ports[new]
        firsts = {who: wait_for(lambda who=who: records.first_handled_of(port, killed_at, who),
                                120, f"{who} to handle a message of the new primary",
                                meanwhile=alive)
                  for who in ("Worker", "AsyncWorker")}
        resumed = time.monotonic()
        wait_for(lambda: records.offers_after(resumed) >= 200, 60,
                 "producers offering again after the failover")
        producers.finish()
        wait_for(lambda: not records.lost(), 120, "every offer that returned to be handled",
                 meanwhile=alive)
        after = {q: _wake_up_latency(cluster, q, records) for q in ("ha-sync", "ha-async")}
    finally:
        if producers is not None:
            producers.stop.set()
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(60)
        front.close()
        engine.dispose()

    failover = records.first_handled_of(port, killed_at) - killed_at
    with capsys.disabled():
        print(f"\n[{failure}] {old} -> {new}: first message handled on the new primary "
              f"{failover:.2f}s after the {failure} (Worker {firsts['Worker'] - killed_at:.2f}s,"
              f" AsyncWorker {firsts['AsyncWorker'] - killed_at:.2f}s); {len(records.offered)}"
              f" offers returned, {sum(map(len, records.offer_errors.values()))} raised "
              f"{dict((k, len(v)) for k, v in records.offer_errors.items())}; handled twice "
              f"(ack lost in the failover): {len(records.handled_twice())}; wake-up median "
              f"before {_seconds(before)} after {_seconds(after)}; slowest call "
              f"{max(records.offer_seconds):.2f}s")
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    assert not records.lost()
    assert not records.acked_then_redelivered()
    # offers outside a transaction of the caller's are retried by sqldelay through the failover
    assert not records.offer_errors.get("offer") and not records.offer_errors.get("offer_many")
    # the caller's own transaction gets a clear error it can retry: the connection was lost
    for error in [*records.offer_errors.get("in_transaction", []),
                  *records.offer_errors.get("claim_in_transaction", [])]:
        assert isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError), repr(error)
    assert max(records.offer_seconds) < failover + 5  # nothing hangs past the failover
    for name, latency in after.items():  # LISTEN is back on the new primary
        assert latency < IDLE_POLL.total_seconds() / 5, (name, latency)
