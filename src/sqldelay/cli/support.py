"""What the subcommands share: the database a command uses, its engine, the one-line errors of
expected failures, confirmations, durations, and output as tables (rich) or JSON.

rich is imported only when a table is printed, so ``import sqldelay`` never loads it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..engines import create_engine
from ..errors import SchemaMissingError, SqlDelayError
from ..schema import dead_letter_table, queue_table, settings_table
from ..serializers import SERIALIZERS

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..dialects import QueueDao

    # what a command module's register() adds its subcommands to
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

# what a subcommand runs (``set_defaults(func=...)``): its exit status
Command = Callable[[argparse.Namespace], int]

URL_ENV = "SQLDELAY_URL"


class CliError(SqlDelayError):
    """An expected failure of a command, told in one line."""


def database_url(args: argparse.Namespace) -> str:
    """--url, else $SQLDELAY_URL, else the command's own default (the demo's); else an error
    saying how to give one."""
    url = args.url or os.environ.get(URL_ENV) or getattr(args, "url_fallback", None)
    if not url:
        raise CliError(f"no database given: pass --url URL or set {URL_ENV} (for example "
                       "sqlite:///app.db or postgresql+psycopg://user@host/db)")
    try:
        sa.make_url(url)
    except sa.exc.ArgumentError:
        given = "--url" if args.url else URL_ENV if os.environ.get(URL_ENV) else "the URL"
        raise CliError(f"{given} is not a database URL: {_hide_password(url)!r} (for example "
                       "sqlite:///app.db or postgresql+psycopg://user@host/db)") from None
    return url


def _hide_password(text: str) -> str:
    """A string that SQLAlchemy could not parse, a password in it (``user:secret@``) hidden."""
    return re.sub(r"([:/][^:/@]*:)[^@/]*@", r"\1***@", text)


def shown(url: str | sa.URL) -> str:
    """A URL fit to print: its password hidden."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return str(url)


def open_engine(args: argparse.Namespace, *, create: bool = False,
                table: bool = True) -> sa.Engine:
    """A blocking engine on the command's database, reached once to fail early and clearly.

    A SQLite file must exist unless ``create`` (migrate, demo), so a mistyped path is not made
    into a new empty database; with ``table``, the queue table must exist too. A URL naming
    an async-only driver (``postgresql+asyncpg://``) gets its database's blocking driver
    (``engines.create_engine``), so the URL that the asyncio worker and the service use does
    here too.
    """
    url = checked_url(args, create=create)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if table and not sa.inspect(conn).has_table(args.table):
                raise CliError(_no_table(args.table, url))
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise CliError(unreachable(sa.make_url(url), exc)) from exc
    except BaseException:
        engine.dispose()
        raise
    return engine


def checked_url(args: argparse.Namespace, *, create: bool = False) -> str:
    """The command's database URL (kept as ``args.resolved_url``), a SQLite file of it
    checked as ``open_engine`` says."""
    url = database_url(args)
    args.resolved_url = url
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if not create and not path.is_file():
            raise CliError(f"no SQLite database at {path.resolve()}: check the path, or "
                           f"create it with sqldelay migrate --url {shown(url)}")
        if create and not path.parent.is_dir():
            raise CliError(f"cannot create the SQLite database {path.resolve()}: the directory "
                           f"{path.parent.resolve()} does not exist")
    return url


async def reach_async(engine: AsyncEngine, args: argparse.Namespace) -> None:
    """``open_engine``'s first reach, for an asyncio engine on ``checked_url(args)``."""
    try:
        async with engine.connect() as conn:
            present = await conn.run_sync(lambda c: sa.inspect(c).has_table(args.table))
    except (sa.exc.DBAPIError, OSError) as exc:  # asyncpg's refused connection: an OSError
        raise CliError(unreachable(sa.make_url(args.resolved_url), exc)) from exc
    if not present:
        raise CliError(_no_table(args.table, args.resolved_url))


@contextmanager
def database(args: argparse.Namespace, *, create: bool = False,
             table: bool = True) -> Iterator[sa.Engine]:
    """``open_engine(args, create=create, table=table)``, disposed of at the end."""
    engine = open_engine(args, create=create, table=table)
    try:
        yield engine
    finally:
        engine.dispose()


