"""End-to-end steady state: P producers and C consumers for T seconds.

Producers offer batches of 10 at a paced total rate (``steady_rate``, the single-table target of
the db-queue design), each message due a few milliseconds after it is offered; consumers claim
``batch`` at a time and, when nothing is due, sleep 10 ms (the plain poll loop a user writes
without the Worker). Delivery lag is the time from a message's due time to the moment its
handler starts. A queue that keeps up shows a flat, small lag; one that does not shows the
backlog growing in the p99.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from sqldelay import Message

from ..harness import OURS, PAYLOAD, Bench, percentile, run_threads

PRODUCER_BATCH = 10
IDLE_SLEEP = 0.01
DUE_AFTER = timedelta(milliseconds=5)


def steady(bench: Bench) -> None:
    queue = bench.queue("steady")
    seconds = bench.sizes.steady_seconds
    producers, consumers = bench.producers, bench.consumers
    interval = PRODUCER_BATCH * producers / bench.sizes.steady_rate
    stop_producing = threading.Event()
    produced = [0] * producers
    lags: list[float] = []
    delivered = [0]
    producing = [producers]  # producers still running; consumers stop after they all have
    lock = threading.Lock()

    def produce(i: int) -> None:
        n = 0
        next_at = time.perf_counter()
        while not stop_producing.is_set():
            at = datetime.now(UTC) + DUE_AFTER
            queue.offer_many([Message(f"p{i}-{n + j}", PAYLOAD, at)
                              for j in range(PRODUCER_BATCH)])
            n += PRODUCER_BATCH
            produced[i] = n
            next_at += interval
            stop_producing.wait(max(0.0, next_at - time.perf_counter()))
        with lock:
            producing[0] -= 1

    def consume(_: int) -> None:
        while True:
            got = queue.poll_many(bench.batch)
            if not got:
                with lock:
                    if not producing[0] and delivered[0] >= sum(produced):
                        return
                time.sleep(IDLE_SLEEP)
                continue
            started = datetime.now(UTC)
            queue.ack_many(got)
            with lock:
                lags.extend((started - env.scheduled_at).total_seconds() * 1000 for env in got)
                delivered[0] += len(got)

    def body(i: int) -> None:
        if i < producers:
            produce(i)
        else:
            consume(i)

    timer = threading.Timer(seconds, stop_producing.set)
    timer.start()
    elapsed = run_threads(producers + consumers, body)
    timer.cancel()
    lags.sort()
    params = {"producers": producers, "consumers": consumers, "batch": bench.batch,
              "seconds": seconds, "target_rate": bench.sizes.steady_rate,
              "offered": sum(produced), "delivered": delivered[0]}
    bench.add("steady", OURS, "delivered messages/s", delivered[0] / elapsed, params=params)
    for p in (50, 95, 99):
        bench.add("steady", OURS, f"p{p} lag ms", percentile(lags, p), params=params)
