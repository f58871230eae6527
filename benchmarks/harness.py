"""What every scenario shares: the run's settings, its figures, threads started together.

A scenario is a function ``scenario(bench)`` that measures and calls ``bench.add(...)``; it owns
its queue names (one per scenario, in the run's own table ``bench_<pid>``) so runs beside other
people's tests on the same server never meet their data.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, create_schema, drop_schema

# the no-op job every subject moves: ours, the C clients and the peers carry the same bytes
PAYLOAD = {"job": "noop"}
OURS = "sqldelay"
# alternating rounds behind each compared figure (its median, minimum and maximum are reported)
ROUNDS = 3


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does; ``tiny`` only proves the code runs."""

    messages: int = 20_000  # batched offer / drain
    # drained four ways by flow_drain: each round long enough (2-7 s on PostgreSQL here) that
    # the rounds' spread does not swamp the few percent each variant costs, and past the
    # creations after which a new table gets planner statistics (``statistics_after``)
    flow_messages: int = 100_000
    single_messages: int = 4_000  # single offer, single poll+ack
    steady_seconds: float = 10.0
    steady_rate: int = 1_000  # messages/s the producers aim for (the db-queue design's target)
    backlogs: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    probe_polls: int = 300
    consumer_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    per_count_messages: int = 2_000
    # batches of ``batch`` messages through offer/poll/ack per preset: long enough (over a
    # minute on PostgreSQL here) for autovacuum to visit the table during the run
    churn_cycles: int = 8_000
    churn_standing: int = 10_000  # future messages that stay in the table during churn
    peer_jobs: int = 10_000
    fairness_flood: int = 100_000  # due messages in the flooded queue of flow_fairness
    quiet_messages: int = 50  # flow_fairness's quiet messages, one due every 0.1 s
    overhead_calls: int = 2_000  # statements a round of async_overhead times, each way
    shard_counts: tuple[int, ...] = (1, 2, 4)  # private PostgreSQL servers of shards_scaling
    rss_messages: int = 1_000_000  # drained by one worker while its RSS is sampled
    offer_many_sizes: tuple[int, ...] = (100_000, 300_000, 1_000_000)  # one offer_many each
    process_messages: int = 100_000  # drained by the worker in one process and in several
    fresh_messages: int = 200_000  # due in a new table before its claims are timed


SIZES = {
    "default": Sizes(),
    # backlogs of a thousand at least: below that a table of a few pages is read whole, as
    # the planner rightly prefers, and a plan says nothing of how the claim scales
    "tiny": Sizes(messages=200, flow_messages=200, single_messages=40, steady_seconds=0.5,
                  steady_rate=200, backlogs=(1_000, 3_000), probe_polls=5, consumer_counts=(1, 2),
                  per_count_messages=20, churn_cycles=4, churn_standing=50, peer_jobs=200,
                  fairness_flood=500, quiet_messages=10, overhead_calls=100,
                  shard_counts=(1, 2), rss_messages=2_000, offer_many_sizes=(500, 2_000),
                  process_messages=300, fresh_messages=500),
}


@dataclass
class Figure:
    scenario: str
    subject: str  # OURS, or the reference it is compared with ("pgbench", "pgqueuer", ...)
    metric: str  # what and in which unit: "messages/s", "p95 lag ms", "ms/poll"
    value: float | None
    params: dict = field(default_factory=dict)
    series: list = field(default_factory=list)  # [[x, y], ...] behind a plot
    note: str = ""  # why a reference is missing, or what limits a figure
    # the operations sqldelay's engine layer ran again during the figure's scenario, and the
    # deadlocks among them (``sqldelay.retry_counts``; set by the runner on our subjects)
    retries: int | None = None
    deadlocks: int | None = None

    def as_json(self) -> dict:
        return asdict(self)


class Bench:
    """One run against one database URL."""

    def __init__(self, url: str, *, sizes: Sizes, consumers: int = 4, producers: int = 4,
                 batch: int = 100, peers_url: str | None = None) -> None:
        self.url = url
        self.sizes = sizes
        self.consumers = consumers
        self.producers = producers
        self.batch = batch
        self.peers_url = peers_url
        self.figures: list[Figure] = []
        self.table = f"bench_{os.getpid()}"
        pool = max(sizes.consumer_counts + (consumers, producers)) * 2 + 4
        kwargs = {} if url.startswith("sqlite") else {"pool_size": pool, "max_overflow": pool}
        self.engine = sa.create_engine(url, **kwargs)
        self.dialect = self.engine.dialect.name
        self._tables: list[str] = []

    def close(self) -> None:
        for name in self._tables:
            drop_schema(self.engine, table_name=name)
        self.engine.dispose()

    def table_for(self, suffix: str = "", *, tuning: str | None = None,
                  history: bool = False) -> str:
        """A queue table of this run (created once, dropped by ``close``)."""
        name = f"{self.table}{suffix}"
        if name not in self._tables:
            drop_schema(self.engine, table_name=name)
            create_schema(self.engine, table_name=name, tuning=tuning, history=history)
            self._tables.append(name)
        return name

    def queue(self, name: str, *, table: str | None = None, **kwargs) -> DelayedQueue:
        """An empty queue ``name`` in this run's table."""
        q = DelayedQueue(self.engine, name, table_name=table or self.table_for(), **kwargs)
        q.clear()
        return q

    def add(self, scenario: str, subject: str, metric: str, value: float | None,
            **extra) -> Figure:
        fig = Figure(scenario, subject, metric, value, **extra)
        self.figures.append(fig)
        return fig


