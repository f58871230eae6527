"""QueueDao: the statements of one database, and the portable defaults every dialect starts from.

Builders (methods returning SQLAlchemy statements) do no I/O, so golden-SQL tests need no
database. Operations (methods taking a Connection) run inside a transaction the caller owns:
they never begin, commit or retry; the engine layer does that.

A dialect subclass overrides only what its database forces, and says why in a comment; the
hooks it may set or override are listed, one line each, in ``contract.Dialect``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa

from ..errors import UnsupportedDialectError
from ..messages import OfferOutcome
from .common import AUTOCOMMIT, AnySelect, ById, ErrorKind, T, chunked
from .flow import Control, FlowControl, claim_order

if TYPE_CHECKING:
    from ..schema import MigrationOps

# "!" has no meaning in any supported database's string literals (a backslash has in MySQL's)
LIKE_ESCAPE = "!"


@dataclass(slots=True)  # not frozen: built per message offered, 4 times as fast (0.17 µs)
class OfferRow:
    key: str
    payload: bytes
    at_ms: int
    update: bool
    priority: int = 0
    group: str | None = None

    def state(self) -> tuple[bytes, int, int, str | None]:
        """What an update compares: an existing message with all of it equal is IGNORED."""
        return self.payload, self.at_ms, self.priority, self.group


@dataclass(frozen=True, slots=True)
class OfferEvents:
    """The history events an offer statement writes itself, where the dialect's can
    (``QueueDao.offer_writes_history``): into ``table``, an event of kind ``created`` or
    ``updated`` for each message the offer wrote and, where ``ignored`` is given, one of that
    kind for each it left as it was; ``details`` are the messages' details, in the order of
    the offer's rows."""

    table: sa.Table
    created: str
    updated: str
    ignored: str | None
    details: Sequence[str]


@dataclass(slots=True)
class ClaimEvents:
    """The history events a claim statement writes itself, where the dialect's can
    (``QueueDao.claim_writes_history``): into ``table``, for each message it claims, an event
    of kind ``claimed`` with detail ``claimed_detail``, after one of kind ``lock_expired``
    with detail ``expired_detail`` where the message's last holder lost its lock. ``written``
    says whether the rows the claim returned have their events written (else the caller
    writes them)."""

    table: sa.Table
    claimed: str
    lock_expired: str
    claimed_detail: str
    expired_detail: str
    written: bool = False


# what a row adds to an offer statement besides its payload, at most: a key of 200 characters
# and a kind of 100, 4 bytes each and escaped in text protocols, numbers and punctuation
ROW_OVERHEAD = 4096


@dataclass(frozen=True, slots=True)
class PayloadBudget:
    """How much payload the database takes: ``message`` bytes in one message at most (None:
    no limit short of memory), and ``statement`` bytes per offer statement, counting
    ``ROW_OVERHEAD`` for each row; ``why`` names the database's limit for error messages."""

    message: int | None
    statement: int
    why: str = ""


@dataclass(slots=True)  # not frozen: a frozen dataclass is built 7 times slower, per row
class ClaimedRow:
    id: int
    key: str
    payload: bytes
    due_ms: int  # scheduled_at before the claim: the delivery order
    scheduled_at_initially: int
    created_at: int
    deliveries: int  # after the claim: the attempt number
    priority: int = 0
    group: str | None = None
    enqueued_by: str | None = None
    # the lock and holder the row had before this claim: set when an earlier holder's lock
    # expired (a message released or never claimed has none)
    previous_lock: str | None = None
    previous_holder: str | None = None
    trace_context: str | None = None  # the producer's, where its offer stored one


def in_claim_order(rows: Iterable[ClaimedRow]) -> list[ClaimedRow]:
    """Claimed rows in claim order, as RETURNING and OUTPUT give them in none of their own."""
    return sorted(rows, key=lambda r: (-r.priority, r.due_ms, r.id))


@dataclass(frozen=True, slots=True)
class Advice:
    """A database setting that matters to a queue, as ``sqldelay verify`` reports it:
    ``problem`` is one to fix (verify fails), otherwise a suggestion."""

    setting: str
    value: str
    text: str
    problem: bool = False


# the row number's place in the parameter names of a one-row INSERT used as a template
_ROW = "rowno"
# how many times one offer's insert may meet a key its reads did not find (``QueueDao.offer``)
_INSERT_ROUNDS = 8


def repeat_values(one_row: str, n: int) -> str:
    """The SQL of an n-row INSERT from that of the one-row INSERT ``one_row``, whose
    parameters of the row are named with ``_ROW`` (``row_name``): its VALUES group repeated,
    each time with the row's number in those names. (Compiling the n-row statement itself
    took 30 ms for 100 rows and half a second for 1,000: time an asyncio front end would
    hold its loop.)"""
    head, sep, group = one_row.partition(" VALUES ")
    assert sep and group.startswith("(") and group.endswith(")"), one_row
    return head + sep + ", ".join(group.replace(_ROW, str(i)) for i in range(n))


def row_name(name: str) -> str:
    """The name of a row's own parameter ``name`` in a template for ``repeat_values``."""
    return f"{name}_{_ROW}"


log = logging.getLogger("sqldelay")


