"""``sqldelay worker`` runs a handler function over a queue; ``sqldelay dead-letters`` lists,
requeues and drops what workers gave up on.

    sqldelay worker package.module:handler --url URL --queue emails --concurrency 4
    sqldelay dead-letters list --url URL --queue emails
    sqldelay dead-letters requeue --url URL 12 13      (or --all [--queue emails])
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..concurrency_async import is_async_callable
from ..dead_letters import DeadLetters
from ..dead_letters_base import DeadLetter
from ..engines import create_async_engine, is_async_url
from ..inspection import Inspector
from ..inspection_async import AsyncInspector
from ..inspection_base import QueueSummary
from ..listeners import LoggingListener, WorkerListener
from ..messages import Envelope, QueueStats
from ..queue import DelayedQueue
from ..queue_async import AsyncDelayedQueue
from ..retry import RetryPolicy
from ..serializers import SERIALIZERS
from ..worker import Worker
from ..worker_async import AsyncWorker
from ..worker_base import ProcessingMode
from .support import (
    CliError,
    add_db_arguments,
    add_yes,
    checked_url,
    confirm,
    database_url,
    error_message,
    first_line,
    open_engine,
    print_json,
    print_table,
    reach_async,
    require_queue,
    shown,
)

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from ..otel import OpenTelemetryTracer
    from ..queue_base import QueueBase
    from .support import Subcommands

log = logging.getLogger("sqldelay.cli")
METRICS_TOKEN_ENV = "SQLDELAY_METRICS_TOKEN"


def register(sub: Subcommands) -> None:
    p = sub.add_parser("worker", help="run a handler function over a queue until stopped",
                       description="Run HANDLER (package.module:function) on every message of "
                                   "the queue. SIGTERM or SIGINT stop it cleanly. An async def "
                                   "handler (or an async driver in --url) runs on the asyncio "
                                   "worker, over the database's async driver.")
    p.add_argument("handler", help="the function to run, as package.module:function")
    add_db_arguments(p)
    p.add_argument("--queue", action="append", dest="queues", metavar="NAME",
                   help="a queue to work on; repeat it for several, claimed from in turn "
                        "(default: default)")
    p.add_argument("--queue-limit", action="append", default=[], metavar="NAME=N",
                   type=_queue_limit,
                   help="at most N messages of queue NAME handled at once by this worker")
    p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="json",
                   help="payload format of the queues")
    p.add_argument("--concurrency", type=int, default=1, help="handler threads")
    p.add_argument("--batch-size", type=int, default=None,
                   help="messages per claim (default: the concurrency)")
    p.add_argument("--transactional", action="store_true",
                   help="claim, handler and ack in one transaction; the handler is called as "
                        "handler(envelope, connection)")
    p.add_argument("--max-attempts", type=int, default=10,
                   help="attempts before a message becomes a dead letter")
    p.add_argument("--retry-delay", type=_seconds, default=timedelta(seconds=1),
                   help="seconds before the first retry")
    p.add_argument("--retry-factor", type=float, default=2.0,
                   help="each retry waits this many times longer (1: a fixed delay)")
    p.add_argument("--retry-max-delay", type=_seconds, default=timedelta(hours=1),
                   help="longest wait between attempts, in seconds")
    p.add_argument("--acquire-timeout", type=_seconds, default=timedelta(minutes=5),
                   help="seconds a claimed message stays locked")
    p.add_argument("--heartbeat", type=_seconds, default=None,
                   help="renew the locks of running messages every this many seconds")
    p.add_argument("--ack-window", type=_seconds, default=timedelta(milliseconds=20),
                   help="seconds a returned handler's ack waits for others to share its "
                        "statement")
    p.add_argument("--idle-poll", type=_seconds, default=timedelta(seconds=1),
                   help="longest sleep when nothing is due, in seconds")
    p.add_argument("--grace", type=_seconds, default=timedelta(seconds=30),
                   help="seconds running handlers get to finish on shutdown")
    p.add_argument("--drain", action="store_true",
                   help="exit once nothing is due instead of waiting for more")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="run the worker in N forked processes that share nothing but the "
                        "database (POSIX; not with --drain or --metrics-port)")
    p.add_argument("--otel", action="store_true",
                   help="OpenTelemetry spans of claims, handlers and acks, from the global "
                        "tracer provider (needs sqldelay[otel]; configure the SDK yourself, "
                        "e.g. with opentelemetry-instrument)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (needs "
                        "sqldelay[prometheus])")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help=f"address for the metrics; another than loopback needs a token in "
                        f"${METRICS_TOKEN_ENV}, which scrapers send as a bearer token")
    p.set_defaults(func=run_worker)

    d = sub.add_parser("dead-letters", help="list, requeue or drop dead letters")
    actions = d.add_subparsers(dest="action", required=True)
    for name, helptext in (("list", "show dead letters, oldest first"),
                           ("requeue", "put dead letters back in their queues, due now"),
                           ("drop", "delete dead letters for good")):
        a = actions.add_parser(name, help=helptext, description=helptext)
        add_db_arguments(a)
        a.add_argument("--queue", default=None, help="only this queue's dead letters")
        if name == "list":
            a.add_argument("--limit", type=int, default=100, help="at most this many")
            a.add_argument("--full", action="store_true",
                           help="the whole last error and payload, one letter after another")
            a.add_argument("--json", action="store_true", help="print JSON, for scripts")
        else:
            a.add_argument("ids", nargs="*", type=int, help="dead-letter ids")
            a.add_argument("--all", action="store_true",
                           help="every dead letter (of --queue, if given)")
            if name == "drop":
                add_yes(a)
        a.set_defaults(func=run_dead_letters)


def _seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"seconds must not be negative: {text!r}")
    return timedelta(seconds=value)


def _queue_limit(text: str) -> tuple[str, int]:
    name, sep, number = text.rpartition("=")
    if not sep or not name or not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"give NAME=N with N a positive integer, not {text!r}")
    return name, int(number)


def load_handler(spec: str) -> Callable[..., object]:
    """Import ``package.module:function``, looking in the current directory too."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"handler must look like package.module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r} for the handler: {exc}") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"{module_name!r} has no {attr!r}") from None
    if not callable(target):
        raise CliError(f"{spec} is not callable")
    return target


