"""What a worker is, whichever front end drives it: its settings and their checks, and the
decisions that do not depend on threads or tasks. ``AsyncWorker`` (``worker_async.py``) runs
it with asyncio tasks, ``Worker`` (``worker.py``, generated from it) with threads.

At-least-once mode (the default): ``run()`` claims batches (each claim committed on its own)
into a buffer that ``concurrency`` handlers drain (on PostgreSQL, up to four batches at once
where the handlers wait on the claims: ``_claim_next``); a handler that returns gets its message
acked, one that raises gets it released for a retry or moved to the dead letters. Acks leave
on their own, never waiting for a claim: the first within ``ack_window`` of its handler's
return, with every other that returned meanwhile, in one statement (on PostgreSQL a claim about
to be sent takes the acks waiting along, in its own statement). A crash between handler
and ack means a redelivery, never a loss: only the messages whose handlers returned within
the ack window before the crash come back. With ``heartbeat=``, every message the worker holds
(waiting for a handler, being handled, waiting for its ack) has its lock renewed each beat,
and a message whose lock was lost before its handler started is dropped from the buffer, not
handled: a live worker does not handle a message another consumer may hold. ``Worker``
calls its handler in one of ``concurrency`` threads; ``AsyncWorker`` awaits an ``async def``
handler and runs a plain function in a pool of ``concurrency`` threads, off the event loop.

Transactional mode: each of ``concurrency`` loops claims a batch in a transaction, runs the
handler on each message in a savepoint of that transaction (the handler gets the connection:
``AsyncWorker`` gives an ``async def`` handler the AsyncConnection and a plain one its sync
facade, run on the loop), and acks the successes in it too: the claim, the handler's writes and
the delete commit or roll back together, so work that stays in the same database happens
exactly once.

When nothing is due a worker sleeps until the earliest due time the queue knows of (at most
``idle_poll``), or until a wake-up: ``wake()``, an offer in the same process of a message
due before then (``wakeups.py``), or on PostgreSQL a NOTIFY from an offer of a message that is
due now (``wake_ups=False``: neither). ``stop()`` (from any thread for ``Worker``, from the
event loop for ``AsyncWorker``), SIGTERM or SIGINT end ``run()``: unstarted messages are
released at once, running handlers get ``grace_period`` to finish.
"""

from __future__ import annotations

import enum
import os
import random
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

import sqlalchemy as sa

from .checks import check_positive_int
from .clock import duration_ms
from .dialects import ErrorKind
from .errors import InvalidArgumentError
from .history import check_actor
from .listeners import Listeners, LoggingListener, WorkerListener
from .retry import RetryPolicy

if TYPE_CHECKING:  # the sharded module imports this one
    from .messages import Envelope
    from .queue_base import QueueBase
    from .sharded_base import ShardedBase

# the front end's queue class: DelayedQueue or AsyncDelayedQueue
_Q = TypeVar("_Q", bound="QueueBase")

# the floor of an idle sleep when the earliest due message is already due but was not claimable
# (another worker's transaction holds it): a short nap, not a busy loop
MIN_IDLE = 0.05
MAX_BACKOFF = 5.0
MAX_BATCHES_AT_ONCE = 4  # see WorkerBase.batches_at_once


class ProcessingMode(enum.Enum):
    AT_LEAST_ONCE = "at_least_once"
    TRANSACTIONAL = "transactional"


class WorkerSettings(TypedDict, total=False):
    """The settings a worker takes by keyword, as ``WorkerBase.__init__`` names them (the
    front ends pass them on as they are): a setting added there is added here too."""

    concurrency: int
    batch_size: int | None
    retry: RetryPolicy | None
    mode: ProcessingMode
    idle_poll: timedelta
    grace_period: timedelta
    heartbeat: timedelta | None
    ack_window: timedelta
    listeners: Sequence[WorkerListener] | None
    wake_ups: bool
    limits: Mapping[str, int] | None
    name: str | None
    prune_every: timedelta | None
    processes: int


def default_retry() -> RetryPolicy:
    return RetryPolicy.exponential(timedelta(seconds=1), 2, max_delay=timedelta(hours=1),
                                   max_attempts=10)


