"""SQL Server and Oracle for the shared suite: throwaway containers, where Docker is reachable.

No test server of these two runs on the development machines, so the suite starts one per
session through testcontainers when a Docker engine answers, and otherwise skips the backend
with the reason shown (never failing, in CI either). ``SQLDELAY_TEST_MSSQL_URL`` /
``SQLDELAY_TEST_ORACLE_URL`` name an existing server instead of starting a container.

SQL Server is reached through pyodbc, which needs Microsoft's "ODBC Driver 18 for SQL Server"
(msodbcsql18) on the host running the tests.
"""

from __future__ import annotations

import os

import pytest

CONTAINER_BACKENDS = ("mssql", "oracle")
MSSQL_IMAGE = os.environ.get("SQLDELAY_TEST_MSSQL_IMAGE",
                             "mcr.microsoft.com/mssql/server:2022-latest")
ORACLE_IMAGE = os.environ.get("SQLDELAY_TEST_ORACLE_IMAGE", "gvenzl/oracle-free:23-slim")
_ODBC = "driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes"


def _docker_problem() -> str | None:
    try:
        import docker

        docker.from_env(timeout=5).ping()
        return None
    except Exception as exc:  # no engine, no socket, no permission: all mean "no Docker"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def container_url(name: str, request: pytest.FixtureRequest) -> str:
    """The URL of a ``name`` server for this session, or a skip saying why there is none."""
    given = os.environ.get(f"SQLDELAY_TEST_{name.upper()}_URL")
    if given:
        return given
    problem = _docker_problem()
    if problem:
        pytest.skip(f"{name} runs in a container and no Docker engine is reachable ({problem})")
    if name == "mssql":
        from testcontainers.community.mssql import SqlServerContainer

        container = SqlServerContainer(MSSQL_IMAGE, dialect="mssql+pyodbc", dbname="master")
    else:
        from testcontainers.community.oracle import OracleDbContainer

        container = OracleDbContainer(ORACLE_IMAGE)
    container.start()
    request.addfinalizer(container.stop)
    url = container.get_connection_url()
    return f"{url}?{_ODBC}" if name == "mssql" else url
