"""drain_with_spark: the claim/ack loop inside Spark tasks."""

from __future__ import annotations

import collections
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from sqldelay import DelayedQueue, InvalidArgumentError, JsonSerializer, Message
from sqldelay.spark import DrainCounts, drain, drain_with_spark

# run again on the standalone cluster (conftest.py)
pytestmark = pytest.mark.spark_cluster


def _recorder(directory: Path, fail_keys: frozenset[str] = frozenset()):
    """A handler that appends each key it sees to a file of its own process and thread."""

    def handle(envelope) -> None:
        if envelope.key in fail_keys:
            raise RuntimeError(f"cannot handle {envelope.key}")
        name = directory / f"{os.getpid()}-{threading.get_ident()}.txt"
        with open(name, "a", encoding="utf-8") as fh:
            fh.write(f"{envelope.key}\t{envelope.payload['i']}\t{envelope.attempt}\n")

    return handle


def _seen(directory: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split("\t")) for path in sorted(directory.glob("*.txt"))
            for line in path.read_text().splitlines()]


def test_drain_processes_every_message_exactly_once(
        spark, spark_url, spark_engine, spark_table, queue_name, tmp_path):
    n = 2000
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    q.offer_many([Message(f"m{i}", {"i": i}) for i in range(n)])

    counts = drain_with_spark(spark, spark_url, queue_name, _recorder(tmp_path),
                              parallelism=2, batch_size=50, max_seconds=120,
                              table_name=spark_table)
    assert counts == DrainCounts(processed=n, failed=0, lost=0, released=0, tasks=2)
    seen = _seen(tmp_path)
    assert collections.Counter(key for key, _, _ in seen) == {f"m{i}": 1 for i in range(n)}
    assert all(key == f"m{i}" and attempt == "1" for key, i, attempt in seen)
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)


def test_failed_handler_leaves_the_message_to_be_redelivered(
        spark, spark_url, spark_engine, spark_table, queue_name, tmp_path):
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    q.offer_many([Message(f"m{i}", {"i": i}) for i in range(40)])
    bad = frozenset({"m3", "m17"})
    counts = drain_with_spark(spark, spark_url, queue_name, _recorder(tmp_path, bad),
                              parallelism=2, batch_size=10, table_name=spark_table)
    assert (counts.processed, counts.failed, counts.lost) == (38, 2, 0)
    assert q.stats().in_flight == 2
    assert q.get("m3").in_flight and q.get("m17").in_flight
    assert q.get("m4") is None


def test_drain_argument_errors(spark, spark_url, spark_table):
    with pytest.raises(InvalidArgumentError, match="parallelism"):
        drain_with_spark(spark, spark_url, "q", print, parallelism=0, table_name=spark_table)
    with pytest.raises(InvalidArgumentError, match="serializer must be one of"):
        drain_with_spark(spark, spark_url, "q", print, serializer="xml", table_name=spark_table)
    with pytest.raises(InvalidArgumentError, match="handler must be callable"):
        drain_with_spark(spark, spark_url, "q", None, table_name=spark_table)


def test_time_limit_releases_the_unstarted_rest_of_a_batch(
        spark, spark_url, spark_engine, spark_table, queue_name):
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    q.offer_many([Message(f"m{i}", {"i": i}) for i in range(20)])

    def slow(envelope) -> None:  # a handler whose work outlasts the time limit
        time.sleep(0.1)

    counts = drain_with_spark(spark, spark_url, queue_name, slow, parallelism=1,
                              batch_size=20, max_seconds=0.5, table_name=spark_table)
    assert counts.released > 0 and counts.processed > 0
    assert counts.processed + counts.released == 20
    stats = q.stats()
    # the released messages are due again at once, not left locked until the lock expires
    assert (stats.due, stats.in_flight) == (counts.released, 0)


@pytest.mark.parametrize("slow", ["start", "claim"])
def test_a_task_that_outlasts_its_time_limit_still_handles_one_message(
        spark_url, spark_engine, spark_table, queue_name, monkeypatch, slow):
    """The task's own loop, without Spark, on a clock that jumps past the limit while the task
    starts (a cold executor: imports, the engine) or while it claims (a slow first
    connection): it must still claim, handle one message and give the rest back, not end
    with nothing done or everything it claimed released."""
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    q.offer_many([Message(f"m{i}", {"i": i}) for i in range(5)])
    clock = [0.0]
    monkeypatch.setattr(drain, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def outlasting(step):
        def run(*args, **kwargs):
            result = step(*args, **kwargs)
            clock[0] += 60.0  # the step took the task's whole minute
            return result
        return run

    if slow == "start":
        monkeypatch.setattr(drain, "make_engine", outlasting(drain.make_engine))
    else:
        monkeypatch.setattr(DelayedQueue, "poll_many", outlasting(DelayedQueue.poll_many))
    handled = []
    task = drain._DrainTask(spark_url, queue_name, JsonSerializer(), spark_table, batch_size=5,
                            acquire_timeout=timedelta(minutes=5), max_seconds=60.0,
                            handler=lambda envelope: handled.append(envelope.key))
    assert task.run() == {"processed": 1, "failed": 0, "lost": 0, "released": 4}
    stats = q.stats()
    assert len(handled) == 1 and q.get(handled[0]) is None
    assert (stats.due, stats.in_flight) == (4, 0)
