"""``sqldelay demo``: produce and consume a few thousand delayed messages, with a progress bar.

Producers schedule messages a little into the future; consumers claim them in batches as they
fall due and ack them. At the end it reports how late deliveries were and checks that every
message arrived exactly once.

The demo deletes nothing it did not write: it runs in a table of its own by default
(``sqldelay_demo``), refuses a queue that already holds messages, and on Ctrl-C (or a
failure) drops the messages it scheduled and has not delivered.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NoReturn

from tqdm import tqdm

from ..messages import Message
from ..migrate import create_schema
from ..queue import DelayedQueue
from .support import CliError, add_db_arguments, open_engine, shown

if TYPE_CHECKING:
    from .support import Subcommands

DEMO_URL = "sqlite:///sqldelay-demo.db"
DEMO_TABLE = "sqldelay_demo"


def register(sub: Subcommands) -> None:
    p = sub.add_parser("demo", help="produce and consume delayed messages (SQLite by default)",
                       description=__doc__)
    add_db_arguments(p, queue="demo", url=DEMO_URL, table=DEMO_TABLE)
    p.add_argument("--messages", type=int, default=5000, help="how many messages")
    p.add_argument("--spread", type=float, default=3.0,
                   help="messages fall due over this many seconds")
    p.add_argument("--consumers", type=int, default=4, help="consumer threads")
    p.add_argument("--batch", type=int, default=50, help="messages per claim")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.messages < 1 or args.consumers < 1 or args.batch < 1 or args.spread < 0:
        raise CliError("--messages, --consumers and --batch must be positive, --spread >= 0")
    engine = open_engine(args, create=True, table=False)
    print(f"using {shown(args.resolved_url)}, table {args.table}, queue {args.queue}",
          file=sys.stderr)
    try:
        create_schema(engine, table_name=args.table)
        queue = DelayedQueue(engine, args.queue, table_name=args.table)
        _refuse_occupied(queue, args)
        return _run(queue, args, engine.dialect.name)
    finally:
        engine.dispose()


def _refuse_occupied(queue: DelayedQueue, args: argparse.Namespace) -> None:
    stats = queue.stats()
    held = stats.due + stats.scheduled + stats.in_flight
    if held:
        raise CliError(
            f"queue {args.queue!r} in table {args.table!r} already holds {held} message(s), "
            "and the demo never touches messages it did not write: give another --queue (or "
            f"--table); if they are left over from a killed demo, sqldelay purge {args.queue} "
            f"--table {args.table} --url {shown(args.resolved_url)} deletes them")


def _run(queue: DelayedQueue, args: argparse.Namespace, database: str) -> int:
    start = datetime.now(UTC)
    run_id = start.strftime("%H%M%S%f")
    messages = [Message(f"demo-{run_id}-{i}", {"n": i},
                        start + timedelta(seconds=random.uniform(0, args.spread)))
                for i in range(args.messages)]
    pending = {m.key for m in messages}  # written and not yet delivered
    seen: dict[str, int] = {}
    lags: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    threads: list[threading.Thread] = []
    bar = None
    try:
        for i in range(0, len(messages), 1000):
            queue.offer_many(messages[i:i + 1000])
        print(f"scheduled {args.messages} messages over {args.spread:g}s on {database}")
        bar = tqdm(total=args.messages, unit="msg", desc="delivered")

        def consume() -> None:
            while not done.is_set():
                batch = queue.poll_many(args.batch)
                if not batch:
                    time.sleep(0.02)  # nothing due yet: a worker sleeps until the next due time
                    continue
                now = datetime.now(UTC)
                queue.ack_many(batch)
                with lock:
                    for env in batch:
                        seen[env.key] = seen.get(env.key, 0) + 1
                        pending.discard(env.key)
                        lags.append((now - env.scheduled_at).total_seconds())
                    bar.update(len(batch))
                    if len(seen) >= args.messages:
                        done.set()

        threads = [threading.Thread(target=consume, daemon=True) for _ in range(args.consumers)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        finished = done.wait(timeout=args.spread + 120)
    except KeyboardInterrupt:
        _stop(done, threads, bar)
        print(f"interrupted: delivered {len(seen)} of {args.messages}; "
              f"dropped the {_drop(queue, pending)} undelivered demo message(s)")
        return 130
    _stop(done, threads, bar)
    elapsed = time.perf_counter() - began
    twice = sum(1 for n in seen.values() if n > 1)
    missing = args.messages - len(seen)
    lags.sort()
    print(f"delivered {len(seen)} of {args.messages} in {elapsed:.1f}s; "
          f"{twice} delivered more than once; {missing} missing")
    if lags:
        p95 = lags[int(0.95 * (len(lags) - 1))]
        print(f"lag after due time: median {statistics.median(lags) * 1000:.0f} ms, "
              f"p95 {p95 * 1000:.0f} ms")
    if pending:
        print(f"dropped the {_drop(queue, pending)} undelivered demo message(s)")
    return 0 if finished and not missing and not twice else 1


def _stop(done: threading.Event, threads: list[threading.Thread],
          bar: tqdm[NoReturn] | None) -> None:
    done.set()
    for t in threads:
        # Ctrl-C can land while the consumers are being started: a thread whose start had not
        # got as far as running it is not alive, and sees ``done`` set before its first claim
        if t.is_alive():
            t.join()
    if bar is not None:
        bar.close()


def _drop(queue: DelayedQueue, keys: set[str]) -> int:
    """Delete the demo's own undelivered messages, by key: nothing else."""
    return sum(queue.drop(key) for key in sorted(keys))
