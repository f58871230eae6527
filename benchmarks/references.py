"""The C-client ceilings beside our throughput figures: pgbench on PostgreSQL, mysqlslap on
MariaDB/MySQL, none on SQLite (an embedded database has no client to compare with).

Each reference moves the same number of messages as ours, at the same concurrency and batch
size, in its own queue of the run's table, and adds its figure under the same scenario name so
the report can print ours/reference.
"""

from __future__ import annotations

import time

from . import mysqlslap, pgbench
from .harness import Bench, fill

RATE = "messages/s"


def offer(bench: Bench, scenario: str, *, batch: int, clients: int, messages: int) -> None:
    _run(bench, scenario, "offer", batch=batch, clients=clients, messages=messages)


def drain(bench: Bench, scenario: str, *, batch: int, clients: int, messages: int) -> None:
    _run(bench, scenario, "drain", batch=batch, clients=clients, messages=messages)


def _run(bench: Bench, scenario: str, kind: str, *, batch: int, clients: int,
         messages: int) -> None:
    if bench.dialect == "postgresql":
        subject, tool = "pgbench", pgbench
    elif bench.dialect in ("mysql", "mariadb"):
        subject, tool = "mysqlslap", mysqlslap
    else:
        return
    params = {"batch": batch, "clients": clients, "messages": messages}
    if tool.executable() is None:
        bench.add(scenario, subject, RATE, None, params=params,
                  note=f"{subject} not installed (see benchmarks/README.md)")
        return
    queue = bench.queue(f"ref_{scenario}")
    transactions = max(1, messages // batch)
    clients = min(clients, transactions)
    transactions -= transactions % clients  # every client runs the same count
    if kind == "drain":
        fill(queue, transactions * batch)
    now = int(time.time() * 1000)
    seconds = tool.run(bench, kind, queue=queue, batch=batch, clients=clients,
                       transactions=transactions, now_ms=now)
    left = queue.stats()
    moved = (left.due + left.scheduled + left.in_flight) if kind == "offer" else \
        transactions * batch - left.due
    bench.add(scenario, subject, RATE, moved / seconds,
              params={**params, "clients": clients, "messages": moved})
    queue.clear()
