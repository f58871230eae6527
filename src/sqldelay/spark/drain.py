"""Drain a queue's backlog inside Spark tasks with the library's own claim/ack loop.

Each of ``parallelism`` tasks opens its own engine from the URL, claims due messages in
batches (``poll_many``), calls the handler on each and acks the batch. At-least-once: a
handler that raises leaves its message claimed, so it becomes due again when its lock
expires; a task that dies (or is retried by Spark) leaves its claims to expire the same way.
A task stops when nothing is due or when ``max_seconds`` have passed; messages it claimed but
had not started when time ran out are released (due again at once). Every task claims at least
one batch and handles that batch's first message, however slowly it started, so a short limit
never ends in claims given back whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import InvalidArgumentError
from ..messages import Envelope
from ..queue import DelayedQueue
from ..schema import DEFAULT_TABLE
from ..serializers import SERIALIZERS, Serializer
from ._offer import make_engine

log = logging.getLogger("sqldelay.spark")

_COUNT_FIELDS = ("processed", "failed", "lost", "released")


@dataclass(frozen=True)
class DrainCounts:
    """processed: handled and acked; failed: the handler raised (left to redeliver);
    lost: handled but the ack found the lock gone (the message was re-claimed or updated);
    released: claimed but given back unhandled because ``max_seconds`` ran out."""

    processed: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    tasks: int = 0


@dataclass(frozen=True)
class _DrainTask:
    url: str
    queue: str
    serializer: Serializer
    table_name: str
    batch_size: int
    acquire_timeout: timedelta
    max_seconds: float | None
    handler: Callable[[Envelope[DelayedQueue]], object]

    def run(self) -> dict[str, int]:
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        counts = dict.fromkeys(_COUNT_FIELDS, 0)
        engine = make_engine(self.url)
        try:
            queue = DelayedQueue(engine, self.queue, serializer=self.serializer,
                                 acquire_timeout=self.acquire_timeout,
                                 table_name=self.table_name)
            # the limit is checked after each batch, not before the first: a task whose
            # start (imports, a first connection) outlasts it still claims once
            while envelopes := queue.poll_many(self.batch_size):
                self._handle(queue, envelopes, deadline, counts)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        finally:
            engine.dispose()
        return counts

    def _handle(self, queue: DelayedQueue, envelopes: list[Envelope[DelayedQueue]],
                deadline: float | None, counts: dict[str, int]) -> None:
        done: list[Envelope[DelayedQueue]] = []
        for i, env in enumerate(envelopes):
            # the first message always starts: a claim that returns after the limit (a slow
            # first connection, a loaded server) still makes progress instead of giving all back
            if i and deadline is not None and time.monotonic() >= deadline:
                for rest in envelopes[i:]:
                    counts["released"] += int(queue.release(rest))
                break
            try:
                self.handler(env)
            except Exception:  # the handler's failure is the message's, not the task's
                log.exception("sqldelay drain: handler failed for key %r (attempt %d); it "
                              "will be redelivered when its lock expires", env.key, env.attempt)
                counts["failed"] += 1
            else:
                done.append(env)
        acked = queue.ack_many(done) if done else 0
        counts["processed"] += acked
        counts["lost"] += len(done) - acked


def drain_with_spark(spark: Any, url: str, queue: str,
                     handler: Callable[[Envelope[DelayedQueue]], object], *,
                     parallelism: int = 2, max_seconds: float | None = None,
                     serializer: str | Serializer = "json",
                     table_name: str = DEFAULT_TABLE, batch_size: int = 100,
                     acquire_timeout: timedelta = timedelta(minutes=5)) -> DrainCounts:
    """Process the due backlog of ``queue`` with ``parallelism`` Spark tasks.

    ``handler(envelope)`` runs on executors (it is pickled with cloudpickle, so it may be a
    closure; it must not hold an engine or connection). ``serializer`` is ``"json"``,
    ``"str"``, ``"bytes"`` or a Serializer instance, the same the producer used. Returns the
    summed counts of every task. Give ``acquire_timeout`` room for a whole batch of handler
    calls: a lock that expires mid-batch lets another task deliver the message again.
    """
    if not callable(handler):
        raise InvalidArgumentError("handler must be callable: handler(envelope)")
    for name, value in (("parallelism", parallelism), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    if max_seconds is not None and not max_seconds > 0:
        raise InvalidArgumentError(f"max_seconds must be positive, got {max_seconds!r}")
    if isinstance(serializer, str):
        if serializer not in SERIALIZERS:
            raise InvalidArgumentError(
                f"serializer must be one of {sorted(SERIALIZERS)} or a Serializer, "
                f"got {serializer!r}")
        serializer = SERIALIZERS[serializer]()
    # checks the queue name and serializer on the driver, before any task starts
    engine = make_engine(url)
    try:
        DelayedQueue(engine, queue, serializer=serializer, table_name=table_name,
                     acquire_timeout=acquire_timeout)
    finally:
        engine.dispose()
    task = _DrainTask(url, queue, serializer, table_name, batch_size, acquire_timeout,
                      max_seconds, handler)

    def run_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for _ in batches:  # one row per partition: its presence starts the work
            pass
        counts = task.run()
        yield pa.RecordBatch.from_pydict({k: [v] for k, v in counts.items()})

    schema = ", ".join(f"{name} long" for name in _COUNT_FIELDS)
    rows = (spark.range(0, parallelism, 1, parallelism)
            .mapInArrow(run_partition, schema).collect())
    return DrainCounts(**{f: sum(r[f] for r in rows) for f in _COUNT_FIELDS}, tasks=len(rows))
