"""Churn: many offer → poll → ack cycles over a standing backlog, without and with the
"high-churn" tuning preset, each in its own table.

An hour of a queue at the db-queue target (1,000 messages/s) is 3.6 million cycles of a row;
the run compresses it into ``churn_cycles`` batches as fast as the database goes, which is the
harder case for vacuum. Reported per preset: throughput over time (a falling line is bloat
catching up), dead rows over time where the database counts them (PostgreSQL), and at the end
dead rows, table and index size. PostgreSQL's autovacuum looks at each database once a minute
(autovacuum_naptime), so a preset can only show its effect in a run longer than that.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from sqldelay import DelayedQueue, Message

from ..harness import OURS, PAYLOAD, Bench, fill, run_threads
from ..storage import dead_rows, table_storage

PRESETS = (None, "high-churn")
WINDOWS = 12
SAMPLE_EVERY = 2.0  # seconds between dead-row samples


def churn(bench: Bench) -> None:
    for preset in PRESETS:
        label = preset or "no preset"
        table = bench.table_for(f"_{(preset or 'plain').replace('-', '_')}", tuning=preset)
        queue = bench.queue("churn", table=table)
        # future messages that stay put: the claims must step over their index entries
        fill(queue, bench.sizes.churn_standing, prefix="standing",
             at=datetime.now(UTC) + timedelta(hours=1))
        stamps, dead = _cycles(bench, queue)
        elapsed = stamps[-1] - stamps[0] if len(stamps) > 1 else 1e-9
        moved = (len(stamps) - 1) * bench.batch
        storage = table_storage(bench.engine, table)
        params = {"preset": label, "cycles": bench.sizes.churn_cycles, "batch": bench.batch,
                  "clients": bench.consumers, "standing": bench.sizes.churn_standing,
                  "series_label": label, "axes": ("seconds", "messages/s")}
        bench.add("churn", OURS, f"messages/s ({label})", moved / elapsed, params=params,
                  series=_windows(stamps, bench.batch))
        if dead:
            bench.add("churn_dead_rows", OURS, f"most dead rows ({label})",
                      max(d for _, d in dead), series=dead,
                      params={"preset": label, "series_label": label,
                              "axes": ("seconds", "dead row versions")})
        for key, value in storage.items():
            if value is not None:
                bench.add("churn", OURS, f"{key} ({label})", float(value),
                          params={"preset": label})


def _cycles(bench: Bench, queue: DelayedQueue) -> tuple[list[float], list[list[float]]]:
    """Run the cycles on ``consumers`` threads: the time each batch finished (sorted), and
    [seconds, dead rows] sampled every ``SAMPLE_EVERY`` seconds meanwhile."""
    stamps = [time.perf_counter()]
    lock = threading.Lock()
    clients = bench.consumers
    cycles = bench.sizes.churn_cycles
    finished = threading.Event()
    dead: list[list[float]] = []

    def sample() -> None:
        while True:
            count = dead_rows(bench.engine, queue.dao.table.name)
            if count is None:
                return
            dead.append([round(time.perf_counter() - stamps[0], 1), count])
            if finished.wait(SAMPLE_EVERY):
                return

    def work(i: int) -> None:
        for c in range(i, cycles, clients):
            now = datetime.now(UTC)
            queue.offer_many([Message(f"c{c}-{j}", PAYLOAD, now) for j in range(bench.batch)])
            got = queue.poll_many(bench.batch)
            queue.ack_many(got)
            with lock:
                stamps.append(time.perf_counter())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run_threads(clients, work)
    finally:
        finished.set()
        sampler.join()
    return sorted(stamps), dead


def _windows(stamps: list[float], batch: int) -> list[list[float]]:
    """Throughput in ``WINDOWS`` equal slices of the run: [seconds from start, messages/s]."""
    start, end = stamps[0], stamps[-1]
    width = (end - start) / WINDOWS or 1e-9
    counts = [0] * WINDOWS
    for s in stamps[1:]:
        counts[min(WINDOWS - 1, int((s - start) / width))] += batch
    return [[round((i + 1) * width, 2), n / width] for i, n in enumerate(counts)]
