"""The registry of QueueDao classes, keyed on SQLAlchemy's dialect name."""

from __future__ import annotations

import sqlalchemy as sa

from ..errors import UnsupportedDialectError
from ..schema import register_databases
from .base import ClaimedRow, OfferRow, QueueDao
from .common import ErrorKind
from .mssql import MSSQLQueueDao
from .mysql import MariaDBQueueDao, MySQLQueueDao
from .oracle import OracleQueueDao
from .postgresql import PostgresQueueDao
from .sqlite import SQLiteQueueDao

REGISTRY: dict[str, type[QueueDao]] = {
    "postgresql": PostgresQueueDao,
    "mysql": MySQLQueueDao,
    "mariadb": MariaDBQueueDao,
    "sqlite": SQLiteQueueDao,
    "mssql": MSSQLQueueDao,
    "oracle": OracleQueueDao,
}
register_databases(REGISTRY)  # creating and migrating the tables asks the classes too


def dao_class_for(dialect: sa.Dialect) -> type[QueueDao]:
    try:
        return REGISTRY[dialect.name]
    except KeyError:
        raise UnsupportedDialectError(
            f"sqldelay does not support the {dialect.name!r} dialect; supported: "
            + ", ".join(sorted(REGISTRY))
        ) from None


__all__ = ["REGISTRY", "ClaimedRow", "ErrorKind", "OfferRow", "QueueDao", "dao_class_for"]
