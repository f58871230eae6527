"""Dead letters: where a worker puts a message it has given up on, to be listed, requeued or
dropped by a person (API in ``dead_letters_async`` / ``dead_letters``, CLI in ``cli.worker``).

Each queue table has one dead-letter table beside it (``<table>_dead``, see
``schema.dead_letter_table``). A dead letter keeps the serialized payload and the partition
(``pkind``: queue name + payload type) it came from, so it can go back without its serializer.
This module holds what both front ends share: the checks and the operations, as functions of a
Connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

import sqlalchemy as sa

from .checks import check_key, check_positive_int, readable_ms, time_ms
from .clock import Clock, DatabaseClock, from_ms, to_ms
from .dialects import OfferRow, dao_class_for
from .dialects.common import chunked
from .errors import InvalidArgumentError
from .history import EventKind, Recorder, check_actor, current_actor, detail_text
from .messages import Envelope
from .schema import DEFAULT_TABLE, dead_letter_table, history_table, queue_table

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .queue_base import QueueBase

T = TypeVar("T")
Op = Callable[[sa.Connection], T]  # an operation returning a T, run by either front end
_Select = TypeVar("_Select", bound="sa.Select[*tuple[Any, ...]]")


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
    priority: int = 0
    group: str | None = None
    enqueued_by: str | None = None


class DeadLettersBase:
    """The dead letters of every queue in queue table ``table_name``; with ``history``, their
    burials, requeues and drops are recorded in ``<table>_history``."""

    def __init__(self, engine: sa.Engine | AsyncEngine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None, history: bool = False) -> None:
        metadata = sa.MetaData()
        self.engine = engine
        self.clock = clock if clock is not None else DatabaseClock.of(engine)
        self.dao = dao_class_for(engine.dialect)(queue_table(metadata, table_name))
        self.table = dead_letter_table(metadata, table_name)
        self.recorder = (Recorder(history_table(metadata, table_name), self.dao) if history
                         else None)

    @classmethod
    def of(cls, queue: QueueBase) -> Self:
        """The dead letters beside ``queue``, on its engine and clock, recording history when
        the queue does."""
        return cls(queue.engine, table_name=queue.dao.table.name, clock=queue.clock,
                   history=queue.recorder is not None)

    def bury_op(self, envelope: Envelope[QueueBase], error: str) -> Op[bool]:
        """Move a claimed message here, in one transaction: delete it (by id and lock) and
        insert its dead letter. False, and nothing written, when the lock was lost."""
        queue = envelope.queue
        t = self.table
        q = queue.dao.table
        text = detail_text(error)  # every database's column holds ERROR_LENGTH characters

        def op(conn: sa.Connection) -> bool:
            row = conn.execute(queue.dao.lock_rows(
                sa.select(q.c.pkind, q.c.pkey, q.c.payload, q.c.scheduled_at_initially,
                          q.c.created_at, q.c.deliveries, q.c.priority, q.c.group_key,
                          q.c.enqueued_by)
                .where(q.c.id == envelope.row_id, queue.dao.held_by(envelope.lock)),
                q, skip=False)).first()
            if row is None or not queue.dao.ack(conn, envelope.row_id, envelope.lock):
                return False
            now = queue.now_ms()
            conn.execute(sa.insert(t).values(
                pkind=row.pkind, pkey=row.pkey, payload=row.payload,
                scheduled_at_initially=readable_ms(row.scheduled_at_initially),
                created_at=readable_ms(row.created_at),
                attempts=row.deliveries, last_error=text, failed_at=now,
                priority=row.priority, group_key=row.group_key, enqueued_by=row.enqueued_by))
            if row.group_key is not None:  # the group's next message may go
                queue.dao.free_groups(conn, row.pkind, envelope.lock, [row.group_key])
            # a task's handle waiting for its end (where the database notifies)
            queue.dao.notify_settled(conn, row.pkind, row.pkey)
            if self.recorder is not None:
                self.recorder.write(conn, [self.recorder.event(
                    row.pkind, EventKind.DEAD_LETTERED, row.pkey, now,
                    actor=envelope.claimed_by, attempt=row.deliveries, detail=text)])
            return True

        return op

    def list_op(self, queue: str | None, limit: int, offset: int = 0,
                key: str | None = None) -> Op[list[DeadLetter]]:
        """The oldest ``limit`` dead letters after the first ``offset``, of one queue name or
        of all, and only those of ``key`` when given."""
        check_positive_int(limit, "limit")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"offset must be a non-negative integer, got {offset!r}")
        t = self.table
        stmt = sa.select(t).order_by(t.c.failed_at, t.c.id).limit(limit).offset(offset)
        if key is not None:
            check_key(key)
            stmt = stmt.where(t.c.pkey == key)
        stmt = self._where_queue(stmt, queue)
        return lambda conn: [_dead_letter(r) for r in conn.execute(stmt)]

    def count_op(self, queue: str | None) -> Op[int]:
        stmt = self._where_queue(sa.select(sa.func.count()).select_from(self.table), queue)
        return lambda conn: int(conn.execute(stmt).scalar_one())

    def ids_op(self, queue: str | None) -> Op[list[int]]:
        """Every dead letter id, of one queue name or of all (for "requeue/drop them all")."""
        t = self.table
        stmt = self._where_queue(sa.select(t.c.id).order_by(t.c.id), queue)
        return lambda conn: list(conn.execute(stmt).scalars())

    def requeue_op(self, ids: Sequence[int], at: datetime | None,
                   by: str | None = None) -> Op[int]:
        """Put dead letters back in their queues, due at ``at`` (now when None), with a fresh
        attempt count; in one transaction. A key that was offered again meanwhile gets the
        dead letter's payload and due time. Returns how many went back."""
        ids = _check_ids(ids)
        check_actor(by)
        actor = by or current_actor()
        now = to_ms(self.clock.now(), "clock.now()")
        due = now if at is None else time_ms(at, "at")
        t = self.table

        def op(conn: sa.Connection) -> int:
            moved = 0
            for chunk in chunked(sorted(ids), self.dao.in_list_max):
                rows = conn.execute(self.dao.by_id(self.dao.lock_rows(
                    sa.select(t).where(t.c.id.in_(chunk)).order_by(t.c.id), t,
                    skip=False), t, len(chunk))).fetchall()
                for row in rows:
                    offer = OfferRow(row.pkey, bytes(row.payload), due, True, row.priority,
                                     row.group_key)
                    if row.group_key is not None:  # its queue takes group-aware claims
                        self.dao.write_settings(conn, row.pkind, has_groups=1)
                    # wakes workers if due; the message keeps who first offered it
                    self.dao.offer(conn, row.pkind, [offer], now, row.enqueued_by)
                conn.execute(self.dao.delete_by_id(t, len(rows), t.c.id.in_([r.id for r in rows])))
                self._record(conn, EventKind.REQUEUED, rows, actor,
                             f"due {from_ms(due).isoformat()}")
                moved += len(rows)
            return moved

        return op

    def drop_op(self, ids: Sequence[int], by: str | None = None) -> Op[int]:
        """Delete dead letters for good; returns how many were deleted."""
        ids = _check_ids(ids)
        check_actor(by)
        actor = by or current_actor()
        t = self.table

        def op(conn: sa.Connection) -> int:
            dropped = 0
            for chunk in chunked(ids, self.dao.in_list_max):
                if self.recorder is not None:  # the keys of the letters, for their events
                    self._record(conn, EventKind.DROPPED, conn.execute(self.dao.by_id(
                        self.dao.lock_rows(sa.select(t.c.pkind, t.c.pkey)
                                           .where(t.c.id.in_(chunk)), t, skip=False),
                        t, len(chunk))).all(), actor, "dead letter dropped")
                dropped += conn.execute(
                    self.dao.delete_by_id(t, len(chunk), t.c.id.in_(chunk))).rowcount
            return dropped

        return op

    def _record(self, conn: sa.Connection, kind: EventKind,
                rows: Sequence[sa.Row[*tuple[Any, ...]]], actor: str,
                detail: str) -> None:
        """Events of ``kind`` for dead letters ``rows`` (with pkind and pkey), with history."""
        if self.recorder is None:
            return
        now = to_ms(self.clock.now(), "clock.now()")
        self.recorder.write(conn, [self.recorder.event(r.pkind, kind, r.pkey, now, actor=actor,
                                                       detail=detail) for r in rows])

    def _where_queue(self, stmt: _Select, queue: str | None) -> _Select:
        if queue is None:
            return stmt
        if not isinstance(queue, str) or not queue:
            raise InvalidArgumentError(f"queue must be a non-empty name, got {queue!r}")
        # pkind is "<queue>|<type name>"
        return stmt.where(self.dao.prefix_match(self.table.c.pkind, f"{queue}|"))


def _dead_letter(row: sa.Row[*tuple[Any, ...]]) -> DeadLetter:
    queue, _, type_name = row.pkind.rpartition("|")
    return DeadLetter(
        id=int(row.id), queue=queue, type_name=type_name, key=row.pkey,
        payload=bytes(row.payload), attempts=int(row.attempts), last_error=row.last_error or "",
        failed_at=from_ms(row.failed_at), scheduled_at=from_ms(row.scheduled_at_initially),
        created_at=from_ms(row.created_at), priority=row.priority, group=row.group_key,
        enqueued_by=row.enqueued_by)


def _check_ids(ids: Sequence[int]) -> list[int]:
    if isinstance(ids, int | str | bytes):
        raise InvalidArgumentError("ids must be a sequence of dead-letter ids")
    out = list(ids)
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool):
            raise InvalidArgumentError(f"dead-letter ids are integers, got {i!r}")
    return out
