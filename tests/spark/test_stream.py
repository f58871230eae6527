"""writeStream.format("sqldelay"): every micro-batch is offered and committed on its own."""

from __future__ import annotations

import json

from pyspark.sql import functions as F

from sqldelay import DelayedQueue

from .spark_helpers import BASE_S


def _file_batch(spark, start: int, end: int):
    return spark.range(start, end, 1, 2).select(
        F.concat(F.lit("s"), F.col("id").cast("string")).alias("key"),
        F.struct(F.col("id").alias("id")).alias("payload"),
        F.timestamp_seconds(F.lit(BASE_S) + F.col("id")).alias("at"))


def test_streaming_sink_commits_each_micro_batch(
        spark, spark_url, spark_engine, spark_table, queue_name, tmp_path):
    source = tmp_path / "incoming"
    # three files, three micro-batches; the third repeats 100 keys of the second
    for start, end in ((0, 1000), (1000, 1500), (1400, 1800)):
        _file_batch(spark, start, end).coalesce(1).write.mode("append").parquet(str(source))
    schema = spark.read.parquet(str(source)).schema
    report = tmp_path / "batches.jsonl"

    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
              .parquet(str(source)))
    query = (stream.writeStream.format("sqldelay").option("url", spark_url)
             .option("queue", queue_name).option("table", spark_table)
             .option("report_path", str(report))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None

    batches = sorted((json.loads(line) for line in report.read_text().splitlines()),
                     key=lambda b: b["batch_id"])
    assert [b["batch_id"] for b in batches] == [0, 1, 2]
    per_batch = sorted((b["created"], b["ignored"]) for b in batches)
    assert per_batch == sorted([(1000, 0), (500, 0), (300, 100)])

    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    stats = q.stats()
    assert stats.scheduled == 1800 and stats.due == 0
    assert q.get("s1799").payload == {"id": 1799}
