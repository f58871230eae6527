"""``sqldelay bench``: where the benchmark suite is. It is not part of the installed package:
it lives in the ``benchmarks`` package of a source checkout and runs from there, as
``python -m benchmarks``, so this command only says so, with the arguments it was given.
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from .support import CliError

if TYPE_CHECKING:
    from .support import Subcommands


def register(sub: Subcommands) -> None:
    # "+" as the only prefix makes every "-" argument (--help included) a plain word, to be
    # repeated in the command line this prints
    p = sub.add_parser("bench", add_help=False, prefix_chars="+",
                       help="how to run the benchmark suite (from a source checkout)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    command = shlex.join(["python", "-m", "benchmarks", *args.bench_args])
    raise CliError(f"the benchmarks are not part of the installed package: run {command} "
                   "from the root of a source checkout (pip install -e '.[bench]' there)")
