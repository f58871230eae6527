"""A consumer process for the tracing test: drains a queue with an OpenTelemetry tracer whose
spans go to an in-memory exporter, and prints them as JSON lines.

    python -m tests.cli.otel_consumer URL TABLE QUEUE
"""

from __future__ import annotations

import json
import sys

import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sqldelay import DelayedQueue, Worker
from sqldelay.otel import OpenTelemetryTracer


def span_json(span) -> dict:
    return {"name": span.name, "kind": span.kind.name,
            "trace_id": span.context.trace_id, "span_id": span.context.span_id,
            "parent": span.parent.span_id if span.parent else None,
            "links": [[link.context.trace_id, link.context.span_id] for link in span.links],
            "attributes": dict(span.attributes), "status": span.status.status_code.name}


def main(url: str, table: str, queue_name: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = provider.get_tracer("the-app")

    def handle(envelope) -> None:
        with app.start_as_current_span("send email"):  # the handler's own work
            if envelope.payload.get("fail"):
                raise ValueError("mail server down")

    engine = sa.create_engine(url)
    queue = DelayedQueue(engine, queue_name, table_name=table,
                         tracer=OpenTelemetryTracer(provider))
    Worker(queue, handle, listeners=[]).drain()
    engine.dispose()
    for span in exporter.get_finished_spans():
        print(json.dumps(span_json(span)))


if __name__ == "__main__":
    main(*sys.argv[1:])
