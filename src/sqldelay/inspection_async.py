"""Inspecting a queue table from this front end: every queue with its counts, and one queue's
messages by state. ``inspection_base`` holds what is sent; this module runs it."""

from __future__ import annotations

from collections.abc import Sequence

from .clock import Clock
from .concurrency_async import AsyncConnection, AsyncEngine, engine_problem
from .errors import InvalidArgumentError
from .executor_async import AsyncExecutor
from .inspection_base import InspectorBase, MessagePage, QueuePage, QueueSummary
from .messages import FlowControl
from .schema import DEFAULT_TABLE
from .serializers import Serializer


class AsyncInspector(InspectorBase):
    """Read-only views of every queue in queue table ``table_name``."""

    engine: AsyncEngine

    def __init__(self, engine: AsyncEngine, *, table_name: str = DEFAULT_TABLE,
                 clock: Clock | None = None) -> None:
        problem = engine_problem(engine, type(self).__name__)
        if problem:
            raise InvalidArgumentError(problem)
        super().__init__(engine, table_name=table_name, clock=clock)
        self.executor = AsyncExecutor(engine, self.dao)

    async def queues(self, *, connection: AsyncConnection | None = None) -> list[QueueSummary]:
        """Every queue with messages or dead letters: due, scheduled, in flight, dead letters
        and the oldest due message's age, read for all queues at once."""
        return await self.executor.run(self.queues_op(), write=False, connection=connection)

    async def flow_controls(self, queues: Sequence[tuple[str, str]] | None = None, *,
                            connection: AsyncConnection | None = None
                            ) -> dict[tuple[str, str], FlowControl]:
        """The flow control (pause, limits) of ``queues``, as (name, payload type) pairs, or
        of every queue that has any (None), by (name, payload type), in one read; a queue
        that has none is left out."""
        return await self.executor.run(self.flow_controls_op(queues), write=False,
                                       connection=connection)

    async def queues_page(self, *, limit: int = 50, after: str | None = None,
                          prefix: str | None = None,
                          connection: AsyncConnection | None = None) -> QueuePage:
        """A page of ``queues``: at most ``limit`` queues whose name starts with ``prefix``,
        in the database's order of "name|payload type" (bytes); ``after`` is the previous
        page's ``next_after``. For a table of many queues, where ``queues`` would read and
        send every one."""
        return await self.executor.run(self.queues_page_op(limit, after, prefix),
                                       write=False, connection=connection,
                                       one_statement=True)

    async def peek(self, queue: str, state: str = "due", *, limit: int = 50,
                   key_prefix: str | None = None, after: str | None = None,
                   serializer: Serializer | None = None,
                   connection: AsyncConnection | None = None) -> MessagePage:
        """Messages of ``queue`` (payloads of ``serializer``'s type, JSON by default) that
        are ``state`` — "due", "in_flight" or "scheduled" — in due order, without locking
        them; ``key_prefix`` keeps the keys that start with it; ``after`` is the previous
        page's ``next_after``."""
        return await self.executor.run(
            self.peek_op(queue, state, limit, key_prefix, after, serializer), write=False,
            connection=connection, one_statement=True)
