"""Run QueueDao operations without a database: record every statement, answer with set rows.

Golden-SQL tests for databases that do not run here (SQL Server, Oracle) drive the real DAO
operations through this stand-in for a Connection, so what they check is what the DAO sends,
including statements built inside operations. ``render`` turns a recorded statement into the
SQL text the dialect sends (IN-lists expanded), ready to compare or to hand to sqlglot.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from types import SimpleNamespace

import sqlalchemy as sa
import sqlglot
from sqlalchemy.schema import CreateIndex, CreateTable

from sqldelay.dialects import OfferRow
from sqldelay.dialects.flow import Control
from sqldelay.history import EventKind, Recorder
from sqldelay.schema import history_table, index_made_on


class FakeResult:
    def __init__(self, rows, rowcount):
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self):
        return iter(self._rows)

    def fetchall(self):
        return list(self._rows)

    all = fetchall

    def fetchmany(self, size):
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    def close(self):
        pass

    def first(self):
        return self._rows[0] if self._rows else None

    def scalar(self):
        first = self.first()
        return None if first is None else first[0]

    def scalars(self):
        return FakeResult([r[0] for r in self._rows], self.rowcount)


class FakeCursor:
    """A driver cursor (used by the Oracle claim); records its SQL and fetch settings."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.arraysize = 100
        self.prefetchrows = 2
        self.closed = False

    def execute(self, sql, params):
        self.recorder.cursor_calls.append(
            SimpleNamespace(sql=sql, params=params, arraysize=self.arraysize,
                            prefetchrows=self.prefetchrows))
        self._rows = list(self.recorder.next_rows())

    def fetchmany(self, size):
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    def close(self):
        self.closed = True


class RecordingConnection:
    """Duck-types the parts of sa.Connection the DAOs use; ``results`` answers, in order."""

    def __init__(self, dialect: sa.Dialect, results=(), rowcount: int = 1):
        self.dialect = dialect
        self.executed: list[tuple[object, object]] = []
        self.cursor_calls: list[SimpleNamespace] = []
        self.cursors: list[FakeCursor] = []
        self.savepoints: list[str] = []
        self._results = list(results)
        self._rowcount = rowcount
        self.connection = self  # conn.connection.cursor() reaches the driver cursor

    def next_rows(self):
        return self._results.pop(0) if self._results else []

    def execute(self, stmt, params=None):
        self.executed.append((stmt, params))
        return FakeResult(self.next_rows(), self._rowcount)

    def exec_driver_sql(self, sql: str, params=None):
        self.executed.append((sql, params))
        return FakeResult(self.next_rows(), self._rowcount)

    def in_transaction(self) -> bool:
        return True

    def get_execution_options(self) -> dict:
        return {}

    @property
    def info(self) -> dict:
        return {}

    @contextmanager
    def begin_nested(self):
        """A savepoint; how each one ended is kept in ``savepoints``."""
        try:
            yield
        except Exception:
            self.savepoints.append("rolled back")
            raise
        self.savepoints.append("released")

    def cursor(self) -> FakeCursor:
        cursor = FakeCursor(self)
        self.cursors.append(cursor)
        return cursor


def existing_answers(dao, rows: list) -> list:
    """The answers to an offer's reads of the existing ``rows`` of its keys: MySQL and
    MariaDB read the rows' ids first, without locks, then the rows by id."""
    if dao.name in ("mysql", "mariadb"):
        return [[(i + 1,) for i in range(len(rows))], rows]
    return [rows]


def existing_row(pkey: str, payload: bytes, scheduled_at_initially: int, priority: int = 0,
                 group_key: str | None = None, row_id: int = 1) -> tuple:
    """A row of the offer's read of existing messages, its columns in the read's order."""
    return (pkey, payload, scheduled_at_initially, priority, group_key, row_id)


def render(stmt, params, dialect: sa.Dialect) -> str:
    """The SQL text of an executed statement (first parameter set of an executemany)."""
    if isinstance(stmt, str):  # sent as driver SQL, compiled already; its %(name)s
        # placeholders (MySQL's) shown as :name, as the other statements' are
        return " ".join(re.sub(r"%\((\w+)\)s", r":\1", stmt).split())
    many = isinstance(params, list)
    if many:
        params = params[0]
    params = params or {}  # a statement with its values built in (multi-row INSERT)
    keys = list(params) if isinstance(stmt, sa.Insert) else None
    compiled = stmt.compile(dialect=dialect, column_keys=keys, for_executemany=many)
    return " ".join(compiled.construct_expanded_state(params).statement.split())