def unreachable(url: sa.URL, exc: BaseException) -> str:
    """Why the database of ``url`` could not be used, naming the file or the server."""
    reason = _first_line(getattr(exc, "orig", None) or exc)
    if url.get_backend_name() == "sqlite":
        return f"cannot open the SQLite database {Path(url.database or '').resolve()}: {reason}"
    where = f"{url.host or 'localhost'}:{url.port or _DEFAULT_PORTS.get(url.get_backend_name())}"
    return f"cannot reach the {url.get_backend_name()} server at {where}: {reason}"


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433,
                  "oracle": 1521}


def _no_table(table: str, url: str) -> str:
    return (f"the queue table {table!r} does not exist in {shown(url)}: create it with "
            + _migrate(table, url))


def migrate_command(args: argparse.Namespace) -> str:
    """The ``sqldelay migrate`` command line for the command's database and queue table."""
    return _migrate(args.table, args.resolved_url)


def _migrate(table: str, url: str) -> str:
    return (f"sqldelay migrate --url {shown(url)}"
            + ("" if table == "delayed_queue" else f" --table {table}"))


def failure_message(exc: BaseException, args: argparse.Namespace) -> str | None:
    """The one line that explains an expected failure (None: a bug, shown as a traceback)."""
    url = getattr(args, "resolved_url", None)
    if isinstance(exc, SchemaMissingError) and url is not None:
        return _no_table(args.table, url)
    if isinstance(exc, SqlDelayError):
        return str(exc)
    if isinstance(exc, sa.exc.DBAPIError) and url is not None:
        if getattr(exc, "connection_invalidated", False):
            return unreachable(sa.make_url(url), exc)
        return f"the database refused a statement: {_first_line(exc.orig or exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def require_queue(engine: sa.Engine, table: str, queue: str,
                  type_name: str | None = None) -> str:
    """An error naming ``queue`` unless queue table ``table`` knows it: it has messages, dead
    letters or a settings row (a paused queue with nothing in it is known) — with
    ``type_name``'s payloads if given (a queue is a name and a payload type), else with any.
    Returns the payload type under which it was found.

    Read by the exact partitions first (one step down an index each); a prefix match, which
    may scan, only to tell what the error says.
    """
    dao = _dao(engine, table)
    tables = (dao.table, dead_letter_table(dao.table.metadata, table),
              settings_table(dao.table.metadata, table))
    kinds = [f"{queue}|{name}" for name in ([type_name] if type_name else sorted(SERIALIZERS))]
    with engine.connect() as conn:
        for t in tables:
            kind: str | None = conn.scalar(
                sa.select(t.c.pkind).where(t.c.pkind.in_(kinds)).limit(1))
            if kind is not None:
                return kind.rpartition("|")[2]
        found: set[str] = {kind.rpartition("|")[2] for t in tables for kind in conn.scalars(
            sa.select(t.c.pkind).where(dao.prefix_match(t.c.pkind, f"{queue}|"))
            .group_by(t.c.pkind)) if kind.rpartition("|")[0] == queue}
    if found and type_name is None:
        return min(found)  # payloads of a type of its own
    if found:
        hint = (f": pass --serializer {min(found)}" if len(found) == 1
                and min(found) in SERIALIZERS else "")
        raise CliError(f"queue {queue!r} in table {table!r} has no {type_name} payloads, only "
                       f"{', '.join(sorted(found))} ones{hint}")
    raise CliError(f"no queue named {queue!r} in table {table!r}: no messages, dead letters "
                   "or settings under that name")


def _dao(engine: sa.Engine, table: str) -> QueueDao:
    from ..dialects import dao_class_for

    return dao_class_for(engine.dialect)(queue_table(sa.MetaData(), table))


def add_db_arguments(parser: argparse.ArgumentParser, *, queue: str | None = None,
                     url: str | None = None, table: str = "delayed_queue") -> None:
    """The options every database-facing subcommand shares; ``url`` is a default of the
    command's own (the demo's), used when neither --url nor SQLDELAY_URL gives one."""
    parser.add_argument("--url", default=None,
                        help=f"SQLAlchemy database URL (default: ${URL_ENV}"
                             + (f", else {url}" if url else "") + ")")
    parser.set_defaults(url_fallback=url)
    parser.add_argument("--table", default=table, help="queue table name")
    if queue is not None:
        parser.add_argument("--queue", default=queue, help="queue name")


