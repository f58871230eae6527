"""What every module of the dialect layer shares, and what the layers above take from it:
the kinds of database errors, the key that marks a connection in autocommit, and the split of
long id lists into the IN-lists a database takes."""

from __future__ import annotations

import enum
from collections.abc import Sequence


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


def chunked(items: Sequence, size: int) -> list[Sequence]:
    """``items`` in consecutive parts of at most ``size`` (a dialect's ``in_list_max``)."""
    return [items[i:i + size] for i in range(0, len(items), size)]
