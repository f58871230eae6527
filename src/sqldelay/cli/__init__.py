"""sqldelay: a durable delayed message queue in the database you already run (PostgreSQL,
MySQL/MariaDB, SQLite, SQL Server, Oracle). These commands set up its table, run workers,
and let you look at and repair queues: what is due, what is stuck, what failed.

Every database command takes --url (or the SQLDELAY_URL environment variable) and --table.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import (
    bench,
    demo,
    flow,
    history,
    inspect,
    messages,
    migrate,
    offer,
    reshard,
    serve,
    verify,
    worker,
)
from .support import duration, failure_message, negative_values

# modules with a ``register(subparsers)`` that adds subcommands and sets ``func``
COMMANDS = [
    migrate,
    verify,
    inspect,
    messages,
    history,
    offer,
    flow,
    worker,
    reshard,
    demo,
    bench,
    serve,
]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (where there is one to show), descriptions as written but
    for their reStructuredText literals: the commands' module docstrings serve as their
    descriptions, and ``x`` reads as x in a terminal."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(_plain(text))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = _plain(action.help or "")
        default = action.default
        if (action.option_strings and default not in (None, False, argparse.SUPPRESS, [])
                and "default" not in text):
            shown = getattr(default, "total_seconds", None)
            text += f" (default: {_seconds(default) if shown else '%(default)s'})"
        return text


def _plain(text: str) -> str:
    return re.sub(r"``(.+?)``", r"\1", text, flags=re.DOTALL)


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}s"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sqldelay", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sqldelay {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what happens, and show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    for module in COMMANDS:
        module.register(sub)
    _verbose_after(sub)
    return parser


def _verbose_after(sub: argparse._SubParsersAction[_Parser]) -> None:
    """-v after the subcommand too (and after a sub-subcommand: dead-letters list -v)."""
    for command in sub.choices.values():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        for action in nested:
            _verbose_after(action)
        if "-" in command.prefix_chars and not nested:
            command.add_argument("-v", "--verbose", action="store_true",
                                 default=argparse.SUPPRESS,
                                 help="log what happens, and show the traceback of an error")


def _duration_options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings, in every subcommand, whose value is a duration."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found |= _duration_options(command)
        elif action.type is duration:
            found.update(action.option_strings)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(negative_values(words, _duration_options(parser)))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("sqldelay.cli").setLevel(logging.INFO)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = failure_message(exc, args)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        print(f"sqldelay {args.command}: error: {message}", file=sys.stderr)
        return 1


def _version() -> str:
    try:
        return version("sqldelay")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown"
