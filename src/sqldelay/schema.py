"""The tables of a queue table name, declared once for the code, create_schema, the Alembic
migrations and users' own migrations.

Every column and index carries the revision of the migration that added it (and, for a
dropped index, the one that dropped it), so the migrations build exactly their own step and
create_schema, which runs them, builds the newest shape. Column types that differ per database
are small custom types here whose DDL each dialect module renders (``@compiles``), so this
module stays free of per-database branches. What else a database adds to its tables (partial
indexes, a storage preset, settings after creation, a migration step of its own) its dialect
class says (``DatabaseHooks``): the dialect layer, which sits above this module, hands its
classes down when it is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from .errors import InvalidArgumentError, UnsupportedDialectError

if TYPE_CHECKING:
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.compiler import GenericTypeCompiler
    from sqlalchemy.sql.ddl import BaseDDLElement

DEFAULT_TABLE = "delayed_queue"
KEY_LENGTH = 200
KIND_LENGTH = 100
LOCK_LENGTH = 36
ERROR_LENGTH = 2000  # characters of the last error kept with a dead letter
ACTOR_LENGTH = 200  # who offered or claimed a message: a name, or host:pid[:thread]
EVENT_KIND_LENGTH = 20
TRACE_LENGTH = 512  # a W3C traceparent (55 characters) with room for what may follow it
RESULT_STATUS_LENGTH = 20  # a task result's status (sqldelay.tasks_base.TaskStatus)


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
def _text_default(type_: QueueText, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return compiler.visit_unicode(type_, **kw)


@compiles(QueueId)
def _id_default(type_: QueueId, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return compiler.visit_BIGINT(type_, **kw)


@compiles(QueueKey)
def _key_default(type_: QueueKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return compiler.visit_VARCHAR(type_, **kw)


@compiles(QueuePayload)
def _payload_default(type_: QueuePayload, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return compiler.visit_large_binary(type_, **kw)


# the schema version this code reads and writes: the newest migration's revision
SCHEMA_VERSION = "0012"


class _Column(NamedTuple):
    since: str  # the migration that added it
    make: Callable[[], sa.Column[Any]]


class _Index(NamedTuple):
    suffix: str  # appended to the table's name
    columns: tuple[str, ...]  # "name DESC" for a descending column
    unique: bool = False
    since: str = "0001"
    until: str | None = None  # the migration that dropped it
    # a partial index of the rows meeting this condition, made only on the databases whose
    # dialect keeps partial indexes (``QueueDao.partial_indexes``)
    where: str | None = None
    # on those databases, the migration that dropped it for partial ones (kept elsewhere)
    replaced: str | None = None

    def span(self, partial: bool) -> tuple[str, str | None] | None:
        """The migrations that make and drop it on a database that keeps partial indexes or
        one that does not (None: never made there)."""
        if self.where is not None and not partial:
            return None
        return self.since, (self.replaced if partial and self.replaced else self.until)

    def exists_at(self, revision: str, partial: bool) -> bool:
        span = self.span(partial)
        return span is not None and span[0] <= revision and (span[1] is None
                                                             or span[1] > revision)

    def options(self) -> dict[str, Any]:
        """The partial index's condition, for each database that keeps partial indexes: the
        ``<dialect>_where`` keyword arguments of an Index or ``create_index`` (typed Any, as
        their ``**kw`` is, so that they may sit beside the typed keywords)."""
        if self.where is None:
            return {}
        return {f"{name}_where": sa.text(self.where) for name in _partial_dialects()}


class _TableSpec(NamedTuple):
    """One of the tables beside a queue table name, with the revision of every part, so that
    create_schema builds the newest shape and each migration exactly its own step."""

    suffix: str  # "" for the queue table itself
    since: str
    columns: tuple[_Column, ...]
    indexes: tuple[_Index, ...]
    optional: bool = False  # made only when asked for (the history table)

    def name(self, table_name: str) -> str:
        return table_name + self.suffix

    def table(self, metadata: sa.MetaData, table_name: str) -> sa.Table:
        """The newest shape, in ``metadata``."""
        name = self.name(table_name)
        if name in metadata.tables:
            return metadata.tables[name]
        table = sa.Table(name, metadata, *(c.make() for c in self.columns))
        for ix in self.indexes:
            made = {partial for partial in (False, True)
                    if (span := ix.span(partial)) is not None and span[1] is None}
            if not made:
                continue
            index = sa.Index(name + ix.suffix, *_elements(ix.columns, table), unique=ix.unique,
                             info={_PARTIAL: made, _WHERE: ix.where}, **ix.options())
            if made != {False, True}:  # on the databases that keep partial indexes, or not
                index.ddl_if(callable_=_made_on)
        return table

    def create_op(self, op: MigrationOps, table_name: str, revision: str) -> None:
        """Create the table as revision ``revision`` has it, from an Alembic migration."""
        name, partial = self.name(table_name), _keeps_partial(op)
        op.create_table(name, *(c.make() for c in self.columns if c.since <= revision))
        for ix in self.indexes:
            if ix.exists_at(revision, partial):
                _create_index(op, name, ix)

    def upgrade_op(self, op: MigrationOps, table_name: str, revision: str) -> None:
        """Migration ``revision``'s step for this table."""
        if self.since == revision:
            self.create_op(op, table_name, revision)
            return
        if self.since > revision:
            return
        name, spans = self.name(table_name), self._spans(op)
        for ix, (_, until) in spans:
            if until == revision:
                op.drop_index(name + ix.suffix, table_name=name)
        for c in self.columns:
            if c.since == revision:
                op.add_column(name, c.make())
        for ix, (since, _) in spans:
            if since == revision:
                _create_index(op, name, ix)

    def _spans(self, op: MigrationOps) -> list[tuple[_Index, tuple[str, str | None]]]:
        """Each index made on the database an Alembic migration runs on, with the migrations
        that make and drop it there."""
        partial = _keeps_partial(op)
        return [(ix, span) for ix in self.indexes if (span := ix.span(partial)) is not None]

    def downgrade_op(self, op: MigrationOps, table_name: str, revision: str) -> None:
        """Undo migration ``revision``'s step for this table."""
        name = self.name(table_name)
        if self.since == revision:
            op.drop_table(name)
            return
        if self.since > revision:
            return
        spans = self._spans(op)
        for ix, (since, _) in spans:
            if since == revision:
                op.drop_index(name + ix.suffix, table_name=name)
        for c in reversed(self.columns):
            if c.since == revision:
                op.drop_column(name, c.make().name)
        for ix, (_, until) in spans:
            if until == revision:
                _create_index(op, name, ix)


