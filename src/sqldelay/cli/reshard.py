"""``sqldelay reshard`` moves the messages of a sharded queue whose shard changed when the shard
list did, with a progress bar:

    sqldelay reshard --queue emails --from URL_A URL_B --to URL_A URL_B URL_C

A shard is a URL, or NAME=URL when the shards are named explicitly (as in the mapping given to
``ShardedQueue``); the names must be those the producers and consumers use. Messages in flight
stay where they are and are counted as left: run the command again later. It is safe to run
again after a crash, and while producers and consumers work; not two at once.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

import sqlalchemy as sa
from tqdm import tqdm

from ..engines import create_engine
from ..errors import SqlDelayError
from ..queue import DelayedQueue
from ..serializers import SERIALIZERS
from ..sharded import ShardedQueue
from .support import CliError

if TYPE_CHECKING:
    from .support import Subcommands

_NAMED = re.compile(r"^(?P<name>[^:/=]+)=(?P<url>.+)$")


def register(sub: Subcommands) -> None:
    p = sub.add_parser("reshard", help="move messages to their shard after a shard list change",
                       description=__doc__)
    p.add_argument("--from", dest="old", nargs="+", required=True, metavar="SHARD",
                   help="the shards before the change (URL or NAME=URL)")
    p.add_argument("--to", dest="new", nargs="+", required=True, metavar="SHARD",
                   help="the shards after it (URL or NAME=URL)")
    p.add_argument("--queue", required=True, help="the queue name")
    p.add_argument("--table", default="delayed_queue", help="queue table name")
    p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="json",
                   help="the queue's payload type")
    p.add_argument("--batch", type=int, default=500, help="messages per transaction")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_reshard)


def run_reshard(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise CliError("--batch must be positive")
    engines: dict[str, sa.Engine] = {}

    def shards(specs: list[str]) -> dict[str, DelayedQueue] | list[DelayedQueue]:
        named = [_NAMED.match(spec) for spec in specs]
        if any(named) and not all(named):
            raise CliError("name every shard (NAME=URL) or none")
        queues = []
        for spec, match in zip(specs, named, strict=True):
            url = match["url"] if match else spec
            try:
                engine = engines.get(url) or engines.setdefault(url, create_engine(url))
            except SqlDelayError as exc:  # not a URL, or its driver is missing
                raise CliError(f"bad shard URL: {exc}") from None
            queues.append(DelayedQueue(engine, args.queue, table_name=args.table,
                                       serializer=SERIALIZERS[args.serializer]()))
        if all(named) and named:
            names = [m["name"] for m in named if m]
            if len(set(names)) != len(names):
                raise CliError("two shards share a name")
            return dict(zip(names, queues, strict=True))
        return queues

    try:
        sharded = ShardedQueue(shards(args.new), previous=shards(args.old))
        total = sharded.to_reshard()
        with tqdm(total=total, unit="msg", desc="resharded",
                  disable=args.no_progress) as bar:
            report = sharded.reshard(batch=args.batch, progress=bar.update)
    except CliError:
        raise
    except (SqlDelayError, sa.exc.SQLAlchemyError) as exc:  # any database error: one line
        raise CliError(f"reshard failed: {str(exc).splitlines()[0]}") from exc
    finally:
        for engine in engines.values():
            engine.dispose()
    print(f"moved {report.moved}, already on their shard {report.already_there}, "
          f"left in flight {report.left}" + (" (run again later)" if report.left else ""))
    return 0
