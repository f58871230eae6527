# Generated from tasks_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""Tasks for this front end: ``Tasks`` (the registry, and a worker's handler),
``Task`` (a registered function: ``defer`` it) and ``TaskHandle`` (its status and
result). What a task is, and what both front ends share, is told in ``tasks_base``; how to
use them, in docs/tasks.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from .clock import to_ms
from .concurrency import Connection, Event, run_blocking, run_op, spawn, wait_event
from .errors import InvalidArgumentError, PayloadError, UnsupportedDialectError
from .messages import Envelope, Message, OfferOutcome
from .notifier import hear
from .outages import patience
from .queue import DelayedQueue
from .tasks_base import (
    PRUNE_BATCH,
    TaskBase,
    TaskFailed,
    TaskResult,
    TasksBase,
    TaskStatus,
    check_when,
    prune_results_op,
    run_coroutine,  # noqa: F401 - used by the blocking twin
    status_op,
    timeout_seconds,
)
from .tracing import deferring

log = logging.getLogger("sqldelay.tasks")

# a dead letter older than its handle's defer by more than this is another run's (a key
# used again); the margin covers the clocks of two processes that differ a little
_SINCE_MARGIN_MS = 5000
# while notifications tell a waiting handle of its task's end, it reads the task's status at
# least this often anyway (seconds): an end notified while the listener reconnected
_CHECK_EVERY = 5.0


class TaskHandle:
    """A deferred task, by its queue and key: ``status()``, ``result(timeout=...)``.
    ``outcome`` says what the defer did (CREATED; with a key of one waiting already, UPDATED
    when it replaced it, IGNORED when it left it)."""

    def __init__(self, queue: DelayedQueue, key: str, *, task: str | None = None,
                 outcome: OfferOutcome | None = None, keeps_results: bool | None = None,
                 since_ms: int | None = None) -> None:
        queue.check_key(key)
        self.queue = queue
        self.key = key
        self.task = task
        self.outcome = outcome
        self.keeps_results = keeps_results
        self.since_ms = since_ms

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(task={self.task!r}, key={self.key!r}, "
                f"queue={self.queue.name!r}, outcome={self.outcome})")

    def status(self, *, connection: Connection | None = None) -> TaskResult | None:
        """What is known of the task now (see ``tasks_base.status_op``); None when nothing
        is: not yet committed, finished without keeping its result, or pruned."""
        return self.queue.executor.run(status_op(self.queue, self.key, self.since_ms),
                                       write=False, connection=connection)

    def result(self, timeout: float | timedelta | None = None) -> Any:
        """Wait for the task to finish and return its function's return value; TaskFailed when
        it failed for good (a dead letter), TimeoutError after ``timeout`` (seconds or a
        timedelta; None: no limit). Where the database notifies (PostgreSQL), the end of the
        task wakes the wait (reading its status again at least every ``_CHECK_EVERY``
        seconds); elsewhere it polls, backing off from 20 ms to a second."""
        if self.keeps_results is False:
            raise InvalidArgumentError(
                f"task {self.task} keeps no results: make it with results=True")
        limit = timeout_seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        woken = Event()
        note = self.queue.dao.settled_note(self.queue.pkind, self.key)
        listening = _Listening.join(self.queue, note, woken)
        try:
            if listening is not None:  # read once listening: an end committed later is heard
                wait_event(listening.ready,
                           None if deadline is None else deadline - time.monotonic())
            pause = 0.02
            while True:
                woken.clear()  # before the read: an end heard during it is not lost
                # a read waits out an outage (the queue's patience) only until the deadline
                with (nullcontext() if deadline is None
                      else patience(max(deadline - time.monotonic(), 0.0))):
                    found = self.status()
                if found is not None and found.status is TaskStatus.SUCCEEDED:
                    return found.return_value
                if found is not None and found.status is TaskStatus.FAILED:
                    last = (found.error or "").strip().splitlines()
                    raise TaskFailed(f"task {found.task or self.task} ({self.key}) failed "
                                     f"after {found.attempts} attempt(s): "
                                     f"{last[0] if last else ''}", found)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    state = "not found" if found is None else found.status.value
                    raise TimeoutError(f"task {self.task or ''} ({self.key}) has not finished "
                                       f"after {limit:g}s: {state}")
                hearing = listening is not None and listening.hearing
                wait = _CHECK_EVERY if hearing else pause
                wait_event(woken, wait if left is None else min(wait, left))
                if not hearing:
                    pause = min(pause * 1.5, 1.0)
        finally:
            if listening is not None:
                listening.leave(note, woken)


