"""spark.read.format("sqldelay"): the backlog as a DataFrame, without side effects."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from sqldelay import DelayedQueue, Message, StrSerializer

from .spark_helpers import queue_rows

# run again on the standalone cluster (conftest.py)
pytestmark = pytest.mark.spark_cluster

NOW = dt.datetime.now(dt.UTC)


def _fill(engine, table, name):
    """300 due, 200 scheduled for later, and 120 of the due ones claimed (in flight)."""
    q = DelayedQueue(engine, name, table_name=table)
    hour = dt.timedelta(hours=1)
    q.offer_many([Message(f"d{i}", {"i": i}, at=NOW - hour) for i in range(300)]
                 + [Message(f"s{i}", {"i": i}, at=NOW + hour) for i in range(200)])
    claimed = q.poll_many(120)
    assert len(claimed) == 120
    return q


def _load(spark, url, table, name, **options):
    reader = (spark.read.format("sqldelay").option("url", url).option("queue", name)
              .option("table", table))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_backlog_matches_stats_and_reading_changes_nothing(
        spark, spark_url, spark_engine, spark_table, queue_name):
    q = _fill(spark_engine, spark_table, queue_name)
    before = queue_rows(spark_engine, spark_table, q.pkind)
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (180, 200, 120)

    df = _load(spark, spark_url, spark_table, queue_name, num_partitions=3)
    assert df.rdd.getNumPartitions() == 3
    summary = df.agg(
        F.count("*").alias("rows"), F.countDistinct("id").alias("ids"),
        F.sum(F.col("due").cast("int")).alias("due"),
        F.sum(F.col("in_flight").cast("int")).alias("in_flight"),
        F.sum((~F.col("due") & ~F.col("in_flight")).cast("int")).alias("scheduled"),
        F.sum(F.col("locked").cast("int")).alias("locked"),
    ).first()
    assert summary.asDict() == {"rows": 500, "ids": 500, "due": stats.due,
                                "in_flight": stats.in_flight, "scheduled": stats.scheduled,
                                "locked": 120}

    # computed for another instant: in two hours every message is due and every lock expired
    later = _load(spark, spark_url, spark_table, queue_name,
                  as_of=(NOW + dt.timedelta(hours=2)).isoformat())
    assert later.filter("due AND NOT in_flight").count() == 500

    row = df.filter(F.col("key") == "s7").first()
    assert (row.queue, row.serializer, row.deliveries) == (queue_name, "json", 0)
    assert bytes(row.payload) == b'{"i":7}'
    in_flight = df.filter("in_flight").select("deliveries", "due_at", "scheduled_at").first()
    assert in_flight.deliveries == 1 and in_flight.due_at > in_flight.scheduled_at

    # a second scan sees the same rows, and neither scan locked or changed anything
    assert df.select("id").subtract(_load(spark, spark_url, spark_table, queue_name)
                                    .select("id")).count() == 0
    assert queue_rows(spark_engine, spark_table, q.pkind) == before


def test_serializer_option_and_other_queues(
        spark, spark_url, spark_engine, spark_table, queue_name):
    DelayedQueue(spark_engine, queue_name, table_name=spark_table).offer("j", {"x": 1})
    DelayedQueue(spark_engine, queue_name, serializer=StrSerializer(),
                 table_name=spark_table).offer("t", "text")
    DelayedQueue(spark_engine, queue_name + "_other", table_name=spark_table).offer("o", 1)
    # a queue name with LIKE wildcards matches only itself
    wild = queue_name[:-1] + "_"
    DelayedQueue(spark_engine, wild, table_name=spark_table).offer("w", 1)

    both = _load(spark, spark_url, spark_table, queue_name)
    assert sorted((r.key, r.serializer) for r in both.collect()) == [("j", "json"),
                                                                     ("t", "str")]
    only_str = _load(spark, spark_url, spark_table, queue_name, serializer="str")
    assert [bytes(r.payload) for r in only_str.collect()] == [b"text"]
    assert [r.key for r in _load(spark, spark_url, spark_table, wild).collect()] == ["w"]
    assert _load(spark, spark_url, spark_table, "no_such_queue").count() == 0
