"""SQL Server: the SQL the DAO sends, checked without a server (golden text + sqlglot's tsql).

Whether SQL Server accepts and runs these statements is proven only by the conformance suite
against a live server (tests/conftest.py starts one when a Docker engine is reachable).
"""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa
import sqlglot
from sqlalchemy.dialects import mssql

from sqldelay import DelayedQueue
from sqldelay.dialects import ErrorKind, OfferRow, dao_class_for
from sqldelay.dialects.mssql import MSSQLQueueDao
from sqldelay.errors import InvalidArgumentError
from sqldelay.messages import Message, OfferOutcome
from sqldelay.schema import dead_letter_table, queue_table

from .dao_recorder import (
    RecordingConnection,
    ddl,
    existing_row,
    flow_recordings,
    history_recordings,
    parses,
    render,
)

DIALECT = mssql.dialect()
PARAMETER_LIMIT = 2100


@pytest.fixture
def dao() -> MSSQLQueueDao:
    return MSSQLQueueDao(queue_table(sa.MetaData(), "dq"))


def sent(conn: RecordingConnection) -> list[str]:
    return [render(stmt, params, DIALECT) for stmt, params in conn.executed]


def assert_tsql(statements: list[str]) -> None:
    for sql in statements:
        assert parses(sql, "tsql"), sql


def test_registered_under_the_dialect_name():
    assert dao_class_for(DIALECT) is MSSQLQueueDao


def test_schema_ddl(dao):
    statements = ddl(dao.table, DIALECT)
    assert statements == [
        "CREATE TABLE dq ( id BIGINT NOT NULL IDENTITY, "
        "pkind NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL, "
        "pkey NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL, "
        "payload VARBINARY(MAX) NOT NULL, scheduled_at BIGINT NOT NULL, "
        "scheduled_at_initially BIGINT NOT NULL, lock_uuid VARCHAR(36) NULL, "
        "created_at BIGINT NOT NULL, deliveries INTEGER NOT NULL, "
        "priority INTEGER NOT NULL DEFAULT 0, "
        "group_key NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL, "
        "enqueued_by NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL, "
        "claimed_by NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL, "
        "trace_context VARCHAR(512) NULL, PRIMARY KEY (id) )",
        "CREATE INDEX dq_kind_due_ix ON dq (pkind, scheduled_at, id)",
        "CREATE INDEX dq_kind_group_ix ON dq (pkind, group_key, priority DESC, "
        "scheduled_at_initially, id)",
        "CREATE UNIQUE INDEX dq_kind_key_uq ON dq (pkind, pkey)",
        "CREATE INDEX dq_kind_lock_ix ON dq (pkind, lock_uuid)",
        "CREATE INDEX dq_kind_prio_ix ON dq (pkind, priority DESC, scheduled_at, id)",
    ]
    assert_tsql(statements)


def test_dead_letter_ddl_holds_2000_characters_of_any_text(dao):
    # 2000 characters outside the BMP take 4000 UTF-16 units
    dead = dead_letter_table(dao.table.metadata, dao.table.name)
    statement = ddl(dead, DIALECT)[0]
    assert statement == (
        "CREATE TABLE dq_dead ( id BIGINT NOT NULL IDENTITY, "
        "pkind NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL, "
        "pkey NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL, "
        "payload VARBINARY(MAX) NOT NULL, scheduled_at_initially BIGINT NOT NULL, "
        "created_at BIGINT NOT NULL, attempts INTEGER NOT NULL, "
        "last_error NVARCHAR(4000) NULL, failed_at BIGINT NOT NULL, "
        "priority INTEGER NOT NULL DEFAULT 0, "
        "group_key NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL, "
        "enqueued_by NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL, PRIMARY KEY (id) )"
    )
    assert_tsql([statement])