def ddl(table: sa.Table, dialect: sa.Dialect) -> list[str]:
    """The DDL of ``table`` and of the indexes it has on ``dialect``'s database."""
    indexes = sorted((i for i in table.indexes if index_made_on(i, dialect)),
                     key=lambda i: i.name)
    stmts = [CreateTable(table), *(CreateIndex(i) for i in indexes)]
    return [" ".join(str(s.compile(dialect=dialect)).split()) for s in stmts]


def parses(sql: str, grammar: str) -> bool:
    """True when sqlglot's grammar for the database reads ``sql`` as exactly one statement."""
    parsed = sqlglot.parse(sql, read=grammar, error_level=sqlglot.ErrorLevel.RAISE)
    return len(parsed) == 1 and parsed[0] is not None


# settings rows as their read returns them: paused, has_groups, rate_limit, rate_period_ms,
# tokens_milli, refilled_at, max_in_flight.
# A queue under every control at once: groups, a rate limit with tokens left, a cap
SETTINGS_ROW = (0, 1, 10, 1000, 5000, 0, 3)
RATE_ROW = (0, 0, 10, 1000, 5000, 0, None)  # a rate limit alone


def flow_recordings(dao, dialect: sa.Dialect, kind: str) -> list[tuple[str, object, object]]:
    """(label, statement, parameters) of every statement flow control sends, in order: a
    controlled claim of a grouped, rate-limited, capped queue (the plain claim finds the queue
    controlled, the settings are read, locked, the in-flight messages counted, the first due
    messages walked, the groups locked (their rows made first where they have rows), the heads
    and the ungrouped messages locked, all marked), the claim of a rate-limited queue charging
    its bucket at the end (and on credit, without reading the settings first), the ack of
    grouped messages freeing their groups, the freeing and extending of a group (nothing on
    PostgreSQL, which keeps no group rows), and changes of settings."""
    out = []

    def record(label, op, results=()):
        conn = RecordingConnection(dialect, results)
        op(conn)
        out.extend((f"{label} {i}", stmt, params) for i, (stmt, params) in enumerate(conn.executed))

    claimed = (7, "k", b"{}", 10, 10, 5, 0, 3, "g1", None, None, None, None)
    postgres = dao.name == "postgresql"
    # making settings rows: PostgreSQL in one statement (ON CONFLICT), the others read, then
    # insert what they did not find
    absent = [[]] if postgres else [[], []]
    if postgres:
        # the walk locks group g1 (an advisory lock) and meets an ungrouped message; then
        # the heads and the ungrouped messages are claimed and marked in one statement,
        # under the claim's planner settings (in the caller's transaction: set, then
        # back; in the claim's own, set by the walk)
        settings = [("on", "on", "off", "off", "auto")]
        # groups locked (and how many), walked, ungrouped met
        won = [('["g1"]', 1, 2, True, "read committed")]
        grouped_claim = [won, settings, [claimed], []]
    else:
        # the walk meets group g1, whose row is not made yet, and an ungrouped message; the
        # row is made and locked, the heads and the ungrouped messages read, then marked
        walked = [("g1", 0), (None, 0)]  # group_key, known
        grouped_claim = [walked, *absent, [("g1",)], [claimed], []]
    record("controlled claim", lambda c: dao.claim(c, kind, 100, 10, "L", 400), [
        [], [SETTINGS_ROW], [SETTINGS_ROW], [(1,)], *grouped_claim])
    if dao.groups_in_claim:  # a queue with groups alone, so at its last claim
        grouped = Control(False, True, None, None, None, None, None)
        record("grouped claim", lambda c: dao.claim_checked(
            c, kind, 100, 10, "L", 400, last=grouped, optimistic=True),
            [[(*won[0], "off", "off", "off", "off", "force_generic_plan")],
             [claimed]])  # settings set by the walk
    # a queue with a rate limit alone, so at its last claim: claimed with its bucket in one
    # statement where the dialect can; elsewhere the settings read, the plain claim, and the
    # bucket refilled and charged by one conditional UPDATE
    rate = Control(False, False, 10, 1000, 5000, 0, None)
    taken = [(7, "k", b"{}", 10, 10, 5, 0, 0, None, None, None, None, None)]
    record("rate-limited claim", lambda c: dao.claim_checked(
        c, kind, 100, 10, "L", 400, last=rate, optimistic=True),
        [taken] if dao.bucket_in_claim else [[RATE_ROW], taken])
    if dao.bucket_in_claim:  # run again after a conflict: the settings locked first
        record("rate-limited claim, locked", lambda c: dao.claim_checked(
            c, kind, 100, 10, "L", 400, last=rate, optimistic=False), [taken])
    else:  # its bucket had tokens to spare: claimed on credit
        spare = Control(False, False, 1000, 1000, 1_000_000, 0, None)
        record("claim on credit", lambda c: dao.claim_checked(
            c, kind, 100, 10, "L", 400, last=spare, optimistic=True), [taken])
    record("ack freeing groups", lambda c: dao.ack_freeing(c, kind, "L", [7, 8], ["g1", "g2"]),
           [[(2,)]])
    record("free groups", lambda c: dao.free_groups(c, kind, "L", ["g1", "g2"]))
    record("extend group", lambda c: dao.extend_group(c, kind, "L", "g1", 900))
    record("settings", lambda c: dao.write_settings(c, kind, paused=1), absent)
    # a rate limit set as ``rate_limit_op`` sets it: written only where it changes
    record("rate limit", lambda c: dao.write_settings(
        c, kind, rate_limit=10, rate_period_ms=1000, tokens_milli=10_000, refilled_at=5,
        unless_same=("rate_limit", "rate_period_ms")), absent)
    # what the queues tables of the CLI and the HTTP API show: many queues' settings at once
    record("settings of queues", lambda c: dao.read_controls(c, [kind, "b|json"]), [[]])
    record("settings of every queue", lambda c: dao.read_controls(c), [[]])
    return out


