"""The ``sqldelay`` command line. Each subcommand lives in its own module and registers itself."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from . import bench_cli, demo, serve_cli, worker_cli

# modules with a ``register(subparsers)`` that adds one subcommand and sets ``func``
COMMANDS = [demo, worker_cli, bench_cli, serve_cli]

DEFAULT_URL = "sqlite:///sqldelay-demo.db"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sqldelay", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def add_db_arguments(parser: argparse.ArgumentParser, *, queue: str | None = None) -> None:
    """The options every database-facing subcommand shares."""
    parser.add_argument("--url", default=DEFAULT_URL,
                        help=f"SQLAlchemy database URL (default: {DEFAULT_URL})")
    parser.add_argument("--table", default="delayed_queue", help="queue table name")
    if queue is not None:
        parser.add_argument("--queue", default=queue, help=f"queue name (default: {queue})")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
