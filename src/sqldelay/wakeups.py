"""Wake-ups inside one process, on every database.

A worker with nothing due sleeps until its next message falls due or ``idle_poll`` passes.
An offer that sqldelay commits in the same process wakes the sleeping workers of its queue at
once when one of the messages it wrote falls due before they meant to look again, as Java's
DelayQueue wakes its leader. (Across processes, PostgreSQL's notifications do the same; on
the other databases a worker in another process looks again after ``idle_poll``.)

A queue is known by its database (backend, host, port, database name), table and queue, so
two engines, or the two front ends, on one database reach each other's workers.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .queue_base import QueueBase

# backend, host, port, database name, table, queue
QueueId = tuple[str, str | None, int | None, str | None, str, str]

_lock = threading.Lock()
_sleepers: dict[QueueId, set[Sleeper]] = {}


def queue_id(queue: QueueBase) -> QueueId:
    url = queue.engine.url
    return (url.get_backend_name(), url.host, url.port, url.database, queue.dao.table.name,
            queue.pkind)


class Sleeper:
    """A worker that may be woken: ``wake`` is called (from any thread) when an offer
    writes a message due at or before ``until_ms``; while the worker is not asleep that is
    any message (infinity), so a wake-up between its last look and its sleep is not lost."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self.until_ms: float = math.inf


def register(queues: Iterable[QueueBase], sleeper: Sleeper) -> Callable[[], None]:
    """Let offers to ``queues`` wake ``sleeper``; returns the call that stops it."""
    ids = {queue_id(q) for q in queues}
    with _lock:
        for key in ids:
            _sleepers.setdefault(key, set()).add(sleeper)

    def unregister() -> None:
        with _lock:
            for key in ids:
                found = _sleepers.get(key)
                if found is not None:
                    found.discard(sleeper)
                    if not found:
                        del _sleepers[key]

    return unregister


def offered(queue: QueueBase, earliest_ms: int) -> None:
    """An offer to ``queue`` committed a message due at ``earliest_ms`` (the earliest it
    wrote): wake the sleepers that would look later than that."""
    if not _sleepers:  # no worker in this process: nothing to look up
        return
    with _lock:
        found = list(_sleepers.get(queue_id(queue), ()))
    for sleeper in found:
        if earliest_ms <= sleeper.until_ms:
            sleeper.wake()