def history_recordings(dao, dialect: sa.Dialect, kind: str,
                       offered=()) -> list[tuple[str, object, object]]:
    """(label, statement, parameters) of every statement a queue that keeps history sends
    beyond a plain queue's, in order: an offer and a claim naming who made them, the events
    written, the deletions that say which keys went (ack_many, drop, a batch of clear), the
    history read back and a batch of pruning. ``offered`` answers the offer's reads."""
    recorder = Recorder(history_table(dao.table.metadata, dao.table.name), dao)
    key_rows = [SimpleNamespace(id=7, pkey="k")]
    out = []

    def record(label, op, results=()):
        conn = RecordingConnection(dialect, results)
        op(conn)
        sent = [*((c.sql, c.params) for c in conn.cursor_calls), *conn.executed]
        out.extend((f"{label} {i}", stmt, params) for i, (stmt, params) in enumerate(sent))

    def with_rows(rows):  # DELETE ... RETURNING answers with keys, a locking read with rows
        return [[("k",)]] if dao.delete_returning else [rows]

    record("offer by", lambda c: dao.offer(c, kind, [OfferRow("new", b"{}", 1000, True)], 1,
                                           actor="shop"), offered)
    record("claim by", lambda c: dao.claim(c, kind, 100, 10, "L", 400, actor="w1"),
           [[(7, "k", b"{}", 10, 10, 5, 0, 0, None, "shop", "old", "w0", None)]])
    record("events", lambda c: recorder.write(c, [
        recorder.event(kind, EventKind.CLAIMED, "k", 100, actor="w1", attempt=1, detail="d"),
        recorder.event(kind, EventKind.ACKED, "k", 200, actor="w1", attempt=1)]))
    # MySQL and MariaDB read an ack's rows through the primary key first, whatever their
    # DELETE can return (``MySQLQueueDao.delete_which``)
    record("ack_many which", lambda c: dao.ack_many_which(c, "L", [7, 8]),
           [key_rows] if dao.name in ("mysql", "mariadb") else with_rows(key_rows))
    record("drop which", lambda c: dao.delete_which(c, dao.table.c.pkind == kind,
                                                     dao.table.c.pkey == "k"),
           with_rows(key_rows))
    record("clear batch", lambda c: dao.delete_kind_batch(c, kind), [key_rows])
    record("history", recorder.read_op(kind, "k"))
    record("prune", recorder.prune_op(kind, 1000, 500, dao.in_list_max), [[(1,), (2,)]])
    return out
