"""What a queue is, whichever front end runs it: its checks, and its operations as plain
functions of a SQLAlchemy Connection.

``AsyncDelayedQueue`` (``queue_async.py``) and ``DelayedQueue`` (generated from it) inherit
this and differ only in how they run an operation: awaited, or called. Everything that decides
what is sent (validation, the offer's rounds and chunks, the statements) lives here and in the
dialect modules, once.
"""

from __future__ import annotations

import traceback
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, NamedTuple, Self, TypeVar, cast

import sqlalchemy as sa

from . import wakeups
from .checks import (
    MAX_TIME_MS,
    check_key,
    check_positive_int,
    check_text,
    check_texts,
    readable_ms,
    time_ms,
)
from .clock import Clock, DatabaseClock, duration_ms, from_ms, to_ms
from .dead_letters_base import DeadLettersBase
from .dialects import ClaimedRow, OfferRow, QueueDao, dao_class_for
from .dialects.base import ROW_OVERHEAD, ClaimEvents, OfferEvents, PayloadBudget
from .dialects.common import ErrorKind, chunked
from .dialects.flow import Control
from .errors import InvalidArgumentError, Raced, UnsupportedFeatureError
from .history import (
    EventKind,
    EventRow,
    History,
    HistoryEvent,
    Recorder,
    check_actor,
    current_actor,
    detail_text,
    process_actor,
)
from .listeners import Listeners, QueueListener
from .messages import (
    NO_FLOW_CONTROL,
    Envelope,
    FlowControl,
    Message,
    OfferOutcome,
    QueuedMessage,
    QueueStats,
)
from .schema import DEFAULT_TABLE, KEY_LENGTH, KIND_LENGTH, history_table, queue_table
from .serializers import JsonSerializer, Serializer, encode_payload
from .tracing import NO_TRACING, Tracer

MAX_QUEUE_NAME = 60
_TYPE_NAME_MAX = KIND_LENGTH - MAX_QUEUE_NAME - 1
# offers of one chunk that go the locking way at once after one whose plain insert met an
# existing key (``QueueDao.inserts_first``): where producers re-offer keys, few try twice
_FIRST_BACKOFF = 100
# priorities and the limits of flow control are 32-bit signed integers in every database
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
MAX_LIMIT = MAX_PRIORITY

T = TypeVar("T")
Op = Callable[[sa.Connection], T]  # an operation returning a T, run by either front end
# an envelope given back as it came: the front's own type (``extend_many``)
E = TypeVar("E", bound="Envelope[QueueBase]")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """An operation ready to run, whether it sends a single statement (which the executor
    may then run in autocommit), whether it frees groups (whose rows' update may pass rows
    it leaves alone: ``QueueDao.begin_read_committed``), and the drop of the rows of groups
    it left empty where the dialect does that apart (``drops_groups_apart``; else None): in
    a transaction of its own once the operation's has committed, or in the caller's
    transaction after it."""

    op: Op[T]
    one_statement: bool
    frees_groups: bool = field(default=False, kw_only=True)
    drop_groups: Op[None] | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class OfferPlan(Call[list[OfferOutcome]]):
    """An offer ready to run: ``op`` returns the outcomes in input order. ``flags_groups``:
    it also marks the queue as having groups (once per queue object); ``earliest_ms``: the
    earliest due time it writes; ``first``: where the dialect inserts first
    (``QueueDao.inserts_first``), the plain insert of every message to try before ``op``, in
    a transaction of its own (None when it could not be one statement after all)."""

    flags_groups: bool = False
    earliest_ms: int = 0
    first: Op[list[OfferOutcome] | None] | None = None


class Undecodable(NamedTuple):
    """A message claimed whose row could not be read, and why: a dead letter to be."""

    envelope: Envelope[QueueBase]
    error: str


_EPOCH = from_ms(0)


