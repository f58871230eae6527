"""DelayedQueue: the public face of one queue (one name and payload type) in the shared table."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from .checks import check_key, check_positive_int, check_text
from .clock import Clock, SystemClock, duration_ms, from_ms, to_ms
from .cron import CronService
from .dialects import ClaimedRow, OfferRow, QueueDao, dao_class_for
from .errors import InvalidArgumentError
from .executor import Executor
from .messages import Envelope, Message, OfferOutcome, QueuedMessage, QueueStats
from .schema import DEFAULT_TABLE, KIND_LENGTH, queue_table
from .serializers import JsonSerializer, Serializer, encode_payload

MAX_QUEUE_NAME = 60
_TYPE_NAME_MAX = KIND_LENGTH - MAX_QUEUE_NAME - 1


class DelayedQueue:
    """A durable delayed queue named ``name`` in ``table_name``, over any supported engine."""

    def __init__(self, engine: sa.Engine, name: str, *, serializer: Serializer | None = None,
                 acquire_timeout: timedelta = timedelta(minutes=5),
                 table_name: str = DEFAULT_TABLE, clock: Clock | None = None) -> None:
        check_text(name, "queue name", MAX_QUEUE_NAME)
        self.serializer = serializer if serializer is not None else JsonSerializer()
        check_text(getattr(self.serializer, "type_name", None), "serializer.type_name",
                   _TYPE_NAME_MAX)
        type_name = self.serializer.type_name
        if "|" in type_name:  # the separator of queue name and type name in pkind
            raise InvalidArgumentError(
                f"serializer.type_name must not contain '|', got {type_name!r}")
        self._acquire_ms = duration_ms(acquire_timeout, "acquire_timeout")
        if self._acquire_ms < 1:
            raise InvalidArgumentError("acquire_timeout must be positive")
        self.engine = engine
        self.name = name
        self.pkind = f"{name}|{type_name}"
        self.acquire_timeout = acquire_timeout
        self.clock = clock if clock is not None else SystemClock()
        self.dao: QueueDao = dao_class_for(engine.dialect)(queue_table(sa.MetaData(), table_name))
        self.executor = Executor(engine, self.dao)

    def __repr__(self) -> str:
        return f"DelayedQueue({self.name!r}, {self.engine.url.render_as_string()!r})"

    def now_ms(self) -> int:
        return to_ms(self.clock.now(), "clock.now()")

    # ---- producing -----------------------------------------------------------------------

    def offer(self, key: str, payload: Any, at=None, *, update: bool = True,
              connection: sa.Connection | None = None) -> OfferOutcome:
        """Schedule ``payload`` under ``key`` for ``at`` (now when None).

        CREATED for a new key; with ``update=True`` an existing message gets the new payload
        and due time (UPDATED; an in-flight one loses its lock) unless both are unchanged
        (IGNORED); with ``update=False`` an existing key is left alone (IGNORED).
        """
        return self.offer_many([Message(key, payload, at, update)], connection=connection)[0]

    def offer_many(self, messages: Iterable[Message], *,
                   connection: sa.Connection | None = None) -> list[OfferOutcome]:
        """Offer many messages, one round trip (or a few) per chunk; outcomes in input order.

        A key that appears twice is applied in order, as two offers would be.
        """
        now = self.now_ms()
        rows = [self._row(i, m, now) for i, m in enumerate(messages)]
        chunks = [chunk for positions in _rounds_of_distinct_keys(rows)
                  for chunk in _chunks(positions, rows, self.dao.offer_chunk,
                                       self.dao.offer_chunk_bytes)]

        def op(conn: sa.Connection) -> list[OfferOutcome]:
            outcomes: list[OfferOutcome | None] = [None] * len(rows)
            for part in chunks:
                results = self.dao.offer(conn, self.pkind, [rows[i] for i in part], now)
                for i, outcome in zip(part, results, strict=True):
                    outcomes[i] = outcome
            return outcomes

        if not rows:
            return []
        one = len(chunks) == 1 and self.dao.offer_is_one_statement([rows[i] for i in chunks[0]])
        return self.executor.run(op, write=True, connection=connection, one_statement=one)

    def _row(self, index: int, message: Message, now: int) -> OfferRow:
        if not isinstance(message, Message):
            raise InvalidArgumentError(
                f"offer_many takes Message objects; item {index} is {type(message).__name__}")
        self.check_key(message.key)
        at = now if message.at is None else to_ms(message.at, "at")
        payload = encode_payload(self.serializer, message.payload)
        return OfferRow(message.key, payload, at, bool(message.update))

    # ---- consuming -----------------------------------------------------------------------

    def poll(self, *, connection: sa.Connection | None = None) -> Envelope | None:
        """Claim the earliest due message for ``acquire_timeout``, or None when none is due."""
        got = self.poll_many(1, connection=connection)
        return got[0] if got else None

    def poll_many(self, limit: int, *,
                  connection: sa.Connection | None = None) -> list[Envelope]:
        """Claim up to ``limit`` due messages (earliest first) under one lock id."""
        check_positive_int(limit, "limit")
        now = self.now_ms()
        until = now + self._acquire_ms
        lock = str(uuid.uuid4())
        rows = self.executor.run(
            lambda conn: self.dao.claim(conn, self.pkind, now, limit, lock, until),
            write=True, connection=connection, one_statement=self.dao.claim_is_one_statement)
        return [self._envelope(r, lock, until) for r in rows]

    def _envelope(self, row: ClaimedRow, lock: str, until: int) -> Envelope:
        return Envelope(
            key=row.key, payload=self.serializer.decode(row.payload),
            scheduled_at=from_ms(row.scheduled_at_initially), created_at=from_ms(row.created_at),
            attempt=row.deliveries, locked_until=from_ms(until), row_id=row.id, lock=lock,
            queue=self)

    def ack(self, envelope: Envelope, *, connection: sa.Connection | None = None) -> bool:
        """Delete a claimed message; False when its lock is stale (nothing deleted)."""
        self._check_own(envelope)
        return self.executor.run(
            lambda conn: self.dao.ack(conn, envelope.row_id, envelope.lock),
            write=True, connection=connection, one_statement=True)

    def ack_many(self, envelopes: Sequence[Envelope], *,
                 connection: sa.Connection | None = None) -> int:
        """Delete claimed messages, one statement per claim batch; returns how many were."""
        by_lock: dict[str, list[int]] = defaultdict(list)
        for env in envelopes:
            self._check_own(env)
            by_lock[env.lock].append(env.row_id)
        if not by_lock:
            return 0
        one = len(by_lock) == 1 and len(envelopes) <= self.dao.in_list_max
        return self.executor.run(
            lambda conn: sum(self.dao.ack_many(conn, lock, ids) for lock, ids in by_lock.items()),
            write=True, connection=connection, one_statement=one)

    def release(self, envelope: Envelope, *, delay: timedelta | None = None,
                connection: sa.Connection | None = None) -> bool:
        """Give a claimed message back: due now, or after ``delay``. False if the lock is stale."""
        self._check_own(envelope)
        delay_ms = 0 if delay is None else duration_ms(delay, "delay")
        return self._move(envelope, self.now_ms() + delay_ms, keep_lock=False,
                          connection=connection)

    def extend(self, envelope: Envelope, by: timedelta | None = None, *,
               connection: sa.Connection | None = None) -> bool:
        """Keep the lock ``by`` (default: acquire_timeout) from now. False if already lost."""
        self._check_own(envelope)
        until = self.now_ms() + (self._acquire_ms if by is None else duration_ms(by, "by"))
        if self._move(envelope, until, keep_lock=True, connection=connection):
            envelope.locked_until = from_ms(until)
            return True
        return False

    def _move(self, envelope: Envelope, scheduled_at: int, *, keep_lock: bool,
              connection: sa.Connection | None) -> bool:
        stmt = self.dao.move_locked(envelope.row_id, envelope.lock, scheduled_at, keep_lock)
        return self.executor.run(lambda conn: conn.execute(stmt).rowcount > 0,
                                 write=True, connection=connection, one_statement=True)

    def check_key(self, key: Any) -> None:
        """Refuse a key this queue cannot store, before the database is touched."""
        check_key(key)
        self.dao.check_key(key)

    def _check_own(self, envelope: Envelope) -> None:
        if not isinstance(envelope, Envelope):
            raise InvalidArgumentError(f"expected an Envelope, got {type(envelope).__name__}")
        other = envelope.queue
        if other.pkind != self.pkind or other.dao.table.name != self.dao.table.name:
            raise InvalidArgumentError(
                f"envelope of queue {envelope.queue.name!r} given to queue {self.name!r}")

    # ---- inspecting and removing ----------------------------------------------------------

    def get(self, key: str, *, connection: sa.Connection | None = None) -> QueuedMessage | None:
        """Read a message without locking or changing it."""
        self.check_key(key)
        now = self.now_ms()
        row = self.executor.run(
            lambda conn: conn.execute(self.dao.select_by_key(self.pkind, key)).first(),
            write=False, connection=connection, one_statement=True)
        if row is None:
            return None
        in_flight = row.lock_uuid is not None and row.scheduled_at > now
        return QueuedMessage(
            key=row.pkey, payload=self.serializer.decode(row.payload),
            scheduled_at=from_ms(row.scheduled_at_initially), created_at=from_ms(row.created_at),
            deliveries=row.deliveries, in_flight=in_flight)

    def contains(self, key: str, *, connection: sa.Connection | None = None) -> bool:
        self.check_key(key)
        return self.executor.run(
            lambda conn: conn.execute(self.dao.exists_key(self.pkind, key)).first() is not None,
            write=False, connection=connection, one_statement=True)

    def drop(self, key: str, *, connection: sa.Connection | None = None) -> bool:
        """Delete a message whatever its state; True if there was one."""
        self.check_key(key)
        return self.executor.run(
            lambda conn: conn.execute(self.dao.delete_key(self.pkind, key)).rowcount > 0,
            write=True, connection=connection, one_statement=True)

    def clear(self, *, connection: sa.Connection | None = None) -> int:
        """Delete every message of this queue; returns how many."""
        return self.executor.run(
            lambda conn: conn.execute(self.dao.delete_kind(self.pkind)).rowcount,
            write=True, connection=connection, one_statement=True)

    def next_due(self, *, connection: sa.Connection | None = None) -> datetime | None:
        """When the earliest message (or expiring lock) falls due; None for an empty queue.

        A worker with nothing to do sleeps until then instead of polling at a fixed rate.
        """
        ms = self.executor.run(
            lambda conn: conn.execute(self.dao.select_next_due(self.pkind)).scalar(),
            write=False, connection=connection, one_statement=True)
        return None if ms is None else from_ms(int(ms))

    def cron(self, *, refresh: timedelta = timedelta(minutes=1)) -> CronService:
        """Recurring messages of this queue: ``q.cron().install_cron("nightly", "0 2 * * *")``."""
        return CronService(self, refresh=refresh)

    def stats(self, *, connection: sa.Connection | None = None) -> QueueStats:
        now = self.now_ms()
        row = self.executor.run(
            lambda conn: conn.execute(self.dao.select_stats(self.pkind, now)).one(),
            write=False, connection=connection, one_statement=True)
        oldest = None if row.oldest_due is None else timedelta(milliseconds=now - row.oldest_due)
        return QueueStats(due=int(row.due), scheduled=int(row.scheduled),
                          in_flight=int(row.in_flight), oldest_due_age=oldest)


def _rounds_of_distinct_keys(rows: Sequence[OfferRow]) -> list[list[int]]:
    """Split positions into rounds in which each key occurs once, preserving order per key."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        n = seen.get(row.key, 0)
        seen[row.key] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(i)
    return rounds


def _chunks(positions: list[int], rows: Sequence[OfferRow], max_rows: int,
            max_bytes: int) -> list[list[int]]:
    """Cut positions into chunks of at most ``max_rows`` rows and about ``max_bytes`` of
    payload (a single larger payload gets a chunk of its own), so statements stay small."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    size = 0
    for i in positions:
        n = len(rows[i].payload)
        if chunk and (len(chunk) == max_rows or size + n > max_bytes):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(i)
        size += n
    if chunk:
        chunks.append(chunk)
    return chunks
