"""The database's plan for the claim's due-message lookup, to show it reads the claim index.

Each database has its own EXPLAIN; this module is benchmark tooling, not library code, so its
per-database branches stay here.
"""

from __future__ import annotations

import sqlalchemy as sa

from sqldelay import DelayedQueue


def claim_plan(queue: DelayedQueue, limit: int) -> tuple[str, bool | None]:
    """(plan text, whether it reads the claim's (pkind, priority, scheduled_at, id) index
    without a full scan); None where this module does not read the database's plans."""
    dao, engine = queue.dao, queue.engine
    if engine.dialect.name not in ("postgresql", "sqlite", "mysql", "mariadb"):
        return "", None
    now = queue.now_ms()
    index = f"{dao.table.name}_kind_prio_ix"
    values = {"b_kind": queue.pkind, "b_now": now}
    if engine.dialect.name == "postgresql":
        return explain(engine, dao._claim_statement(("guard",)),
                       {**values, "limit": limit, "lock": "x", "until": now}, index)
    if engine.dialect.name == "sqlite":
        sql, constants = dao._due_sql(("guard",))
        return explain(engine, sa.text(sql), {**constants, **values, "b_limit": limit}, index)
    return explain(engine, dao.select_due(queue.pkind, now, limit, ("guard",)), values, index)


def explain(engine, stmt, values: dict, index: str) -> tuple[str, bool]:
    """(the database's plan for ``stmt`` with ``values`` bound, whether it reads ``index``
    without a full scan)."""
    compiled = stmt.compile(dialect=engine.dialect)
    params = compiled.construct_params(values)
    if compiled.positional:
        params = tuple(params[name] for name in compiled.positiontup)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            text = "\n".join(conn.exec_driver_sql("EXPLAIN " + str(compiled), params).scalars())
            return text, index in text and "Seq Scan" not in text
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), params).all()
            text = "\n".join(str(r[-1]) for r in rows)
            return text, index in text and "TEMP B-TREE FOR ORDER BY" not in text
        result = conn.exec_driver_sql("EXPLAIN " + str(compiled), params)
        rows = [dict(zip(result.keys(), r, strict=True)) for r in result]
        text = "\n".join(str(r) for r in rows)
        return text, all(r.get("type") != "ALL" for r in rows) and \
            any(r.get("key") == index for r in rows)
