"""What keeping history costs.

history_offer: ``messages`` offered in batches of ``batch`` by ``producers`` threads (offer_many);
history_drain: the same number drained by ``consumers`` threads (poll_many + ack_many). Each
beside the same work on a queue without history, in alternating rounds (medians, with min and
max), and the C-client ceiling of the plain statements in the same scenario. The history table
grows over the rounds, as it would in use (no pruning during the run).
"""

from __future__ import annotations

from datetime import UTC, datetime

from .. import references
from ..harness import OURS, ROUNDS, Bench, alternate, drain, fill, produce, run_threads, spread

RATE = "messages/s"


def history_offer(bench: Bench) -> None:
    n = bench.sizes.messages
    batches = n // bench.batch

    def measure(history: bool) -> float:
        queue = _queue(bench, "hist_offer", history)
        elapsed = run_threads(bench.producers, produce(queue, bench.producers, bench.batch,
                                                       batches, datetime.now(UTC)))
        queue.clear()
        return batches * bench.batch / elapsed

    _report(bench, "history_offer", measure, clients=bench.producers,
            messages=batches * bench.batch)
    references.offer(bench, "history_offer", batch=bench.batch, clients=bench.producers,
                     messages=batches * bench.batch)


def history_drain(bench: Bench) -> None:
    n = bench.sizes.messages

    def measure(history: bool) -> float:
        queue = _queue(bench, "hist_drain", history)
        fill(queue, n)
        elapsed = run_threads(bench.consumers, drain(queue, bench.batch))
        left = queue.stats().due
        queue.clear()
        return (n - left) / elapsed

    _report(bench, "history_drain", measure, clients=bench.consumers, messages=n)
    references.drain(bench, "history_drain", batch=bench.batch, clients=bench.consumers,
                     messages=n)


def _queue(bench: Bench, name: str, history: bool):
    if history:
        return bench.queue(name, table=bench.table_for("_h", history=True), history=True)
    return bench.queue(name)


def _report(bench: Bench, scenario: str, measure, *, clients: int, messages: int) -> None:
    runs = alternate(ROUNDS, {"off": lambda: measure(False), "on": lambda: measure(True)})
    off = spread(runs["off"])
    on = spread(runs["on"])
    params = {"batch": bench.batch, "clients": clients, "messages": messages}
    bench.add(scenario, OURS, RATE, off["median"], params={**params, **off})
    bench.add(scenario, f"{OURS} with history", RATE, on["median"],
              params={**params, **on, "cost_vs_off": 1 - on["median"] / off["median"]})
