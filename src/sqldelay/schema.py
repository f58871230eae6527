"""The queue table: one factory used by create_schema, the Alembic migration and user migrations.

Column types that differ per database are small custom types here whose DDL each dialect
module renders (``@compiles``), so this module stays free of per-database branches.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from .errors import InvalidArgumentError

DEFAULT_TABLE = "delayed_queue"
KEY_LENGTH = 200
KIND_LENGTH = 100
LOCK_LENGTH = 36
ERROR_LENGTH = 2000  # characters of the last error kept with a dead letter


class QueueId(sa.BigInteger):
    """Auto-generated 64-bit row id."""

    __visit_name__ = "sqldelay_id"
    cache_ok = True


class QueueKey(sa.Unicode):
    """A key or kind: case- and trailing-space-sensitive text, compared byte for byte.

    Unicode, so drivers that tell the two apart (pyodbc) bind it as national text."""

    __visit_name__ = "sqldelay_key"
    cache_ok = True


class QueuePayload(sa.LargeBinary):
    """Serialized payload; must hold at least a few megabytes on every database."""

    __visit_name__ = "sqldelay_payload"
    cache_ok = True


class QueueText(sa.Unicode):
    """Free text (error messages): any Unicode, whatever the database's default charset."""

    __visit_name__ = "sqldelay_text"
    cache_ok = True


@compiles(QueueText)
def _text_default(type_, compiler, **kw):
    return compiler.visit_unicode(type_, **kw)


@compiles(QueueId)
def _id_default(type_, compiler, **kw):
    return compiler.visit_BIGINT(type_, **kw)


@compiles(QueueKey)
def _key_default(type_, compiler, **kw):
    return compiler.visit_VARCHAR(type_, **kw)


@compiles(QueuePayload)
def _payload_default(type_, compiler, **kw):
    return compiler.visit_large_binary(type_, **kw)


def queue_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The queue table bound to ``metadata``; add it to your own metadata for autogenerate."""
    _check_table_name(table_name)
    return _table(metadata, table_name, _columns, _indexes)


def _table(metadata: sa.MetaData, name: str, columns, indexes) -> sa.Table:
    """The table ``name`` in ``metadata``, built from column and index factories if absent."""
    if name in metadata.tables:
        return metadata.tables[name]
    table = sa.Table(name, metadata, *columns())
    for index, names, unique in indexes(name):
        sa.Index(index, *(table.c[c] for c in names), unique=unique)
    return table


def _create_table_op(op, name: str, columns, indexes) -> None:
    """The same table created from an Alembic migration."""
    op.create_table(name, *columns())
    for index, names, unique in indexes(name):
        op.create_index(index, name, list(names), unique=unique)


def _columns() -> list[sa.Column]:
    return [
        sa.Column("id", QueueId(), sa.Identity(), primary_key=True, autoincrement=True),
        sa.Column("pkind", QueueKey(KIND_LENGTH), nullable=False),
        sa.Column("pkey", QueueKey(KEY_LENGTH), nullable=False),
        sa.Column("payload", QueuePayload(), nullable=False),
        # due time in epoch ms; while a message is claimed, the time its lock expires
        sa.Column("scheduled_at", sa.BigInteger(), nullable=False),
        # the due time the producer asked for
        sa.Column("scheduled_at_initially", sa.BigInteger(), nullable=False),
        sa.Column("lock_uuid", sa.String(LOCK_LENGTH), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        # claims so far; the attempt number of the current delivery
        sa.Column("deliveries", sa.Integer(), nullable=False),
    ]


def _indexes(table_name: str) -> list[tuple[str, tuple[str, ...], bool]]:
    return [
        (f"{table_name}_kind_key_uq", ("pkind", "pkey"), True),
        # claims read this index in due order; id makes equal due times first-in first-out
        (f"{table_name}_kind_due_ix", ("pkind", "scheduled_at", "id"), False),
        (f"{table_name}_lock_ix", ("lock_uuid",), False),
    ]


def dead_letter_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The dead letters of queue table ``table_name``: ``<table_name>_dead``.

    A message moves here when its worker gives up on it; it keeps the serialized payload, the
    partition it came from (so it can be requeued without knowing its serializer), the last
    error and how many attempts were made.
    """
    _check_table_name(table_name)
    return _table(metadata, f"{table_name}_dead", _dead_letter_columns, _dead_letter_indexes)