class QueueBase:
    """A durable delayed queue named ``name`` in ``table_name``; see ``AsyncDelayedQueue`` and
    ``DelayedQueue`` for the front ends."""

    def __init__(self, engine: Any, name: str, *, serializer: Serializer | None = None,
                 acquire_timeout: timedelta = timedelta(minutes=5),
                 table_name: str = DEFAULT_TABLE, clock: Clock | None = None,
                 history: bool | timedelta | History | None = None,
                 listeners: Sequence[QueueListener] = (),
                 tracer: Tracer | None = None) -> None:
        check_text(name, "queue name", MAX_QUEUE_NAME)
        if tracer is not None and not isinstance(tracer, Tracer):
            raise InvalidArgumentError(f"tracer must be a sqldelay Tracer, got {tracer!r}")
        self.tracer = NO_TRACING if tracer is None else tracer
        for listener in listeners:
            if not isinstance(listener, QueueListener):
                raise InvalidArgumentError(
                    f"listeners must be QueueListener instances, got {listener!r}")
        self.events = Listeners(listeners)
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
        # the database server's time by default, so that every process agrees on when a
        # message is due and a lock expires (``clock.DatabaseClock``)
        self.clock = clock if clock is not None else DatabaseClock.of(engine)
        metadata = sa.MetaData()
        self.dao: QueueDao = dao_class_for(engine.dialect)(queue_table(metadata, table_name))
        # with history, each change writes its events in its own transaction (see history.py)
        self.history_settings = History.of(history)
        self.recorder = (None if self.history_settings is None
                         else Recorder(history_table(metadata, table_name), self.dao))
        # the flow control the last claim found (None: none): a hint of which claim the next
        # one tries first, never trusted for what it claims
        self.control: Control | None = None
        # the last claim took all it asked for: the queue has a backlog, and the next claim
        # needs no READ COMMITTED (``QueueDao.begin_read_committed``)
        self.backlog = False
        # set once this object's offers have marked the queue as having groups
        self.groups_flagged = False
        # the offers of one chunk left before the next tries a plain insert first
        # (``QueueDao.inserts_first``): after one met an existing key, as many as
        # ``_FIRST_BACKOFF`` take the locking way straight away
        self.first_skips = 0
        # messages this object created before it made sure the table has planner statistics
        # (None: made sure, or the dialect's claim needs none; see statistics_due)
        self._unchecked_creations: int | None = 0 if self.dao.statistics_after else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.engine.url.render_as_string()!r})"

    def now_ms(self, conn: sa.Connection | None = None) -> int:
        """The time now as the queue counts it, in epoch ms; given ``conn``, the database
        clock's offset is measured on it first when due (``clock_due``)."""
        clock = self.clock
        if conn is not None and isinstance(clock, DatabaseClock):
            return to_ms(clock.now_on(conn), "clock.now()")
        return to_ms(clock.now(), "clock.now()")

    @property
    def clock_due(self) -> bool:
        """Whether the queue's clock needs a round trip before it tells the time (the
        database clock's first measurement, or its periodic one): see ``now_op``."""
        return isinstance(self.clock, DatabaseClock) and self.clock.due

    @property
    def clock_unread(self) -> bool:
        """Whether the queue's database clock has no offset yet: a plan made now would read
        the local clock (the fronts measure it first, once its checks have passed)."""
        return isinstance(self.clock, DatabaseClock) and not self.clock.measured

    def now_op(self) -> Op[datetime]:
        return lambda conn: from_ms(self.now_ms(conn))

    def check_key(self, key: Any) -> None:
        """Refuse a key this queue cannot store, before the database is touched."""
        check_key(key)
        self.dao.check_keys((key,))

    # ---- offers ------------------------------------------------------------------------------

    def plan_offer(self, messages: Sequence[Message], by: str | None = None) -> OfferPlan | None:
        """Check and encode ``messages`` (None when there are none) and plan their offer, by
        ``by`` (default, with history: this process, host:pid).

        A key that appears twice is applied in order, as two offers would be. Each chunk's
        keys, and the chunks, go in the database's lock order, so producers of overlapping
        batches cannot deadlock on each other. A call larger than one statement is encoded
        twice: here to check it, then chunk by chunk as it is written (see ``_Checked``).
        """
        check_actor(by)
        actor = by if by is not None or self.recorder is None else process_actor()
        if not messages:
            return None
        now = self.now_ms()
        dao = self.dao
        static = PayloadBudget(dao.max_payload_bytes, dao.offer_chunk_bytes)
        batch = _Checked(self, messages, now, dao.offer_chunk, static.statement)
        planned = batch.chunks(dao.offer_chunk, static.statement)

        flag = not self.groups_flagged and batch.has_groups
        trace = self.tracer.context()
        # the dialect's offer statement writes the history events itself (one statement still)
        recorded = self.recorder is not None and dao.offer_writes_history

        def op(conn: sa.Connection) -> list[OfferOutcome]:
            self.now_ms(conn)  # the database clock measured again when due (producers too)
            if flag:  # from now on claims of this queue take the group-aware path
                dao.write_settings(conn, self.pkind, has_groups=1)
            budget = dao.payload_budget(conn)
            batch.check_sizes(budget, dao.name)
            chunks = planned if budget.statement == static.statement else batch.chunks(
                dao.offer_chunk, budget.statement)
            outcomes: list[OfferOutcome | None] = [None] * len(messages)
            for part in chunks:
                rows = batch.rows(part)
                results = dao.offer(conn, self.pkind, rows, now, actor,
                                    self._offer_history(rows) if recorded else None)
                for i, outcome in zip(part, results, strict=True):
                    outcomes[i] = outcome
                if trace is not None:  # the producer's context, on what this offer wrote
                    changed = [row.key for row, outcome in zip(rows, results, strict=True)
                               if outcome is not OfferOutcome.IGNORED]
                    dao.store_trace_context(conn, self.pkind, changed, trace)
                if self.recorder is not None and not recorded:  # the chunk's events
                    self.recorder.write(conn, self._offer_events(rows, results, now, actor))
            return cast(list[OfferOutcome], outcomes)  # every slot filled by its chunk

        alone = (not flag and (self.recorder is None or recorded) and trace is None
                 and len(planned) == 1)
        one = alone and dao.offer_is_one_statement(batch.rows(planned[0]))
        first = None
        if alone and dao.inserts_first:
            if self.first_skips:
                self.first_skips -= 1
            else:
                first = self._insert_first(batch, planned[0], static, now, actor)
        return OfferPlan(op, one, flag, batch.earliest_ms, first)

    def _insert_first(self, batch: _Checked, part: memoryview, static: PayloadBudget,
                      now: int, actor: str | None) -> Op[list[OfferOutcome] | None]:
        """The plain insert of every message of an offer of one chunk that writes nothing
        else (``inserts_first``): it fails whole on a key that exists, and the offer then runs
        its usual way."""
        dao = self.dao

        def op(conn: sa.Connection) -> list[OfferOutcome] | None:
            self.now_ms(conn)  # the database clock measured again when due
            budget = dao.payload_budget(conn)
            batch.check_sizes(budget, dao.name)
            if (budget.statement != static.statement
                    and len(batch.chunks(dao.offer_chunk, budget.statement)) > 1):
                return None
            rows = batch.rows(part)
            if self.recorder is None:
                dao.insert_new(conn, self.pkind, rows, now, actor)
            else:  # the dialect's insert writes the events (``plan_offer``: recorded)
                dao.insert_new(conn, self.pkind, rows, now, actor, self._offer_history(rows))
            return [OfferOutcome.CREATED] * len(rows)

        return op

    def first_failed(self, exc: sa.exc.DBAPIError) -> bool:
        """Whether ``exc``, raised by a plan's ``first``, is the existing key it may meet (the
        offer then runs its usual way, and the next ``_FIRST_BACKOFF`` go there at once)."""
        if self.dao.classify(exc) is not ErrorKind.DUPLICATE_KEY:
            return False
        self.first_skips = _FIRST_BACKOFF
        return True

    def offered(self, plan: OfferPlan, outcomes: Sequence[OfferOutcome]) -> None:
        """After an offer committed: wake this process's sleeping workers of the queue if it
        wrote a message due before they meant to look again."""
        if plan.flags_groups:
            self.groups_flagged = True
        if any(outcome is not OfferOutcome.IGNORED for outcome in outcomes):
            wakeups.offered(self, plan.earliest_ms)

    def statistics_due(self, outcomes: Sequence[OfferOutcome]) -> bool:
        """After an offer committed: whether this object has now created enough messages to
        make sure the table has planner statistics (``statistics_op``), once."""
        after = self.dao.statistics_after
        if self._unchecked_creations is None or after is None:  # None together (__init__)
            return False
        self._unchecked_creations += outcomes.count(OfferOutcome.CREATED)
        if self._unchecked_creations < after:
            return False
        self._unchecked_creations = 0  # where the op fails, tried again as many later
        return True

    def statistics_op(self) -> Op[bool]:
        """Gather the table's planner statistics where it has none (a new table whose claims
        would otherwise read every due message); made sure of once per queue object."""
        def op(conn: sa.Connection) -> bool:
            gathered = self.dao.gather_statistics(conn)
            self._unchecked_creations = None
            return gathered

        return op

    def _offer_events(self, rows: Sequence[OfferRow], outcomes: Sequence[OfferOutcome],
                      now: int, actor: str | None) -> list[EventRow]:
        assert self.history_settings is not None and self.recorder is not None  # history
        kinds = {OfferOutcome.CREATED: EventKind.OFFERED, OfferOutcome.UPDATED: EventKind.UPDATED}
        if self.history_settings.ignored:
            kinds[OfferOutcome.IGNORED] = EventKind.IGNORED
        return [self.recorder.event(self.pkind, kinds[outcome], row.key, now, actor=actor,
                                    detail=_describe_offer(row))
                for row, outcome in zip(rows, outcomes, strict=True) if outcome in kinds]

    def _offer_history(self, rows: Sequence[OfferRow]) -> OfferEvents:
        """The events of an offer of ``rows`` for the dialect's statement to write
        (``offer_writes_history``), as ``_offer_events`` makes them for the recorder."""
        assert self.history_settings is not None and self.recorder is not None  # history
        # the messages of an offer mostly share their due time, priority and group: each
        # detail is written once (a due time written out cost 1.5 us a message)
        described: dict[tuple[int, int, str | None], str] = {}
        details = []
        for row in rows:
            detail = described.get((row.at_ms, row.priority, row.group))
            if detail is None:
                detail = described[row.at_ms, row.priority, row.group] = detail_text(
                    _describe_offer(row))
            details.append(detail)
        return OfferEvents(self.recorder.table, EventKind.OFFERED.value,
                           EventKind.UPDATED.value,
                           EventKind.IGNORED.value if self.history_settings.ignored else None,
                           details)

    # ---- claims ------------------------------------------------------------------------------

    @property
    def claim_alone(self) -> bool:
        """Whether the next claim runs in autocommit: where the database gains by it, until a
        claim finds the queue under flow control whose claim takes a transaction (as does a
        recorded one, unless the dialect's claim statement writes its history)."""
        return ((self.recorder is None or self.dao.claim_writes_history)
                and self.dao.claims_alone(self.control))

    def claim_op(self, limit: int, by: str | None = None, *, own_transaction: bool = True,
                 acks: Sequence[tuple[str, Sequence[int]]] = ()
                 ) -> tuple[Op[list[Envelope[Self]]], list[Undecodable]]:
        """The claim of up to ``limit`` due messages (earliest first) under one lock id, held
        by ``by`` (default, with history: this thread or task, host:pid:name), and the list
        in which it leaves the messages it claimed but could not decode, for the front to
        bury (``bury_undecodable_op``). ``own_transaction``: the op runs in a transaction of
        its own, so it may raise NeedsTransaction (or Raced) to be run again. ``acks``:
        (lock, ids) of messages the claim acks first (``acks_riding``)."""
        check_positive_int(limit, "limit")
        check_actor(by)
        actor = by if by is not None or self.recorder is None else current_actor()
        lock = str(uuid.uuid4())
        optimistic = own_transaction
        undecodable: list[Undecodable] = []

        def op(conn: sa.Connection) -> list[Envelope[Self]]:
            nonlocal optimistic
            undecodable.clear()  # of an attempt that did not commit
            # read at each attempt: a reading kept through pool waits, lock waits and
            # retries would shorten the lock and see fewer messages due
            now = self.now_ms(conn)
            until = now + self._acquire_ms
            try:
                events = (self._claim_history(until, actor)
                          if self.recorder is not None and self.dao.claim_writes_history
                          else None)
                rows, control = self.dao.claim_checked(
                    conn, self.pkind, now, limit, lock, until, actor,
                    last=self.control, optimistic=optimistic, acks=acks, events=events)
            except Raced:
                optimistic = False  # run again, the settings locked first
                raise
            self.control = control
            self.backlog = len(rows) == limit
            if self.recorder is not None and not (events is not None and events.written):
                self.recorder.write(conn, self._claim_events(rows, now, until, actor))
            locked_until = from_ms(until)
            try:
                return [self._envelope(r, lock, locked_until, actor) for r in rows]
            except Exception:  # a row this queue cannot read: the others are handled
                return self._sort_out(rows, lock, locked_until, actor, undecodable)

        return op, undecodable

    def acks_riding(self, envelopes: Sequence[Envelope[QueueBase]]
                    ) -> list[tuple[str, Sequence[int]]] | None:
        """(lock, ids) of ``envelopes`` for the claim to ack in its own statement; None
        where it cannot (the database, or a queue that keeps history: see ``claim_acking``),
        and the acks go first on their own (``ack_many``)."""
        if not envelopes or not self.dao.acks_in_claim or self.recorder is not None:
            return None
        by_lock: dict[str, list[int]] = {}
        for env in envelopes:
            self.check_own(env)
            by_lock.setdefault(env.lock, []).append(env.row_id)
        return list(by_lock.items())

    def _sort_out(self, rows: Sequence[ClaimedRow], lock: str, locked_until: datetime,
                  actor: str | None, undecodable: list[Undecodable]) -> list[Envelope[Self]]:
        """The envelopes of the rows that decode; the others go to ``undecodable`` (a payload
        its serializer refuses, a time past what a datetime holds: written by an older
        version, by hand or by another client), claimed like the rest so that nobody else
        takes them before they are buried."""
        envelopes = []
        for r in rows:
            try:
                envelopes.append(self._envelope(r, lock, locked_until, actor))
            except Exception as exc:
                error = _unreadable(exc)
                undecodable.append(Undecodable(Envelope(
                    key=r.key, payload=None, scheduled_at=_EPOCH, created_at=_EPOCH,
                    attempt=r.deliveries, locked_until=locked_until, priority=r.priority,
                    group=r.group, row_id=r.id, lock=lock, queue=self,
                    enqueued_by=r.enqueued_by, claimed_by=actor),
                    f"the message cannot be read by queue {self.name!r}: {error}"))
        return envelopes

    def bury_undecodable_op(self, undecodable: Sequence[Undecodable]) -> Op[list[bool]]:
        """Move the messages a claim could not decode to the dead letters, with the reason."""
        letters = DeadLettersBase.of(self)
        ops = [letters.bury_op(u.envelope, u.error) for u in undecodable]
        return lambda conn: [op(conn) for op in ops]

    def _claim_history(self, until: int, actor: str | None) -> ClaimEvents:
        """The events of a claim for the dialect's statement to write
        (``claim_writes_history``), as ``_claim_events`` makes them for the recorder."""
        assert self.recorder is not None  # called with history only
        return ClaimEvents(self.recorder.table, EventKind.CLAIMED.value,
                           EventKind.LOCK_EXPIRED.value,
                           detail_text(f"locked until {from_ms(until).isoformat()}"),
                           detail_text(f"lock lost; claimed again by {actor}"))

    def _claim_events(self, rows: Sequence[ClaimedRow], now: int, until: int,
                      actor: str | None) -> list[EventRow]:
        assert self.recorder is not None  # called with history only
        event, events = self.recorder.event, []
        for r in rows:
            if r.previous_lock is not None:  # its holder's lock ran out before an ack
                events.append(event(self.pkind, EventKind.LOCK_EXPIRED, r.key, now,
                                    actor=r.previous_holder, attempt=r.deliveries - 1,
                                    detail=f"lock lost; claimed again by {actor}"))
            events.append(event(self.pkind, EventKind.CLAIMED, r.key, now, actor=actor,
                                attempt=r.deliveries,
                                detail=f"locked until {from_ms(until).isoformat()}"))
        return events

    def _envelope(self, row: ClaimedRow, lock: str, locked_until: datetime,
                  actor: str | None) -> Envelope[Self]:
        return Envelope(
            key=row.key, payload=self.serializer.decode(row.payload),
            scheduled_at=from_ms(row.scheduled_at_initially), created_at=from_ms(row.created_at),
            attempt=row.deliveries, locked_until=locked_until, priority=row.priority,
            group=row.group, row_id=row.id, lock=lock, queue=self,
            enqueued_by=row.enqueued_by, claimed_by=actor, trace_context=row.trace_context)

    def check_own(self, envelope: Envelope[QueueBase]) -> None:
        """Refuse an envelope that another queue claimed."""
        if not isinstance(envelope, Envelope):
            raise InvalidArgumentError(f"expected an Envelope, got {type(envelope).__name__}")
        other = envelope.queue
        if other.pkind != self.pkind or other.dao.table.name != self.dao.table.name:
            raise InvalidArgumentError(
                f"envelope of queue {envelope.queue.name!r} given to queue {self.name!r}")

    def _drop_after(self, groups: Sequence[str], whole: bool) -> Op[None] | None:
        """The drop of the empty ones among ``groups`` to run after the operation that frees
        them (``Call.drop_groups``), or None where that operation drops them itself;
        ``whole``: the operation does it all, its caller running nothing after it."""
        if whole or not groups or not self.dao.drops_groups_apart:
            return None
        names = list(groups)
        return lambda conn: self.dao.drop_groups(conn, self.pkind, names)

    def ack_call(self, envelope: Envelope[QueueBase], *, whole: bool = False) -> Call[bool]:
        """Delete a claimed message: True, or False when its lock is stale (nothing deleted).
        A grouped message frees its group (``whole``: its drop, where empty, in ``op``)."""
        self.check_own(envelope)
        dao, lock, group, recorder = self.dao, envelope.lock, envelope.group, self.recorder
        after = self._drop_after([] if group is None else [group], whole)
        drop = after is None
        if recorder is None:
            if group is None:
                return Call(lambda conn: dao.ack(conn, envelope.row_id, lock), True)
            return Call(lambda conn: dao.ack_freeing(conn, self.pkind, lock, [envelope.row_id],
                                                     [group], drop=drop) > 0,
                        dao.ack_frees_in_one, frees_groups=True, drop_groups=after)

        def op(conn: sa.Connection) -> bool:
            acked = dao.ack(conn, envelope.row_id, lock)
            if group is not None:
                dao.free_groups(conn, self.pkind, lock, [group], drop=drop)
            if acked:
                recorder.write(conn, [self._done_event(EventKind.ACKED, envelope)])
            return acked

        return Call(op, False, frees_groups=group is not None, drop_groups=after)

    def ack_many_call(self, envelopes: Sequence[Envelope[QueueBase]]) -> Call[int] | None:
        """The deletion of claimed messages, one statement per claim batch (None: none given);
        the groups of grouped ones are freed."""
        by_lock: dict[str, list[Envelope[QueueBase]]] = {}
        groups: dict[str, list[str]] = {}
        for env in envelopes:
            self.check_own(env)
            by_lock.setdefault(env.lock, []).append(env)
            if env.group is not None:
                groups.setdefault(env.lock, []).append(env.group)
        if not by_lock:
            return None
        dao, recorder = self.dao, self.recorder
        after = self._drop_after([g for names in groups.values() for g in names], False)
        drop = after is None

        several = len(by_lock) > 1 or len(envelopes) > dao.in_list_max

        def op(conn: sa.Connection) -> int:
            if several:  # a deletion per claim batch: their rows in one lock order first
                dao.lock_acked(conn, [env.row_id for env in envelopes])
            acked = 0
            for lock, held in by_lock.items():
                ids, names = [env.row_id for env in held], groups.get(lock, ())
                if recorder is None:
                    acked += dao.ack_freeing(conn, self.pkind, lock, ids, names, drop=drop)
                    continue
                if dao.ack_writes_history:  # the ack's statement writes the events
                    acked += dao.ack_recorded(conn, self.pkind, lock, ids, recorder.table,
                                              EventKind.ACKED.value, self.now_ms())
                    if names:
                        dao.free_groups(conn, self.pkind, lock, names, drop=drop)
                    continue
                gone = dao.ack_many_which(conn, lock, ids)
                recorder.write(conn, [self._done_event(EventKind.ACKED, env)
                                      for env in held if env.key in gone])
                acked += len(gone)
                if names:
                    dao.free_groups(conn, self.pkind, lock, names, drop=drop)
            return acked

        one = ((recorder is None or dao.ack_writes_history) and len(by_lock) == 1
               and len(envelopes) <= dao.in_list_max and (not groups or dao.ack_frees_in_one))
        return Call(op, one, frees_groups=bool(groups), drop_groups=after)

    def release_call(self, envelope: Envelope[QueueBase], delay: timedelta | None,
                     error: str | None = None) -> Call[bool]:
        """Give a claimed message back, due now or after ``delay``: True if the lock held. A
        grouped message frees its group for the group's next message. ``error`` says the
        handler failed (the history records a failure rather than a release)."""
        self.check_own(envelope)
        if error is not None and not isinstance(error, str):
            raise InvalidArgumentError(f"error must be a str, got {type(error).__name__}")
        delay_ms = 0 if delay is None else self._lasting(delay, "delay")
        if envelope.group is None and self.recorder is None:
            return Call(lambda conn: self._move(conn, envelope,
                                                self._due_again(conn, envelope, delay_ms),
                                                keep_lock=False), True)

        after = self._drop_after([] if envelope.group is None else [envelope.group], False)
        drop = after is None

        def op(conn: sa.Connection) -> bool:
            due = self._due_again(conn, envelope, delay_ms)
            moved = self._move(conn, envelope, due, keep_lock=False)
            if envelope.group is not None:
                self.dao.free_groups(conn, self.pkind, envelope.lock, [envelope.group],
                                     drop=drop)
            if moved and self.recorder is not None:
                again = f"due again at {from_ms(due).isoformat()}"
                self.recorder.write(conn, [
                    self._done_event(EventKind.RELEASED, envelope, again) if error is None
                    else self._done_event(EventKind.FAILED, envelope, f"{again}: {error}")])
            return moved

        return Call(op, False, frees_groups=envelope.group is not None, drop_groups=after)

    def _due_again(self, conn: sa.Connection, envelope: Envelope[QueueBase],
                   delay_ms: int) -> int:
        """When a released message is due again: ``delay_ms`` from now, or without a delay
        at its own due time (it was due when it was claimed), not at the release's reading of
        now. A claim that read the time a moment before the release committed then still
        finds it due, and a group's head keeps its place: due "now" by the release's clock,
        it was not yet due by that claim's, which took the group's next message instead."""
        now = self.now_ms(conn)
        return now + delay_ms if delay_ms else min(now, to_ms(envelope.scheduled_at))

    def _done_event(self, kind: EventKind, envelope: Envelope[QueueBase],
                    detail: str | None = None) -> EventRow:
        """The event of what the holder of ``envelope`` did with it (with history)."""
        assert self.recorder is not None
        return self.recorder.event(self.pkind, kind, envelope.key, self.now_ms(),
                                   actor=envelope.claimed_by, attempt=envelope.attempt,
                                   detail=detail)

    def extend_call(self, envelope: Envelope[QueueBase], by: timedelta | None) -> Call[bool]:
        """Keep the lock ``by`` (default: acquire_timeout) from now: True if it still held,
        and then ``envelope.locked_until`` says the new expiry (the group's too). A lock that
        expired holds no more where another message may have taken its group's turn or its
        place under the concurrency cap (``QueueDao.extend_locked``)."""
        self.check_own(envelope)
        lasting = self._acquire_ms if by is None else self._lasting(by, "by")

        def op(conn: sa.Connection) -> bool:
            now = self.now_ms(conn)
            until = now + lasting
            stmt = self.dao.extend_locked(self.pkind, envelope.row_id, envelope.lock, until,
                                          now, envelope.group is not None)
            if not conn.execute(stmt).rowcount:
                return False
            if envelope.group is not None:
                self.dao.extend_group(conn, self.pkind, envelope.lock, envelope.group, until)
            envelope.locked_until = from_ms(until)
            return True

        return Call(op, envelope.group is None)

    def extend_many_call(self, envelopes: Sequence[E], by: timedelta | None) -> Call[list[E]]:
        """Keep the locks of ``envelopes`` ``by`` (default: acquire_timeout) from now: the
        envelopes whose locks still held (their ``locked_until`` then says the new expiry).
        The locks of one claim batch that have not expired are renewed in one statement;
        the others (expired, or of grouped messages) one by one, as ``extend`` judges them."""
        lasting = self._acquire_ms if by is None else self._lasting(by, "by")
        batches: dict[str, list[E]] = {}
        singles: list[E] = []
        for envelope in envelopes:
            self.check_own(envelope)
            if envelope.group is None:
                batches.setdefault(envelope.lock, []).append(envelope)
            else:
                singles.append(envelope)
        one_by_one = [(envelope, self.extend_call(envelope, by).op) for envelope in singles]
        dao = self.dao

        def op(conn: sa.Connection) -> list[E]:
            now = self.now_ms(conn)
            until = now + lasting
            renewed: list[E] = []
            rest = list(one_by_one)
            for lock, held in batches.items():
                for chunk in chunked(held, dao.in_list_max):
                    params = {"lock": lock, "ids": [e.row_id for e in chunk], "now": now,
                              "until": until}
                    if conn.execute(dao.renew_locks(len(chunk)), params).rowcount == len(chunk):
                        locked_until = from_ms(until)
                        for envelope in chunk:
                            envelope.locked_until = locked_until
                        renewed.extend(chunk)
                    else:
                        rest.extend((e, self.extend_call(e, by).op) for e in chunk)
            renewed.extend(envelope for envelope, extend in rest if extend(conn))
            return renewed

        return Call(op, False)

    def _lasting(self, delta: timedelta, name: str) -> int:
        """``delta`` in ms, refused when it would end past the year 9999 (a row no read could
        turn back into a datetime)."""
        ms = duration_ms(delta, name)
        if self.now_ms() + ms > MAX_TIME_MS:
            raise InvalidArgumentError(f"{name} {delta} from now ends after the year 9999")
        return ms

    def _move(self, conn: sa.Connection, envelope: Envelope[QueueBase], scheduled_at: int, *,
              keep_lock: bool) -> bool:
        stmt = self.dao.move_locked(envelope.row_id, envelope.lock, scheduled_at, keep_lock)
        return conn.execute(stmt).rowcount > 0

    # ---- flow control ----------------------------------------------------------------------

    def settings_op(self, **values: Any) -> Op[None]:
        """Write the queue's settings; listening workers claim again at once (a resume, a
        limit raised or lifted lets them take more)."""
        def op(conn: sa.Connection) -> None:
            self.dao.write_settings(conn, self.pkind, **values)
            self.dao.wake_listeners(conn, self.pkind)

        return op

    def rate_limit_op(self, limit: int | None, per: timedelta) -> Op[None]:
        """At most ``limit`` claims per ``per`` across every consumer (a token bucket holding
        one period's worth, so a burst of ``limit`` after a quiet spell); None lifts it.
        Setting the limit the queue has already changes nothing: a new bucket, full, comes
        only with a new limit or period (a process setting its limit at every start, or
        every few seconds, would otherwise refill the bucket each time: 10 a second set
        again every 0.25 s let 239 claims through in 5 s, where 60 were allowed)."""
        if limit is None:
            return self.settings_op(rate_limit=None, rate_period_ms=None, tokens_milli=None,
                                    refilled_at=None)
        _check_limit(limit)
        period = duration_ms(per, "per")
        if period < 1:
            raise InvalidArgumentError("per must be at least a millisecond")
        return self.settings_op(rate_limit=limit, rate_period_ms=period,
                                tokens_milli=limit * 1000, refilled_at=self.now_ms(),
                                unless_same=("rate_limit", "rate_period_ms"))

    def concurrency_limit_op(self, limit: int | None) -> Op[None]:
        """At most ``limit`` messages of the queue in flight across every consumer. Refused
        on a multi-primary cluster, where the claims of two nodes would both see room."""
        if limit is None:
            return self.settings_op(max_in_flight=None)
        _check_limit(limit)
        write = self.settings_op(max_in_flight=limit)

        def op(conn: sa.Connection) -> None:
            if self.dao.multi_primary(conn):
                raise UnsupportedFeatureError(
                    f"a concurrency limit cannot hold on {self.dao.name} with Galera: the "
                    "claims of different nodes count the messages in flight under locks "
                    "local to each node; send every consumer of queue "
                    f"{self.name!r} to one node, or use a rate limit "
                    "(docs/high-availability.md)")
            write(conn)

        return op

    def flow_control_op(self) -> Op[FlowControl]:
        return lambda conn: flow_control(self.dao.read_control(conn, self.pkind))

    # ---- reads and deletes -------------------------------------------------------------------

    def get_op(self, key: str) -> Op[QueuedMessage | None]:
        """Read a message without locking or changing it: a QueuedMessage or None."""
        self.check_key(key)
        now = self.now_ms()

        def op(conn: sa.Connection) -> QueuedMessage | None:
            row = conn.execute(self.dao.select_by_key(self.pkind, key)).first()
            return None if row is None else queued_message(row, self.serializer, now)

        return op

    def contains_op(self, key: str) -> Op[bool]:
        self.check_key(key)
        stmt = self.dao.exists_key(self.pkind, key)
        return lambda conn: conn.execute(stmt).first() is not None

    def drop_op(self, key: str, by: str | None = None) -> Op[bool]:
        self.check_key(key)
        check_actor(by)
        stmt = self.dao.delete_key(self.pkind, key)
        recorder = self.recorder
        if recorder is None:
            return lambda conn: conn.execute(stmt).rowcount > 0
        event = recorder.event(self.pkind, EventKind.DROPPED, key, self.now_ms(),
                               actor=by or current_actor())

        def op(conn: sa.Connection) -> bool:
            dropped = conn.execute(stmt).rowcount > 0
            if dropped:
                recorder.write(conn, [event])
            return dropped

        return op

    def clear_op(self, by: str | None = None) -> Op[int]:
        check_actor(by)
        recorder = self.recorder
        if recorder is None:
            stmt = self.dao.delete_kind(self.pkind)
            return lambda conn: conn.execute(stmt).rowcount
        actor = by or current_actor()

        def op(conn: sa.Connection) -> int:
            # batch by batch, each batch's events written with its deletion
            cleared = 0
            while keys := self.dao.delete_kind_batch(conn, self.pkind):
                now = self.now_ms()
                recorder.write(conn, [
                    recorder.event(self.pkind, EventKind.CLEARED, k, now, actor=actor)
                    for k in keys])
                cleared += len(keys)
            return cleared

        return op

    def _stuck_where(self, older_than: timedelta, now: int) -> list[sa.ColumnElement[bool]]:
        """In flight, and claimed more than ``older_than`` ago: the claim time is the lock's
        expiry less ``acquire_timeout`` (a lock renewed since counts from its renewal)."""
        age = duration_ms(older_than, "older_than")
        t = self.dao.table
        return [t.c.pkind == self.pkind, t.c.lock_uuid.is_not(None), t.c.scheduled_at > now,
                t.c.scheduled_at <= now - age + self._acquire_ms]

    def stuck_op(self, older_than: timedelta, limit: int) -> Op[list[QueuedMessage]]:
        """Up to ``limit`` messages held longer than ``older_than``, by lock expiry."""
        check_positive_int(limit, "limit")
        now = self.now_ms()
        t = self.dao.table
        stmt = (sa.select(t).where(*self._stuck_where(older_than, now))
                .order_by(t.c.scheduled_at, t.c.id).limit(limit))
        return lambda conn: [queued_message(r, self.serializer, now)
                             for r in conn.execute(stmt)]

    def release_stuck_op(self, older_than: timedelta, by: str | None = None) -> Op[int]:
        """Give back, due now, every message held longer than ``older_than`` (a consumer that
        hangs, or one that died holding a long lock); their holders' acks then fail.
        Returns how many went back."""
        check_actor(by)
        now = self.now_ms()
        where = self._stuck_where(older_than, now)
        t, dao = self.dao.table, self.dao
        actor = by or current_actor()

        def op(conn: sa.Connection) -> int:
            rows = conn.execute(dao.lock_rows(
                sa.select(t.c.id, t.c.pkey, t.c.lock_uuid, t.c.group_key, t.c.deliveries)
                .where(*where), t, skip=False)).all()
            for chunk in chunked([r.id for r in rows], dao.in_list_max):
                conn.execute(dao.by_id(sa.update(t).where(t.c.id.in_(chunk)), t, len(chunk))
                             .values(lock_uuid=None, scheduled_at=now))
            for r in rows:
                if r.group_key is not None:
                    dao.free_groups(conn, self.pkind, r.lock_uuid, [r.group_key])
            if self.recorder is not None:
                self.recorder.write(conn, [self.recorder.event(
                    self.pkind, EventKind.RELEASED, r.pkey, now, actor=actor,
                    attempt=r.deliveries, detail="stuck: released by an operator")
                    for r in rows])
            return len(rows)

        return op

    def delete_op(self, where: Sequence[sa.ColumnElement[bool]], by: str | None,
                  detail: str) -> Op[int]:
        """Delete the messages meeting ``where`` (conditions from the dialect); with history,
        each deletion's event (dropped, ``detail`` saying why) in the same transaction.
        Returns how many went."""
        recorder = self.recorder
        if recorder is None:
            stmt = sa.delete(self.dao.table).where(*where)
            return lambda conn: conn.execute(stmt).rowcount
        actor = by or current_actor()

        def op(conn: sa.Connection) -> int:
            keys = self.dao.delete_which(conn, *where)
            now = self.now_ms()
            recorder.write(conn, [
                recorder.event(self.pkind, EventKind.DROPPED, k, now, actor=actor,
                               detail=detail) for k in keys])
            return len(keys)

        return op

    # ---- history ---------------------------------------------------------------------------

    def _recording(self) -> Recorder:
        if self.recorder is None:
            raise InvalidArgumentError(
                f"queue {self.name!r} keeps no history: make it with history=True "
                "(or a retention timedelta)")
        return self.recorder

    def history_op(self, key: str) -> Op[list[HistoryEvent]]:
        """The events of ``key``, oldest first, across re-offers of the key."""
        self.check_key(key)
        return self._recording().read_op(self.pkind, key)

    def prune_op(self, older_than: timedelta, batch: int) -> Op[int]:
        """One batch of the pruning of events older than ``older_than``: how many went."""
        check_positive_int(batch, "batch")
        age = duration_ms(older_than, "older_than")
        if age < 0:
            raise InvalidArgumentError("older_than must not be negative")
        return self._recording().prune_op(self.pkind, self.now_ms() - age, batch,
                                          self.dao.in_list_max)

    def next_due_op(self) -> Op[datetime | None]:
        """When the earliest message (or expiring lock) falls due; None for an empty queue."""
        stmt = self.dao.select_next_due(self.pkind)

        def op(conn: sa.Connection) -> datetime | None:
            ms = conn.execute(stmt).scalar()
            return None if ms is None else from_ms(int(ms))

        return op

    def stats_op(self) -> Op[QueueStats]:
        now = self.now_ms()
        stmt = self.dao.select_stats(self.pkind, now)

        def op(conn: sa.Connection) -> QueueStats:
            row = conn.execute(stmt).one()
            oldest = (None if row.oldest_due is None
                      else timedelta(milliseconds=now - row.oldest_due))
            return QueueStats(due=int(row.due), scheduled=int(row.scheduled),
                              in_flight=int(row.in_flight), oldest_due_age=oldest)

        return op


