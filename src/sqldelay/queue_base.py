"""What a queue is, whichever front end runs it: its checks, and its operations as plain
functions of a SQLAlchemy Connection.

``AsyncDelayedQueue`` (``queue_async.py``) and ``DelayedQueue`` (generated from it) inherit
this and differ only in how they run an operation: awaited, or called. Everything that decides
what is sent (validation, the offer's rounds and chunks, the statements) lives here and in the
dialect modules, once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from .checks import check_key, check_positive_int, check_text
from .clock import Clock, SystemClock, duration_ms, from_ms, to_ms
from .dialects import ClaimedRow, OfferRow, QueueDao, dao_class_for
from .dialects.base import ROW_OVERHEAD, PayloadBudget
from .errors import InvalidArgumentError
from .messages import Envelope, Message, OfferOutcome, QueuedMessage, QueueStats
from .schema import DEFAULT_TABLE, KIND_LENGTH, queue_table
from .serializers import JsonSerializer, Serializer, encode_payload

MAX_QUEUE_NAME = 60
_TYPE_NAME_MAX = KIND_LENGTH - MAX_QUEUE_NAME - 1

Op = Callable[[sa.Connection], Any]


@dataclass(frozen=True, slots=True)
class OfferPlan:
    """An offer ready to run: ``op`` returns the outcomes in input order; ``one_statement``
    says it sends a single statement."""

    op: Op
    one_statement: bool


class QueueBase:
    """A durable delayed queue named ``name`` in ``table_name``; see ``AsyncDelayedQueue`` and
    ``DelayedQueue`` for the front ends."""

    def __init__(self, engine: Any, name: str, *, serializer: Serializer | None = None,
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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.engine.url.render_as_string()!r})"

    def now_ms(self) -> int:
        return to_ms(self.clock.now(), "clock.now()")

    def check_key(self, key: Any) -> None:
        """Refuse a key this queue cannot store, before the database is touched."""
        check_key(key)
        self.dao.check_key(key)

    # ---- offers ------------------------------------------------------------------------------

    def plan_offer(self, messages: Iterable[Message]) -> OfferPlan | None:
        """Check and encode ``messages`` (None when there are none) and plan their offer.

        A key that appears twice is applied in order, as two offers would be. Each chunk's
        keys, and the chunks, go in the database's lock order, so producers of overlapping
        batches cannot deadlock on each other.
        """
        now = self.now_ms()
        rows = [self._row(i, m, now) for i, m in enumerate(messages)]
        if not rows:
            return None
        dao = self.dao
        rounds = [sorted(positions, key=lambda i: dao.lock_order(rows[i].key))
                  for positions in _rounds_of_distinct_keys(rows)]
        static = PayloadBudget(dao.max_payload_bytes, dao.offer_chunk_bytes)
        planned = _chunks(rounds, rows, dao.offer_chunk, static.statement)

        def op(conn: sa.Connection) -> list[OfferOutcome]:
            budget = dao.payload_budget(conn)
            _check_payload_sizes(rows, budget, dao.name)
            chunks = planned if budget.statement == static.statement else _chunks(
                rounds, rows, dao.offer_chunk, budget.statement)
            outcomes: list[OfferOutcome | None] = [None] * len(rows)
            for part in chunks:
                results = dao.offer(conn, self.pkind, [rows[i] for i in part], now)
                for i, outcome in zip(part, results, strict=True):
                    outcomes[i] = outcome
            return outcomes

        one = len(planned) == 1 and dao.offer_is_one_statement([rows[i] for i in planned[0]])
        return OfferPlan(op, one)

    def _row(self, index: int, message: Message, now: int) -> OfferRow:
        if not isinstance(message, Message):
            raise InvalidArgumentError(
                f"offer_many takes Message objects; item {index} is {type(message).__name__}")
        self.check_key(message.key)
        at = now if message.at is None else to_ms(message.at, "at")
        payload = encode_payload(self.serializer, message.payload)
        return OfferRow(message.key, payload, at, bool(message.update))

    # ---- claims ------------------------------------------------------------------------------

    def claim_op(self, limit: int) -> Callable[[sa.Connection], list[Envelope]]:
        """The claim of up to ``limit`` due messages (earliest first) under one lock id."""
        check_positive_int(limit, "limit")
        now = self.now_ms()
        until = now + self._acquire_ms
        lock = str(uuid.uuid4())

        def op(conn: sa.Connection) -> list[Envelope]:
            rows = self.dao.claim(conn, self.pkind, now, limit, lock, until)
            return [self._envelope(r, lock, until) for r in rows]

        return op

    def _envelope(self, row: ClaimedRow, lock: str, until: int) -> Envelope:
        return Envelope(
            key=row.key, payload=self.serializer.decode(row.payload),
            scheduled_at=from_ms(row.scheduled_at_initially), created_at=from_ms(row.created_at),
            attempt=row.deliveries, locked_until=from_ms(until), row_id=row.id, lock=lock,
            queue=self)

    def check_own(self, envelope: Envelope) -> None:
        """Refuse an envelope that another queue claimed."""
        if not isinstance(envelope, Envelope):
            raise InvalidArgumentError(f"expected an Envelope, got {type(envelope).__name__}")
        other = envelope.queue
        if other.pkind != self.pkind or other.dao.table.name != self.dao.table.name:
            raise InvalidArgumentError(
                f"envelope of queue {envelope.queue.name!r} given to queue {self.name!r}")

    def ack_op(self, envelope: Envelope) -> Op:
        self.check_own(envelope)
        return lambda conn: self.dao.ack(conn, envelope.row_id, envelope.lock)

    def ack_many_op(self, envelopes: Sequence[Envelope]) -> tuple[Op, bool] | None:
        """The deletion of claimed messages, one statement per claim batch (None: none given),
        and whether that is one statement in all."""
        by_lock: dict[str, list[int]] = {}
        for env in envelopes:
            self.check_own(env)
            by_lock.setdefault(env.lock, []).append(env.row_id)
        if not by_lock:
            return None
        one = len(by_lock) == 1 and len(envelopes) <= self.dao.in_list_max

        def op(conn: sa.Connection) -> int:
            return sum(self.dao.ack_many(conn, lock, ids) for lock, ids in by_lock.items())

        return op, one

    def release_op(self, envelope: Envelope, delay: timedelta | None) -> Op:
        """Give a claimed message back, due now or after ``delay``: True if the lock held."""
        self.check_own(envelope)
        delay_ms = 0 if delay is None else duration_ms(delay, "delay")
        return self._move_op(envelope, self.now_ms() + delay_ms, keep_lock=False)

    def extend_op(self, envelope: Envelope, by: timedelta | None) -> Op:
        """Keep the lock ``by`` (default: acquire_timeout) from now: True if it still held,
        and then ``envelope.locked_until`` says the new expiry."""
        self.check_own(envelope)
        until = self.now_ms() + (self._acquire_ms if by is None else duration_ms(by, "by"))
        move = self._move_op(envelope, until, keep_lock=True)

        def op(conn: sa.Connection) -> bool:
            if move(conn):
                envelope.locked_until = from_ms(until)
                return True
            return False

        return op

    def _move_op(self, envelope: Envelope, scheduled_at: int, *, keep_lock: bool) -> Op:
        stmt = self.dao.move_locked(envelope.row_id, envelope.lock, scheduled_at, keep_lock)
        return lambda conn: conn.execute(stmt).rowcount > 0

    # ---- reads and deletes -------------------------------------------------------------------

    def get_op(self, key: str) -> Op:
        """Read a message without locking or changing it: a QueuedMessage or None."""
        self.check_key(key)
        now = self.now_ms()

        def op(conn: sa.Connection) -> QueuedMessage | None:
            row = conn.execute(self.dao.select_by_key(self.pkind, key)).first()
            if row is None:
                return None
            return QueuedMessage(
                key=row.pkey, payload=self.serializer.decode(row.payload),
                scheduled_at=from_ms(row.scheduled_at_initially),
                created_at=from_ms(row.created_at), deliveries=row.deliveries,
                in_flight=row.lock_uuid is not None and row.scheduled_at > now)

        return op

    def contains_op(self, key: str) -> Op:
        self.check_key(key)
        stmt = self.dao.exists_key(self.pkind, key)
        return lambda conn: conn.execute(stmt).first() is not None

    def drop_op(self, key: str) -> Op:
        self.check_key(key)
        stmt = self.dao.delete_key(self.pkind, key)
        return lambda conn: conn.execute(stmt).rowcount > 0

    def clear_op(self) -> Op:
        stmt = self.dao.delete_kind(self.pkind)
        return lambda conn: conn.execute(stmt).rowcount

    def next_due_op(self) -> Op:
        """When the earliest message (or expiring lock) falls due; None for an empty queue."""
        stmt = self.dao.select_next_due(self.pkind)

        def op(conn: sa.Connection):
            ms = conn.execute(stmt).scalar()
            return None if ms is None else from_ms(int(ms))

        return op

    def stats_op(self) -> Op:
        now = self.now_ms()
        stmt = self.dao.select_stats(self.pkind, now)

        def op(conn: sa.Connection) -> QueueStats:
            row = conn.execute(stmt).one()
            oldest = (None if row.oldest_due is None
                      else timedelta(milliseconds=now - row.oldest_due))
            return QueueStats(due=int(row.due), scheduled=int(row.scheduled),
                              in_flight=int(row.in_flight), oldest_due_age=oldest)

        return op


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


def _chunks(rounds: list[list[int]], rows: Sequence[OfferRow], max_rows: int,
            max_bytes: int) -> list[list[int]]:
    """Cut each round's positions into chunks of at most ``max_rows`` rows and ``max_bytes``
    of payload and row overhead (a single larger row gets a chunk of its own), so statements
    stay within what the database accepts."""
    chunks: list[list[int]] = []
    for positions in rounds:
        chunk: list[int] = []
        size = 0
        for i in positions:
            n = len(rows[i].payload) + ROW_OVERHEAD
            if chunk and (len(chunk) == max_rows or size + n > max_bytes):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(i)
            size += n
        if chunk:
            chunks.append(chunk)
    return chunks


def _check_payload_sizes(rows: Sequence[OfferRow], budget: PayloadBudget, database: str) -> None:
    """Refuse, before anything is written, a message the database would not take."""
    if budget.message is None:
        return
    for row in rows:
        if len(row.payload) > budget.message:
            raise InvalidArgumentError(
                f"the payload of {row.key!r} is {len(row.payload):,} bytes encoded; {database} "
                f"takes at most {budget.message:,} ({budget.why})")
