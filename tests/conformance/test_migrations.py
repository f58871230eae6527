"""The Alembic migration and create_schema must build the same tables on every backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import create_schema, drop_schema

from ..conftest import unique_name

ROOT = Path(__file__).resolve().parents[2]


def alembic(url: str, table: str, *args: str) -> None:
    env = {**os.environ, "SQLDELAY_URL": url}
    subprocess.run([sys.executable, "-m", "alembic", "-x", f"table={table}", *args],
                   cwd=ROOT, env=env, check=True, capture_output=True)


def shape(url: str, prefix: str) -> dict:
    """Every table named ``prefix…`` with its columns and indexes, the prefix taken out.

    A fresh connection each time: SQLite's schema PRAGMAs answer from the connection's cached
    schema, which does not see tables another process created since."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    inspector = sa.inspect(engine)
    tables = {}
    for name in inspector.get_table_names():
        if not name.startswith(prefix) or name.endswith("_alembic"):
            continue
        columns = [(c["name"], str(c["type"]), c["nullable"])
                   for c in inspector.get_columns(name)]
        indexes = sorted((ix["name"].replace(prefix, "", 1), tuple(ix["column_names"]),
                          bool(ix["unique"])) for ix in inspector.get_indexes(name))
        tables[name.replace(prefix, "", 1)] = (columns, indexes)
    engine.dispose()
    return tables


def test_migration_builds_what_create_schema_builds(backend_url, engine):
    by_code, by_migration = unique_name("sqdc"), unique_name("sqdm")
    create_schema(engine, table_name=by_code)
    try:
        alembic(backend_url, by_migration, "upgrade", "head")
        expected = shape(backend_url, by_code)
        assert "" in expected  # the queue table itself
        assert shape(backend_url, by_migration) == expected
        alembic(backend_url, by_migration, "downgrade", "base")
        assert shape(backend_url, by_migration) == {}
    finally:
        drop_schema(engine, table_name=by_code)
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {by_migration}_alembic"))


def test_migration_takes_the_tuning_preset_and_refuses_an_unknown_one(backend_url, engine):
    name = unique_name("sqdt")
    with pytest.raises(subprocess.CalledProcessError) as refused:
        alembic(backend_url, name, "-x", "tuning=bogus", "upgrade", "head")
    assert b"tuning must be None or one of high-churn" in refused.value.stderr
    assert shape(backend_url, name) == {}  # refused before anything was created
    try:
        alembic(backend_url, name, "-x", "tuning=high-churn", "upgrade", "head")
        assert "" in shape(backend_url, name)
        if engine.dialect.name == "postgresql":  # the one database the preset changes
            with engine.connect() as conn:
                options = conn.execute(sa.text(
                    "SELECT reloptions FROM pg_class WHERE relname = :n"), {"n": name}).scalar()
            assert "autovacuum_vacuum_cost_delay=2" in options
    finally:
        alembic(backend_url, name, "downgrade", "base")
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}_alembic"))
