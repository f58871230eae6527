# Generated from notifier_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""Wake-ups across processes: a worker listens on its queue table's channel and claims as soon
as an offer notifies it, instead of at its next poll.

One listener for both front ends: the blocking one is generated from this module, as the
other fronts are (tools/async_to_sync.py). The dialect says whether its database notifies, on
which channel and with which statements (``QueueDao.notifications``, ``channel``,
``listen_statement``; offers send through ``wake_listeners``); this module holds the
connection that waits, through the driver's own API, which SQLAlchemy does not wrap:
psycopg's generator of notifications, or asyncpg's callbacks (a driver for the event loop
only). ``hear`` listens on any channel of the table: the task handles waiting for results
hear the ends of tasks through it (``tasks_base``, ``QueueDao.settled_channel``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import sqlalchemy as sa

from .concurrency import Connection, Engine, Event, wait_event
from .dialects import QueueDao
from .errors import UnsupportedDialectError

# how long one wait for notifications lasts before ``stop`` is looked at again (seconds)
_PATIENCE = 0.5


def listen(engine: Engine, dao: QueueDao, pkinds: Collection[str],
           on_wake: Callable[[], None], stop: Event) -> None:
    """Wait until ``stop`` is set, calling ``on_wake`` once listening has begun (for what was
    offered before) and then at each notification of one of ``pkinds`` in ``dao``'s table.
    Raises when the connection is lost, and UnsupportedDialectError where the database or its
    driver has no notifications."""
    def heard(note: str | None) -> None:
        if note is None or note in pkinds:
            on_wake()

    hear(engine, dao, dao.channel if dao.notifications else "", heard, stop)


def hear(engine: Engine, dao: QueueDao, channel: str,
         on_note: Callable[[str | None], None], stop: Event) -> None:
    """Wait until ``stop`` is set, calling ``on_note(None)`` once listening on ``channel``
    has begun and ``on_note(text)`` at each notification on it (``listen``'s wake-ups, or
    the ends of tasks: ``QueueDao.settled_channel``). Raises as ``listen`` does."""
    if not dao.notifications:
        raise UnsupportedDialectError(f"{dao.name} has no notifications")
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        raw = conn.connection
        driver = raw.driver_connection
        try:
            if hasattr(driver, "add_listener"):  # asyncpg
                _by_callback(driver, channel, on_note, stop)
            elif hasattr(driver, "notifies"):  # psycopg 3
                conn.exec_driver_sql(dao.listen_statement(channel))
                _by_generator(conn, driver, on_note, stop)
            else:
                raise UnsupportedDialectError(
                    f"wake-ups on {dao.name} need psycopg (postgresql+psycopg://, "
                    "postgresql+psycopg_async://) or, under asyncio, asyncpg "
                    "(postgresql+asyncpg://)")
        finally:
            if not conn.invalidated:
                conn.invalidate()  # never hand a listening connection back to the pool


def _by_generator(conn: Connection, driver: Any,
                  on_note: Callable[[str | None], None], stop: Event) -> None:
    """psycopg: its generator of notifications, read for ``_PATIENCE`` at a time."""
    on_note(None)
    while not stop.is_set():
        # a burst of notifications is one wake-up: on_note only sets events
        try:
            for note in driver.notifies(timeout=_PATIENCE):
                on_note(note.payload)
                if stop.is_set():
                    break
        except conn.dialect.loaded_dbapi.Error as exc:
            # the driver's own error, outside SQLAlchemy: say it as SQLAlchemy would
            raise sa.exc.OperationalError("LISTEN", None, exc) from exc


def _by_callback(driver: Any, channel: str, on_note: Callable[[str | None], None],
                 stop: Event) -> None:
    """asyncpg: a callback per notification, and one when the connection is lost."""
    lost = Event()

    def notified(connection: Any, pid: int, channel: str, payload: str) -> None:
        on_note(payload)

    driver.add_termination_listener(lambda connection: lost.set())
    driver.add_listener(channel, notified)
    on_note(None)
    while not wait_event(stop, _PATIENCE):
        if lost.is_set():
            raise sa.exc.OperationalError(
                "LISTEN", None, ConnectionError("the listening connection was lost"))
