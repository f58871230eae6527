"""``sqldelay offer QUEUE KEY --payload JSON [--at TIME | --delay DURATION]``: schedule a
message from the shell, for scripts and debugging. Prints the outcome: created, updated (the
key existed: payload and due time replaced) or ignored (nothing would change)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..checks import time_after, time_ms
from ..errors import InvalidArgumentError
from ..queue import DelayedQueue
from .support import CliError, add_db_arguments, database, duration

if TYPE_CHECKING:
    from .support import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("offer", help="schedule a message (JSON payload)", description=__doc__)
    p.add_argument("queue", help="queue name")
    p.add_argument("key", help="message key, unique within the queue")
    add_db_arguments(p)
    p.add_argument("--payload", required=True, metavar="JSON", help="the payload, as JSON")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", type=_time, default=None, metavar="TIME",
                      help="due time, ISO 8601 with a UTC offset (e.g. 2030-01-01T09:00Z)")
    when.add_argument("--delay", type=duration, default=None, metavar="DURATION",
                      help="due after this long (e.g. 90s, 10m, 1h) (default: due now)")
    p.add_argument("--priority", type=int, default=0, help="higher is claimed first")
    p.add_argument("--group", default=None, help="messages of a group run one at a time")
    p.add_argument("--no-update", action="store_true",
                   help="leave an existing message of the key alone")
    p.set_defaults(func=run)


def _time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add Z or +HH:MM, so the time is not a guess")
    try:
        time_ms(when, "--at")
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return when


def run(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise CliError(f"--payload is not JSON: {exc}") from None
    at = args.at if args.delay is None else time_after(datetime.now(UTC), args.delay,
                                                       "--delay")
    with database(args) as engine:
        queue = DelayedQueue(engine, args.queue, table_name=args.table)
        outcome = queue.offer(args.key, payload, at, update=not args.no_update,
                              priority=args.priority, group=args.group)
    due = "now" if at is None else at.astimezone(UTC).isoformat(timespec="seconds")
    print(f"{outcome.value}: {args.queue} {args.key} (due {due})")
    return 0
