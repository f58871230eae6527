"""Looking into a queue table as an operator does: every queue with its counts, and the
messages of one queue by state, page by page. Both front ends (``inspection_async`` and the
generated ``inspection``) run these operations; the CLI, metrics and dashboards read them.

Nothing here locks or changes a message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from .checks import check_positive_int, check_text
from .clock import Clock, DatabaseClock, to_ms
from .dialects import dao_class_for
from .errors import InvalidArgumentError
from .messages import FlowControl, QueuedMessage
from .queue_base import MAX_QUEUE_NAME, flow_control, queued_message
from .schema import DEFAULT_TABLE, KEY_LENGTH, KIND_LENGTH, dead_letter_table, queue_table
from .serializers import JsonSerializer, Serializer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")
Op = Callable[[sa.Connection], T]  # an operation returning a T, run by either front end

STATES = ("due", "in_flight", "scheduled")


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue (a name and payload type) of the table: messages due now (expired locks
    included), scheduled for later, in flight (locked), its dead letters, and how long the
    oldest due message has waited (None: nothing due)."""

    queue: str
    type_name: str
    due: int
    scheduled: int
    in_flight: int
    dead_letters: int
    oldest_due_age: timedelta | None


@dataclass(frozen=True, slots=True)
class MessagePage:
    """A page of ``peek``: the messages, and the ``after`` that reads the next page (None:
    this was the last)."""

    messages: list[QueuedMessage]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class QueuePage:
    """A page of ``queues_page``: the queues, and the ``after`` that reads the next page
    (None: this was the last)."""

    queues: list[QueueSummary]
    next_after: str | None


class InspectorBase:
    """Read-only views of queue table ``table_name``; see ``AsyncInspector`` / ``Inspector``."""

    def __init__(self, engine: sa.Engine | AsyncEngine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None) -> None:
        metadata = sa.MetaData()
        self.engine = engine
        self.clock = clock if clock is not None else DatabaseClock.of(engine)
        self.dao = dao_class_for(engine.dialect)(queue_table(metadata, table_name))
        self.dead = dead_letter_table(metadata, table_name)

    def queues_op(self) -> Op[list[QueueSummary]]:
        """Every queue with messages or dead letters, by name then payload type: one grouped
        read of the queue table and one of the dead letters."""
        now = to_ms(self.clock.now(), "clock.now()")
        stats = self.dao.select_stats_by_kind(now)
        d = self.dead
        dead = sa.select(d.c.pkind, sa.func.count().label("n")).group_by(d.c.pkind)

        def op(conn: sa.Connection) -> list[QueueSummary]:
            rows = {r.pkind: r for r in conn.execute(stats)}
            letters = {r.pkind: int(r.n) for r in conn.execute(dead)}
            out = []
            for pkind in sorted(rows.keys() | letters.keys(), key=_split):
                queue, type_name = _split(pkind)
                r = rows.get(pkind)
                oldest = None if r is None or r.oldest_due is None else timedelta(
                    milliseconds=now - int(r.oldest_due))
                out.append(QueueSummary(
                    queue, type_name, due=int(r.due) if r else 0,
                    scheduled=int(r.scheduled) if r else 0,
                    in_flight=int(r.in_flight) if r else 0,
                    dead_letters=letters.get(pkind, 0), oldest_due_age=oldest))
            return out

        return op

    def queues_page_op(self, limit: int, after: str | None,
                       prefix: str | None) -> Op[QueuePage]:
        """Up to ``limit`` queues with messages or dead letters whose name starts with
        ``prefix``, following the page that returned ``after``, in the database's order of
        "name|payload type": one read of both tables, cut by the database."""
        check_positive_int(limit, "limit")
        if after is not None:
            check_text(after, "after", KIND_LENGTH)
        if prefix is not None and prefix != "":
            check_text(prefix, "prefix", MAX_QUEUE_NAME)
        now = to_ms(self.clock.now(), "clock.now()")
        stmt = self.dao.select_stats_page(self.dead, now, limit, after, prefix or None)

        def op(conn: sa.Connection) -> QueuePage:
            rows = conn.execute(stmt).all()
            out = []
            for r in rows:
                queue, type_name = _split(r.pkind)
                oldest = None if r.oldest_due is None else timedelta(
                    milliseconds=now - int(r.oldest_due))
                out.append(QueueSummary(queue, type_name, due=int(r.due),
                                        scheduled=int(r.scheduled),
                                        in_flight=int(r.in_flight),
                                        dead_letters=int(r.dead_letters),
                                        oldest_due_age=oldest))
            return QueuePage(out, rows[-1].pkind if len(rows) == limit else None)

        return op

    def flow_controls_op(self, queues: Sequence[tuple[str, str]] | None,
                         ) -> Op[dict[tuple[str, str], FlowControl]]:
        """The flow control of ``queues`` (name, payload type), or of every queue that has
        any (None): paused, limited, or grouped, by (name, payload type); a queue without
        settings is absent (it has none)."""
        kinds = None if queues is None else [f"{name}|{type_name}" for name, type_name in queues]
        dao = self.dao
        return lambda conn: {_split(pkind): flow_control(control)
                             for pkind, control in dao.read_controls(conn, kinds).items()}

    def peek_op(self, queue: str, state: str, limit: int, key_prefix: str | None,
                after: str | None, serializer: Serializer | None) -> Op[MessagePage]:
        """Up to ``limit`` messages of ``queue`` in ``state`` (one of STATES), in due order,
        whose key starts with ``key_prefix``, following the page that returned ``after``."""
        check_text(queue, "queue name", MAX_QUEUE_NAME)
        if state not in STATES:
            raise InvalidArgumentError(
                f"state must be one of {', '.join(STATES)}; got {state!r}")
        check_positive_int(limit, "limit")
        if key_prefix is not None and key_prefix != "":
            check_text(key_prefix, "key_prefix", KEY_LENGTH)
        position = _position(after)
        serializer = serializer if serializer is not None else JsonSerializer()
        pkind = f"{queue}|{serializer.type_name}"
        now = to_ms(self.clock.now(), "clock.now()")
        stmt = self.dao.select_page(pkind, state, now, limit, key_prefix or None, position)

        def op(conn: sa.Connection) -> MessagePage:
            rows = conn.execute(stmt).all()
            messages = [queued_message(r, serializer, now) for r in rows]
            last = rows[-1] if len(rows) == limit else None
            return MessagePage(messages, None if last is None
                               else f"{int(last.scheduled_at)}:{int(last.id)}")

        return op


def _split(pkind: str) -> tuple[str, str]:
    queue, _, type_name = pkind.rpartition("|")
    return queue, type_name


# a page's ``next_after``: the last message's due time and id, in ASCII digits (``int``
# alone would take other scripts' digits, spaces and underscores too)
AFTER_PATTERN = "^-?[0-9]{1,19}:[0-9]{1,19}$"


def _position(after: str | None) -> tuple[int, int] | None:
    """The keyset position in a page's ``next_after``."""
    if after is None:
        return None
    if not isinstance(after, str) or not re.fullmatch(AFTER_PATTERN, after):
        raise InvalidArgumentError(
            f"after must be the next_after of an earlier page, got {after!r}")
    at, _, row_id = after.partition(":")
    return int(at), int(row_id)
