"""How many times the engine layer ran an operation again, and how many of those were for a
deadlock: read by whoever watches (the benchmarks put them beside each throughput).

Nothing is counted while nobody watches: the engine layer calls ``retried`` only before a
retry, and it returns at once when no ``counting`` block is open. Within one, every retry of
every queue in the process is counted, from every thread and task, in every block open at
the time.

    with counting() as seen:
        run_the_load()
    print(seen.retries, seen.deadlocks)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from .dialects import QueueDao

_open: list[RetryCounts] = []  # the counting blocks open now
_lock = threading.Lock()


@dataclass
class RetryCounts:
    """The retries seen so far: all of them (transient errors and outages waited out), and
    the deadlocks among them (``QueueDao.deadlock_codes``)."""

    retries: int = 0
    deadlocks: int = 0


@contextlib.contextmanager
def counting() -> Iterator[RetryCounts]:
    """Count the retries of the whole process while the block runs."""
    counts = RetryCounts()
    with _lock:
        _open.append(counts)
    try:
        yield counts
    finally:
        with _lock:
            _open.remove(counts)


def retried(dao: QueueDao, exc: BaseException | None) -> None:
    """The engine layer is about to run an operation again after ``exc``."""
    if not _open:
        return
    deadlock = dao.is_deadlock(exc)
    with _lock:
        for counts in _open:
            counts.retries += 1
            counts.deadlocks += deadlock
