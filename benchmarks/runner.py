"""``python -m benchmarks``: run scenarios against one database, print and save the results."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from sqldelay.retry_counts import counting

from . import environment, report
from .harness import SIZES, Bench
from .scenarios import OPTIONAL, SCENARIOS


def build_parser(prog: str = "python -m benchmarks") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--url", default=None,
                        help="SQLAlchemy URL of the database to measure (default: an embedded "
                             "SQLite file bench.db in the --out directory)")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), metavar="NAME",
                        help="run only this scenario (repeatable); one of: "
                             + ", ".join(SCENARIOS) + " (default: all but "
                             + ", ".join(sorted(OPTIONAL)) + ")")
    parser.add_argument("--out", default="bench-results", type=Path,
                        help="directory for the JSON file and the plots (default: bench-results)")
    parser.add_argument("--size", choices=list(SIZES), default="default",
                        help="how much work each scenario does; tiny only proves the code runs")
    parser.add_argument("--churn-cycles", type=int, default=None,
                        help="batches per preset in the churn scenario (default: per --size)")
    parser.add_argument("--consumers", type=int, default=4, help="consumer threads (default 4)")
    parser.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    parser.add_argument("--batch", type=int, default=100, help="messages per batch (default 100)")
    parser.add_argument("--peers-url", default=None,
                        help="PostgreSQL URL of a database the peers (pgqueuer, procrastinate) "
                             "may install their schemas in (default: none, peers are skipped)")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m benchmarks") -> int:
    return run(build_parser(prog).parse_args(argv))


def run(args: argparse.Namespace) -> int:
    if min(args.consumers, args.producers, args.batch) < 1:
        raise SystemExit("--consumers, --producers and --batch must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.url is None:
        args.url = f"sqlite:///{args.out / 'bench.db'}"
    try:
        sa.make_url(args.url)
    except sa.exc.ArgumentError as exc:
        raise SystemExit(f"--url: {exc}") from None
    names = args.scenario or [name for name in SCENARIOS if name not in OPTIONAL]
    sizes = SIZES[args.size]
    if args.churn_cycles is not None:
        if args.churn_cycles < 1:
            raise SystemExit("--churn-cycles must be at least 1")
        sizes = dataclasses.replace(sizes, churn_cycles=args.churn_cycles)
    bench = Bench(args.url, sizes=sizes, consumers=args.consumers,
                  producers=args.producers, batch=args.batch, peers_url=args.peers_url)
    started = {"environment": environment.describe(bench.engine),
               "load_before": environment.load()}
    timings = {}
    try:
        for name in names:
            print(f"-- {name}", file=sys.stderr, flush=True)
            began = time.perf_counter()
            first = len(bench.figures)
            with counting() as seen:
                SCENARIOS[name](bench)
            timings[name] = round(time.perf_counter() - began, 1)
            for fig in bench.figures[first:]:
                if report.is_ours(fig.subject):
                    fig.retries, fig.deadlocks = seen.retries, seen.deadlocks
    finally:
        bench.close()
    label = f"{bench.dialect}, {os.cpu_count()} cores"
    run_info = {**started, "load_after": environment.load(), "command": sys.argv,
                "settings": {"url": sa.make_url(args.url).render_as_string(),
                             "scenarios": names, "size": args.size, "sizes": vars(bench.sizes),
                             "consumers": args.consumers, "producers": args.producers,
                             "batch": args.batch},
                "seconds_per_scenario": timings}
    json_path = args.out / f"results-{bench.dialect}.json"
    report.write_json(json_path, run_info, bench.figures)
    pngs = report.plots(args.out, bench.dialect, label, bench.figures)
    print(report.table(bench.figures))
    print(f"\nwrote {json_path}" + "".join(f", {p}" for p in pngs))
    return 0
