"""What churn leaves behind in a queue table: dead rows, table and index size.

Per-database catalog queries; benchmark tooling, so the branches live here.
"""

from __future__ import annotations

import time

import sqlalchemy as sa


def table_storage(engine: sa.Engine, table: str) -> dict:
    name = engine.dialect.name
    if name == "postgresql":
        # statistics reach the shared view when a backend ends or after its flush interval
        engine.dispose()
        time.sleep(1.5)
        with engine.connect() as conn:
            row = conn.execute(sa.text(
                "SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, "
                "vacuum_count, pg_relation_size(relid) AS table_bytes, "
                "pg_indexes_size(relid) AS index_bytes FROM pg_stat_user_tables "
                "WHERE relname = :t"), {"t": table}).mappings().one()
            return dict(row)
    if name in ("mysql", "mariadb"):
        with engine.connect() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
            row = conn.execute(sa.text(
                "SELECT table_rows, data_length AS table_bytes, index_length AS index_bytes, "
                "data_free AS free_bytes FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = :t"), {"t": table}
            ).mappings().one()
            return {k: int(v) for k, v in row.items()}
    if name == "sqlite":
        # free pages are the whole file's (every table's), so they are not reported here
        with engine.connect() as conn:
            try:
                sizes = dict(conn.execute(sa.text(
                    "SELECT d.name, sum(d.pgsize) FROM dbstat d JOIN sqlite_schema s "
                    "ON s.name = d.name WHERE s.tbl_name = :t GROUP BY d.name"), {"t": table}
                ).all())
            except sa.exc.OperationalError:  # SQLite built without the dbstat table
                sizes = {}
            return {"table_bytes": sizes.get(table),
                    "index_bytes": sum(v for k, v in sizes.items() if k != table) or None}
    return {}


def dead_rows(engine: sa.Engine, table: str) -> int | None:
    """PostgreSQL's count of dead row versions now (its statistics lag by about a second);
    None on databases that do not report one."""
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = :t"), {"t": table}
        ).scalar()
