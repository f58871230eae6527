"""Metrics and traces per task: a worker running a registry labels what it does with each
message's task name, and only with names its registry has (a producer's stray names share one
label value, so they cannot multiply the series)."""

from __future__ import annotations

from datetime import timedelta

from sqldelay import DelayedQueue, RetryPolicy, Tasks, Worker
from sqldelay.otel import OpenTelemetryTracer
from sqldelay.prometheus import PrometheusListener
from sqldelay.tasks_base import UNREGISTERED

from ..conftest import unique_name


def test_a_worker_reports_each_task_by_name(engine, table_name, spans):
    provider, exporter = spans
    queue = DelayedQueue(engine, unique_name("obs"), table_name=table_name,
                         tracer=OpenTelemetryTracer(provider))
    tasks = Tasks(queue)

    @tasks.task(name="emails.send")
    def send(to):
        return to

    @tasks.task(name="reports.build", retry=RetryPolicy.fixed(timedelta(0), max_attempts=2))
    def build():
        raise RuntimeError("no data")

    send.defer(to="a"), send.defer(to="b"), build.defer()
    stray = unique_name("stray.task")
    queue.offer("stray", {"task": stray})
    queue.offer("plain", [1, 2])
    metrics = PrometheusListener()
    Worker(queue, tasks, listeners=[metrics]).drain()

    def sample(metric: str, task: str, **labels) -> float | None:
        return metrics.registry.get_sample_value(metric, {"queue": queue.name, "task": task,
                                                          **labels})

    assert sample("sqldelay_acked_total", "emails.send") == 2
    assert sample("sqldelay_failed_total", "reports.build") == 1
    assert sample("sqldelay_dead_lettered_total", "reports.build") == 1
    assert sample("sqldelay_claimed_total", "reports.build") == 2
    assert sample("sqldelay_handler_seconds_count", "emails.send", outcome="acked") == 2
    assert sample("sqldelay_in_flight", "emails.send") == 0
    # a name no registry has: one shared value, never the name itself
    assert sample("sqldelay_dead_lettered_total", UNREGISTERED) == 1
    assert sample("sqldelay_claimed_total", stray) is None
    assert sample("sqldelay_dead_lettered_total", "") == 1  # no task message at all

    handled = [s for s in exporter.get_finished_spans() if s.name == f"handle {queue.name}"]
    by_key = {}
    for span in handled:
        by_key.setdefault(span.attributes["messaging.message.id"], []).append(
            span.attributes.get("messaging.sqldelay.task"))
    assert sorted(by_key.pop("stray") + by_key.pop("plain"), key=str) == [UNREGISTERED, None]
    assert sorted(map(tuple, by_key.values())) == [
        ("emails.send",), ("emails.send",), ("reports.build", "reports.build")]
    # the producer's side: each defer's offer names its task, a plain offer none
    offers = [s.attributes.get("messaging.sqldelay.task")
              for s in exporter.get_finished_spans() if s.name == f"offer {queue.name}"]
    assert offers == ["emails.send", "emails.send", "reports.build", None, None]
