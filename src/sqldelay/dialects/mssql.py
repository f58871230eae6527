"""SQL Server 2017+ and Azure SQL Edge through pyodbc (dialect name "mssql").

- offer: the portable lock-then-insert round, with the lock as a *table hint*: SQLAlchemy drops
  ``FOR UPDATE`` on this dialect without a word. ``UPDLOCK, HOLDLOCK`` takes update locks on the
  existing rows and key-range locks on the absent keys, so a concurrent producer of the same new
  key waits for this transaction instead of racing it to the insert.
- claim: one statement. An ordered CTE picks ``TOP (n)`` due rows under ``ROWLOCK, UPDLOCK,
  READPAST`` (READPAST is SQL Server's SKIP LOCKED), and ``UPDATE`` of the CTE marks them and
  returns them through ``OUTPUT``. Core has no UPDATE of a CTE, hence a ``text()`` statement
  with bound parameters. The flow-control claim (``flow``) locks settings and group rows with
  the same hints (``lock_rows``).
- limits: at most 2100 parameters per statement.
- keys: SQL Server ignores trailing spaces when it compares text, whatever the collation, so
  "key" and "key " would be one message: such keys are refused with a clear error here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import mssql
from sqlalchemy.ext.compiler import compiles

from ..errors import InvalidArgumentError
from ..schema import ERROR_LENGTH, QueueKey, QueuePayload, QueueText
from .base import ClaimedRow, QueueDao
from .common import AnySelect

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import GenericTypeCompiler

    from ..schema import MigrationOps

_PARAMETER_LIMIT = 2100
# bound values per inserted row: every column but the identity and claimed_by (enqueued_by
# included: an offer may name its producer)
_INSERT_PARAMETERS = 11

# pyodbc puts the native error number of the first diagnostic record before the name of the
# ODBC function that failed: "[23000] [Microsoft]...duplicate key ... (2627) (SQLExecDirectW)"
_NATIVE_ERROR = re.compile(r"\((\d+)\) \(SQL\w+\)")


@compiles(QueueKey, "mssql")
def _key(type_: QueueKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # national text so any key fits whatever the database code page; NVARCHAR(n) counts UTF-16
    # code units, and a character outside the BMP takes two; a binary collation so keys compare
    # case- and accent-sensitively (the default collations fold case)
    assert type_.length is not None  # the schema declares every key column with its length
    return f"NVARCHAR({2 * type_.length}) COLLATE Latin1_General_100_BIN2"


@compiles(QueueText, "mssql")
def _text(type_: QueueText, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # NVARCHAR(n) counts UTF-16 code units and a character outside the BMP takes two, so n
    # characters of any text need 2n units (4000, the largest n short of MAX, for 2000)
    assert type_.length is not None  # the schema declares every text column with its length
    return f"NVARCHAR({2 * type_.length})"


@compiles(QueuePayload, "mssql")
def _payload(type_: QueuePayload, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # without a server version at hand SQLAlchemy renders the deprecated IMAGE type
    return "VARBINARY(MAX)"


def native_error(exc: sa.exc.DBAPIError) -> int | None:
    """The SQL Server error number of a pyodbc error: args are (sqlstate, message)."""
    args: tuple[object, ...] = getattr(exc.orig, "args", ())
    match = _NATIVE_ERROR.search(args[1]) if len(args) > 1 and isinstance(args[1], str) else None
    return int(match.group(1)) if match else None


class MSSQLQueueDao(QueueDao):
    name = "mssql"
    duplicate_key_codes = frozenset({2627, 2601})  # unique constraint, unique index
    # deadlock victim (1205), lock request timeout (1222), snapshot isolation update conflict
    # (3960: the transaction must start again); and Azure SQL's transient faults, which
    # Microsoft's "Troubleshoot transient connection errors" page says to retry: database
    # unavailable (40613), service busy (40501), resource limits reached (10928, 10929) and
    # the elastic-pool limits (49918-49920)
    transient_codes = frozenset({1205, 1222, 3960, 40501, 40613, 10928, 10929,
                                 49918, 49919, 49920})
    deadlock_codes = frozenset({1205})  # chosen as the deadlock victim
    # no process at the other end of the pipe, and the TCP provider's aborted, reset and
    # timed-out connections
    unavailable_codes = frozenset({233, 10053, 10054, 10060})
    missing_table_codes = frozenset({208})  # invalid object name
    # a chunk's multi-row INSERT and its key IN-list stay under the parameter limit
    max_parameters = _PARAMETER_LIMIT - 1
    offer_chunk = max_parameters // _INSERT_PARAMETERS
    in_list_max = 2000  # ids plus the lock and due-time parameters
    like_specials = "%_["  # "[" opens a character class in LIKE patterns here
    max_payload_bytes = 2**31 - 1  # VARBINARY(MAX)
    delete_returning = True  # DELETE … OUTPUT deleted.id

    @staticmethod
    def lock_order(key: str) -> str | bytes:
        # a BIN2 collation orders NVARCHAR by UTF-16 code unit, where a character outside the
        # BMP (a surrogate pair, 0xD800-0xDBFF first) sorts before U+E000-U+FFFF
        return key.encode("utf-16-be")

    def __init__(self, table: sa.Table) -> None:
        super().__init__(table)
        self._claims: dict[tuple[tuple[str, ...], bool], sa.TextualSelect] = {}

    def _claim_statement(self, where: tuple[str, ...], by: bool) -> sa.TextualSelect:
        """The claim with the claim conditions ``where`` (naming its holder when ``by``),
        compiled from Core for the WHERE clause (its sub-selects carry the READPAST-free reads
        of settings and groups)."""
        if (where, by) not in self._claims:
            t = self.table
            dialect = mssql.dialect(paramstyle="named")  # ":b_kind", as text() reads it
            name = dialect.identifier_preparer.quote(t.name)
            extra = "".join(
                " AND " + str(c.compile(dialect=dialect, compile_kwargs={"literal_binds": False}))
                for c in self.due_conditions(where))
            holder = ", claimed_by = :actor" if by else ""
            binds: list[sa.BindParameter[Any]] = [
                sa.bindparam("limit", type_=sa.Integer),
                sa.bindparam("b_kind", type_=sa.Unicode),  # NVARCHAR, like the column
                sa.bindparam("b_now", type_=sa.BigInteger),
                sa.bindparam("lock", type_=sa.String),
                sa.bindparam("until", type_=sa.BigInteger)]
            if by:
                binds.append(sa.bindparam("actor", type_=sa.Unicode))
            self._claims[where, by] = sa.text(
                "WITH picked AS ("
                "SELECT TOP (:limit) id, pkey, payload, scheduled_at, scheduled_at_initially, "
                "created_at, deliveries, lock_uuid, priority, group_key, enqueued_by, "
                "claimed_by, trace_context "
                f"FROM {name} WITH (ROWLOCK, UPDLOCK, READPAST) "
                f"WHERE pkind = :b_kind AND scheduled_at <= :b_now{extra} "
                "ORDER BY priority DESC, scheduled_at, id) "
                "UPDATE picked SET lock_uuid = :lock, scheduled_at = :until, "
                f"deliveries = deliveries + 1{holder} "
                "OUTPUT inserted.id, inserted.pkey, inserted.payload, deleted.scheduled_at, "
                "inserted.scheduled_at_initially, inserted.created_at, inserted.deliveries, "
                "inserted.priority, inserted.group_key, inserted.enqueued_by, "
                "deleted.lock_uuid, deleted.claimed_by, inserted.trace_context"
            ).bindparams(*binds).columns(*self._claim_columns)
        return self._claims[where, by]

    @classmethod
    def server_time(cls) -> sa.Executable:
        # DATEDIFF_BIG (SQL Server 2016): milliseconds since 1970 overflow DATEDIFF's INT
        return sa.text("SELECT DATEDIFF_BIG(MILLISECOND, '19700101', SYSUTCDATETIME())")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> int | None:
        return native_error(exc)

    @classmethod
    def widen_error_text_op(cls, op: MigrationOps, table_name: str, online: bool) -> None:
        # the first schema declared NVARCHAR(2000): too short for 2000 characters outside the
        # BMP. Widening an NVARCHAR is a metadata change on SQL Server, the rows stay put.
        if online and _declared_length(op, table_name) >= 2 * ERROR_LENGTH:
            return
        op.alter_column(table_name, "last_error", type_=QueueText(ERROR_LENGTH),
                        existing_nullable=True)

    @classmethod
    def check_keys(cls, keys: Sequence[str]) -> None:
        for key in keys:
            if key.endswith(" "):
                raise InvalidArgumentError(
                    f"key {key!r} ends with a space: SQL Server ignores trailing spaces when "
                    "comparing text, so it would be the same message as the key without them")

    def select_existing(self) -> AnySelect:
        # FOR UPDATE does not exist here (SQLAlchemy renders nothing for it): lock by table hint
        return super().select_existing().with_hint(
            self.table, "WITH (UPDLOCK, HOLDLOCK)", dialect_name="mssql")

    def claim_plain(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                    lock: str, until_ms: int, where: Sequence[str],
                    actor: str | None = None) -> list[ClaimedRow]:
        return self.claim_returning(conn, pkind, now_ms, limit, lock, until_ms, where, actor,
                                    lambda r: ClaimedRow(r[0], r[1], bytes(r[2]), *r[3:]))

    def build_select_due(self, where: tuple[str, ...]) -> AnySelect:
        return self.lock_rows(super().build_select_due(where), self.table, skip=True)

    def lock_rows(self, stmt: AnySelect, table: sa.FromClause, *, skip: bool) -> AnySelect:
        # FOR UPDATE does not exist here (SQLAlchemy renders nothing for it): table hints lock
        hint = "WITH (UPDLOCK, ROWLOCK, READPAST)" if skip else "WITH (UPDLOCK, ROWLOCK)"
        return stmt.with_hint(table, hint, dialect_name="mssql")


def _declared_length(op: MigrationOps, table_name: str) -> int:
    """The declared length of ``last_error`` (0 for MAX or an unknown type)."""
    columns = sa.inspect(op.get_bind()).get_columns(table_name)
    kind = next(c["type"] for c in columns if c["name"] == "last_error")
    length: int | None = getattr(kind, "length", None)  # a string type's, where it has one
    return length or 0
