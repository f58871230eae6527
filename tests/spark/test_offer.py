"""offer_dataframe and format("sqldelay") batch writes, on every reachable backend."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from pyspark.sql import functions as F

from sqldelay import (
    BytesSerializer,
    DelayedQueue,
    InvalidArgumentError,
    JsonSerializer,
    SchemaMissingError,
    StrSerializer,
)
from sqldelay.spark import OfferCounts, offer_dataframe

from .spark_helpers import BASE, digest, messages_df, queue_rows

# run again on the standalone cluster (conftest.py)
pytestmark = pytest.mark.spark_cluster


def big_rows(url: str, kind: str) -> int:
    """200,000 rows as the issue asks on PostgreSQL in local mode; 40,000 on SQLite, MariaDB
    and the cluster keeps the suite inside its time budget on two cores (200,000 pass there
    too, in about 40 s each: set SQLDELAY_SPARK_ROWS=200000 to run that)."""
    if "SQLDELAY_SPARK_ROWS" in os.environ:
        return int(os.environ["SQLDELAY_SPARK_ROWS"])
    return 200_000 if url.startswith("postgresql") and kind == "local" else 40_000


def test_big_offer_counts_exactly_and_a_second_run_changes_nothing(
        spark, spark_kind, spark_url, spark_engine, spark_table, queue_name):
    rows = big_rows(spark_url, spark_kind)
    df = messages_df(spark, rows)
    first = offer_dataframe(df, url=spark_url, queue=queue_name, key="key", payload="body",
                            at="send_at", table_name=spark_table)
    assert first == OfferCounts(created=rows, updated=0, ignored=0)

    q = DelayedQueue(spark_engine, queue_name, serializer=JsonSerializer(),
                     table_name=spark_table)
    before = queue_rows(spark_engine, spark_table, q.pkind)
    assert len(before) == rows
    assert len({r[1] for r in before}) == rows
    stored = q.get("k4242")
    assert stored.payload == {"id": 4242, "version": 1, "text": "hello"}
    assert stored.scheduled_at == BASE + dt.timedelta(seconds=4242 % 3600)

    second = offer_dataframe(df, url=spark_url, queue=queue_name, key="key", payload="body",
                             at="send_at", table_name=spark_table)
    assert second == OfferCounts(created=0, updated=0, ignored=rows)
    assert digest(queue_rows(spark_engine, spark_table, q.pkind)) == digest(before)


def test_update_upserts_changed_rows_and_ignores_unchanged_ones(
        spark, spark_url, spark_engine, spark_table, queue_name):
    n = 1000
    offer_dataframe(messages_df(spark, n), url=spark_url, queue=queue_name, payload="body",
                    at="send_at", table_name=spark_table)
    # every even id gets a new payload; odd ids are offered again unchanged
    changed = messages_df(spark, n).withColumn(
        "body", F.when(F.col("body.id") % 2 == 0, F.struct(
            F.col("body.id").alias("id"), F.lit(2).alias("version"),
            F.lit("hello").alias("text"))).otherwise(F.col("body")))
    counts = offer_dataframe(changed, url=spark_url, queue=queue_name, payload="body",
                             at="send_at", update=True, table_name=spark_table)
    assert counts == OfferCounts(created=0, updated=n // 2, ignored=n // 2)
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    assert q.get("k10").payload["version"] == 2
    assert q.get("k11").payload["version"] == 1


def test_string_and_binary_payloads_are_stored_as_is(
        spark, spark_url, spark_engine, spark_table, queue_name):
    df = spark.createDataFrame(
        [("a", "plain text é", bytearray(b"\x00\x01raw")), ("b", '{"not": "parsed"}', None)],
        "user_id string, note string, blob binary")
    counts = offer_dataframe(df, url=spark_url, queue=queue_name, key="user_id",
                             payload="note", table_name=spark_table)
    assert counts.created == 2
    strings = DelayedQueue(spark_engine, queue_name, serializer=StrSerializer(),
                           table_name=spark_table)
    assert strings.get("a").payload == "plain text é"
    assert strings.get("b").payload == '{"not": "parsed"}'

    offer_dataframe(df.filter("blob IS NOT NULL"), url=spark_url, queue=queue_name,
                    key="user_id", payload="blob", table_name=spark_table)
    blobs = DelayedQueue(spark_engine, queue_name, serializer=BytesSerializer(),
                         table_name=spark_table)
    assert blobs.get("a").payload == b"\x00\x01raw"
    assert blobs.get("b") is None  # another payload type is another queue partition


def test_map_payload_becomes_a_json_object_and_integer_keys_text(
        spark, spark_url, spark_engine, spark_table, queue_name):
    df = spark.range(3).select(
        F.col("id").alias("user_id"),
        F.create_map(F.lit("n"), F.col("id"), F.lit("double"), F.col("id") * 2).alias("attrs"))
    offer_dataframe(df, url=spark_url, queue=queue_name, key="user_id", payload="attrs",
                    table_name=spark_table)
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    assert q.get("2").payload == {"n": 2, "double": 4}
    assert q.stats().due == 3  # no at column: due now


def test_bad_input_fails_before_anything_is_written(
        spark, spark_url, spark_engine, spark_table, queue_name):
    q = DelayedQueue(spark_engine, queue_name, serializer=StrSerializer(),
                     table_name=spark_table)
    df = spark.createDataFrame([("a", "x"), (None, "y"), ("c", "z")], "k string, p string")
    with pytest.raises(InvalidArgumentError, match=r"key column 'k' is null in 1 rows"):
        offer_dataframe(df, url=spark_url, queue=queue_name, key="k", payload="p",
                        table_name=spark_table)
    long_key = df.filter(F.col("k").isNotNull()).withColumn(
        "k", F.when(F.col("k") == "c", F.lit("x" * 201)).otherwise(F.col("k")))
    with pytest.raises(InvalidArgumentError, match=r"1 empty keys or keys longer than 200"):
        offer_dataframe(long_key, url=spark_url, queue=queue_name, key="k", payload="p",
                        table_name=spark_table)
    with pytest.raises(InvalidArgumentError, match="column 'body' is not in the DataFrame"):
        offer_dataframe(df, url=spark_url, queue=queue_name, key="k", payload="body",
                        table_name=spark_table)
    naive = df.withColumn("t", F.lit("2031-01-01 00:00:00").cast("timestamp_ntz"))
    with pytest.raises(InvalidArgumentError, match="naive timestamp"):
        offer_dataframe(naive, url=spark_url, queue=queue_name, key="k", payload="p", at="t",
                        table_name=spark_table)
    with pytest.raises(SchemaMissingError, match="no_such_table"):
        offer_dataframe(df, url=spark_url, queue=queue_name, key="k", payload="p",
                        table_name="no_such_table")
    assert q.stats().due + q.stats().scheduled == 0


def test_data_source_save_reports_counts_to_the_driver_commit(
        spark, spark_url, spark_engine, spark_table, queue_name, tmp_path):
    report = tmp_path / "report.json"
    df = messages_df(spark, 5000).withColumnRenamed("body", "payload")

    def save(frame):
        (frame.write.format("sqldelay").option("url", spark_url).option("queue", queue_name)
         .option("table", spark_table).option("at", "send_at").option("chunk_size", "700")
         .option("report_path", str(report)).mode("append").save())
        return json.loads(report.read_text())

    assert save(df) == {"created": 5000, "updated": 0, "ignored": 0, "tasks": 4}
    again = save(df.filter(F.col("payload.id") < 1200))
    assert (again["created"], again["updated"], again["ignored"]) == (0, 0, 1200)
    q = DelayedQueue(spark_engine, queue_name, table_name=spark_table)
    assert q.stats().scheduled == 5000
    assert q.get("k7").payload == {"id": 7, "version": 1, "text": "hello"}


def test_data_source_write_errors_are_clear(spark, spark_url, spark_table, queue_name):
    df = spark.createDataFrame([("a", "x"), (None, "y")], "key string, payload string")
    writer = (df.write.format("sqldelay").option("url", spark_url).option("queue", queue_name)
              .option("table", spark_table))
    with pytest.raises(Exception, match="key column 'key' is null"):
        writer.mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="payload column 'body' is not in the DataFrame"):
        writer.option("payload", "body").mode("append").save()