def test_offer_locks_by_table_hint_then_inserts_and_updates(dao):
    conn = RecordingConnection(DIALECT, results=[
        [existing_row(pkey="same", payload=b"p", scheduled_at_initially=10),
         existing_row(pkey="moved", payload=b"p", scheduled_at_initially=10, row_id=2)],
    ])
    rows = [OfferRow("new", b"p", 10, True), OfferRow("same", b"p", 10, True),
            OfferRow("moved", b"p", 20, True)]
    assert dao.offer(conn, "q|json", rows, 5) == [
        OfferOutcome.CREATED, OfferOutcome.IGNORED, OfferOutcome.UPDATED]
    statements = sent(conn)
    assert statements == [
        "SELECT dq.pkey, dq.payload, dq.scheduled_at_initially, dq.priority, dq.group_key, "
        "dq.id FROM dq WITH (UPDLOCK, HOLDLOCK) "
        "WHERE dq.pkind = :b_kind AND dq.pkey IN (:keys_1, :keys_2, :keys_3)",
        "INSERT INTO dq (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, "
        "created_at, deliveries, priority, group_key) VALUES (:pkind_m0, :pkey_m0, :payload_m0, "
        ":scheduled_at_m0, :scheduled_at_initially_m0, :lock_uuid_m0, :created_at_m0, "
        ":deliveries_m0, :priority_m0, :group_key_m0)",
        "UPDATE dq SET payload=:p, scheduled_at=:a, scheduled_at_initially=:a, "
        "lock_uuid=:lock_uuid, created_at=:created_at, deliveries=:deliveries, priority=:r, "
        "group_key=:g WHERE dq.pkind = :pkind_1 AND dq.id = :i",
    ]
    assert "FOR UPDATE" not in " ".join(statements)
    assert_tsql(statements)


def test_a_full_offer_chunk_is_one_insert_statement_under_the_parameter_limit(dao):
    chunk = [OfferRow(f"k{i}", b"p", 1, False) for i in range(dao.offer_chunk)]
    conn = RecordingConnection(DIALECT)
    dao.offer(conn, "q|json", chunk, 0, actor="shop")  # naming the producer: a value more
    (select, select_params), (insert, _) = conn.executed
    # the whole chunk is one multi-row INSERT (inserted all or nothing) under the limit
    per_row = len(insert.compile(dialect=DIALECT).params) // dao.offer_chunk
    assert dao.offer_chunk * per_row < PARAMETER_LIMIT <= (dao.offer_chunk + 1) * per_row
    expanded = select.compile(dialect=DIALECT).construct_expanded_state(select_params)
    assert len(expanded.parameters) < PARAMETER_LIMIT


def test_claim_is_one_statement_with_table_hints(dao):
    # OUTPUT rows: id, key, payload, due, initially, created, attempt, priority, group,
    # enqueued_by, the lock and holder before the claim
    claimed = [(7, "b", b"pb", 30, 30, 1, 1, 0, None, None, None, None, None),
               (3, "a", b"pa", 20, 20, 1, 2, 0, None, "shop", "old-lock", "w1"),
               (5, "c", b"pc", 40, 40, 1, 1, 9, None, None, None, None, None)]
    conn = RecordingConnection(DIALECT, results=[claimed])
    rows = dao.claim(conn, "q|json", 100, 3, "lock-1", 400)
    assert [(r.id, r.key, r.payload, r.due_ms, r.deliveries) for r in rows] == [
        (5, "c", b"pc", 40, 1), (3, "a", b"pa", 20, 2), (7, "b", b"pb", 30, 1)
    ]  # claim order (priority, then due time), whatever OUTPUT's order
    assert (rows[1].enqueued_by, rows[1].previous_lock, rows[1].previous_holder) == (
        "shop", "old-lock", "w1")
    ((stmt, params),) = conn.executed
    assert params == {"limit": 3, "b_kind": "q|json", "b_now": 100, "lock": "lock-1",
                      "until": 400}
    statements = sent(conn)
    assert statements == [
        "WITH picked AS (SELECT TOP (:limit) id, pkey, payload, scheduled_at, "
        "scheduled_at_initially, created_at, deliveries, lock_uuid, priority, group_key, "
        "enqueued_by, claimed_by, trace_context "
        "FROM dq WITH (ROWLOCK, UPDLOCK, READPAST) "
        "WHERE pkind = :b_kind AND scheduled_at <= :b_now AND NOT (EXISTS (SELECT * "
        "FROM dq_settings WHERE dq_settings.pkind = :b_kind AND (dq_settings.paused != 0 OR "
        "dq_settings.has_groups != 0 OR dq_settings.rate_limit IS NOT NULL OR "
        "dq_settings.max_in_flight IS NOT NULL))) ORDER BY priority DESC, scheduled_at, id) "
        "UPDATE picked SET lock_uuid = :lock, scheduled_at = :until, "
        "deliveries = deliveries + 1 "
        "OUTPUT inserted.id, inserted.pkey, inserted.payload, deleted.scheduled_at, "
        "inserted.scheduled_at_initially, inserted.created_at, inserted.deliveries, "
        "inserted.priority, inserted.group_key, inserted.enqueued_by, deleted.lock_uuid, "
        "deleted.claimed_by, inserted.trace_context"]
    assert_tsql(statements)