class _Counts(WorkerListener):
    """What the stop line reports."""

    def __init__(self) -> None:
        self.ok = self.retried = self.buried = 0
        self._lock = threading.Lock()

    def succeeded(self, envelope: Envelope[QueueBase], elapsed: timedelta) -> None:
        with self._lock:
            self.ok += 1

    def failed(self, envelope: Envelope[QueueBase], error: BaseException,
               retry_in: timedelta) -> None:
        with self._lock:
            self.retried += 1

    def dead_lettered(self, envelope: Envelope[QueueBase], error: BaseException) -> None:
        with self._lock:
            self.buried += 1


def run_worker(args: argparse.Namespace) -> int:
    handler = load_handler(args.handler)
    if args.processes > 1 and (args.drain or args.metrics_port is not None):
        raise CliError("--processes runs the worker in several processes until it is stopped: "
                       "not with --drain (one process) or --metrics-port (per process)")
    if args.retry_factor < 1:
        raise CliError("--retry-factor must be at least 1")
    retry = RetryPolicy.exponential(args.retry_delay, args.retry_factor,
                                    max_delay=args.retry_max_delay,
                                    max_attempts=args.max_attempts)
    queue_settings = {"table_name": args.table, "serializer": SERIALIZERS[args.serializer](),
                      "acquire_timeout": args.acquire_timeout, "tracer": _tracer(args)}
    names = args.queues or ["default"]
    settings = {"concurrency": args.concurrency, "batch_size": args.batch_size, "retry": retry,
                "limits": dict(args.queue_limit),
                "mode": ProcessingMode.TRANSACTIONAL if args.transactional
                else ProcessingMode.AT_LEAST_ONCE,
                "idle_poll": args.idle_poll, "grace_period": args.grace,
                "heartbeat": args.heartbeat, "ack_window": args.ack_window,
                "processes": args.processes}
    url = database_url(args)
    if is_async_callable(handler) or is_async_url(url):
        # an async def handler, or an async driver in the URL: the asyncio worker
        checked_url(args)
        return asyncio.run(_run_async_worker(args, names, handler, queue_settings, settings))
    engine = open_engine(args)
    metrics = None
    try:
        queues = {n: DelayedQueue(engine, n, **queue_settings) for n in names}
        counts = _Counts()
        listeners = [LoggingListener(), counts]
        metrics = _metrics(args, Inspector(engine, table_name=args.table).queues, listeners)
        worker = Worker(queues, handler, listeners=listeners, **settings)
        _started(args, worker)
        try:
            if args.drain:
                print(_drained(worker.drain(), counts))
                _left(args, [q.stats() for q in queues.values()])
            else:
                worker.run()
        finally:
            _stopped(counts, worker)
    finally:
        if metrics is not None:
            metrics.shutdown()
        engine.dispose()
    return 0


