"""Traceability: who offered a message, who took it, and what happened to it, kept after it is
done.

A queue made with ``history=`` writes one row into ``<table>_history`` for each event of each
message (offered, updated, claimed, acked, failed, ...), in the same transaction as the change
it records, so the history never tells of a change that was rolled back nor misses one that
was committed. This module holds the values (``History``, ``EventKind``, ``HistoryEvent``),
who an actor is by default, and the ``Recorder`` that turns events into rows; the queue, the
dead letters and the cron service call it from their operations.
"""

from __future__ import annotations

import asyncio
import enum
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from .checks import check_text, storable_text
from .clock import duration_ms, from_ms
from .dialects import QueueDao
from .dialects.common import chunked
from .errors import InvalidArgumentError
from .schema import ACTOR_LENGTH, ERROR_LENGTH

T = TypeVar("T")
Op = Callable[[sa.Connection], T]  # an operation returning a T, run by either front end
# an event as a row of the history table: its columns' values
EventRow = dict[str, str | int | None]


class EventKind(enum.Enum):
    OFFERED = "offered"  # created by an offer
    UPDATED = "updated"  # an offer replaced payload, due time, priority or group
    IGNORED = "ignored"  # an offer changed nothing (recorded with History(ignored=True))
    CLAIMED = "claimed"  # a consumer took it; attempt says which delivery
    LOCK_EXPIRED = "lock_expired"  # its holder's lock ran out (seen when it is claimed again)
    ACKED = "acked"  # handled and deleted
    RELEASED = "released"  # given back by its holder, due again at the time in detail
    FAILED = "failed"  # its handler raised; detail has the error, it is due again later
    DEAD_LETTERED = "dead_lettered"  # given up on, moved to the dead letters
    REQUEUED = "requeued"  # a dead letter put back in its queue
    DROPPED = "dropped"  # deleted by key (drop, a cron uninstall) or a dead letter dropped
    CLEARED = "cleared"  # deleted with the rest of its queue (clear)


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a message: when, what, by whom, at which delivery attempt (None where
    none applies), and a detail (a due time, an error)."""

    key: str
    at: datetime
    kind: EventKind
    actor: str | None
    attempt: int | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class History:
    """A queue's history settings: events older than ``retention`` may be pruned (None: kept
    until ``prune_history`` is called); ``ignored`` records offers that changed nothing too."""

    retention: timedelta | None = None
    ignored: bool = False

    def __post_init__(self) -> None:
        if self.retention is not None and duration_ms(self.retention, "retention") < 1:
            raise InvalidArgumentError("history retention must be positive")

    @classmethod
    def of(cls, value: Any) -> History | None:
        """What a queue's ``history=`` means: False/None (none), True (kept), a timedelta
        (the retention), or a History."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, timedelta):
            return cls(retention=value)
        if isinstance(value, cls):
            return value
        raise InvalidArgumentError(
            f"history must be a bool, a timedelta (retention) or a History, got {value!r}")


def process_actor() -> str:
    """Who this process is: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"[:ACTOR_LENGTH]


def current_actor() -> str:
    """Who is calling: host:pid:thread, or host:pid:task inside an asyncio task."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        task = None
    name = task.get_name() if task is not None else threading.current_thread().name
    return f"{process_actor()}:{name}"[:ACTOR_LENGTH]


def check_actor(by: Any, what: str = "by") -> None:
    """Refuse a ``by=`` (or a worker's ``name``) the tables cannot store."""
    if by is not None:
        check_text(by, what, ACTOR_LENGTH)


def detail_text(text: str) -> str:
    """Free text as an event's detail (or a dead letter's error) keeps it: storable, and at
    most ERROR_LENGTH characters."""
    text = storable_text(text)
    return text if len(text) <= ERROR_LENGTH else text[:ERROR_LENGTH - 1] + "…"


class Recorder:
    """Writes events into the history ``table`` (through ``dao``, which knows how its
    database takes many rows at once) and reads them back, per queue (``pkind``)."""

    def __init__(self, table: sa.Table, dao: QueueDao) -> None:
        self.table = table
        self.dao = dao

    @staticmethod
    def event(pkind: str, kind: EventKind, key: str, at_ms: int, *, actor: str | None = None,
              attempt: int | None = None, detail: str | None = None) -> EventRow:
        return {"pkind": pkind, "pkey": key, "at": at_ms, "kind": kind.value,
                "actor": actor, "attempt": attempt,
                "detail": None if detail is None else detail_text(detail)}

    def write(self, conn: sa.Connection, events: Sequence[EventRow]) -> None:
        """Insert ``events``: one multi-row statement (the array insert on Oracle)."""
        if events:
            self.dao.insert_rows(conn, self.table, events)

    def read_op(self, pkind: str, key: str) -> Op[list[HistoryEvent]]:
        """The events of ``key`` (across re-offers of the key), oldest first."""
        h = self.table
        stmt = (sa.select(h.c.pkey, h.c.at, h.c.kind, h.c.actor, h.c.attempt, h.c.detail)
                .where(h.c.pkind == pkind, h.c.pkey == key).order_by(h.c.id))

        def op(conn: sa.Connection) -> list[HistoryEvent]:
            return [HistoryEvent(r.pkey, from_ms(r.at), EventKind(r.kind), r.actor, r.attempt,
                                 r.detail) for r in conn.execute(stmt)]

        return op

    def counts_op(self, after_id: int | None,
                  kinds: Sequence[EventKind]) -> Op[tuple[int, dict[tuple[str, EventKind], int]]]:
        """How many events of ``kinds`` each queue (pkind) has had since event ``after_id``
        (None: none counted, only the position read): ``(last id, {(pkind, kind): n})``.
        Read along the primary key, for a sampler that calls it again with the last id."""
        h = self.table
        last = sa.select(sa.func.max(h.c.id))
        counts = (sa.select(h.c.pkind, h.c.kind, sa.func.count().label("n"))
                  .where(h.c.id > sa.bindparam("after"), h.c.id <= sa.bindparam("upto"),
                         h.c.kind.in_([k.value for k in kinds]))
                  .group_by(h.c.pkind, h.c.kind))

        def op(conn: sa.Connection) -> tuple[int, dict[tuple[str, EventKind], int]]:
            upto = conn.execute(last).scalar()
            upto = int(upto) if upto is not None else 0
            if after_id is None or upto <= after_id:
                return upto if after_id is None else max(upto, after_id), {}
            rows = conn.execute(counts, {"after": after_id, "upto": upto})
            return upto, {(r.pkind, EventKind(r.kind)): int(r.n) for r in rows}

        return op

    def prune_op(self, pkind: str, before_ms: int, batch: int, in_list_max: int) -> Op[int]:
        """Delete up to ``batch`` of this queue's events older than ``before_ms``; returns how
        many went. Callers repeat it, each time in a transaction of its own, until fewer than
        ``batch`` go: old history never leaves in one huge delete."""
        h = self.table
        pick = (sa.select(h.c.id).where(h.c.pkind == pkind, h.c.at < before_ms)
                .order_by(h.c.at).limit(batch))

        def op(conn: sa.Connection) -> int:
            ids = list(conn.execute(pick).scalars())
            return sum(conn.execute(sa.delete(h).where(h.c.id.in_(part))).rowcount
                       for part in chunked(ids, in_list_max))

        return op
