# Generated from tasks_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""Tasks for this front end: ``Tasks`` (the registry, and a worker's handler),
``Task`` (a registered function: ``defer`` it) and ``TaskHandle`` (its status and
result). What a task is, and what both front ends share, is told in ``tasks_base``; how to
use them, in docs/tasks.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from .clock import to_ms
from .concurrency import Connection, run_blocking, run_op, sleep
from .errors import InvalidArgumentError, PayloadError
from .messages import Envelope, Message, OfferOutcome
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

log = logging.getLogger("sqldelay.tasks")

# a dead letter older than its handle's defer by more than this is another run's (a key
# used again); the margin covers the clocks of two processes that differ a little
_SINCE_MARGIN_MS = 5000


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
        timedelta; None: no limit). Polls, backing off from 20 ms to a second."""
        if self.keeps_results is False:
            raise InvalidArgumentError(
                f"task {self.task} keeps no results: make it with results=True")
        limit = timeout_seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        pause = 0.02
        while True:
            found = self.status()
            if found is not None and found.status is TaskStatus.SUCCEEDED:
                return found.return_value
            if found is not None and found.status is TaskStatus.FAILED:
                last = (found.error or "").strip().splitlines()
                raise TaskFailed(f"task {found.task or self.task} ({self.key}) failed after "
                                 f"{found.attempts} attempt(s): {last[0] if last else ''}",
                                 found)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                state = "not found" if found is None else found.status.value
                raise TimeoutError(f"task {self.task or ''} ({self.key}) has not finished "
                                   f"after {limit:g}s: {state}")
            sleep(pause if left is None else min(pause, left))
            pause = min(pause * 1.5, 1.0)


class Task(TaskBase):
    """A function registered with ``Tasks.task``: call it to run it here, ``defer`` it
    to have a worker run it."""

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
        try:
            outcomes = self.queue.offer_many(messages, connection=connection)
        except PayloadError as exc:  # named in the arguments as stored (models encoded)
            self.explain_payload_error(exc, [(m.payload.get("args", []),
                                              m.payload.get("kwargs", {})) for m in messages])
            raise
        return [TaskHandle(self.queue, m.key, task=self.name, outcome=outcome,
                           keeps_results=self.keeps_results, since_ms=since)
                for m, outcome in zip(messages, outcomes, strict=True)]


class Tasks(TasksBase):
    """Tasks deferred to a queue (``DelayedQueue``), and the handler a worker
    (``Worker``) runs them with: ``Worker(tasks.queue, tasks)``.
    One queue carries many tasks; a task may name a queue of its own (serve it too)."""

    queue_class = DelayedQueue
    task_class = Task

    def __call__(self, envelope: Envelope,
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
