"""Backends for the whole suite: embedded SQLite always, PostgreSQL and MariaDB when reachable.

Server URLs come from SQLDELAY_TEST_PG_URL / SQLDELAY_TEST_MYSQL_URL (defaults: the local
servers). An unreachable server fails the run when CI=true and is skipped, with the reason
shown, otherwise. Each test session uses its own table (named after its process id), and each
test its own queue name, so sessions running side by side on one server do not meet.
"""

from __future__ import annotations

import itertools
import os

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, FakeClock, create_schema, drop_schema

from .containers import CONTAINER_BACKENDS, container_url

PG_URL = os.environ.get("SQLDELAY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("SQLDELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"

# name -> URL; "mariadb" is the same server reached through SQLAlchemy's mariadb dialect name
SERVER_URLS = {
    "postgresql": PG_URL,
    "mysql": MYSQL_URL,
    "mariadb": MYSQL_URL.replace("mysql+", "mariadb+", 1),
}
BACKENDS = ["sqlite", *SERVER_URLS, *CONTAINER_BACKENDS]  # containers: see containers.py
# SQLDELAY_TEST_BACKENDS=sqlite,postgresql narrows a run (tox runs one backend per env)
if os.environ.get("SQLDELAY_TEST_BACKENDS"):
    BACKENDS = [b for b in BACKENDS if b in os.environ["SQLDELAY_TEST_BACKENDS"].split(",")]

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def _reachable(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except Exception as exc:  # any failure to connect is the reason to report
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        engine.dispose()


@pytest.fixture(scope="session", params=BACKENDS)
def backend_url(request, tmp_path_factory) -> str:
    """The URL of one backend; the suite runs once per backend."""
    name = request.param
    if name == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'queue.db'}"
    if name in CONTAINER_BACKENDS:
        return container_url(name, request)  # skips, saying why, where Docker is missing
    url = SERVER_URLS[name]
    problem = _reachable(url)
    if problem:
        message = f"{name} server at {url} is unreachable ({problem})"
        if IN_CI:
            pytest.fail(f"{message}; CI=true requires every server backend", pytrace=False)
        pytest.skip(message)
    return url


@pytest.fixture(scope="session")
def engine(backend_url):
    engine = sa.create_engine(backend_url, pool_size=20, max_overflow=20) \
        if not backend_url.startswith("sqlite") else sa.create_engine(backend_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def table_name(engine):
    """One queue table per test session and backend, dropped at the end."""
    name = unique_name("sqdt")
    create_schema(engine, table_name=name)
    yield name
    drop_schema(engine, table_name=name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(engine, table_name, clock):
    """Build queues on the session table with the fake clock; each call a fresh queue name."""

    def make(name: str | None = None, **kwargs) -> DelayedQueue:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("table_name", table_name)
        return DelayedQueue(engine, name or unique_name("q"), **kwargs)

    return make


@pytest.fixture
def queue(make_queue) -> DelayedQueue:
    return make_queue()
