"""``sqldelay queues`` and ``sqldelay stats [QUEUE]``: every queue of the table with its due,
scheduled, in-flight and dead-letter counts, how long the oldest due message has waited,
read in one pass over the table, and whether it is paused or limited (a queue paused or
limited with nothing in it is listed too); ``--watch`` refreshes in place, ``--json`` is for
scripts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

from ..inspection import Inspector
from ..inspection_base import QueueSummary
from ..messages import NO_FLOW_CONTROL, FlowControl
from .flow import as_json as flow_json
from .flow import controlled, limits_text
from .support import (
    CliError,
    add_db_arguments,
    add_json,
    open_engine,
    print_json,
    print_table,
    require_queue,
    shown,
)

if TYPE_CHECKING:
    from .support import Subcommands

COLUMNS = ["queue", "type", "due", "scheduled", "in flight", "dead letters", "oldest due",
           "paused", "limits"]
NUMBERS = ("due", "scheduled", "in flight", "dead letters", "oldest due")


def register(sub: Subcommands) -> None:
    p = sub.add_parser("queues", help="every queue with its counts",
                       description="Every queue of the table with its due, scheduled, in-flight "
                                   "and dead-letter counts,\nhow long the oldest due message "
                                   "has waited, read in one pass over the table, and\nwhether "
                                   "it is paused or limited (sqldelay stats QUEUE for one of "
                                   "them, or to\nwatch them).")
    add_db_arguments(p)
    add_json(p)
    p.set_defaults(func=run, queue=None, watch=None)

    p = sub.add_parser("stats", help="counts of one queue, or of all; --watch refreshes",
                       description="The counts of one queue, or of every queue: due, scheduled, "
                                   "in flight, dead letters,\nthe oldest due message's age, "
                                   "paused and limits. --watch reads them again until\nCtrl-C, "
                                   "refreshing in place; --json is for scripts.")
    p.add_argument("queue", nargs="?", default=None, help="one queue (default: every queue)")
    add_db_arguments(p)
    add_json(p)
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                   help="read again every SECONDS (2 when not given) until Ctrl-C; with --json "
                        "one JSON line per reading")
    p.set_defaults(func=run)


Row = tuple[QueueSummary, FlowControl]


def summaries(inspector: Inspector, queue: str | None) -> list[Row]:
    """The queues shown (all, or ``queue``), each with its flow control."""
    found = inspector.queues()
    settings = inspector.flow_controls()
    if queue is None:
        listed = {(s.queue, s.type_name) for s in found}
        found += [_empty(name, type_name) for (name, type_name), control in settings.items()
                  if (name, type_name) not in listed and controlled(control)]
        found.sort(key=lambda s: (s.queue, s.type_name))
        return [_with(s, settings) for s in found]
    mine = [s for s in found if s.queue == queue]
    if not mine:  # known all the same if it has settings (paused, limited), with nothing in it
        try:
            type_name = require_queue(inspector.engine, inspector.dao.table.name, queue)
        except CliError as exc:
            names = ", ".join(sorted({s.queue for s in found})) or "none"
            raise CliError(f"{exc} (queues with messages or dead letters: {names})") from None
        mine = [_empty(queue, type_name)]
    return [_with(s, settings) for s in mine]


def _empty(queue: str, type_name: str) -> QueueSummary:
    """A queue known by its settings alone: nothing in it."""
    return QueueSummary(queue, type_name, due=0, scheduled=0, in_flight=0, dead_letters=0,
                        oldest_due_age=None)


def _with(summary: QueueSummary, settings: dict[tuple[str, str], FlowControl]) -> Row:
    return summary, settings.get((summary.queue, summary.type_name), NO_FLOW_CONTROL)


def as_json(row: Row) -> dict[str, Any]:
    summary, control = row
    out = dataclasses.asdict(summary)
    age = summary.oldest_due_age
    out["oldest_due_age"] = None if age is None else age.total_seconds()
    return {**out, **flow_json(control)}


def run(args: argparse.Namespace) -> int:
    if args.watch is not None and args.watch <= 0:
        raise CliError("--watch takes a positive number of seconds")
    engine = open_engine(args)
    try:
        inspector = Inspector(engine, table_name=args.table)
        if args.watch is None:
            found = summaries(inspector, args.queue)
            if args.json:
                print_json([as_json(s) for s in found])
            else:
                print_table(f"{args.table} in {shown(args.resolved_url)}", COLUMNS,
                            rows(found), NUMBERS)
            return 0
        try:
            _watch(args, inspector)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a watch ends
        return 0
    finally:
        engine.dispose()


def rows(found: list[Row]) -> list[list[Any]]:
    return [[s.queue, s.type_name, s.due, s.scheduled, s.in_flight, s.dead_letters,
             s.oldest_due_age, "paused" if c.paused else "", limits_text(c)]
            for s, c in found]


def _watch(args: argparse.Namespace, inspector: Inspector) -> None:
    if args.json:
        while True:
            print(json.dumps([as_json(s) for s in summaries(inspector, args.queue)]),
                  flush=True)
            time.sleep(args.watch)
    from rich.live import Live
    from rich.table import Table

    def render() -> Table:
        table = Table(title=f"{args.table} in {shown(args.resolved_url)} "
                            f"(every {args.watch:g}s, Ctrl-C to stop)", title_justify="left")
        for name in COLUMNS:
            table.add_column(name, justify="right" if name in NUMBERS else "left")
        from .support import text
        for row in rows(summaries(inspector, args.queue)):
            table.add_row(*(text(v) for v in row))
        return table

    with Live(render(), auto_refresh=False) as live:
        while True:
            time.sleep(args.watch)
            live.update(render(), refresh=True)