class MigrationOps(Protocol):
    """What the ``*_op`` functions (and the dialects' ``widen_error_text_op``) use of Alembic's
    operations: the ``op`` module a migration imports (``from alembic import op``), or an
    ``alembic.operations.Operations``."""

    def get_context(self) -> MigrationContext: ...

    def get_bind(self) -> sa.Connection: ...

    def create_table(self, table_name: str, /, *columns: sa.schema.SchemaItem) -> sa.Table: ...

    def drop_table(self, table_name: str, /) -> None: ...

    def add_column(self, table_name: str, column: sa.Column[Any], /) -> None: ...

    def drop_column(self, table_name: str, column_name: str, /) -> None: ...

    def alter_column(self, table_name: str, column_name: str, /, *,
                     new_column_name: str | None = None,
                     type_: sa.types.TypeEngine[Any] | None = None,
                     existing_nullable: bool | None = None) -> None: ...

    def create_index(self, index_name: str | None, table_name: str,
                     columns: Sequence[str | sa.TextClause | sa.ColumnElement[Any]], *,
                     unique: bool = False, **kw: Any) -> None: ...

    def drop_index(self, index_name: str, /, table_name: str | None = None) -> None: ...

    def execute(self, sqltext: sa.Executable | str, /) -> None: ...


# the keys of an Index's info holding whether it is made where partial indexes are kept
# (True), where they are not (False), or both; and the condition of a partial one
_PARTIAL, _WHERE = "sqldelay_partial", "sqldelay_where"


class DatabaseHooks(Protocol):
    """What building and migrating the tables asks of a database's dialect class
    (``dialects.base.QueueDao``)."""

    partial_indexes: bool  # the partial indexes (``_Index.where``) are made on this database

    def after_create_schema(self, conn: sa.Connection) -> None: ...

    def tuning_ddl(self, table: sa.Table, preset: str) -> list[str]: ...

    def widen_error_text_op(self, op: MigrationOps, table_name: str, online: bool) -> None: ...


# the dialect classes by SQLAlchemy dialect name, as the dialect layer registers them (as
# Alembic's DDL implementations register themselves by name)
_DATABASES: dict[str, DatabaseHooks] = {}