def _tracer(args: argparse.Namespace) -> OpenTelemetryTracer | None:
    if not args.otel:
        return None
    try:
        from ..otel import OpenTelemetryTracer
    except ModuleNotFoundError as exc:
        raise CliError(f"--otel needs {exc.name}: pip install 'sqldelay[otel]'") from None
    return OpenTelemetryTracer()


def _metrics(args: argparse.Namespace, read: Callable[[], list[QueueSummary]],
             listeners: list[WorkerListener]) -> WSGIServer | None:
    """With --metrics-port: a Prometheus listener added to ``listeners``, the queues' depth
    read by ``read`` when scraped, served over HTTP; returns the server (None without)."""
    if args.metrics_port is None:
        return None
    try:
        from ..prometheus import PrometheusListener, QueueDepthCollector, serve
    except ModuleNotFoundError as exc:
        raise CliError(f"--metrics-port needs {exc.name}: pip install "
                       "'sqldelay[prometheus]'") from None
    listener = PrometheusListener()
    listener.registry.register(QueueDepthCollector(read))
    try:
        server = serve(listener.registry, args.metrics_port, args.metrics_host,
                       os.environ.get(METRICS_TOKEN_ENV) or None)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: "
                       f"{exc.strerror or exc}") from None
    listeners.append(listener)
    log.info("metrics at http://%s:%d/metrics", args.metrics_host, args.metrics_port)
    return server


async def _run_async_worker(args: argparse.Namespace, names: list[str],
                            handler: Callable[..., object], queue_settings: dict[str, Any],
                            settings: dict[str, Any]) -> int:
    engine = create_async_engine(args.resolved_url)
    metrics = None
    try:
        await reach_async(engine, args)  # once, to fail early and clearly, as open_engine
        queues = {n: AsyncDelayedQueue(engine, n, **queue_settings) for n in names}
        counts = _Counts()
        listeners = [LoggingListener(), counts]
        inspector = AsyncInspector(engine, table_name=args.table)
        loop = asyncio.get_running_loop()

        def read() -> list[QueueSummary]:  # from the metrics server's thread, on this loop
            return asyncio.run_coroutine_threadsafe(inspector.queues(), loop).result(60)

        metrics = _metrics(args, read, listeners)
        worker = AsyncWorker(queues, handler, listeners=listeners, **settings)
        _started(args, worker)
        try:
            if args.drain:
                print(_drained(await worker.drain(), counts))
                _left(args, [await q.stats() for q in queues.values()])
            else:
                await worker.run()
        finally:
            _stopped(counts, worker)
    finally:
        if metrics is not None:
            metrics.shutdown()
        await engine.dispose()
    return 0


