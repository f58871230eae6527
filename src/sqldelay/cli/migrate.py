"""``sqldelay migrate``: create the queue tables, or upgrade them to this version's schema,
keeping every message (the package's Alembic migrations, without an alembic.ini); a table or
index of the schema that is missing (dropped) is made again, the rows of the others kept. A
table of the schema's names that exists and is not sqldelay's is refused before anything is
written."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ..migrate import create_schema, current, foreign_table
from ..schema import SCHEMA_VERSION, TUNING_PRESETS, missing_parts, tuning_ddl
from .support import CliError, add_db_arguments, open_engine, shown

if TYPE_CHECKING:
    from .support import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("migrate", help="create or upgrade the queue tables (idempotent)",
                       description=__doc__)
    add_db_arguments(p)
    p.add_argument("--tuning", choices=TUNING_PRESETS, default=None,
                   help="storage preset for a busy table (PostgreSQL: aggressive per-table "
                        "autovacuum); applied to an existing table too")
    p.add_argument("--history", action="store_true",
                   help="also create the history table, for queues that keep history")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine = open_engine(args, create=True, table=False)
    try:
        with engine.connect() as conn:
            foreign = foreign_table(conn, args.table)
            if foreign is not None:  # before the version table, or any other, is made
                raise CliError(f"{foreign[1]}: nothing was written; give --table a name of "
                               "its own")
            before = current(conn, args.table)
            missing = [] if before is None else missing_parts(conn, args.table, before,
                                                              history=args.history)
        create_schema(engine, table_name=args.table, tuning=args.tuning, history=args.history)
        if before is not None and args.tuning:  # create_schema tunes the tables it creates
            with engine.begin() as conn:
                for statement in tuning_ddl(engine.dialect, args.table, args.tuning):
                    conn.execute(sa.text(statement))
        where = f"{args.table} in {shown(args.resolved_url)}"
        if before is None:
            print(f"created {where} at schema version {SCHEMA_VERSION}")
        elif before != SCHEMA_VERSION:
            print(f"upgraded {where} from schema version {before} to {SCHEMA_VERSION}")
        elif not missing:
            print(f"{where} is at schema version {SCHEMA_VERSION} already")
        if missing:  # dropped by hand: made again, the rows of the other tables kept
            print(f"{where} at schema version {SCHEMA_VERSION}: created the missing "
                  f"{', '.join(missing)}")
        return 0
    finally:
        engine.dispose()