def register_databases(classes: Mapping[str, DatabaseHooks]) -> None:
    """Called by the dialect layer (``dialects/__init__``) with its classes."""
    _DATABASES.update(classes)


def _database(dialect: sa.Dialect) -> DatabaseHooks:
    try:
        return _DATABASES[dialect.name]
    except KeyError:
        raise UnsupportedDialectError(
            f"sqldelay does not support the {dialect.name!r} dialect") from None


def _partial_dialects() -> tuple[str, ...]:
    return tuple(name for name, dao in _DATABASES.items() if dao.partial_indexes)


def _keeps_partial(op: MigrationOps) -> bool:
    """Whether the database an Alembic migration runs on keeps partial indexes."""
    return op.get_context().dialect.name in _partial_dialects()


def _made_on(ddl: BaseDDLElement, target: sa.schema.SchemaItem | str,
             bind: sa.Connection | None, tables: list[sa.Table] | None = None,
             state: object = None, *, dialect: sa.Dialect | None = None, **kw: object) -> bool:
    """``ddl_if``'s test: whether ``target`` (an index) is made on ``dialect``'s database."""
    assert isinstance(target, sa.Index)  # given to indexes alone
    if dialect is None:
        assert bind is not None  # SQLAlchemy gives the dialect, or else the connection
        dialect = bind.dialect
    return index_made_on(target, dialect)


def index_made_on(index: sa.Index, dialect: sa.Dialect) -> bool:
    """Whether the queue tables' ``index`` exists on ``dialect``'s database (some exist only
    where partial indexes are kept, some only where they are not)."""
    return (dialect.name in _partial_dialects()) in index.info.get(_PARTIAL, {False, True})


def index_condition(index: sa.Index) -> str | None:
    """The condition of the queue tables' partial ``index`` (None: it holds every row)."""
    return index.info.get(_WHERE)


def _create_index(op: MigrationOps, table: str, ix: _Index) -> None:
    op.create_index(table + ix.suffix, table, _elements(ix.columns), unique=ix.unique,
                    **ix.options())


def _elements(columns: tuple[str, ...], table: sa.Table | None = None,
              ) -> list[str | sa.TextClause | sa.ColumnElement[Any]]:
    """Index elements: column names (Alembic) or columns (a Table), descending where asked."""
    out: list[str | sa.TextClause | sa.ColumnElement[Any]] = []
    for column in columns:
        name, _, order = column.partition(" ")
        if table is None:
            out.append(sa.text(column) if order else name)
        else:
            out.append(table.c[name].desc() if order else table.c[name])
    return out


