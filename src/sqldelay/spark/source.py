"""The ``sqldelay`` Spark data source: batch write, streaming sink and backlog read.

Options (case-insensitive; values are strings as Spark passes them):

write and stream
    ``url`` (required; or ``shards``, a JSON list of shard URLs: each row goes to the shard of
    its key, as ``ShardedQueue`` routes it), ``password`` (optional, put into the URL, or
    each shard URL; Spark redacts options named like this in plans and logs, not a password
    written inside the URL), ``queue``
    (required), ``table`` (default ``delayed_queue``),
    ``key`` (default ``key``), ``payload`` (default ``payload``), ``at`` (default: the column
    ``at`` when the DataFrame has one, else every message is due now; ``""`` forces due now),
    ``priority`` and ``group`` (optional integer and string columns), ``update``
    (``true``/``false``, default ``false``), ``chunk_size`` (rows per commit, default 2000),
    ``report_path`` (optional: the driver-side commit writes the counts there as JSON; a
    stream appends one JSON line per micro-batch).

read
    ``url``, ``password``, ``queue``, ``table`` as above; ``serializer`` (``json``, ``str``,
    ``bytes`` or a custom type name; default: every payload type of that queue), ``num_partitions``
    (id ranges read in parallel, default 4), ``as_of`` (epoch ms or ISO 8601 instant the
    derived ``due``/``in_flight`` columns are computed for; default: when the read is planned).

Only ``mode("append")`` is supported: overwriting a queue from a DataFrame has no meaning that
keeps the queue's guarantees, so ``overwrite`` is rejected.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pyspark.sql import datasource
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from ..clock import to_ms
from ..errors import InvalidArgumentError
from ..schema import DEFAULT_TABLE, queue_table
from ._mapping import arrow_records, naive_local_to_utc, resolve_mapping
from ._offer import (
    DEFAULT_CHUNK_SIZE,
    OfferCounts,
    WriteConfig,
    check_table,
    make_engine,
    offer_records,
    shard_urls,
)

# the streaming sink takes Arrow batches from pyspark 4.1 on, rows on pyspark 4.0
ARROW_STREAM = hasattr(datasource, "DataSourceStreamArrowWriter")

log = logging.getLogger("sqldelay.spark")

FORMAT = "sqldelay"
DEFAULT_READ_PARTITIONS = 4
READ_PAGE = 10_000

READ_SCHEMA = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("queue", T.StringType(), False),
    T.StructField("serializer", T.StringType(), False),
    T.StructField("key", T.StringType(), False),
    T.StructField("payload", T.BinaryType(), False),
    # the due time the producer asked for (what DelayedQueue.get reports as scheduled_at)
    T.StructField("scheduled_at", T.TimestampType(), False),
    # when the message is next due: the due time, a retry time, or while claimed its lock expiry
    T.StructField("due_at", T.TimestampType(), False),
    T.StructField("created_at", T.TimestampType(), False),
    T.StructField("deliveries", T.IntegerType(), False),
    T.StructField("locked", T.BooleanType(), False),
    # derived for as_of, with the same rules as DelayedQueue.stats()
    T.StructField("due", T.BooleanType(), False),
    T.StructField("in_flight", T.BooleanType(), False),
])


@dataclass
class CountsMessage(WriterCommitMessage):
    """What one write task did, sent to the driver's commit."""

    created: int
    updated: int
    ignored: int

    def counts(self) -> OfferCounts:
        return OfferCounts(self.created, self.updated, self.ignored)


def _message(counts: OfferCounts) -> CountsMessage:
    return CountsMessage(counts.created, counts.updated, counts.ignored)


def _total(messages: list[Any]) -> OfferCounts:
    return OfferCounts.sum(m.counts() for m in messages if isinstance(m, CountsMessage))


# ---- options --------------------------------------------------------------------------------


def _required(options: Any, name: str) -> str:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        raise InvalidArgumentError(f"the sqldelay data source needs .option({name!r}, ...)")
    return str(value)


