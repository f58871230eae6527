"""Tasks: plain and ``async def`` functions run as jobs over a queue, whichever front end.

A task is a message. ``defer`` offers one message to the task's queue, its payload the task's
name and arguments as JSON (``{"task": name, "args": [...], "kwargs": {...}}``), so
everything a queue does (due times, keys, priorities, groups, flow control, dead letters,
history, metrics) is what a task gets, with no second storage path. The registry is the
worker's handler: it reads the name from the payload and calls the function.

``AsyncTasks`` (``tasks_async.py``) defers through an ``AsyncDelayedQueue`` and runs under an
``AsyncWorker``; ``Tasks`` (``tasks.py``, generated from it) through a ``DelayedQueue`` under
a ``Worker``. This module holds what both share: the definitions and their checks, the
payloads, the retry decisions, and the results as operations on a Connection.

Results, for the tasks that keep them: a row in ``<table>_results`` per message whose function
returned, written in the transaction that acks the message (in transactional mode, the
worker's own), pruned by the workers once its retention has passed. Status is read off what
exists: the message itself while it waits (``QUEUED``) or is held (``RUNNING``), the result
row once it returned (``SUCCEEDED``), the dead letter once the worker gave up on it
(``FAILED``); a task without results writes nothing more than its message.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from .checks import check_text
from .clock import duration_ms, from_ms, to_ms
from .errors import InvalidArgumentError, PayloadError, SqlDelayError
from .messages import Envelope, Message, OfferOutcome
from .queue_base import check_priority
from .retry import RetryPolicy
from .schema import KEY_LENGTH, dead_letter_table, results_table
from .task_arguments import ArgumentShapeError, parameter_codecs

if TYPE_CHECKING:
    from .queue_base import QueueBase

log = logging.getLogger("sqldelay.tasks")
T = TypeVar("T")

# what ``defer(**kwargs)`` takes as its own options rather than as the function's arguments
DEFER_OPTIONS = ("at", "delay", "key", "replace", "priority", "group", "connection")
DEFAULT_RETENTION = timedelta(days=1)
# how often a worker process prunes the results of a queue it writes results to
DEFAULT_PRUNE_EVERY = timedelta(minutes=10)
PRUNE_BATCH = 500
# a failure that another attempt cannot mend: buried at once
NO_RETRY = RetryPolicy.fixed(timedelta(0), max_attempts=1)
# the task label of a message that names a task no registry of this process has: metrics
# and traces label by registered names only, so a producer's stray names cannot multiply
# their series
UNREGISTERED = "(unregistered)"
# every registry of this process, for task_label
_registries: weakref.WeakSet[TasksBase] = weakref.WeakSet()


class TaskStatus(enum.Enum):
    QUEUED = "queued"  # waiting: not yet due, due, or due again after a failed attempt
    RUNNING = "running"  # claimed by a worker, its lock held
    SUCCEEDED = "succeeded"  # its function returned (tasks that keep results)
    FAILED = "failed"  # the worker gave up on it: it is a dead letter


class UnknownTaskError(SqlDelayError):
    """A worker claimed a message that names no task of its registry (or is no task message
    at all): it goes to the dead letters at once."""


class TaskArgumentsError(SqlDelayError):
    """The arguments stored with a task message no longer fit its function (it changed since
    the message was deferred): the message goes to the dead letters at once."""


class ResultError(SqlDelayError):
    """A task's return value cannot be stored as JSON: the message goes to the dead letters
    at once (its function ran; running it again would not help)."""


class TaskFailed(SqlDelayError):
    """``result()`` of a task that failed for good; ``result`` holds its TaskResult, whose
    ``error`` is the last error (the dead letter's)."""

    def __init__(self, message: str, result: TaskResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What is known of one deferred task, by its key. ``return_value`` once SUCCEEDED,
    ``error`` (the last error, traceback included) once FAILED; ``attempts``: deliveries so
    far."""

    key: str
    task: str | None
    status: TaskStatus
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    return_value: Any = None
    error: str | None = None
    attempts: int = 0
    enqueued_at: datetime | None = None
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a task made with ``context=True`` gets as its first argument: its name, its
    message's key and attempt number, the envelope, and in transactional mode the worker's
    connection (its writes commit with the ack)."""

    task: str
    key: str
    attempt: int
    # either front end's: Envelope[DelayedQueue] under a Worker, Envelope[AsyncDelayedQueue]
    # under an AsyncWorker. Any, not QueueBase: ack, release and extend are declared for one
    # front end's queue or the other, and a task calls them on the envelope it was given
    envelope: Envelope[Any]
    connection: Any = None


class TaskBase:
    """A function registered as a task: ``fn(...)`` calls it here and now, ``defer`` (see the
    front ends) has a worker call it."""

    def __init__(self, registry: TasksBase, fn: Callable[..., Any], *, name: str | None,
                 queue: Any, retry: RetryPolicy | None, priority: int, group: str | None,
                 results: bool | timedelta | None, context: bool) -> None:
        if not callable(fn):
            raise InvalidArgumentError(f"a task must be a function, got {fn!r}")
        if name is None:
            name = f"{fn.__module__}.{fn.__qualname__}"
        check_text(name, "task name", KEY_LENGTH)
        if queue is not None:
            registry.check_queue(queue)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
        check_priority(priority)
        if group is not None:
            check_text(group, "group", KEY_LENGTH)
        if not isinstance(context, bool):
            raise InvalidArgumentError(f"context must be True or False, got {context!r}")
        self.registry = registry
        self.fn = fn
        self.name = name
        self.queue = registry.queue if queue is None else queue
        self.retry = retry
        self.priority = priority
        self.group = group
        self.retention = registry.retention if results is None else _retention(results)
        self.context = context
        self.is_async = inspect.iscoroutinefunction(fn)
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"cannot read the signature of task {name}: {exc}") from None
        params = list(signature.parameters.values())
        if context:
            if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
                raise InvalidArgumentError(
                    f"task {name} takes its context: its first parameter must be positional")
            params = params[1:]
        # what the caller's arguments are bound to (the context, given by the worker, apart)
        self.signature = signature.replace(parameters=params)
        # parameters that defer(**kwargs) would take for its own options
        self.clashes = [p.name for p in params if p.name in DEFER_OPTIONS]
        # parameters annotated with dataclasses or pydantic models: encoded, then rebuilt
        self.codecs = parameter_codecs(fn, self.signature)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__qualname__ = getattr(fn, "__qualname__", name)
        # typeshed types __module__ str; a callable's may be None
        self.__module__ = getattr(fn, "__module__", None)  # type: ignore[assignment]
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<task {self.name} on queue {self.queue.name!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function here and now (a coroutine, for an ``async def`` task)."""
        return self.fn(*args, **kwargs)

    @property
    def keeps_results(self) -> bool:
        return self.retention is not None

    # ---- deferring: every check before anything is written ----------------------------------

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Refuse arguments the function would not take (a wrong name, one missing)."""
        params = self.signature.parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            unknown = [k for k in kwargs
                       if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
            if unknown:  # named first: a misspelt name also leaves a required one missing
                raise InvalidArgumentError(
                    f"task {self.name}: unexpected keyword argument(s) "
                    f"{', '.join(map(repr, unknown))}")
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(f"task {self.name}: {exc}") from None

    def split_options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``defer(**kwargs)``: take the options out of ``kwargs`` (which keeps the function's
        arguments). A function with a parameter of an option's name defers through
        ``enqueue``, where the two are apart."""
        if self.clashes:
            raise InvalidArgumentError(
                f"task {self.name} has parameter(s) {', '.join(self.clashes)}, which defer() "
                f"takes as its own options: defer it with .enqueue(args, kwargs, ...)")
        return {name: kwargs.pop(name) for name in DEFER_OPTIONS if name in kwargs}

    def payload(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of one call, its arguments checked against the function (their JSON
        is checked when it is encoded: explain_payload_error names the argument refused)."""
        if not isinstance(args, list | tuple):
            raise InvalidArgumentError(
                f"args must be a list or tuple, got {type(args).__name__}")
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise InvalidArgumentError("kwargs must be a mapping of argument names")
        self.check_arguments(args, kwargs)
        if self.codecs:
            try:
                args, kwargs = self.convert(args, kwargs, encode=True)
            except ArgumentShapeError as exc:
                raise InvalidArgumentError(f"task {self.name}: {exc}") from None
        payload: dict[str, Any] = {"task": self.name}
        if args:
            payload["args"] = list(args)
        if kwargs:
            payload["kwargs"] = dict(kwargs)
        return payload

    def convert(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, encode: bool
                ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments with those of dataclass or model parameters encoded to JSON (or,
        ``encode=False``, rebuilt from it); ArgumentShapeError names the argument that does
        not fit. Arguments already bound to the signature (check_arguments)."""
        params = list(self.signature.parameters.values())
        positional = [p.name for p in params
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

        def convert(name: str | None, what: str, value: Any) -> Any:
            codec = self.codecs.get(name) if name is not None else None
            if codec is None:
                return value
            try:
                return codec.encode(value) if encode else codec.decode(value)
            except ArgumentShapeError as exc:
                raise ArgumentShapeError(f"{what}: {exc}") from None

        new_args = [convert(positional[i] if i < len(positional) else None,
                            f"argument {i + 1}", value) for i, value in enumerate(args)]
        new_kwargs = {k: convert(k, f"argument {k!r}", v) for k, v in kwargs.items()}
        return new_args, new_kwargs

    def message(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, at: datetime | None,
                key: str | None, replace: bool, priority: int | None,
                group: str | None) -> Message:
        """The message of one call, its arguments checked (their JSON is checked with the
        offer, which encodes every payload before it writes any)."""
        payload = self.payload(args, kwargs)
        if not isinstance(replace, bool):
            raise InvalidArgumentError(f"replace must be True or False, got {replace!r}")
        return Message(uuid.uuid4().hex if key is None else key, payload, at, update=replace,
                       priority=self.priority if priority is None else priority,
                       group=self.group if group is None else group)

    def explain_payload_error(self, exc: PayloadError,
                              calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]) -> None:
        """Raise an InvalidArgumentError naming the argument the serializer refused."""
        serializer = self.queue.serializer
        for args, kwargs in calls:
            named = [(f"argument {i + 1}", v) for i, v in enumerate(args)]
            named += [(f"argument {k!r}", v) for k, v in kwargs.items()]
            for what, value in named:
                try:
                    serializer.encode(value)
                except Exception as problem:
                    why = problem.__cause__ or problem
                    raise InvalidArgumentError(
                        f"task {self.name}: {what} is not JSON-serialisable: {why}") from exc
        raise InvalidArgumentError(f"task {self.name}: {exc}") from exc

class TasksBase:
    """The tasks deferred to ``queue`` (and to the queues some of them name): a registry by
    name, and the handler a worker runs them with."""

    queue_class: type[QueueBase]  # the front end's queue class, set by each registry class
    task_class: type[TaskBase] = TaskBase

    def __init__(self, queue: Any, *, retry: RetryPolicy | None = None,
                 results: bool | timedelta = False,
                 prune_every: timedelta = DEFAULT_PRUNE_EVERY) -> None:
        """``retry``: the policy of the tasks that name none (None: the worker's own).
        ``results``: whether tasks keep their results by default (True: for a day; a
        timedelta: for that long), each task may say otherwise. ``prune_every``: how often a
        worker running these tasks deletes the results past their retention."""
        self.check_queue(queue)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
        if duration_ms(prune_every, "prune_every") < 1:
            raise InvalidArgumentError("prune_every must be positive")
        self.queue = queue
        self.retry = retry
        self.retention = _retention(results)
        self.prune_every = prune_every
        self._tasks: dict[str, TaskBase] = {}
        # (engine, table, pkind) -> monotonic time
        self._pruned: dict[tuple[int, str, str], float] = {}
        _registries.add(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.queue!r}, tasks={sorted(self._tasks)})"

    def check_queue(self, queue: Any) -> None:
        if not isinstance(queue, self.queue_class):
            raise InvalidArgumentError(
                f"{type(self).__name__} takes a {self.queue_class.__name__}, got {queue!r}")
        probe = {"task": "probe", "args": [1], "kwargs": {"a": [None, "b"]}}
        try:
            same = queue.serializer.decode(queue.serializer.encode(probe)) == probe
        except Exception:
            same = False
        if not same:
            raise InvalidArgumentError(
                f"queue {queue.name!r} cannot carry tasks: its serializer must read back the "
                "JSON objects it writes (JsonSerializer)")

    def task(self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
             queue: Any = None, retry: RetryPolicy | None = None, priority: int = 0,
             group: str | None = None, results: bool | timedelta | None = None,
             context: bool = False) -> Any:
        """Register ``fn`` as a task (``@tasks.task`` or ``@tasks.task(...)``).

        ``name``: how messages name it (default: module.qualname; a name must outlive
        renames of the function while messages naming it wait). ``queue``: where it is
        deferred (default: the registry's). ``retry``: its own policy (default: the
        registry's, else the worker's). ``priority`` and ``group``: those of its messages
        unless ``defer`` says otherwise. ``results``: keep the return values (True: for a
        day; a timedelta: for that long; default: the registry's choice). ``context``: call
        it with a TaskContext as first argument."""
        def register(fn: Callable[..., Any]) -> TaskBase:
            task = self.task_class(self, fn, name=name, queue=queue, retry=retry,
                                   priority=priority, group=group, results=results,
                                   context=context)
            if task.name in self._tasks:
                raise InvalidArgumentError(f"a task named {task.name!r} is already registered")
            self._tasks[task.name] = task
            return task

        return register if fn is None else register(fn)

    def __getitem__(self, name: str) -> TaskBase:
        try:
            return self._tasks[name]
        except KeyError:
            raise KeyError(f"no task named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[TaskBase]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def knows(self, name: str) -> bool:
        """Whether a message naming task ``name`` is one of this registry's (task_label)."""
        return name in self._tasks

    # ---- running: the worker's handler ---------------------------------------------------

    def decode(self, envelope: Envelope[QueueBase]
               ) -> tuple[TaskBase, list[Any], dict[str, Any]]:
        """The task and arguments of a claimed message; UnknownTaskError or
        TaskArgumentsError when they cannot be run (the message is then buried at once)."""
        payload = envelope.payload
        name = payload.get("task") if isinstance(payload, dict) else None
        if not isinstance(name, str):
            raise UnknownTaskError(
                f"message {envelope.key!r} of queue {envelope.queue.name!r} is not a task "
                f"message (no task name in its payload)")
        task = self._tasks.get(name)
        if task is None:
            known = ", ".join(sorted(self._tasks)) or "none"
            raise UnknownTaskError(
                f"message {envelope.key!r} names task {name!r}, which this worker's registry "
                f"does not have (it has: {known})")
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TaskArgumentsError(
                f"message {envelope.key!r} of task {name}: malformed arguments in its payload")
        try:
            task.signature.bind(*args, **kwargs)
            if task.codecs:
                args, kwargs = task.convert(args, kwargs, encode=False)
        except (TypeError, ArgumentShapeError) as exc:
            raise TaskArgumentsError(
                f"the arguments of message {envelope.key!r} no longer fit task {name}: {exc}"
            ) from None
        return task, args, kwargs

    def retry_policy_for(self, envelope: Envelope[QueueBase], error: BaseException | None
                         ) -> RetryPolicy | None:
        """The worker's question after a failed attempt: the policy of this message's task
        (None: the worker's own). A message that cannot be run is buried at once."""
        if isinstance(error, UnknownTaskError | TaskArgumentsError | ResultError):
            return NO_RETRY
        payload = envelope.payload
        name = payload.get("task") if isinstance(payload, dict) else None
        task = self._tasks.get(name) if isinstance(name, str) else None
        if task is None:
            return NO_RETRY
        return task.retry or self.retry

    def context_for(self, task: TaskBase, envelope: Envelope[QueueBase],
                    connection: Any) -> TaskContext:
        return TaskContext(task.name, envelope.key, envelope.attempt, envelope, connection)

    def result_op(self, task: TaskBase, envelope: Envelope[QueueBase], value: Any, started_ms: int
                  ) -> Callable[[sa.Connection], None]:
        """The write of a returned task's result row (replacing an older one of its key)."""
        queue = envelope.queue
        try:
            encoded = queue.serializer.encode(value)
        except Exception as exc:
            raise ResultError(
                f"task {task.name} returned a value that cannot be stored as JSON: {exc}"
            ) from exc
        payload = queue.serializer.encode(envelope.payload)
        table = results_table(queue.dao.table.metadata, queue.dao.table.name)
        assert task.retention is not None  # called for a task that keeps its results
        retention = duration_ms(task.retention, "results")
        created = _ms(envelope.created_at)

        def op(conn: sa.Connection) -> None:
            now = queue.now_ms(conn)
            conn.execute(sa.delete(table).where(table.c.pkind == queue.pkind,
                                                table.c.pkey == envelope.key))
            conn.execute(sa.insert(table).values(
                pkind=queue.pkind, pkey=envelope.key, task=task.name,
                status=TaskStatus.SUCCEEDED.value, payload=payload, return_value=encoded,
                attempts=envelope.attempt, worker=envelope.claimed_by, created_at=created,
                started_at=started_ms, finished_at=now, expires_at=now + retention))
            queue.dao.notify_settled(conn, queue.pkind, envelope.key)  # handles waiting

        return op

    @staticmethod
    def acked_with(envelope: Envelope[QueueBase], write: Callable[[sa.Connection], None]
                   ) -> Callable[[sa.Connection], bool]:
        """The ack of ``envelope`` and ``write``, in one transaction: written only where the
        ack deleted the message (its lock still held)."""
        ack = envelope.queue.ack_call(envelope, whole=True).op

        def op(conn: sa.Connection) -> bool:
            if not ack(conn):
                return False
            write(conn)
            return True

        return op

    def prune_due(self, queue: QueueBase) -> bool:
        """Whether this process should prune ``queue``'s results now (once per
        ``prune_every``); marks it pruned."""
        mark = (id(queue.engine), queue.dao.table.name, queue.pkind)
        now = time.monotonic()
        if now - self._pruned.get(mark, -float("inf")) < self.prune_every.total_seconds():
            return False
        self._pruned[mark] = now
        return True


def prune_results_op(queue: QueueBase,
                     batch: int = PRUNE_BATCH) -> Callable[[sa.Connection], int]:
    """One batch of the deletion of ``queue``'s results past their retention: how many went."""
    table = results_table(queue.dao.table.metadata, queue.dao.table.name)

    def op(conn: sa.Connection) -> int:
        now = queue.now_ms(conn)
        keys = list(conn.execute(
            sa.select(table.c.pkey).where(table.c.pkind == queue.pkind, table.c.expires_at < now)
            .order_by(table.c.expires_at).limit(batch)).scalars())
        return sum(conn.execute(sa.delete(table).where(table.c.pkind == queue.pkind,
                                                       table.c.pkey.in_(part))).rowcount
                   for part in chunked(keys, queue.dao.in_list_max))

    return op


def status_op(queue: QueueBase, key: str, since_ms: int | None = None
              ) -> Callable[[sa.Connection], TaskResult | None]:
    """What is known of the task message ``key`` of ``queue``: its message first (waiting or
    held), then its result row, then its latest dead letter (one buried at ``since_ms`` or
    later, when given); None when none of them is there (not yet committed, or finished
    without results, or pruned, or dropped). The message is read first: an ack and its result
    row commit together, as do a burial and its dead letter, so a task is never missed
    between two reads."""
    queue.check_key(key)
    serializer = queue.serializer
    metadata, name = queue.dao.table.metadata, queue.dao.table.name
    results, dead = results_table(metadata, name), dead_letter_table(metadata, name)

    def op(conn: sa.Connection) -> TaskResult | None:
        now = queue.now_ms(conn)
        row = conn.execute(queue.dao.select_by_key(queue.pkind, key)).first()
        if row is not None:
            task, args, kwargs = _call_of(serializer, row.payload)
            in_flight = row.lock_uuid is not None and row.scheduled_at > now
            return TaskResult(
                key=key, task=task, args=args, kwargs=kwargs,
                status=TaskStatus.RUNNING if in_flight else TaskStatus.QUEUED,
                attempts=row.deliveries, enqueued_at=_time(row.created_at),
                scheduled_at=_time(row.scheduled_at_initially),
                worker=row.claimed_by if in_flight else None)
        row = conn.execute(sa.select(results).where(results.c.pkind == queue.pkind,
                                                    results.c.pkey == key)).first()
        if row is not None:
            task, args, kwargs = _call_of(serializer, row.payload)
            return TaskResult(
                key=key, task=row.task, args=args, kwargs=kwargs,
                status=TaskStatus(row.status),
                return_value=(None if row.return_value is None
                              else serializer.decode(row.return_value)),
                attempts=row.attempts, enqueued_at=_time(row.created_at),
                started_at=_time(row.started_at), finished_at=_time(row.finished_at),
                worker=row.worker)
        stmt = (sa.select(dead).where(dead.c.pkind == queue.pkind, dead.c.pkey == key)
                .order_by(dead.c.failed_at.desc(), dead.c.id.desc()).limit(1))
        if since_ms is not None:
            stmt = stmt.where(dead.c.failed_at >= since_ms)
        row = conn.execute(stmt).first()
        if row is not None:
            task, args, kwargs = _call_of(serializer, row.payload)
            return TaskResult(
                key=key, task=task, args=args, kwargs=kwargs, status=TaskStatus.FAILED,
                error=row.last_error or "", attempts=row.attempts,
                enqueued_at=_time(row.created_at), scheduled_at=_time(row.scheduled_at_initially),
                finished_at=_time(row.failed_at))
        return None

    return op


def task_label(envelope: Envelope[QueueBase]) -> str:
    """The task of a claimed message as metrics and traces label it: its task's name when a
    registry of this process has that task, UNREGISTERED when it names another, "" when it
    is no task message. Bounded by the names registered, whatever the payloads hold."""
    payload = envelope.payload
    name = payload.get("task") if isinstance(payload, dict) else None
    if not isinstance(name, str):
        return ""
    if any(registry.knows(name) for registry in list(_registries)):
        return name
    return UNREGISTERED


def chunked(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _call_of(serializer: Any, data: bytes) -> tuple[str | None, list[Any], dict[str, Any]]:
    """The task name and arguments of a stored payload (None and nothing where unreadable)."""
    try:
        payload = serializer.decode(data)
    except Exception:
        return None, [], {}
    if not isinstance(payload, dict):
        return None, [], {}
    task = payload.get("task")
    return (task if isinstance(task, str) else None, list(payload.get("args", [])),
            dict(payload.get("kwargs", {})))


def _time(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    try:
        return from_ms(int(ms))
    except (OverflowError, ValueError):
        return None


def _ms(when: datetime) -> int:
    return to_ms(when, "created_at")


def check_when(at: datetime | None, delay: timedelta | None) -> None:
    """``at`` or ``delay``, not both; a delay that is a duration."""
    if at is not None and delay is not None:
        raise InvalidArgumentError("give at= or delay=, not both")
    if delay is not None:
        duration_ms(delay, "delay")


def _retention(results: Any) -> timedelta | None:
    """What ``results=`` asks for: None (keep none), or how long to keep them."""
    if results is False or results is None:
        return None
    if results is True:
        return DEFAULT_RETENTION
    if isinstance(results, timedelta):
        if duration_ms(results, "results") < 1:
            raise InvalidArgumentError("results must be a positive timedelta")
        return results
    raise InvalidArgumentError(f"results must be True, False or a timedelta, got {results!r}")


def timeout_seconds(timeout: float | timedelta | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout >= 0:
        return float(timeout)
    raise InvalidArgumentError(f"timeout must be seconds or a timedelta, got {timeout!r}")


def run_coroutine(coroutine: Any) -> Any:
    """The blocking front's way to run an ``async def`` task: on an event loop of its own, in
    the handler's thread."""
    return asyncio.run(coroutine)


__all__ = ["DEFER_OPTIONS", "OfferOutcome", "ResultError", "TaskArgumentsError", "TaskBase",
           "TaskContext", "TaskFailed", "TaskResult", "TaskStatus", "TasksBase",
           "UNREGISTERED", "UnknownTaskError", "task_label"]
