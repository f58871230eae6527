"""Messages per second of each queue operation, ours beside the C-client ceiling.

offer: single offers from ``producers`` threads; offer_many: batches of ``batch``;
poll_ack: single poll + ack from ``consumers`` threads over a due backlog;
poll_many_ack_many: the same in claims of ``batch``; offer_many_changed: ``offer_many`` of
``batch`` keys that exist, each moved to a new due time (a reschedule), from ``producers``
threads, with no C-client reference (messages/s and client CPU per message). Every commit
is durable (the database's default), one transaction per call, exactly as a user's code
would call the queue. Ours and the C client take turns (``references.compare``); on
PostgreSQL each also runs the same statements through psycopg alone and through SQLAlchemy
alone (``rawloop``), the limits of a Python client and of one built on SQLAlchemy.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import partial

from sqldelay import Message

from .. import rawloop, references
from ..harness import (
    OURS,
    PAYLOAD,
    Bench,
    alternate,
    drain,
    fill,
    offer_rate,
    rounds_for,
    spread,
    timed_threads,
)


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
    if bench.dialect == "postgresql":  # the same loop with no library code: the limits in Python
        raw = bench.queue(f"raw_{scenario}")

        def measure_raw(layer: str) -> tuple[float, float]:
            elapsed, cpu = timed_threads(clients, rawloop.offer(bench, raw, clients, batch,
                                                                batches, layer))
            raw.clear()
            return batches * batch / elapsed, cpu

        for layer in rawloop.LAYERS:
            subjects[layer] = partial(measure_raw, layer)
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
    if bench.dialect == "postgresql":  # the same loop with no library code: the limits in Python
        raw = bench.queue(f"raw_{scenario}")

        def measure_raw(layer: str) -> tuple[float, float]:
            fill(raw, messages)
            elapsed, cpu = timed_threads(clients, rawloop.drain(bench, raw, batch, layer))
            left = raw.stats().due
            raw.clear()
            return (messages - left) / elapsed, cpu

        for layer in rawloop.LAYERS:
            subjects[layer] = partial(measure_raw, layer)
    references.compare(bench, scenario, "drain", subjects, batch=batch, clients=clients,
                       messages=messages)


def offer_many_changed(bench: Bench) -> None:
    queue = bench.queue("offer_many_changed")
    clients, batch, messages = bench.producers, bench.batch, bench.sizes.messages
    per = messages // clients
    moves = itertools.count(1)
    cpu: list[float] = []

    def measure() -> float:
        fill(queue, per * clients)
        at = datetime.now(UTC) + timedelta(hours=next(moves))  # every key's due time moves

        def work(i: int) -> None:
            for lo in range(i * per, (i + 1) * per, batch):
                queue.offer_many([Message(f"m{j}", PAYLOAD, at)
                                  for j in range(lo, min(lo + batch, (i + 1) * per))])

        elapsed, cpu_s = timed_threads(clients, work)
        queue.clear()
        cpu.append(cpu_s * 1e6 / (per * clients))
        return per * clients / elapsed

    stats = spread(alternate(rounds_for(messages), {OURS: measure})[OURS])
    bench.add("offer_many_changed", OURS, "messages/s", stats["median"],
              params={"batch": batch, "clients": clients, "messages": per * clients, **stats,
                      "client_cpu_us_per_message": spread(cpu)["median"]})
