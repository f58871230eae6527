"""Prometheus metrics for sqldelay (``pip install 'sqldelay[prometheus]'``; this module is
imported only when asked for).

``PrometheusListener`` counts what workers and producers do, as a ``WorkerListener`` (give it
to ``Worker(listeners=...)``) and a ``QueueListener`` (``DelayedQueue(listeners=...)``):

- ``sqldelay_offered_total{queue,outcome}`` offers by outcome (created, updated, ignored);
- ``sqldelay_claimed_total{queue,task}``, ``sqldelay_acked_total{queue,task}`` (handled and
  acked), ``sqldelay_failed_total{queue,task}`` (will be retried),
  ``sqldelay_dead_lettered_total{queue,task}``;
- ``sqldelay_handler_seconds{queue,task,outcome}`` a histogram of handler run time;
- ``sqldelay_in_flight{queue,task}`` the messages this process's handlers are running.

``task`` is the name of a task message's task (``sqldelay.tasks``) when a registry of this
process has it, ``(unregistered)`` when it names another, and empty for a message that is no
task: its values are bounded by the tasks the worker's code registers.

``QueueDepthCollector`` reads the table itself when scraped: ``sqldelay_queue_due``,
``_scheduled``, ``_in_flight``, ``_dead_letters`` and ``sqldelay_queue_oldest_due_seconds`` for
every queue, in one read of the table (``Inspector.queues``) at most every ``min_interval``,
so frequent scrapes by several Prometheus servers cost the database one query per interval.

``serve(registry, port, ...)`` exposes a registry over HTTP, on loopback unless a bearer token
is given; ``sqldelay worker --metrics-port`` does it all for a worker.
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily

from .errors import InvalidArgumentError
from .inspection_base import QueueSummary
from .listeners import QueueListener, WorkerListener
from .messages import Envelope, OfferOutcome
from .tasks_base import task_label

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from .queue_base import QueueBase

__all__ = ["PrometheusListener", "QueueDepthCollector", "serve"]


class PrometheusListener(WorkerListener, QueueListener):
    """Counters, a handler-time histogram and an in-flight gauge, in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.offers = Counter("sqldelay_offered", "Messages offered, by outcome",
                              ["queue", "outcome"], registry=r)
        self.claims = Counter("sqldelay_claimed", "Messages claimed by workers",
                              ["queue", "task"], registry=r)
        self.acks = Counter("sqldelay_acked", "Messages handled and acked", ["queue", "task"],
                            registry=r)
        self.failures = Counter("sqldelay_failed", "Handler failures, retried later",
                                ["queue", "task"], registry=r)
        self.burials = Counter("sqldelay_dead_lettered", "Messages moved to the dead letters",
                               ["queue", "task"], registry=r)
        self.handler_seconds = Histogram("sqldelay_handler_seconds", "Handler run time",
                                         ["queue", "task", "outcome"], registry=r)
        self.running = Gauge("sqldelay_in_flight", "Messages this process's handlers run",
                             ["queue", "task"], registry=r)
        # id(envelope) -> when its handler began, and its labels then
        self._began: dict[int, tuple[float, tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def offered(self, queue: str, outcomes: Sequence[OfferOutcome]) -> None:
        for outcome in outcomes:
            self.offers.labels(queue, outcome.value).inc()

    def picked(self, envelopes: Sequence[Envelope[QueueBase]]) -> None:
        for env in envelopes:
            self.claims.labels(*_labels(env)).inc()

    def started(self, envelope: Envelope[QueueBase]) -> None:
        labels = _labels(envelope)
        with self._lock:
            self._began[id(envelope)] = (time.perf_counter(), labels)
        self.running.labels(*labels).inc()

    def succeeded(self, envelope: Envelope[QueueBase], elapsed: timedelta) -> None:
        self.acks.labels(*self._finished(envelope, "acked")).inc()

    def failed(self, envelope: Envelope[QueueBase], error: BaseException,
               retry_in: timedelta) -> None:
        self.failures.labels(*self._finished(envelope, "failed")).inc()

    def dead_lettered(self, envelope: Envelope[QueueBase], error: BaseException) -> None:
        self.burials.labels(*self._finished(envelope, "dead_lettered")).inc()

    def _finished(self, envelope: Envelope[QueueBase], outcome: str) -> tuple[str, str]:
        """The labels of a handler's end (those it started with), its time observed."""
        with self._lock:
            began = self._began.pop(id(envelope), None)
        if began is None:
            return _labels(envelope)
        at, labels = began
        self.running.labels(*labels).dec()
        self.handler_seconds.labels(*labels, outcome).observe(time.perf_counter() - at)
        return labels


def _labels(envelope: Envelope[QueueBase]) -> tuple[str, str]:
    return envelope.queue.name, task_label(envelope)


class QueueDepthCollector:
    """Gauges of every queue's depth, read from the table when scraped, at most once per
    ``min_interval`` (scrapes in between get the last reading). ``read`` returns the
    queues' summaries: ``Inspector(engine).queues``, or a function that runs
    ``AsyncInspector.queues`` on the worker's event loop."""

    GAUGES = (("due", "Messages due now, expired locks included"),
              ("scheduled", "Messages not yet due"),
              ("in_flight", "Messages claimed, lock not expired"),
              ("dead_letters", "Dead letters"))

    def __init__(self, read: Callable[[], list[QueueSummary]], *,
                 min_interval: timedelta = timedelta(seconds=5)) -> None:
        self._read = read
        self._interval = min_interval.total_seconds()
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._last: list[QueueSummary] = []

    def summaries(self) -> list[QueueSummary]:
        with self._lock:  # one reading at a time; the others wait for it and share it
            if time.monotonic() - self._at >= self._interval:
                self._last = self._read()
                self._at = time.monotonic()
            return self._last

    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = self.summaries()
        for name, text in self.GAUGES:
            family = GaugeMetricFamily(f"sqldelay_queue_{name}", text,
                                       labels=["queue", "type"])
            for s in found:
                family.add_metric([s.queue, s.type_name], getattr(s, name))
            yield family
        oldest = GaugeMetricFamily("sqldelay_queue_oldest_due_seconds",
                                   "How long the oldest due message has waited (0: none due)",
                                   labels=["queue", "type"])
        for s in found:
            age = s.oldest_due_age
            oldest.add_metric([s.queue, s.type_name], 0.0 if age is None else age.total_seconds())
        yield oldest


def serve(registry: CollectorRegistry, port: int, host: str = "127.0.0.1",
          token: str | None = None) -> WSGIServer:
    """Serve ``registry`` at http://host:port/metrics from a background thread; returns the
    server (``shutdown()`` stops it). With ``token`` a scrape must send
    ``Authorization: Bearer <token>``; an address other than loopback needs one."""
    if token is None and not _loopback(host):
        raise InvalidArgumentError(
            f"metrics on {host} would be open to the network: give a token (scrapers send it "
            "as a bearer token), or serve on 127.0.0.1")
    metrics: WSGIApplication = make_wsgi_app(registry)  # typed as a bare Callable there
    expected = f"Bearer {token}".encode()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if token is not None and not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer"),
                                                ("Content-Type", "text/plain")])
            return [b"a bearer token is required\n"]
        return metrics(environ, start_response)

    server = make_server(host, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="sqldelay-metrics", daemon=True).start()
    return server


class _QuietHandler(WSGIRequestHandler):
    # scrapes are not worth a log line each
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