def flow_control(control: Control | None) -> FlowControl:
    """A queue's settings row as the public API shows it (None: no row, no flow control)."""
    if control is None:
        return NO_FLOW_CONTROL
    period = (None if control.rate_period_ms is None
              else timedelta(milliseconds=control.rate_period_ms))
    return FlowControl(control.paused, control.rate_limit, period, control.max_in_flight,
                       control.has_groups)


def queued_message(row: sa.Row[Any], serializer: Serializer, now_ms: int) -> QueuedMessage:
    """A whole row of the queue table as the public API shows a stored message; one that
    cannot be read says why (``unreadable``) rather than failing the read or the page."""
    in_flight = row.lock_uuid is not None and row.scheduled_at > now_ms
    try:
        payload = serializer.decode(row.payload)
        times = [from_ms(ms) for ms in (row.scheduled_at_initially, row.created_at,
                                        row.scheduled_at)]
        unreadable = None
    except Exception as exc:
        payload = None
        times = [from_ms(readable_ms(ms)) for ms in (row.scheduled_at_initially,
                                                     row.created_at, row.scheduled_at)]
        unreadable = _unreadable(exc)
    scheduled_at, created_at, next_due = times
    return QueuedMessage(
        key=row.pkey, payload=payload, scheduled_at=scheduled_at, created_at=created_at,
        deliveries=row.deliveries, in_flight=in_flight, priority=row.priority,
        group=row.group_key, enqueued_by=row.enqueued_by,
        claimed_by=row.claimed_by if in_flight else None,
        locked_until=next_due if in_flight else None, next_due=next_due,
        trace_context=row.trace_context, unreadable=unreadable)