def _started(args: argparse.Namespace, worker: Worker | AsyncWorker) -> None:
    queues = list(worker.queues.values())
    if worker.wake_ups and any(q.dao.notifications for q in queues):
        wake = f"woken by notifications, else every {worker.idle_poll.total_seconds():g}s"
    else:
        wake = f"polling at least every {worker.idle_poll.total_seconds():g}s"
    log.info("worker started on %s, table %s, queue(s) %s, concurrency %d, %s",
             shown(args.resolved_url), args.table, ", ".join(worker.queues), worker.concurrency,
             wake)


def _stopped(counts: _Counts, worker: Worker | AsyncWorker) -> None:
    if worker.processes > 1:  # each process counted its own messages
        log.info("worker stopped: its %d processes have finished", worker.processes)
        return
    log.info("worker stopped: %d handled, %d failed and retried later, %d dead-lettered",
             counts.ok, counts.retried, counts.buried)


def _drained(handled: int, counts: _Counts) -> str:
    """What a drain did: how many handler calls succeeded and how many failed."""
    failed = counts.retried + counts.buried
    return (f"handled {handled} message(s): {counts.ok} succeeded, {failed} failed"
            + (f" ({counts.retried} to be retried, {counts.buried} dead-lettered)"
               if failed else ""))


def _left(args: argparse.Namespace, stats: Sequence[QueueStats]) -> None:
    """After a drain: what it leaves for later (retries not yet due, scheduled messages)."""
    later = sum(s.scheduled for s in stats)
    held = sum(s.in_flight for s in stats)
    if later or held:
        print(f"left {later} message(s) scheduled for later"
              + (f" and {held} in flight elsewhere" if held else "")
              + " (sqldelay peek --scheduled shows them)")


def run_dead_letters(args: argparse.Namespace) -> int:
    if args.action != "list":
        if args.all == bool(args.ids):
            raise CliError("give dead-letter ids or --all, not both or neither")
        if args.ids and args.queue:
            raise CliError("--queue filters --all; with ids, give the ids alone")
    engine = open_engine(args)
    try:
        letters = DeadLetters(engine, table_name=args.table)
        if args.queue is not None:
            require_queue(engine, args.table, args.queue)
        if args.action == "list":
            _list_dead_letters(letters.list(args.queue, limit=args.limit), args)
            return 0
        known = letters.ids(args.queue)
        unknown = sorted(set(args.ids) - set(known))
        if unknown:  # before anything changes
            raise CliError("no dead letter with id " + ", ".join(map(str, unknown))
                           + f" in {args.table}_dead: nothing changed")
        ids = known if args.all else args.ids
        if args.action == "requeue":
            print(f"requeued {letters.requeue(ids)} dead letter(s)")
            return 0
        if not ids:
            print("no dead letters" + (f" of queue {args.queue!r}" if args.queue else ""))
            return 0
        whose = (f"of queue {args.queue!r}" if args.queue else "of every queue") \
            if args.all else "(" + ", ".join(map(str, ids)) + ")"
        confirm(f"delete {len(ids)} dead letter(s) {whose} for good?", args)
        print(f"dropped {letters.drop(ids)} dead letter(s)")
        return 0
    finally:
        engine.dispose()


def _list_dead_letters(found: list[DeadLetter], args: argparse.Namespace) -> None:
    if args.json:
        print_json([dataclasses.asdict(dl) for dl in found])
    elif args.full:
        for dl in found:
            print(f"--- dead letter {dl.id}: {dl.queue} {dl.key}, {dl.attempts} attempt(s), "
                  f"failed at {dl.failed_at.isoformat()}\npayload: "
                  f"{dl.payload.decode('utf-8', 'replace')}\n{dl.last_error}")
    else:
        print_table(f"dead letters in {args.table}_dead", [
            "id", "queue", "key", "attempts", "failed at (UTC)", "last error", "payload"],
            [[dl.id, dl.queue, dl.key, dl.attempts, dl.failed_at,
              first_line(error_message(dl.last_error), 80),
              dl.payload.decode("utf-8", "replace")[:60]] for dl in found],
            right=("id", "attempts"))
        if not found:
            print("no dead letters" + (f" of queue {args.queue!r}" if args.queue else ""))
