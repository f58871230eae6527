"""Oracle 19c+ and 23ai Free through python-oracledb (dialect name "oracle").

- offer: the portable lock-then-insert round fits (``FOR UPDATE`` renders here, and a failed
  statement is undone alone, so the round can start again after ORA-00001).
- claim: ``FOR UPDATE SKIP LOCKED`` cannot be combined with a row limit (ORA-02014), and Oracle
  skips locked rows only as it fetches them. So the claim opens an ordered locking cursor with
  no limit and fetches ``n`` rows from it: rows locked by another consumer are passed over and
  the next due ones returned, where picking ``n`` rows first and skipping the locked ones
  afterwards would return nothing while due rows wait behind them. The driver's fetch batch is
  set to ``n`` because Oracle locks every row it sends, read or not. The picked rows are then
  marked by id in the same transaction. The cursor's driver errors are raised as SQLAlchemy
  raises those of its own statements (wrapped, a lost connection invalidated), so they are
  classified, retried and ridden out as every other statement's.
- limits: at most 1000 expressions in an IN-list (ORA-01795).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from ..schema import ERROR_LENGTH, QueueId, QueueKey, QueuePayload, QueueText
from .base import OfferEvents, OfferRow, QueueDao
from .common import AnySelect
from .flow import claim_order

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPICursor
    from sqlalchemy.sql.compiler import GenericTypeCompiler

    from ..schema import MigrationOps


@compiles(QueueId, "oracle")
def _id(type_: QueueId, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return "NUMBER(19)"  # Oracle has no BIGINT


@compiles(QueueKey, "oracle")
def _key(type_: QueueKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # the length counts characters, not bytes, so a key of KEY_LENGTH characters always fits
    return f"VARCHAR2({type_.length} CHAR)"


@compiles(QueueText, "oracle")
def _text(type_: QueueText, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # a standard VARCHAR2 holds at most 4000 bytes whatever its CHAR length, and 2000
    # characters of UTF-8 may need 8000 (ORA-12899): free text goes into a CLOB
    return "CLOB"


@compiles(QueuePayload, "oracle")
def _payload(type_: QueuePayload, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return "BLOB"  # RAW stops at 2000 bytes (32767 with extended strings)


def oracle_error_code(exc: sa.exc.DBAPIError) -> int | None:
    """The ORA- number of a python-oracledb error: its args are one ``_Error`` with ``code``."""
    args = getattr(exc.orig, "args", ())
    code = getattr(args[0], "code", None) if args else None
    return code if isinstance(code, int) else None


class OracleQueueDao(QueueDao):
    name = "oracle"
    duplicate_key_codes = frozenset({1})  # ORA-00001 unique constraint violated
    # deadlock, cannot serialize, resource busy (NOWAIT), resource busy (WAIT timeout expired)
    transient_codes = frozenset({60, 8177, 54, 30006})
    deadlock_codes = frozenset({60})  # ORA-00060
    # end-of-file on the channel, not connected, lost contact, no listener, initialization or
    # shutdown in progress, not available, immediate shutdown in progress
    unavailable_codes = frozenset({3113, 3114, 3135, 12541, 1033, 1034, 1089})
    missing_table_codes = frozenset({942})  # table or view does not exist
    offer_chunk = 999  # keys of a chunk go into one IN-list
    in_list_max = 999

    def __init__(self, table: sa.Table) -> None:
        super().__init__(table)
        self._dues: dict[tuple[str, ...], AnySelect] = {}

    def _due(self, where: tuple[str, ...]) -> AnySelect:
        """The claim's locking read, without a row limit, with the claim conditions ``where``."""
        if where not in self._dues:
            t = self.table
            self._dues[where] = (
                sa.select(*self._claim_columns)
                .where(t.c.pkind == sa.bindparam("b_kind"),
                       t.c.scheduled_at <= sa.bindparam("b_now"), *self.due_conditions(where))
                .order_by(*claim_order(t))
                .with_for_update(skip_locked=True)  # no OF: of=table renders an empty OF list
            )
        return self._dues[where]

    @classmethod
    def server_time(cls) -> sa.Executable:
        # a DATE difference counts days (fractions of them), without the fraction of a
        # second, which the same timestamp's seconds give (a time zone's offset is whole
        # minutes, so they are the same in UTC)
        return sa.text(
            "SELECT ROUND((CAST(SYS_EXTRACT_UTC(t) AS DATE) - DATE '1970-01-01') * 86400000) "
            "+ FLOOR(MOD(EXTRACT(SECOND FROM t), 1) * 1000) "
            "FROM (SELECT SYSTIMESTAMP AS t FROM DUAL)")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> int | None:
        return oracle_error_code(exc)

    @classmethod
    def widen_error_text_op(cls, op: MigrationOps, table_name: str, online: bool) -> None:
        # the first schema declared VARCHAR2(2000 CHAR), which a standard VARCHAR2's 4000-byte
        # ceiling undercuts. Oracle cannot ALTER a VARCHAR2 into a CLOB (ORA-22858): a CLOB
        # column takes the texts, then the name.
        if online and not _is_varchar(op, table_name):
            return
        op.add_column(table_name, sa.Column("last_error_clob", QueueText(ERROR_LENGTH)))
        op.execute(f"UPDATE {table_name} SET last_error_clob = last_error")
        op.drop_column(table_name, "last_error")
        op.alter_column(table_name, "last_error_clob", new_column_name="last_error")

    def insert_new(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                   now_ms: int, actor: str | None, events: OfferEvents | None = None) -> None:
        # a failed array insert keeps the rows before the failing one: a savepoint makes the
        # executemany all or nothing
        with conn.begin_nested():
            super().insert_new(conn, pkind, rows, now_ms, actor)

    def insert_rows(self, conn: sa.Connection, table: sa.Table,
                    params: Sequence[dict[str, Any]]) -> None:
        # no multi-row VALUES here: the driver's array insert, one round trip
        conn.execute(sa.insert(table), list(params))

    def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                 where: Sequence[str]) -> list[tuple[Any, ...]]:
        if not conn.in_transaction():
            conn.begin()  # the raw cursor below must run inside the transaction that commits
        # SQLAlchemy sets no per-statement fetch size, so the locking read uses a driver cursor
        sql = str(self._due(tuple(where)).compile(dialect=conn.dialect))
        params = {"b_kind": pkind, "b_now": now_ms}
        cursor: Any = None  # the driver's own (python-oracledb's prefetchrows is its own)
        try:
            cursor = conn.connection.cursor()
            cursor.prefetchrows = cursor.arraysize = limit
            cursor.execute(sql, params)
            picked = [(r[0], r[1], _bytes(r[2]), *r[3:]) for r in cursor.fetchmany(limit)]
            cursor.close()
            return picked
        except Exception as exc:
            if cursor is not None:
                with contextlib.suppress(Exception):  # the first error is the one to tell
                    cursor.close()
            wrapped = _as_sqlalchemy_error(conn, exc, sql, params, cursor)
            if wrapped is exc:
                raise
            raise wrapped from exc


    def delete_kind_batch(self, conn: sa.Connection, pkind: str) -> list[str]:
        # FOR UPDATE beside a row limit fails here (ORA-02014): the read locks every message
        # of the queue (clear is deleting them all) and a batch is fetched
        t = self.table
        result = conn.execute(sa.select(t.c.id, t.c.pkey).where(t.c.pkind == pkind)
                              .with_for_update())
        rows = result.fetchmany(self.in_list_max)
        result.close()
        if rows:
            conn.execute(sa.delete(t).where(t.c.id.in_([r.id for r in rows])))
        return [r.pkey for r in rows]


