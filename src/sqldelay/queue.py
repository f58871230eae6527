# Generated from queue_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""The face of one queue (one name and payload type) in the shared table, for this front end.

``queue_base`` decides what is sent (checks, statements, the offer's chunks); this module only
runs its operations, so both front ends take the same arguments, answer the same outcomes and
raise the same errors: bad input fails while an operation is built, before any I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa

from .clock import Clock
from .concurrency import Connection, Engine, engine_problem
from .cron import CronService
from .errors import InvalidArgumentError, NeedsTransaction, Raced
from .executor import Executor
from .history import History, HistoryEvent
from .listeners import QueueListener
from .messages import Envelope, FlowControl, Message, OfferOutcome, QueuedMessage, QueueStats
from .outages import seconds_of
from .queue_base import Call, OfferPlan, Op, QueueBase, Undecodable
from .schema import DEFAULT_TABLE
from .serializers import Serializer
from .tracing import ACK, CLAIM, OFFER, Tracer

log = logging.getLogger("sqldelay")

T = TypeVar("T")


class DelayedQueue(QueueBase):
    """A durable delayed queue named ``name`` in ``table_name``, over any supported engine.

    ``connection=`` on any method joins the caller's transaction: the operation neither
    commits nor retries there.
    """

    def __init__(self, engine: Engine, name: str, *, serializer: Serializer | None = None,
                 acquire_timeout: timedelta = timedelta(minutes=5),
                 table_name: str = DEFAULT_TABLE, clock: Clock | None = None,
                 history: bool | timedelta | History | None = None,
                 listeners: Sequence[QueueListener] = (),
                 tracer: Tracer | None = None,
                 patience: timedelta | float | None = None) -> None:
        """``history``: keep each message's events in ``<table>_history`` (True; a timedelta:
        for that long, pruned by workers; a History for more settings); the table comes from
        ``create_schema(history=True)``. ``listeners`` hear of offers (metrics); ``tracer``
        makes spans of offers, claims, acks and handlers (``sqldelay.otel``). ``patience``:
        how long a call without ``connection=`` waits out a database that went away (a
        failover, a restart) before it raises (seconds or a timedelta; None: the process's
        default, ``sqldelay.outages``)."""
        problem = engine_problem(engine, type(self).__name__)
        if problem:
            raise InvalidArgumentError(problem)
        super().__init__(engine, name, serializer=serializer, acquire_timeout=acquire_timeout,
                         table_name=table_name, clock=clock, history=history,
                         listeners=listeners, tracer=tracer)
        self.executor = Executor(
            engine, self.dao, patience=None if patience is None else seconds_of(patience))

    # ---- producing -----------------------------------------------------------------------

    def offer(self, key: str, payload: Any, at: datetime | None = None, *,
              update: bool = True, priority: int = 0, group: str | None = None,
              by: str | None = None,
              connection: Connection | None = None) -> OfferOutcome:
        """Schedule ``payload`` under ``key`` for ``at`` (now when None).

        CREATED for a new key; with ``update=True`` an existing message gets the new payload,
        due time, priority and group (UPDATED; an in-flight one loses its lock) unless all are
        unchanged (IGNORED); with ``update=False`` an existing key is left alone (IGNORED).
        Among due messages a higher ``priority`` is claimed first; messages of one ``group``
        are handled one at a time, in claim order. ``by`` names the producer (stored as
        ``enqueued_by``; with history its default is this process, host:pid).
        """
        outcomes = self.offer_many([Message(key, payload, at, update, priority, group)],
                                   by=by, connection=connection)
        return outcomes[0]

    def offer_many(self, messages: Iterable[Message], *, by: str | None = None,
                   connection: Connection | None = None) -> list[OfferOutcome]:
        """Offer many messages, one round trip (or a few) per chunk; outcomes in input order.

        A key that appears twice is applied in order, as two offers would be. Each chunk's
        keys, and the chunks, go in the database's lock order, so producers of overlapping
        batches cannot deadlock on each other. Every message is checked before anything is
        written, and the call is one transaction. A call larger than one statement does not
        hold every encoded payload at once: it encodes each chunk's payloads again as it
        writes them, so the payload objects must not change until it returns.
        """
        messages = list(messages)
        if not messages:
            return []
        with self.tracer.span(OFFER, self.name, len(messages)):
            plan = self.plan_offer(messages, by)  # stores the span's context, when traced
            if self.clock_unread:  # checked: planned again on the database's time
                self.now()
                plan = self.plan_offer(messages, by)
            return self.run_offer(plan, connection=connection)

    def run_offer(self, plan: OfferPlan | None, *,
                  connection: Connection | None = None) -> list[OfferOutcome]:
        """Run an offer planned (checked and encoded) by ``plan_offer``: a sharded queue checks
        every shard's part before it writes any."""
        if plan is None:
            return []
        outcomes: list[OfferOutcome] | None = None
        if plan.first is not None and connection is None:
            try:
                # its insert is atomic alone (what follows it there, a wake-up, writes
                # nothing): in autocommit where the database gains by it
                outcomes = self.executor.run(plan.first, write=True, one_statement=True)
            except sa.exc.DBAPIError as exc:
                if not self.first_failed(exc):
                    raise
        if outcomes is None:
            offered: list[OfferOutcome] = self.executor.run(
                plan.op, write=True, connection=connection, one_statement=plan.one_statement,
                read_committed=True)
            outcomes = offered
        if connection is None:  # committed (in the caller's transaction: maybe not)
            self.offered(plan, outcomes)
            if self.statistics_due(outcomes):
                try:
                    self.executor.run(self.statistics_op(), write=True)
                except sa.exc.DBAPIError as exc:  # the offer stands
                    log.warning("could not gather the planner statistics of table %s: %s",
                                self.dao.table.name, exc)
        self.events.emit("offered", self.name, outcomes)
        return outcomes

    def now(self) -> datetime:
        """The time as the queue counts it: the database server's, unless the queue was made
        with a ``clock=`` of its own. A round trip only where the database clock's offset
        is due to be measured (once per engine every 30 s)."""
        if self.clock_due:
            return self.executor.run(self.now_op(), write=False, one_statement=True)
        return self.clock.now()

    # ---- consuming -----------------------------------------------------------------------

    def poll(self, *, by: str | None = None,
             connection: Connection | None = None) -> Envelope[DelayedQueue] | None:
        """Claim the first due message for ``acquire_timeout``, or None when none is due."""
        got = self.poll_many(1, by=by, connection=connection)
        return got[0] if got else None

    def poll_many(self, limit: int, *, by: str | None = None,
                  connection: Connection | None = None,
                  ack: Sequence[Envelope[DelayedQueue]] = ()
                  ) -> list[Envelope[DelayedQueue]]:
        """Claim up to ``limit`` due messages under one lock id: higher priority first, then
        earlier due; within the queue's flow control (pause, limits, groups). ``by`` names
        the consumer (stored as ``claimed_by``; with history its default is this thread or
        task, host:pid:name). ``ack``: messages this consumer is done with, acked first
        (as ``ack_many``), on PostgreSQL in the claim's own statement: one round trip for
        the ack of a batch and the claim of the next."""
        acks = self.acks_riding(ack)
        if ack and acks is None:
            self.ack_many(ack, connection=connection)
        op, undecodable = self.claim_op(limit, by, own_transaction=connection is None,
                                        acks=acks or ())
        read_committed = not self.backlog
        with ExitStack() as spans:
            if acks:  # the ack sent in the claim's statement: its span holds the claim's
                spans.enter_context(self.tracer.span(ACK, self.name, len(ack)))
            spans.enter_context(self.tracer.span(CLAIM, self.name, limit))
            envelopes = self._claim(op, connection, read_committed)
        if undecodable:
            self._bury_undecodable(undecodable, connection)
        return envelopes

    def _claim(self, op: Op[list[Envelope[DelayedQueue]]],
               connection: Connection | None,
               read_committed: bool) -> list[Envelope[DelayedQueue]]:
        run = partial(self.executor.run, op, write=True, connection=connection,
                      read_committed=read_committed)
        try:
            return run(one_statement=self.claim_alone)
        except NeedsTransaction:  # a queue under flow control: claimed in a transaction
            pass
        try:
            return run()
        except Raced:  # its rate-limit tokens spent by another claim: locked first
            return run()

    def _bury_undecodable(self, undecodable: list[Undecodable],
                          connection: Connection | None) -> None:
        """Messages a claim could not decode go to the dead letters, never to the caller (a
        row written by hand or by another client must not stop a worker). Where that fails,
        they come back when their locks expire and are tried again."""
        for u in undecodable:
            log.error("message %r of queue %s moved to the dead letters: %s", u.envelope.key,
                      self.name, u.error)
        try:
            self.executor.run(self.bury_undecodable_op(undecodable), write=True,
                              connection=connection)
        except sa.exc.DBAPIError as exc:
            log.warning("could not move undecodable messages of queue %s to the dead letters "
                        "(they come back when their locks expire): %s", self.name, exc)

    def ack(self, envelope: Envelope[DelayedQueue], *,
            connection: Connection | None = None) -> bool:
        """Delete a claimed message; False when its lock is stale (nothing deleted)."""
        call = self.ack_call(envelope)
        with self.tracer.span(ACK, self.name, 1):
            acked = self._run(call, connection)
        envelope.settled = acked or envelope.settled
        return acked

    def ack_many(self, envelopes: Sequence[Envelope[DelayedQueue]], *,
                 connection: Connection | None = None) -> int:
        """Delete claimed messages, one statement per claim batch; returns how many were."""
        call = self.ack_many_call(envelopes)
        if call is None:
            return 0
        with self.tracer.span(ACK, self.name, len(envelopes)):
            return self._run(call, connection)

    def release(self, envelope: Envelope[DelayedQueue], *,
                delay: timedelta | None = None, error: str | None = None,
                connection: Connection | None = None) -> bool:
        """Give a claimed message back: due now, or after ``delay``. False if the lock is stale.
        ``error`` says why, when its handling failed (the history records a failure)."""
        released = self._run(self.release_call(envelope, delay, error), connection)
        envelope.settled = released or envelope.settled
        return released

    def extend(self, envelope: Envelope[DelayedQueue], by: timedelta | None = None, *,
               connection: Connection | None = None) -> bool:
        """Keep the lock ``by`` (default: acquire_timeout) from now. False if already lost."""
        return self._run(self.extend_call(envelope, by), connection)

    def extend_many(self, envelopes: Sequence[Envelope[DelayedQueue]],
                    by: timedelta | None = None, *,
                    connection: Connection | None = None
                    ) -> list[Envelope[DelayedQueue]]:
        """``extend`` of many claimed messages, one statement per claim batch: the envelopes
        whose locks still held (the others were lost)."""
        if not envelopes:
            return []
        return self._run(self.extend_many_call(envelopes, by), connection)

    def _run(self, call: Call[T], connection: Connection | None) -> T:
        done: T = self.executor.run(call.op, write=True, connection=connection,
                                    one_statement=call.one_statement,
                                    read_committed=call.frees_groups)
        if call.drop_groups is None:
            return done
        if connection is not None:
            self.executor.run(call.drop_groups, write=True, connection=connection)
            return done
        try:
            self.executor.run(call.drop_groups, write=True, read_committed=True)
        except Exception as exc:  # what the call was for is done
            log.warning("queue %s: could not drop the rows of groups left empty; they stay, "
                        "empty, until their groups' next messages are acked: %s",
                        self.name, exc)
        return done

    # ---- flow control: stored in the database, obeyed by every consumer -------------------

    def pause(self, *, connection: Connection | None = None) -> None:
        """Stop claims from this queue, in every process, from their next claim on (offers
        still land; messages in flight finish)."""
        self.executor.run(self.settings_op(paused=1), write=True, connection=connection)

    def resume(self, *, connection: Connection | None = None) -> None:
        self.executor.run(self.settings_op(paused=0), write=True, connection=connection)

    def set_rate_limit(self, limit: int | None, per: timedelta = timedelta(seconds=1), *,
                       connection: Connection | None = None) -> None:
        """At most ``limit`` messages claimed per ``per``, by all consumers together (a token
        bucket that holds one period's worth); None lifts the limit."""
        self.executor.run(self.rate_limit_op(limit, per), write=True,
                          connection=connection)

    def set_concurrency_limit(self, limit: int | None, *,
                              connection: Connection | None = None) -> None:
        """At most ``limit`` messages of this queue in flight at once, across all consumers;
        None lifts the limit."""
        self.executor.run(self.concurrency_limit_op(limit), write=True,
                          connection=connection)

    def flow_control(self, *,
                     connection: Connection | None = None) -> FlowControl:
        """The queue's pause and limits as stored in the database."""
        return self.executor.run(self.flow_control_op(), write=False,
                                 connection=connection)

    # ---- inspecting and removing ----------------------------------------------------------

    def get(self, key: str, *,
            connection: Connection | None = None) -> QueuedMessage | None:
        """Read a message without locking or changing it."""
        return self.executor.run(self.get_op(key), write=False, connection=connection,
                                 one_statement=True)

    def contains(self, key: str, *, connection: Connection | None = None) -> bool:
        return self.executor.run(self.contains_op(key), write=False,
                                 connection=connection, one_statement=True)

    def drop(self, key: str, *, by: str | None = None,
             connection: Connection | None = None) -> bool:
        """Delete a message whatever its state; True if there was one."""
        return self.executor.run(self.drop_op(key, by), write=True,
                                 connection=connection, one_statement=self.recorder is None)

    def clear(self, *, by: str | None = None,
              connection: Connection | None = None) -> int:
        """Delete every message of this queue; returns how many."""
        return self.executor.run(self.clear_op(by), write=True, connection=connection,
                                 one_statement=self.recorder is None)

    # ---- history (queues made with history=) -------------------------------------------------

    def history(self, key: str, *,
                connection: Connection | None = None) -> list[HistoryEvent]:
        """What happened to the message(s) of ``key``, oldest first: offers, claims, acks,
        failures... kept after the message is gone, until pruned."""
        return self.executor.run(self.history_op(key), write=False, connection=connection,
                                 one_statement=True)

    def prune_history(self, older_than: timedelta | None = None, *,
                      batch: int = 1000) -> int:
        """Delete the events older than ``older_than`` (default: the queue's retention),
        ``batch`` at a time, each batch in a transaction of its own; returns how many."""
        if older_than is None:
            if self.history_settings is None or self.history_settings.retention is None:
                raise InvalidArgumentError(
                    "prune_history needs older_than: this queue has no history retention")
            older_than = self.history_settings.retention
        pruned = 0
        while True:
            gone = self.executor.run(self.prune_op(older_than, batch), write=True)
            pruned += gone
            if gone < batch:
                return pruned

    def stuck(self, older_than: timedelta, *, limit: int = 100,
              connection: Connection | None = None) -> list[QueuedMessage]:
        """Messages in flight that were claimed more than ``older_than`` ago (the lock's
        expiry less ``acquire_timeout``), earliest expiry first."""
        return self.executor.run(self.stuck_op(older_than, limit), write=False,
                                 connection=connection, one_statement=True)

    def release_stuck(self, older_than: timedelta, *, by: str | None = None,
                      connection: Connection | None = None) -> int:
        """Give back, due now, every message claimed more than ``older_than`` ago whose lock
        still holds; their holders' acks then delete nothing. Returns how many."""
        return self.executor.run(self.release_stuck_op(older_than, by), write=True,
                                 connection=connection)

    def next_due(self, *, connection: Connection | None = None) -> datetime | None:
        """When the earliest message (or expiring lock) falls due; None for an empty queue.

        A worker with nothing to do sleeps until then instead of polling at a fixed rate.
        """
        return self.executor.run(self.next_due_op(), write=False, connection=connection,
                                 one_statement=True)

    def stats(self, *, connection: Connection | None = None) -> QueueStats:
        """How many messages are due, scheduled (not yet due) and in flight, and how long the
        oldest due one has waited."""
        return self.executor.run(self.stats_op(), write=False, connection=connection,
                                 one_statement=True)

    def cron(self, *, refresh: timedelta = timedelta(minutes=1)) -> CronService:
        """Recurring messages of this queue: ``q.cron().install_cron("nightly", "0 2 * * *")``."""
        return CronService(self, refresh=refresh)
