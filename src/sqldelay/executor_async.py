"""The engine layer: runs DAO operations on a connection, owns transactions and retries.

An operation is a plain function of a SQLAlchemy ``Connection`` (see ``concurrency_async``):
the same function serves both front ends. Given the caller's ``connection``, it joins the
caller's transaction: it neither commits nor retries (a deadlock has already rolled the
caller's work back; only the caller can redo it), and an operation that writes takes the locks
its reads need first, as it would in a transaction of its own (``QueueDao.join_write``).
Otherwise each operation gets its own transaction, retried with bounded exponential backoff
and jitter when the database reports a transient error. It also waits out a database it has
reached before and cannot reach now (a failover, a restart) for up to its patience
(``outages``: 10 seconds unless a ``patience`` block, the queue or the process says
otherwise); a database never reached fails at once: a wrong address is not an outage to wait
out. A caller's own transaction is never waited out: its error is the caller's to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import sqlalchemy as sa
from tenacity import RetryCallState, retry_if_exception, wait_random_exponential

from .concurrency_async import (
    AsyncConnection,
    AsyncEngine,
    AsyncRetrying,
    check_connection,
    run_op,
)
from .dialects import ErrorKind, QueueDao
from .dialects.common import RETRIED
from .errors import SchemaMissingError
from .outages import current_patience
from .outages import patience as patience  # its former home: ``from sqldelay.executor import``
from .retry_counts import retried

T = TypeVar("T")
log = logging.getLogger("sqldelay")

class AsyncExecutor:
    def __init__(self, engine: AsyncEngine, dao: QueueDao, *, attempts: int = 10,
                 max_backoff: float = 1.0, patience: float | None = None) -> None:
        self.engine = engine
        self.dao = dao
        self.attempts = attempts
        self.patience = patience  # seconds; None: the default (``outages``)
        self._reached = False  # an operation has succeeded: the database exists
        # the attempts after a first one that failed (the first runs outside tenacity: it is
        # the common case, and tenacity costs tens of microseconds a call)
        self._retrying = AsyncRetrying(
            retry=retry_if_exception(self._is_retryable),
            wait=wait_random_exponential(multiplier=0.005, max=max_backoff),
            stop=self._stop,
            before_sleep=lambda state: self._retrying_after(
                state.outcome.exception() if state.outcome else None),
            reraise=True,
        )

    async def run(self, op: Callable[[sa.Connection], T], *, write: bool,
                  connection: AsyncConnection | None = None, one_statement: bool = False,
                  read_committed: bool = False) -> T:
        """Run ``op`` in a transaction of its own, or in ``connection``'s. ``one_statement``
        says ``op`` sends a single statement, which is atomic alone: where the dialect gains
        by it, it then runs in autocommit, sparing the BEGIN and COMMIT round trips.
        ``read_committed`` says the locking reads of ``op`` may pass the end of what they take
        (``QueueDao.begin_read_committed``); the caller's own transaction keeps its level."""
        try:
            if connection is not None:
                check_connection(connection)
                return await run_op(connection, partial(self._joined, op) if write else op)
            if one_statement and self.dao.autocommit_one_statement:
                attempt = partial(self._alone, op)
            else:
                attempt = partial(self._once, op, write, read_committed)
            try:
                result = await attempt()
            except (sa.exc.DBAPIError, OSError) as exc:
                if not self._is_retryable(exc):
                    raise
                self._retrying_after(exc)
            else:
                self._reached = True
                return result
            result = await self._retrying.copy()(attempt)  # copy: per-call state
            self._reached = True
            return result
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

    def _retrying_after(self, exc: BaseException | None) -> None:
        log.debug("retrying after %s", exc)
        retried(self.dao, exc)  # counted only while someone counts (``retry_counts``)

    def _joined(self, op: Callable[[sa.Connection], T], conn: sa.Connection) -> T:
        self.dao.join_write(conn)  # the caller's transaction: SQLite's write lock first
        return op(conn)

    async def _once(self, op: Callable[[sa.Connection], T], write: bool,
                    read_committed: bool) -> T:
        async with self.engine.connect() as conn:
            return await run_op(conn, partial(self._transaction, op, write, read_committed))

    def _transaction(self, op: Callable[[sa.Connection], T], write: bool,
                     read_committed: bool, conn: sa.Connection) -> T:
        if read_committed:
            self.dao.begin_read_committed(conn)
        if write:
            self.dao.begin_write(conn)
        result = _retried(op, conn)
        conn.commit()
        return result

    async def _alone(self, op: Callable[[sa.Connection], T]) -> T:
        async with self.engine.connect() as conn:
            return await run_op(conn, partial(self.dao.in_autocommit, partial(_retried, op)))

    def _is_transient(self, exc: BaseException) -> bool:
        return (isinstance(exc, sa.exc.DBAPIError)
                and self.dao.classify(exc) is ErrorKind.TRANSIENT)

    def _is_outage(self, exc: BaseException | None) -> bool:
        """The connection was lost, or the database cannot be reached: the server is gone,
        restarting, or (``target_session_attrs=read-write``) no node is primary yet. A
        driver's OperationalError that carries no code of the server's never reached one;
        asyncpg lets the socket's own error through when it connects."""
        if isinstance(exc, OSError):
            return True
        return isinstance(exc, sa.exc.DBAPIError) and (
            exc.connection_invalidated
            or self.dao.classify(exc) is ErrorKind.UNAVAILABLE
            or (isinstance(exc, sa.exc.OperationalError) and self.dao.error_code(exc) is None))

    def _is_retryable(self, exc: BaseException) -> bool:
        return self._is_transient(exc) or (self._reached and self._is_outage(exc)
                                           and current_patience(self.patience) > 0)

    def _stop(self, state: RetryCallState) -> bool:
        """Transient errors get ``attempts`` in all; an outage ``patience`` seconds."""
        # asked after an attempt, whose outcome and time tenacity has then set
        assert state.outcome is not None and state.seconds_since_start is not None
        if self._is_outage(state.outcome.exception()):
            return state.seconds_since_start >= current_patience(self.patience)
        return state.attempt_number >= self.attempts - 1


def _retried(op: Callable[[sa.Connection], T], conn: sa.Connection) -> T:
    """Run ``op`` on ``conn`` in a transaction that this executor runs again on a transient
    error, telling the dialect so (``RETRIED``): it may then fail a lock wait at once rather
    than wait where the wait could close a circle with a caller's transaction."""
    info = conn.info
    info[RETRIED] = True
    try:
        return op(conn)
    finally:
        del info[RETRIED]