def test_claim_binds_the_kind_as_national_text(dao):
    kind = dao._claim_statement(("guard",), False).compile(dialect=DIALECT).binds["b_kind"].type
    assert isinstance(kind.dialect_impl(DIALECT), sa.Unicode)



def test_a_rate_limit_is_written_only_where_it_changes(dao):
    # setting the limit a queue already has must not refill its bucket: the UPDATE of the
    # settings row carries the condition itself, so a concurrent setter sees the other's write
    recorded = [(stmt, params) for label, stmt, params in flow_recordings(dao, DIALECT, "q|json")
                if label.startswith("rate limit")]
    update, params = recorded[-1]
    sql = render(update, params, DIALECT)
    assert sql.startswith("UPDATE dq_settings SET rate_limit=")
    assert sql.endswith(" WHERE dq_settings.pkind = :pkind_1 AND (dq_settings.rate_limit IS NULL "
                        "OR dq_settings.rate_limit != :rate_limit_1 OR "
                        "dq_settings.rate_period_ms IS NULL OR "
                        "dq_settings.rate_period_ms != :rate_period_ms_1)")
    compiled = update.compile(dialect=DIALECT)
    assert (compiled.params["rate_limit_1"], compiled.params["rate_period_ms_1"]) == (10, 1000)
    assert_tsql([render(stmt, params, DIALECT) for stmt, params in recorded])

def test_flow_control_statements_parse(dao):
    # pause, limits and groups: every statement of a controlled claim, of freeing and
    # extending a group and of a settings change, compiled here and read by sqlglot
    recorded = flow_recordings(dao, DIALECT, "q|json")
    statements = [render(stmt, params, DIALECT) for _, stmt, params in recorded]
    assert len(statements) >= 16
    assert_tsql(statements)
    locks = [s for s in statements if "dq_groups" in s and s.startswith("SELECT")]
    assert any("WITH (UPDLOCK, ROWLOCK, READPAST)" in s for s in locks)  # SKIP LOCKED
    # a grouped claim passes over a group whose first message another transaction holds: the
    # heads are locked with READPAST, the subquery finding them reads without it (it would
    # find the group's next message in the head's stead)
    heads = [s for s in statements if s.startswith("SELECT") and "dq.id IN (SELECT (" in s]
    assert heads and all(s.count("READPAST") == 1 and
                         "FROM dq WITH (UPDLOCK, ROWLOCK, READPAST) WHERE dq.id IN" in s
                         for s in heads)
    assert not any("FOR UPDATE" in s for s in statements)
    # a condition is no value in a T-SQL select list: the walk reads whether a group has its
    # row as 1 or 0
    walks = [s for s in statements if " AS known" in s]
    assert walks and all("END AS known" in s for s in walks)


