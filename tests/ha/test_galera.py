"""MariaDB Galera: three nodes (galera-4 and the installed MariaDB) started by the test on
loopback ports, producers and consumers spread over them. Every node takes writes; claims on
two nodes that take the same row conflict at commit (certification, reported as a deadlock,
1213), and sqldelay runs them again. Counted from the producers' and handlers' own records:
each offer that returned is handled, none twice while its consumer lives, none after its ack
returned, and a node killed mid-run loses nothing while the others carry on.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, UnsupportedFeatureError, Worker, create_schema, patience
from tools import ha

from ..conftest import unique_name
from ..helpers import in_thread, wait_for
from .records import Records, record_acks, run_until_handled, started_cluster

pytestmark = pytest.mark.ha

ACQUIRE = timedelta(seconds=10)


@pytest.fixture
def cluster():
    """A cluster of the test's own: for a test that kills a node."""
    yield from started_cluster(lambda: ha.GaleraCluster(3))


@pytest.fixture(scope="module")
def shared():
    """One cluster for the tests that leave every node running (each in queues of its own
    names): starting three nodes takes about ten seconds."""
    yield from started_cluster(lambda: ha.GaleraCluster(3))


class Deadlocks:
    """The certification conflicts (1213) each node's connections met, as the driver raised
    them (sqldelay retries them)."""

    def __init__(self, engines: dict[str, sa.Engine]) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        for name, engine in engines.items():
            sa.event.listen(engine, "handle_error", self._seen(name))

    def _seen(self, name: str):
        def seen(context) -> None:
            orig = getattr(context.original_exception, "args", ())
            if orig and orig[0] == 1213:
                self.count[name] += 1
        return seen


def _engines(cluster: ha.GaleraCluster) -> dict[str, sa.Engine]:
    return {n: sa.create_engine(cluster.url(n), pool_pre_ping=True, pool_size=10)
            for n in cluster.names}


def test_three_nodes_hand_each_offer_out_once_and_survive_a_node_killed(cluster, capsys):
    engines = _engines(cluster)
    create_schema(engines["g0"])
    deadlocks = Deadlocks(engines)
    records = Records()
    queues = {n: DelayedQueue(e, "galera", acquire_timeout=ACQUIRE) for n, e in engines.items()}
    stop = threading.Event()

    def produce(node: str) -> None:
        q = queues[node]
        with patience(5):
            for n in itertools.count():
                if stop.wait(0.02):  # pacing, not synchronisation
                    return
                keys = [f"{node}-{n}.{i}" for i in range(1 if n % 2 else 5)]
                started = time.monotonic()
                try:
                    if len(keys) == 1:
                        q.offer(keys[0], keys[0])
                    else:
                        q.offer_many([Message(k, k) for k in keys])
                except sa.exc.DBAPIError as exc:
                    records.offer_failed(node, exc, started)
                else:
                    records.offer_returned(keys, started, node)

    for q in queues.values():
        record_acks(q, records)
    workers = {n: Worker(q, lambda e, n=n: records.handle(e.key, n), concurrency=4,
                         batch_size=20, idle_poll=timedelta(milliseconds=200))
               for n, q in queues.items()}
    threads = [in_thread(w.run) for w in workers.values()]
    producers = [in_thread(lambda n=n: produce(n)) for n in cluster.names]
    try:
        wait_for(lambda: len(records.handled) >= 300, 120, "300 messages handled")
        killed_at = time.monotonic()
        cluster.kill("g2")
        for node in ("g0", "g1"):
            wait_for(lambda node=node: records.first_handled_of(node, killed_at + 1) and
                     records.first_handled_by(node, killed_at + 1), 60,
                     f"{node} producing and consuming after the kill")
        resumed = time.monotonic()
        wait_for(lambda: records.offers_after(resumed) >= 200, 60, "offers after the kill")
        stop.set()
        for thread in producers:
            thread.join(60)
        # what g2's worker had claimed and not acked comes back when its locks expire
        wait_for(lambda: not records.lost(), 120, "every offer that returned to be handled")
    finally:
        stop.set()
        for worker in workers.values():
            worker.stop()
        for thread in threads:
            thread.join(60)
        for engine in engines.values():
            engine.dispose()

    second_runs = {k: runs for k, runs in records.handled_twice().items()
                   if any(by != "g2" for _, by in runs[:-1])}
    with capsys.disabled():
        print(f"\n[galera] {len(records.offered)} offers returned, "
              f"{dict((k, len(v)) for k, v in records.offer_errors.items())} raised; "
              f"handled {sum(map(len, records.handled.values()))} times; second runs after "
              f"the killed node's claims: {len(records.handled_twice())}; certification "
              f"conflicts (1213) retried: {dict(deadlocks.count)}")
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    assert not records.lost()
    assert not records.acked_then_redelivered()
    assert not second_runs, list(second_runs.items())[:5]
    assert not records.offer_errors.get("g0") and not records.offer_errors.get("g1")


