"""Rows per second through Spark (``offer_dataframe``) beside one process's ``offer_many``.

Both offer the same rows (key ``k<i>``, a small JSON object, a due time) as new messages,
in chunks of the same size, into two queues of a fresh table that is dropped afterwards. The
figure that matters is the ratio: absolute numbers on a shared machine say little. Spark's
session start is outside the timing; its job planning, task start and Arrow transfer are in.
A session's first job is much slower (JVM warm-up, Python workers importing the library), so
a small warm-up job runs first and is reported on its own (``spark_first_job_s``).

    python benchmarks/spark_offer.py --url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --rows 200000

Prints one JSON object. Needs the ``[spark]`` extra and Java 17+.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time

import sqlalchemy as sa

BASE = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)


def _single_process(url: str, table: str, queue: str, rows: int, chunk: int) -> float:
    from sqldelay import DelayedQueue, Message

    engine = sa.create_engine(url)
    try:
        q = DelayedQueue(engine, queue, table_name=table)
        started = time.perf_counter()
        for start in range(0, rows, chunk):
            q.offer_many([
                Message(f"k{i}", {"id": i, "text": "hello"},
                        at=BASE + dt.timedelta(seconds=i % 3600), update=False)
                for i in range(start, min(start + chunk, rows))])
        return time.perf_counter() - started
    finally:
        engine.dispose()


def _through_spark(spark, url: str, table: str, queue: str, rows: int, chunk: int,
                   partitions: int) -> tuple[float, object]:
    from pyspark.sql import functions as F

    from sqldelay.spark import offer_dataframe

    df = spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.struct(F.col("id").alias("id"), F.lit("hello").alias("text")).alias("payload"),
        F.timestamp_seconds(F.lit(int(BASE.timestamp())) + F.col("id") % 3600).alias("at"))
    started = time.perf_counter()
    counts = offer_dataframe(df, url=url, queue=queue, at="at", table_name=table,
                             chunk_size=chunk, precheck=False)
    return time.perf_counter() - started, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="SQLAlchemy URL of the database")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from sqldelay import create_schema, drop_schema

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    table = f"bench_spark_{os.getpid()}"
    engine = sa.create_engine(args.url)
    create_schema(engine, table_name=table)
    spark = (SparkSession.builder.master(args.master).appName("sqldelay-bench")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        warmup_rows = min(args.rows, args.chunk_size)
        first_job_s, _ = _through_spark(spark, args.url, table, "bench_warmup", warmup_rows,
                                        args.chunk_size, args.partitions)
        single_s = _single_process(args.url, table, "bench_single", args.rows, args.chunk_size)
        spark_s, counts = _through_spark(spark, args.url, table, "bench_spark", args.rows,
                                         args.chunk_size, args.partitions)
    finally:
        spark.stop()
        drop_schema(engine, table_name=table)
        engine.dispose()
    if counts.created != args.rows:
        print(f"error: Spark created {counts.created} of {args.rows} messages", file=sys.stderr)
        return 1
    result = {
        "scenario": "spark_offer", "dialect": engine.dialect.name, "rows": args.rows,
        "chunk_size": args.chunk_size, "partitions": args.partitions, "master": args.master,
        "single_process_rows_per_s": round(args.rows / single_s),
        "spark_rows_per_s": round(args.rows / spark_s),
        "spark_vs_single_process": round(single_s / spark_s, 2),
        "spark_first_job_s": round(first_job_s, 2), "spark_first_job_rows": warmup_rows,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
