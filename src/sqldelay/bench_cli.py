"""``sqldelay bench``: the benchmark suite (``python -m benchmarks``) from the command line.

The suite lives in the ``benchmarks`` package of a source checkout, not in the installed
library: run this from the checkout's root (or with it on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path


def register(sub) -> None:
    # the suite's own parser reads the arguments (--help included), so the benchmarks
    # package is imported only when this subcommand runs; "+" as the only prefix makes every
    # "-" argument a plain word here, to be handed over untouched
    p = sub.add_parser("bench", add_help=False, prefix_chars="+",
                       help="run the benchmark suite (from a source checkout; --help for more)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runner = _runner()
    if runner is None:
        raise SystemExit(
            "sqldelay bench needs the benchmarks package of a source checkout, which is not "
            "importable here: cd to the checkout (the directory holding benchmarks/) and run "
            "it again, or run `python -m benchmarks` there; plots need the bench extra: "
            "pip install -e '.[bench]'")
    return runner.main(args.bench_args, prog="sqldelay bench")


def _runner():
    """benchmarks.runner, looked for on sys.path, in the current directory and in the checkout
    this package was installed from (editable installs: src/sqldelay -> the checkout root)."""
    for root in (None, Path.cwd(), Path(__file__).resolve().parents[2]):
        if root is not None:
            if not (root / "benchmarks" / "runner.py").is_file():
                continue
            sys.path.insert(0, str(root))
        try:
            return importlib.import_module("benchmarks.runner")
        except ModuleNotFoundError as exc:
            if exc.name not in ("benchmarks", "benchmarks.runner"):
                raise
    return None
