"""``sqldelay worker`` runs a handler function over a queue; ``sqldelay dead-letters`` lists,
requeues and drops what workers gave up on.

    sqldelay worker package.module:handler --url URL --queue emails --concurrency 4
    sqldelay dead-letters list --url URL --queue emails
    sqldelay dead-letters requeue --url URL 12 13      (or --all [--queue emails])
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from datetime import timedelta

from .dead_letters import DeadLetters
from .engines import create_async_engine, create_engine, is_async_url
from .queue import DelayedQueue
from .queue_async import AsyncDelayedQueue
from .retry import RetryPolicy
from .serializers import SERIALIZERS
from .worker import Worker
from .worker_async import AsyncWorker
from .worker_base import ProcessingMode


def register(sub) -> None:
    from .cli import add_db_arguments

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
                   help="payload format of the queues (default json)")
    p.add_argument("--concurrency", type=int, default=1, help="handler threads (default 1)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="messages per claim (default: the concurrency)")
    p.add_argument("--transactional", action="store_true",
                   help="claim, handler and ack in one transaction; the handler is called as "
                        "handler(envelope, connection)")
    p.add_argument("--max-attempts", type=int, default=10,
                   help="attempts before a message becomes a dead letter (default 10)")
    p.add_argument("--retry-delay", type=_seconds, default=timedelta(seconds=1),
                   help="seconds before the first retry (default 1)")
    p.add_argument("--retry-factor", type=float, default=2.0,
                   help="each retry waits this many times longer (default 2; 1 = fixed)")
    p.add_argument("--retry-max-delay", type=_seconds, default=timedelta(hours=1),
                   help="longest wait between attempts, in seconds (default 3600)")
    p.add_argument("--acquire-timeout", type=_seconds, default=timedelta(minutes=5),
                   help="seconds a claimed message stays locked (default 300)")
    p.add_argument("--heartbeat", type=_seconds, default=None,
                   help="renew the locks of running messages every this many seconds")
    p.add_argument("--idle-poll", type=_seconds, default=timedelta(seconds=1),
                   help="longest sleep when nothing is due, in seconds (default 1)")
    p.add_argument("--grace", type=_seconds, default=timedelta(seconds=30),
                   help="seconds running handlers get to finish on shutdown (default 30)")
    p.add_argument("--drain", action="store_true",
                   help="exit once nothing is due instead of waiting for more")
    p.set_defaults(func=run_worker)

    d = sub.add_parser("dead-letters", help="list, requeue or drop dead letters")
    actions = d.add_subparsers(dest="action", required=True)
    for name, helptext in (("list", "show dead letters, oldest first"),
                           ("requeue", "put dead letters back in their queues, due now"),
                           ("drop", "delete dead letters for good")):
        a = actions.add_parser(name, help=helptext)
        add_db_arguments(a)
        a.add_argument("--queue", default=None, help="only this queue's dead letters")
        if name == "list":
            a.add_argument("--limit", type=int, default=100, help="at most this many (100)")
        else:
            a.add_argument("ids", nargs="*", type=int, help="dead-letter ids")
            a.add_argument("--all", action="store_true",
                           help="every dead letter (of --queue, if given)")
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


def load_handler(spec: str) -> Callable:
    """Import ``package.module:function``, looking in the current directory too."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"handler must look like package.module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"cannot import {module_name!r} for the handler: {exc}") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SystemExit(f"{module_name!r} has no {attr!r}") from None
    if not callable(target):
        raise SystemExit(f"{spec} is not callable")
    return target


def run_worker(args: argparse.Namespace) -> int:
    handler = load_handler(args.handler)
    if args.retry_factor < 1:
        raise SystemExit("--retry-factor must be at least 1")
    retry = RetryPolicy.exponential(args.retry_delay, args.retry_factor,
                                    max_delay=args.retry_max_delay,
                                    max_attempts=args.max_attempts)
    queue_settings = {"table_name": args.table, "serializer": SERIALIZERS[args.serializer](),
                      "acquire_timeout": args.acquire_timeout}
    names = args.queues or ["default"]
    settings = {"concurrency": args.concurrency, "batch_size": args.batch_size, "retry": retry,
                "limits": dict(args.queue_limit),
                "mode": ProcessingMode.TRANSACTIONAL if args.transactional
                else ProcessingMode.AT_LEAST_ONCE,
                "idle_poll": args.idle_poll, "grace_period": args.grace,
                "heartbeat": args.heartbeat}
    if inspect.iscoroutinefunction(handler) or is_async_url(args.url):
        # an async def handler, or an async driver in the URL: the asyncio worker
        return asyncio.run(_run_async_worker(args, names, handler, queue_settings, settings))
    engine = create_engine(args.url)
    try:
        queues = {n: DelayedQueue(engine, n, **queue_settings) for n in names}
        worker = Worker(queues, handler, **settings)
        if args.drain:
            print(f"handled {worker.drain()} message(s)")
        else:
            worker.run()
    finally:
        engine.dispose()
    return 0


async def _run_async_worker(args: argparse.Namespace, names: list[str], handler: Callable,
                            queue_settings: dict, settings: dict) -> int:
    engine = create_async_engine(args.url)
    try:
        queues = {n: AsyncDelayedQueue(engine, n, **queue_settings) for n in names}
        worker = AsyncWorker(queues, handler, **settings)
        if args.drain:
            print(f"handled {await worker.drain()} message(s)")
        else:
            await worker.run()
    finally:
        await engine.dispose()
    return 0


def run_dead_letters(args: argparse.Namespace) -> int:
    engine = create_engine(args.url)
    try:
        letters = DeadLetters(engine, table_name=args.table)
        if args.action == "list":
            for dl in letters.list(args.queue, limit=args.limit):
                error = dl.last_error.splitlines()[0] if dl.last_error else ""
                print(f"{dl.id}\t{dl.queue}\t{dl.key}\tattempts={dl.attempts}\t"
                      f"failed_at={dl.failed_at.isoformat()}\t{error}")
            return 0
        if args.all == bool(args.ids):
            raise SystemExit("give dead-letter ids or --all, not both or neither")
        if args.ids and args.queue:
            raise SystemExit("--queue filters --all; with ids, give the ids alone")
        ids = letters.ids(args.queue) if args.all else args.ids
        if args.action == "requeue":
            print(f"requeued {letters.requeue(ids)} dead letter(s)")
        else:
            print(f"dropped {letters.drop(ids)} dead letter(s)")
        return 0
    finally:
        engine.dispose()
