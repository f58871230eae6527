"""Running sqldelay's Alembic migrations (``migrations/`` in this package) from code, on a
connection: what ``create_schema`` and ``sqldelay migrate`` do.

Each queue table name keeps its migration state in its own version table,
``<table>_alembic``, apart from the application's ``alembic_version``. A table that an older
``create_schema`` made before it ran the migrations has no version table: its version is read
off its shape and stamped first, and the migrations go on from there.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from .schema import DEAD, HISTORY, QUEUE, SCHEMA_VERSION, create_history_op, repair_op

MIGRATIONS = Path(__file__).parent / "migrations"


def config(connection: sa.Connection, table_name: str, tuning: str | None = None,
           history: bool = False) -> Config:
    """An Alembic configuration that runs the package's migrations on ``connection``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes.update(connection=connection, table_name=table_name, tuning=tuning,
                          history=history)
    return cfg


def current(connection: sa.Connection, table_name: str) -> str | None:
    """The schema version of ``table_name`` (None: no queue table), recorded or read off."""
    context = MigrationContext.configure(
        connection, opts={"version_table": f"{table_name}_alembic"})
    recorded = context.get_current_revision()
    return recorded if recorded is not None else _by_shape(connection, table_name)


def _by_shape(connection: sa.Connection, table_name: str) -> str | None:
    """The version of tables an older create_schema made without recording it: 0001 had the
    queue table alone, 0002 added the dead letters. (0003 only widened a column on SQL Server
    and Oracle, and checks the column itself: calling this 0002 lets it.) Dead letters
    without their queue table are a 0002 schema that lost its queue table, which
    ``upgrade`` makes again."""
    inspector = sa.inspect(connection)
    if inspector.has_table(DEAD.name(table_name)):
        return "0002"
    return "0001" if inspector.has_table(QUEUE.name(table_name)) else None


def upgrade(connection: sa.Connection, table_name: str, tuning: str | None = None,
            history: bool = False) -> list[str]:
    """Create or upgrade ``table_name``'s tables to this version's schema, on ``connection``
    (the caller commits); with ``history``, the history table too, also where the schema is
    already at this version without it. A table or index of the recorded version that is
    missing (dropped by hand) is made again first, every row elsewhere kept, since the
    migrations trust the recorded version and would not. Returns the names of the tables and
    indexes made again (or added: the history table) that way."""
    cfg = config(connection, table_name, tuning, history)
    context = MigrationContext.configure(
        connection, opts={"version_table": f"{table_name}_alembic"})
    version = context.get_current_revision()
    if version is None:
        version = _by_shape(connection, table_name)
        if version is not None:
            command.stamp(cfg, version)
    made = [] if version is None else repair_op(
        Operations(MigrationContext.configure(connection)), table_name, version,
        history=history, tuning=tuning)
    if version != SCHEMA_VERSION:
        command.upgrade(cfg, "head")
    if history and not sa.inspect(connection).has_table(HISTORY.name(table_name)):
        create_history_op(Operations(MigrationContext.configure(connection)), table_name)
    return made