class _Listening:
    """The LISTEN of one queue table's task ends, in this process: one connection shared by
    every handle waiting for a task of the table, each woken by the notification of its own
    task's end (``QueueDao.notify_settled``, sent with a result row or a dead letter). It
    stops when the last handle leaves; a handle whose listening failed polls."""

    _lock = threading.Lock()  # never held across a pause: for the threads of either front
    _active: dict[tuple[int, str], _Listening] = {}
    _deaf: set[tuple[int, str]] = set()  # engines whose driver cannot listen

    def __init__(self, queue: DelayedQueue, key: tuple[int, str]) -> None:
        self.key = key
        self.engine = queue.engine
        self.dao = queue.dao
        self.waiting: dict[str, set[Event]] = {}
        self.ready = Event()  # listening has begun, or failed
        self.stop = Event()
        self.failed: BaseException | None = None
        self.task = spawn(self._run, f"sqldelay-results-{queue.dao.table.name}")

    @classmethod
    def join(cls, queue: DelayedQueue, note: str, event: Event) -> _Listening | None:
        """The listening that sets ``event`` at the notification ``note`` (started if none
        runs); None where the database or its driver does not notify."""
        if not queue.dao.notifications:
            return None
        key = (id(queue.engine), queue.dao.settled_channel)
        with cls._lock:
            if key in cls._deaf:
                return None
            found = cls._active.get(key)
            if found is None or found.engine is not queue.engine or found.stop.is_set():
                found = cls._active[key] = cls(queue, key)
            found.waiting.setdefault(note, set()).add(event)
            return found

    def leave(self, note: str, event: Event) -> None:
        with self._lock:
            events = self.waiting.get(note, set())
            events.discard(event)
            if not events:
                self.waiting.pop(note, None)
            if not self.waiting:
                self.stop.set()
                if self._active.get(self.key) is self:
                    del self._active[self.key]

    @property
    def hearing(self) -> bool:
        return self.ready.is_set() and self.failed is None and self.task.alive

    def _run(self) -> None:
        try:
            hear(self.engine, self.dao, self.dao.settled_channel, self._heard, self.stop)
        except Exception as exc:  # the handles poll instead
            self.failed = exc
            log.debug("no notifications of task ends, polling: %s", exc)
            if isinstance(exc, UnsupportedDialectError):
                with self._lock:
                    self._deaf.add(self.key)
        finally:
            with self._lock:
                if self._active.get(self.key) is self:
                    del self._active[self.key]
                events = [e for found in self.waiting.values() for e in found]
            self.ready.set()
            for event in events:  # read again, then poll
                event.set()

    def _heard(self, note: str | None) -> None:
        with self._lock:
            if note is None:  # listening began: every handle reads again
                events = [e for found in self.waiting.values() for e in found]
            else:
                events = list(self.waiting.get(note, ()))
        if note is None:
            self.ready.set()
        for event in events:
            event.set()