def test_history_statements_parse(dao):
    # a queue that keeps history: who offered and who claims are written with the message,
    # events go in one multi-row insert, and deletions say which keys went in the statement
    recorded = {label: render(stmt, params, DIALECT)
                for label, stmt, params in history_recordings(dao, DIALECT, "q|json", [[]])}
    # FROM is optional after DELETE in T-SQL and SQLAlchemy writes it; sqlglot's grammar
    # reads an OUTPUT clause only in the form without it
    assert_tsql([s.replace("DELETE FROM dq OUTPUT", "DELETE dq OUTPUT")
                 for s in recorded.values()])
    assert "enqueued_by" in recorded["offer by 1"]
    assert "claimed_by = :actor" in recorded["claim by 0"]
    assert "deleted.claimed_by" in recorded["claim by 0"]  # the holder whose lock ran out
    assert recorded["ack_many which 0"].startswith("DELETE FROM dq OUTPUT deleted.pkey WHERE")
    assert recorded["drop which 0"].startswith("DELETE FROM dq OUTPUT deleted.pkey WHERE")
    assert "WITH (UPDLOCK, ROWLOCK)" in recorded["clear batch 0"]
    assert recorded["prune 0"].startswith("SELECT TOP 500 dq_history.id")


def test_freeing_many_groups_stays_under_the_parameter_limit(dao):
    # an ack_many of grouped messages frees their groups (an update, then a delete of the
    # emptied ones), the names in lists of at most in_list_max
    conn = RecordingConnection(DIALECT)
    dao.free_groups(conn, "q|json", "lock-1", [f"g{i}" for i in range(2500)])
    sizes = [len(stmt.compile(dialect=DIALECT).construct_expanded_state(params or {})
                 .parameters) for stmt, params in conn.executed]
    assert len(sizes) == 2 * math.ceil(2500 / dao.in_list_max) and max(sizes) < PARAMETER_LIMIT


def test_ack_many_splits_ids_under_the_parameter_limit(dao):
    conn = RecordingConnection(DIALECT, rowcount=1)
    ids = list(range(4500))
    assert dao.ack_many(conn, "lock-1", ids) == 3
    sizes = [len(params["ids"]) for _, params in conn.executed]
    assert sizes == [2000, 2000, 500]
    assert all(n + 1 < PARAMETER_LIMIT for n in sizes)
    assert_tsql(sent(conn))


def test_reads_and_small_writes(dao):
    conn = RecordingConnection(DIALECT)
    dao.ack(conn, 1, "lock-1")
    for stmt in (dao.move_locked(1, "lock-1", 50, keep_lock=False),
                 dao.move_locked(1, "lock-1", 50, keep_lock=True),
                 dao.select_by_key("q|json", "k"), dao.exists_key("q|json", "k"),
                 dao.delete_key("q|json", "k"), dao.delete_kind("q|json"),
                 dao.select_stats("q|json", 50), dao.select_stats_by_kind(50),
                 dao.select_page("q|json", "scheduled", 50, 10, "a_b", (40, 7))):
        conn.execute(stmt)
    dao.store_trace_context(conn, "q|json", ["k"], "00-0af7651916cd43dd-b7ad6b71-01")
    statements = sent(conn)
    assert statements[:7] == [
        "DELETE FROM dq WHERE dq.id = :id AND dq.lock_uuid = :lock",
        "UPDATE dq SET scheduled_at=:scheduled_at, lock_uuid=:lock_uuid "
        "WHERE dq.id = :id_1 AND dq.lock_uuid = :lock_uuid_1",
        "UPDATE dq SET scheduled_at=:scheduled_at WHERE dq.id = :id_1 "
        "AND dq.lock_uuid = :lock_uuid_1",
        "SELECT dq.id, dq.pkind, dq.pkey, dq.payload, dq.scheduled_at, "
        "dq.scheduled_at_initially, dq.lock_uuid, dq.created_at, dq.deliveries, dq.priority, "
        "dq.group_key, dq.enqueued_by, dq.claimed_by, dq.trace_context FROM dq "
        "WHERE dq.pkind = :pkind_1 AND dq.pkey = :pkey_1",
        "SELECT :param_1 AS anon_1 FROM dq WHERE dq.pkind = :pkind_1 AND dq.pkey = :pkey_1",
        "DELETE FROM dq WHERE dq.pkind = :pkind_1 AND dq.pkey = :pkey_1",
        "DELETE FROM dq WHERE dq.pkind = :pkind_1",
    ]
    assert statements[7].startswith("SELECT coalesce(sum(CASE WHEN (dq.scheduled_at <= ")
    assert_tsql(statements)


