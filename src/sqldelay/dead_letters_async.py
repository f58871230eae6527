"""The dead letters of a queue table, for this front end: list, requeue and drop them.
``dead_letters_base`` holds what is sent; this module runs it."""

from __future__ import annotations

import builtins  # ``list`` in the class is its method
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from .clock import Clock
from .concurrency_async import AsyncConnection, AsyncEngine, engine_problem
from .dead_letters_base import DeadLetter, DeadLettersBase
from .errors import InvalidArgumentError
from .executor_async import AsyncExecutor
from .messages import Envelope
from .schema import DEFAULT_TABLE

if TYPE_CHECKING:
    from .queue_async import AsyncDelayedQueue


class AsyncDeadLetters(DeadLettersBase):
    """The dead letters of every queue in queue table ``table_name``."""

    engine: AsyncEngine

    def __init__(self, engine: AsyncEngine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None, history: bool = False) -> None:
        problem = engine_problem(engine, type(self).__name__)
        if problem:
            raise InvalidArgumentError(problem)
        super().__init__(engine, table_name=table_name, clock=clock, history=history)
        self.executor = AsyncExecutor(engine, self.dao)

    async def bury(self, envelope: Envelope[AsyncDelayedQueue], error: str, *,
                   connection: AsyncConnection | None = None) -> bool:
        """Move a claimed message here, in one transaction: delete it (by id and lock) and
        insert its dead letter. False, and nothing written, when the lock was lost."""
        return await envelope.queue.executor.run(self.bury_op(envelope, error), write=True,
                                                 connection=connection)

    async def list(self, queue: str | None = None, *, limit: int = 100, offset: int = 0,
                   key: str | None = None,
                   connection: AsyncConnection | None = None) -> list[DeadLetter]:
        """The oldest ``limit`` dead letters after the first ``offset`` (pages), of one queue
        name or of all; only those of ``key`` when given."""
        return await self.executor.run(self.list_op(queue, limit, offset, key), write=False,
                                       connection=connection)

    async def count(self, queue: str | None = None, *,
                    connection: AsyncConnection | None = None) -> int:
        return await self.executor.run(self.count_op(queue), write=False, connection=connection)

    async def ids(self, queue: str | None = None, *,
                  connection: AsyncConnection | None = None) -> builtins.list[int]:
        """Every dead letter id, of one queue name or of all (for "requeue/drop them all")."""
        return await self.executor.run(self.ids_op(queue), write=False, connection=connection)

    async def requeue(self, ids: Sequence[int], *, at: datetime | None = None,
                      by: str | None = None,
                      connection: AsyncConnection | None = None) -> int:
        """Put dead letters back in their queues, due at ``at`` (now when None), with a fresh
        attempt count; in one transaction. A key that was offered again meanwhile gets the
        dead letter's payload and due time. Returns how many went back."""
        return await self.executor.run(self.requeue_op(ids, at, by), write=True,
                                       connection=connection, read_committed=True)

    async def drop(self, ids: Sequence[int], *, by: str | None = None,
                   connection: AsyncConnection | None = None) -> int:
        """Delete dead letters for good; returns how many were deleted."""
        return await self.executor.run(self.drop_op(ids, by), write=True, connection=connection)
