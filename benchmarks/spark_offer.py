"""Rows per second through Spark (``offer_dataframe``) beside one process's ``offer_many``.

Both offer the same rows (key ``k<i>``, a small JSON object, a due time) as new messages, in
chunks of the same size. Every timed offer starts from a freshly created, empty table (dropped
at the end), so that no run pays for another's rows and index pages. The figure that matters
is the ratio: absolute numbers on a shared machine say little. Spark's session start is
outside the timing; its job planning, task start and Arrow transfer are in. A session's first
job is much slower (JVM warm-up, Python workers importing the library), so a small warm-up
job runs first and is reported on its own (``spark_first_job_s``). With ``--repeats N`` each
offer is timed N times (one process and Spark alternating) and the median is reported, with
every run's figure beside it.

    python benchmarks/spark_offer.py --url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --rows 200000

With ``--cluster`` the same offer then runs, in the same invocation, on a Spark standalone
cluster started on this machine from the installed PySpark (a master and ``--workers``
workers of one core each, ``tests/spark/standalone.py``), whose executors run sqldelay from a
packed virtual environment shipped with ``spark.archives``, as docs/spark.md describes. Its
first job is reported on its own too (``cluster_first_job_s``). The cluster and its files are
gone when the script ends.

Prints one JSON object. Needs the ``[spark]`` extra and Java 17+; ``--cluster`` also needs
``build`` and ``venv-pack`` (the ``[test]`` extra) and PyPI to install the packed venv from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

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
                   partitions: int) -> float:
    """Seconds of one ``offer_dataframe`` of ``rows`` new messages; fails on a wrong count."""
    from pyspark.sql import functions as F

    from sqldelay.spark import offer_dataframe

    df = spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.struct(F.col("id").alias("id"), F.lit("hello").alias("text")).alias("payload"),
        F.timestamp_seconds(F.lit(int(BASE.timestamp())) + F.col("id") % 3600).alias("at"))
    started = time.perf_counter()
    counts = offer_dataframe(df, url=url, queue=queue, at="at", table_name=table,
                             chunk_size=chunk, precheck=False)
    seconds = time.perf_counter() - started
    if counts.created != rows:
        raise RuntimeError(f"Spark created {counts.created} of {rows} messages")
    return seconds


def _session(master: str, conf: dict[str, str]):
    """A SparkSession on ``master`` with the settings ``conf``; without UI and logging only
    errors, so that the JSON object stays the last line the script prints."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("sqldelay-bench")
               .config("spark.ui.enabled", "false"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Bench:
    """One invocation's database side: the table each timed offer starts from empty."""

    def __init__(self, args) -> None:
        self.args = args
        self.table = f"bench_spark_{os.getpid()}"
        self.engine = sa.create_engine(args.url)

    def fresh(self) -> str:
        """The table, emptied by dropping and creating it again."""
        from sqldelay import create_schema, drop_schema

        drop_schema(self.engine, table_name=self.table)
        create_schema(self.engine, table_name=self.table)
        return self.table

    def single(self) -> float:
        a = self.args
        return _single_process(a.url, self.fresh(), "bench_single", a.rows, a.chunk_size)

    def spark(self, spark, rows: int | None = None) -> float:
        a = self.args
        return _through_spark(spark, a.url, self.fresh(), "bench_spark", rows or a.rows,
                              a.chunk_size, a.partitions)

    def close(self) -> None:
        from sqldelay import drop_schema

        drop_schema(self.engine, table_name=self.table)
        self.engine.dispose()


def _figures(name: str, rows: int, seconds: list[float]) -> dict:
    """``<name>_rows_per_s`` from the median run, and every run's rows/s beside it."""
    return {f"{name}_rows_per_s": round(rows / statistics.median(seconds)),
            f"{name}_runs_rows_per_s": [round(rows / s) for s in seconds]}


def _local(bench: _Bench, warmup_rows: int) -> tuple[dict, float]:
    """Local mode's figures (one process's beside Spark's), and Spark's median seconds."""
    args = bench.args
    spark = _session(args.master, {})
    try:
        first_job_s = bench.spark(spark, warmup_rows)
        single_s, spark_s = [], []
        for _ in range(args.repeats):  # alternating, so that a change of load hits both
            single_s.append(bench.single())
            spark_s.append(bench.spark(spark))
    finally:
        spark.stop()
    figures = {**_figures("single_process", args.rows, single_s),
               **_figures("spark", args.rows, spark_s),
               "spark_vs_single_process": round(statistics.median(single_s)
                                                / statistics.median(spark_s), 2),
               "spark_first_job_s": round(first_job_s, 2)}
    return figures, statistics.median(spark_s)


def _on_cluster(bench: _Bench, warmup_rows: int, local_s: float) -> dict:
    """The cluster's figures (and its speed beside local mode's median ``local_s``), on a
    standalone cluster started for this run and stopped, files and all, before returning."""
    # the cluster helper lives with the Spark tests, which start the same cluster
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.spark.standalone import StandaloneCluster, await_executors, pack_job_environment

    args = bench.args
    with tempfile.TemporaryDirectory(prefix="sqldelay-spark-cluster-") as tmp:
        archive = pack_job_environment(Path(tmp) / "job_env")
        cluster = StandaloneCluster(Path(tmp) / "cluster", workers=args.workers)
        cluster.start()
        try:
            spark = _session(cluster.master_url, cluster.session_conf(archive))
            try:
                await_executors(spark, args.workers)
                first_job_s = bench.spark(spark, warmup_rows)
                seconds = [bench.spark(spark) for _ in range(args.repeats)]
            finally:
                spark.stop()
        finally:
            cluster.stop()
    return {**_figures("cluster", args.rows, seconds),
            "cluster_vs_local": round(local_s / statistics.median(seconds), 2),
            "cluster_first_job_s": round(first_job_s, 2),
            "cluster_workers": args.workers, "cluster_cores_per_worker": 1}


def _positive(text: str) -> int:
    """An argparse type: counts of rows, chunks, partitions, runs and workers start at 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="SQLAlchemy URL of the database")
    parser.add_argument("--rows", type=_positive, default=200_000)
    parser.add_argument("--chunk-size", type=_positive, default=2000)
    parser.add_argument("--partitions", type=_positive, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeats", type=_positive, default=1,
                        help="timed offers per mode; the median is reported")
    parser.add_argument("--cluster", action="store_true",
                        help="then offer the same rows on a standalone cluster started here")
    parser.add_argument("--workers", type=_positive, default=2,
                        help="workers (one core each) of the --cluster run")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warmup_rows = min(args.rows, args.chunk_size)
    bench = _Bench(args)
    try:
        local, local_s = _local(bench, warmup_rows)
        cluster = _on_cluster(bench, warmup_rows, local_s) if args.cluster else {}
    finally:
        bench.close()
    result = {
        "scenario": "spark_offer", "dialect": bench.engine.dialect.name, "rows": args.rows,
        "chunk_size": args.chunk_size, "partitions": args.partitions, "master": args.master,
        "repeats": args.repeats, **local, "spark_first_job_rows": warmup_rows, **cluster,
        "cores": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
