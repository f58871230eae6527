"""Fixtures of the PySpark tests: one local SparkSession, and one queue table per backend.

Backends: a SQLite file, PostgreSQL and MariaDB (through ``mysql+pymysql``). A server that
cannot be reached fails the run when CI=true and is skipped, with the reason, otherwise.
The table is named after this process so sessions sharing a server do not meet; it is
dropped at the end. PySpark itself missing is a skip with its reason (it is an optional extra),
except in CI, where the extra is installed and its absence is a failure.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import sqlalchemy as sa

IN_CI = os.environ.get("CI", "").lower() == "true"

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    if IN_CI:
        raise
    pytest.skip(f"the [spark] extra is not installed ({exc})", allow_module_level=True)

from sqldelay import create_schema, drop_schema  # noqa: E402

PG_URL = os.environ.get("SQLDELAY_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("SQLDELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
SPARK_BACKENDS = ["sqlite", "postgresql", "mariadb"]
_SERVER_URLS = {"postgresql": PG_URL, "mariadb": MYSQL_URL}
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def _unreachable(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except Exception as exc:  # the reason to report, whatever it is
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        engine.dispose()


class _Backends:
    """Backends opened on first use, each with its own queue table, all dropped at the end."""

    def __init__(self, tmp_path_factory) -> None:
        self._tmp = tmp_path_factory
        self._open: dict[str, tuple[str, sa.Engine, str]] = {}

    def get(self, name: str) -> tuple[str, sa.Engine, str]:
        """(URL, engine, table) of backend ``name``; skips (or fails in CI) if unreachable."""
        if name not in self._open:
            if name == "sqlite":
                url = f"sqlite:///{self._tmp.mktemp('spark_sqlite') / 'queue.db'}"
            else:
                url = _SERVER_URLS[name]
                problem = _unreachable(url)
                if problem:
                    message = f"{name} server at {url} is unreachable ({problem})"
                    if IN_CI:
                        pytest.fail(f"{message}; CI=true requires every server backend",
                                    pytrace=False)
                    pytest.skip(message)
            engine = sa.create_engine(url)
            table = f"sq_spark_{os.getpid()}"
            create_schema(engine, table_name=table)
            self._open[name] = (url, engine, table)
        return self._open[name]

    def close(self) -> None:
        for _, engine, table in self._open.values():
            drop_schema(engine, table_name=table)
            engine.dispose()


@pytest.fixture(scope="session")
def spark_backends(tmp_path_factory):
    backends = _Backends(tmp_path_factory)
    yield backends
    backends.close()


@pytest.fixture(scope="session", params=SPARK_BACKENDS)
def spark_backend(request, spark_backends) -> tuple[str, sa.Engine, str]:
    """(URL, engine, table) of one backend; the tests using it run once per backend."""
    return spark_backends.get(request.param)


@pytest.fixture(scope="session")
def spark_url(spark_backend) -> str:
    """URL only: Spark tasks build their own engines from it."""
    return spark_backend[0]


@pytest.fixture(scope="session")
def spark_engine(spark_backend):
    return spark_backend[1]


@pytest.fixture(scope="session")
def spark_table(spark_backend) -> str:
    return spark_backend[2]


class _Sessions:
    """Keeps one SparkSession; a test that needs another master (local[2,3] to retry
    failed tasks) gets it by stopping the current one, and the next test restores it."""

    def __init__(self) -> None:
        self.session = None
        self.master: str | None = None

    def get(self, master: str):
        from pyspark.sql import SparkSession

        if self.session is not None and self.master == master:
            return self.session
        self.stop()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        self.session = (
            SparkSession.builder.master(master).appName("sqldelay-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "1g")
            .getOrCreate())
        self.session.sparkContext.setLogLevel("ERROR")
        self.master = master
        from sqldelay.spark import register

        register(self.session)
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None
            self.master = None


@pytest.fixture(scope="session")
def spark_sessions():
    sessions = _Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions):
    """A local[2] SparkSession with the sqldelay format registered."""
    return spark_sessions.get("local[2]")


@pytest.fixture
def spark_retrying(spark_sessions):
    """local[2,3]: two threads, and a failed task is tried up to three times."""
    return spark_sessions.get("local[2,3]")


@pytest.fixture
def queue_name() -> str:
    return unique("sq")


def pytest_configure(config):
    # pyspark 4.x warns on every Arrow UDF that it is not yet tested with pandas 3; our code
    # does not use pandas, and the tests pass on both
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")