QUEUE = _TableSpec("", "0001", (
    _Column("0001", lambda: sa.Column("id", QueueId(), sa.Identity(), primary_key=True,
                                      autoincrement=True)),
    _Column("0001", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), nullable=False)),
    _Column("0001", lambda: sa.Column("pkey", QueueKey(KEY_LENGTH), nullable=False)),
    _Column("0001", lambda: sa.Column("payload", QueuePayload(), nullable=False)),
    # due time in epoch ms; while a message is claimed, the time its lock expires
    _Column("0001", lambda: sa.Column("scheduled_at", sa.BigInteger(), nullable=False)),
    # the due time the producer asked for
    _Column("0001", lambda: sa.Column("scheduled_at_initially", sa.BigInteger(),
                                      nullable=False)),
    _Column("0001", lambda: sa.Column("lock_uuid", sa.String(LOCK_LENGTH), nullable=True)),
    _Column("0001", lambda: sa.Column("created_at", sa.BigInteger(), nullable=False)),
    # claims so far; the attempt number of the current delivery
    _Column("0001", lambda: sa.Column("deliveries", sa.Integer(), nullable=False)),
    # among due messages, higher first; a default, so existing rows get 0 when it is added
    _Column("0004", lambda: sa.Column("priority", sa.Integer(), nullable=False,
                                      server_default=sa.text("0"))),
    # messages of one group are handled one at a time, in order
    _Column("0004", lambda: sa.Column("group_key", QueueKey(KEY_LENGTH), nullable=True)),
    # who offered the message and, while it is claimed, who holds it: written by queues that
    # keep history (or when given), empty otherwise
    _Column("0005", lambda: sa.Column("enqueued_by", QueueKey(ACTOR_LENGTH), nullable=True)),
    _Column("0005", lambda: sa.Column("claimed_by", QueueKey(ACTOR_LENGTH), nullable=True)),
    # the producer's trace context (W3C traceparent), stored by traced offers, so the span
    # that handles the message days later links to the request that scheduled it
    _Column("0006", lambda: sa.Column("trace_context", sa.String(TRACE_LENGTH), nullable=True)),
), (
    _Index("_kind_key_uq", ("pkind", "pkey"), unique=True),
    # the earliest due time (next_due, stats); id makes equal due times first-in first-out
    _Index("_kind_due_ix", ("pkind", "scheduled_at", "id")),
    _Index("_lock_ix", ("lock_uuid",), until="0004"),
    # claims read this one: among due messages, higher priority first, then due order
    _Index("_kind_prio_ix", ("pkind", "priority DESC", "scheduled_at", "id"), since="0004",
           replaced="0007"),
    # the locked (in-flight) messages of a queue, counted for its concurrency cap
    _Index("_kind_lock_ix", ("pkind", "lock_uuid"), since="0004", replaced="0007"),
    # where partial indexes are kept, the two above are split by lock: claims read the
    # unlocked messages in claim order from the first, and those whose lock has expired from
    # the second, which also holds the in-flight ones counted for a concurrency cap. A claim
    # then takes its messages out of the first instead of adding an entry for each at its
    # lock's expiry, which every later claim of a lower priority walked past until vacuum
    _Index("_kind_ready_ix", ("pkind", "priority DESC", "scheduled_at", "id"), since="0007",
           until="0012", where="lock_uuid IS NULL"),
    # where partial indexes are kept, the one above split by group: a message waiting goes
    # into one claim-order index, where it went into two before (the one above and the group
    # index, which held the ungrouped ones waiting), and an offer of new messages of no group
    # updates four indexes instead of five (psycopg alone inserting 100 at a time from four
    # connections: 103,000 to 111,000 messages/s against 88,000 to 94,000). A grouped claim's
    # walk reads both; a plain claim (its queue has no groups) and a grouped claim's read of
    # the ungrouped messages the first alone, which walks no message of a group to find them
    _Index("_kind_loose_ix", ("pkind", "priority DESC", "scheduled_at", "id"), since="0012",
           where="lock_uuid IS NULL AND group_key IS NULL"),
    _Index("_kind_ready_grouped_ix", ("pkind", "priority DESC", "scheduled_at", "id"),
           since="0012", where="lock_uuid IS NULL AND group_key IS NOT NULL"),
    _Index("_kind_flight_ix", ("pkind", "scheduled_at", "id"), since="0007",
           where="lock_uuid IS NOT NULL"),
    # a group's messages, in the group's order (claims take each group's first due one)
    _Index("_kind_group_ix", ("pkind", "group_key", "priority DESC", "scheduled_at_initially",
                              "id"), since="0004", replaced="0011"),
    # where partial indexes are kept, the one above without the claimed messages of no group:
    # a claim of an ungrouped message then adds no entry to it (a claim updates indexed
    # columns, so the row goes into every index whose condition it meets: this one cost a
    # plain drain a fifth of its server time). The ungrouped ones waiting stay, so that a
    # grouped claim learns through it whether the queue has any
    _Index("_kind_grouped_ix", ("pkind", "group_key", "priority DESC",
                                "scheduled_at_initially", "id"), since="0011", until="0012",
           where="group_key IS NOT NULL OR lock_uuid IS NULL"),
    # where partial indexes are kept, the one above with the messages of a group alone: the
    # ungrouped ones waiting are in ``_kind_loose_ix``, which answers whether there are any
    _Index("_kind_groups_ix", ("pkind", "group_key", "priority DESC", "scheduled_at_initially",
                               "id"), since="0012", where="group_key IS NOT NULL"),
    # where partial indexes are kept, the in-flight messages of each group, by their lock's
    # expiry: a group is busy while one is in flight, which its claims read here instead of
    # in a row of the groups table that every claim and ack wrote
    _Index("_kind_group_flight_ix", ("pkind", "group_key", "scheduled_at"), since="0008",
           where="lock_uuid IS NOT NULL AND group_key IS NOT NULL"),
))