def _unreadable(exc: Exception) -> str:
    """Why a stored row cannot be read, in one line: the decoder's (or the time's) error."""
    return "".join(traceback.format_exception_only(exc)).strip()


class _Checked:
    """The messages of one offer, every one checked and encoded before anything is written.

    What it keeps for the transaction depends on the size of the call: the rows, payloads
    encoded, while they fit one statement (every small call, and any single message, a
    statement of its own however large); beyond that only each payload's encoded size and
    its due time, the rows being made again chunk by chunk as the transaction writes them.
    So a call of a million messages holds one chunk's payloads at a time beside the caller's
    messages, at the price of encoding each payload twice; a call of one statement encodes
    once, as the statement holds its payloads anyway.
    """

    def __init__(self, queue: QueueBase, messages: Sequence[Message], now: int,
                 max_rows: int, max_bytes: int) -> None:
        self.messages = messages
        self.serializer = queue.serializer
        self.at = array("q")
        self.sizes = array("q")
        kept: list[OfferRow] | None = []
        kept_bytes = 0
        keys = _checked_keys(queue, messages)
        self.has_groups = _check_priorities_and_groups(messages)
        # the messages of a call often share one due time: the same datetime is converted once
        last_when, last_at = None, now
        for message in messages:
            when = message.at
            if when is None:
                at = now
            elif when is last_when:
                at = last_at
            else:
                at = last_at = time_ms(when, "at")
                last_when = when
            payload = encode_payload(self.serializer, message.payload)
            self.at.append(at)
            self.sizes.append(len(payload))
            if kept is not None:
                kept.append(_offer_row(message, payload, at))
                kept_bytes += len(payload) + ROW_OVERHEAD
                if len(kept) > 1 and (kept_bytes > max_bytes or len(kept) > max_rows):
                    kept = None  # more than a statement: made again as it is written
        self.kept = kept
        self.earliest_ms = min(self.at)
        self.rounds = _rounds_in_lock_order(keys, queue.dao.lock_order)

    def rows(self, positions: Iterable[int]) -> list[OfferRow]:
        """The rows of the messages at ``positions``, their payloads encoded."""
        if self.kept is not None:
            return [self.kept[i] for i in positions]
        return [self._row_again(i) for i in positions]

    def _row_again(self, i: int) -> OfferRow:
        message = self.messages[i]
        payload = encode_payload(self.serializer, message.payload)
        if len(payload) != self.sizes[i]:  # what was checked is what is written
            raise InvalidArgumentError(
                f"the payload of {message.key!r} changed while it was being offered")
        return _offer_row(message, payload, self.at[i])

    def chunks(self, max_rows: int, max_bytes: int) -> list[memoryview]:
        """Cut each round's positions into chunks of at most ``max_rows`` rows and
        ``max_bytes`` of payload and row overhead (a single larger row gets a chunk of its
        own), so statements stay within what the database accepts."""
        chunks: list[memoryview] = []
        for positions in self.rounds:
            view = memoryview(positions)
            lo, size = 0, 0
            for hi, i in enumerate(positions):
                n = self.sizes[i] + ROW_OVERHEAD
                if hi > lo and (hi - lo == max_rows or size + n > max_bytes):
                    chunks.append(view[lo:hi])
                    lo, size = hi, 0
                size += n
            chunks.append(view[lo:])
        return chunks

    def check_sizes(self, budget: PayloadBudget, database: str) -> None:
        """Refuse, before anything is written, a message the database would not take."""
        if budget.message is None or max(self.sizes) <= budget.message:
            return
        i = next(i for i, size in enumerate(self.sizes) if size > budget.message)
        raise InvalidArgumentError(
            f"the payload of {self.messages[i].key!r} is {self.sizes[i]:,} bytes encoded; "
            f"{database} takes at most {budget.message:,} ({budget.why})")