def fill(queue: DelayedQueue, count: int, *, start: int = 0, prefix: str = "m",
         at: datetime | None = None, chunk: int = 5_000, groups: int | None = None,
         priorities: int | None = None) -> None:
    """Offer ``count`` messages due at ``at`` (a second ago by default), in large batches
    (with ``groups``, the i-th in group ``g<i mod groups>``; with ``priorities``, at priority
    ``i mod priorities``)."""
    at = at or datetime.now(UTC) - timedelta(seconds=1)
    for lo in range(start, start + count, chunk):
        hi = min(lo + chunk, start + count)
        queue.offer_many([Message(f"{prefix}{i}", PAYLOAD, at,
                                  priority=0 if priorities is None else i % priorities,
                                  group=None if groups is None else f"g{i % groups}")
                          for i in range(lo, hi)])


def run_threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(i)`` on ``count`` threads released together; seconds until the last ends.

    The first exception of any thread is raised here once all have stopped.
    """
    return timed_threads(count, work)[0]


def timed_threads(count: int, work: Callable[[int], None]) -> tuple[float, float]:
    """``run_threads``, and the CPU seconds this process spent meanwhile (every thread's)."""
    errors: list[BaseException] = []
    ready = threading.Barrier(count + 1)

    def body(i: int) -> None:
        ready.wait()
        try:
            work(i)
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    ready.wait()
    began, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    if errors:
        raise errors[0]
    return elapsed, cpu


def produce(queue: DelayedQueue, clients: int, batch: int, batches: int,
            at: datetime) -> Callable[[int], None]:
    """A producer body (one of ``clients``): its share of ``batches`` offers of ``batch``
    messages due at ``at`` (``offer`` when ``batch`` is 1, else ``offer_many``)."""

    def work(i: int) -> None:
        for b in range(i, batches, clients):
            if batch == 1:
                queue.offer(f"k{b}", PAYLOAD, at)
            else:
                queue.offer_many([Message(f"k{b}-{j}", PAYLOAD, at) for j in range(batch)])

    return work


def offer_rate(queue: DelayedQueue, clients: int, batch: int,
               batches: int) -> tuple[float, float]:
    """Messages/s of ``batches`` offers of ``batch`` new messages from ``clients`` threads
    (``produce``), due now, and the CPU seconds this process spent on them; the queue is
    emptied afterwards."""
    elapsed, cpu = timed_threads(clients, produce(queue, clients, batch, batches,
                                                  datetime.now(UTC)))
    queue.clear()
    return batches * batch / elapsed, cpu


def drain(queue: DelayedQueue, batch: int) -> Callable[[int], None]:
    """A consumer body: claim ``batch`` at a time and ack until nothing is due."""

    def work(_: int) -> None:
        if batch == 1:
            while (env := queue.poll()) is not None:
                queue.ack(env)
        else:
            while got := queue.poll_many(batch):
                queue.ack_many(got)

    return work


def alternate(rounds: int, subjects: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Measure each subject ``rounds`` times, taking turns (a, b, a, b, ...), so a noisy
    stretch of the machine's time weighs on every subject alike; the values per subject."""
    values: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(rounds):
        for name, measure in subjects.items():
            values[name].append(measure())
    return values


def rounds_for(messages: int, rounds: int = ROUNDS) -> int:
    """``rounds``, or one for a run too small to measure (``--size tiny`` only proves the code
    runs)."""
    return rounds if messages >= 1000 else 1


def spread(values: list[float]) -> dict:
    """The median of repeated measurements, with their minimum and maximum for the report."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = (ordered[middle] if len(ordered) % 2
              else (ordered[middle - 1] + ordered[middle]) / 2)
    return {"median": median, "min": ordered[0], "max": ordered[-1], "runs": len(ordered)}


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    last = len(sorted_values) - 1
    return sorted_values[min(last, round(p / 100 * last))]
