"""SQLite >= 3.35: one writer at a time.

A write transaction starts with ``BEGIN IMMEDIATE`` so it takes the write lock up front; a
deferred transaction that reads first and then writes can fail with SQLITE_BUSY no matter how
long it waits. With the write lock held nothing can change between a read and the following
write, so the portable select-then-update claim needs no row locks (and SQLite has none). An
operation that writes in the caller's transaction (``connection=``) takes the write lock first
too (``join_write``): Python's sqlite3 driver runs a SELECT outside any transaction and begins
one only at the next write, so a claim's read there saw rows another claim was taking, and
its update, by id, marked them (or, once SQLite had reused a deleted row's id, another key's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.compiler import compiles

from ..errors import SchemaMissingError
from ..schema import QueueId
from .base import Advice, QueueDao

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import GenericTypeCompiler

_BUSY = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_SQLITE_ERROR = 1
# a missing table or index is a plain SQLITE_ERROR (an OperationalError, as an outage is):
# only the message tells, and it is a schema problem, not one to wait out
_NO_SUCH_TABLE = "no such table"
_NO_SUCH_INDEX = "no such index"  # the claim names its index (INDEXED BY): see _due_sql


@compiles(QueueId, "sqlite")
def _id(type_: QueueId, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return "INTEGER"  # only INTEGER PRIMARY KEY is the auto-assigned rowid


class SQLiteQueueDao(QueueDao):
    name = "sqlite"
    offer_chunk = 500  # 9 parameters a row, under SQLite's 32766-parameter limit
    max_payload_bytes = 1_000_000_000  # SQLITE_MAX_LENGTH as SQLite is built by default
    in_list_max = 10000
    skip_locked = False
    delete_returning = True  # SQLite 3.35
    precompiled_insert = True
    duplicate_key_codes = frozenset({1555, 2067})  # SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
    transient_codes = _BUSY

    @classmethod
    def settings_advice(cls, conn: sa.Connection, table_name: str) -> list[Advice]:
        # create_schema switches the file to WAL, where readers and the one writer do not
        # block each other; in another mode every claim blocks every reader
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        assert mode is not None  # the pragma answers one row
        if str(mode).lower() != "wal":
            return [Advice("journal_mode", mode, "readers and the writer block each other: "
                           "switch to WAL (sqldelay migrate does)")]
        return []
    missing_table_codes = frozenset({_NO_SUCH_TABLE, _NO_SUCH_INDEX})

    @classmethod
    def after_create_schema(cls, conn: sa.Connection) -> None:
        # WAL lets readers work while one writer commits; it is stored in the file
        if conn.engine.url.database not in (None, "", ":memory:"):
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")

    def begin_write(self, conn: sa.Connection) -> None:
        self._write_lock_first(conn, own=True)

    def join_write(self, conn: sa.Connection) -> None:
        self._write_lock_first(conn, own=False)

    def _write_lock_first(self, conn: sa.Connection, *, own: bool) -> None:
        """Take the write lock before the transaction's first read (``own``: the
        transaction is sqldelay's, which commits it; otherwise the caller's)."""
        if not conn.in_transaction():
            conn.begin()  # as its first statement would (a listener that sends BEGIN runs now)
        # the driver's own connection (sqlite3's, or aiosqlite's, which forwards these)
        driver = conn.connection.driver_connection
        assert driver is not None  # the connection is open: it has just begun
        if driver.in_transaction:
            # begun, deferred or not (by the caller, or by a listener that sends BEGIN), and
            # perhaps without the write lock yet: a write that changes nothing takes it before
            # any read of the operation (or fails, SQLITE_BUSY, where the transaction read
            # before another writer's commit: a caller's transaction is the caller's to run
            # again, sqldelay's own is retried)
            conn.execute(self._take_write_lock)
        elif own or driver.isolation_level is not None:
            # the driver has begun nothing and would begin, deferred, only at the first write:
            # BEGIN IMMEDIATE is the transaction from here, which its commit or rollback ends.
            # (A caller's connection whose driver is in autocommit, isolation_level None,
            # runs each statement alone, as the caller asked: nothing is begun for it.)
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    def __init__(self, table: sa.Table) -> None:
        super().__init__(table)
        self._dues: dict[tuple[str, ...], tuple[str, dict[str, Any]]] = {}
        # a write that changes no row: what takes SQLite's write lock inside a transaction
        # already begun (any UPDATE takes it when it starts, whatever rows it matches)
        self._take_write_lock = sa.update(table).where(sa.false()).values(id=table.c.id)

    def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                 where: Sequence[str]) -> Sequence[Sequence[Any]]:
        sql, constants = self._due_sql(tuple(where))
        try:
            return conn.exec_driver_sql(sql, {**constants, "b_kind": pkind, "b_now": now_ms,
                                              "b_limit": limit}).fetchall()
        except sa.exc.OperationalError as exc:
            if self.error_code(exc) != _NO_SUCH_INDEX:
                raise
            raise SchemaMissingError(
                f"the index {self.claim_index!r} of queue table {self.table.name!r} does not "
                "exist, and every claim on SQLite reads through it: create it again "
                "(sqldelay verify names it with its columns)") from exc

    def _due_sql(self, where: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
        """The claim's read, made to walk the claim index, with its constant parameters.

        Without statistics SQLite's planner takes the due index for the range on
        scheduled_at and sorts every due row for the ORDER BY: with a million due messages, a
        million-row sort per claim. Core cannot say INDEXED BY, so it goes into the SQL,
        compiled once per set of claim conditions."""
        if where not in self._dues:
            compiled = self.select_due(where).compile(dialect=sqlite.dialect(paramstyle="named"))
            name = sqlite.dialect().identifier_preparer.format_table(self.table)
            sql = compiled.string.replace(f"FROM {name} ",
                                          f"FROM {name} INDEXED BY {self.claim_index} ", 1)
            self._dues[where] = (sql, {k: v for k, v in compiled.params.items()
                                       if not k.startswith("b_")})
        return self._dues[where]

    def prefix_match(self, column: sa.ColumnElement[str], prefix: str) -> sa.ColumnElement[bool]:
        # SQLite's LIKE folds ASCII case; the substr comparison makes the match exact
        return sa.and_(super().prefix_match(column, prefix),
                       sa.func.substr(column, 1, len(prefix)) == prefix)

    @classmethod
    def server_time(cls) -> sa.Executable:
        # the Julian day of the epoch is 2440587.5; SQLite's 'now' has millisecond precision
        return sa.text("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> int | str | None:
        # sqlite3's extended result code (Python 3.11), where the error carries one
        code: int | None = getattr(exc.orig, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _BUSY:
            return code & 0xFF  # the extended busy and locked codes keep these in the low byte
        if code == _SQLITE_ERROR:  # a plain SQLITE_ERROR: only the message tells
            text = str(exc.orig)
            for missing in (_NO_SUCH_TABLE, _NO_SUCH_INDEX):
                if missing in text:
                    return missing
        return code
