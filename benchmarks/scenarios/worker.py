"""The Worker: drain rate of N no-op jobs, and how soon an idle worker starts a new message.

worker_drain: ``Worker(queue, noop, concurrency=consumers, batch_size=batch).drain()`` over
``peer_jobs`` due messages, taking turns with pgqueuer's processing of as many jobs (as in the
peers scenario) on PostgreSQL; medians of the rounds.
worker_wakeup: a worker idles (``idle_poll`` 30 s) while a producer offers one message due now,
``probes`` times; the figure is offer-to-handler-start. On PostgreSQL the offer's NOTIFY wakes
the worker; elsewhere the worker has no wake-up and waits for its idle poll, so the idle poll is
set to 0.25 s there and the figure shows that bound.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from datetime import timedelta

from sqldelay.listeners import WorkerListener
from sqldelay.worker import Worker

from ..harness import OURS, PAYLOAD, Bench, alternate, fill, percentile, rounds_for, spread
from .peers import RATE, peers_database, pgqueuer_round

PROBES = 20


def worker_drain(bench: Bench) -> None:
    queue = bench.queue("worker_drain")
    n = bench.sizes.peer_jobs
    params = {"jobs": n, "concurrency": bench.consumers, "batch": bench.batch}

    def ours() -> float:
        fill(queue, n)
        worker = Worker(queue, lambda env: None, concurrency=bench.consumers,
                        batch_size=bench.batch, listeners=[WorkerListener()])
        began = time.perf_counter()
        handled = worker.drain()
        elapsed = time.perf_counter() - began
        queue.clear()
        return handled / elapsed

    subjects = {OURS: ours}
    if bench.dialect == "postgresql" and all(
            importlib.util.find_spec(m) is not None for m in ("pgqueuer", "asyncpg")):
        conninfo = peers_database(bench)

        def pgqueuer() -> float:
            _, process_s, done = asyncio.run(pgqueuer_round(bench, conninfo, n))
            return done / process_s

        subjects["pgqueuer"] = pgqueuer
    for subject, values in alternate(rounds_for(n), subjects).items():
        stats = spread(values)
        bench.add("worker_drain", subject, RATE, stats["median"], params={**params, **stats})


def worker_wakeup(bench: Bench) -> None:
    queue = bench.queue("worker_wakeup")
    # offers of this process wake the worker on every database, so the idle poll (what an
    # offer from another process waits for, without PostgreSQL's notifications) is long
    notify = bool(getattr(queue.dao, "notifications", False))
    idle = timedelta(seconds=30)
    started: dict[str, float] = {}
    arrived = threading.Condition()

    def handler(env) -> None:
        with arrived:
            started[env.key] = time.perf_counter()
            arrived.notify_all()

    worker = Worker(queue, handler, concurrency=1, batch_size=1, idle_poll=idle,
                    listeners=[WorkerListener()])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    latencies = []
    try:
        fill(queue, 1, prefix="warm")  # the worker is listening once it has handled this
        _wait_for(arrived, started, "warm0")
        for i in range(min(PROBES, bench.sizes.probe_polls)):
            time.sleep(0.05)  # let the worker go idle again: this is what is measured
            offered = time.perf_counter()
            queue.offer(f"w{i}", PAYLOAD)
            _wait_for(arrived, started, f"w{i}")
            latencies.append((started[f"w{i}"] - offered) * 1000)
    finally:
        worker.stop()
        thread.join()
    latencies.sort()
    params = {"probes": len(latencies), "offers_from": "the worker's process",
              "notify_wakes_other_processes": notify, "idle_poll_s": idle.total_seconds()}
    for p in (50, 95):
        bench.add("worker_wakeup", OURS, f"p{p} offer-to-start ms", percentile(latencies, p),
                  params=params)


def _wait_for(cond: threading.Condition, started: dict, key: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with cond:
        while key not in started:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the worker did not start {key} within {timeout}s")
            cond.wait(left)
