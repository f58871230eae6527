"""Golden SQL: every statement each portable dialect's QueueDao sends, compared with the text
stored in ``golden/<dialect>.sql`` and parsed by sqlglot's grammar for that database.

The DAO operations run against a recording stand-in for a Connection, so statements built
inside operations are covered too. After an intended change, regenerate the files with
``SQLDELAY_UPDATE_GOLDEN=1 pytest tests/unit/test_sql_golden.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay.dialects import REGISTRY, OfferRow
from sqldelay.dialects.base import ClaimEvents, OfferEvents
from sqldelay.dialects.common import AUTOCOMMIT, RETRIED
from sqldelay.schema import dead_letter_table, history_table, queue_table, schema_tables

from .dao_recorder import (
    RecordingConnection,
    ddl,
    existing_answers,
    existing_row,
    flow_recordings,
    history_recordings,
    parses,
    render,
)

GOLDEN = Path(__file__).parent / "golden"
# dialect name -> (a URL whose dialect compiles the statements, sqlglot grammar)
DIALECTS = {
    "postgresql": ("postgresql+psycopg://", "postgres"),
    "mysql": ("mysql+pymysql://", "mysql"),
    "mariadb": ("mariadb+pymysql://", "mysql"),
    "sqlite": ("sqlite://", "sqlite"),
}
KIND = "emails|json"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ROWS = [OfferRow("new", b"{}", 1000, True), OfferRow("changed", b"[1]", 2000, True),
        OfferRow("kept", b"[2]", 3000, False)]
# id, pkey, payload, scheduled_at, scheduled_at_initially, created_at, deliveries, priority,
# group_key
CLAIMED = (7, "k", b"{}", 10, 10, 5, 0, 0, None, None, None, None, None)


def emitted(name: str) -> list[tuple[str, str]]:
    """(label, SQL) for every statement the dialect's DAO emits, in a fixed order."""
    dialect = sa.make_url(DIALECTS[name][0]).get_dialect()(paramstyle="named")
    dao = REGISTRY[name](queue_table(sa.MetaData()))
    tables = schema_tables(dao.table.metadata, dao.table.name)
    out = [(f"ddl {i}", sql)
           for i, sql in enumerate(s for table in tables for s in ddl(table, dialect))]

    def record(label, op, results=(), alone=False, retried=False):
        conn = (Alone if alone else Retried if retried else RecordingConnection)(dialect,
                                                                                  results)
        op(conn)
        out.extend((f"{label} {i}", render(stmt, params, dialect))
                   for i, (stmt, params) in enumerate(conn.executed))

    existing = [existing_row(pkey="changed", payload=b"[0]", scheduled_at_initially=2000),
                existing_row(pkey="kept", payload=b"[9]", scheduled_at_initially=3000,
                             row_id=2)]
    if name == "postgresql":  # one statement, whatever the update flags, answering with keys
        record("offer", lambda c: dao.offer(c, KIND, ROWS, 1), [[("new", True, None)]])
    else:
        record("offer", lambda c: dao.offer(c, KIND, ROWS, 1), existing_answers(dao, existing))
    # an offer of one chunk in autocommit (messages due: where an offer wakes workers, it
    # does so after its commit, ``PostgresQueueDao._woken``); the plain insert an offer tries
    # first where the dialect does (``inserts_first``); where the offer's statement writes
    # its history events (``offer_writes_history``), both with events
    if dao.autocommit_one_statement:
        record("offer alone", lambda c: dao.offer(c, KIND, ROWS, 5000),
               [[("new", True, None)]], alone=True)
    record("insert first", lambda c: dao.insert_new(c, KIND, ROWS[:1], 5000, None),
           alone=True)
    if dao.offer_writes_history:
        events = OfferEvents(history_table(dao.table.metadata, dao.table.name), "offered",
                             "updated", "ignored", ["due 1", "due 2", "due 3"])
        record("offer with events", lambda c: dao.offer(c, KIND, ROWS, 1, "shop", events),
               [[("new", True)]], alone=True)
        record("insert first with events",
               lambda c: dao.insert_new(c, KIND, ROWS[:1], 1, "shop", events), alone=True)
    record("claim", lambda c: dao.claim(c, KIND, 100, 10, "L", 400), [[CLAIMED]])
    if name == "postgresql":  # in sqldelay's transaction, its lock waits bounded (gives_way)
        record("claim giving way", lambda c: dao.claim(c, KIND, 100, 10, "L", 400),
               [[CLAIMED]], retried=True)
    # the ack of two finished batches riding on the next claim (one statement where
    # acks_in_claim, else the acks first)
    record("claim acking", lambda c: dao.claim_acking(c, KIND, 100, 10, "L", 400, ("guard",),
                                                      None, [("K", [7, 8]), ("J", [9])]),
           [] if dao.acks_in_claim else [[], [], [CLAIMED]])
    # a claim of a queue that keeps history, its events written by its statement where
    # claim_writes_history (else the claim alone: the recorder writes them)
    events = ClaimEvents(history_table(dao.table.metadata, dao.table.name), "claimed",
                         "lock_expired", "locked until then", "lock lost; claimed again by w")
    record("claim recorded", lambda c: dao.claim_acking(c, KIND, 100, 10, "L", 400,
                                                        ("guard",), "w", [], events),
           [[CLAIMED]])
    if dao.ack_writes_history:  # the acks of a queue that keeps history, in one statement
        record("ack recorded", lambda c: dao.ack_recorded(
            c, KIND, "L", [7, 8], events.table, "acked", 100), [[(2,)]])
    record("ack", lambda c: dao.ack(c, 7, "L"))
    record("ack_many", lambda c: dao.ack_many(c, "L", [7, 8]))
    # the same in a transaction of sqldelay's own, run again on a transient error (MariaDB's
    # fail at once where they would wait for a lock: ``MySQLQueueDao.ack``)
    record("ack retried", lambda c: dao.ack(c, 7, "L"), retried=True)
    record("ack_many retried", lambda c: dao.ack_many(c, "L", [7, 8]), retried=True)
    record("lock_acked", lambda c: dao.lock_acked(c, [8, 7]))
    record("trace context", lambda c: dao.store_trace_context(c, KIND, ["b", "a"], TRACE))
    out.extend((label, render(stmt, params, dialect))
               for label, stmt, params in flow_recordings(dao, dialect, KIND))
    offered = [[("new", True, None)]] if name == "postgresql" else [[]]
    out.extend((label, render(stmt, params, dialect))
               for label, stmt, params in history_recordings(dao, dialect, KIND, offered))
    # a task's end told to the handles waiting for it (nothing where there is no NOTIFY)
    record("settled", lambda c: dao.notify_settled(c, KIND, "k"))
    for label, stmt in [
        ("release", dao.move_locked(7, "L", 500, keep_lock=False)),
        ("extend", dao.extend_locked(KIND, 7, "L", 500, 100, False)),
        ("extend grouped", dao.extend_locked(KIND, 7, "L", 500, 100, True)),
        ("get", dao.select_by_key(KIND, "k")),
        ("contains", dao.exists_key(KIND, "k")),
        ("drop", dao.delete_key(KIND, "k")),
        ("clear", dao.delete_kind(KIND)),
        ("stats", dao.select_stats(KIND, 100)),
        ("stats of every queue", dao.select_stats_by_kind(100)),
        ("a page of queues", dao.select_stats_page(dead_letter_table(sa.MetaData(), "dq"),
                                                   100, 50, "a|json", "a_b%")),
        ("peek due", dao.select_page(KIND, "due", 100, 50, "a_b%", (90, 7))),
        ("peek in flight", dao.select_page(KIND, "in_flight", 100, 50, None, None)),
    ]:
        out.append((label, render(stmt, {}, dialect)))
    return out


