"""The registry of QueueDao classes, keyed on SQLAlchemy's dialect name."""

from __future__ import annotations

import sqlalchemy as sa

from ..errors import UnsupportedDialectError
from .base import ClaimedRow, ErrorKind, OfferRow, QueueDao
from .mysql import MariaDBQueueDao, MySQLQueueDao
from .postgresql import PostgresQueueDao
from .sqlite import SQLiteQueueDao

REGISTRY: dict[str, type[QueueDao]] = {
    "postgresql": PostgresQueueDao,
    "mysql": MySQLQueueDao,
    "mariadb": MariaDBQueueDao,
    "sqlite": SQLiteQueueDao,
}


def dao_class_for(dialect: sa.Dialect) -> type[QueueDao]:
    try:
        return REGISTRY[dialect.name]
    except KeyError:
        raise UnsupportedDialectError(
            f"sqldelay does not support the {dialect.name!r} dialect; supported: "
            + ", ".join(sorted(REGISTRY))
        ) from None


__all__ = ["REGISTRY", "ClaimedRow", "ErrorKind", "OfferRow", "QueueDao", "dao_class_for"]