def _dead_letter_columns() -> list[sa.Column]:
    return [
        sa.Column("id", QueueId(), sa.Identity(), primary_key=True, autoincrement=True),
        sa.Column("pkind", QueueKey(KIND_LENGTH), nullable=False),
        sa.Column("pkey", QueueKey(KEY_LENGTH), nullable=False),
        sa.Column("payload", QueuePayload(), nullable=False),
        sa.Column("scheduled_at_initially", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        # nullable: Oracle stores an empty error text as NULL
        sa.Column("last_error", QueueText(ERROR_LENGTH), nullable=True),
        sa.Column("failed_at", sa.BigInteger(), nullable=False),
    ]


def _dead_letter_indexes(name: str) -> list[tuple[str, tuple[str, ...], bool]]:
    return [(f"{name}_kind_ix", ("pkind", "failed_at", "id"), False)]


# storage presets for create_schema(tuning=...): "high-churn" suits a table whose rows are
# inserted, updated and deleted all day; each dialect module says what it sets (tuning_ddl)
TUNING_PRESETS = ("high-churn",)


def create_schema(engine: sa.Engine, *, table_name: str = DEFAULT_TABLE,
                  tuning: str | None = None) -> sa.Table:
    """Create the queue table and its indexes if absent (idempotent), with a tuning preset."""
    from .dialects import dao_class_for

    dao_cls = dao_class_for(engine.dialect)
    table = queue_table(sa.MetaData(), table_name)
    tuning_ddl = _tuning_ddl(engine.dialect, table, tuning)
    with engine.begin() as conn:
        table.create(conn, checkfirst=True)
        for ddl in tuning_ddl:
            conn.exec_driver_sql(ddl)
        dead_letter_table(table.metadata, table_name).create(conn, checkfirst=True)
    dao_cls.after_create_schema(engine)
    return table


def drop_schema(engine: sa.Engine, *, table_name: str = DEFAULT_TABLE) -> None:
    """Drop the queue table, its dead letters and everything in them."""
    table = queue_table(sa.MetaData(), table_name)
    with engine.begin() as conn:
        dead_letter_table(table.metadata, table_name).drop(conn, checkfirst=True)
        table.drop(conn, checkfirst=True)


def create_table_op(op, table_name: str = DEFAULT_TABLE, *, tuning: str | None = None) -> None:
    """Create the queue table from inside your own Alembic migration: ``create_table_op(op)``,
    with a tuning preset as ``create_schema`` takes it."""
    _check_table_name(table_name)
    table = queue_table(sa.MetaData(), table_name)
    tuning_ddl = _tuning_ddl(op.get_context().dialect, table, tuning)
    _create_table_op(op, table_name, _columns, _indexes)
    for ddl in tuning_ddl:
        op.execute(ddl)


def _tuning_ddl(dialect: sa.Dialect, table: sa.Table, tuning: str | None) -> list[str]:
    from .dialects import dao_class_for

    if tuning is None:
        return []
    if tuning not in TUNING_PRESETS:
        raise InvalidArgumentError(
            f"tuning must be None or one of {', '.join(TUNING_PRESETS)}; got {tuning!r}")
    return dao_class_for(dialect).tuning_ddl(table, tuning)


def create_dead_letter_table_op(op, table_name: str = DEFAULT_TABLE) -> None:
    """Create the dead-letter table of queue table ``table_name`` from an Alembic migration."""
    _check_table_name(table_name)
    _create_table_op(op, f"{table_name}_dead", _dead_letter_columns, _dead_letter_indexes)


def widen_error_text_op(op, table_name: str = DEFAULT_TABLE) -> None:
    """Migration 0003: the dead letters' error text holds ``ERROR_LENGTH`` characters of any
    text on every database (SQL Server and Oracle declared too little room before)."""
    from .dialects import dao_class_for

    _check_table_name(table_name)
    context = op.get_context()
    dao_class_for(context.dialect).widen_error_text_op(op, f"{table_name}_dead",
                                                       online=not context.as_sql)


def drop_dead_letter_table_op(op, table_name: str = DEFAULT_TABLE) -> None:
    """The downgrade of ``create_dead_letter_table_op``."""
    op.drop_table(f"{table_name}_dead")


def drop_table_op(op, table_name: str = DEFAULT_TABLE) -> None:
    """The downgrade of ``create_table_op``."""
    op.drop_table(table_name)


def _check_table_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 40 or not name.isidentifier():
        raise InvalidArgumentError(
            f"table_name must be a plain identifier of at most 40 characters, got {name!r}"
        )