def test_an_extension_judges_an_expired_lock_in_its_own_statement(dao):
    # an expired lock (scheduled_at <= now) of a grouped message, or of a message of a queue
    # under a concurrency cap, is not extended: another message may hold its group's turn or
    # its place under the cap by then
    grouped = render(dao.extend_locked("q|json", 1, "lock-1", 90, 50, True), {}, DIALECT)
    loose = render(dao.extend_locked("q|json", 1, "lock-1", 90, 50, False), {}, DIALECT)
    held = ("UPDATE dq SET scheduled_at=:scheduled_at WHERE dq.id = :id_1 "
            "AND dq.lock_uuid = :lock_uuid_1 AND ")
    assert grouped == held + "dq.scheduled_at > :scheduled_at_1"
    assert loose == held + ("(dq.scheduled_at > :scheduled_at_1 OR NOT (EXISTS (SELECT * "
                            "FROM dq_settings WHERE dq_settings.pkind = :pkind_1 AND "
                            "dq_settings.max_in_flight IS NOT NULL)))")
    params = dao.extend_locked("q|json", 1, "lock-1", 90, 50, False).compile(
        dialect=DIALECT).params
    assert (params["scheduled_at"], params["scheduled_at_1"], params["pkind_1"]) == (
        90, 50, "q|json")
    kind = dao.extend_locked("q|json", 1, "lock-1", 90, 50, False).compile(
        dialect=DIALECT).binds["pkind_1"].type
    assert isinstance(kind.dialect_impl(DIALECT), sa.Unicode)  # as the settings' key is
    assert_tsql([grouped, loose])


def test_keys_ending_in_a_space_are_refused_before_anything_is_sent():
    # no server behind this URL: a call that reached the database would fail differently
    url = "mssql+pyodbc://sa:pw@127.0.0.1:1/none?driver=ODBC+Driver+18+for+SQL+Server"
    queue = DelayedQueue(sa.create_engine(url), "q")
    calls = [lambda: queue.offer_many([Message("ok", 1), Message("key ", 1)]),
             lambda: queue.get("key "), lambda: queue.contains("key "),
             lambda: queue.drop("key ")]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="trailing spaces"):
            call()


def test_the_parser_rejects_broken_tsql():
    # the sqlglot checks above would prove nothing if the grammar accepted anything
    with pytest.raises(sqlglot.errors.ParseError):
        parses("UPDATE picked SET lock_uuid = OUTPUT inserted.id", "tsql")


# ---- error classification, with errors built the way pyodbc builds them ----------------------
# pyodbc raises <class>(sqlstate, "[sqlstate] [driver][SQL Server]text (native) (function)")

def pyodbc_error(cls_name: str, sqlstate: str, text: str, native: int) -> sa.exc.DBAPIError:
    pyodbc = pytest.importorskip("pyodbc", reason="pyodbc needs unixODBC (libodbc2)")
    message = (f"[{sqlstate}] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]{text} "
               f"({native}) (SQLExecDirectW)")
    orig = getattr(pyodbc, cls_name)(sqlstate, message)
    return sa.exc.DBAPIError.instance("stmt", None, orig, pyodbc.Error)


