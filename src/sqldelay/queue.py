# Generated from queue_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""The face of one queue (one name and payload type) in the shared table, for this front end.

``queue_base`` decides what is sent (checks, statements, the offer's chunks); this module only
runs its operations, so both front ends take the same arguments, answer the same outcomes and
raise the same errors: bad input fails while an operation is built, before any I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from .clock import Clock
from .concurrency import Connection, Engine, engine_problem
from .cron import CronService
from .errors import InvalidArgumentError
from .executor import Executor
from .messages import Envelope, Message, OfferOutcome, QueuedMessage, QueueStats
from .queue_base import QueueBase
from .schema import DEFAULT_TABLE
from .serializers import Serializer


class DelayedQueue(QueueBase):
    """A durable delayed queue named ``name`` in ``table_name``, over any supported engine.

    ``connection=`` on any method joins the caller's transaction: the operation neither
    commits nor retries there.
    """

    def __init__(self, engine: Engine, name: str, *, serializer: Serializer | None = None,
                 acquire_timeout: timedelta = timedelta(minutes=5),
                 table_name: str = DEFAULT_TABLE, clock: Clock | None = None) -> None:
        problem = engine_problem(engine, type(self).__name__)
        if problem:
            raise InvalidArgumentError(problem)
        super().__init__(engine, name, serializer=serializer, acquire_timeout=acquire_timeout,
                         table_name=table_name, clock=clock)
        self.executor = Executor(engine, self.dao)

    # ---- producing -----------------------------------------------------------------------

    def offer(self, key: str, payload: Any, at: datetime | None = None, *,
              update: bool = True,
              connection: Connection | None = None) -> OfferOutcome:
        """Schedule ``payload`` under ``key`` for ``at`` (now when None).

        CREATED for a new key; with ``update=True`` an existing message gets the new payload
        and due time (UPDATED; an in-flight one loses its lock) unless both are unchanged
        (IGNORED); with ``update=False`` an existing key is left alone (IGNORED).
        """
        outcomes = self.offer_many([Message(key, payload, at, update)],
                                   connection=connection)
        return outcomes[0]

    def offer_many(self, messages: Iterable[Message], *,
                   connection: Connection | None = None) -> list[OfferOutcome]:
        """Offer many messages, one round trip (or a few) per chunk; outcomes in input order.

        A key that appears twice is applied in order, as two offers would be. Each chunk's
        keys, and the chunks, go in the database's lock order, so producers of overlapping
        batches cannot deadlock on each other.
        """
        plan = self.plan_offer(messages)
        if plan is None:
            return []
        return self.executor.run(plan.op, write=True, connection=connection,
                                 one_statement=plan.one_statement, offer=True)

    # ---- consuming -----------------------------------------------------------------------

    def poll(self, *, connection: Connection | None = None) -> Envelope | None:
        """Claim the earliest due message for ``acquire_timeout``, or None when none is due."""
        got = self.poll_many(1, connection=connection)
        return got[0] if got else None

    def poll_many(self, limit: int, *,
                  connection: Connection | None = None) -> list[Envelope]:
        """Claim up to ``limit`` due messages (earliest first) under one lock id."""
        return self.executor.run(self.claim_op(limit), write=True, connection=connection,
                                 one_statement=self.dao.claim_is_one_statement)

    def ack(self, envelope: Envelope, *,
            connection: Connection | None = None) -> bool:
        """Delete a claimed message; False when its lock is stale (nothing deleted)."""
        return self.executor.run(self.ack_op(envelope), write=True, connection=connection,
                                 one_statement=True)

    def ack_many(self, envelopes: Sequence[Envelope], *,
                 connection: Connection | None = None) -> int:
        """Delete claimed messages, one statement per claim batch; returns how many were."""
        planned = self.ack_many_op(envelopes)
        if planned is None:
            return 0
        op, one = planned
        return self.executor.run(op, write=True, connection=connection, one_statement=one)

    def release(self, envelope: Envelope, *, delay: timedelta | None = None,
                connection: Connection | None = None) -> bool:
        """Give a claimed message back: due now, or after ``delay``. False if the lock is stale."""
        return self.executor.run(self.release_op(envelope, delay), write=True,
                                 connection=connection, one_statement=True)

    def extend(self, envelope: Envelope, by: timedelta | None = None, *,
               connection: Connection | None = None) -> bool:
        """Keep the lock ``by`` (default: acquire_timeout) from now. False if already lost."""
        return self.executor.run(self.extend_op(envelope, by), write=True,
                                 connection=connection, one_statement=True)

    # ---- inspecting and removing ----------------------------------------------------------

    def get(self, key: str, *,
            connection: Connection | None = None) -> QueuedMessage | None:
        """Read a message without locking or changing it."""
        return self.executor.run(self.get_op(key), write=False, connection=connection,
                                 one_statement=True)

    def contains(self, key: str, *, connection: Connection | None = None) -> bool:
        return self.executor.run(self.contains_op(key), write=False,
                                 connection=connection, one_statement=True)

    def drop(self, key: str, *, connection: Connection | None = None) -> bool:
        """Delete a message whatever its state; True if there was one."""
        return self.executor.run(self.drop_op(key), write=True, connection=connection,
                                 one_statement=True)

    def clear(self, *, connection: Connection | None = None) -> int:
        """Delete every message of this queue; returns how many."""
        return self.executor.run(self.clear_op(), write=True, connection=connection,
                                 one_statement=True)

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
