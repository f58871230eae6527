"""Lifecycle listeners: hooks a Worker calls as messages move through it (and a queue calls
as messages are offered), for metrics, tracing and logs.

Subclass ``WorkerListener`` and override what you need; every method is a no-op by default.
A listener that raises is logged and otherwise ignored: observing a worker never breaks it.
Methods are called from the worker's threads, several at once when ``concurrency > 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from .messages import Envelope, OfferOutcome

if TYPE_CHECKING:
    from .queue_base import QueueBase

log = logging.getLogger("sqldelay.worker")


# the envelopes are those of either front end's worker: Envelope[DelayedQueue] or
# Envelope[AsyncDelayedQueue]
class WorkerListener:
    def picked(self, envelopes: Sequence[Envelope[QueueBase]]) -> None:
        """A claim came back with ``envelopes`` (two claims a worker makes at once come as
        two batches), before any of them is handled."""

    def started(self, envelope: Envelope[QueueBase]) -> None:
        """The handler is about to run."""

    def succeeded(self, envelope: Envelope[QueueBase], elapsed: timedelta) -> None:
        """The handler returned; the message will be (or, in transactional mode, was) acked."""

    def failed(self, envelope: Envelope[QueueBase], error: BaseException,
               retry_in: timedelta) -> None:
        """The handler raised; the message comes back after ``retry_in``."""

    def dead_lettered(self, envelope: Envelope[QueueBase], error: BaseException) -> None:
        """The handler raised on the last allowed attempt; the message is now a dead letter."""

    def idle(self) -> None:
        """The worker found nothing due and is going to sleep."""

    def crashed(self, error: BaseException, retrying: bool) -> None:
        """The worker's own work failed: with ``retrying`` the database is unreachable and the
        worker backs off and tries again (it logs that itself); otherwise the worker stops and
        ``run()`` raises ``error``."""


class QueueListener:
    """What a queue made with ``listeners=`` calls; override what you need."""

    def offered(self, queue: str, outcomes: Sequence[OfferOutcome]) -> None:
        """An offer (or ``offer_many``) of queue ``queue`` ran, with these outcomes; in the
        caller's transaction (``connection=``) it is not committed yet."""


class LoggingListener(WorkerListener):
    """Logs each event on the ``sqldelay.worker`` logger: failures at WARNING, dead letters
    and crashes at ERROR, the rest at DEBUG."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or log

    def picked(self, envelopes: Sequence[Envelope[QueueBase]]) -> None:
        self.log.debug("picked %d message(s)", len(envelopes))

    def started(self, envelope: Envelope[QueueBase]) -> None:
        self.log.debug("started %s (attempt %d)", envelope.key, envelope.attempt)

    def succeeded(self, envelope: Envelope[QueueBase], elapsed: timedelta) -> None:
        self.log.debug("succeeded %s in %.3fs", envelope.key, elapsed.total_seconds())

    def failed(self, envelope: Envelope[QueueBase], error: BaseException,
               retry_in: timedelta) -> None:
        self.log.warning("failed %s (attempt %d): %s: %s; retrying in %s", envelope.key,
                         envelope.attempt, type(error).__name__, error, retry_in)

    def dead_lettered(self, envelope: Envelope[QueueBase], error: BaseException) -> None:
        self.log.error("dead-lettered %s after %d attempt(s): %s: %s", envelope.key,
                       envelope.attempt, type(error).__name__, error)

    def idle(self) -> None:
        self.log.debug("idle")

    def crashed(self, error: BaseException, retrying: bool) -> None:
        if not retrying:
            self.log.error("worker crashed: %s: %s", type(error).__name__, error)


class Listeners:
    """Calls every listener in turn, and keeps one that raises from reaching the worker."""

    def __init__(self, listeners: Sequence[WorkerListener | QueueListener]) -> None:
        self._listeners = tuple(listeners)
        self._hearing: dict[str, tuple[WorkerListener | QueueListener, ...]] = {}

    def _heard_by(self, event: str) -> tuple[WorkerListener | QueueListener, ...]:
        """The listeners whose method for ``event`` does something: the no-op of the base
        classes is not called (a worker emits two events a message)."""
        hearing = self._hearing.get(event)
        if hearing is None:
            silent = {getattr(WorkerListener, event, None), getattr(QueueListener, event, None)}
            hearing = self._hearing[event] = tuple(
                listener for listener in self._listeners
                if event in getattr(listener, "__dict__", ())
                or getattr(type(listener), event, None) not in silent)
        return hearing

    def hears(self, event: str) -> bool:
        """Whether a listener does something on ``event``: where none does, a worker spares
        itself the arguments (a handler's timing) and the call."""
        return bool(self._heard_by(event))

    def emit(self, event: str, *args: object) -> None:
        for listener in self._heard_by(event):
            try:
                getattr(listener, event)(*args)
            except Exception:
                log.exception("listener %r failed on %s", listener, event)
