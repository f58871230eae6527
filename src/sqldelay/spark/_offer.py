"""The task side of every write: offer one partition's rows through ``DelayedQueue.offer_many``.

Each task builds its own engine from the URL (an engine holds sockets and locks and is never
pickled) and commits chunk by chunk. A retried task offers its rows again; insert-if-absent
and upsert are idempotent per key, so the queue ends with each key once whatever Spark
retried. The counts a task returns describe what *its* attempt did: rows a failed earlier
attempt had already committed come back as IGNORED (or UPDATED/IGNORED with ``update``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..errors import InvalidArgumentError
from ..messages import OfferOutcome
from ..queue import DelayedQueue
from ..sharded import ShardedQueue
from ._mapping import ColumnMapping, RowConverter

log = logging.getLogger("sqldelay.spark")

DEFAULT_CHUNK_SIZE = 2000


@dataclass(frozen=True)
class OfferCounts:
    """How many offered rows created a message, updated one, or were ignored."""

    created: int = 0
    updated: int = 0
    ignored: int = 0

    @property
    def total(self) -> int:
        return self.created + self.updated + self.ignored

    def __add__(self, other: OfferCounts) -> OfferCounts:
        return OfferCounts(self.created + other.created, self.updated + other.updated,
                           self.ignored + other.ignored)

    @classmethod
    def of(cls, outcomes: Iterable[OfferOutcome]) -> OfferCounts:
        created = updated = ignored = 0
        for o in outcomes:
            if o is OfferOutcome.CREATED:
                created += 1
            elif o is OfferOutcome.UPDATED:
                updated += 1
            else:
                ignored += 1
        return cls(created, updated, ignored)

    @classmethod
    def sum(cls, parts: Iterable[OfferCounts | None]) -> OfferCounts:
        total = cls()
        for p in parts:
            if p is not None:
                total = total + p
        return total


@dataclass(frozen=True)
class WriteConfig:
    """Everything a task needs to offer rows; plain data, so it pickles to executors.
    ``url``: one database URL, or a tuple of them, the shards of a sharded queue (each row
    goes to the shard of its key, routed as ``ShardedQueue`` routes it)."""

    url: str | tuple[str, ...]
    queue: str
    table_name: str
    mapping: ColumnMapping
    update: bool
    chunk_size: int = DEFAULT_CHUNK_SIZE

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url,) if isinstance(self.url, str) else self.url

    def open_queue(self, engines: Sequence[sa.Engine]) -> DelayedQueue | ShardedQueue:
        """The queue over ``engines`` (one per URL, in order): a ShardedQueue for shards."""
        queues = [DelayedQueue(engine, self.queue, serializer=self.mapping.serializer(),
                               table_name=self.table_name) for engine in engines]
        return queues[0] if isinstance(self.url, str) else ShardedQueue(queues)


def shard_urls(url: str | Sequence[str]) -> str | tuple[str, ...]:
    """``url`` as WriteConfig takes it: a URL, or a non-empty list of shard URLs."""
    if isinstance(url, str):
        return url
    if not isinstance(url, Sequence) or not url or not all(isinstance(u, str) for u in url):
        raise InvalidArgumentError(
            f"url must be a database URL or a non-empty list of shard URLs, got {url!r}")
    return tuple(url)


def make_engine(url: str) -> sa.Engine:
    """One engine per task, built from the URL; the caller disposes of it."""
    return sa.create_engine(url)


def offer_records(config: WriteConfig, record_lists: Iterable[list[dict[str, Any]]]) -> OfferCounts:
    """Offer the records (dicts keyed by column name) in chunks of ``config.chunk_size``.

    Every chunk is checked whole before it is offered, so a bad row stops the task before
    anything of its chunk is written.
    """
    converter = RowConverter(config.mapping, config.update)
    engines = [make_engine(url) for url in config.urls]
    try:
        queue = config.open_queue(engines)
        counts = OfferCounts()
        for chunk in _rechunk(record_lists, config.chunk_size):
            messages = converter.messages(chunk)
            counts = counts + OfferCounts.of(queue.offer_many(messages))
        return counts
    finally:
        for engine in engines:
            engine.dispose()


def _rechunk(record_lists: Iterable[list[dict[str, Any]]],
             size: int) -> Iterator[list[dict[str, Any]]]:
    pending: list[dict[str, Any]] = []
    for records in record_lists:
        pending.extend(records)
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
    if pending:
        yield pending


def check_table(url: str | tuple[str, ...], table_name: str) -> None:
    """Fail on the driver, before any task, when the queue table does not exist (on any
    shard)."""
    if not isinstance(url, str):
        for one in url:
            check_table(one, table_name)
        return
    from ..errors import SchemaMissingError

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            present = sa.inspect(conn).has_table(table_name)
    finally:
        engine.dispose()
    if not present:
        raise SchemaMissingError(
            f"the queue table {table_name!r} does not exist at {sa.make_url(url)!r}; create it "
            "first with sqldelay.create_schema(engine, table_name=...)")
