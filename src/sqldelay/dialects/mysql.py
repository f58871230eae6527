"""MySQL 8 and MariaDB >= 10.6 (dialect names "mysql" and "mariadb": both map here).

The portable select-then-update claim and lock-then-insert offer fit InnoDB as they are; what
InnoDB forces is only the column types and the batched update of changed rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.compiler import compiles

from ..schema import QueueKey, QueuePayload, QueueText
from .base import OfferRow, QueueDao


@compiles(QueueKey, "mysql")
@compiles(QueueKey, "mariadb")
def _key(type_, compiler, **kw):
    # keys compare byte for byte: the default collations fold case, and PAD SPACE ones make
    # "a" and "a " the same key
    collation = "utf8mb4_nopad_bin" if compiler.dialect.is_mariadb else "utf8mb4_0900_bin"
    return f"VARCHAR({type_.length}) CHARACTER SET utf8mb4 COLLATE {collation}"


@compiles(QueueText, "mysql")
@compiles(QueueText, "mariadb")
def _text(type_, compiler, **kw):
    return f"VARCHAR({type_.length}) CHARACTER SET utf8mb4"  # the table default may be latin1


@compiles(QueuePayload, "mysql")
@compiles(QueuePayload, "mariadb")
def _payload(type_, compiler, **kw):
    return "LONGBLOB"  # BLOB stops at 64 KiB


class MySQLQueueDao(QueueDao):
    name = "mysql"
    offer_chunk = 1000
    precompiled_insert = True
    duplicate_key_codes = frozenset({1062})
    transient_codes = frozenset({1213, 1205})  # deadlock, lock wait timeout
    missing_table_codes = frozenset({1146})

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> int | None:
        args = getattr(exc.orig, "args", ())
        return args[0] if args and isinstance(args[0], int) else None

    def update_changed(self, pkind: str, rows: Sequence[OfferRow],
                       now_ms: int) -> tuple[sa.Executable, None]:
        # An executemany of UPDATEs is one round trip per row with PyMySQL; the rows exist and
        # are locked, so a multi-row INSERT … ON DUPLICATE KEY UPDATE is the same update in one.
        stmt = mysql.insert(self.table).values(self.row_params(pkind, rows, now_ms))
        new = stmt.inserted
        return stmt.on_duplicate_key_update(
            payload=new.payload, scheduled_at=new.scheduled_at,
            scheduled_at_initially=new.scheduled_at_initially, created_at=new.created_at,
            lock_uuid=None, deliveries=0), None


class MariaDBQueueDao(MySQLQueueDao):
    name = "mariadb"
