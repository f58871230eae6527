"""What every module of the dialect layer shares, and what the layers above take from it:
the kinds of database errors, the key that marks a connection in autocommit, and the split of
long id lists into the IN-lists a database takes."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    import sqlalchemy as sa

T = TypeVar("T")

# a SELECT of any columns: the statements the dialect layer builds, whose rows the driver types
# (a string, so that nothing of SQLAlchemy's generics is evaluated at import)
AnySelect: TypeAlias = "sa.Select[*tuple[Any, ...]]"
# a read or an update of rows named by id (``QueueDao.by_id``), which a dialect returns as it
# came, only changed
ById = TypeVar("ById", AnySelect, "sa.Update")


class ErrorKind(enum.Enum):
    DUPLICATE_KEY = "duplicate_key"
    TRANSIENT = "transient"  # deadlock, serialization failure, lock wait timeout, busy
    # the server is shutting down, starting up or gone: a worker waits for it to come back
    UNAVAILABLE = "unavailable"
    MISSING_TABLE = "missing_table"
    OTHER = "other"


# the key of a Connection's info that the engine layer sets while each statement on that
# connection commits alone (the driver switched to autocommit, ``QueueDao.in_autocommit``)
AUTOCOMMIT = "sqldelay.autocommit"
# the key of a Connection's info that the engine layer sets while an operation runs in a
# transaction of sqldelay's own, which it runs again after a deadlock or a lock wait timeout;
# absent in a caller's transaction (``connection=``), where an error is the caller's to retry
RETRIED = "sqldelay.retried"


def chunked(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive parts of at most ``size`` (a dialect's ``in_list_max``)."""
    return [items[i:i + size] for i in range(0, len(items), size)]