# ---- input ---------------------------------------------------------------------------------

# [0-9], not \d: \d matches every script's digits, which float() reads as well
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> timedelta:
    """``90``, ``90s``, ``10m``, ``1h``, ``2d``, ``250ms`` as a timedelta (argparse type).
    A negative one is refused by name (``main`` hands ``--delay -5m`` over as a value, not as
    an unknown option)."""
    if text.strip().startswith("-") and _DURATION.match(text.strip()[1:]):
        raise argparse.ArgumentTypeError(f"a duration cannot be negative: {text!r}")
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (give a number with s, m, h or d, e.g. 90s, 10m, 1h)")
    try:
        return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:  # over a timedelta's 999,999,999 days
        raise argparse.ArgumentTypeError(f"the duration {text!r} is too long") from None


def negative_values(argv: list[str], options: set[str]) -> list[str]:
    """``argv`` with ``OPTION -5m`` written ``OPTION=-5m`` for each of ``options``: argparse
    reads a word starting with "-" that is not a plain number as an option, and would say
    "expected one argument" instead of what is wrong with the value."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] in options and re.match(r"-[0-9.]", word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def add_yes(parser: argparse.ArgumentParser) -> None:
    """--yes, for a command that deletes or releases: such a command calls ``confirm``."""
    parser.add_argument("--yes", "-y", action="store_true", help="do it without asking")


def confirm(question: str, args: argparse.Namespace) -> None:
    """Go on with --yes, or when "y" is typed at a terminal; otherwise an error (without a
    terminal, saying to pass --yes: a script must say so explicitly). Every command that
    deletes or releases asks through this, after ``add_yes`` gave it the option. The question
    goes to stderr, so that it is seen when the output is piped."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{question} — not confirmed: pass --yes to do it without asking")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed: nothing changed")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON, for scripts")


# ---- output --------------------------------------------------------------------------------

def print_table(title: str | None, columns: list[str], rows: list[list[Any]],
                right: tuple[str, ...] = ()) -> None:
    """Rows under a header, for people (rich lays out and folds cells to fit a terminal; to
    a pipe, each row is one line)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(text(v) for v in row))
    Console(soft_wrap=False, width=table_width()).print(table)


def table_width() -> int | None:
    """A terminal's own width (None: rich reads it, or $COLUMNS); piped, no limit that a
    table's rows would be wrapped at (rich's default is 80 columns, which folded a column
    head into "priorit y" and split rows that a grep or awk downstream reads one per line)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return None
    return PIPED_WIDTH


PIPED_WIDTH = 100_000


def text(value: Any) -> str:
    """A cell: times in UTC to the second, ages in s, m or h, None as empty."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, timedelta):
        return age(value)
    return str(value)


def first_line(value: str | None, width: int | None = None) -> str:
    """Free text as a table cell that keeps its row on one line: the first line, cut to
    ``width`` characters, "…" where something was left out (--json and --full show it
    whole)."""
    lines = (value or "").strip().splitlines()
    shown = lines[0].rstrip() if lines else ""
    cut = len(lines) > 1
    if width is not None and len(shown) > width - cut:
        shown, cut = shown[:width - 1].rstrip(), True
    return f"{shown}…" if cut else shown


def error_message(error: str) -> str:
    """The exception's message out of a stored error text, without its traceback. A worker
    stores the exception first and where it came from after it (``worker_base.error_text``,
    whose frames are indented); Python's own layout (``traceback.format_exc()``, which code
    calling ``bury`` may store) ends with it instead."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        unindented = [line for line in lines[1:] if not line[:1].isspace()]
        return unindented[-1] if unindented else lines[0]
    message = []
    for line in lines:
        if line[:1].isspace():  # the first frame: the message has ended
            break
        message.append(line)
    return "\n".join(message)


def age(delta: timedelta | None) -> str:
    if delta is None:
        return ""
    seconds = delta.total_seconds()
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def print_json(value: Any) -> None:
    print(json.dumps(value, default=_json_default, ensure_ascii=False, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")
