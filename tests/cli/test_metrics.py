"""Prometheus metrics: a worker started with --metrics-port serves counters that move as it
handles messages, and the queues' depth read from the table; scraped over HTTP as Prometheus
does."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sqldelay import DelayedQueue, InvalidArgumentError, Message, OfferOutcome
from sqldelay.prometheus import PrometheusListener, serve

from .. import helpers
from ..conftest import unique_name
from .test_commands import COMMAND, ROOT, _one_target_per_server  # noqa: F401 (a fixture)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, token: str | None = None) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of http://127.0.0.1:port/metrics."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_for(check, port: int, what: str, timeout: float = 60) -> dict:
    """The samples of the first scrape of ``port`` that ``check`` accepts (the worker may not
    serve yet)."""
    seen = {}

    def scraped() -> dict | None:
        try:
            seen["last"] = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            return None  # not serving yet
        return seen["last"] if check(seen["last"]) else None

    try:
        return helpers.wait_for(scraped, timeout, what, interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last scrape: {seen.get('last')}") from None


def test_a_worker_serves_counters_that_move_and_the_queue_depth(backend_url, engine,
                                                                  table_name):
    name = unique_name("metrics")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer_many([Message("a", {}), Message("b", {}),
                      Message("later", {}, datetime.now(UTC) + timedelta(hours=1))])
    port = free_port()
    proc = subprocess.Popen(
        [*COMMAND, "worker", "tests.cli.handlers:handle", "--url", backend_url, "--table",
         table_name, "--queue", name, "--max-attempts", "1", "--idle-poll", "0.1",
         "--metrics-port", str(port)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        # messages that are no tasks: an empty task label
        first = wait_for(lambda s: value(s, "sqldelay_acked_total", queue=name, task="") == 2,
                         port, "two acks")
        assert value(first, "sqldelay_claimed_total", queue=name, task="") == 2
        assert value(first, "sqldelay_queue_scheduled", queue=name, type="json") == 1
        assert value(first, "sqldelay_in_flight", queue=name, task="") == 0

        queue.offer_many([Message("c", {}), Message("bad", {"fail": True})])
        second = wait_for(
            lambda s: value(s, "sqldelay_dead_lettered_total", queue=name, task="") == 1
            and value(s, "sqldelay_acked_total", queue=name, task="") == 3, port,
            "the second batch")
        assert value(second, "sqldelay_claimed_total", queue=name, task="") == 4
        assert value(second, "sqldelay_handler_seconds_count", queue=name, task="",
                     outcome="acked") == 3
        assert value(second, "sqldelay_handler_seconds_count", queue=name, task="",
                     outcome="dead_lettered") == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stderr.read()
    assert f"metrics at http://127.0.0.1:{port}/metrics" in log
    assert "3 handled" in log and "1 dead-lettered" in log


def test_offers_are_counted_by_outcome(engine, table_name):
    metrics = PrometheusListener()
    queue = DelayedQueue(engine, unique_name("offers"), table_name=table_name,
                         listeners=[metrics])
    assert queue.offer_many([Message("a", 1), Message("b", 1)]) == [OfferOutcome.CREATED] * 2
    queue.offer("a", 1, queue.get("a").scheduled_at)  # unchanged: ignored
    sample = metrics.registry.get_sample_value
    labels = {"queue": queue.name}
    assert sample("sqldelay_offered_total", {**labels, "outcome": "created"}) == 2
    assert sample("sqldelay_offered_total", {**labels, "outcome": "ignored"}) == 1


def test_metrics_are_served_on_loopback_or_with_a_token():
    metrics = PrometheusListener()
    metrics.claims.labels("q", "").inc()
    with pytest.raises(InvalidArgumentError, match="token"):
        serve(metrics.registry, free_port(), "0.0.0.0")
    port = free_port()
    server = serve(metrics.registry, port, "127.0.0.1", token="s3cret")
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(port)
        assert refused.value.code == 401
        assert value(scrape(port, "s3cret"), "sqldelay_claimed_total", queue="q",
                     task="") == 1
    finally:
        server.shutdown()


def test_without_the_extra_the_worker_says_what_to_install(tmp_path, backend_url, target,
                                                           table_name):
    if target.database != "sqlite":
        pytest.skip("the same message on every database")
    shadow = tmp_path / "prometheus_client"
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'prometheus_client'\", "
        "name='prometheus_client')\n")
    done = subprocess.run(
        [*COMMAND, "worker", "tests.cli.handlers:handle", "--url", backend_url, "--table",
         table_name, "--metrics-port", str(free_port()), "--drain"], cwd=ROOT,
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=60)
    assert done.returncode == 1
    assert "pip install 'sqldelay[prometheus]'" in done.stderr
