"""Fixtures of the PySpark tests: one SparkSession at a time, and one queue table per backend.

Backends: a SQLite file, PostgreSQL and MariaDB (through ``mysql+pymysql``). A server that
cannot be reached fails the run when CI=true and is skipped, with the reason, otherwise.
The table is named after this process so sessions sharing a server do not meet; it is
dropped at the end. PySpark itself missing is a skip with its reason (it is an optional extra),
except in CI, where the extra is installed and its absence is a failure.

Sessions: ``local[2]`` (``local[2,3]`` for the retry tests), and for the tests marked
``spark_cluster`` also a Spark standalone cluster started from the installed PySpark (master
and two workers of one core each, see ``standalone.py``) whose executors run sqldelay from a
packed virtual environment. Those tests run once per session kind, on the server backends
only; the cluster runs come last, so the session switches to the cluster once. A cluster that
cannot start fails them when CI=true and skips them, with the reason, otherwise.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

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

from .standalone import (  # noqa: E402
    ClusterError,
    StandaloneCluster,
    await_executors,
    pack_job_environment,
)

PG_URL = os.environ.get("SQLDELAY_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("SQLDELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
SPARK_BACKENDS = ["sqlite", "postgresql", "mariadb"]
_SERVER_URLS = {"postgresql": PG_URL, "mariadb": MYSQL_URL}
SESSION_KINDS = ("local", "cluster")
CLUSTER_WORKERS = 2
_names = itertools.count()


def _unavailable(message: str, required: str) -> NoReturn:
    """Fail when CI=true, where ``required`` must be there; skip with the reason otherwise."""
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires {required}", pytrace=False)
    pytest.skip(message)


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
                    _unavailable(f"{name} server at {url} is unreachable ({problem})",
                                 "every server backend")
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
    """Keeps one SparkSession; a test that needs another (local[2,3] to retry failed tasks, or
    the cluster's) gets it by stopping the current one, and the next test restores its own."""

    def __init__(self) -> None:
        self.session = None
        self.master: str | None = None

    def get(self, master: str, conf: dict[str, str] | None = None):
        """The session on ``master`` with the settings ``conf`` besides the tests' own."""
        from pyspark.sql import SparkSession

        if self.session is not None and self.master == master:
            return self.session
        self.stop()
        # on the cluster too: the data source's planning and commit run beside the driver
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = (
            SparkSession.builder.master(master).appName("sqldelay-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "1g"))
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        self.session = builder.getOrCreate()
        self.session.sparkContext.setLogLevel("ERROR")
        self.master = master
        from sqldelay.spark import register

        register(self.session)
        return self.session

    def on_cluster(self, setup: ClusterSetup):
        """The session whose executors the cluster's workers run, once all of them registered
        (so the first job spreads over both rather than over whichever came up first)."""
        started = self.master != setup.cluster.master_url
        session = self.get(setup.cluster.master_url, setup.cluster.session_conf(setup.archive))
        if started:
            await_executors(session, CLUSTER_WORKERS)
        return session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None
            self.master = None


@dataclass
class ClusterSetup:
    """The running cluster and the packed environment its executors unpack (spark.archives)."""

    cluster: StandaloneCluster
    archive: Path


@pytest.fixture(scope="session")
def spark_sessions():
    sessions = _Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory, spark_sessions) -> Iterator[ClusterSetup]:
    """A standalone cluster of two one-core workers, and sqldelay packed for its executors;
    made once per test session, on first use. At the end, pass or fail, the session on it
    stops first (its executors end with it), then every daemon."""
    base = tmp_path_factory.mktemp("spark_cluster")
    cluster = StandaloneCluster(base / "cluster", workers=CLUSTER_WORKERS)
    problem = None
    try:
        archive = pack_job_environment(base / "job_env")
        cluster.start()
    except (ClusterError, ImportError) as exc:  # ImportError: venv-pack or build missing
        problem = str(exc)
    if problem is not None:  # reported outside the except: its traceback would say nothing
        _unavailable(f"the Spark standalone cluster did not start: {problem}",
                     "the cluster runs of the Spark tests")
    try:
        yield ClusterSetup(cluster, archive)
    finally:
        try:
            spark_sessions.stop()
        finally:
            cluster.stop()


@pytest.fixture(scope="session")
def spark_kind(request) -> str:
    """"local", or "cluster" in the second run of a test marked spark_cluster."""
    return getattr(request, "param", "local")


def _session(request, spark_sessions, kind: str, local_master: str):
    """The cluster's session, started on first use, or local mode's on ``local_master``."""
    if kind == "cluster":
        return spark_sessions.on_cluster(request.getfixturevalue("spark_cluster"))
    return spark_sessions.get(local_master)


@pytest.fixture
def spark(request, spark_sessions, spark_kind):
    """A local[2] SparkSession (or the cluster's) with the sqldelay format registered."""
    return _session(request, spark_sessions, spark_kind, "local[2]")


@pytest.fixture
def spark_retrying(request, spark_sessions, spark_kind):
    """local[2,3]: two threads, and a failed task is tried up to three times. The cluster
    tries a failed task again anyway (spark.task.maxFailures, 4 there)."""
    return _session(request, spark_sessions, spark_kind, "local[2,3]")


@pytest.fixture
def queue_name() -> str:
    return unique("sq")


def pytest_generate_tests(metafunc):
    """A test marked spark_cluster runs in local mode and again on the standalone cluster."""
    if "spark_kind" in metafunc.fixturenames and \
            metafunc.definition.get_closest_marker("spark_cluster"):
        metafunc.parametrize("spark_kind", SESSION_KINDS, indirect=True, scope="session")


def _params(item) -> dict:
    """The parameters of a collected test; none for tests that are not parametrized."""
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec is not None else {}


def _on_cluster(item) -> bool:
    """Whether a test uses the cluster: its cluster run, or a test asking for it by name."""
    return ("spark_cluster" in getattr(item, "fixturenames", ())
            or _params(item).get("spark_kind") == "cluster")


def _on_sqlite(item) -> bool:
    """Whether a test runs on SQLite, through the shared backend fixture or its own param."""
    return "sqlite" in (_params(item).get("spark_backend"), _params(item).get("backend"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Leave SQLite out of the cluster runs (a file on one node's disk: local mode only, as
    docs/spark.md says), and move the cluster runs after everything else, once pytest has
    grouped the items, so that the SparkSession switches to the cluster only once."""
    dropped = [item for item in items if _on_cluster(item) and _on_sqlite(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not (_on_cluster(item) and _on_sqlite(item))]
    items.sort(key=_on_cluster)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "spark_cluster: also run on the Spark standalone cluster (conftest.py)")
    # pyspark 4.x warns on every Arrow UDF that it is not yet tested with pandas 3; our code
    # does not use pandas, and the tests pass on both
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")