DEAD = _TableSpec("_dead", "0002", (
    _Column("0002", lambda: sa.Column("id", QueueId(), sa.Identity(), primary_key=True,
                                      autoincrement=True)),
    _Column("0002", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), nullable=False)),
    _Column("0002", lambda: sa.Column("pkey", QueueKey(KEY_LENGTH), nullable=False)),
    _Column("0002", lambda: sa.Column("payload", QueuePayload(), nullable=False)),
    _Column("0002", lambda: sa.Column("scheduled_at_initially", sa.BigInteger(),
                                      nullable=False)),
    _Column("0002", lambda: sa.Column("created_at", sa.BigInteger(), nullable=False)),
    _Column("0002", lambda: sa.Column("attempts", sa.Integer(), nullable=False)),
    # nullable: Oracle stores an empty error text as NULL
    _Column("0002", lambda: sa.Column("last_error", QueueText(ERROR_LENGTH), nullable=True)),
    _Column("0002", lambda: sa.Column("failed_at", sa.BigInteger(), nullable=False)),
    # kept so that a requeued message keeps its place among the others
    _Column("0004", lambda: sa.Column("priority", sa.Integer(), nullable=False,
                                      server_default=sa.text("0"))),
    _Column("0004", lambda: sa.Column("group_key", QueueKey(KEY_LENGTH), nullable=True)),
    _Column("0005", lambda: sa.Column("enqueued_by", QueueKey(ACTOR_LENGTH), nullable=True)),
), (
    _Index("_kind_ix", ("pkind", "failed_at", "id")),
    # a key's dead letters, oldest first (a task's status, a listing of one key): through the
    # index above, a read of a key the queue has no dead letter of went through all of the
    # queue's (PostgreSQL 15, 300,000 dead letters: 34 ms a read; 0.03 ms through this one)
    _Index("_key_ix", ("pkind", "pkey", "failed_at", "id"), since="0010"),
))

# a row per group that a claim has met: while one of its messages is in flight (claimed_until
# in the future), no other is claimed; claims lock these rows (SKIP LOCKED) to decide that.
# PostgreSQL leaves it empty: its claims read a group's state from its in-flight messages
# (``_kind_group_flight_ix``) and take turns on a group through advisory locks
GROUPS = _TableSpec("_groups", "0004", (
    _Column("0004", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), primary_key=True)),
    _Column("0004", lambda: sa.Column("group_key", QueueKey(KEY_LENGTH), primary_key=True)),
    _Column("0004", lambda: sa.Column("claimed_until", sa.BigInteger(), nullable=True)),
    _Column("0004", lambda: sa.Column("lock_uuid", sa.String(LOCK_LENGTH), nullable=True)),
), ())

# a row per queue with flow control: paused, a rate limit (a token bucket in milli-tokens,
# refilled as time passes, spent by claims), a cap on messages in flight, and whether the
# queue has ever had grouped messages (claims then take the group-aware path)
SETTINGS = _TableSpec("_settings", "0004", (
    _Column("0004", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), primary_key=True)),
    _Column("0004", lambda: sa.Column("paused", sa.SmallInteger(), nullable=False,
                                      server_default=sa.text("0"))),
    _Column("0004", lambda: sa.Column("has_groups", sa.SmallInteger(), nullable=False,
                                      server_default=sa.text("0"))),
    _Column("0004", lambda: sa.Column("rate_limit", sa.Integer(), nullable=True)),
    _Column("0004", lambda: sa.Column("rate_period_ms", sa.BigInteger(), nullable=True)),
    _Column("0004", lambda: sa.Column("tokens_milli", sa.BigInteger(), nullable=True)),
    _Column("0004", lambda: sa.Column("refilled_at", sa.BigInteger(), nullable=True)),
    _Column("0004", lambda: sa.Column("max_in_flight", sa.Integer(), nullable=True)),
), ())

# a message's timeline, kept after it is done: one row per event (offered, claimed, acked...),
# written in the transaction of the change it records, by queues that keep history. Made only
# when asked for (create_schema(history=True), -x history=true)
HISTORY = _TableSpec("_history", "0005", (
    _Column("0005", lambda: sa.Column("id", QueueId(), sa.Identity(), primary_key=True,
                                      autoincrement=True)),
    _Column("0005", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), nullable=False)),
    _Column("0005", lambda: sa.Column("pkey", QueueKey(KEY_LENGTH), nullable=False)),
    _Column("0005", lambda: sa.Column("at", sa.BigInteger(), nullable=False)),
    _Column("0005", lambda: sa.Column("kind", sa.String(EVENT_KIND_LENGTH), nullable=False)),
    _Column("0005", lambda: sa.Column("actor", QueueKey(ACTOR_LENGTH), nullable=True)),
    _Column("0005", lambda: sa.Column("attempt", sa.Integer(), nullable=True)),
    _Column("0005", lambda: sa.Column("detail", QueueText(ERROR_LENGTH), nullable=True)),
), (
    # a key's events in the order they were written
    _Index("_key_ix", ("pkind", "pkey", "id"), since="0005"),
    # pruning a queue's old events
    _Index("_kind_at_ix", ("pkind", "at"), since="0005"),
), optional=True)

