"""The database's plan for the claim's due-message lookup, to show it reads the due index.

Each database has its own EXPLAIN; this module is benchmark tooling, not library code, so its
per-database branches stay here.
"""

from __future__ import annotations

from sqldelay import DelayedQueue


def claim_plan(queue: DelayedQueue, limit: int) -> tuple[str, bool | None]:
    """(plan text, whether it reads the (pkind, scheduled_at, id) index without a full scan);
    None where this module does not read the database's plans."""
    dao, engine = queue.dao, queue.engine
    if engine.dialect.name not in ("postgresql", "sqlite", "mysql", "mariadb"):
        return "", None
    now = queue.now_ms()
    index = f"{dao.table.name}_kind_due_ix"
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            compiled = dao._claim.compile(dialect=engine.dialect)
            params = compiled.construct_params({"b_kind": queue.pkind, "b_now": now,
                                                "limit": limit, "lock": "x", "until": now})
            rows = conn.exec_driver_sql("EXPLAIN " + str(compiled), params).scalars().all()
            text = "\n".join(rows)
            return text, index in text and "Seq Scan" not in text
        sql = str(dao.select_due(queue.pkind, now, limit).compile(
            dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
            text = "\n".join(str(r[-1]) for r in rows)
            return text, index in text
        result = conn.exec_driver_sql("EXPLAIN " + sql)
        rows = [dict(zip(result.keys(), r, strict=True)) for r in result]
        text = "\n".join(str(r) for r in rows)
        return text, all(r.get("type") != "ALL" for r in rows) and \
            any(r.get("key") == index for r in rows)
