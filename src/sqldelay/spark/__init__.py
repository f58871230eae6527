"""PySpark integration (``pip install 'sqldelay[spark]'``): schedule messages from a DataFrame,
read a queue's backlog as a DataFrame, drain a backlog with Spark tasks.

>>> from sqldelay.spark import offer_dataframe, register, drain_with_spark
>>> counts = offer_dataframe(df, url=url, queue="reminders", key="user_id", payload="body",
...                          at="send_at")
>>> register(spark)
>>> (df.write.format("sqldelay").option("url", url).option("queue", "reminders")
...    .mode("append").save())
>>> spark.read.format("sqldelay").option("url", url).option("queue", "reminders").load()

Tasks never receive an engine: each builds its own from the URL, so the URL must be reachable
from the executors and the driver for the database's driver package (psycopg, PyMySQL, ...)
must be installed on them too. The payload column's type picks the serializer: struct, map
or array -> ``JsonSerializer``; string -> ``StrSerializer``; binary -> ``BytesSerializer``
(see ``sqldelay.spark._mapping``); consumers open the queue with the same serializer.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "sqldelay.spark needs PySpark: pip install 'sqldelay[spark]' (pyspark>=4.0, pyarrow)"
    ) from exc

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..schema import DEFAULT_TABLE, KEY_LENGTH
from ._mapping import ColumnMapping, resolve_mapping
from ._offer import (
    DEFAULT_CHUNK_SIZE,
    OfferCounts,
    WriteConfig,
    check_table,
    offer_records,
    shard_urls,
)
from .drain import DrainCounts, drain_with_spark
from .source import FORMAT, READ_SCHEMA, SqlDelayDataSource

__all__ = [
    "FORMAT", "READ_SCHEMA", "DrainCounts", "OfferCounts", "SqlDelayDataSource",
    "drain_with_spark", "offer_dataframe", "register",
]

_COUNTS_SCHEMA = "created long, updated long, ignored long"


def register(spark: Any) -> None:
    """Make ``format("sqldelay")`` available in this SparkSession (read, write, stream)."""
    spark.dataSource.register(SqlDelayDataSource)


def offer_dataframe(df: Any, *, url: str | Sequence[str], queue: str, key: str = "key",
                    payload: str = "payload", at: str | None = None, update: bool = False,
                    priority: str | None = None, group: str | None = None,
                    table_name: str = DEFAULT_TABLE, chunk_size: int = DEFAULT_CHUNK_SIZE,
                    precheck: bool = True) -> OfferCounts:
    """Offer every row of ``df`` as a message of ``queue``; return the summed outcomes.

    ``url``: the database, or a list of shard URLs: each row then goes to the shard of its key,
    as ``ShardedQueue`` over those URLs (default shard names) routes it.

    ``key``: a string or integer column (integers become their decimal text). ``payload``: a
    struct/map/array column (JSON), a string or a binary column. ``at``: an optional timestamp
    column, the due time (null: due now); a ``timestamp_ntz`` column is refused because it
    names no instant. ``priority``: an optional integer column (null: 0); ``group``: an
    optional string column (null: no group). ``update=False`` inserts keys that are absent
    and ignores the rest; ``update=True`` upserts. Each partition is offered by one task in
    chunks of ``chunk_size`` rows, each chunk its own transaction; a retried task re-offers
    idempotently, so the queue holds each key once. The counts come from the successful
    attempt of each task: rows that a failed attempt had committed count as ignored.

    ``precheck`` scans ``df`` once for null, empty or too long keys (and null string/binary
    payloads) so that
    bad input fails before anything is written; without it a bad row fails its task after
    the earlier chunks were committed.
    """
    if not isinstance(update, bool):
        raise InvalidArgumentError(f"update must be True or False, got {update!r}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise InvalidArgumentError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    mapping = resolve_mapping(df.schema, key=key, payload=payload, at=at, priority=priority,
                              group=group)
    config = WriteConfig(url=shard_urls(url), queue=queue, table_name=table_name, mapping=mapping,
                         update=update, chunk_size=chunk_size)
    # checks the queue name on the driver (DelayedQueue validates it) without connecting
    from ._offer import make_engine

    engines = [make_engine(one) for one in config.urls]
    try:
        config.open_queue(engines)
    finally:
        for engine in engines:
            engine.dispose()
    check_table(config.url, table_name)
    columns = mapping.columns()
    selected = df.select(*columns)
    if precheck:
        _precheck(selected, mapping)

    def offer_partition(batches: Any) -> Any:
        import pyarrow as pa

        from ._mapping import arrow_records

        counts = offer_records(config, arrow_records(batches, columns))
        yield pa.RecordBatch.from_pydict({"created": [counts.created],
                                          "updated": [counts.updated],
                                          "ignored": [counts.ignored]})

    rows = selected.mapInArrow(offer_partition, _COUNTS_SCHEMA).collect()
    return OfferCounts.sum(OfferCounts(r["created"], r["updated"], r["ignored"]) for r in rows)


def _precheck(df: Any, mapping: ColumnMapping) -> None:
    from pyspark.sql import functions as F

    key_length = F.length(F.col(mapping.key).cast("string"))
    checks = [F.count(F.when(F.col(mapping.key).isNull(), 1)).alias("null_keys"),
              F.count(F.when((key_length == 0) | (key_length > KEY_LENGTH), 1)).alias("bad_keys")]
    if mapping.serializer_name != "json":
        checks.append(F.count(F.when(F.col(mapping.payload).isNull(), 1)).alias("null_payloads"))
    row = df.agg(*checks).first()
    if row["null_keys"]:
        raise InvalidArgumentError(
            f"the key column {mapping.key!r} is null in {row['null_keys']} rows; every message "
            f"needs a key (filter with F.col({mapping.key!r}).isNotNull()); nothing was offered")
    if row["bad_keys"]:
        raise InvalidArgumentError(
            f"the key column {mapping.key!r} holds {row['bad_keys']} empty keys or keys longer "
            f"than {KEY_LENGTH} characters; nothing was offered")
    if mapping.serializer_name != "json" and row["null_payloads"]:
        raise InvalidArgumentError(
            f"the payload column {mapping.payload!r} is null in {row['null_payloads']} rows; a "
            f"{mapping.serializer_name} payload cannot be null; nothing was offered")
