# Generated from dead_letters_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""The dead letters of a queue table, for this front end: list, requeue and drop them.
``dead_letters_base`` holds what is sent; this module runs it."""

from __future__ import annotations

import builtins  # ``list`` in the class is its method
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from .clock import Clock
from .concurrency import Connection, Engine, engine_problem
from .dead_letters_base import DeadLetter, DeadLettersBase
from .errors import InvalidArgumentError
from .executor import Executor
from .messages import Envelope
from .schema import DEFAULT_TABLE

if TYPE_CHECKING:
    from .queue import DelayedQueue


class DeadLetters(DeadLettersBase):
    """The dead letters of every queue in queue table ``table_name``."""

    engine: Engine

    def __init__(self, engine: Engine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None, history: bool = False) -> None:
        problem = engine_problem(engine, type(self).__name__)
        if problem:
            raise InvalidArgumentError(problem)
        super().__init__(engine, table_name=table_name, clock=clock, history=history)
        self.executor = Executor(engine, self.dao)

    def bury(self, envelope: Envelope[DelayedQueue], error: str, *,
             connection: Connection | None = None) -> bool:
        """Move a claimed message here, in one transaction: delete it (by id and lock) and
        insert its dead letter. False, and nothing written, when the lock was lost."""
        return envelope.queue.executor.run(self.bury_op(envelope, error), write=True,
                                           connection=connection)

    def list(self, queue: str | None = None, *, limit: int = 100, offset: int = 0,
             key: str | None = None,
             connection: Connection | None = None) -> list[DeadLetter]:
        """The oldest ``limit`` dead letters after the first ``offset`` (pages), of one queue
        name or of all; only those of ``key`` when given."""
        return self.executor.run(self.list_op(queue, limit, offset, key), write=False,
                                 connection=connection)

    def count(self, queue: str | None = None, *,
              connection: Connection | None = None) -> int:
        return self.executor.run(self.count_op(queue), write=False, connection=connection)

    def ids(self, queue: str | None = None, *,
            connection: Connection | None = None) -> builtins.list[int]:
        """Every dead letter id, of one queue name or of all (for "requeue/drop them all")."""
        return self.executor.run(self.ids_op(queue), write=False, connection=connection)

    def requeue(self, ids: Sequence[int], *, at: datetime | None = None,
                by: str | None = None,
                connection: Connection | None = None) -> int:
        """Put dead letters back in their queues, due at ``at`` (now when None), with a fresh
        attempt count; in one transaction. A key that was offered again meanwhile gets the
        dead letter's payload and due time. Returns how many went back."""
        return self.executor.run(self.requeue_op(ids, at, by), write=True,
                                 connection=connection, read_committed=True)

    def drop(self, ids: Sequence[int], *, by: str | None = None,
             connection: Connection | None = None) -> int:
        """Delete dead letters for good; returns how many were deleted."""
        return self.executor.run(self.drop_op(ids, by), write=True, connection=connection)