def _as_sqlalchemy_error(conn: sa.Connection, exc: Exception, sql: str,
                         params: dict[str, Any], cursor: DBAPICursor | None) -> Exception:
    """A driver error of the claim's own cursor as SQLAlchemy raises those of the statements
    it runs (``Connection._handle_dbapi_exception``): wrapped in the ``DBAPIError`` subclass
    that the executor classifies (ORA-00060 is retried, ORA-00942 is a missing table), and,
    where the dialect sees a lost connection (ORA-03113...), with ``connection_invalidated``
    set and the connection invalidated, so the pool drops it and a worker backs off. Anything
    else (SQLAlchemy's own errors, a bug) is returned as it is."""
    dialect = conn.dialect
    error = dialect.loaded_dbapi.Error
    if not isinstance(exc, error):
        return exc
    lost = not conn.invalidated and bool(dialect.is_disconnect(
        exc, conn.connection.dbapi_connection, cursor))
    wrapped = sa.exc.DBAPIError.instance(
        sql, params, exc, error, hide_parameters=conn.engine.hide_parameters,
        connection_invalidated=lost, dialect=dialect)
    if lost:
        conn.invalidate(exc)
    return wrapped


def _bytes(payload: Any) -> bytes:
    # SQLAlchemy makes the driver return BLOBs as bytes unless auto_convert_lobs=False
    return payload.read() if hasattr(payload, "read") else bytes(payload)


def _is_varchar(op: MigrationOps, table_name: str) -> bool:
    columns = sa.inspect(op.get_bind()).get_columns(table_name)
    kind = next(c["type"] for c in columns if c["name"] == "last_error")
    return isinstance(kind, sa.String) and not isinstance(kind, sa.Text)