# the results of the tasks that keep them (``sqldelay.tasks``): a row per task message whose
# function returned, written in the transaction of its ack, pruned by workers once
# ``expires_at`` has passed. A task still waiting or running is read off its message, one
# that failed for good off its dead letter: only a success leaves something to keep here
RESULTS = _TableSpec("_results", "0009", (
    _Column("0009", lambda: sa.Column("pkind", QueueKey(KIND_LENGTH), primary_key=True)),
    _Column("0009", lambda: sa.Column("pkey", QueueKey(KEY_LENGTH), primary_key=True)),
    _Column("0009", lambda: sa.Column("task", QueueKey(KEY_LENGTH), nullable=False)),
    _Column("0009", lambda: sa.Column("status", sa.String(RESULT_STATUS_LENGTH),
                                      nullable=False)),
    # the message's payload (the task's name and arguments) and the function's return
    # value, both as the queue's serializer wrote them
    _Column("0009", lambda: sa.Column("payload", QueuePayload(), nullable=False)),
    _Column("0009", lambda: sa.Column("return_value", QueuePayload(), nullable=True)),
    _Column("0009", lambda: sa.Column("attempts", sa.Integer(), nullable=False)),
    _Column("0009", lambda: sa.Column("worker", QueueKey(ACTOR_LENGTH), nullable=True)),
    # epoch ms: the message's creation, the start and end of the run that returned, and when
    # the row may be pruned
    _Column("0009", lambda: sa.Column("created_at", sa.BigInteger(), nullable=False)),
    _Column("0009", lambda: sa.Column("started_at", sa.BigInteger(), nullable=False)),
    _Column("0009", lambda: sa.Column("finished_at", sa.BigInteger(), nullable=False)),
    _Column("0009", lambda: sa.Column("expires_at", sa.BigInteger(), nullable=False)),
), (
    _Index("_kind_expiry_ix", ("pkind", "expires_at"), since="0009"),
))

TABLES = (QUEUE, DEAD, GROUPS, SETTINGS, HISTORY, RESULTS)


def queue_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The queue table bound to ``metadata``; add it to your own metadata for autogenerate
    (with ``schema_tables`` for the tables beside it)."""
    check_table_name(table_name)
    return QUEUE.table(metadata, table_name)


def dead_letter_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The dead letters of queue table ``table_name``: ``<table_name>_dead``.

    A message moves here when its worker gives up on it; it keeps the serialized payload, the
    partition it came from (so it can be requeued without knowing its serializer), the last
    error and how many attempts were made.
    """
    check_table_name(table_name)
    return DEAD.table(metadata, table_name)


def groups_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    check_table_name(table_name)
    return GROUPS.table(metadata, table_name)


def settings_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    check_table_name(table_name)
    return SETTINGS.table(metadata, table_name)