def _offer_row(message: Message, payload: bytes, at_ms: int) -> OfferRow:
    return OfferRow(message.key, payload, at_ms, bool(message.update), message.priority,
                    message.group)


def _checked_keys(queue: QueueBase, messages: Sequence[Message]) -> list[str]:
    """The keys of ``messages``, each checked (and each message checked to be a Message)."""
    if not all(isinstance(message, Message) for message in messages):
        index, item = next((i, m) for i, m in enumerate(messages) if not isinstance(m, Message))
        raise InvalidArgumentError(
            f"offer_many takes Message objects; item {index} is {type(item).__name__}")
    keys = [message.key for message in messages]
    check_texts(keys, "key", KEY_LENGTH)
    queue.dao.check_keys(keys)
    return keys


def _check_priorities_and_groups(messages: Sequence[Message]) -> bool:
    """Check the priority and group of each of ``messages``; whether any has a group."""
    priorities = [message.priority for message in messages]
    if (not all(type(p) is int for p in priorities)
            or min(priorities) < MIN_PRIORITY or max(priorities) > MAX_PRIORITY):
        for priority in priorities:
            check_priority(priority)
    groups = [message.group for message in messages if message.group is not None]
    check_texts(groups, "group", KEY_LENGTH)
    return bool(groups)


