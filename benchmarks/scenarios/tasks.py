"""Tasks against the raw queue: the cost of the task layer (sqldelay.tasks).

tasks_drain: ``peer_jobs`` calls of a no-op, each produced by its own call and then run by a
``Worker`` (``concurrency=consumers``, ``batch_size=batch``) until none is due; the figure is
calls per second over the whole (produce, then drain). Three subjects, taking turns: the raw
queue (``offer`` of ``{"job": "noop"}``, a handler that returns), the task layer without
results (``noop.defer()``, the registry as the handler) and with results (each run writes
its result row in the transaction of its ack). The issue asks the layer's cost without
results to stay within 15% of the raw queue on PostgreSQL. There, a task peer takes its turn
too: procrastinate's ``defer_async`` of a no-op task, one call after another from one
coroutine, then ``consumers`` of its workers (``concurrency=batch``, stopping when empty, no
LISTEN, successful jobs deleted) in the peers' database (``peers.py``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time

from sqldelay.listeners import WorkerListener
from sqldelay.tasks import Tasks
from sqldelay.worker import Worker

from ..harness import OURS, PAYLOAD, Bench, alternate, rounds_for, spread
from .peers import RATE, peers_database, procrastinate_noop, procrastinate_workers


def tasks_drain(bench: Bench) -> None:
    n = bench.sizes.peer_jobs
    params = {"jobs": n, "concurrency": bench.consumers, "batch": bench.batch}
    raw = bench.queue("tasks_raw")
    plain = Tasks(bench.queue("tasks_plain"))
    kept = Tasks(bench.queue("tasks_kept"), results=True)

    @plain.task(name="noop")
    def noop() -> None:
        return None

    @kept.task(name="noop")
    def noop_kept() -> None:
        return None

    def run(queue, produce, handler) -> float:
        began = time.perf_counter()
        for i in range(n):
            produce(i)
        worker = Worker(queue, handler, concurrency=bench.consumers, batch_size=bench.batch,
                        listeners=[WorkerListener()])
        handled = worker.drain()
        elapsed = time.perf_counter() - began
        queue.clear()
        return handled / elapsed

    subjects = {
        f"{OURS} offer+Worker": lambda: run(raw, lambda i: raw.offer(f"m{i}", PAYLOAD),
                                            lambda env: None),
        f"{OURS} tasks": lambda: run(plain.queue, lambda i: noop.defer(), plain),
        f"{OURS} tasks+results": lambda: run(kept.queue, lambda i: noop_kept.defer(), kept),
    }
    if bench.dialect == "postgresql" and importlib.util.find_spec("procrastinate"):
        conninfo = peers_database(bench)
        subjects["procrastinate"] = lambda: asyncio.run(_procrastinate(bench, conninfo, n))
    for subject, values in alternate(rounds_for(n), subjects).items():
        stats = spread(values)
        bench.add("tasks_drain", subject, RATE, stats["median"], params={**params, **stats})


async def _procrastinate(bench: Bench, conninfo: str, n: int) -> float:
    """procrastinate's calls/s over the whole: ``n`` defers one after another, then its
    workers until none is left."""
    async with procrastinate_noop(conninfo, bench.consumers + 2) as (app, noop, done):
        began = time.perf_counter()
        for _ in range(n):
            await noop.defer_async()
        await procrastinate_workers(app, bench)
        elapsed = time.perf_counter() - began
    return done[0] / elapsed