class WorkerBase(Generic[_Q]):
    """Runs ``handler(envelope)`` (transactional mode: ``handler(envelope, connection)``) on
    every message of ``queue``; returning acks the message, raising retries it."""

    queue_class: type[_Q]  # the front end's queue class, set by each worker class
    sharded_class: type[ShardedBase[_Q]]  # and its sharded queue class

    def __init__(self, queues: Any, handler: Callable[..., Any], *,
                 concurrency: int = 1, batch_size: int | None = None,
                 retry: RetryPolicy | None = None,
                 mode: ProcessingMode = ProcessingMode.AT_LEAST_ONCE,
                 idle_poll: timedelta = timedelta(seconds=1),
                 grace_period: timedelta = timedelta(seconds=30),
                 heartbeat: timedelta | None = None,
                 ack_window: timedelta = timedelta(milliseconds=20),
                 listeners: Sequence[WorkerListener] | None = None,
                 wake_ups: bool = True,
                 limits: Mapping[str, int] | None = None,
                 name: str | None = None,
                 prune_every: timedelta | None = timedelta(minutes=10),
                 processes: int = 1) -> None:
        self.queues = self._named_queues(queues)
        check_positive_int(processes, "processes")
        if processes > 1 and not hasattr(os, "fork"):
            raise InvalidArgumentError("processes > 1 forks the worker: POSIX only")
        # queues on several engines (a sharded queue's shards) ride out one's outage alone,
        # serving the others meanwhile; on one engine the worker waits for it as a whole
        self.isolated = len({id(q.engine) for q in self.queues.values()}) > 1
        check_actor(name, "name")
        if prune_every is not None and duration_ms(prune_every, "prune_every") < 1:
            raise InvalidArgumentError("prune_every must be positive (or None: never)")
        limits = dict(limits or {})
        for name, limit in limits.items():
            if name not in self.queues:
                raise InvalidArgumentError(
                    f"limits names {name!r}, which is not one of the worker's queues "
                    f"({', '.join(self.queues)})")
            check_positive_int(limit, f"limits[{name!r}]")
        if not callable(handler):
            raise InvalidArgumentError(f"handler must be callable, got {handler!r}")
        check_positive_int(concurrency, "concurrency")
        batch_size = concurrency if batch_size is None else batch_size
        check_positive_int(batch_size, "batch_size")
        retry = default_retry() if retry is None else retry
        if not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
        if not isinstance(mode, ProcessingMode):
            raise InvalidArgumentError(f"mode must be a ProcessingMode, got {mode!r}")
        if duration_ms(idle_poll, "idle_poll") < 1:
            raise InvalidArgumentError("idle_poll must be positive")
        duration_ms(grace_period, "grace_period")
        duration_ms(ack_window, "ack_window")
        if ack_window >= min(q.acquire_timeout for q in self.queues.values()):
            raise InvalidArgumentError(
                f"ack_window ({ack_window}) must be shorter than the queues' acquire_timeout: "
                "acks held longer would outlive their locks")
        if heartbeat is not None:
            if duration_ms(heartbeat, "heartbeat") < 1:
                raise InvalidArgumentError("heartbeat must be positive")
            shortest = min(q.acquire_timeout for q in self.queues.values())
            if heartbeat >= shortest:
                raise InvalidArgumentError(
                    f"heartbeat ({heartbeat}) must be shorter than the queues' acquire_timeout "
                    f"({shortest}), or locks expire between beats")
            if mode is ProcessingMode.TRANSACTIONAL:
                raise InvalidArgumentError(
                    "heartbeat is for at-least-once mode: in transactional mode the open "
                    "transaction holds the messages until it ends")
        listeners = [LoggingListener()] if listeners is None else list(listeners)
        for listener in listeners:
            if not isinstance(listener, WorkerListener):
                raise InvalidArgumentError(
                    f"listeners must be WorkerListener instances, got {listener!r}")

        self.limits = limits
        self.handler = handler
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.retry = retry
        self.mode = mode
        self.idle_poll = idle_poll
        self.grace_period = grace_period
        self.heartbeat = heartbeat
        # how long the first handler to return waits for others to share its ack's statement
        self.ack_window = ack_window
        self.wake_ups = wake_ups
        # who claims, in the history and in claimed_by (None: each thread or task by name)
        self.name = name
        # how often the queues that keep history for a retention are pruned (None: never)
        self.prune_every = prune_every
        # processes running this worker (more than one: run() forks them, see supervisor.py)
        self.processes = processes
        self._events = Listeners(listeners)
        # the two events of every message: none to emit where no listener hears them
        self._hears_started = self._events.hears("started")
        self._hears_succeeded = self._events.hears("succeeded")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({list(self.queues.values())!r}, mode={self.mode.value}, "
                f"concurrency={self.concurrency}, batch_size={self.batch_size})")

    def _named_queues(self, queues: Any) -> dict[str, _Q]:
        """The worker's queues by name, from one queue, a sequence of them, or a mapping of
        names to them; a sharded queue stands for its shards, named as it names them."""
        if isinstance(queues, self.queue_class):
            named = {queues.name: queues}
        elif isinstance(queues, self.sharded_class):
            named = queues.consumed_shards()
        elif isinstance(queues, Mapping):
            named = dict(queues)
        elif isinstance(queues, Sequence) and not isinstance(queues, str):
            named = {}
            for q in queues:
                pairs = (q.consumed_shards().items() if isinstance(q, self.sharded_class)
                         else [(getattr(q, "name", repr(q)), q)])
                for name, one in pairs:
                    if isinstance(one, self.queue_class) and name in named:
                        raise InvalidArgumentError(
                            f"two queues named {name!r}: give a mapping of distinct names")
                    named[name] = one
        else:
            named = {"": queues}
        if not named:
            raise InvalidArgumentError("a worker needs at least one queue")
        for name, q in named.items():
            if not isinstance(q, self.queue_class):
                raise InvalidArgumentError(
                    f"queue must be a {self.queue_class.__name__}, got {q!r}")
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"queue names must be non-empty str, got {name!r}")
        return named

    def pruned_queues(self) -> list[_Q]:
        """The queues whose history this worker prunes: those kept for a retention."""
        if self.prune_every is None:
            return []
        return [q for q in self.queues.values()
                if q.history_settings is not None and q.history_settings.retention is not None]

    def retry_delay(self, attempt: int, envelope: Envelope[QueueBase] | None = None,
                    error: BaseException | None = None) -> timedelta | None:
        """How long a message whose attempt ``attempt`` failed waits; None: bury it. A
        handler with a ``retry_policy_for(envelope, error)`` method (a task registry,
        ``tasks_base``) picks the policy of each failure; None from it leaves the worker's."""
        retry = self.retry
        choose = getattr(self.handler, "retry_policy_for", None)
        if choose is not None and envelope is not None:
            retry = choose(envelope, error) or retry
        if retry.gives_up_after(attempt):
            return None
        return retry.delay(attempt)

    def is_outage(self, exc: BaseException) -> bool:
        """A lost or unreachable database (or a transient error): ride it out and retry."""
        return is_outage(exc, self.queues.values())

    def batches_at_once(self, until_idle: bool) -> int:
        """How many batches a worker of one queue claims at once where its handlers wait on
        the claims (``_claim_next``), in two claims side by side: up to MAX_BATCHES_AT_ONCE,
        as many as the engine's pool keeps connections beside the worker's others (the ack
        loop, the heartbeat, a listener for wake-ups); two at least. On a shared two-core
        machine, 10,000 no-op jobs drained by concurrency=4, then claimed a batch a claim:
        4,773 jobs/s with two at once, 5,303 with three, 6,157 with four (plain poll_many +
        ack_many threads 8,144); AsyncWorker 2,911 and 5,291."""
        (queue,) = self.queues.values()
        size = getattr(queue.engine.pool, "size", None)
        if not callable(size):
            return 2
        others = 1 + (self.heartbeat is not None) + (not until_idle and self.wake_ups)
        pooled: int = size()  # found by name: the pool classes that keep connections have it
        return max(2, min(MAX_BATCHES_AT_ONCE, pooled - others))

    def listening_groups(self) -> list[list[_Q]]:
        """The queues that can be woken, grouped by engine and table (one listener each)."""
        groups: dict[tuple[int, str], list[_Q]] = {}
        for q in self.queues.values():
            if q.dao.notifications:
                groups.setdefault((id(q.engine), q.dao.table.name), []).append(q)
        return list(groups.values())


