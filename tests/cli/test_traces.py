"""OpenTelemetry traces: the span that handles a message in another process, later, links to
the span of the offer that scheduled it, through the trace context stored with the message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sqldelay import DelayedQueue, InvalidArgumentError, Message
from sqldelay.otel import OpenTelemetryTracer
from sqldelay.tracing import Tracer

from ..conftest import unique_name
from .test_commands import ROOT


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_the_consumer_span_links_to_the_producer_span_across_processes(backend_url, engine,
                                                                       table_name, spans,
                                                                       target):
    if target.database == "mysql":
        pytest.skip("the mariadb target runs it on the same server")
    provider, exporter = spans
    name = unique_name("traced")
    queue = DelayedQueue(engine, name, table_name=table_name,
                         tracer=OpenTelemetryTracer(provider))
    with provider.get_tracer("the-app").start_as_current_span("POST /signup"):
        queue.offer("welcome", {"to": "a@b.c"})
        queue.offer_many([Message("broken", {"fail": True}), Message("other", {})])
    untraced = DelayedQueue(engine, name, table_name=table_name)  # a producer without tracing
    untraced.offer("plain", {})
    produced = {s.name: s for s in exporter.get_finished_spans()}
    request = produced["POST /signup"]
    offers = [s for s in exporter.get_finished_spans() if s.name == f"offer {name}"]
    assert [s.parent.span_id for s in offers] == [request.context.span_id] * 2
    assert offers[0].attributes["messaging.operation.type"] == "send"
    assert offers[1].attributes["messaging.batch.message_count"] == 2

    done = subprocess.run([sys.executable, "-m", "tests.cli.otel_consumer", backend_url,
                           table_name, name], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    consumed = [json.loads(line) for line in done.stdout.splitlines()]
    handles = {s["attributes"]["messaging.message.id"]: s for s in consumed
               if s["name"] == f"handle {name}"}
    assert set(handles) == {"welcome", "broken", "other", "plain"}
    for key, offer in (("welcome", offers[0]), ("broken", offers[1]), ("other", offers[1])):
        span = handles[key]
        assert span["links"] == [[offer.context.trace_id, offer.context.span_id]], key
        assert span["kind"] == "CONSUMER" and span["parent"] is None
        assert span["trace_id"] != request.context.trace_id  # a trace of its own, linked
    assert handles["plain"]["links"] == []
    assert handles["broken"]["status"] == "ERROR"
    # the handler's own spans are children of the handle span
    sends = [s for s in consumed if s["name"] == "send email"]
    assert sorted(s["parent"] for s in sends) == sorted(s["span_id"] for s in handles.values())
    kinds = {s["name"].split()[0]: s["attributes"]["messaging.operation.type"]
             for s in consumed if s["name"].endswith(name)}
    assert kinds == {"claim": "receive", "handle": "process", "ack": "settle"}


def test_claims_carry_the_stored_context_on_both_fronts(make_queue, spans):
    provider, exporter = spans
    traced = make_queue(tracer=OpenTelemetryTracer(provider))
    traced.offer_many([Message("a", 1), Message("b", 2, group="g")])
    [offer] = exporter.get_finished_spans()
    ctx = offer.context
    stored = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    envelopes = traced.poll_many(10)
    assert {e.key: e.trace_context for e in envelopes} == {"a": stored, "b": stored}
    traced.ack_many(envelopes)
    assert [s.name.split()[0] for s in exporter.get_finished_spans()] == ["offer", "claim",
                                                                          "ack"]
    # an unchanged re-offer keeps the context of the offer that wrote the message
    plain = make_queue(traced.name)
    plain.offer("c", 1)
    traced.offer("c", 1, plain.get("c").scheduled_at)
    assert traced.poll().trace_context is None


def test_a_tracer_must_be_one(make_queue):
    with pytest.raises(InvalidArgumentError, match="Tracer"):
        make_queue(tracer=object())
    assert isinstance(OpenTelemetryTracer(), Tracer)
    assert make_queue(tracer=Tracer()).offer("k", 1) is not None

