"""Tracing hooks: what a queue and a worker call around their operations, so a tracing
library can make spans of them (``sqldelay.otel`` does, for OpenTelemetry). ``Tracer`` itself
does nothing, at no cost: queues made without ``tracer=`` use it.

The operations: ``offer``, ``claim`` and ``ack`` around the queue's calls, and ``process``
around a worker's handler. An offer stores ``context()``, the
producer's trace context as text, with each message it creates or changes; the envelope of a
claimed message carries it back (``Envelope.trace_context``), for ``process`` to link to.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING

from .messages import Envelope

if TYPE_CHECKING:
    from .queue_base import QueueBase

OFFER, CLAIM, ACK = "offer", "claim", "ack"

# the task whose calls the offer under way defers (set by a task's defer, ``tasks``), for a
# tracer to name on the offer's span; None for any other offer
deferring: ContextVar[str | None] = ContextVar("sqldelay_deferring", default=None)


class Tracer:
    """No tracing; subclass it and override what you trace."""

    def span(self, operation: str, queue: str,
             count: int | None = None) -> AbstractContextManager[None]:
        """Around ``operation`` (OFFER, CLAIM or ACK) of ``count`` messages of
        ``queue``; an exception raised inside is the operation's failure."""
        return nullcontext()

    def context(self) -> str | None:
        """The current trace context, as text to store with offered messages (None: none)."""
        return None

    def process(self, envelope: Envelope[QueueBase]) -> AbstractContextManager[None]:
        """Around a worker's handler of ``envelope`` (``tasks_base.task_label`` names its task,
        for a task message)."""
        return nullcontext()


NO_TRACING = Tracer()
