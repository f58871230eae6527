"""The MariaDB/MySQL ceiling: our statements as stored procedures, driven by mysqlslap (C).

What our MySQL dialect does per call, as one procedure call per transaction pair:

- drain: claim ``SELECT … ORDER BY scheduled_at, id LIMIT n FOR UPDATE SKIP LOCKED`` (into a
  temporary id table, as a procedure cannot keep a result set), read the claimed rows, mark them
  claimed, commit; then delete them by lock id and ids, commit: two commits, like poll + ack;
- offer: a multi-row ``INSERT IGNORE`` of ``batch`` rows numbered by a recursive CTE (MySQL
  stops one at 1,000 rows, ``cte_max_recursion_depth``), one commit. Ours also reads the
  existing keys first (it must tell created from updated); the ceiling does not, so it is the
  upper bound of the insert alone.

The procedures are created beside the run's table and dropped with it by the caller's
``DROP PROCEDURE`` below.

The client-side ceiling (``offer_wire``) needs no procedure: mysqlslap sends our offer's
multi-row INSERT for ``batch`` new messages itself, every value written out as a literal (the
same columns, kind, payload and times ours binds), over the wire from each connection, one
commit a statement. Each key is ``CONCAT('k', UUID_SHORT())``, which the server makes unique
at every row of every run, so each run inserts fresh keys as ours does. Ours also sends the
offer's locking read of the keys before it (and sets the isolation level), so this too is an
upper bound.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import sqlalchemy as sa

from sqldelay.dialects import OfferRow

from .harness import Bench

# a placeholder of the drivers' paramstyles: %(name)s (pyformat) or %s (format)
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s")


def executable() -> str | None:
    return shutil.which("mysqlslap") or shutil.which("mariadb-slap")


def procedures(table: str, batch: int) -> dict[str, str]:
    ids = f"{table}_ids"
    return {
        f"{table}_drain": f"""
CREATE PROCEDURE {table}_drain(p_kind VARCHAR(100), p_now BIGINT, p_until BIGINT, p_n INT)
BEGIN
  DECLARE v_lock VARCHAR(36) DEFAULT UUID();
  CREATE TEMPORARY TABLE IF NOT EXISTS {ids} (id BIGINT PRIMARY KEY) ENGINE=MEMORY;
  DELETE FROM {ids};
  START TRANSACTION;
  INSERT INTO {ids} SELECT id FROM {table} WHERE pkind = p_kind AND scheduled_at <= p_now
    ORDER BY scheduled_at, id LIMIT p_n FOR UPDATE SKIP LOCKED;
  SELECT t.id, t.pkey, t.payload, t.scheduled_at, t.scheduled_at_initially, t.created_at,
    t.deliveries FROM {table} t JOIN {ids} USING (id);
  UPDATE {table} t JOIN {ids} USING (id)
    SET t.lock_uuid = v_lock, t.scheduled_at = p_until, t.deliveries = t.deliveries + 1;
  COMMIT;
  START TRANSACTION;
  DELETE t FROM {table} t JOIN {ids} USING (id) WHERE t.lock_uuid = v_lock;
  COMMIT;
END""",
        f"{table}_offer": f"""
CREATE PROCEDURE {table}_offer(p_kind VARCHAR(100), p_now BIGINT, p_payload BLOB)
BEGIN
  DECLARE v_base BIGINT DEFAULT UUID_SHORT();
  INSERT IGNORE INTO {table} (pkind, pkey, payload, scheduled_at, scheduled_at_initially,
    created_at, lock_uuid, deliveries)
  SELECT p_kind, CONCAT(v_base, '-', seq), p_payload, p_now, p_now, p_now, NULL, 0
  FROM (WITH RECURSIVE numbers (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM numbers
        WHERE seq < {batch}) SELECT seq FROM numbers) AS numbered;
END""",
    }


def literal_offer(queue, dialect: sa.Dialect, batch: int, now_ms: int) -> str:
    """The INSERT our offer sends for ``batch`` new messages of ``queue`` (as ``dialect``
    compiles it; the offer reads the keys before it), its values written out and each key
    left to the server (UUID_SHORT())."""
    dao = queue.dao
    payload = queue.serializer.encode({"job": "noop"})
    params = dao.row_params(queue.pkind, [OfferRow("", payload, now_ms, True)] * batch, now_ms)
    columns = [c.name for c in dao.table.columns if c.name in params[0]]
    sql, names = dao._multirow_insert(dialect, dao.table, batch, columns)
    values = ["CONCAT('k', UUID_SHORT())" if column == "pkey" else _literal(row[column])
              for row in params for column in columns]
    if names is None:  # positional placeholders, in the order of the values
        ordered = iter(values)
        return _PLACEHOLDER.sub(lambda m: next(ordered), sql)
    by_name = dict(zip(names, values, strict=True))
    return _PLACEHOLDER.sub(lambda m: by_name[m.group(1)], sql)


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def run(bench: Bench, kind: str, *, queue, batch: int, clients: int, transactions: int,
        now_ms: int) -> float:
    """Seconds mysqlslap took for about ``transactions`` calls of ``kind`` ("offer" or "drain"
    through the procedures, "offer_wire" our offer's statement itself) on ``queue`` (its count
    is approximate: the caller counts the rows that moved)."""
    if kind == "offer_wire":
        return _slap(bench, clients, transactions,
                     literal_offer(queue, bench.engine.dialect, batch, now_ms))
    table = queue.dao.table.name
    procs = procedures(table, batch)
    with bench.engine.begin() as conn:
        for name, ddl in procs.items():
            conn.exec_driver_sql(f"DROP PROCEDURE IF EXISTS {name}")
            conn.exec_driver_sql(ddl)
    kind_literal = queue.pkind.replace("'", "''")
    if kind == "drain":
        call = f"CALL {table}_drain('{kind_literal}', {now_ms}, {now_ms + 300_000}, {batch})"
    else:
        payload = queue.serializer.encode({"job": "noop"}).hex()
        call = f"CALL {table}_offer('{kind_literal}', {now_ms}, x'{payload}')"
    try:
        return _slap(bench, clients, transactions, call)
    finally:
        with bench.engine.begin() as conn:
            for name in procs:
                conn.exec_driver_sql(f"DROP PROCEDURE IF EXISTS {name}")


def _slap(bench: Bench, clients: int, transactions: int, query: str) -> float:
    """Seconds mysqlslap took to send ``query`` about ``transactions`` times from ``clients``
    connections."""
    url = sa.make_url(bench.url)
    cmd = [executable(), "-h", url.host or "127.0.0.1", "-P", str(url.port or 3306),
           "-u", url.username or "root", "--create-schema", url.database or "test", "--no-drop",
           "--concurrency", str(clients), "--iterations", "1",
           "--number-of-queries", str(transactions), "--query", query]
    if url.password:
        cmd.append(f"--password={url.password}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    m = re.search(r"Average number of seconds to run all queries: ([\d.]+)", done.stdout)
    if done.returncode != 0 or not m:
        raise RuntimeError(f"mysqlslap failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return float(m.group(1))