class Alone(RecordingConnection):
    """A recording connection in autocommit, as the engine layer runs a one-statement
    operation (``QueueDao.in_autocommit``)."""

    @property
    def info(self) -> dict:
        return {AUTOCOMMIT: True}


class Retried(RecordingConnection):
    """A recording connection in a transaction of sqldelay's own, which the engine layer
    runs again on a transient error (``executor._retried``)."""

    @property
    def info(self) -> dict:
        return {RETRIED: True}


def golden_text(name: str) -> str:
    return "".join(f"-- {label}\n{sql};\n\n" for label, sql in emitted(name))


@pytest.mark.parametrize("name", DIALECTS)
def test_statements_match_golden_sql(name):
    path = GOLDEN / f"{name}.sql"
    text = golden_text(name)
    if os.environ.get("SQLDELAY_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", DIALECTS)
def test_statements_parse_in_the_databases_grammar(name):
    grammar = DIALECTS[name][1]
    bad = [label for label, sql in emitted(name) if not parses(sql, grammar)]
    assert not bad


def test_claims_lock_with_skip_locked_where_rows_can_be_locked():
    for name in ("postgresql", "mysql", "mariadb"):
        claim = [sql for label, sql in emitted(name) if label.startswith("claim")]
        assert "FOR UPDATE SKIP LOCKED" in claim[0]
    assert "SKIP LOCKED" not in golden_text("sqlite")  # one writer: no row locks to skip


def test_mysql_and_mariadb_dialect_names_send_the_same_statements():
    # the anchor trap: MySQL-only SQL silently dropped under the "mariadb" dialect name; only
    # the DDL differs (the no-pad binary collation has a different name on each server),
    # deletions by key that say which keys went (MariaDB has DELETE ... RETURNING, MySQL
    # does not; an ack by id reads its rows through the primary key first on both), and the
    # acks of sqldelay's own transactions, which fail at once where they would wait for a lock
    # (MariaDB sets the DELETE's lock wait to none; a MySQL server cannot, and locks the
    # messages' keys first with a read that does not wait). Both read the group heads' ids
    # in a derived table, then lock them by primary key, passing over those held.
    def dml(name):
        return [sql for label, sql in emitted(name)
                if not label.startswith(("ddl", "drop which", "ack retried",
                                         "ack_many retried"))]

    assert dml("mysql") == dml("mariadb")
    [heads] = [sql for sql in dml("mysql") if "(SELECT (SELECT delayed_queue.id" in sql]
    assert " AS heads INNER JOIN delayed_queue FORCE INDEX (PRIMARY)" in heads
    assert heads.endswith(" FOR UPDATE SKIP LOCKED")
    unwaiting = [sql for label, sql in emitted("mariadb") if " retried " in f"{label} "]
    assert len(unwaiting) == 2 and all(sql.startswith(
        "SET STATEMENT innodb_lock_wait_timeout=0 FOR DELETE ") for sql in unwaiting)
    nowait = [sql for label, sql in emitted("mysql") if " retried " in f"{label} "]
    assert [(sql.split()[0], sql.endswith(" FOR UPDATE NOWAIT")) for sql in nowait] == [
        ("SELECT", True), ("DELETE", False)] * 2
    assert all(" FORCE INDEX (delayed_queue_kind_key_uq) " in sql for sql in nowait[::2])
    returning = [sql for label, sql in emitted("mariadb") if label.startswith("drop which")]
    assert "RETURNING delayed_queue.pkey" in returning[0]
    locking = [sql for label, sql in emitted("mysql") if label.startswith("drop which")]
    assert locking[0].startswith("SELECT") and locking[0].endswith("FOR UPDATE")