class Task(TaskBase):
    """A function registered with ``Tasks.task``: call it to run it here, ``defer`` it
    to have a worker run it."""

    queue: DelayedQueue

    def defer(self, **kwargs: Any) -> TaskHandle:
        """Defer a call with these keyword arguments. Options, taken out of them: ``at`` (a
        datetime) or ``delay`` (a timedelta) for when it is due (default: now); ``key``, the
        queue's unique key (default: a new one), with ``replace`` saying whether a message
        of that key still waiting is replaced (UPDATED) or left as it is (IGNORED, the
        default); ``priority`` and ``group`` (default: the task's); ``connection``, the
        caller's transaction. Everything is checked before anything is written."""
        options = self.split_options(kwargs)
        return self.enqueue((), kwargs, **options)

    def enqueue(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                *, at: datetime | None = None, delay: timedelta | None = None,
                key: str | None = None, replace: bool = False,
                priority: int | None = None, group: str | None = None,
                connection: Connection | None = None) -> TaskHandle:
        """``defer`` with the arguments apart from the options: positional ones too, and
        any argument name (a function with a parameter named ``key`` defers this way)."""
        kwargs = {} if kwargs is None else kwargs
        at = self._due(at, delay)
        message = self.message(args, kwargs, at=at, key=key, replace=replace,
                               priority=priority, group=group)
        return (self._offer([message], connection))[0]

    def defer_many(self, calls: Iterable[Mapping[str, Any]], *,
                   at: datetime | None = None, delay: timedelta | None = None,
                   priority: int | None = None, group: str | None = None,
                   connection: Connection | None = None) -> list[TaskHandle]:
        """Defer many calls (each a mapping of keyword arguments) in one offer, one
        transaction: every call is checked before any is written. Handles in input order."""
        pairs = [((), dict(kwargs)) for kwargs in calls]
        at = self._due(at, delay)
        messages = [self.message(args, kwargs, at=at, key=None, replace=False,
                                 priority=priority, group=group) for args, kwargs in pairs]
        return self._offer(messages, connection)

    def handle(self, key: str) -> TaskHandle:
        """The handle of this task's message ``key`` (a key kept from an earlier defer)."""
        return TaskHandle(self.queue, key, task=self.name,
                          keeps_results=self.keeps_results)

    def _due(self, at: datetime | None, delay: timedelta | None) -> datetime | None:
        check_when(at, delay)
        return at if delay is None else self.queue.now() + delay

    def _offer(self, messages: list[Message],
               connection: Connection | None) -> list[TaskHandle]:
        if not messages:
            return []
        since = self.queue.now_ms() - _SINCE_MARGIN_MS
        named = deferring.set(self.name)  # the offer's span names the task
        try:
            outcomes = self.queue.offer_many(messages, connection=connection)
        except PayloadError as exc:  # named in the arguments as stored (models encoded)
            self.explain_payload_error(exc, [(m.payload.get("args", []),
                                              m.payload.get("kwargs", {})) for m in messages])
            raise
        finally:
            deferring.reset(named)
        return [TaskHandle(self.queue, m.key, task=self.name, outcome=outcome,
                           keeps_results=self.keeps_results, since_ms=since)
                for m, outcome in zip(messages, outcomes, strict=True)]


class Tasks(TasksBase):
    """Tasks deferred to a queue (``DelayedQueue``), and the handler a worker
    (``Worker``) runs them with: ``Worker(tasks.queue, tasks)``.
    One queue carries many tasks; a task may name a queue of its own (serve it too)."""

    queue: DelayedQueue
    queue_class = DelayedQueue
    task_class = Task

    def __call__(self, envelope: Envelope[DelayedQueue],
                 connection: Connection | None = None) -> Any:
        """Run the task of a claimed message (the worker calls this): its function, then,
        for a task that keeps results, the result row in the transaction of the ack (in
        transactional mode, the worker's ``connection``, which acks it). A message that
        names no task of this registry, or whose arguments no longer fit the function, is
        refused with an error that sends it to the dead letters."""
        task, args, kwargs = self.decode(envelope)
        queue = envelope.queue
        started = to_ms(queue.clock.now(), "now")
        if task.context:
            args = [self.context_for(task, envelope, connection), *args]
        if task.is_async:
            value = run_coroutine(task.fn(*args, **kwargs))  # noqa: E501
        else:
            value = run_blocking(partial(task.fn, *args, **kwargs))
        if task.retention is None:
            return value
        write = self.result_op(task, envelope, value, started)
        if connection is not None:
            run_op(connection, write)
        elif queue.executor.run(self.acked_with(envelope, write), write=True):
            envelope.settled = True  # acked with its result: the worker sends no ack of its own
        else:
            log.warning("the lock of task message %s (%s) was lost before its result was "
                        "written: its result is not kept, and it runs again", envelope.key,
                        task.name)
        if self.prune_due(queue):
            try:
                if connection is None:
                    self.prune_results(queue)
                else:  # a batch in the worker's transaction (another would wait on its locks)
                    run_op(connection, prune_results_op(queue))
            except Exception as exc:  # the next round tries again; the task stands
                if connection is not None:
                    raise  # the transaction is the worker's: it decides
                log.warning("could not prune the task results of queue %s: %s", queue.name, exc)
        return value

    def handle(self, key: str, *, queue: DelayedQueue | None = None) -> TaskHandle:
        """The handle of message ``key`` of ``queue`` (default: the registry's), whichever
        task it is."""
        return TaskHandle(self.queue if queue is None else queue, key)

    def prune_results(self, queue: DelayedQueue | None = None) -> int:
        """Delete the results of ``queue`` (default: the registry's) past their retention,
        in batches of a transaction each; returns how many went. Workers running these
        tasks do it every ``prune_every``."""
        queue = self.queue if queue is None else queue
        pruned = 0
        while True:
            gone = queue.executor.run(prune_results_op(queue), write=True)
            pruned += gone
            if gone < PRUNE_BATCH:
                return pruned


__all__ = ["Task", "TaskHandle", "Tasks"]
