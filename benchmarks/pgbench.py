"""The PostgreSQL ceiling: pgbench (a C client) running the statements our dialect emits.

The statements are compiled from the PostgreSQL QueueDao's own builders; each bound parameter
becomes a pgbench variable, set with ``-D`` (constants of the run) or ``\\set`` (a random lock
id per transaction). pgbench can keep only one result row in variables, so two statements are
wrapped without changing what the database does:

- the claim is our statement verbatim inside ``WITH c AS (...) SELECT array_agg(id)``, which
  hands the claimed ids to the next command in one row;
- the batched ack is our DELETE verbatim, its ``= ANY(:ids)`` array filled from the claim.

The offer is what an offer of new keys sends: the plain INSERT … SELECT FROM unnest verbatim,
its array parameters built in the statement from ``generate_series`` (pgbench has no array
variables), then the wake-up (``pg_notify``) in a transaction of its own.
Each pgbench transaction runs in autocommit, like ours: one commit per claim and per ack.

The grouped drain (``grouped_drain``) sends what ours sends for a queue of groups alone: in one
transaction, the walk that locks the free groups and sets the claim's planner settings
(verbatim, its row named and its groups' names handed on with the count of ungrouped messages
to read, ``flow.loose_wanted``'s rule), the claim of their heads (wrapped as the plain claim
is), and both once more where the heads' claim found locked groups busy; then the batched
ack in autocommit.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from sqldelay.dialects.flow import walk_length
from sqldelay.dialects.postgresql import PostgresQueueDao
from sqldelay.schema import queue_table

from .harness import PAYLOAD, Bench

_PARAM = re.compile(r"%\((\w+)\)s")


def executable() -> str | None:
    found = shutil.which("pgbench") or max(glob.glob("/usr/lib/postgresql/*/bin/pgbench"),
                                           default=None)
    return found


def compile_sql(stmt, constants: dict[str, str]) -> str:
    """Our statement as PostgreSQL text, each bound parameter written as a pgbench ``:name``.

    Parameters SQLAlchemy made from Python values (``deliveries + 1``) keep their value: it is
    added to ``constants`` for ``-D``, renamed where another statement's constant of the same
    name holds another value (each statement numbers its own ``param_1``); a None becomes
    NULL, as pgbench has no null variables.
    """
    compiled = stmt.compile(dialect=pg.psycopg.dialect())

    def variable(m: re.Match) -> str:
        name = m.group(1)
        bind = compiled.binds.get(name)
        if bind is not None and not bind.required:
            if bind.value is None:
                return "NULL"
            value, n = str(bind.value), 1
            while constants.setdefault(name, value) != value:
                n += 1
                name = f"{m.group(1)}_{n}v"
        return ":" + name

    return _PARAM.sub(variable, str(compiled)).replace("%%", "%")


def scripts(table: str, batch: int) -> tuple[dict[str, str], dict[str, str]]:
    """pgbench scripts for offer (``batch`` rows) and claim+ack of ``batch`` messages, and the
    constants their statements carry."""
    dao = PostgresQueueDao(queue_table(sa.MetaData(), table))
    constants: dict[str, str] = {}
    # what an offer of new keys sends (``PostgresQueueDao.insert_new``): the plain insert, and
    # the wake-up of the listeners after it, in a transaction of its own
    offer = compile_sql(dao._insert_statement(by=False, events=None), constants)
    wake = compile_sql(sa.select(sa.func.pg_notify(dao.channel,
                                                   sa.bindparam("b_kind", type_=sa.Text))),
                       constants)
    # the column parameters made inside the server, in the forms ours sends
    # (``PostgresQueueDao.offer_columns``): JSON texts, array literals, a bytea array
    arrays = {
        "keys": f"(SELECT json_agg(:base || '-' || g)::text FROM generate_series(1, {batch}) g)",
        "payloads": f"(SELECT array_agg(decode('{_payload_bytes().hex()}', 'hex')) "
                    f"FROM generate_series(1, {batch}))",
        "ats": f"(SELECT array_agg(:b_now::bigint)::text FROM generate_series(1, {batch}))",
        "priorities": f"(SELECT array_agg(0)::text FROM generate_series(1, {batch}))",
        "groups": f"(SELECT json_agg(NULL::text)::text FROM generate_series(1, {batch}))",
    }
    for name, expr in arrays.items():
        offer = re.sub(rf":{name}(::[\w\[\]]+)?", lambda _m, e=expr: e, offer)
    claim = _ids(compile_sql(dao._claim_statement(('guard',), gives_way=True), constants))
    if batch == 1:
        ack = compile_sql(dao._ack, constants)
    else:
        ack = compile_sql(dao._ack_many, constants)
    # the grouped claim: the walk's row as names, the groups it locked as the heads' parameter
    walk = _one_line(
        f"SELECT coalesce(w.names, '[]') AS group_names, CASE WHEN w.met THEN :limit "
        f"WHEN w.seen = :walk THEN :limit - w.won ELSE 0 END AS loose, w.won AS won "
        f"FROM ({compile_sql(dao._win_groups[True, True], constants)}) "
        "AS w(names, won, seen, met, isolation)")
    heads = _one_line(_ids(compile_sql(dao._heads_claim(False), constants), counted=True))
    # where the heads' claim found groups the walk locked busy and took fewer than the
    # limit, both again for the rest (``_claim_won``), the walk's length as walk_length's
    walked = walk_length(1) - walk_length(0), walk_length(0)

    def again(sql: str) -> str:
        return re.sub(r":(limit|walk)\b", r":rest_\1", sql)

    grouped = "\n".join([
        "\\set lock random(1, 2000000000)", "BEGIN;", walk, "\\gset", heads, "\\gset",
        "\\if :got < :limit and :grouped < :won",
        "\\set rest_limit :limit - :got",
        f"\\set rest_walk {walked[0]} * :rest_limit + {walked[1]}",
        again(walk), "\\gset", again(heads), "\\gset rest_",
        "SELECT array_cat(CAST(:ids AS bigint[]), CAST(:rest_ids AS bigint[])) AS ids", "\\gset",
        "\\endif",
        "COMMIT;", _one_line(ack) + ";", ""])
    return {
        "offer": "\\set base random(1, 1000000000000)\n" + _one_line(offer) + ";\n"
                 + _one_line(wake) + ";\n",
        "drain": "\\set lock random(1, 2000000000)\n" + _one_line(claim) + "\n\\gset\n"
                 + _one_line(ack) + ";\n",
        "grouped_drain": grouped,
    }, constants


def _ids(claim: str, counted: bool = False) -> str:
    """A claim statement wrapped to hand the ids it claimed to the ack in one row (and, when
    ``counted``, how many it claimed, and how many of them were grouped)."""
    counts = ", count(*) AS got, count(c.group_key) AS grouped" if counted else ""
    return (f"WITH c AS ({claim}) "
            f"SELECT coalesce(array_agg(c.id), '{{}}') AS ids, coalesce(min(c.id), 0) AS id"
            f"{counts} FROM c")


def _payload_bytes() -> bytes:
    from sqldelay.serializers import JsonSerializer, encode_payload

    return encode_payload(JsonSerializer(), PAYLOAD)


def _one_line(sql: str) -> str:
    # pgbench ends a command at a newline only after a semicolon, but \gset must follow the
    # query's last line: keep every command on one line
    return " ".join(sql.split())


def run(bench: Bench, kind: str, *, queue, batch: int, clients: int, transactions: int,
        now_ms: int) -> float:
    """Seconds pgbench took for ``transactions`` runs of script ``kind`` ("offer", "drain" or
    "grouped_drain") on ``queue``, connections excluded."""
    table = queue.dao.table.name
    texts, constants = scripts(table, batch)
    variables = {**constants, "b_kind": queue.pkind, "b_now": now_ms, "limit": batch,
                 "until": now_ms + 300_000, "walk": walk_length(batch),
                 "space": f"{table}\x1f{queue.pkind}\x1f"}
    url = sa.make_url(bench.url)
    per_client = max(1, transactions // clients)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(texts[kind])
    try:
        cmd = [executable(), "-n", "-M", "prepared", "-c", str(clients),
               "-j", str(min(clients, os.cpu_count() or 1)), "-t", str(per_client), "-f", f.name,
               "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
               "-U", url.username or "postgres", url.database or "postgres"]
        for k, v in variables.items():
            cmd += ["-D", f"{k}={v}"]
        env = dict(os.environ, PGPASSWORD=url.password or "")
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        os.unlink(f.name)
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
    if done.returncode != 0 or not m:
        raise RuntimeError(f"pgbench failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return per_client * clients / float(m.group(1))
