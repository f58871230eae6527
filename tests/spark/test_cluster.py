"""The cluster runs of the Spark tests are what they claim: their tasks run in executors that
the Worker daemons started, with the Python and the sqldelay of the packed environment that
the job shipped (spark.archives), not the driver's Python or this checkout."""

from __future__ import annotations

from pathlib import Path

from .conftest import CLUSTER_WORKERS


def _where_tasks_run():
    """A task reporting its Python, working directory, sqldelay module and ancestor process
    ids. Made inside a function so that cloudpickle ships it by value: by reference it would
    name this test module, which the executors cannot import."""

    def where(batches):
        import os
        import sys

        import pyarrow as pa

        import sqldelay

        for _ in batches:  # one row per partition: its presence is all that matters
            pass
        ancestors, pid = [], os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
            ancestors.append(pid)
        yield pa.RecordBatch.from_pydict({
            "python": [sys.executable], "cwd": [os.getcwd()], "sqldelay": [sqldelay.__file__],
            "ancestors": [ancestors]})

    return where


def test_tasks_run_in_executors_the_workers_started(spark_sessions, spark_cluster):
    spark = spark_sessions.on_cluster(spark_cluster)
    rows = spark.range(0, 8, 1, 8).mapInArrow(
        _where_tasks_run(),
        "python string, cwd string, sqldelay string, ancestors array<long>").collect()

    cluster = spark_cluster.cluster
    work_dirs = {cluster.work_dir(i).resolve() for i in range(CLUSTER_WORKERS)}
    # each executor works in <worker's work dir>/<application>/<executor id>
    assert {Path(row.cwd).parents[1] for row in rows} == work_dirs
    workers = {cluster.daemon_pids[f"worker{i}"] for i in range(CLUSTER_WORKERS)}
    driver_jvm = spark.sparkContext._gateway.proc.pid
    for row in rows:
        environment = Path(row.cwd) / "environment"
        assert row.python == str(environment / "bin" / "python")
        assert Path(row.sqldelay).is_relative_to(environment / "lib")
        assert workers & set(row.ancestors)
        assert driver_jvm not in row.ancestors
