# Generated from executor_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""The engine layer: runs DAO operations on a connection, owns transactions and retries.

An operation is a plain function of a SQLAlchemy ``Connection`` (see ``concurrency``):
the same function serves both front ends. Given the caller's ``connection``, it joins the
caller's transaction: it neither commits nor retries (a deadlock has already rolled the
caller's work back; only the caller can redo it), and an operation that writes takes the locks
its reads need first, as it would in a transaction of its own (``QueueDao.join_write``).
Otherwise each operation gets its own transaction, retried with bounded exponential backoff
and jitter when the database reports a transient error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import sqlalchemy as sa
from tenacity import retry_if_exception, stop_after_attempt, wait_random_exponential

from .concurrency import Connection, Engine, Retrying, check_connection, run_op
from .dialects import ErrorKind, QueueDao
from .errors import SchemaMissingError

T = TypeVar("T")
log = logging.getLogger("sqldelay")


class Executor:
    def __init__(self, engine: Engine, dao: QueueDao, *, attempts: int = 10,
                 max_backoff: float = 1.0) -> None:
        self.engine = engine
        self.dao = dao
        # the attempts after a first one that failed transiently (the first runs outside
        # tenacity: it is the common case, and tenacity costs tens of microseconds a call)
        self._retrying = Retrying(
            retry=retry_if_exception(self._is_transient),
            wait=wait_random_exponential(multiplier=0.005, max=max_backoff),
            stop=stop_after_attempt(attempts - 1),
            before_sleep=lambda state: log.debug("retrying after %s", state.outcome.exception()),
            reraise=True,
        )

    def run(self, op: Callable[[sa.Connection], T], *, write: bool,
            connection: Connection | None = None, one_statement: bool = False,
            read_committed: bool = False) -> T:
        """Run ``op`` in a transaction of its own, or in ``connection``'s. ``one_statement``
        says ``op`` sends a single statement, which is atomic alone: where the dialect gains
        by it, it then runs in autocommit, sparing the BEGIN and COMMIT round trips.
        ``read_committed`` says the locking reads of ``op`` may pass the end of what they take
        (``QueueDao.begin_read_committed``); the caller's own transaction keeps its level."""
        try:
            if connection is not None:
                check_connection(connection)
                return run_op(connection, partial(self._joined, op) if write else op)
            if one_statement and self.dao.autocommit_one_statement:
                attempt = partial(self._alone, op)
            else:
                attempt = partial(self._once, op, write, read_committed)
            try:
                return attempt()
            except sa.exc.DBAPIError as exc:
                if not self._is_transient(exc):
                    raise
                log.debug("retrying after %s", exc)
            return self._retrying.copy()(attempt)  # copy: per-call state
        except sa.exc.DBAPIError as exc:
            if self.dao.classify(exc) is ErrorKind.MISSING_TABLE:
                name = self.dao.table.name
                raise SchemaMissingError(
                    f"a table of queue table {name!r} does not exist: run "
                    f"sqldelay.create_schema(engine, table_name={name!r}) or the Alembic "
                    "migration (alembic upgrade head); a queue that keeps history needs "
                    "history=True there (-x history=true)"
                ) from exc
            raise

    def _joined(self, op: Callable[[sa.Connection], T], conn: sa.Connection) -> T:
        self.dao.join_write(conn)  # the caller's transaction: SQLite's write lock first
        return op(conn)

    def _once(self, op: Callable[[sa.Connection], T], write: bool,
              read_committed: bool) -> T:
        with self.engine.connect() as conn:
            return run_op(conn, partial(self._transaction, op, write, read_committed))

    def _transaction(self, op: Callable[[sa.Connection], T], write: bool,
                     read_committed: bool, conn: sa.Connection) -> T:
        if read_committed:
            self.dao.begin_read_committed(conn)
        if write:
            self.dao.begin_write(conn)
        result = op(conn)
        conn.commit()
        return result

    def _alone(self, op: Callable[[sa.Connection], T]) -> T:
        with self.engine.connect() as conn:
            return run_op(conn, partial(self.dao.in_autocommit, op))

    def _is_transient(self, exc: BaseException) -> bool:
        return (isinstance(exc, sa.exc.DBAPIError)
                and self.dao.classify(exc) is ErrorKind.TRANSIENT)
