"""Backends for the whole suite: embedded SQLite always, PostgreSQL and MariaDB when reachable,
each through the blocking front end and, for the tests that use a queue, the asyncio one.

Server URLs come from SQLDELAY_TEST_PG_URL / SQLDELAY_TEST_MYSQL_URL (defaults: the local
servers). An unreachable server fails the run when CI=true and is skipped, with the reason
shown, otherwise. Each test session uses its own table per target (named after its process
id), and each test its own queue name, so sessions running side by side on one server do not
meet.

A target is a database reached through one front end and driver: ``postgresql`` is the
blocking API over psycopg, ``mysql`` the MariaDB server over PyMySQL (``mysql+pymysql``),
``mariadb`` the same server through SQLAlchemy's mariadb dialect name over mysqlclient
(``mariadb+mysqldb``), ``postgresql-asyncpg`` and ``postgresql-psycopg_async`` the asyncio
API over those drivers, and so on (``TARGETS``). Tests that take the ``queue``,
``make_queue``, ``front`` or ``async_url`` fixtures run on every target; the others
(statements, migrations, errors of the database itself) once per database, through the
blocking targets. SQLDELAY_TEST_BACKENDS
narrows the run to the databases named (``sqlite,postgresql``), SQLDELAY_TEST_FRONTS to one
front end (``sync`` or ``async``).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from sqldelay import FakeClock, create_schema, drop_schema

from .containers import CONTAINER_BACKENDS, container_url
from .fronts import AsyncFront, Front

PG_URL = os.environ.get("SQLDELAY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("SQLDELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"

# name -> URL; "mariadb" is the same server reached through SQLAlchemy's mariadb dialect name
# and the C driver mysqlclient ("mysqldb"), so both supported drivers run every test
SERVER_URLS = {
    "postgresql": PG_URL,
    "mysql": MYSQL_URL,
    "mariadb": sa.make_url(MYSQL_URL).set(drivername="mariadb+mysqldb")
    .render_as_string(hide_password=False),
}


@dataclass(frozen=True)
class Target:
    """One way of reaching one database: ``database`` names the backend (its blocking URL),
    ``driver`` the async driver (None: the blocking front end)."""

    database: str
    driver: str | None = None

    @property
    def name(self) -> str:
        return self.database if self.driver is None else f"{self.database}-{self.driver}"

    @property
    def is_async(self) -> bool:
        return self.driver is not None

    def async_url(self, url: str) -> str:
        """The URL of the same database through this target's async driver."""
        parsed = sa.make_url(url)
        return parsed.set(drivername=f"{parsed.get_backend_name()}+{self.driver}") \
            .render_as_string(hide_password=False)


DATABASES = ["sqlite", *SERVER_URLS, *CONTAINER_BACKENDS]  # containers: see containers.py
ASYNC_DRIVERS = {"sqlite": ["aiosqlite"], "postgresql": ["asyncpg", "psycopg_async"],
                 "mysql": ["asyncmy"]}
if os.environ.get("SQLDELAY_TEST_BACKENDS"):
    DATABASES = [b for b in DATABASES if b in os.environ["SQLDELAY_TEST_BACKENDS"].split(",")]
FRONTS = os.environ.get("SQLDELAY_TEST_FRONTS", "sync,async").split(",")
SYNC_TARGETS = [Target(d) for d in DATABASES] if "sync" in FRONTS else []
TARGETS = SYNC_TARGETS + ([Target(d, drv) for d in DATABASES for drv in ASYNC_DRIVERS.get(d, ())]
                          if "async" in FRONTS else [])
_FRONT_FIXTURES = {"queue", "make_queue", "front", "async_url"}

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def pytest_generate_tests(metafunc):
    """Every target for tests of the front ends, one blocking target per database for the
    rest (the async targets would run them again on the same database)."""
    if "target" in metafunc.fixturenames:
        targets = TARGETS if _FRONT_FIXTURES & set(metafunc.fixturenames) else SYNC_TARGETS
        metafunc.parametrize("target", targets, ids=[t.name for t in targets], indirect=True,
                             scope="session")


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


@pytest.fixture(scope="session")
def target(request) -> Target:
    return request.param


@pytest.fixture(scope="session")
def backend_url(target, request, tmp_path_factory) -> str:
    """The blocking URL of the target's database."""
    name = target.database
    if name == "sqlite":
        return f"sqlite:///{tmp_path_factory.getbasetemp() / f'queue-{os.getpid()}.db'}"
    if name in CONTAINER_BACKENDS:
        return container_url(name, request)  # skips, saying why, without Docker
    url = SERVER_URLS[name]
    problem = _reachable(url)
    if problem:
        message = f"{name} server at {url} is unreachable ({problem})"
        if IN_CI:
            pytest.fail(f"{message}; CI=true requires every server backend", pytrace=False)
        pytest.skip(message)
    return url


def _pool(url: str) -> dict:
    return {} if url.startswith("sqlite") else {"pool_size": 20, "max_overflow": 20}


@pytest.fixture(scope="session")
def engine(backend_url):
    """A blocking engine on the target's database, for setting up and checking."""
    engine = sa.create_engine(backend_url, **_pool(backend_url))
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def table_name(engine, target):
    """One queue table per test session and target (with the history table, for the queues
    that keep history), dropped at the end."""
    name = unique_name(f"sqdt_{target.name.replace('-', '_')[:10]}")
    create_schema(engine, table_name=name, history=True)
    yield name
    drop_schema(engine, table_name=name)


@pytest.fixture(scope="session")
def front(target, backend_url, engine):
    """What the tests build queues, workers, dead letters and cron services with."""
    if not target.is_async:
        yield Front(engine)
        return
    made = AsyncFront(target.async_url(backend_url), **_pool(backend_url))
    yield made
    made.close()


@pytest.fixture(scope="session")
def async_url(target, backend_url) -> str:
    """The URL of the target's database through its async driver (blocking targets skip)."""
    if not target.is_async:
        pytest.skip("a test of the asyncio front end alone")
    return target.async_url(backend_url)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(front, table_name, clock):
    """Build queues on the session table with the fake clock; each call a fresh queue name."""

    def make(name: str | None = None, **kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("table_name", table_name)
        return front.queue(name or unique_name("q"), **kwargs)

    return make


@pytest.fixture
def queue(make_queue):
    return make_queue()
