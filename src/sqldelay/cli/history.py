"""``sqldelay history QUEUE KEY`` prints a message's timeline from the history table:

    sqldelay history --url URL emails welcome:42           (a table, oldest first)
    sqldelay history --url URL emails welcome:42 --json    (one JSON object per line)

In the table each event is one row, a detail of several lines (a failure's traceback) shown
by its first line, which holds the error's message; --json gives every detail whole.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import SchemaMissingError
from ..queue import DelayedQueue
from ..serializers import SERIALIZERS
from .support import CliError, add_db_arguments, database, first_line, print_table

if TYPE_CHECKING:
    from .support import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("history", help="print a message's history (queues kept with history)",
                       description=__doc__)
    add_db_arguments(p)
    p.add_argument("queue", help="queue name")
    p.add_argument("key", help="message key")
    p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="json",
                   help="the queue's payload type, part of its identity (default: json)")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    p.set_defaults(func=run_history)


def run_history(args: argparse.Namespace) -> int:
    with database(args) as engine:  # --url, else $SQLDELAY_URL, as every command
        queue = DelayedQueue(engine, args.queue, table_name=args.table, history=True,
                             serializer=SERIALIZERS[args.serializer]())
        try:
            events = queue.history(args.key)
        except SchemaMissingError:
            assert queue.recorder is not None  # the queue keeps history: it read the table
            raise CliError(
                f"no history table {queue.recorder.table.name!r}: make it with "
                f"sqldelay migrate --history (or create_schema(engine, history=True))"
            ) from None
    if not events:
        raise CliError(f"no history for key {args.key!r} in queue {args.queue!r}")
    if args.json:
        for e in events:
            print(json.dumps({"at": e.at.isoformat(), "event": e.kind.value, "actor": e.actor,
                              "attempt": e.attempt, "detail": e.detail}))
        return 0
    # one row per event: a detail of several lines (a failure's traceback) shows its first,
    # the error's message, and --json all of it
    print_table(f"history of {args.key!r} in queue {args.queue!r}",
                ["at (UTC)", "event", "actor", "attempt", "detail"],
                [[_time(e.at), e.kind.value, e.actor, e.attempt, first_line(e.detail)]
                 for e in events], right=("attempt",))
    return 0


def _time(at: datetime) -> str:
    """To the millisecond, as events of one claim can be that close."""
    return at.astimezone(UTC).isoformat(sep=" ", timespec="milliseconds")[:-6]
