"""The C-client ceilings beside our throughput figures: pgbench on PostgreSQL, mysqlslap on
MariaDB/MySQL, none on SQLite (an embedded database has no client to compare with).

Each reference moves the same number of messages as ours, at the same concurrency and batch
size, in its own queue of the run's table, and adds its figure under the same scenario name so
the report can print ours/reference. ``compare`` measures ours and the reference in
alternating rounds (ours, reference, ours, …) and reports the median of each with its minimum
and maximum, so one noisy stretch of a shared machine neither passes nor fails a target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import mysqlslap, pgbench
from .harness import Bench, alternate, fill, rounds_for, spread

RATE = "messages/s"


@dataclass(frozen=True)
class Reference:
    """The C client of ``bench``'s database for one scenario: ``measure`` runs it once and
    returns messages/s (None when it is not installed: ``note`` says so)."""

    subject: str
    params: dict
    measure: Callable[[], float] | None
    note: str = ""


# the client-side offer ceiling: mysqlslap sends our offer statement itself (MariaDB/MySQL)
CLIENT_SIDE = "offer_wire"
# the grouped drain's ceiling: pgbench sends our grouped claim (PostgreSQL), over messages in
# GROUPS groups
GROUPED = "grouped_drain"
GROUPS = 1_000


def reference(bench: Bench, scenario: str, kind: str, *, batch: int, clients: int,
              messages: int) -> Reference | None:
    """The ceiling of ``kind`` ("offer" or "drain"; on MariaDB/MySQL also ``CLIENT_SIDE``, on
    PostgreSQL ``GROUPED``) on this database; None on SQLite and where the database's C client
    has no such ceiling."""
    if bench.dialect == "postgresql" and kind != CLIENT_SIDE:
        subject, tool = ("pgbench groups" if kind == GROUPED else "pgbench"), pgbench
    elif kind == GROUPED:
        return None
    elif bench.dialect in ("mysql", "mariadb"):
        subject, tool = "mysqlslap", mysqlslap
        if kind == CLIENT_SIDE:
            subject = "mysqlslap client-side"
    else:
        return None
    params = {"batch": batch, "clients": clients, "messages": messages}
    if kind == GROUPED:
        params["groups"] = GROUPS
    if tool.executable() is None:
        return Reference(subject, params, None,
                         f"{subject} not installed (see benchmarks/README.md)")
    queue = bench.queue(f"ref_{scenario}" if kind != GROUPED else f"ref_{scenario}_groups")
    transactions = max(1, messages // batch)
    clients = min(clients, transactions)
    transactions -= transactions % clients  # every client runs the same count
    drains = kind in ("drain", GROUPED)

    def measure() -> float:
        if drains:
            fill(queue, transactions * batch, groups=GROUPS if kind == GROUPED else None)
        now = int(time.time() * 1000)
        seconds = tool.run(bench, kind, queue=queue, batch=batch, clients=clients,
                           transactions=transactions, now_ms=now)
        left = queue.stats()
        moved = transactions * batch - left.due if drains else \
            left.due + left.scheduled + left.in_flight
        queue.clear()
        return moved / seconds

    return Reference(subject, {**params, "clients": clients,
                               "messages": transactions * batch}, measure)


def offer(bench: Bench, scenario: str, *, batch: int, clients: int, messages: int) -> None:
    """The offer ceiling alone, in rounds of its own (beside figures measured elsewhere)."""
    compare(bench, scenario, "offer", {}, batch=batch, clients=clients, messages=messages)


def drain(bench: Bench, scenario: str, *, batch: int, clients: int, messages: int) -> None:
    """The drain ceiling alone, in rounds of its own (beside figures measured elsewhere)."""
    compare(bench, scenario, "drain", {}, batch=batch, clients=clients, messages=messages)


def compare(bench: Bench, scenario: str, kind: str,
            ours: dict[str, Callable[[], tuple[float, float]]], *,
            batch: int, clients: int, messages: int, also: Sequence[str] = ()) -> None:
    """Measure each of ``ours`` (subject → one round's messages/s and the CPU seconds this
    process spent on it, see ``harness.timed_threads``) and the ceilings of ``kind`` and of
    the kinds in ``also`` in alternating rounds; add each one's median, minimum and maximum,
    and for ours the median client CPU per message."""
    refs = [ref for ref in (reference(bench, scenario, k, batch=batch, clients=clients,
                                      messages=messages) for k in (kind, *also))
            if ref is not None]
    cpu: dict[str, list[float]] = {subject: [] for subject in ours}

    def timed(subject: str, measure: Callable[[], tuple[float, float]]) -> Callable[[], float]:
        def run() -> float:
            rate, cpu_s = measure()
            cpu[subject].append(cpu_s * 1e6 / messages)
            return rate
        return run

    subjects = {subject: timed(subject, measure) for subject, measure in ours.items()}
    subjects.update((ref.subject, ref.measure) for ref in refs if ref.measure is not None)
    params = {"batch": batch, "clients": clients, "messages": messages}
    own = {subject: params for subject in ours} | {ref.subject: ref.params for ref in refs}
    for subject, values in alternate(rounds_for(messages), subjects).items():
        stats = spread(values)
        extra = ({"client_cpu_us_per_message": spread(cpu[subject])["median"]}
                 if subject in ours else {})
        bench.add(scenario, subject, RATE, stats["median"],
                  params={**own[subject], **stats, **extra})
    for ref in refs:
        if ref.measure is None:
            bench.add(scenario, ref.subject, RATE, None, params=ref.params, note=ref.note)
