"""Running sqldelay's Alembic migrations (``migrations/`` in this package) from code:
``create_schema`` (on an engine) and ``upgrade`` (on a connection), what ``sqldelay migrate``
runs.

Each queue table name keeps its migration state in its own version table,
``<table>_alembic``, apart from the application's ``alembic_version``. A table that an older
``create_schema`` made before it ran the migrations has no version table: its version is read
off its shape and stamped first, and the migrations go on from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from .errors import InvalidArgumentError
from .schema import (
    DEAD,
    DEFAULT_TABLE,
    HISTORY,
    QUEUE,
    SCHEMA_VERSION,
    TABLES,
    after_create,
    check_table_name,
    create_history_op,
    queue_table,
    repair_op,
    require_async_engine,
    tuning_check,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

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


def create_schema(engine: sa.Engine, *, table_name: str = DEFAULT_TABLE,
                  tuning: str | None = None, history: bool = False) -> sa.Table:
    """Create the queue tables, or upgrade them to this version's schema, keeping every
    message (idempotent): the package's Alembic migrations, run on ``engine``. ``tuning``
    applies a storage preset to a table it creates; ``history`` adds the event history table
    (``<table>_history``) for queues that keep history, now or later."""
    check_table_name(table_name)
    tuning_check(tuning)
    with engine.begin() as conn:
        upgrade(conn, table_name, tuning, history)
    with engine.connect() as conn:
        after_create(conn)
    return queue_table(sa.MetaData(), table_name)


async def create_schema_async(engine: AsyncEngine, *, table_name: str = DEFAULT_TABLE,
                              tuning: str | None = None, history: bool = False) -> sa.Table:
    """``create_schema`` for an asyncio ``AsyncEngine``: the same migrations, on its driver."""
    check_table_name(table_name)
    tuning_check(tuning)
    async with require_async_engine(engine, "create_schema").begin() as conn:
        await conn.run_sync(upgrade, table_name, tuning, history)
    async with engine.connect() as conn:
        await conn.run_sync(after_create)
    return queue_table(sa.MetaData(), table_name)


def upgrade(connection: sa.Connection, table_name: str, tuning: str | None = None,
            history: bool = False) -> list[str]:
    """Create or upgrade ``table_name``'s tables to this version's schema, on ``connection``
    (the caller commits); with ``history``, the history table too, also where the schema is
    already at this version without it. A table or index of the recorded version that is
    missing (dropped by hand) is made again first, every row elsewhere kept, since the
    migrations trust the recorded version and would not. Returns the names of the tables and
    indexes made again (or added: the history table) that way."""
    foreign = foreign_table(connection, table_name)
    if foreign is not None:  # before the version table, or any other, is made
        raise InvalidArgumentError(f"{foreign[1]}: nothing was written; give the queue "
                                   "table a name of its own")
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


_KINDS = {"": "queue table", "_dead": "dead-letter table", "_groups": "groups table",
          "_settings": "settings table", "_history": "history table"}


def foreign_table(conn: sa.Connection, table_name: str) -> tuple[str, str] | None:
    """The first table of queue table name ``table_name``'s schema that exists and is not
    sqldelay's, and why (None: every one that exists can be). A table is taken as sqldelay's
    when it has the columns its table had when a migration first made it: a table that an
    older sqldelay made, and that ``upgrade`` would upgrade, has them too. Without this, a
    migration would take an application's table ``X`` for a first-version queue table,
    record that in ``X_alembic`` and fail halfway, leaving tables behind where DDL is not
    transactional (MySQL, MariaDB)."""
    inspector = sa.inspect(conn)
    for spec in TABLES:
        name = spec.name(table_name)
        if not inspector.has_table(name):
            continue
        present = {column["name"].lower() for column in inspector.get_columns(name)}
        first = [c.make().name for c in spec.columns if c.since == spec.since]
        missing = [column for column in first if column not in present]
        if missing:
            return name, (f"the table {name!r} exists and is not a sqldelay "
                          f"{_KINDS.get(spec.suffix, 'table')}: it has no column "
                          f"{', '.join(missing)}")
    return None
