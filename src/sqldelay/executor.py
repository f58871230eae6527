"""The engine layer: runs DAO operations on a connection, owns transactions and retries.

An operation given the caller's ``connection`` joins the caller's transaction: it neither
commits nor retries (a deadlock has already rolled the caller's work back; only the caller
can redo it). Otherwise each operation gets its own transaction, retried with bounded
exponential backoff and jitter when the database reports a transient error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from .dialects import ErrorKind, QueueDao
from .errors import SchemaMissingError

T = TypeVar("T")
log = logging.getLogger("sqldelay")


class Executor:
    def __init__(self, engine: sa.Engine, dao: QueueDao, *, attempts: int = 10,
                 max_backoff: float = 1.0) -> None:
        self.engine = engine
        self.dao = dao
        self._retrying = Retrying(
            retry=retry_if_exception(self._is_transient),
            wait=wait_random_exponential(multiplier=0.005, max=max_backoff),
            stop=stop_after_attempt(attempts),
            before_sleep=lambda state: log.debug("retrying after %s", state.outcome.exception()),
            reraise=True,
        )

    def run(self, op: Callable[[sa.Connection], T], *, write: bool,
            connection: sa.Connection | None = None) -> T:
        try:
            if connection is not None:
                return op(connection)
            return self._retrying.copy()(self._once, op, write)  # copy: per-call state
        except sa.exc.DBAPIError as exc:
            if self.dao.classify(exc) is ErrorKind.MISSING_TABLE:
                name = self.dao.table.name
                raise SchemaMissingError(
                    f"the queue table {name!r} does not exist: run "
                    f"sqldelay.create_schema(engine, table_name={name!r}) or the Alembic "
                    "migration (alembic upgrade head)"
                ) from exc
            raise

    def _once(self, op: Callable[[sa.Connection], T], write: bool) -> T:
        with self.engine.connect() as conn:
            if write:
                self.dao.begin_write(conn)
            result = op(conn)
            conn.commit()
            return result

    def _is_transient(self, exc: BaseException) -> bool:
        return (isinstance(exc, sa.exc.DBAPIError)
                and self.dao.classify(exc) is ErrorKind.TRANSIENT)
