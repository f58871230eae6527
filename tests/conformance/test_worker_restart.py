"""A database restart in the middle of a run loses nothing: the worker backs off, reconnects
and carries on.

The shared test servers must never be restarted, so each test starts a private PostgreSQL
(initdb + pg_ctl, as the ``postgres`` OS user when run as root) or MariaDB
(mariadb-install-db + mariadbd) in a temporary directory on a free port, and restarts that.
"""

from __future__ import annotations

import collections
import os
import pathlib
import tempfile
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import Message, WorkerListener, create_schema
from tools import servers

from ..conftest import DATABASES, FRONTS, Target
from ..fronts import AsyncFront, Front

IN_CI = os.environ.get("CI", "").lower() == "true"


def _missing(what: str):
    if IN_CI:
        pytest.fail(f"{what}; CI=true requires the restart tests", pytrace=False)
    pytest.skip(what)


class PrivatePostgres(servers.PrivatePostgres):
    def __init__(self) -> None:
        try:
            super().__init__()
        except servers.ServerMissing as exc:
            _missing(str(exc))


class PrivateMariaDB(servers.PrivateMariaDB):
    def __init__(self) -> None:
        try:
            super().__init__()
        except servers.ServerMissing as exc:
            _missing(str(exc))


class OutageSeen(WorkerListener):
    def __init__(self) -> None:
        self.event = threading.Event()

    def crashed(self, error, retrying):
        if retrying:
            self.event.set()


# (database, private server, async driver): the database as SQLDELAY_TEST_BACKENDS names
# it (the MariaDB server answers to both of its names there), the driver None for the
# blocking front end, which SQLDELAY_TEST_FRONTS selects as "sync"
RESTARTS = [("postgresql", PrivatePostgres, None), ("postgresql", PrivatePostgres, "asyncpg"),
            ("mariadb", PrivateMariaDB, None), ("mariadb", PrivateMariaDB, "asyncmy")]


def _selected(database: str, driver: str | None) -> bool:
    names = {"mariadb", "mysql"} if database == "mariadb" else {database}
    return bool(names & set(DATABASES)) and ("sync" if driver is None else "async") in FRONTS


def started(server_class, driver):
    """A private server of ``server_class`` with the schema made, a blocking engine on it and
    the front end of ``driver`` (None: the blocking one)."""
    server = server_class()
    engine = sa.create_engine(server.url)
    create_schema(engine)
    front = Front(engine) if driver is None else AsyncFront(Target("", driver).async_url(
        server.url), poolclass=sa.pool.NullPool)
    return server, engine, front


@pytest.mark.parametrize(("server_class", "driver"), [
    (server, driver) for database, server, driver in RESTARTS if _selected(database, driver)
], ids=[database if driver is None else f"{database}-{driver}"
        for database, _, driver in RESTARTS if _selected(database, driver)])
def test_a_database_restart_during_a_run_loses_nothing(server_class, driver):
    server, engine, front = started(server_class, driver)
    try:
        q = front.queue("restart", acquire_timeout=timedelta(seconds=3))
        keys = [f"r{i}" for i in range(3000)]
        q.offer_many([Message(k, i) for i, k in enumerate(keys)])
        handled: collections.Counter[str] = collections.Counter()
        lock, a_third = threading.Lock(), threading.Event()

        def handler(envelope):
            with lock:
                handled[envelope.key] += 1
                if len(handled) >= len(keys) // 3:
                    a_third.set()
            time.sleep(0.001)  # a little work, so the restart lands mid-run

        outage = OutageSeen()
        worker = front.worker(q, handler, concurrency=4, batch_size=50,
                        idle_poll=timedelta(milliseconds=200), listeners=[outage])
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            assert a_third.wait(60)
            server.stop()
            assert outage.event.wait(60), "the worker never noticed the database was gone"
            server.start()

            def finished() -> bool:
                with lock:
                    if set(handled) != set(keys):
                        return False
                stats = q.stats()
                return (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)

            deadline = time.monotonic() + 90
            while not finished():
                assert thread.is_alive(), "the worker died"
                assert time.monotonic() < deadline, \
                    f"{len(set(keys) - set(handled))} messages not handled after the restart"
                time.sleep(0.05)
        finally:
            worker.stop()
            thread.join(30)
        assert not thread.is_alive()
    finally:
        front.close()
        engine.dispose()
        server.destroy()


@pytest.mark.skipif(not _selected("mariadb", None), reason="MariaDB is not selected")
def test_a_private_mariadb_leaves_other_servers_temporary_tables_alone():
    # A starting mariadbd deletes the #sql* files in its tmpdir. The private servers run
    # beside the shared one and beside each other (an installation fails when another
    # server's start deletes its temporary table), so each keeps a tmpdir of its own.
    fd, other = tempfile.mkstemp(prefix="#sql-another-server-", suffix=".MAI")
    os.close(fd)
    try:
        server = PrivateMariaDB()
        try:
            server.stop()
            server.start()
            assert os.path.exists(other)
        finally:
            server.destroy()
    finally:
        pathlib.Path(other).unlink(missing_ok=True)