def _bool(options: Any, name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name!r} must be true or false, got {value!r}")


def _positive_int(options: Any, name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise InvalidArgumentError(f"option {name!r} must be a positive integer, got {value!r}")
    return number


def _url(options: Any) -> str:
    """The URL, with the ``password`` option put in: Spark redacts options named like
    "password" in plans and logs, but not a password inside the URL."""
    url = _required(options, "url")
    password = options.get("password")
    if password:
        url = sa.make_url(url).set(password=str(password)).render_as_string(hide_password=False)
    return url


def _write_url(options: Any) -> str | tuple[str, ...]:
    """``url``, or the ``shards`` option's JSON list of shard URLs (``password`` put into
    each)."""
    shards = options.get("shards")
    if shards is None:
        return _url(options)
    if options.get("url"):
        raise InvalidArgumentError("give the option 'url' or 'shards', not both")
    try:
        urls = shard_urls(json.loads(str(shards)))
    except ValueError:
        raise InvalidArgumentError(
            f"option 'shards' must be a JSON list of database URLs, got {shards!r}") from None
    password = options.get("password")
    if password:
        urls = tuple(sa.make_url(u).set(password=str(password))
                     .render_as_string(hide_password=False) for u in urls)
    return urls


def _table(options: Any) -> str:
    return str(options.get("table") or options.get("table_name") or DEFAULT_TABLE)


def write_config(options: Any, schema: T.StructType) -> WriteConfig:
    """Build and check a task configuration from data source options and the input schema."""
    names = {f.name for f in schema.fields}
    at = options.get("at")
    if at is None:
        at = "at" if "at" in names else None
    elif str(at) == "":
        at = None
    mapping = resolve_mapping(schema, key=str(options.get("key") or "key"),
                              payload=str(options.get("payload") or "payload"), at=at,
                              priority=options.get("priority") or None,
                              group=options.get("group") or None)
    return WriteConfig(url=_write_url(options), queue=_required(options, "queue"),
                       table_name=_table(options), mapping=mapping,
                       update=_bool(options, "update", False),
                       chunk_size=_positive_int(options, "chunk_size", DEFAULT_CHUNK_SIZE))


def _reject_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgumentError(
            "the sqldelay data source only appends: use .mode('append') (offers are "
            "insert-if-absent, or upserts with .option('update', 'true'))")


def _report(path: str | None, record: dict[str, Any], *, append: bool) -> None:
    if not path:
        return
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def _counts_record(counts: OfferCounts, tasks: int) -> dict[str, Any]:
    return {"created": counts.created, "updated": counts.updated, "ignored": counts.ignored,
            "tasks": tasks}


# ---- the data source ------------------------------------------------------------------------


class SqlDelayDataSource(DataSource):
    """``format("sqldelay")``: see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> T.StructType:
        return READ_SCHEMA

    def writer(self, schema: T.StructType, overwrite: bool) -> SqlDelayWriter:
        _reject_overwrite(overwrite)
        config = write_config(self.options, schema)
        check_table(config.url, config.table_name)
        return SqlDelayWriter(config, self.options.get("report_path"))

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> DataSourceStreamWriter:
        _reject_overwrite(overwrite)
        config = write_config(self.options, schema)
        check_table(config.url, config.table_name)
        report_path = self.options.get("report_path")
        if ARROW_STREAM:
            return SqlDelayStreamArrowWriter(config, report_path)
        return SqlDelayStreamRowWriter(config, report_path)  # pragma: no cover - pyspark 4.0

    def reader(self, schema: T.StructType) -> SqlDelayReader:
        return SqlDelayReader(self.options)


class SqlDelayWriter(DataSourceArrowWriter):
    """Batch write: each task offers its partition; the driver's commit sums the counts."""

    def __init__(self, config: WriteConfig, report_path: str | None) -> None:
        self.config = config
        self.report_path = report_path

    def write(self, iterator: Iterator[Any]) -> CountsMessage:
        columns = self.config.mapping.columns()
        return _message(offer_records(self.config, arrow_records(iterator, columns)))

    def commit(self, messages: list[Any]) -> None:
        counts = _total(messages)
        log.info("sqldelay write committed: %s", counts)
        _report(self.report_path, _counts_record(counts, len(messages)), append=False)

    def abort(self, messages: list[Any]) -> None:
        log.warning("sqldelay write aborted after offering %s in finished tasks "
                    "(those messages stay queued; re-running the write is idempotent)",
                    _total(messages))


class _StreamCommit:
    config: WriteConfig
    report_path: str | None

    def commit(self, messages: list[Any], batchId: int) -> None:
        counts = _total(messages)
        log.info("sqldelay micro-batch %d committed: %s", batchId, counts)
        record = _counts_record(counts, len(messages))
        record["batch_id"] = batchId
        _report(self.report_path, record, append=True)

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("sqldelay micro-batch %d aborted; its replay re-offers idempotently",
                    batchId)


if ARROW_STREAM:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    class SqlDelayStreamArrowWriter(_StreamCommit, DataSourceStreamArrowWriter):
        """Streaming sink: every micro-batch is offered like a batch write, chunk by chunk."""

        def __init__(self, config: WriteConfig, report_path: str | None) -> None:
            self.config = config
            self.report_path = report_path

        def write(self, iterator: Iterator[Any]) -> CountsMessage:
            columns = self.config.mapping.columns()
            return _message(offer_records(self.config, arrow_records(iterator, columns)))


class SqlDelayStreamRowWriter(_StreamCommit, DataSourceStreamWriter):
    """Streaming sink for pyspark 4.0, which hands rows rather than Arrow batches."""

    def __init__(self, config: WriteConfig, report_path: str | None) -> None:
        self.config = config
        self.report_path = report_path

    def write(self, iterator: Iterator[Any]) -> CountsMessage:
        return _message(offer_records(self.config, _row_records(self.config, iterator)))


def _row_records(config: WriteConfig, rows: Iterator[Any]) -> Iterator[list[dict[str, Any]]]:
    at = config.mapping.at
    batch: list[dict[str, Any]] = []
    for row in rows:
        record = row.asDict(recursive=True)
        if at is not None:
            record[at] = naive_local_to_utc(record.get(at))
        batch.append(record)
        if len(batch) >= config.chunk_size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---- reading the backlog --------------------------------------------------------------------


@dataclass(frozen=True)
class IdRange(InputPartition):
    """Rows with ``low <= id < high`` of the given pkinds."""

    low: int
    high: int


class SqlDelayReader(DataSourceReader):
    """Reads a queue's rows in id ranges. Plain SELECTs: nothing is locked or changed, so
    Spark may re-run any partition. A scan is not a snapshot: a message claimed or acked while
    the scan runs may be seen in either state (or not at all once acked)."""

    def __init__(self, options: Any) -> None:
        if options.get("shards") is not None:
            raise InvalidArgumentError(
                "reading takes one database: read each shard's url and union the DataFrames")
        self.url = _url(options)
        self.queue = _required(options, "queue")
        self.table_name = _table(options)
        self.serializer = options.get("serializer")
        self.num_partitions = _positive_int(options, "num_partitions", DEFAULT_READ_PARTITIONS)
        self.as_of_ms = _as_of(options.get("as_of"))
        self.pkinds, self.bounds = self._plan()

    def _table(self) -> sa.Table:
        return queue_table(sa.MetaData(), self.table_name)

    def _plan(self) -> tuple[list[str], tuple[int, int] | None]:
        t = self._table()
        engine = make_engine(self.url)
        try:
            with engine.connect() as conn:
                if self.serializer:
                    pkinds = [f"{self.queue}|{self.serializer}"]
                else:
                    prefix = _like_escape(self.queue + "|") + "%"
                    found = conn.execute(
                        sa.select(t.c.pkind).where(t.c.pkind.like(prefix, escape="\\"))
                        .distinct()).scalars()
                    # exact match in Python: LIKE may ignore case on some collations, and a
                    # queue name may itself contain "|"
                    pkinds = sorted(p for p in found if p.rpartition("|")[0] == self.queue)
                if not pkinds:
                    return [], None
                low, high = conn.execute(
                    sa.select(sa.func.min(t.c.id), sa.func.max(t.c.id))
                    .where(t.c.pkind.in_(pkinds))).one()
        finally:
            engine.dispose()
        return pkinds, (None if low is None else (int(low), int(high) + 1))

    def partitions(self) -> list[IdRange]:
        if self.bounds is None:
            return [IdRange(0, 0)]
        low, high = self.bounds
        n = min(self.num_partitions, high - low)
        step = -(-(high - low) // n)
        return [IdRange(s, min(s + step, high)) for s in range(low, high, step)]

    # Spark hands back the partitions this reader made, which the base class types as any
    def read(self, partition: IdRange) -> Iterator[Any]:  # type: ignore[override]
        if partition.low >= partition.high or not self.pkinds:
            return
        import pyarrow as pa

        t = self._table()
        cols = (t.c.id, t.c.pkind, t.c.pkey, t.c.payload, t.c.scheduled_at_initially,
                t.c.scheduled_at, t.c.created_at, t.c.deliveries, t.c.lock_uuid)
        arrow_schema = _arrow_read_schema(pa)
        now = self.as_of_ms
        engine = make_engine(self.url)
        try:
            last = partition.low - 1
            while True:
                stmt = (sa.select(*cols)
                        .where(t.c.pkind.in_(self.pkinds), t.c.id > last,
                               t.c.id < partition.high)
                        .order_by(t.c.id).limit(READ_PAGE))
                with engine.connect() as conn:
                    rows = conn.execute(stmt).all()
                if not rows:
                    return
                last = rows[-1].id
                yield _page_batch(pa, arrow_schema, rows, now)
                if len(rows) < READ_PAGE:
                    return
        finally:
            engine.dispose()


def _page_batch(pa: Any, schema: Any, rows: Sequence[Any], now: int) -> Any:
    queue, serializer, due, in_flight, locked = [], [], [], [], []
    for r in rows:
        q, _, s = r.pkind.rpartition("|")
        queue.append(q)
        serializer.append(s)
        is_locked = r.lock_uuid is not None
        locked.append(is_locked)
        due.append(r.scheduled_at <= now)
        in_flight.append(r.scheduled_at > now and is_locked)
    columns = [
        [r.id for r in rows], queue, serializer, [r.pkey for r in rows],
        [bytes(r.payload) for r in rows],
        [r.scheduled_at_initially * 1000 for r in rows],
        [r.scheduled_at * 1000 for r in rows],
        [r.created_at * 1000 for r in rows],
        [r.deliveries for r in rows], locked, due, in_flight,
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _arrow_read_schema(pa: Any) -> Any:
    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([
        pa.field("id", pa.int64(), False), pa.field("queue", pa.string(), False),
        pa.field("serializer", pa.string(), False), pa.field("key", pa.string(), False),
        pa.field("payload", pa.binary(), False), pa.field("scheduled_at", ts, False),
        pa.field("due_at", ts, False), pa.field("created_at", ts, False),
        pa.field("deliveries", pa.int32(), False), pa.field("locked", pa.bool_(), False),
        pa.field("due", pa.bool_(), False), pa.field("in_flight", pa.bool_(), False),
    ])


def _as_of(value: Any) -> int:
    if value is None or str(value).strip() == "":
        return to_ms(dt.datetime.now(dt.UTC))
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"option 'as_of' is neither epoch ms nor ISO 8601: {text!r}"
                                   ) from exc
    return to_ms(when, "as_of")


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


__all__ = ["FORMAT", "READ_SCHEMA", "SqlDelayDataSource"]