class QueueDao(FlowControl):
    """Portable behaviour; correct on any database that has row locks and SKIP LOCKED."""

    name: ClassVar[str] = ""
    # rows per offer statement and ids per IN-list; dialects lower them to their limits
    offer_chunk: ClassVar[int] = 1000
    # payload bytes per offer statement: well under MySQL's smallest max_allowed_packet default
    offer_chunk_bytes: ClassVar[int] = 4 << 20
    in_list_max: ClassVar[int] = 1000
    # claim reads with FOR UPDATE SKIP LOCKED (False where the write lock is database-wide)
    skip_locked: ClassVar[bool] = True
    # ``claim`` sends one statement (atomic alone), and running such operations in autocommit
    # saves round trips with this database's driver
    claim_is_one_statement: ClassVar[bool] = False
    autocommit_one_statement: ClassVar[bool] = False
    # an offer of one chunk that writes nothing else tries the plain insert of every message
    # first, in a transaction of its own at the default level, where reading and locking the
    # keys before the insert costs more than a failed insert now and then
    # (``QueueBase.plan_offer``)
    inserts_first: ClassVar[bool] = False
    # ``offer`` and ``insert_new`` write the offer's history events in their own statement
    # (given ``events``), so an offer of one chunk that keeps history is one statement still
    offer_writes_history: ClassVar[bool] = False
    # offers insert through SQL compiled once per row count, the driver binding the values
    # (False where the driver needs SQLAlchemy's own parameter handling)
    precompiled_insert: ClassVar[bool] = False
    # the most bound values one statement may carry (SQLite's default limit, below what
    # PostgreSQL's and MySQL's protocols allow)
    max_parameters: ClassVar[int] = 32766
    # the largest payload the payload column takes (None: no limit short of memory)
    max_payload_bytes: ClassVar[int | None] = None
    # characters LIKE treats as wildcards besides the escape character (SQL Server adds "[")
    like_specials: ClassVar[str] = "%_"
    # the database can wake workers in other processes when a due message is offered (its
    # offer sends the wake-up; workers ``listen``); without it workers find new messages by
    # polling
    notifications: ClassVar[bool] = False
    # a worker whose handlers wait on its claims gains by making two at once (measured on
    # PostgreSQL; not on MariaDB, where two claims of one queue cost each other what they
    # gain; SQL Server and Oracle unmeasured)
    claims_side_by_side: ClassVar[bool] = False
    # the messages a queue object creates before it makes sure the table has planner
    # statistics (``gather_statistics``); None where the claim's plan does not rest on them
    statistics_after: ClassVar[int | None] = None
    # the queue tables' partial indexes are made here (``schema._Index.where``): claims read
    # unlocked messages and expired locks through two indexes, and must say which they read
    partial_indexes: ClassVar[bool] = False
    # ``claim_acking`` acks and claims in one statement (else: the acks, then the claim)
    acks_in_claim: ClassVar[bool] = False
    # ``claim_acking`` writes the claim's history events in its statement (given ``events``)
    claim_writes_history: ClassVar[bool] = False
    # ``ack_recorded`` deletes messages and writes their acked events in one statement
    ack_writes_history: ClassVar[bool] = False
    # the one-statement claim of a dialect that claims by ``claim_returning``: its claim
    # conditions and whether it names the holder
    _claim_statement: Callable[[tuple[str, ...], bool], sa.Executable]

    def __init__(self, table: sa.Table) -> None:
        self.table = t = table
        # the index claims walk: (pkind, priority DESC, scheduled_at, id)
        self.claim_index = f"{t.name}_kind_prio_ix"
        # a group's messages in the group's order: (pkind, group_key, priority DESC, …)
        self.group_index = f"{t.name}_kind_group_ix"
        self._insert_sql: dict[tuple[str, str, int, tuple[str, ...]],
                               tuple[str, list[str] | None]] = {}
        self._due_selects: dict[tuple[str, ...], AnySelect] = {}
        # in the order of ClaimedRow's fields
        self._claim_columns = (t.c.id, t.c.pkey, t.c.payload, t.c.scheduled_at,
                               t.c.scheduled_at_initially, t.c.created_at, t.c.deliveries,
                               t.c.priority, t.c.group_key, t.c.enqueued_by, t.c.lock_uuid,
                               t.c.claimed_by, t.c.trace_context)
        # built once: built per offer, the statement and its cache key took 5% of an
        # offer_many's client time on MariaDB
        self._existing = self.select_existing()
        self._ack = sa.delete(t).where(t.c.id == sa.bindparam("id"),
                                       self.held_by(sa.bindparam("lock")))
        self._ack_many = sa.delete(t).where(self.held_by(sa.bindparam("lock")),
                                            self.ids_listed())
        self._init_flow()
        mark = (self.by_id(sa.update(t).where(self.ids_listed()), t)
                .values(lock_uuid=sa.bindparam("lock"), scheduled_at=sa.bindparam("until"),
                        deliveries=t.c.deliveries + 1))
        # by whether the claim names its holder (queues that keep history)
        self._mark_claimed = {False: mark,
                              True: mark.values(claimed_by=sa.bindparam("actor"))}

    def held_by(self, lock: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]:
        """The message is claimed under ``lock`` (a condition beside its id, which finds it)."""
        return self.table.c.lock_uuid == lock

    def ids_listed(self) -> sa.ColumnElement[bool]:
        """The messages whose ids the parameter ``ids`` lists (acks, claim marks)."""
        return self.table.c.id.in_(sa.bindparam("ids", expanding=True))

    # ---- statements on rows named by id --------------------------------------------------

    def by_id(self, stmt: ById, table: sa.Table, count: int | None = None) -> ById:
        """``stmt``, a read or an update of rows of ``table`` named by id (a list of them,
        ``count`` long where known, with any other condition), reaching them through the
        primary key whatever the planner makes of the table's size (MySQL: a small table
        was read whole, each row locked or waited for)."""
        return stmt

    def delete_by_id(self, table: sa.Table, count: int,
                     *where: sa.ColumnElement[bool]) -> sa.Delete:
        """A DELETE of the rows of ``table`` meeting ``where``, which names ``count`` of
        them by id, reaching them through the primary key (as ``by_id``)."""
        return sa.delete(table).where(*where)

    def acks_of(self, count: int) -> sa.Delete:
        """The ack of ``count`` messages (parameters lock and ids), as ``delete_by_id``."""
        return self._ack_many

    # ---- database settings ---------------------------------------------------------------

    @classmethod
    def settings_advice(cls, conn: sa.Connection, table_name: str) -> list[Advice]:
        """The database's settings that matter to queue table ``table_name``, judged."""
        return []

    @classmethod
    def multi_primary(cls, conn: sa.Connection) -> bool:
        """The server is a node of a cluster where every node takes writes and a row lock
        holds on its own node only (Galera): what a claim counts under a lock, such as a
        concurrency cap's messages in flight, is not counted for the whole cluster."""
        return False

    # ---- hooks around transactions and errors -------------------------------------------

    @classmethod
    def after_create_schema(cls, conn: sa.Connection) -> None:
        """Database-wide settings the queue wants, applied by create_schema outside its
        transaction."""

    @classmethod
    def tuning_ddl(cls, table: sa.Table, preset: str) -> list[str]:
        """Statements that apply a storage preset of ``schema.TUNING_PRESETS`` to ``table``.

        None by default: MySQL/MariaDB, SQL Server, Oracle and SQLite have no per-table storage
        setting that the churn benchmark showed to help; benchmarks/README.md has their advice.
        """
        return []

    @classmethod
    def widen_error_text_op(cls, op: MigrationOps, table_name: str, online: bool) -> None:
        """Migration 0003: make ``<table>_dead.last_error`` hold ERROR_LENGTH characters of
        any text, on databases whose first column type could not (``online``: the migration
        runs against a live database, which can be inspected first). Nothing to do here."""

    def begin_write(self, conn: sa.Connection) -> None:
        """Called first in every transaction sqldelay opens to write."""

    def join_write(self, conn: sa.Connection) -> None:
        """Called first when an operation that writes joins the caller's transaction
        (``connection=``): where the database's locks must be taken before the operation's
        reads for what it reads to hold until it writes (SQLite's one write lock), take
        them. Nothing here: the operations' own locking reads do."""

    def begin_read_committed(self, conn: sa.Connection) -> None:
        """Called before ``begin_write`` in the transactions sqldelay opens whose locking
        reads may pass the end of what they take (offers of new keys, claims that may find
        fewer messages than they want, calls that free groups): where the database's default
        level locks the gaps there and deadlocks on them (MySQL's REPEATABLE READ), READ
        COMMITTED."""

    # the driver's error codes (as ``error_code`` reads them) for each kind of error
    duplicate_key_codes: ClassVar[frozenset[object]] = frozenset()
    transient_codes: ClassVar[frozenset[object]] = frozenset()
    unavailable_codes: ClassVar[frozenset[object]] = frozenset()
    missing_table_codes: ClassVar[frozenset[object]] = frozenset()
    # the transient ones that are deadlocks (counted apart: ``retry_counts``)
    deadlock_codes: ClassVar[frozenset[object]] = frozenset()

    @classmethod
    def server_time(cls) -> sa.Executable:
        """A statement whose one value is the database server's time now, in epoch
        milliseconds (``clock.DatabaseClock``): the clock every process agrees on."""
        raise UnsupportedDialectError(f"{cls.name} cannot tell its server's time")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> object:
        """The database's code for a driver error, or None."""
        return None

    @classmethod
    def classify(cls, exc: sa.exc.DBAPIError) -> ErrorKind:
        code = cls.error_code(exc)
        for codes, kind in ((cls.duplicate_key_codes, ErrorKind.DUPLICATE_KEY),
                            (cls.transient_codes, ErrorKind.TRANSIENT),
                            (cls.unavailable_codes, ErrorKind.UNAVAILABLE),
                            (cls.missing_table_codes, ErrorKind.MISSING_TABLE)):
            if code in codes:
                return kind
        return ErrorKind.OTHER

    @classmethod
    def is_deadlock(cls, exc: BaseException | None) -> bool:
        """Whether ``exc`` is the database's report of a deadlock."""
        return (isinstance(exc, sa.exc.DBAPIError) and bool(cls.deadlock_codes)
                and cls.error_code(exc) in cls.deadlock_codes)

    # ---- wake-ups (only where ``notifications`` is True) -----------------------------------

    @property
    def channel(self) -> str:
        """The name under which offers notify and workers listen (``notifier``)."""
        raise UnsupportedDialectError(f"{self.name} has no notifications")

    def listen_statement(self, channel: str | None = None) -> str:
        """The statement that makes a connection hear the notifications of ``channel``
        (default: the wake-ups' own)."""
        raise UnsupportedDialectError(f"{self.name} has no notifications")

    def wake_listeners(self, conn: sa.Connection, pkind: str) -> None:
        """Tell listening workers of ``pkind`` to claim now (sent when the transaction
        commits); nothing where there are no notifications."""

    @property
    def settled_channel(self) -> str:
        """The name under which a task's end is announced to the handles waiting for it."""
        raise UnsupportedDialectError(f"{self.name} has no notifications")

    def notify_settled(self, conn: sa.Connection, pkind: str, key: str) -> None:
        """Tell whoever waits for message ``key`` of ``pkind`` that it ended (a result row or
        a dead letter written; sent when the transaction commits); nothing where there are
        no notifications."""

    @staticmethod
    def settled_note(pkind: str, key: str) -> str:
        """The text ``notify_settled`` sends for ``key`` of ``pkind`` (the queue's name
        counted, so no two queues' keys read the same)."""
        return f"{len(pkind)}:{pkind}{key}"

    @classmethod
    def check_keys(cls, keys: Sequence[str]) -> None:
        """Refuse a key of ``keys`` this database cannot store or tell apart from another
        (before any I/O)."""

    # ---- offer ---------------------------------------------------------------------------

    def payload_budget(self, conn: sa.Connection) -> PayloadBudget:
        """The payload limits of this database (``conn`` for the ones read from the server)."""
        return PayloadBudget(self.max_payload_bytes, self.offer_chunk_bytes,
                             f"the largest value {self.name} stores in the payload column")

    @staticmethod
    def lock_order(key: str) -> str | bytes:
        """The sort key that puts keys in the order the database locks them in (its index
        order). Every offer locks its keys in this one order, so two producers of
        overlapping batches never wait for each other in a circle."""
        return key

    def offer_is_one_statement(self, rows: Sequence[OfferRow]) -> bool:
        """Whether ``offer`` of this chunk sends a single statement (atomic alone)."""
        return False

    def offer(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
              now_ms: int, actor: str | None = None,
              events: OfferEvents | None = None) -> list[OfferOutcome]:
        """Insert or update ``rows`` (distinct keys, at most ``offer_chunk``); the messages
        written say they were enqueued by ``actor`` when it is given. ``events``: given only
        where ``offer_writes_history``.

        Lock the existing rows first, so what is compared is what gets updated; insert the
        absent keys; if a concurrent producer inserted one of them in between, the duplicate
        error undoes only that statement on these databases, and the round starts again,
        reading the keys as committed now (``existing_rows``' ``current``).

        A transaction whose reads see a snapshot older than that insert (a caller's, at a
        level that reads one) may never find the key its insert meets: after
        ``_INSERT_ROUNDS`` such rounds the duplicate error is raised, with a note saying
        what to do, rather than the offer going round for ever.
        """
        met = 0
        while True:
            existing = {  # by position: a Row's attributes cost more, six a row
                key: ((bytes(payload), at, priority, group), row_id)
                for key, payload, at, priority, group, row_id
                in self.existing_rows(conn, pkind, [r.key for r in rows], current=met > 0)
            }
            new = [r for r in rows if r.key not in existing]
            changed = [r for r in rows
                       if r.key in existing and r.update and existing[r.key][0] != r.state()]
            if new:
                try:
                    self.insert_new(conn, pkind, new, now_ms, actor)
                except sa.exc.IntegrityError as exc:
                    if self.classify(exc) is not ErrorKind.DUPLICATE_KEY:
                        raise
                    met += 1
                    if met < _INSERT_ROUNDS:
                        continue
                    exc.add_note(
                        f"sqldelay: the offer's insert met a key that its reads did not find, "
                        f"{met} times: its transaction may read a snapshot taken before "
                        "another transaction inserted that key (REPEATABLE READ, SERIALIZABLE "
                        "or SNAPSHOT isolation); redo the transaction, or offer at READ "
                        "COMMITTED")
                    raise
            if changed:
                self.update_changed(conn, pkind, changed, [existing[r.key][1] for r in changed],
                                    now_ms, actor)
            created = {r.key for r in new}
            updated = {r.key for r in changed}
            return [OfferOutcome.CREATED if r.key in created
                    else OfferOutcome.UPDATED if r.key in updated
                    else OfferOutcome.IGNORED for r in rows]

    def insert_new(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                   now_ms: int, actor: str | None, events: OfferEvents | None = None) -> None:
        """Insert rows all or nothing: one multi-row statement, which a duplicate key undoes
        whole. (Driver executemany can run row by row, or split a large batch, and leave the
        rows before a failure, which the retry round would then take for someone else's.)
        ``events``: as for ``offer``."""
        self.insert_rows(conn, self.table, self.row_params(pkind, rows, now_ms, actor))

    def insert_rows(self, conn: sa.Connection, table: sa.Table,
                    params: Sequence[dict[str, Any]]) -> None:
        """Insert ``params`` (dicts with the same keys) into ``table`` with one multi-row
        INSERT per as many rows as a statement's bound values allow (an offer chunk is one)."""
        columns = [c.name for c in table.columns if c.name in params[0]]  # table order
        for chunk in chunked(params, self.max_parameters // len(columns)):
            if not self.precompiled_insert:
                conn.execute(sa.insert(table).values(list(chunk)))
                continue
            # SQLAlchemy spends most of such an insert building and compiling the
            # statement's hundreds of bound parameters; its text depends only on the row
            # count, so it is compiled once per count and the driver gets the values as they are
            sql, names = self._multirow_insert(conn.dialect, table, len(chunk), columns)
            values = [row[column] for row in chunk for column in columns]
            conn.exec_driver_sql(
                sql, tuple(values) if names is None else dict(zip(names, values, strict=True)))

    def _multirow_insert(self, dialect: sa.Dialect, table: sa.Table, n: int,
                         columns: Sequence[str]) -> tuple[str, list[str] | None]:
        """The SQL of an n-row INSERT of ``columns`` into ``table`` and its parameter names
        (None: positional, in order). SQLAlchemy compiles the one-row statement, whose VALUES
        group is repeated (``repeat_values``)."""
        key = (dialect.paramstyle, table.name, n, tuple(columns))
        if key not in self._insert_sql:
            if dialect.paramstyle in ("numeric", "numeric_dollar"):  # numbered placeholders
                stmt = sa.insert(table).values([
                    {c: sa.bindparam(f"{c}_{i}") for c in columns} for i in range(n)])
                compiled = stmt.compile(dialect=dialect)
                self._insert_sql[key] = (compiled.string, None)
                return self._insert_sql[key]
            one = sa.insert(table).values({c: sa.bindparam(row_name(c)) for c in columns})
            compiled = one.compile(dialect=dialect)
            sql = repeat_values(compiled.string, n)
            names = None
            if not compiled.positional:
                names = [f"{c}_{i}" for i in range(n) for c in columns]
            else:
                assert list(compiled.positiontup or ()) == [row_name(c) for c in columns]
            self._insert_sql[key] = (sql, names)
        return self._insert_sql[key]

    def existing_rows(self, conn: sa.Connection, pkind: str, keys: Sequence[str], *,
                      current: bool = False) -> Iterable[Sequence[Any]]:
        """The offer's locking read: the rows of ``keys`` that exist, locked. ``current``:
        read as committed now, whatever snapshot the transaction reads (asked after an
        insert met a key; this locking read is one already)."""
        return conn.execute(self._existing, {"b_kind": pkind, "keys": keys})

    def select_existing(self) -> AnySelect:
        """The offer's locking read of the existing rows of the keys it offers (parameters
        b_kind and keys, a list)."""
        t = self.table
        # one expanding parameter, not one per key: the statement stays cached whatever the
        # keys, where a literal list is built and compiled anew for every call
        return (sa.select(t.c.pkey, t.c.payload, t.c.scheduled_at_initially, t.c.priority,
                          t.c.group_key, t.c.id)
                .where(t.c.pkind == sa.bindparam("b_kind"),
                       t.c.pkey.in_(sa.bindparam("keys", expanding=True)))
                .with_for_update())

    def update_changed(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                       ids: Sequence[int], now_ms: int, actor: str | None) -> None:
        """Replace existing (locked) rows, whose ids are ``ids``: new payload and due time,
        lock voided, attempts reset. Through the primary key: the unique index of the keys
        is left alone, whose entries other offers' failed inserts may hold (on InnoDB,
        shared, to the end of their transactions)."""
        t = self.table
        stmt = (sa.update(t)
                .where(t.c.pkind == pkind, t.c.id == sa.bindparam("i"))
                .values(payload=sa.bindparam("p"), scheduled_at=sa.bindparam("a"),
                        scheduled_at_initially=sa.bindparam("a"), created_at=now_ms,
                        lock_uuid=None, deliveries=0, priority=sa.bindparam("r"),
                        group_key=sa.bindparam("g")))
        if actor is not None:
            stmt = stmt.values(enqueued_by=actor)
        conn.execute(stmt, [{"i": i, "p": r.payload, "a": r.at_ms, "r": r.priority,
                             "g": r.group} for r, i in zip(rows, ids, strict=True)])

    @staticmethod
    def row_params(pkind: str, rows: Sequence[OfferRow], now_ms: int,
                   actor: str | None = None) -> list[dict[str, Any]]:
        """The column values of new rows (``enqueued_by`` only when ``actor`` is given)."""
        extra = {} if actor is None else {"enqueued_by": actor}
        return [{"pkind": pkind, "pkey": r.key, "payload": r.payload, "scheduled_at": r.at_ms,
                 "scheduled_at_initially": r.at_ms, "created_at": now_ms, "lock_uuid": None,
                 "deliveries": 0, "priority": r.priority, "group_key": r.group, **extra}
                for r in rows]

    # ---- claim ---------------------------------------------------------------------------

    def claim(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int, lock: str,
              until_ms: int, actor: str | None = None) -> list[ClaimedRow]:
        """Lock up to ``limit`` due rows in claim order and mark them claimed by ``lock``
        (and held by ``actor``, when given)."""
        return self.claim_checked(conn, pkind, now_ms, limit, lock, until_ms, actor)[0]

    def claim_checked(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                      lock: str, until_ms: int, actor: str | None = None, *,
                      last: Control | None = None, optimistic: bool = False,
                      acks: Sequence[tuple[str, Sequence[int]]] = (),
                      events: ClaimEvents | None = None
                      ) -> tuple[list[ClaimedRow], Control | None]:
        """``claim``, and the queue's flow control where it has any.

        A queue without flow control is claimed by the plain claim alone, whose guard lets it
        claim nothing when the queue has an active settings row; then the controlled claim
        (``flow``) runs: in the same statement as the bucket's charge for a rate limit alone
        where the dialect can (``bucket_in_claim``), otherwise in a transaction
        (NeedsTransaction where ``conn`` has none). ``last``, the flow control the queue's
        last claim found, says which claim to try first, sparing the statements that would
        find nothing: the guarded claim for a controlled queue, the settings read for one
        claimed with its bucket or on credit (read only when that claim takes nothing, to
        learn why); what is claimed never rests on it. ``optimistic``: see
        ``claim_controlled``. ``acks``: (lock, ids) of messages to ack first, in the first
        claim statement where the dialect can (``claim_acking``), else before it; a claim
        run again sends them again, which deletes nothing more. ``events``: the history
        events for the claim statement to write, where ``claim_writes_history`` (only the
        first claim statement writes them: ``events.written`` says whether the rows
        returned have theirs)."""
        bucketed = last is not None and self._bucketed(last)
        grouped = last is not None and self._grouped(last)
        # the bucket charged last, on credit of what it held, where a conflict can be run again
        bucket = ("bucket_credit",) if optimistic else ("bucket",)
        if acks and not (self.acks_in_claim and (last is None or bucketed)):
            self.ack_pairs(conn, acks)  # the claim that follows is not the one to carry them
            acks = ()
        if last is None or bucketed:
            where = bucket if bucketed else ("guard",)
            rows = (self.claim_acking(conn, pkind, now_ms, limit, lock, until_ms, where, actor,
                                      acks, events) if acks or events is not None
                    else self.claim_plain(conn, pkind, now_ms, limit, lock, until_ms, where,
                                          actor))
            if rows:
                return rows, last
            if events is not None:
                events.written = False  # the claims below write none
        elif grouped:
            if rows := self.claim_groups(conn, pkind, now_ms, limit, lock, until_ms, actor,
                                         optimistic):
                return rows, last
        elif optimistic and self.on_credit(last, now_ms, limit):
            if rows := self.claim_on_credit(conn, pkind, now_ms, limit, lock, until_ms, actor):
                return rows, last
        control = self.read_control(conn, pkind)
        if control is None or not control.active:
            if last is not None:  # no longer controlled: claimed as any queue is
                return self.claim_checked(conn, pkind, now_ms, limit, lock, until_ms, actor)
            return [], None
        if self._bucketed(control):
            if bucketed:  # claimed with its bucket just now: nothing due, or no token
                return [], control
            return self.claim_plain(conn, pkind, now_ms, limit, lock, until_ms, bucket,
                                    actor), control
        self.require_transaction(conn)
        if self._grouped(control):
            if grouped:  # claimed by claim_groups just now: nothing it could take
                return [], control
            return self.claim_groups(conn, pkind, now_ms, limit, lock, until_ms, actor,
                                     optimistic), control
        return self.claim_controlled(conn, pkind, control, now_ms, limit, lock, until_ms,
                                     actor, optimistic=optimistic), control

    def gather_statistics(self, conn: sa.Connection) -> bool:
        """Where the queue table has no planner statistics of its rows yet, gather them;
        whether it did (see ``statistics_after``)."""
        return False

    @staticmethod
    def in_autocommit(op: Callable[[sa.Connection], T], conn: sa.Connection) -> T:
        """Run ``op`` on ``conn``, fresh from the engine's pool, in autocommit, and return the
        connection to its usual mode (where ``autocommit_one_statement``). The dialect switches
        the DBAPI connection itself (what the AUTOCOMMIT isolation level does underneath): an
        engine view with that execution option switches it through SQLAlchemy's connection
        characteristics at checkout and back at checkin, which cost 100-210 us of client CPU a
        call more here (a one-row SELECT: 668 against 458 us, 407 against 301). ``AUTOCOMMIT``
        in the connection's info tells ``op`` that each of its statements commits alone
        (``require_transaction``)."""
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None  # the connection is open: it was just checked out
        info = conn.info
        conn.dialect.set_isolation_level(dbapi, "AUTOCOMMIT")
        info[AUTOCOMMIT] = True
        try:
            return op(conn)
        finally:
            del info[AUTOCOMMIT]
            if not conn.invalidated:
                try:
                    conn.dialect.reset_isolation_level(dbapi)
                except Exception:  # what op did is done: the connection must not go back as is
                    log.warning("could not take a connection out of autocommit; it is dropped",
                                exc_info=True)
                    conn.invalidate()

    def claims_alone(self, control: Control | None) -> bool:
        """Whether the claim of a queue whose flow control is ``control`` (None: none) sends
        only statements that are each atomic alone, so it may run in autocommit."""
        return self.claim_is_one_statement and (control is None or self._bucketed(control))

    def _grouped(self, control: Control) -> bool:
        """Whether the queue is claimed by the dialect's own ``claim_groups``."""
        return self.groups_in_claim and control.groups_only

    def _bucketed(self, control: Control) -> bool:
        """Whether the queue is claimed by the claim statement that charges its bucket."""
        return self.bucket_in_claim and control.rate_only and control.bucket_fits_sql

    def claim_plain(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                    lock: str, until_ms: int, where: Sequence[str],
                    actor: str | None = None) -> list[ClaimedRow]:
        """Claim up to ``limit`` due rows meeting the claim conditions ``where`` (see
        ``due_conditions``), in claim order."""
        picked = self.pick_due(conn, pkind, now_ms, limit, where)
        self.mark_claimed(conn, [r[0] for r in picked], lock, until_ms, actor)
        return [self.claimed_row(r) for r in picked]

    def claim_acking(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, where: Sequence[str], actor: str | None,
                     acks: Sequence[tuple[str, Sequence[int]]],
                     events: ClaimEvents | None = None) -> list[ClaimedRow]:
        """Ack the messages ``acks`` names ((lock, ids) of finished claim batches), then
        ``claim_plain``: here two statements or more; one where ``acks_in_claim``. The
        history ``events`` are left to the caller here (``claim_writes_history``)."""
        self.ack_pairs(conn, acks)
        return self.claim_plain(conn, pkind, now_ms, limit, lock, until_ms, where, actor)

    def ack_pairs(self, conn: sa.Connection, acks: Sequence[tuple[str, Sequence[int]]]) -> None:
        """``ack_many`` of each (lock, ids) of ``acks``."""
        for lock, ids in acks:
            self.ack_many(conn, lock, ids)

    def claim_returning(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                        lock: str, until_ms: int, where: Sequence[str], actor: str | None,
                        row: Callable[[Sequence[Any]], ClaimedRow]) -> list[ClaimedRow]:
        """The claim where it is one statement (the dialect's ``_claim_statement``) that
        returns the claimed rows, ``row`` making each a ClaimedRow: put in claim order, as
        RETURNING and OUTPUT give them in none of their own."""
        values = self.claim_values(pkind, now_ms, limit, lock, until_ms, actor)
        return in_claim_order(row(r) for r in conn.execute(
            self._claim_statement(tuple(where), actor is not None), values).all())

    @staticmethod
    def claim_values(pkind: str, now_ms: int, limit: int, lock: str, until_ms: int,
                     actor: str | None) -> dict[str, Any]:
        """The parameters of a claim statement that marks what it claims and returns it."""
        values = {"b_kind": pkind, "b_now": now_ms, "limit": limit, "lock": lock,
                  "until": until_ms}
        if actor is not None:
            values["actor"] = actor
        return values

    def mark_claimed(self, conn: sa.Connection, ids: Sequence[int], lock: str,
                     until_ms: int, actor: str | None) -> None:
        stmt = self._mark_claimed[actor is not None]
        by = {} if actor is None else {"actor": actor}
        for chunk in chunked(ids, self.in_list_max):
            conn.execute(stmt, {"ids": chunk, "lock": lock, "until": until_ms, **by})

    @staticmethod
    def claimed_row(r: Sequence[Any]) -> ClaimedRow:
        """A ClaimedRow from a row of ``_claim_columns`` read before it was marked claimed."""
        return ClaimedRow(r[0], r[1], bytes(r[2]), r[3], r[4], r[5], r[6] + 1, r[7], r[8],
                          r[9], r[10], r[11], r[12])

    def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                 where: Sequence[str]) -> Sequence[Sequence[Any]]:
        """Lock and read up to ``limit`` due rows, as ``_claim_columns`` in claim order."""
        return conn.execute(self.select_due(tuple(where)),
                            self.due_params(pkind, now_ms, limit)).fetchall()

    def due_params(self, pkind: str, now_ms: int, limit: int) -> dict[str, Any]:
        """The parameters of ``select_due``'s statement."""
        return {"b_kind": pkind, "b_now": now_ms, "b_limit": limit}

    def select_due(self, where: tuple[str, ...] = ()) -> AnySelect:
        """``pick_due``'s statement (parameters b_kind, b_now, b_limit), built once per set of
        claim conditions (``build_select_due``): built per claim, its construction and cache
        key cost the client more than the database's read of a hundred rows."""
        if (stmt := self._due_selects.get(where)) is None:
            stmt = self._due_selects[where] = self.build_select_due(where)
        return stmt

    def build_select_due(self, where: tuple[str, ...]) -> AnySelect:
        stmt = self.due_read(where)
        return stmt.with_for_update(skip_locked=True) if self.skip_locked else stmt

    def due_read(self, where: tuple[str, ...]) -> AnySelect:
        """The first ``b_limit`` due rows meeting the claim conditions ``where``, as
        ``_claim_columns`` in claim order, read without locks."""
        t = self.table
        return (sa.select(*self._claim_columns)
                .where(t.c.pkind == sa.bindparam("b_kind"),
                       t.c.scheduled_at <= sa.bindparam("b_now", type_=sa.BigInteger),
                       *self.due_conditions(where))
                .order_by(*claim_order(t))
                .limit(sa.bindparam("b_limit", type_=sa.Integer)))

    # ---- ack, release, extend ----------------------------------------------------------

    def ack(self, conn: sa.Connection, row_id: int, lock: str) -> bool:
        return conn.execute(self._ack, {"id": row_id, "lock": lock}).rowcount > 0

    def ack_many(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int:
        return sum(conn.execute(self.acks_of(len(chunk)), {"lock": lock, "ids": chunk}).rowcount
                   for chunk in chunked(ids, self.in_list_max))

    def lock_acked(self, conn: sa.Connection, ids: Sequence[int]) -> None:
        """Called first in an ack sent as several deletions (claim batches, or chunks of
        ``in_list_max``), with every id: where each deletion locks its rows in the order
        other transactions lock them, but the deletions together would not, lock them all
        first in that order. Nothing here."""

    # DELETE … RETURNING (SQL Server: OUTPUT) tells which rows went, in the one statement
    delete_returning: ClassVar[bool] = False

    def delete_which(self, conn: sa.Connection, *where: sa.ColumnElement[bool],
                     count: int | None = None) -> list[str]:
        """Delete the messages meeting ``where`` (``count``: which names that many by id)
        and return their keys (for their history events): one DELETE … RETURNING, or where
        there is none, a locking read of them and their deletion by id, so what is returned
        is exactly what went."""
        t = self.table
        if self.delete_returning:
            stmt = (sa.delete(t).where(*where) if count is None
                    else self.delete_by_id(t, count, *where))
            return list(conn.execute(stmt.returning(t.c.pkey)).scalars())
        read = self.lock_rows(sa.select(t.c.id, t.c.pkey).where(*where), t, skip=False)
        rows = conn.execute(read if count is None else self.by_id(read, t, count)).all()
        for chunk in chunked([r.id for r in rows], self.in_list_max):
            conn.execute(self.delete_by_id(t, len(chunk), t.c.id.in_(chunk)))
        return [r.pkey for r in rows]

    def ack_recorded(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                     events: sa.Table, kind: str, now_ms: int) -> int:
        """``ack_many`` that writes into ``events`` (the history table) an event of kind
        ``kind`` at ``now_ms`` for each message it deletes, named by the message's holder and
        attempt, in one statement: where ``ack_writes_history`` only."""
        raise NotImplementedError(f"{type(self).__name__} acks and records apart")

    def ack_many_which(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> set[str]:
        """``ack_many`` that says which messages (by key) were deleted."""
        t = self.table
        return {key for chunk in chunked(ids, self.in_list_max)
                for key in self.delete_which(conn, self.held_by(lock), t.c.id.in_(chunk),
                                             count=len(chunk))}

    def move_locked(self, row_id: int, lock: str, scheduled_at: int,
                    keep_lock: bool) -> sa.Update:
        """Release (drop the lock) or extend (keep it) a claimed row, if the lock still holds."""
        t = self.table
        values: dict[str, int | None] = {"scheduled_at": scheduled_at}
        if not keep_lock:
            values["lock_uuid"] = None
        return sa.update(t).where(t.c.id == row_id, self.held_by(lock)).values(**values)

    def renew_locks(self, count: int) -> sa.Update:
        """Renew ``count`` locks held under one lock id and not yet expired (parameters
        lock, ids, now, until): a heartbeat's renewal of a whole claim batch in one
        statement. A lock that expired is left to ``move_locked`` and its checks."""
        t = self.table
        return self.by_id(sa.update(t).where(self.held_by(sa.bindparam("lock")),
                                             self.ids_listed(),
                                             t.c.scheduled_at > sa.bindparam("now"))
                          .values(scheduled_at=sa.bindparam("until")), t, count)

    # ---- reads and deletes by key --------------------------------------------------------

    def select_by_key(self, pkind: str, key: str) -> AnySelect:
        t = self.table
        return sa.select(t).where(t.c.pkind == pkind, t.c.pkey == key)

    def exists_key(self, pkind: str, key: str) -> AnySelect:
        t = self.table
        return sa.select(sa.literal(1)).where(t.c.pkind == pkind, t.c.pkey == key)

    def delete_key(self, pkind: str, key: str) -> sa.Delete:
        t = self.table
        return sa.delete(t).where(t.c.pkind == pkind, t.c.pkey == key)

    def delete_kind(self, pkind: str) -> sa.Delete:
        t = self.table
        return sa.delete(t).where(t.c.pkind == pkind)

    def delete_kind_batch(self, conn: sa.Connection, pkind: str) -> list[str]:
        """Delete up to ``in_list_max`` messages of ``pkind``, locking them first; returns
        their keys (``clear`` of a queue that keeps history, batch by batch)."""
        t = self.table
        rows = conn.execute(self.lock_rows(
            sa.select(t.c.id, t.c.pkey).where(t.c.pkind == pkind).order_by(t.c.id)
            .limit(self.in_list_max), t, skip=False)).all()
        if rows:
            conn.execute(self.delete_by_id(t, len(rows), t.c.id.in_([r.id for r in rows])))
        return [r.pkey for r in rows]

    def store_trace_context(self, conn: sa.Connection, pkind: str, keys: Sequence[str],
                            context: str) -> None:
        """Keep ``context`` (a producer's trace context) with the messages of ``keys``."""
        t = self.table
        for chunk in chunked(sorted(keys, key=self.lock_order), self.in_list_max):
            conn.execute(sa.update(t).where(t.c.pkind == pkind, t.c.pkey.in_(chunk))
                         .values(trace_context=context))

    def select_next_due(self, pkind: str) -> AnySelect:
        """The earliest due time (or lock expiry) of a queue: one step down its due index."""
        t = self.table
        return sa.select(sa.func.min(t.c.scheduled_at)).where(t.c.pkind == pkind)

    # ---- key prefixes (cron schedules live under "{prefix}/...") ---------------------------

    def prefix_match(self, column: sa.ColumnElement[str], prefix: str) -> sa.ColumnElement[bool]:
        """``column`` starts with ``prefix`` taken literally: LIKE metacharacters are escaped."""
        special = set(self.like_specials) | {LIKE_ESCAPE}
        escaped = "".join(LIKE_ESCAPE + c if c in special else c for c in prefix)
        return column.like(escaped + "%", escape=LIKE_ESCAPE)

    def key_prefix_deletable(self, pkind: str, prefix: str, now_ms: int, *,
                             keep_prefix: str | None = None,
                             only_future: bool = False) -> list[sa.ColumnElement[bool]]:
        """The messages whose key starts with ``prefix``, except in-flight ones: the
        conditions of their deletion.

        In flight means claimed and the lock not yet expired: a consumer holds it, and deleting
        it would make its ack fail after the work was done. Keys starting with ``keep_prefix``
        stay; with ``only_future`` so do messages already due.
        """
        t = self.table
        in_flight = sa.and_(t.c.lock_uuid.is_not(None), t.c.scheduled_at > now_ms)
        where = [t.c.pkind == pkind, self.prefix_match(t.c.pkey, prefix), sa.not_(in_flight)]
        if keep_prefix is not None:
            where.append(sa.not_(self.prefix_match(t.c.pkey, keep_prefix)))
        if only_future:
            where.append(t.c.scheduled_at > now_ms)
        return where

    def select_key_prefix(self, pkind: str, prefix: str) -> AnySelect:
        """Keys, requested due times and lock state of the messages under ``prefix``."""
        t = self.table
        return (sa.select(t.c.pkey, t.c.scheduled_at_initially, t.c.scheduled_at, t.c.lock_uuid)
                .where(t.c.pkind == pkind, self.prefix_match(t.c.pkey, prefix)))

    def select_stats(self, pkind: str, now_ms: int) -> AnySelect:
        return sa.select(*self._stats_columns(now_ms)).where(self.table.c.pkind == pkind)

    def select_stats_by_kind(self, now_ms: int) -> AnySelect:
        """``select_stats`` of every partition (queue name + payload type) at once, as rows
        led by ``pkind``: one pass over the table, for listing every queue."""
        t = self.table
        return (sa.select(t.c.pkind, *self._stats_columns(now_ms))
                .group_by(t.c.pkind).order_by(t.c.pkind))

    def select_stats_page(self, dead: sa.Table, now_ms: int, limit: int, after: str | None,
                          prefix: str | None) -> AnySelect:
        """``select_stats_by_kind`` of at most ``limit`` partitions, those after ``after`` in
        the column's (byte) order whose queue name starts with ``prefix``, each with its count
        of dead letters (``dead``, the dead-letter table; a partition with dead letters only is
        one too). One statement, cut and ordered by the database, so that a page follows the
        database's order of the column and the rest of a table of many queues is never sent:
        each side's first ``limit`` partitions hold the first ``limit`` of both."""
        t = self.table
        stats = self.select_stats_by_kind(now_ms)
        letters = (sa.select(dead.c.pkind, sa.func.count().label("dead_letters"))
                   .group_by(dead.c.pkind).order_by(dead.c.pkind))
        if after is not None:
            stats = stats.where(t.c.pkind > after)
            letters = letters.where(dead.c.pkind > after)
        if prefix:
            stats = stats.where(self.prefix_match(t.c.pkind, prefix))
            letters = letters.where(self.prefix_match(dead.c.pkind, prefix))
        s = stats.limit(limit).subquery("s")
        d = letters.limit(limit).subquery("d")
        zero = sa.literal_column("0", sa.BigInteger)
        both = sa.union_all(
            sa.select(s.c.pkind, s.c.due, s.c.scheduled, s.c.in_flight, s.c.oldest_due,
                      zero.label("dead_letters")),
            sa.select(d.c.pkind, zero, zero, zero, sa.cast(sa.null(), sa.BigInteger),
                      d.c.dead_letters)).subquery("b")
        return (sa.select(both.c.pkind, *(sa.func.sum(both.c[name]).label(name) for name in
                                          ("due", "scheduled", "in_flight")),
                          sa.func.min(both.c.oldest_due).label("oldest_due"),
                          sa.func.sum(both.c.dead_letters).label("dead_letters"))
                .group_by(both.c.pkind).order_by(both.c.pkind).limit(limit))

    def _stats_columns(self, now_ms: int) -> list[sa.ColumnElement[Any]]:
        """Due (lock expired included), scheduled (not yet due, unlocked), in flight (locked,
        lock not expired) and the earliest due time among the due."""
        t = self.table
        due = t.c.scheduled_at <= now_ms
        later = t.c.scheduled_at > now_ms

        def count(cond: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
            return sa.func.coalesce(sa.func.sum(sa.case((cond, 1), else_=0)), 0)

        return [
            count(due).label("due"),
            count(sa.and_(later, t.c.lock_uuid.is_(None))).label("scheduled"),
            count(sa.and_(later, t.c.lock_uuid.is_not(None))).label("in_flight"),
            sa.func.min(sa.case((due, t.c.scheduled_at))).label("oldest_due"),
        ]

    def select_page(self, pkind: str, state: str, now_ms: int, limit: int,
                    key_prefix: str | None, after: tuple[int, int] | None) -> AnySelect:
        """Up to ``limit`` messages of ``pkind`` in ``state`` ("due": due now, expired locks
        included; "in_flight": locked, lock not expired; "scheduled": not yet due, unlocked),
        in due order (``scheduled_at``, ``id``), after the keyset position ``after``.

        After a position, the page is the first ``limit`` of two seeks on the due index: the
        rest of the position's due time (ids above it), then the later due times. One
        condition on both columns (a row-value comparison, or an OR) is read by SQLite and
        MariaDB as a range on the due time alone, which scans a whole batch offered for one
        due time; measured in benchmarks/ (peek_depth)."""
        t = self.table
        due = state == "due"
        # the state's bound on the due time, and the rest of its conditions
        bound = t.c.scheduled_at <= now_ms if due else t.c.scheduled_at > now_ms
        where = [t.c.pkind == pkind]
        if not due:
            lock = t.c.lock_uuid
            where.append(lock.is_not(None) if state == "in_flight" else lock.is_(None))
        if key_prefix:
            where.append(self.prefix_match(t.c.pkey, key_prefix))
        order = (t.c.scheduled_at, t.c.id)
        if after is None:
            return sa.select(t).where(*where, bound).order_by(*order).limit(limit)
        at, row_id = after
        seeks = [(bound, t.c.scheduled_at > at)]
        if (at <= now_ms) == due:  # the position's due time is in the state: its later ids
            # (the bound left out, so the planner seeks on the due time, not on the bound)
            seeks.insert(0, (t.c.scheduled_at == at, t.c.id > row_id))
        parts = [sa.select(t).where(*where, *bounds).order_by(*order).limit(limit).subquery()
                 for bounds in seeks]
        page = sa.union_all(*(sa.select(part) for part in parts)).subquery("page")
        return sa.select(page).order_by(page.c.scheduled_at, page.c.id).limit(limit)
