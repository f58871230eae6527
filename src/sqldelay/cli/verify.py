"""``sqldelay verify``: is the queue table what this version of sqldelay expects (tables,
indexes, schema version), and are the database settings that matter to a queue sane? Prints
each finding; exits 1 when there is a problem to fix (advice alone exits 0)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..dialects import dao_class_for
from ..migrate import current, foreign_table
from ..schema import HISTORY, SCHEMA_VERSION, index_condition, index_made_on, schema_tables
from .support import (
    add_db_arguments,
    add_json,
    database,
    migrate_command,
    print_json,
    print_table,
    shown,
)

if TYPE_CHECKING:
    from .support import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("verify", help="check the schema and the database settings",
                       description=__doc__)
    add_db_arguments(p)
    add_json(p)
    p.set_defaults(func=run)


OK, ADVICE, PROBLEM = "ok", "advice", "PROBLEM"


def findings(conn: sa.Connection, table_name: str,
             migrate: str = "sqldelay migrate") -> list[tuple[str, str, str]]:
    """(level, what, finding) for queue table ``table_name`` on ``conn``; level is OK,
    ADVICE or PROBLEM. ``migrate`` is the command that fixes a missing table or index, or an
    old schema version (``sqldelay migrate`` makes again whatever is missing)."""
    out: list[tuple[str, str, str]] = []
    foreign = foreign_table(conn, table_name)
    if foreign is not None:  # migrate would refuse it: its schema version means nothing
        return [(PROBLEM, foreign[0], f"{foreign[1]}: give --table a name of its own")]
    inspector = sa.inspect(conn)
    version = current(conn, table_name)
    if version is None:
        return [(PROBLEM, table_name, f"missing: run {migrate}")]
    if version != SCHEMA_VERSION:
        out.append((PROBLEM, "schema version", f"{version}, this sqldelay expects "
                                               f"{SCHEMA_VERSION}: run {migrate}"))
    else:
        out.append((OK, "schema version", f"{version}, as expected"))
        history = inspector.has_table(HISTORY.name(table_name))
        for table in schema_tables(sa.MetaData(), table_name, history=history):
            if not inspector.has_table(table.name):
                out.append((PROBLEM, table.name, f"missing: run {migrate}"))
                continue
            present = {ix["name"] for ix in inspector.get_indexes(table.name)}
            for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
                if index.name not in present and index_made_on(index, conn.dialect):
                    out.append((PROBLEM, str(index.name),
                                f"index missing on {table.name} ({_columns(index)}): the "
                                f"reads it serves scan the table instead; run {migrate}"))
        if all(level == OK for level, _, _ in out):
            out.append((OK, "tables and indexes", "all present"))
    for advice in dao_class_for(conn.dialect).settings_advice(conn, table_name):
        out.append((PROBLEM if advice.problem else ADVICE, f"{advice.setting} = {advice.value}",
                    advice.text))
    return out


def _columns(index: sa.Index) -> str:
    """The index's columns, and the condition of a partial one."""
    expressions: list[Any] = list(index.expressions)  # a column, or one descending
    columns = ", ".join(e.name if isinstance(e, sa.Column) else f"{e.element.name} DESC"
                        for e in expressions)
    where = index_condition(index)
    return columns if where is None else f"{columns} WHERE {where}"


def run(args: argparse.Namespace) -> int:
    with database(args, table=False) as engine, engine.connect() as conn:
        found = findings(conn, args.table, migrate_command(args))
    problems = sum(1 for level, _, _ in found if level == PROBLEM)
    if args.json:
        print_json({"ok": problems == 0, "findings": [
            {"level": level.lower(), "check": what, "finding": text}
            for level, what, text in found]})
    else:
        print_table(f"{args.table} in {shown(args.resolved_url)}", ["", "check", "finding"],
                    [list(f) for f in found])
        print(f"{problems} problem(s)" if problems else "no problems")
    return 1 if problems else 0
