"""``sqldelay demo``: produce and consume a few thousand delayed messages, with a progress bar.

Producers schedule messages a little into the future; consumers claim them in batches as they
fall due and ack them. At the end it reports how late deliveries were and checks that every
message arrived exactly once.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from tqdm import tqdm

from .messages import Message
from .queue import DelayedQueue
from .schema import create_schema


def register(sub) -> None:
    from .cli import add_db_arguments

    p = sub.add_parser("demo", help="produce and consume delayed messages (SQLite by default)")
    add_db_arguments(p, queue="demo")
    p.add_argument("--messages", type=int, default=5000, help="how many messages (default 5000)")
    p.add_argument("--spread", type=float, default=3.0,
                   help="messages fall due over this many seconds (default 3)")
    p.add_argument("--consumers", type=int, default=4, help="consumer threads (default 4)")
    p.add_argument("--batch", type=int, default=50, help="messages per claim (default 50)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.messages < 1 or args.consumers < 1 or args.batch < 1 or args.spread < 0:
        raise SystemExit("--messages, --consumers and --batch must be positive, --spread >= 0")
    engine = sa.create_engine(args.url)
    create_schema(engine, table_name=args.table)
    queue = DelayedQueue(engine, args.queue, table_name=args.table)
    queue.clear()

    start = datetime.now(UTC)
    messages = [Message(f"demo-{i}", {"n": i},
                        start + timedelta(seconds=random.uniform(0, args.spread)))
                for i in range(args.messages)]
    for i in range(0, len(messages), 1000):
        queue.offer_many(messages[i:i + 1000])
    print(f"scheduled {args.messages} messages over {args.spread:g}s on {engine.dialect.name}")

    seen: dict[str, int] = {}
    lags: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    bar = tqdm(total=args.messages, unit="msg", desc="delivered")

    def consume() -> None:
        while not done.is_set():
            batch = queue.poll_many(args.batch)
            if not batch:
                time.sleep(0.02)  # nothing due yet: a worker would sleep until the next due time
                continue
            now = datetime.now(UTC)
            queue.ack_many(batch)
            with lock:
                for env in batch:
                    seen[env.key] = seen.get(env.key, 0) + 1
                    lags.append((now - env.scheduled_at).total_seconds())
                bar.update(len(batch))
                if len(seen) >= args.messages:
                    done.set()

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(args.consumers)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    finished = done.wait(timeout=args.spread + 120)
    done.set()
    for t in threads:
        t.join()
    bar.close()
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
    engine.dispose()
    return 0 if finished and not missing and not twice else 1