@pytest.mark.parametrize("spread", ["one node", "three nodes"])
def test_claims_per_second_on_one_node_and_on_three(shared, spread, capsys):
    """The same three workers drain 3000 messages, all on one node or one on each: the
    price of SKIP LOCKED that does not see the other nodes' locks (certification conflicts,
    retried). Every message is still handled once."""
    engines = _engines(shared)
    create_schema(engines["g0"])
    deadlocks = Deadlocks(engines)
    keys = [f"k{i}" for i in range(3000)]
    name = unique_name("spread")
    DelayedQueue(engines["g0"], name, acquire_timeout=ACQUIRE).offer_many(
        [Message(k, k) for k in keys])
    nodes = ["g0"] * 3 if spread == "one node" else shared.names
    records = Records()
    workers = [Worker(DelayedQueue(engines[n], name, acquire_timeout=ACQUIRE),
                      lambda e, i=i: records.handle(e.key, f"w{i}"), concurrency=4,
                      batch_size=20, idle_poll=timedelta(milliseconds=200))
               for i, n in enumerate(nodes)]
    started = time.monotonic()
    run_until_handled(workers, records, len(keys), engines.values())
    elapsed = max(t for runs in records.handled.values() for t, _ in runs) - started
    with capsys.disabled():
        print(f"\n[galera, consumers on {spread}] {len(keys) / elapsed:.0f} claims/s "
              f"({elapsed:.1f}s for {len(keys)}); certification conflicts (1213) retried: "
              f"{sum(deadlocks.count.values())}")
    assert not records.handled_twice()
    assert set(records.handled) == set(keys)


def test_serial_groups_hold_across_nodes(shared, capsys):
    """Messages of one group are handled one at a time though their consumers claim on three
    nodes: the claims that take a group's turn write the same rows, so a second one fails
    certification and runs again."""
    engines = _engines(shared)
    create_schema(engines["g0"])
    deadlocks = Deadlocks(engines)
    keys = [f"k{i}" for i in range(300)]
    name = unique_name("groups")
    DelayedQueue(engines["g0"], name, acquire_timeout=ACQUIRE).offer_many(
        [Message(k, k, group=f"grp{i % 5}") for i, k in enumerate(keys)])
    lock = threading.Lock()
    intervals: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    records = Records()

    def handler(envelope, node):
        began = time.monotonic()
        records.handle(envelope.key, node)
        time.sleep(0.005)  # work, so that two handlings of a group would overlap
        with lock:
            intervals[f"grp{int(envelope.key[1:]) % 5}"].append((began, time.monotonic(),
                                                                  node))

    workers = [Worker(DelayedQueue(engines[n], name, acquire_timeout=ACQUIRE),
                      lambda e, n=n: handler(e, n), concurrency=4, batch_size=10,
                      idle_poll=timedelta(milliseconds=100))
               for n in shared.names]
    run_until_handled(workers, records, len(keys), engines.values())
    overlaps = [(group, a, b) for group, runs in intervals.items()
                for a, b in itertools.pairwise(sorted(runs)) if b[0] < a[1]]
    with capsys.disabled():
        print(f"\n[galera, serial groups on three nodes] overlapping handlings within a group: "
              f"{len(overlaps)}; nodes that handled: "
              f"{sorted(collections.Counter(n for r in intervals.values() for *_, n in r).items())}"
              f"; certification conflicts retried: {sum(deadlocks.count.values())}")
    assert not records.handled_twice()
    assert not overlaps, overlaps[:3]


def test_a_concurrency_cap_is_refused_on_galera_and_nothing_written(shared):
    """The cap counts the messages in flight under the settings row's lock, which Galera does
    not replicate, and claims of different messages write no row in common: consumers on
    two nodes would both see room (with a cap of 2 on three nodes, 4 ran at once)."""
    engine = sa.create_engine(shared.url("g1"), poolclass=sa.pool.NullPool)
    try:
        create_schema(engine)
        q = DelayedQueue(engine, unique_name("capped"))
        with pytest.raises(UnsupportedFeatureError, match="concurrency limit cannot hold"):
            q.set_concurrency_limit(2)
        assert q.flow_control().concurrency_limit is None  # nothing written
        q.set_concurrency_limit(None)  # lifting one is no promise
    finally:
        engine.dispose()


@pytest.mark.parametrize("spread", ["one node", "three nodes"])
def test_a_rate_limit_holds_across_nodes(shared, spread, capsys):
    """A rate limit of 20 a second, set once for the queue, obeyed by three consumers
    together, on one node or one on each: each claim charges the bucket by writing the
    settings row, and certification orders those writes across nodes."""
    engines = _engines(shared)
    create_schema(engines["g0"])
    name = unique_name("limited")
    first = DelayedQueue(engines["g0"], name, acquire_timeout=ACQUIRE)
    first.set_rate_limit(20, timedelta(seconds=1))
    keys = [f"k{i}" for i in range(120)]
    first.offer_many([Message(k, k) for k in keys])
    records = Records()
    workers = [Worker(DelayedQueue(engines[n], name, acquire_timeout=ACQUIRE),
                      lambda e, n=n: records.handle(e.key, n), concurrency=4, batch_size=10,
                      idle_poll=timedelta(milliseconds=100))
               for n in (["g0"] * 3 if spread == "one node" else shared.names)]
    run_until_handled(workers, records, len(keys), engines.values())
    starts = sorted(t for runs in records.handled.values() for t, _ in runs)
    elapsed = starts[-1] - starts[0]
    with capsys.disabled():
        print(f"\n[galera, rate limit, consumers on {spread}] {len(keys)} in {elapsed:.1f}s")
    assert not records.handled_twice()
    # a full bucket of 20, then 20 a second: 100 more take 5 s
    assert elapsed > 0.9 * (len(keys) - 20) / 20