class Rotation:
    """Which of a worker's queues (or a sharded queue's shards) to claim from next, and how
    much: in turn (round robin), passing over a queue at its concurrency cap (``limits``:
    messages of it claimed and not yet done, in this worker), for a moment one that just had
    nothing due, until its next due time one known to have nothing due before then, and one
    that is down (unreachable) until its backoff ends. A queue with a million due messages
    then takes no more turns than a quiet one, the quiet one's new messages wait at most a
    turn, and a dead database costs a connection attempt per backoff, not per claim. Not
    thread-safe: the worker calls it under its lock."""

    RECHECK = 0.05  # seconds a queue that had nothing due sits out while others have work
    FIRST_BACKOFF = 0.05  # seconds a queue sits out after its first failure, doubling after

    def __init__(self, names: Sequence[str], limits: Mapping[str, int], batch_size: int) -> None:
        self.names = list(names)
        self.limits = limits
        self.batch_size = batch_size
        self.held = dict.fromkeys(self.names, 0)
        self.quiet_until = dict.fromkeys(self.names, 0.0)
        self.down_until = dict.fromkeys(self.names, 0.0)
        self.failures = dict.fromkeys(self.names, 0)
        self._next = 0

    def turns(self, now: float) -> list[tuple[str, int]]:
        """(queue name, how many to claim) in the order to try them now."""
        order = self.names[self._next:] + self.names[:self._next]
        out = []
        for name in order:
            room = self.batch_size
            if name in self.limits:
                room = min(room, self.limits[name] - self.held[name])
            if room > 0 and self.quiet_until[name] <= now and self.down_until[name] <= now:
                out.append((name, room))
        return out

    def claimed(self, name: str, count: int, now: float) -> None:
        self._next = (self.names.index(name) + 1) % len(self.names)
        self.failures[name] = 0
        if name in self.limits:
            self.held[name] += count
        if not count:
            self.quiet_until[name] = now + self.RECHECK

    def done(self, name: str, count: int = 1) -> None:
        if name in self.limits:
            self.held[name] -= count

    def quiet(self, name: str, until: float) -> None:
        """Nothing of ``name`` is due before ``until`` (as far as is known)."""
        self.quiet_until[name] = until

    def failed(self, name: str, now: float) -> float:
        """``name`` is unreachable: it sits out a backoff (exponential, jittered, at most
        MAX_BACKOFF), returned in seconds."""
        self.failures[name] += 1
        backoff: float = min(MAX_BACKOFF,
                             self.FIRST_BACKOFF * 2 ** min(self.failures[name] - 1, 16))
        backoff *= random.uniform(0.5, 1.0)
        self.down_until[name] = now + backoff
        return backoff

    def reachable(self, name: str) -> None:
        self.failures[name] = 0
        self.down_until[name] = 0.0

    def is_down(self, name: str, now: float) -> bool:
        return self.down_until[name] > now

    def next_up(self, now: float) -> float | None:
        """Seconds until the first queue that is down may be tried again (None: none is)."""
        waits = [until - now for until in self.down_until.values() if until > now]
        return min(waits) if waits else None

    def wake(self) -> None:
        """Something is due now, somewhere: every queue takes its turns again (those that are
        down after their backoff)."""
        for name in self.names:
            self.quiet_until[name] = 0.0


