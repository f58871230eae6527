"""Producers contending for one index gap: new ascending keys from 4 threads.

Keys such as ``order-1001``, ``order-1002``, … handed out by one counter land in the same gap
of the key index. Under InnoDB's REPEATABLE READ the offer's locking read of an absent key takes
a gap lock, and producers deadlock on each other's (error 1213, retried by sqldelay); offers run
at READ COMMITTED now. This scenario measures both in the same run, in alternating rounds: the
offer as it is, and the offer with the old isolation level (the MySQL dialect's
``begin_read_committed`` switched off), with the deadlocks each one retried. Other databases
take no gap locks here.
"""

from __future__ import annotations

import itertools
import logging
import threading
from datetime import UTC, datetime

from ..harness import OURS, PAYLOAD, ROUNDS, Bench, alternate, run_threads, spread

RATE = "messages/s"
BEFORE = "REPEATABLE READ offers (before)"


class _RetryCounter(logging.Handler):
    """Counts the executor's "retrying after" records: one per transient error retried."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying after"):
            with self._lock:
                self.count += 1


def offer_new_keys(bench: Bench) -> None:
    # the old isolation level is measured where it differed: MySQL/MariaDB
    subjects = (OURS, BEFORE) if bench.dialect in ("mysql", "mariadb") else (OURS,)
    messages = bench.sizes.single_messages
    counter = itertools.count()
    now = datetime.now(UTC)
    retried: dict[str, list[int]] = {OURS: [], BEFORE: []}
    log = logging.getLogger("sqldelay")

    def measure(subject: str) -> float:
        queue = bench.queue("offer_new_keys")
        if subject == BEFORE:
            queue.dao.begin_read_committed = lambda conn: None  # this queue's DAO instance only

        def work(_: int) -> None:
            for _ in range(messages // bench.producers):
                queue.offer(f"order-{next(counter):012d}", PAYLOAD, now)

        counting, level = _RetryCounter(), log.level
        log.addHandler(counting)
        log.setLevel(logging.DEBUG)
        try:
            elapsed = run_threads(bench.producers, work)
        finally:
            log.removeHandler(counting)
            log.setLevel(level)
        retried[subject].append(counting.count)
        queue.clear()
        return messages // bench.producers * bench.producers / elapsed

    runs = alternate(ROUNDS, {s: (lambda s=s: measure(s)) for s in subjects})
    for subject, values in runs.items():
        stats = spread(values)
        bench.add("offer_new_keys", subject, RATE, stats["median"],
                  params={"clients": bench.producers, "messages": messages, **stats,
                          "deadlocks_retried": sum(retried[subject]),
                          "deadlocks_per_round": retried[subject]})
