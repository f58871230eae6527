"""A task that fails after committing part of its partition is retried (local[2,3]); the
queue still holds each key exactly once, with the retry's payload.

The failure is made deterministic: a non-deterministic UDF puts NaN (which JSON refuses) into
one row's payload on the first attempt only. Partition 0 holds ids 0..4999 in order and the
bad row is id 3500, so the first attempt commits chunks 0-999, 1000-1999 and 2000-2999 and then
fails on the chunk holding 3500; the retry re-offers all 5000 rows of the partition.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqldelay import DelayedQueue
from sqldelay.spark import OfferCounts, offer_dataframe

from .conftest import SPARK_BACKENDS
from .spark_helpers import queue_rows

# run again on the standalone cluster, whose executors retry the failed task (conftest.py)
pytestmark = pytest.mark.spark_cluster

ROWS = 20_000
PARTITIONS = 4
CHUNK = 1000
BAD_ID = 3500
COMMITTED_BEFORE_FAILURE = 3 * CHUNK


def _first_attempt_breaks(bad_id: int):
    def value(row_id):  # no type hints: they would make pyspark guess a pandas UDF
        from pyspark import TaskContext

        if row_id == bad_id and TaskContext.get().attemptNumber() == 0:
            return float("nan")
        return 1.0

    return F.udf(value, T.DoubleType()).asNondeterministic()


def _frame(spark):
    breaks = _first_attempt_breaks(BAD_ID)
    return spark.range(0, ROWS, 1, PARTITIONS).select(
        F.concat(F.lit("r"), F.col("id").cast("string")).alias("key"),
        F.struct(F.col("id").alias("id"), breaks(F.col("id")).alias("weight")).alias("payload"))


def _check_queue(engine, table, queue_name):
    q = DelayedQueue(engine, queue_name, table_name=table)
    rows = queue_rows(engine, table, q.pkind)
    assert len(rows) == ROWS
    assert len({r[1] for r in rows}) == ROWS
    assert q.get(f"r{BAD_ID}").payload == {"id": BAD_ID, "weight": 1.0}


# parametrized here rather than through the session-wide backend fixture, so that pytest runs
# these tests back to back and the SparkSession switches to local[2,3] and back only once
backends = pytest.mark.parametrize("backend", SPARK_BACKENDS)


@backends
def test_offer_dataframe_survives_a_retried_task(spark_retrying, spark_backends, backend,
                                                 queue_name):
    spark_url, spark_engine, spark_table = spark_backends.get(backend)
    counts = offer_dataframe(_frame(spark_retrying), url=spark_url, queue=queue_name,
                             chunk_size=CHUNK, table_name=spark_table)
    # the retry finds the first attempt's committed rows already there
    assert counts == OfferCounts(created=ROWS - COMMITTED_BEFORE_FAILURE, updated=0,
                                 ignored=COMMITTED_BEFORE_FAILURE)
    _check_queue(spark_engine, spark_table, queue_name)


@backends
def test_data_source_write_survives_a_retried_task(spark_retrying, spark_backends, backend,
                                                   queue_name, tmp_path):
    spark_url, spark_engine, spark_table = spark_backends.get(backend)
    report = tmp_path / "report.json"
    (_frame(spark_retrying).write.format("sqldelay").option("url", spark_url)
     .option("queue", queue_name).option("table", spark_table)
     .option("chunk_size", str(CHUNK)).option("report_path", str(report))
     .mode("append").save())
    assert json.loads(report.read_text()) == {
        "created": ROWS - COMMITTED_BEFORE_FAILURE, "updated": 0,
        "ignored": COMMITTED_BEFORE_FAILURE, "tasks": PARTITIONS}
    _check_queue(spark_engine, spark_table, queue_name)
