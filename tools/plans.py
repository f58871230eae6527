"""The database's plans for the claim's reads, to show they walk an index rather than the table.

Each database has its own EXPLAIN; this module is benchmark tooling, not library code, so its
per-database branches stay here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from sqldelay import DelayedQueue

READS_PLANS = ("postgresql", "sqlite", "mysql", "mariadb")


@dataclass(frozen=True)
class Plan:
    text: str
    indexes: frozenset[str]  # the indexes read on the queue table
    full_scan: bool  # the queue table read whole
    # the indexes whose rows are sorted after reading, as many as there are (no index gives
    # the claim's order): every one read, where the plan does not say which a sort reads
    sorted_reads: frozenset[str]

    def walks(self, index: str) -> bool:
        """Whether the claim's rows come in order from ``index`` alone."""
        return index in self.indexes and not self.full_scan and index not in self.sorted_reads


def sorted_reads(text: str, table: str) -> frozenset[str]:
    """The indexes of ``table`` whose rows a Sort of PostgreSQL's plan ``text`` takes with no
    Limit between them: a sort of what a read returns, however many (a sort of rows that a
    Limit bounds, as a claim's two reads merged, sorts no more than the claim takes)."""
    nodes = []  # (depth, node text): a node starts its line, or follows "->"
    for line in text.splitlines():
        body = line.lstrip()
        if body.startswith("->") or not nodes:
            nodes.append((len(line) - len(body), body.removeprefix("->").strip()))
    found = set()
    for i, (depth, node) in enumerate(nodes):
        if not node.startswith(("Sort", "Incremental Sort")):
            continue
        bounded_below = None  # the depth of a Limit met under the sort
        for below, child in nodes[i + 1:]:
            if below <= depth:
                break
            if bounded_below is not None and below > bounded_below:
                continue
            bounded_below = below if child.startswith("Limit") else None
            scan = re.match(rf"Index (?:Only )?Scan (?:Backward )?using (\S+) on {table}\b(?!_)"
                            rf"|Bitmap Index Scan on ({table}_\S+)", child)
            if scan:
                found.add(scan.group(1) or scan.group(2))
    return frozenset(found)


def analyze(engine: sa.Engine, table: sa.Table) -> None:
    """Refresh the planner's statistics of ``table``, as autovacuum or a DBA would after a bulk
    load (a plan read against stale statistics says nothing about production)."""
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"ANALYZE {table.name}")
        elif engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {table.name}")
        else:
            conn.exec_driver_sql(f"ANALYZE TABLE {table.name}").all()


def claim_plan(queue: DelayedQueue, limit: int) -> Plan | None:
    """The plan of the claim's read of due messages (None where this module reads no plans)."""
    dao, engine = queue.dao, queue.engine
    if engine.dialect.name not in READS_PLANS:
        return None
    now = queue.now_ms()
    values = dao.due_params(queue.pkind, now, limit)
    if engine.dialect.name == "postgresql":
        # the whole claim, one statement
        return explain(engine, dao._claim_statement(("guard",)),
                       {**values, "limit": limit, "lock": "x", "until": now}, dao.table)
    return explain(engine, due_statement(queue, ("guard",)), values, dao.table)


def claim_index(queue: DelayedQueue) -> str:
    return queue.dao.claim_index


def due_statement(queue: DelayedQueue, where: tuple[str, ...]) -> sa.Executable:
    """The claim's read of due messages as the queue's database module sends it."""
    dao = queue.dao
    if dao.name == "sqlite":
        sql, constants = dao._due_sql(where)
        return sa.text(sql).bindparams(**constants)
    return dao.select_due(where)


def explain(engine, stmt, values: dict, table: sa.Table,
            settings: sa.Executable | None = None) -> Plan:
    """The database's plan for ``stmt`` with ``values`` bound, read for what it does with
    ``table`` (in a transaction that first runs ``settings``, as the claim does, where
    given)."""
    compiled = stmt.compile(dialect=engine.dialect)
    state = compiled.construct_expanded_state(compiled.construct_params(values))
    sql, params = state.statement, state.parameters
    if compiled.positional:
        params = tuple(params[name] for name in state.positiontup)
    name = re.escape(table.name)
    with engine.connect() as conn:
        if settings is not None:
            conn.execute(settings)
        if engine.dialect.name == "postgresql":
            text = "\n".join(conn.exec_driver_sql("EXPLAIN " + sql, params).scalars())
            return Plan(text, frozenset(re.findall(
                            rf"Index (?:Only )?Scan (?:Backward )?using (\S+) on {name}\b(?!_)",
                            text)),
                        bool(re.search(rf"Seq Scan on {name}\b(?!_)", text)),
                        sorted_reads(text, name))
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
            text = "\n".join(str(r[-1]) for r in rows)
            indexes = frozenset(re.findall(
                rf"(?:SEARCH|SCAN) {name}\b(?!_) USING (?:COVERING )?INDEX (\S+)", text))
            return Plan(text, indexes, bool(re.search(rf"^SCAN {name}$", text, re.M)),
                        indexes if "TEMP B-TREE FOR ORDER BY" in text else frozenset())
        # the table (MySQL 9's default is a tree of text)
        result = conn.exec_driver_sql("EXPLAIN FORMAT=TRADITIONAL " + sql, params)
        rows = [dict(zip(result.keys(), r, strict=True)) for r in result]
        mine = [r for r in rows if re.fullmatch(rf"{name}(_\d+)?", r.get("table") or "")]
        indexes = frozenset(r["key"] for r in mine if r.get("key"))
        return Plan("\n".join(str(r) for r in rows), indexes,
                    any(r.get("type") == "ALL" for r in mine),
                    indexes if any("filesort" in (r.get("Extra") or "") for r in mine)
                    else frozenset())
