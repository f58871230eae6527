"""Flow control from the shell: ``pause`` and ``resume`` a queue, and ``limit`` its claims.

    sqldelay pause emails                  no claims from it, by any worker, from their next on
    sqldelay resume emails
    sqldelay limit emails --rate 10/s      at most 10 claims a second, every worker together
    sqldelay limit emails --concurrency 5  at most 5 of its messages in flight at once
    sqldelay limit emails --rate none      lifts one limit; --none lifts both
    sqldelay limit emails                  shows them

The settings live in the database, so every worker obeys them at its next claim without being
restarted. Offers still land on a paused or limited queue, and nothing is deleted, so none of
these asks for confirmation.
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..messages import FlowControl
from ..queue import DelayedQueue
from ..queue_base import MAX_LIMIT
from ..serializers import SERIALIZERS
from .support import (
    CliError,
    add_db_arguments,
    add_json,
    database,
    duration,
    print_json,
    require_queue,
)

if TYPE_CHECKING:
    from .support import Command, Subcommands


def register(sub: Subcommands) -> None:
    def command(name: str, helptext: str, run: Command) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=helptext, description=__doc__)
        p.add_argument("queue", help="queue name")
        add_db_arguments(p)
        p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="json",
                       help="the queue's payload type, part of its identity")
        p.set_defaults(func=run)
        return p

    command("pause", "stop every worker claiming from a queue (offers still land)", run_pause)
    command("resume", "let workers claim from a paused queue again", run_resume)
    p = command("limit", "show or set a queue's rate and concurrency limits", run_limit)
    p.add_argument("--rate", type=rate, default=None, metavar="N/PERIOD",
                   help="at most N claims per PERIOD, every worker together (10/s, 600/m, "
                        "100/5m; N alone is per second; none lifts it)")
    p.add_argument("--concurrency", type=concurrency, default=None, metavar="N",
                   help="at most N messages in flight at once, every worker together (none "
                        "lifts it)")
    p.add_argument("--none", action="store_true", help="lift both limits")
    add_json(p)


# --rate none / --concurrency none: the limit lifted (a value of its own, as None is "not
# given")
LIFT = "none"
_UNIT = re.compile(r"^(ms|s|m|h|d)$")


def rate(text: str) -> tuple[int, timedelta] | str:
    """``10/s``, ``100/5m``, ``10`` (per second), or ``none``: argparse's type of --rate."""
    if text.strip().lower() == LIFT:
        return LIFT
    number, _, period = text.partition("/")
    limit = _count(number, text)
    per = duration("1" + period.strip() if _UNIT.match(period.strip()) else period or "1s")
    if per < timedelta(milliseconds=1):
        raise argparse.ArgumentTypeError(f"the period of {text!r} is under a millisecond")
    return limit, per


def concurrency(text: str) -> int | str:
    """``5`` or ``none``: argparse's type of --concurrency."""
    return LIFT if text.strip().lower() == LIFT else _count(text, text)


def _count(number: str, text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", number) or not 1 <= int(number) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"not a limit: {text!r} (give a whole number from 1 to {MAX_LIMIT}, or none)")
    return int(number)


def _queue(args: argparse.Namespace, engine: sa.Engine) -> DelayedQueue:
    """The command's queue, which the table must know (a typo would otherwise pause, or
    limit, a queue no worker serves)."""
    require_queue(engine, args.table, args.queue, SERIALIZERS[args.serializer].type_name)
    return DelayedQueue(engine, args.queue, table_name=args.table,
                        serializer=SERIALIZERS[args.serializer]())


def run_pause(args: argparse.Namespace) -> int:
    with database(args) as engine:
        queue = _queue(args, engine)
        if queue.flow_control().paused:
            print(f"queue {args.queue!r} was paused already")
            return 0
        queue.pause()
    print(f"paused queue {args.queue!r}: workers claim nothing from it from their next claim "
          f"on; offers still land (sqldelay resume {args.queue} undoes it)")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    with database(args) as engine:
        queue = _queue(args, engine)
        if not queue.flow_control().paused:
            print(f"queue {args.queue!r} was not paused")
            return 0
        queue.resume()
    print(f"resumed queue {args.queue!r}: workers claim from it again")
    return 0


def run_limit(args: argparse.Namespace) -> int:
    if args.none and (args.rate is not None or args.concurrency is not None):
        raise CliError("--none lifts both limits: give it alone, or --rate and --concurrency")
    rate_limit = LIFT if args.none else args.rate
    cap = LIFT if args.none else args.concurrency
    with database(args) as engine:
        queue = _queue(args, engine)
        if rate_limit is not None:
            queue.set_rate_limit(*((None,) if rate_limit == LIFT else rate_limit))
        if cap is not None:
            queue.set_concurrency_limit(None if isinstance(cap, str) else cap)  # str: LIFT
        control = queue.flow_control()
    if args.json:
        print_json(as_json(control))
    else:
        print(f"queue {args.queue!r}: {describe(control)}")
    return 0


# ---- what the commands and the queues table show -------------------------------------------

def describe(control: FlowControl) -> str:
    """A queue's flow control in words: paused or not, and each limit or its absence."""
    return ", ".join([
        "paused" if control.paused else "not paused",
        "no rate limit" if control.rate_limit is None else f"rate limit {rate_text(control)}",
        "no concurrency limit" if control.concurrency_limit is None
        else f"concurrency limit {control.concurrency_limit}"])


def limits_text(control: FlowControl) -> str:
    """The limits as a table cell: ``10/s, 5 in flight`` (empty without limits)."""
    parts = []
    if control.rate_limit is not None:
        parts.append(rate_text(control))
    if control.concurrency_limit is not None:
        parts.append(f"{control.concurrency_limit} in flight")
    return ", ".join(parts)


def rate_text(control: FlowControl) -> str:
    """``10/s``, ``100/5m``, ``3/250ms``: the rate limit as --rate takes it."""
    assert control.rate_period is not None  # set with the rate limit
    ms = round(control.rate_period.total_seconds() * 1000)
    unit, size = next((unit, size) for unit, size in _PERIOD_UNITS if ms % size == 0)
    count = ms // size
    return f"{control.rate_limit}/{'' if count == 1 else count}{unit}"


# the largest unit a period is a whole number of (every period is a whole number of ms)
_PERIOD_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


def as_json(control: FlowControl) -> dict[str, Any]:
    return {"paused": control.paused, "rate_limit": control.rate_limit,
            "rate_period": None if control.rate_period is None
            else control.rate_period.total_seconds(),
            "concurrency_limit": control.concurrency_limit}


def controlled(control: FlowControl) -> bool:
    """Whether a queue is paused or limited (what a queues table shows, messages or not)."""
    return control.paused or control.rate_limit is not None \
        or control.concurrency_limit is not None
