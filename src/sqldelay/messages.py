"""The values that cross the public API: what goes in (Message) and what comes out."""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncConnection

    from .queue import DelayedQueue
    from .queue_async import AsyncDelayedQueue


class OfferOutcome(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    IGNORED = "ignored"


class Delivery(enum.Enum):
    FIRST = "first"
    REDELIVERY = "redelivery"


@dataclass(frozen=True, slots=True)
class Message:
    """One message for ``offer_many``; ``at=None`` means due now. Among due messages a higher
    ``priority`` is claimed first; messages sharing a ``group`` are handled one at a time."""

    key: str
    payload: Any
    at: datetime | None = None
    update: bool = True
    priority: int = 0
    group: str | None = None


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A stored message as ``DelayedQueue.get`` reads it, without locking it."""

    key: str
    payload: Any
    scheduled_at: datetime
    created_at: datetime
    deliveries: int
    in_flight: bool
    priority: int = 0
    group: str | None = None
    enqueued_by: str | None = None  # kept by queues with history, or when given
    claimed_by: str | None = None  # while in flight: who holds it (likewise)
    locked_until: datetime | None = None  # while in flight: when its lock runs out
    # when it may next be claimed: its due time, later while a retry waits, and the lock's
    # expiry while in flight (scheduled_at stays the time its producer asked for)
    next_due: datetime | None = None
    # the producer's trace context, kept by a queue whose tracer stores one (otel.py)
    trace_context: str | None = None
    # why the stored row cannot be read (written by hand or by another client): its payload
    # is then None and a time past the years 1-9999 shows as the nearest it can be; a worker
    # that claims it moves it to the dead letters
    unreadable: str | None = None


@dataclass(frozen=True, slots=True)
class FlowControl:
    """A queue's flow control as stored in the database, for every process: paused, at most
    ``rate_limit`` claims per ``rate_period``, at most ``concurrency_limit`` in flight (None:
    no limit), and whether it has had grouped messages."""

    paused: bool
    rate_limit: int | None
    rate_period: timedelta | None
    concurrency_limit: int | None
    groups: bool


# the flow control of a queue that has none: not paused, no limits, no groups yet
NO_FLOW_CONTROL = FlowControl(False, None, None, None, False)


@dataclass(frozen=True, slots=True)
class QueueStats:
    due: int
    scheduled: int
    in_flight: int
    oldest_due_age: timedelta | None


# the queue that claimed an envelope: DelayedQueue or AsyncDelayedQueue. Covariant (nothing
# assigns an envelope's queue): code serving both front ends takes an Envelope[QueueBase].
_Q = TypeVar("_Q", covariant=True)


@dataclass(slots=True, eq=False)
class Envelope(Generic[_Q]):
    """A claimed message. Ack it to delete it; otherwise it is due again at ``locked_until``.

    One class for both front ends, typed by the queue that claimed it: ``AsyncEnvelope``
    (``Envelope[AsyncDelayedQueue]``), from an asyncio queue, is acked with ``await
    env.ack()``; ``Envelope`` alone is the blocking front's."""

    key: str
    payload: Any
    scheduled_at: datetime
    created_at: datetime
    attempt: int
    locked_until: datetime
    priority: int
    group: str | None
    row_id: int = field(repr=False)
    lock: str = field(repr=False)
    queue: _Q = field(repr=False)
    enqueued_by: str | None = None  # who offered it (queues with history, or when given)
    claimed_by: str | None = None  # who claimed it: this consumer's name, when it has one
    trace_context: str | None = None  # the producer's trace context, stored by a traced offer
    # acked or released by its holder (its handler, a task registry): a worker then sends no
    # ack of its own, which could delete nothing
    settled: bool = field(default=False, repr=False)

    @property
    def delivery(self) -> Delivery:
        return Delivery.FIRST if self.attempt == 1 else Delivery.REDELIVERY

    @overload
    def ack(self: Envelope[DelayedQueue], *,
            connection: sa.Connection | None = None) -> bool: ...

    @overload
    def ack(self: Envelope[AsyncDelayedQueue], *,
            connection: AsyncConnection | None = None) -> Awaitable[bool]: ...

    def ack(self: Envelope[Any], *, connection: Any = None) -> Any:
        """Delete the message; False when the lock was lost (expired and re-claimed, or the
        message was replaced by an update) and so nothing was deleted."""
        return self.queue.ack(self, connection=connection)

    @overload
    def release(self: Envelope[DelayedQueue], *, delay: timedelta | None = None,
                error: str | None = None, connection: sa.Connection | None = None) -> bool: ...

    @overload
    def release(self: Envelope[AsyncDelayedQueue], *, delay: timedelta | None = None,
                error: str | None = None,
                connection: AsyncConnection | None = None) -> Awaitable[bool]: ...

    def release(self: Envelope[Any], *, delay: timedelta | None = None, error: str | None = None,
                connection: Any = None) -> Any:
        return self.queue.release(self, delay=delay, error=error, connection=connection)

    @overload
    def extend(self: Envelope[DelayedQueue], by: timedelta | None = None, *,
               connection: sa.Connection | None = None) -> bool: ...

    @overload
    def extend(self: Envelope[AsyncDelayedQueue], by: timedelta | None = None, *,
               connection: AsyncConnection | None = None) -> Awaitable[bool]: ...

    def extend(self: Envelope[Any], by: timedelta | None = None, *,
               connection: Any = None) -> Any:
        """Renew the lock for ``by`` (default: the queue's acquire_timeout) from now, so a long
        handler keeps its message; False when the lock was already lost."""
        return self.queue.extend(self, by, connection=connection)


# what an asyncio queue claims: the same class, its methods awaited
AsyncEnvelope = Envelope["AsyncDelayedQueue"]
