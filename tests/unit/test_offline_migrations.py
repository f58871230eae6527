"""The migrations as offline SQL (``alembic … --sql``), for databases that do not run here and
for MySQL/MariaDB, whose key collation offline SQL cannot ask the server about."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .dao_recorder import parses

ROOT = Path(__file__).resolve().parents[2]
MSSQL_URL = "mssql+pyodbc://sa@host/db?driver=ODBC+Driver+18+for+SQL+Server"
ORACLE_URL = "oracle+oracledb://user@host/?service_name=freepdb1"


def offline(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SQLDELAY_URL": url}
    return subprocess.run([sys.executable, "-m", "alembic", *args, "--sql"], cwd=ROOT,
                          env=env, capture_output=True, text=True)


def statements(script: str, separator: str) -> list[str]:
    """The SQL statements of an offline script, comments and Alembic's own version table
    bookkeeping left out."""
    out = []
    for chunk in script.split(separator):
        lines = [ln for ln in chunk.splitlines() if ln.strip() and not ln.startswith("--")
                 and ln.strip() not in ("BEGIN TRANSACTION;", "COMMIT;")]
        sql = " ".join(lines).strip().rstrip(";").strip()
        if sql and "_alembic" not in sql:
            out.append(sql)
    return out


def test_mysql_url_needs_a_flavor_offline():
    refused = offline("mysql+pymysql://root@host/db", "upgrade", "head")
    assert refused.returncode != 0
    assert "-x flavor=mysql or -x flavor=mariadb" in refused.stderr
    for flavor, collation in (("mysql", "utf8mb4_0900_bin"), ("mariadb", "utf8mb4_nopad_bin")):
        done = offline("mysql+pymysql://root@host/db", "-x", f"flavor={flavor}",
                       "upgrade", "head")
        assert done.returncode == 0, done.stderr
        assert f"COLLATE {collation}" in done.stdout
    # a mariadb:// URL says it already
    done = offline("mariadb+pymysql://root@host/db", "upgrade", "head")
    assert done.returncode == 0 and "COLLATE utf8mb4_nopad_bin" in done.stdout


@pytest.mark.parametrize(("url", "separator", "grammar", "expected"), [
    (MSSQL_URL, "\nGO\n", "tsql",
     ["ALTER TABLE delayed_queue_dead ALTER COLUMN last_error NVARCHAR(4000) NULL"]),
    (ORACLE_URL, "\n/\n", "oracle",
     ["ALTER TABLE delayed_queue_dead ADD last_error_clob CLOB",
      "UPDATE delayed_queue_dead SET last_error_clob = last_error",
      "ALTER TABLE delayed_queue_dead DROP COLUMN last_error",
      "ALTER TABLE delayed_queue_dead RENAME COLUMN last_error_clob TO last_error"]),
], ids=["mssql", "oracle"])
def test_error_text_is_widened_where_the_first_schema_was_too_narrow(url, separator, grammar,
                                                                     expected):
    done = offline(url, "upgrade", "0002:0003")
    assert done.returncode == 0, done.stderr
    sql = statements(done.stdout, separator)
    assert sql == expected
    assert all(parses(s, grammar) for s in sql)


@pytest.mark.parametrize(("url", "separator", "grammar"), [
    (MSSQL_URL, "\nGO\n", "tsql"), (ORACLE_URL, "\n/\n", "oracle")], ids=["mssql", "oracle"])
def test_the_dead_letters_key_index_is_sql_each_database_parses(url, separator, grammar):
    done = offline(url, "upgrade", "0009:0010")
    assert done.returncode == 0, done.stderr
    sql = statements(done.stdout, separator)
    assert sql == ["CREATE INDEX delayed_queue_dead_key_ix ON delayed_queue_dead "
                   "(pkind, pkey, failed_at, id)"]
    assert parses(sql[0], grammar)
    undone = statements(offline(url, "downgrade", "0010:0009").stdout, separator)
    assert len(undone) == 1 and undone[0].startswith("DROP INDEX delayed_queue_dead_key_ix")
    assert parses(undone[0], grammar)


@pytest.mark.parametrize(("url", "separator"), [(MSSQL_URL, "\nGO\n"), (ORACLE_URL, "\n/\n")],
                         ids=["mssql", "oracle"])
@pytest.mark.parametrize(("before", "after"), [("0010", "0011"), ("0011", "0012")])
def test_the_partial_indexes_change_nothing_where_no_partial_index_is_kept(url, separator,
                                                                           before, after):
    for step, span in (("upgrade", f"{before}:{after}"), ("downgrade", f"{after}:{before}")):
        done = offline(url, step, span)
        assert done.returncode == 0, done.stderr
        assert after in done.stdout and statements(done.stdout, separator) == []


@pytest.mark.parametrize(("dialect", "separator", "grammar"), [
    ("mssql", "\nGO\n", "tsql"), ("oracle", "\n/\n", "oracle")])
def test_making_again_a_dropped_table_and_index_is_sql_each_database_parses(dialect, separator,
                                                                          grammar):
    """What create_schema and ``sqldelay migrate`` send to make again a dropped queue table
    (with its indexes) and a dropped index of the dead letters, as SQL Server's and Oracle's
    SQL: no server of theirs runs here."""
    import io

    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    from sqldelay.schema import SCHEMA_VERSION, repair_op

    out = io.StringIO()
    context = MigrationContext.configure(dialect_name=dialect,
                                         opts={"as_sql": True, "output_buffer": out})
    made = repair_op(Operations(context), "dq", SCHEMA_VERSION,
                     only={"dq", "dq_kind_due_ix", "dq_dead_kind_ix"})
    assert made == ["dq", "dq_dead_kind_ix"]  # the table's own index comes with it
    sql = statements(out.getvalue(), separator)
    assert [s.split(" (")[0] for s in sql] == [
        "CREATE TABLE dq", "CREATE UNIQUE INDEX dq_kind_key_uq ON dq",
        "CREATE INDEX dq_kind_due_ix ON dq", "CREATE INDEX dq_kind_prio_ix ON dq",
        "CREATE INDEX dq_kind_lock_ix ON dq", "CREATE INDEX dq_kind_group_ix ON dq",
        "CREATE INDEX dq_dead_kind_ix ON dq_dead"]
    assert all(parses(s, grammar) for s in sql)