def history_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The event history of queue table ``table_name``: ``<table_name>_history``."""
    check_table_name(table_name)
    return HISTORY.table(metadata, table_name)


def results_table(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE) -> sa.Table:
    """The task results of queue table ``table_name``: ``<table_name>_results``."""
    check_table_name(table_name)
    return RESULTS.table(metadata, table_name)


def schema_tables(metadata: sa.MetaData, table_name: str = DEFAULT_TABLE, *,
                  history: bool = True) -> list[sa.Table]:
    """Every table of queue table name ``table_name``, newest shape, in ``metadata`` (the
    history table unless ``history`` is False)."""
    check_table_name(table_name)
    return [spec.table(metadata, table_name) for spec in TABLES
            if history or not spec.optional]


# storage presets for create_schema(tuning=...): "high-churn" suits a table whose rows are
# inserted, updated and deleted all day; each dialect module says what it sets (tuning_ddl)
TUNING_PRESETS = ("high-churn",)


def drop_schema(engine: sa.Engine, *, table_name: str = DEFAULT_TABLE) -> None:
    """Drop the queue tables, their migration state and everything in them."""
    check_table_name(table_name)
    with engine.begin() as conn:
        _drop(conn, table_name)


async def drop_schema_async(engine: AsyncEngine, *, table_name: str = DEFAULT_TABLE) -> None:
    """``drop_schema`` for an asyncio ``AsyncEngine``."""
    check_table_name(table_name)
    async with require_async_engine(engine, "drop_schema").begin() as conn:
        await conn.run_sync(_drop, table_name)


def _drop(conn: sa.Connection, table_name: str) -> None:
    metadata = sa.MetaData()
    tables = schema_tables(metadata, table_name)
    version = sa.Table(f"{table_name}_alembic", metadata,
                       sa.Column("version_num", sa.String(32), primary_key=True))
    for table in [version, *reversed(tables)]:
        table.drop(conn, checkfirst=True)


def after_create(conn: sa.Connection) -> None:
    _database(conn.dialect).after_create_schema(conn)


def require_async_engine(engine: object, name: str) -> AsyncEngine:
    from sqlalchemy.ext.asyncio import AsyncEngine

    if not isinstance(engine, AsyncEngine):
        raise InvalidArgumentError(
            f"{name}_async needs an AsyncEngine, got {type(engine).__name__}: use {name}")
    return engine


def tuning_check(tuning: str | None) -> None:
    """Refuse an unknown tuning preset before anything is created."""
    if tuning is not None and tuning not in TUNING_PRESETS:
        raise InvalidArgumentError(
            f"tuning must be None or one of {', '.join(TUNING_PRESETS)}; got {tuning!r}")


def tuning_ddl(dialect: sa.Dialect, table_name: str, tuning: str | None) -> list[str]:
    """The statements that apply a tuning preset to queue table ``table_name``."""
    tuning_check(tuning)
    if tuning is None:
        return []
    return _database(dialect).tuning_ddl(queue_table(sa.MetaData(), table_name), tuning)


# ---- Alembic: sqldelay's own migrations (the package's migrations/) and yours -----------

def create_table_op(op: MigrationOps, table_name: str = DEFAULT_TABLE, *, tuning: str | None = None,
                    revision: str = SCHEMA_VERSION, history: bool = False) -> None:
    """Create every sqldelay table of ``table_name`` from inside your own Alembic migration,
    as schema version ``revision`` has them (default: this version's), with a tuning preset
    as ``create_schema`` takes it, and the history table when ``history``. Later versions:
    ``upgrade_table_op``."""
    check_table_name(table_name)
    ddl = tuning_ddl(op.get_context().dialect, table_name, tuning)
    for spec in TABLES:
        if spec.since <= revision and (history or not spec.optional):
            spec.create_op(op, table_name, revision)
    for statement in ddl:
        op.execute(statement)


def upgrade_table_op(op: MigrationOps, table_name: str, revision: str, *,
                     history: bool = False) -> None:
    """Schema version ``revision``'s step (one of ``migrations/versions``), for your own
    migrations: run each version's step in order to go from one version to another. The
    history table is made by its version's step only when ``history``; ``create_history_op``
    adds it later."""
    check_table_name(table_name)
    for spec in TABLES:
        if history or not spec.optional:
            spec.upgrade_op(op, table_name, revision)


def downgrade_table_op(op: MigrationOps, table_name: str, revision: str) -> None:
    """The undoing of ``upgrade_table_op(op, table_name, revision)`` (a history table that
    was never made is passed over)."""
    check_table_name(table_name)
    for spec in reversed(TABLES):
        if spec.optional and spec.since == revision and not _exists(op, spec.name(table_name)):
            continue
        spec.downgrade_op(op, table_name, revision)


def create_history_op(op: MigrationOps, table_name: str = DEFAULT_TABLE) -> None:
    """Add the history table to a schema at this version that was made without it."""
    check_table_name(table_name)
    HISTORY.create_op(op, table_name, SCHEMA_VERSION)


def missing_parts(conn: sa.Connection, table_name: str, revision: str, *,
                  history: bool = False) -> list[str]:
    """The tables and indexes of ``table_name`` that schema version ``revision`` has and the
    database on ``conn`` lacks (dropped by hand, or lost in a restore), by name: what
    ``repair_op`` makes. The history table counts only when ``history``; its indexes
    whenever it exists."""
    return [name for _, _, name in _missing(conn, table_name, revision, history)]


def repair_op(op: MigrationOps, table_name: str, revision: str, *, history: bool = False,
              tuning: str | None = None, only: Collection[str] | None = None) -> list[str]:
    """Make again, from an Alembic migration context, what ``missing_parts`` finds, as schema
    version ``revision`` made it, with ``tuning`` applied to a queue table made again; every
    other table, index and row is left as it is. The recorded version says the schema is
    there, so the migrations alone would make nothing: this is what brings a dropped table or
    index back. ``only`` names the parts to make instead (offline SQL, where there is no
    database to ask). Returns the names of what it made."""
    check_table_name(table_name)
    if only is None:
        parts = _missing(op.get_bind(), table_name, revision, history)
    else:
        parts = [p for p in _parts(table_name, revision, _keeps_partial(op)) if p[2] in only]
        made = {spec for spec, ix, _ in parts if ix is None}  # with their indexes
        parts = [p for p in parts if p[1] is None or p[0] not in made]
    for spec, ix, _ in parts:
        if ix is None:
            spec.create_op(op, table_name, revision)
            if spec is QUEUE:
                for statement in tuning_ddl(op.get_context().dialect, table_name, tuning):
                    op.execute(statement)
        else:
            _create_index(op, spec.name(table_name), ix)
    return [name for _, _, name in parts]


_Part = tuple[_TableSpec, "_Index | None", str]


def _parts(table_name: str, revision: str, partial: bool) -> list[_Part]:
    """Every table, (spec, None, its name), and every index, (spec, index, its name), that
    schema version ``revision`` has on a database that keeps partial indexes or not."""
    out: list[_Part] = []
    for spec in TABLES:
        if spec.since <= revision:
            name = spec.name(table_name)
            out.append((spec, None, name))
            out.extend((spec, ix, name + ix.suffix) for ix in spec.indexes
                       if ix.exists_at(revision, partial))
    return out


def _missing(conn: sa.Connection, table_name: str, revision: str, history: bool) -> list[_Part]:
    """The parts of ``_parts`` that the database on ``conn`` lacks: ``missing_parts``. The
    indexes of a missing table are left out (making the table makes them)."""
    check_table_name(table_name)
    inspector = sa.inspect(conn)
    existing = set(inspector.get_table_names())
    present = [name for spec in TABLES if (name := spec.name(table_name)) in existing]
    # one table list and one read of the tables' indexes, not two reads per table
    indexes = {table: {ix["name"] for ix in found} for (_, table), found
               in (inspector.get_multi_indexes(filter_names=present).items() if present else ())}
    out: list[_Part] = []
    for spec, ix, name in _parts(table_name, revision, conn.dialect.name in _partial_dialects()):
        table = spec.name(table_name)
        if ix is None:
            if table not in present and (history or not spec.optional):
                out.append((spec, ix, name))
        elif table in present and name not in indexes.get(table, ()):
            out.append((spec, ix, name))
    return out


def drop_table_op(op: MigrationOps, table_name: str = DEFAULT_TABLE) -> None:
    """The downgrade of ``create_table_op``: every sqldelay table of ``table_name``."""
    check_table_name(table_name)
    for spec in reversed(TABLES):
        if not spec.optional or _exists(op, spec.name(table_name)):
            op.drop_table(spec.name(table_name))


def _exists(op: MigrationOps, name: str) -> bool:
    """Whether table ``name`` exists; offline (SQL output) it is taken to."""
    context = op.get_context()
    return context.as_sql or sa.inspect(op.get_bind()).has_table(name)


def widen_error_text_op(op: MigrationOps, table_name: str = DEFAULT_TABLE) -> None:
    """Migration 0003: the dead letters' error text holds ``ERROR_LENGTH`` characters of any
    text on every database (SQL Server and Oracle declared too little room before)."""
    check_table_name(table_name)
    context = op.get_context()
    _database(context.dialect).widen_error_text_op(op, DEAD.name(table_name),
                                                   online=not context.as_sql)


def check_table_name(name: str) -> None:
    # counted in bytes: PostgreSQL keeps 63 bytes of an identifier (and of a LISTEN
    # channel), so a name of 30 two-byte letters made index names that, cut short, met
    # each other in create_schema, and a wake-up channel pg_notify refused
    if (not isinstance(name, str) or not name or not name.isidentifier()
            or len(name.encode()) > 40):
        raise InvalidArgumentError(
            f"table_name must be a plain identifier of at most 40 bytes (UTF-8), got {name!r}"
        )
