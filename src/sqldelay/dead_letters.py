"""Dead letters: where a worker puts a message it has given up on, to be listed, requeued or
dropped by a person (API here, CLI in ``worker_cli``).

Each queue table has one dead-letter table beside it (``<table>_dead``, see
``schema.dead_letter_table``). A dead letter keeps the serialized payload and the partition
(``pkind``: queue name + payload type) it came from, so it can go back without its serializer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .checks import check_positive_int, storable_text
from .clock import Clock, SystemClock, from_ms, to_ms
from .dialects import OfferRow, dao_class_for
from .dialects.base import chunked
from .errors import InvalidArgumentError
from .executor import Executor
from .messages import Envelope
from .schema import DEFAULT_TABLE, ERROR_LENGTH, dead_letter_table, queue_table


@dataclass(frozen=True, slots=True)
class DeadLetter:
    id: int
    queue: str
    type_name: str
    key: str
    payload: bytes
    attempts: int
    last_error: str
    failed_at: datetime
    scheduled_at: datetime
    created_at: datetime


class DeadLetters:
    """The dead letters of every queue in queue table ``table_name``."""

    def __init__(self, engine: sa.Engine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None) -> None:
        metadata = sa.MetaData()
        self.engine = engine
        self.clock = clock if clock is not None else SystemClock()
        self.dao = dao_class_for(engine.dialect)(queue_table(metadata, table_name))
        self.table = dead_letter_table(metadata, table_name)
        self.executor = Executor(engine, self.dao)

    @classmethod
    def of(cls, queue) -> DeadLetters:
        """The dead letters beside ``queue`` (a DelayedQueue), on its engine and clock."""
        return cls(queue.engine, table_name=queue.dao.table.name, clock=queue.clock)

    def bury(self, envelope: Envelope, error: str, *,
             connection: sa.Connection | None = None) -> bool:
        """Move a claimed message here, in one transaction: delete it (by id and lock) and
        insert its dead letter. False, and nothing written, when the lock was lost."""
        queue = envelope.queue
        t = self.table
        q = queue.dao.table
        text = storable_text(error)
        if len(text) > ERROR_LENGTH:  # every database's column holds ERROR_LENGTH characters
            text = text[:ERROR_LENGTH - 1] + "…"

        def op(conn: sa.Connection) -> bool:
            row = conn.execute(
                sa.select(q.c.pkind, q.c.pkey, q.c.payload, q.c.scheduled_at_initially,
                          q.c.created_at, q.c.deliveries)
                .where(q.c.id == envelope.row_id, q.c.lock_uuid == envelope.lock)
                .with_for_update()).first()
            if row is None or not queue.dao.ack(conn, envelope.row_id, envelope.lock):
                return False
            conn.execute(sa.insert(t).values(
                pkind=row.pkind, pkey=row.pkey, payload=row.payload,
                scheduled_at_initially=row.scheduled_at_initially, created_at=row.created_at,
                attempts=row.deliveries, last_error=text, failed_at=queue.now_ms()))
            return True

        return queue.executor.run(op, write=True, connection=connection)

    def list(self, queue: str | None = None, *, limit: int = 100,
             connection: sa.Connection | None = None) -> list[DeadLetter]:
        """The oldest ``limit`` dead letters, of one queue name or of all."""
        check_positive_int(limit, "limit")
        t = self.table
        stmt = sa.select(t).order_by(t.c.failed_at, t.c.id).limit(limit)
        if queue is not None:
            stmt = stmt.where(self._of_queue(queue))
        rows = self.executor.run(lambda conn: conn.execute(stmt).fetchall(), write=False,
                                 connection=connection)
        return [_dead_letter(r) for r in rows]

    def count(self, queue: str | None = None, *,
              connection: sa.Connection | None = None) -> int:
        t = self.table
        stmt = sa.select(sa.func.count()).select_from(t)
        if queue is not None:
            stmt = stmt.where(self._of_queue(queue))
        return int(self.executor.run(lambda conn: conn.execute(stmt).scalar(), write=False,
                                     connection=connection))

    def requeue(self, ids: Sequence[int], *, at: datetime | None = None,
                connection: sa.Connection | None = None) -> int:
        """Put dead letters back in their queues, due at ``at`` (now when None), with a fresh
        attempt count; in one transaction. A key that was offered again meanwhile gets the
        dead letter's payload and due time. Returns how many went back."""
        ids = _check_ids(ids)
        now = to_ms(self.clock.now(), "clock.now()")
        due = now if at is None else to_ms(at, "at")
        t = self.table

        def op(conn: sa.Connection) -> int:
            moved = 0
            for chunk in chunked(ids, self.dao.in_list_max):
                rows = conn.execute(sa.select(t).where(t.c.id.in_(chunk)).order_by(t.c.id)
                                    .with_for_update()).fetchall()
                for row in rows:
                    offer = OfferRow(row.pkey, bytes(row.payload), due, True)
                    self.dao.offer(conn, row.pkind, [offer], now)  # wakes workers if due
                conn.execute(sa.delete(t).where(t.c.id.in_([r.id for r in rows])))
                moved += len(rows)
            return moved

        return self.executor.run(op, write=True, connection=connection)

    def drop(self, ids: Sequence[int], *, connection: sa.Connection | None = None) -> int:
        """Delete dead letters for good; returns how many were deleted."""
        ids = _check_ids(ids)
        t = self.table
        return self.executor.run(
            lambda conn: sum(conn.execute(sa.delete(t).where(t.c.id.in_(chunk))).rowcount
                             for chunk in chunked(ids, self.dao.in_list_max)),
            write=True, connection=connection)

    def _of_queue(self, queue: str) -> sa.ColumnElement[bool]:
        if not isinstance(queue, str) or not queue:
            raise InvalidArgumentError(f"queue must be a non-empty name, got {queue!r}")
        # pkind is "<queue>|<type name>"
        return self.dao.prefix_match(self.table.c.pkind, f"{queue}|")

    def ids(self, queue: str | None = None, *,
            connection: sa.Connection | None = None) -> list[int]:
        """Every dead letter id, of one queue name or of all (for "requeue/drop them all")."""
        t = self.table
        stmt = sa.select(t.c.id).order_by(t.c.id)
        if queue is not None:
            stmt = stmt.where(self._of_queue(queue))
        return list(self.executor.run(lambda conn: conn.execute(stmt).scalars().all(),
                                      write=False, connection=connection))


def _dead_letter(row) -> DeadLetter:
    queue, _, type_name = row.pkind.rpartition("|")
    return DeadLetter(
        id=int(row.id), queue=queue, type_name=type_name, key=row.pkey,
        payload=bytes(row.payload), attempts=int(row.attempts), last_error=row.last_error or "",
        failed_at=from_ms(row.failed_at), scheduled_at=from_ms(row.scheduled_at_initially),
        created_at=from_ms(row.created_at))


def _check_ids(ids: Sequence[int]) -> list[int]:
    if isinstance(ids, int | str | bytes):
        raise InvalidArgumentError("ids must be a sequence of dead-letter ids")
    out = list(ids)
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool):
            raise InvalidArgumentError(f"dead-letter ids are integers, got {i!r}")
    return out
