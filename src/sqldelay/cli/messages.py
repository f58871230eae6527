"""Commands on the messages of one queue: ``peek`` at them by state, ``get`` and ``drop`` one
by key, give back the ones stuck in flight (``release-stuck``), delete them all (``purge``).
Payloads are read with --serializer (json by default, as the queue's producers wrote them)."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..inspection import Inspector
from ..messages import QueuedMessage
from ..queue import DelayedQueue
from ..serializers import SERIALIZERS
from .support import (
    CliError,
    add_db_arguments,
    add_json,
    add_yes,
    confirm,
    database,
    duration,
    print_json,
    print_table,
    require_queue,
)

if TYPE_CHECKING:
    from .support import Command, Subcommands

PAYLOAD_WIDTH = 60  # characters of a payload in a table (--json prints it whole)


def register(sub: Subcommands) -> None:
    def command(name: str, helptext: str, run: Command, *,
                key: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("queue", help="queue name")
        if key:
            p.add_argument("key", help="message key")
        add_db_arguments(p)
        p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="json",
                       help="payload format of the queue")
        p.set_defaults(func=run)
        return p

    p = command("peek", "show a queue's messages without claiming them", run_peek)
    state = p.add_mutually_exclusive_group()
    for flag, value in (("--due", "due"), ("--in-flight", "in_flight"),
                        ("--scheduled", "scheduled")):
        state.add_argument(flag, dest="state", action="store_const", const=value,
                           help=f"messages {value.replace('_', ' ')}")
    p.set_defaults(state="due")
    p.add_argument("--limit", type=int, default=20, help="at most this many")
    p.add_argument("--prefix", default=None, help="only keys that start with this")
    p.add_argument("--after", default=None,
                   help="the next page: the value the previous page printed")
    add_json(p)

    p = command("get", "show one message by key", run_get, key=True)
    add_json(p)

    p = command("drop", "delete one message by key, whatever its state", run_drop, key=True)
    add_yes(p)

    p = command("release-stuck", "give back messages held in flight for too long", run_release)
    p.add_argument("--older-than", type=duration, required=True, metavar="DURATION",
                   help="claimed longer ago than this (e.g. 30m, 1h, 2d)")
    p.add_argument("--acquire-timeout", type=duration, default=timedelta(minutes=5),
                   metavar="DURATION",
                   help="the lock duration the queue's workers use (the claim time is the "
                        "lock's expiry less this)")
    add_yes(p)

    p = command("purge", "delete every message of a queue (not its dead letters)", run_purge)
    add_yes(p)


def _queue(args: argparse.Namespace, engine: sa.Engine, **kwargs: Any) -> DelayedQueue:
    """The queue of the command, which must be one the table knows (an unknown name is an
    error, as a typo would otherwise look like an empty queue)."""
    require_queue(engine, args.table, args.queue, SERIALIZERS[args.serializer].type_name)
    return DelayedQueue(engine, args.queue, table_name=args.table,
                        serializer=SERIALIZERS[args.serializer](), **kwargs)


def _json(message: QueuedMessage) -> dict[str, Any]:
    return dataclasses.asdict(message)


def _payload(value: object) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False) \
        if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= PAYLOAD_WIDTH else text[:PAYLOAD_WIDTH - 1] + "…"


def _table(title: str, messages: list[QueuedMessage]) -> None:
    print_table(title, ["key", "due at (UTC)", "attempts", "priority", "group", "locked until",
                        "claimed by", "payload"],
                [[m.key, m.scheduled_at, m.deliveries, m.priority, m.group, m.locked_until,
                  m.claimed_by, _payload(m.payload)] for m in messages],
                right=("attempts", "priority"))


def run_peek(args: argparse.Namespace) -> int:
    with database(args) as engine:
        _queue(args, engine)
        page = Inspector(engine, table_name=args.table).peek(
            args.queue, args.state, limit=args.limit, key_prefix=args.prefix, after=args.after,
            serializer=SERIALIZERS[args.serializer]())
    if args.json:
        print_json({"messages": [_json(m) for m in page.messages], "next": page.next_after})
        return 0
    _table(f"{args.queue}: {args.state.replace('_', ' ')}", page.messages)
    if page.next_after is not None:
        print(f"more may follow: --after {page.next_after}")
    return 0


def run_get(args: argparse.Namespace) -> int:
    with database(args) as engine:
        message = _queue(args, engine).get(args.key)
    if message is None:
        raise CliError(f"no message {args.key!r} in queue {args.queue!r}")
    if args.json:
        print_json(_json(message))
    else:
        _table(args.queue, [message])
    return 0


def run_drop(args: argparse.Namespace) -> int:
    with database(args) as engine:
        queue = _queue(args, engine)
        message = queue.get(args.key)
        if message is not None:
            confirm(f"delete message {args.key!r} of queue {args.queue!r}"
                    + (" (in flight now)?" if message.in_flight else "?"), args)
        dropped = message is not None and queue.drop(args.key)
    if not dropped:
        raise CliError(f"no message {args.key!r} in queue {args.queue!r}")
    print(f"dropped {args.key!r} from {args.queue!r}")
    return 0


def run_release(args: argparse.Namespace) -> int:
    with database(args) as engine:
        queue = _queue(args, engine, acquire_timeout=args.acquire_timeout)
        stuck = queue.stuck(args.older_than, limit=20)
        if not stuck:
            print(f"nothing in queue {args.queue!r} was claimed more than {args.older_than} ago")
            return 0
        _table(f"{args.queue}: stuck (first {len(stuck)})", stuck)
        confirm(f"give back every message of {args.queue!r} claimed more than "
                f"{args.older_than} ago, due now?", args)
        print(f"released {queue.release_stuck(args.older_than)} message(s)")
        return 0


def run_purge(args: argparse.Namespace) -> int:
    with database(args) as engine:
        queue = _queue(args, engine)
        stats = queue.stats()
        total = stats.due + stats.scheduled + stats.in_flight
        if total == 0:
            print(f"queue {args.queue!r} is empty")
            return 0
        confirm(f"delete all {total} message(s) of queue {args.queue!r} "
                f"({stats.in_flight} in flight)?", args)
        print(f"deleted {queue.clear()} message(s) from {args.queue!r}")
        return 0