def _rounds_in_lock_order(keys: Sequence[str],
                          lock_order: Callable[[str], str | bytes]) -> list[array[int]]:
    """The positions of ``keys`` in rounds in which each key occurs once (a key's n-th
    occurrence goes in round n, so a repeated key is applied in order), each round in lock
    order. A stable sort puts a key's occurrences side by side, in input order (``lock_order``
    tells keys apart: it is the key itself, or its bytes in the database's collation)."""
    rounds: list[array[int]] = [array("q")]
    previous, repeat = None, 0
    order = list(map(lock_order, keys))
    for i in sorted(range(len(keys)), key=lambda i: order[i]):
        key = keys[i]
        repeat = repeat + 1 if key == previous else 0
        previous = key
        if repeat == len(rounds):
            rounds.append(array("q"))
        rounds[repeat].append(i)
    return rounds


def _describe_offer(row: OfferRow) -> str:
    """An offer event's detail: when the message is due, and its priority and group."""
    parts = [f"due {from_ms(row.at_ms).isoformat()}"]
    if row.priority:
        parts.append(f"priority {row.priority}")
    if row.group is not None:
        parts.append(f"group {row.group}")
    return ", ".join(parts)


def check_priority(priority: Any) -> None:
    if (not isinstance(priority, int) or isinstance(priority, bool)
            or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
        raise InvalidArgumentError(
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, "
            f"got {priority!r}")


def _check_limit(limit: Any) -> None:
    check_positive_int(limit, "limit")
    if limit > MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be at most {MAX_LIMIT}, got {limit}")
