"""``sqldelay history QUEUE KEY`` prints a message's timeline from the history table:

    sqldelay history --url URL emails welcome:42           (oldest first)
    sqldelay history --url URL emails welcome:42 --json    (one JSON object per line)
"""

from __future__ import annotations

import argparse
import json

from ..errors import SchemaMissingError
from ..queue import DelayedQueue
from ..serializers import SERIALIZERS
from .support import CliError, add_db_arguments, database


def register(sub) -> None:
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
            raise CliError(
                f"no history table {queue.recorder.table.name!r}: make it with "
                f"sqldelay migrate --history (or create_schema(engine, history=True))"
            ) from None
    if not events:
        raise CliError(f"no history for key {args.key!r} in queue {args.queue!r}")
    for e in events:
        if args.json:
            print(json.dumps({"at": e.at.isoformat(), "event": e.kind.value, "actor": e.actor,
                              "attempt": e.attempt, "detail": e.detail}))
        else:
            print("\t".join([e.at.isoformat(), e.kind.value, e.actor or "-",
                             "-" if e.attempt is None else f"attempt {e.attempt}",
                             e.detail or ""]))
    return 0
