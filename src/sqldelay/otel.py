"""OpenTelemetry traces for sqldelay (``pip install 'sqldelay[otel]'``; this module is imported
only when asked for).

``OpenTelemetryTracer`` makes spans following the messaging semantic conventions:

| span | kind | ``messaging.operation.type`` |
|---|---|---|
| ``offer <queue>`` | PRODUCER | ``send`` |
| ``claim <queue>`` | CLIENT | ``receive`` |
| ``handle <queue>`` (a worker's handler) | CONSUMER | ``process`` |
| ``ack <queue>`` | CLIENT | ``settle`` |

An ack sent in the next claim's statement (``poll_many(ack=...)`` on PostgreSQL) is an ``ack``
span around that ``claim`` span: one round trip did both.

Each span has ``messaging.system`` = ``sqldelay``, ``messaging.destination.name`` = the queue,
``messaging.operation.name``, ``messaging.batch.message_count`` for batches and
``messaging.message.id`` (the key) on a handler's span, with ``messaging.sqldelay.task`` the
task's name for a task message (``sqldelay.tasks``: a name a registry of the worker's process
has, else ``(unregistered)``; the conventions name no attribute for it), and on the offer of a
task's ``defer`` the task's name too. An offer stores the
producer's W3C ``traceparent`` with each message it creates or changes; the handler's span,
days later in another process, links to it (a link, not a parent: the request that scheduled a
reminder has long ended when the reminder is sent), and the handler runs inside its span.

    tracer = OpenTelemetryTracer()                  # the global TracerProvider, or pass one
    q = DelayedQueue(engine, "emails", tracer=tracer)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from .messages import Envelope
from .tasks_base import task_label
from .tracing import ACK, CLAIM, OFFER, Tracer, deferring

if TYPE_CHECKING:
    from .queue_base import QueueBase

__all__ = ["OpenTelemetryTracer"]

SYSTEM = "sqldelay"
# sqldelay's operation -> (span kind, messaging.operation.type)
_KINDS = {OFFER: (trace.SpanKind.PRODUCER, "send"),
          CLAIM: (trace.SpanKind.CLIENT, "receive"),
          ACK: (trace.SpanKind.CLIENT, "settle")}
_W3C = TraceContextTextMapPropagator()  # the stored form stays W3C whatever the app propagates


class OpenTelemetryTracer(Tracer):
    """Spans of offers, claims, handlers and acks, from ``tracer_provider`` (default: the
    global one)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("sqldelay", _version(),
                                        tracer_provider=tracer_provider)

    @contextmanager
    def span(self, operation: str, queue: str, count: int | None = None) -> Iterator[None]:
        kind, operation_type = _KINDS[operation]
        attributes = _attributes(queue, operation, operation_type)
        if count is not None and count != 1:
            attributes["messaging.batch.message_count"] = count
        if operation == OFFER and (task := deferring.get()) is not None:
            attributes["messaging.sqldelay.task"] = task
        with self._tracer.start_as_current_span(f"{operation} {queue}", kind=kind,
                                                attributes=attributes):
            yield

    def context(self) -> str | None:
        carrier: dict[str, str] = {}
        _W3C.inject(carrier)  # nothing when there is no valid current span
        return carrier.get("traceparent")

    @contextmanager
    def process(self, envelope: Envelope[QueueBase]) -> Iterator[None]:
        queue = envelope.queue.name
        attributes = _attributes(queue, "handle", "process")
        attributes["messaging.message.id"] = envelope.key
        attributes["messaging.sqldelay.attempt"] = envelope.attempt
        task = task_label(envelope)
        if task:
            attributes["messaging.sqldelay.task"] = task
        links = []
        if envelope.trace_context:
            producer = trace.get_current_span(
                _W3C.extract({"traceparent": envelope.trace_context})).get_span_context()
            if producer.is_valid:
                links.append(trace.Link(producer))
        # a root of its own: the worker's loop is no request of the producer's
        with self._tracer.start_as_current_span(
                f"handle {queue}", kind=trace.SpanKind.CONSUMER, attributes=attributes,
                links=links, context=trace.set_span_in_context(trace.INVALID_SPAN)):
            yield


def _attributes(queue: str, name: str, operation_type: str) -> dict[str, AttributeValue]:
    return {"messaging.system": SYSTEM, "messaging.destination.name": queue,
            "messaging.operation.name": name, "messaging.operation.type": operation_type}


def _version() -> str:
    try:
        return version("sqldelay")
    except PackageNotFoundError:
        return "unknown"
