"""Shared builders of the Spark tests: DataFrames of messages and a digest of a queue's rows."""

from __future__ import annotations

import datetime as dt
import hashlib

import sqlalchemy as sa
from pyspark.sql import functions as F

from sqldelay.schema import queue_table

# far in the future, so nothing the tests offer becomes due while they run
BASE = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
BASE_S = int(BASE.timestamp())


def messages_df(spark, n: int, *, partitions: int = 4, version: int = 1):
    """Rows key='k<id>', body=struct(id, version, text), send_at=BASE + id % 3600 seconds."""
    return spark.range(0, n, 1, partitions).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.struct(F.col("id").alias("id"), F.lit(version).alias("version"),
                 F.lit("hello").alias("text")).alias("body"),
        F.timestamp_seconds(F.lit(BASE_S) + F.col("id") % 3600).alias("send_at"),
    )


def queue_rows(engine: sa.Engine, table_name: str, pkind: str) -> list[tuple]:
    t = queue_table(sa.MetaData(), table_name)
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            sa.select(t.c.id, t.c.pkey, t.c.payload, t.c.scheduled_at_initially,
                      t.c.scheduled_at, t.c.created_at, t.c.deliveries)
            .where(t.c.pkind == pkind).order_by(t.c.pkey))]


def digest(rows: list[tuple]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(tuple(bytes(v) if isinstance(v, memoryview | bytearray) else v
                            for v in row)).encode())
    return h.hexdigest()