@pytest.mark.parametrize(("cls_name", "sqlstate", "text", "native", "kind"), [
    ("IntegrityError", "23000", "Violation of UNIQUE KEY constraint 'uq'. Cannot insert "
     "duplicate key in object 'dbo.dq'. The duplicate key value is (q|json, 5).", 2627,
     ErrorKind.DUPLICATE_KEY),
    ("IntegrityError", "23000", "Cannot insert duplicate key row in object 'dbo.dq' with "
     "unique index 'dq_kind_key_uq'. The duplicate key value is (7).", 2601,
     ErrorKind.DUPLICATE_KEY),
    ("Error", "40001", "Transaction (Process ID 55) was deadlocked on lock resources with "
     "another process and has been chosen as the deadlock victim. Rerun the transaction.",
     1205, ErrorKind.TRANSIENT),
    ("Error", "HY000", "Lock request time out period exceeded.", 1222, ErrorKind.TRANSIENT),
    ("Error", "HY000", "Snapshot isolation transaction aborted due to update conflict. You "
     "cannot use snapshot isolation to access table 'dbo.dq' directly or indirectly in "
     "database 'test' to update, delete, or insert the row that has been modified or deleted "
     "by another transaction. Retry the transaction or change the isolation level for the "
     "update/delete statement.", 3960, ErrorKind.TRANSIENT),
    # Azure SQL's transient faults, as its documentation lists them
    ("OperationalError", "HY000", "Database 'test' on server 'srv' is not currently "
     "available. Please retry the connection later.", 40613, ErrorKind.TRANSIENT),
    ("OperationalError", "HY000", "The service is currently busy. Retry the request after 10 "
     "seconds.", 40501, ErrorKind.TRANSIENT),
    ("Error", "HY000", "Resource ID : 1. The request limit for the database is 60 and has been "
     "reached.", 10928, ErrorKind.TRANSIENT),
    ("Error", "HY000", "Resource ID : 1. The min guarantee is 0, max limit is 60 and the "
     "current usage for the database is 60. However, the server is currently too busy to "
     "support requests greater than 60 for this database.", 10929, ErrorKind.TRANSIENT),
    *[("Error", "HY000", "The operation cannot be processed because there are too many "
       "operations in progress for the elastic pool.", code, ErrorKind.TRANSIENT)
      for code in (49918, 49919, 49920)],
    ("ProgrammingError", "42S02", "Invalid object name 'dq'.", 208, ErrorKind.MISSING_TABLE),
    ("ProgrammingError", "42000", "Incorrect syntax near 'x'.", 102, ErrorKind.OTHER),
])
def test_classify(cls_name, sqlstate, text, native, kind):
    assert MSSQLQueueDao.classify(pyodbc_error(cls_name, sqlstate, text, native)) is kind


def test_classify_ignores_numbers_inside_the_message_text():
    # "(2627)" in a key value is not the error number; the number before the function name is
    err = pyodbc_error("ProgrammingError", "42000", "Something about key (2627).", 102)
    assert MSSQLQueueDao.classify(err) is ErrorKind.OTHER


def test_the_server_time_statement_parses():
    sql = str(MSSQLQueueDao.server_time().compile(dialect=DIALECT))
    assert "SYSUTCDATETIME()" in sql and "DATEDIFF_BIG" in sql
    assert_tsql([sql])


def test_a_heartbeat_renews_a_claim_batch_in_one_statement_that_parses(dao):
    sql = render(dao.renew_locks(2), {"lock": "l", "ids": [1, 2], "now": 5, "until": 9},
                 DIALECT)
    assert sql == ("UPDATE dq SET scheduled_at=:until WHERE dq.lock_uuid = :lock "
                   "AND dq.id IN (:ids_1, :ids_2) AND dq.scheduled_at > :now")
    assert_tsql([sql])


def test_acks_riding_on_a_claim_go_first_as_acks_of_their_own(dao):
    # SQL Server carries no ack in its claim statement (acks_in_claim): each finished batch
    # is acked by its lock, then the claim runs as ever
    conn = RecordingConnection(DIALECT, results=[[], [], []])
    assert dao.claim_acking(conn, "q|json", 100, 3, "lock-3", 400, ("guard",), None,
                            [("lock-1", [7, 8]), ("lock-2", [9])]) == []
    statements = sent(conn)
    assert [params for _, params in conn.executed[:2]] == [
        {"lock": "lock-1", "ids": [7, 8]}, {"lock": "lock-2", "ids": [9]}]
    assert all(s.startswith("DELETE FROM dq") for s in statements[:2])
    assert statements[2].startswith("WITH picked AS (SELECT TOP (:limit)")
    assert not dao.acks_in_claim
    assert_tsql(statements)