def is_outage(exc: BaseException, queues: Iterable[QueueBase]) -> bool:
    """Whether ``exc`` says the database of ``queues`` is lost or unreachable (or a transient
    error): worth riding out. Some async drivers (asyncpg) let the socket's own error through
    when connecting. A missing table or index is not one, though SQLite reports it as an
    OperationalError too: waiting does not bring it back (the executor raises it as a
    ``SchemaMissingError``, which is none either)."""
    if isinstance(exc, sa.exc.DBAPIError) and not exc.connection_invalidated and any(
            q.dao.classify(exc) is ErrorKind.MISSING_TABLE for q in queues):
        return False
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | OSError):
        return True
    return isinstance(exc, sa.exc.DBAPIError) and (
        exc.connection_invalidated
        or any(q.dao.classify(exc) in (ErrorKind.TRANSIENT, ErrorKind.UNAVAILABLE)
               for q in queues))


def trouble(exc: BaseException, queues: Iterable[QueueBase]) -> str:
    """What an error worth riding out is, for the log: a deadlock or a lock wait that timed
    out is the database at work, not a database gone."""
    if isinstance(exc, sa.exc.DBAPIError) and not exc.connection_invalidated and any(
            q.dao.classify(exc) is ErrorKind.TRANSIENT for q in queues):
        return "transient database error (a deadlock, a lock wait timeout or a busy database)"
    return "database unavailable"


def error_text(error: BaseException) -> str:
    """The error first (it survives truncation), then where it came from."""
    head = "".join(traceback.format_exception_only(error)).strip()
    return head + "\n" + "".join(traceback.format_tb(error.__traceback__))
