"""Messages per second of each queue operation, ours beside the C-client ceiling.

offer: single offers from ``producers`` threads; offer_many: batches of ``batch``;
poll_ack: single poll + ack from ``consumers`` threads over a due backlog;
poll_many_ack_many: the same in claims of ``batch``. Every commit is durable (the database's
default), one transaction per call, exactly as a user's code would call the queue. Ours and
the C client take turns (``references.compare``); on PostgreSQL each also runs the same
statements through psycopg alone (``rawloop``), the limit of a Python client.
"""

from __future__ import annotations

from .. import rawloop, references
from ..harness import OURS, Bench, drain, fill, offer_rate, timed_threads


def offer(bench: Bench) -> None:
    _offer(bench, "offer", batch=1, messages=bench.sizes.single_messages)


def offer_many(bench: Bench) -> None:
    _offer(bench, "offer_many", batch=bench.batch, messages=bench.sizes.messages)


def poll_ack(bench: Bench) -> None:
    _drain(bench, "poll_ack", batch=1, messages=bench.sizes.single_messages)


def poll_many_ack_many(bench: Bench) -> None:
    _drain(bench, "poll_many_ack_many", batch=bench.batch, messages=bench.sizes.messages)


def _offer(bench: Bench, scenario: str, *, batch: int, messages: int) -> None:
    queue = bench.queue(scenario)
    clients = bench.producers
    batches = messages // batch

    subjects = {OURS: lambda: offer_rate(queue, clients, batch, batches)}
    if bench.dialect == "postgresql":  # the same loop with no library code: the limit in Python
        raw = bench.queue(f"raw_{scenario}")

        def measure_raw() -> tuple[float, float]:
            elapsed, cpu = timed_threads(clients, rawloop.offer(bench, raw, clients, batch,
                                                                batches))
            raw.clear()
            return batches * batch / elapsed, cpu

        subjects[rawloop.SUBJECT] = measure_raw
    references.compare(bench, scenario, "offer", subjects, batch=batch, clients=clients,
                       messages=batches * batch)


def _drain(bench: Bench, scenario: str, *, batch: int, messages: int) -> None:
    queue = bench.queue(scenario)
    clients = bench.consumers

    def measure() -> tuple[float, float]:
        fill(queue, messages)
        elapsed, cpu = timed_threads(clients, drain(queue, batch))
        left = queue.stats().due
        queue.clear()
        return (messages - left) / elapsed, cpu

    subjects = {OURS: measure}
    if bench.dialect == "postgresql":  # the same loop with no library code: the limit in Python
        raw = bench.queue(f"raw_{scenario}")

        def measure_raw() -> tuple[float, float]:
            fill(raw, messages)
            elapsed, cpu = timed_threads(clients, rawloop.drain(bench, raw, batch))
            left = raw.stats().due
            raw.clear()
            return (messages - left) / elapsed, cpu

        subjects[rawloop.SUBJECT] = measure_raw
    references.compare(bench, scenario, "drain", subjects, batch=batch, clients=clients,
                       messages=messages)
