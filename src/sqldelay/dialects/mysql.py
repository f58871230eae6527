"""MySQL 8 and MariaDB >= 10.6 (dialect names "mysql" and "mariadb": both map here).

The portable select-then-update claim and lock-then-insert offer fit InnoDB; what InnoDB
forces is the column types, the batched update of changed rows, index hints where its optimizer
would read (and lock) more rows than a statement needs, and READ COMMITTED where its gap locks
deadlock (``begin_read_committed``).
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.compiler import compiles

from ..schema import QueueKey, QueuePayload, QueueText
from .base import (
    ROW_OVERHEAD,
    Advice,
    OfferEvents,
    OfferRow,
    PayloadBudget,
    QueueDao,
    repeat_values,
    row_name,
)
from .common import RETRIED, AnySelect, ById, chunked
from .flow import walk_length

if TYPE_CHECKING:
    from sqlalchemy.dialects.mysql.base import MySQLDialect
    from sqlalchemy.sql.compiler import GenericTypeCompiler, SQLCompiler

# max_allowed_packet per connection pool (so per engine, whatever its execution options),
# read from the server once
_PACKET_LIMITS: weakref.WeakKeyDictionary[sa.Pool, int] = weakref.WeakKeyDictionary()
# the drivers whose cursors take a mapping for %(name)s placeholders, whatever paramstyle
# SQLAlchemy declares for them
_NAMED_DRIVERS = frozenset({"pymysql", "mysqldb", "asyncmy"})
# the most rows one UPDATE of an offer replaces (``MySQLQueueDao.update_changed``)
_UPDATE_PART = 100
# the error of a lock wait that timed out, or that a statement was not to wait for at all
_LOCK_WAIT_TIMEOUT = 1205
# MySQL's error of a locking read that was not to wait (NOWAIT) and met a lock
_LOCK_NOWAIT = 3572
# the errors of an ack that would have waited for a lock (``MySQLQueueDao.ack``)
_NOT_WAITED = frozenset({_LOCK_WAIT_TIMEOUT, _LOCK_NOWAIT})


def _on_mariadb(conn: sa.Connection) -> bool:
    """Whether ``conn`` is to a MariaDB server (whatever its URL calls it)."""
    return cast("MySQLDialect", conn.dialect).is_mariadb


def named_placeholders(dialect: sa.Dialect) -> sa.Dialect:
    """``dialect`` as connected (its server's version and forms), compiling %(name)s
    placeholders."""
    named = copy.copy(dialect)
    named.paramstyle, named.positional = "pyformat", False
    return named


@compiles(QueueKey, "mysql")
@compiles(QueueKey, "mariadb")
def _key(type_: QueueKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    # keys compare byte for byte: the default collations fold case, and PAD SPACE ones make
    # "a" and "a " the same key
    mariadb = cast("MySQLDialect", compiler.dialect).is_mariadb  # only these two compile it
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    return f"VARCHAR({type_.length}) CHARACTER SET utf8mb4 COLLATE {collation}"


@compiles(QueueText, "mysql")
@compiles(QueueText, "mariadb")
def _text(type_: QueueText, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return f"VARCHAR({type_.length}) CHARACTER SET utf8mb4"  # the table default may be latin1


@compiles(QueuePayload, "mysql")
@compiles(QueuePayload, "mariadb")
def _payload(type_: QueuePayload, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return "LONGBLOB"  # BLOB stops at 64 KiB


class _DeleteByPrimary(sa.Delete):
    """A DELETE of rows named by their key (the queue's by id) that reaches them through the
    primary key: the multi-table form, ``DELETE FROM t USING t FORCE INDEX (PRIMARY) WHERE
    …``, whose table reference takes the index hint the single-table form refuses. It has no
    LIMIT, ORDER BY or RETURNING. MariaDB 10.11 heeds the hint only where the WHERE has a
    condition on another column too (an ack's lock): ``id IN (…)`` alone, 13 ids of a 40-row
    table, was planned as a read of the whole table, hint or not, where the single-table
    DELETE with its LIMIT (``delete_by_id``) read the 13."""

    inherit_cache = True


@compiles(_DeleteByPrimary, "mysql")
@compiles(_DeleteByPrimary, "mariadb")
def _delete_by_primary(stmt: _DeleteByPrimary, compiler: SQLCompiler, **kw: Any) -> str:
    sql = compiler.visit_delete(stmt, **kw)
    table = compiler.preparer.format_table(stmt.table)
    head = f"DELETE FROM {table} "
    assert sql.startswith(head) and " LIMIT " not in sql, sql
    return f"{head}USING {table} FORCE INDEX (PRIMARY) {sql[len(head):]}"


class _DeleteUnwaiting(_DeleteByPrimary):
    """``_DeleteByPrimary`` that fails at once (1205, the statement undone) where it would
    wait for a lock: MariaDB's SET STATEMENT, which MySQL lacks (``MySQLQueueDao.ack``)."""

    inherit_cache = True


@compiles(_DeleteUnwaiting, "mysql")
@compiles(_DeleteUnwaiting, "mariadb")
def _delete_unwaiting(stmt: _DeleteUnwaiting, compiler: SQLCompiler, **kw: Any) -> str:
    return ("SET STATEMENT innodb_lock_wait_timeout=0 FOR "
            + _delete_by_primary(stmt, compiler, **kw))


class MySQLQueueDao(QueueDao):
    name = "mysql"
    offer_chunk = 1000
    precompiled_insert = True
    duplicate_key_codes = frozenset({1062})
    # deadlock, lock wait timeout, a lock met by NOWAIT (MySQL)
    transient_codes = frozenset({1213, _LOCK_WAIT_TIMEOUT, _LOCK_NOWAIT})
    deadlock_codes = frozenset({1213})
    # An ack that empties groups drops their rows after reading the group index for what is
    # left (``NOT EXISTS``), and that read takes shared locks on the entries it meets, the next
    # group's when the group is empty: entries that another ack has deleted and holds to its
    # commit. In the ack's transaction, which holds the entries it deleted, two acks waited
    # for each other (MySQL 9.7, the serial groups load test: consumers gave up after their
    # retries in every run; the same at READ COMMITTED). Done in a transaction of its own,
    # after the ack's, the drop holds no entry while it waits: in three runs of that test, 3
    # deadlocks in all, none of them a drop's (claims inserting the rows of new groups).
    # (Against offers it still deadlocked, until it read the group index without locks:
    # ``drop_groups``.)
    drops_groups_apart = True
    # can't connect (socket, TCP), server gone away, lost connection, shutdown in progress,
    # connection killed (MariaDB), disconnected by the server (MySQL 8)
    unavailable_codes = frozenset({2002, 2003, 2006, 2013, 1053, 1927, 4031})
    missing_table_codes = frozenset({1146})
    # The offer's usual way is four round trips: SET TRANSACTION (READ COMMITTED, for the
    # locking read of keys that may not exist), the read, the insert, the COMMIT. Most
    # offers are of new keys, and a plain insert alone, at the default level, fails whole on
    # one that exists. PyMySQL alone, 100 new keys an offer, four producers, seven
    # alternating rounds (MariaDB 10.11): 59,000 messages/s the usual way, 67,000 inserting
    # alone (medians).
    inserts_first = True
    # An insert that fails on a key inserted since the offer's read keeps a shared lock on that
    # key's index entry and the gap before it to the end of the transaction, and the round after
    # it can deadlock on it (``existing_rows`` reads the keys not found again to make that rare,
    # and acks give way: ``ack``). Two other ways out were measured in the offer and
    # ack load test (tests/conformance) with four producers in sqldelay's own transactions
    # (MariaDB 10.11, 10 s a driver, three drivers) and left out: starting the transaction again
    # at every such duplicate lost the race to the other producers, up to 70 times in a row, and
    # two offers gave up; starting it again only where that round's read would wait (NOWAIT) took
    # the deadlocks retried from 4-22 to 0-7, but made 110-230 new starts and 15% fewer offers.
    # InnoDB finds a deadlock at once and sqldelay retries it: in its own transactions, cheaper
    # than avoiding it at that price.

    def __init__(self, table: sa.Table) -> None:
        super().__init__(table)
        # The ack of many, through the primary key whatever their count: a single-table
        # DELETE takes no index hint, and its LIMIT (``delete_by_id``) kept the optimizer
        # on the primary key only while it stayed below the rows the table was thought to
        # hold. An ack of every message of a small table read (EXPLAIN: type ALL) and
        # locked the whole table, waiting for rows outside its list: two such acks
        # deadlocked, and a torture run's offers, waiting behind them, gave up after ten
        # attempts. The multi-table form takes the hint (MariaDB 10.11: type range on
        # PRIMARY, 4 ids of a 4-row table, 39 of 40).
        t = self.table
        held, listed = self.held_by(sa.bindparam("lock")), self.ids_listed()
        self._ack_many = _DeleteByPrimary(t).where(held, listed)
        self._ack_unwaiting = _DeleteUnwaiting(t).where(held, listed)
        # by statement, dialect, row count, … (``named_write``, ``update_changed``)
        self._named_sql: dict[tuple[object, ...], str] = {}
        # by row count and whether the actor is named (``update_changed``)
        self._updates: dict[tuple[int, bool], sa.Update] = {}
        # by dialect, key count (``named_read``)
        self._named_reads: dict[tuple[type[sa.Dialect], int], str] = {}

    def by_id(self, stmt: ById, table: sa.Table, count: int | None = None) -> ById:
        # On a small table the optimizer reads the whole table for ``id IN (...)``, cheaper
        # by its costs than the lookups (MariaDB 10.11: 40 rows, 10 or 25 ids), and a locking
        # read, an UPDATE or a DELETE locks every row it reads, or waits for its lock: a
        # claim marking its rows so left a concurrent claim nothing to take, and an ack
        # waited for every open claim (acks of 25 caught reading 61 to 144 rows, for seconds,
        # under load). An UPDATE takes FORCE INDEX (PRIMARY). A read does not (a read of the
        # whole primary key instead, by EXPLAIN), nor can a DELETE take a hint; a LIMIT below
        # the rows the table is thought to hold makes the optimizer take the primary key
        # for both (``delete_by_id``). Only a statement on nearly every row of the table
        # still reads them all.
        if isinstance(stmt, sa.Update):
            return stmt.with_hint("FORCE INDEX (PRIMARY)")
        return stmt if count is None else stmt.limit(count)

    def delete_by_id(self, table: sa.Table, count: int,
                     *where: sa.ColumnElement[bool]) -> sa.Delete:
        # the option by each dialect name: a MariaDB server behind a mysql:// URL too
        return sa.delete(table).where(*where).with_dialect_options(mysql_limit=count,
                                                                   mariadb_limit=count)

    # An ack in a transaction of sqldelay's own deletes without waiting for a lock, and where it
    # would have waited for a key's index entry the engine layer runs it again after a backoff.
    # An offer whose insert met a key that another producer had just inserted keeps a shared
    # lock on the key's entry of the unique index to the end of its transaction, then locks the
    # rows of its keys; an ack of that key's message, holding the row, waited for the entry to
    # delete it: a deadlock, and InnoDB rolled back the offer, which had written least, in the
    # caller's transaction where nothing could run it again (two producers of the same new keys
    # in opposite orders and two consumers, MariaDB 10.11: 2 runs of 40 failed; 0 of 80 since;
    # steered, test_an_ack_gives_way_to_an_offer_whose_insert_met_its_key: the offer rolled
    # back, 1213, on MySQL 9.7 too). Only the ack can give way: the offer cannot release that
    # lock, and in a caller's transaction cannot start again. An ack that never waits for an
    # index entry is in no circle of waits; in the caller's transaction it waits, as before.
    # - MariaDB deletes with InnoDB's lock wait set to none for that statement (SET STATEMENT).
    # - MySQL has no such setting for one statement (SET_VAR refuses innodb_lock_wait_timeout,
    #   warning 3637 on 9.7; its least is a second). Its ack locks the entries of its keys in
    #   the unique index first, with a read through that index that does not wait (NOWAIT),
    #   then deletes: a round trip more than MariaDB's.

    @staticmethod
    def _unwaiting(conn: sa.Connection) -> bool:
        """Whether the acks on ``conn`` fail at once rather than wait for a lock."""
        return bool(conn.info.get(RETRIED))

    def ack(self, conn: sa.Connection, row_id: int, lock: str) -> bool:
        if not self._unwaiting(conn):
            return super().ack(conn, row_id, lock)
        return self._ack_unwaiting_of(conn, lock, [row_id]) > 0

    def ack_many(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int:
        if not self._unwaiting(conn):
            return super().ack_many(conn, lock, ids)
        return sum(self._ack_unwaiting_of(conn, lock, chunk)
                   for chunk in chunked(ids, self.in_list_max))

    def _ack_unwaiting_of(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int:
        """The ack of ``ids`` (at most ``in_list_max``) that does not wait for a lock; where
        it would have, the rows still held under ``lock`` locked first, waiting, in id order
        (as offers lock them: ``lock_acked``), then deleted without waiting again. Failing at
        once on the rows too, acks met the rows that producers of the same keys held for a
        moment: 47 to 210 run again in 10 s of the offer and ack load test
        (tests/conformance), 0 to 3 so.

        Only those rows: the DELETE, undone where it would have waited, keeps the locks of
        the rows it deleted, and at READ COMMITTED (an ack that frees groups) it left the rows
        of messages no longer held under ``lock`` (replaced by an offer) unlocked, those
        below the rows it kept too. Waiting for every row of the ack, it waited for such a
        row that a producer had locked since, holding rows above it, and the producer wanted
        one of those: a deadlock (MariaDB 10.11, the offer and ack load test with groups,
        InnoDB's deadlock log). A message's lock is never given back, so a row whose last
        committed version has another lock is one the ack will not delete: none of them is
        waited for, nor named again. The rows the DELETE kept are all below the first it
        would have waited for, where the lock starts waiting."""
        try:
            return self._delete_unwaiting(conn, lock, ids)
        except sa.exc.OperationalError as exc:
            if self.error_code(exc) not in _NOT_WAITED:
                raise
        held = conn.execute(self._still_held, {"lock": lock, "ids": ids}).scalars().all()
        if not held:
            return 0
        self.lock_acked(conn, held)
        return self._delete_unwaiting(conn, lock, held)

    @functools.cached_property
    def _still_held(self) -> AnySelect:
        """The ids among ``ids`` of the messages held under ``lock``, read without locks (as
        last committed) through the primary key."""
        t = self.table
        return (sa.select(t.c.id).with_hint(t, "FORCE INDEX (PRIMARY)")
                .where(self.held_by(sa.bindparam("lock")), self.ids_listed()))

    def _delete_unwaiting(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int:
        """Delete the messages ``ids`` held under ``lock``, failing at once where the DELETE
        would wait for a lock (``_giving_way``)."""
        values = {"lock": lock, "ids": ids}
        return int(self._giving_way(conn, ids, self._ack_unwaiting, self._ack_many,
                                    values).rowcount)

    def _giving_way(self, conn: sa.Connection, ids: Sequence[int], on_mariadb: sa.Delete,
                    on_mysql: sa.Delete, values: dict[str, Any]) -> sa.CursorResult[Any]:
        """Run a DELETE of the messages ``ids`` that fails at once (1205 MariaDB, 3572 MySQL,
        the statement undone) where it would wait for a lock: ``on_mariadb``, a
        ``_DeleteUnwaiting``, on a MariaDB server; on MySQL ``on_mysql``, a
        ``_DeleteByPrimary``, once ``_keys_unwaiting`` has locked the messages and their keys."""
        if _on_mariadb(conn):
            return conn.execute(on_mariadb, values)
        conn.execute(self._keys_unwaiting, {"ids": ids})
        return conn.execute(on_mysql, values)

    @functools.cached_property
    def _keys_unwaiting(self) -> AnySelect:
        """The messages ``ids`` and the entries of their keys in the unique index, locked,
        or failed at once (NOWAIT) where one is held: the messages found by id through the
        primary key, joined to themselves by key through the unique index."""
        t = self.table
        held, keyed = t.alias("held"), t.alias("keyed")
        return (sa.select(keyed.c.id)
                .select_from(held.join(keyed, sa.and_(keyed.c.pkind == held.c.pkind,
                                                      keyed.c.pkey == held.c.pkey)))
                .with_hint(held, "FORCE INDEX (PRIMARY)")
                .with_hint(keyed, f"FORCE INDEX ({t.name}_kind_key_uq)")
                .where(held.c.id.in_(sa.bindparam("ids", expanding=True)))
                .with_for_update(nowait=True))

    def lock_acked(self, conn: sa.Connection, ids: Sequence[int]) -> None:
        # A worker acks what its handlers finished together, often of two or more claims:
        # one DELETE per claim batch, each locking its rows in id order, but the batches'
        # rows interleave, so the transaction took them out of that order, the second
        # DELETE starting again below where the first stopped. Offers lock the rows they
        # update in id order (``existing_rows``), and at REPEATABLE READ a DELETE keeps
        # locked the rows it reads and leaves (a message an offer replaced, another claim's
        # since): offers and acks deadlocked on each other, and acks on acks (1213; four
        # producers of shuffled batches of 50 of 200 keys and two AsyncWorkers, MariaDB
        # 10.11: 205 deadlocks in 10 s, every one an ack's DELETE waiting for a row below
        # those it held). So the rows of every batch are locked first, in id order, through
        # the primary key, as the DELETEs would lock them: 0 deadlocks in the same run.
        for chunk in chunked(sorted(set(ids)), self.in_list_max):
            conn.execute(self._acked_by_id, {"ids": chunk})

    @functools.cached_property
    def _acked_by_id(self) -> AnySelect:
        """The rows ``ids`` locked in id order through the primary key (``lock_acked``).
        MariaDB 10.11 planned it as one range of the primary key whatever share of the table
        it named (39 of 40 rows, hint or not); the hint keeps it there. MySQL 9.7 planned the
        read of the id alone, hint or not, as a read of the whole primary key (type
        ``index``, which locks and waits for every row it passes) once the ids were most of
        the table; with a column beside the id (the lock), as one range."""
        t = self.table
        return (sa.select(t.c.id, t.c.lock_uuid).with_hint(t, "FORCE INDEX (PRIMARY)")
                .where(self.ids_listed()).order_by(t.c.id).with_for_update())

    def delete_which(self, conn: sa.Connection, *where: sa.ColumnElement[bool],
                     count: int | None = None) -> list[str]:
        # Deletions by id that say which keys went (a queue keeping history acks so): the
        # portable ones, DELETE … LIMIT n RETURNING (MariaDB) or a locking read with its
        # LIMIT and a delete by id (MySQL), read the whole table once n neared the rows the
        # table was thought to hold, as the plain ack did (``_ack_many``): an ack of 39 of 40
        # messages, one held by another consumer, waited for that one. Here a locking read
        # through the primary key (the hint taken by a read whatever the count), then the
        # multi-table DELETE of the same rows, ``where`` holding a condition beside the ids
        # (the ack's lock), which its hint needs: a round trip more than RETURNING, no scan.
        if count is None:
            return super().delete_which(conn, *where)
        t = self.table
        rows = conn.execute(sa.select(t.c.id, t.c.pkey).where(*where)
                            .with_hint(t, "FORCE INDEX (PRIMARY)").with_for_update()).all()
        if rows and not self._unwaiting(conn):
            conn.execute(_DeleteByPrimary(t).where(*where))
        elif rows:
            self._giving_way(conn, [r.id for r in rows], _DeleteUnwaiting(t).where(*where),
                             _DeleteByPrimary(t).where(*where), {})
        return [r.pkey for r in rows]

    @functools.cached_property
    def _existing_ids(self) -> AnySelect:
        """The ids of the offered keys' rows, read without locks (parameters b_kind, keys),
        through the unique index: left to itself the optimizer's path changed with the
        table's statistics from one execution to the next (the unique index's range, the
        queue's part of another index, the whole table)."""
        t = self.table
        return (sa.select(t.c.id).with_hint(t, f"FORCE INDEX ({t.name}_kind_key_uq)")
                .where(t.c.pkind == sa.bindparam("b_kind"),
                       t.c.pkey.in_(sa.bindparam("keys", expanding=True))))

    @functools.cached_property
    def _existing_by_id(self) -> AnySelect:
        """The offer's rows of the ``ids`` read by ``_existing_ids``, locked in id order
        through the primary key (parameters b_kind, ids)."""
        t = self.table
        columns = self._existing.selected_columns
        return (sa.select(*columns).with_hint(t, "FORCE INDEX (PRIMARY)")
                .where(t.c.pkind == sa.bindparam("b_kind"),
                       t.c.id.in_(sa.bindparam("ids", expanding=True)))
                .order_by(t.c.id).with_for_update())

    def begin_read_committed(self, conn: sa.Connection) -> None:
        # At InnoDB's default REPEATABLE READ a locking read locks the gaps it passes:
        # - an offer's locking read of keys that do not exist yet takes gap locks, which do
        #   not conflict with each other; two producers of new keys in one gap (ascending
        #   keys: order-1001, order-1002) then each wait for the other's to insert: 1213;
        # - a claim that finds fewer due messages than it wants reads to the end of the
        #   queue's part of the claim index and locks the gap there, where marking its
        #   messages (their due time moves to the lock's expiry) inserts: two claims of a
        #   near-empty queue then each wait for the other's gap. 100 asyncio tasks producing
        #   and consuming 2,000 messages (tests/conformance/test_concurrency.py) retried
        #   320-1,130 deadlocks a run, in 25-80 s; at READ COMMITTED 0 to 11, in 3-8 s.
        # Neither needs more than READ COMMITTED: the offer locks the rows it compares (a key
        # inserted concurrently still meets the unique index: duplicate error, round again),
        # the claim the rows it takes. A claim of a queue with a backlog (its last claim took
        # all it asked for) stops at its LIMIT, short of that gap, and keeps REPEATABLE READ,
        # where its locking read is cheaper past the index entries that acks and claims leave
        # behind until purged (MariaDB 10.11, a claim of 100 after 10,000 were acked: 0.55 ms,
        # 1.5 ms at READ COMMITTED). A call that frees groups (an ack, a release) updates their
        # rows through the primary key, which at REPEATABLE READ takes next-key locks and
        # waited for the row of a group it does not free: an ack waited for a claim holding
        # a group it had won, the claim for the head an offer held, the offer for a message
        # the ack had deleted (MariaDB 10.11, the offer and ack load test with groups). At
        # READ COMMITTED the UPDATE passes over a row another holds that it would not change
        # (a semi-consistent read). SET TRANSACTION applies to the next transaction, which
        # this one is.
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")

    def insert_absent(self, conn: sa.Connection, table: sa.Table, pkind: str,
                      rows: list[dict[str, Any]]) -> None:
        # The portable read-then-insert loops for ever in a caller's transaction at
        # REPEATABLE READ: the read after a duplicate-key error sees the transaction's first
        # snapshot, without the row another one committed meanwhile. An insert that leaves
        # the existing keys as they are does not fail. Only what a plain read does not find
        # goes in: such an insert locks each key it finds, and given every group of a claim
        # it waited behind the concurrent claims holding any of them (10 ms an insert with
        # four consumers, nine inserts a claim). It locks them exclusively, as the UPDATE
        # that follows it (``write_settings``) will: INSERT IGNORE's shared lock, taken by
        # three producers flagging a new queue's groups at once behind the first one's
        # insert, was one that two of them then both wanted to raise, a deadlock (MariaDB
        # 10.11, the offer and ack load test with groups: one or two a run, reaching
        # callers' transactions)
        if missing := self.absent_rows(conn, table, pkind, rows):
            conn.execute(mysql.insert(table).on_duplicate_key_update(pkind=table.c.pkind),
                         missing)

    def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                 where: Sequence[str]) -> Sequence[Sequence[Any]]:
        # the locking read's order is not promised (``build_select_due``)
        return sorted(super().pick_due(conn, pkind, now_ms, limit, where), key=_claim_key)

    def due_params(self, pkind: str, now_ms: int, limit: int) -> dict[str, Any]:
        return {**super().due_params(pkind, now_ms, limit), "b_walk": walk_length(limit)}

    def build_select_due(self, where: tuple[str, ...]) -> AnySelect:
        # A locking read locks every row it examines, matching or not, and keeps the locks
        # to the end of its transaction, at READ COMMITTED too. Walking the claim index, a
        # claim passes the messages of higher priority not yet due: in a caller's open
        # transaction they stayed locked when they fell due, and a concurrent claim skipped
        # them for lower priorities (MariaDB 10.11). On a table without statistics the
        # optimizer may also take the due index and sort, locking every due message (of 40,
        # a claim of 10 locked all and a second claim got none). So the due messages are
        # found without locks, in claim order, walking the claim index (the group index for
        # a grouped queue's ungrouped messages, which it holds together), as many as
        # concurrent claims leave room for (``walk_length``); then read again by primary
        # key in that order, still due, each locked unless another claim holds it, until
        # ``limit``: the only rows locked are those taken. The derived table's LIMIT keeps
        # it from being merged into the outer read, STRAIGHT_JOIN reads it first (a table
        # read first would lock all it reads), and the outer read has no ORDER BY: a sort
        # would lock every row it sorts. The materialized ids are read in the order they
        # were written, claim order, and ``pick_due`` sorts what it gets. MariaDB (10.11.19)
        # can still report a deadlock for a row this read would have skipped: one that a
        # transaction holds while that transaction waits for a row this claim holds (an offer
        # updating messages being claimed); one of the two is rolled back. MySQL 9.7 did not
        # (README, "Transactions").
        t = self.table
        index = self.group_index if "ungrouped" in where else self.claim_index
        now = sa.bindparam("b_now", type_=sa.BigInteger)
        due = (self.due_read(where).with_only_columns(t.c.id)
               .with_hint(t, f"FORCE INDEX ({index})")
               .limit(sa.bindparam("b_walk", type_=sa.Integer)).subquery("due"))
        still = [t.c.scheduled_at <= now]
        if "ungrouped" in where:
            still.append(t.c.group_key.is_(None))
        return (sa.select(*self._claim_columns).prefix_with("STRAIGHT_JOIN").select_from(due)
                .join(t, t.c.id == due.c.id).with_hint(t, "FORCE INDEX (PRIMARY)")
                .where(*still).limit(sa.bindparam("b_limit", type_=sa.Integer))
                .with_for_update(skip_locked=True))

    def heads_plan(self, dialect: sa.Dialect, pkind: str, groups: Sequence[str], now_ms: int,
                   limit: int) -> tuple[sa.Executable, dict[str, Any]]:
        # ``_heads_by_id``, on MySQL and MariaDB. The portable form (the heads' ids from an
        # IN subquery over the groups' rows) was planned by MariaDB, on tables without
        # statistics, as a read of the whole queue, whose every row InnoDB keeps locked to
        # the end of the claim: head reads and acks waited on each other (1.0 to 1.4 s a head
        # read on average in drains by four consumers). One locking read per group joined by
        # UNION ALL, the form before this one, took 8 ms for 100 groups in a drain by one
        # consumer (a statement of a hundred parts, parsed each time); this one 2.5 ms.
        return self._heads_by_id, {"b_kind": pkind, "b_now": now_ms, "names": list(groups),
                                   "count": len(groups)}

    @functools.cached_property
    def _heads_by_id(self) -> AnySelect:
        """The heads of the groups listed by ``names`` (``count`` of them): their ids found
        without locks, one walk of the group index per group, in a derived table (its LIMIT
        keeps the server from merging it into the outer read, which would compare the ids
        row by row with the whole queue), then the messages read and locked by primary key,
        the only rows the claim locks. The ids come from a snapshot (the statement's, or at
        REPEATABLE READ the transaction's), the locking read sees each message as committed
        now: one acked, put off or moved to another group since is left out, and its group
        waits for the next claim."""
        t, g = self.table, self.groups
        now = sa.bindparam("b_now", type_=sa.BigInteger)
        ids = (sa.select(self.group_head(self.group_index).label("id"), g.c.group_key)
               .where(g.c.pkind == sa.bindparam("b_kind"),
                      g.c.group_key.in_(sa.bindparam("names", expanding=True)))
               .limit(sa.bindparam("count", type_=sa.Integer)).subquery("heads"))
        # STRAIGHT_JOIN keeps the join in that order: on a table whose statistics say it is
        # near empty, MariaDB read the queue first, all of it (FORCE INDEX cannot help a
        # table read first), each row locked (no dialect filter: "mariadb" would drop it).
        # A head another transaction holds is passed over, and its group waits for the next
        # claim: a claim that waited for one head held others, and a caller's offer of both
        # then closed a circle (InnoDB rolled the caller back); locked in id order, the
        # offers' order, the claim still held up all its groups while the caller's
        # transaction ran
        return (sa.select(*self._claim_columns).prefix_with("STRAIGHT_JOIN").select_from(ids)
                .join(t, t.c.id == ids.c.id).with_hint(t, "FORCE INDEX (PRIMARY)")
                .where(t.c.group_key == ids.c.group_key, t.c.scheduled_at <= now)
                .with_for_update(skip_locked=True))

    def drop_groups(self, conn: sa.Connection, pkind: str, groups: Sequence[str]) -> None:
        # The portable drop (a DELETE of the groups whose messages a NOT EXISTS finds none)
        # reads the group index with shared locks, at READ COMMITTED too: InnoDB locks what
        # a DML statement's subquery reads. An offer updating a message of such a group
        # waits for that entry, and the drop for the entry of a message the offer updated:
        # in the offer and ack load test with groups (MariaDB 10.11, 10 s), 97 of the 113
        # deadlocks logged had a drop in them. Here the empty groups are found by a plain
        # read, which locks nothing, and only those still free are deleted, through the
        # primary key: the DELETE of nine groups of a table of ten, planned as a read of all
        # the rows, waited for the tenth, which a claim held. A group given a message in
        # between loses its row, which is no loss: the first claim that meets the group
        # makes it again (``win_groups``).
        for part in chunked(sorted(set(groups)), self.in_list_max):
            values = {"b_kind": pkind, "names": part}
            if empty := conn.execute(self._empty_groups["read"], values).scalars().all():
                conn.execute(self._empty_groups["drop"], {"b_kind": pkind, "names": empty})

    @functools.cached_property
    def _empty_groups(self) -> dict[str, sa.Executable]:
        """``drop_groups``' statements on the groups listed by ``names`` (and b_kind): "read"
        the names of those with no message, "drop" the free ones."""
        g = self.groups
        mine = (g.c.pkind == sa.bindparam("b_kind"),
                g.c.group_key.in_(sa.bindparam("names", expanding=True)))
        return {"read": sa.select(g.c.group_key).where(*mine, ~self._group_has_messages),
                "drop": _DeleteByPrimary(g).where(*mine, g.c.claimed_until.is_(None))}

    def probe(self, stmt: AnySelect, index: str | None = None) -> AnySelect:
        # On a table whose statistics were taken empty, MariaDB probed the queue for a
        # group's messages through the due index, on pkind alone: every message of the
        # queue for each group (0.9 s to free the groups of one ack of 100)
        return stmt if index is None else stmt.with_hint(self.table, f"FORCE INDEX ({index})")

    def current_read(self, stmt: AnySelect) -> AnySelect:
        # A claim in a caller's transaction runs at its level, by default InnoDB's REPEATABLE
        # READ, where a plain read sees the snapshot the transaction's first plain read took:
        # counting in-flight messages after waiting for another claim's settings lock would
        # miss what that claim took (the cap overrun). A locking read (shared) reads what is
        # committed now.
        return stmt.with_for_update(read=True)

    def payload_budget(self, conn: sa.Connection) -> PayloadBudget:
        # A statement larger than max_allowed_packet makes the server drop the connection
        # ("MySQL server has gone away", naming nothing), and measured on MariaDB 10.11 the
        # server already refuses one whose values add up to half of it (with 16 MiB: one
        # 8 MiB payload, or two of 5 MiB), so half the packet is what a statement may carry.
        pool = conn.engine.pool
        packet = _PACKET_LIMITS.get(pool)
        if packet is None:
            found = conn.exec_driver_sql("SELECT @@max_allowed_packet").scalar()
            assert found is not None  # the variable's one row
            packet = int(found)
            _PACKET_LIMITS[pool] = packet
        statement = packet // 2 - 64 * 1024
        return PayloadBudget(statement - ROW_OVERHEAD, min(self.offer_chunk_bytes, statement),
                             f"half of this server's max_allowed_packet of {packet:,} bytes, "
                             "less the rest of the statement")

    @classmethod
    def multi_primary(cls, conn: sa.Connection) -> bool:
        # a MariaDB server with Galera replication on; MySQL has no such variable
        row = conn.execute(sa.text("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")).first()
        return row is not None and str(row[1]).upper() == "ON"

    @classmethod
    def settings_advice(cls, conn: sa.Connection, table_name: str) -> list[Advice]:
        out = []
        # MySQL 8 and MariaDB >= 11.1 name it transaction_isolation, older MariaDB tx_isolation
        isolation = None
        for name in ("transaction_isolation", "tx_isolation"):
            try:
                isolation = conn.exec_driver_sql(f"SELECT @@global.{name}").scalar()
                break
            except sa.exc.DBAPIError:
                conn.rollback()
        if isolation is not None and isolation.upper().replace("-", " ") != "READ COMMITTED":
            out.append(Advice("transaction_isolation", isolation,
                              "sqldelay's own offers and claims of a near-empty queue run at "
                              "READ COMMITTED; made in your transactions at this level they "
                              "can deadlock on InnoDB gap locks (producers of ascending keys, "
                              "two claims of a near-empty queue): prefer READ COMMITTED there"))
        flush = str(conn.exec_driver_sql(
            "SELECT @@global.innodb_flush_log_at_trx_commit").scalar())
        if flush != "1":
            out.append(Advice("innodb_flush_log_at_trx_commit", flush,
                              "committed offers and acks can be lost in a crash of the server "
                              "or machine; 1 makes every commit durable"))
        return out

    @classmethod
    def server_time(cls) -> sa.Executable:
        # UTC_TIMESTAMP, not UNIX_TIMESTAMP(NOW(3)): NOW() is in the session's time zone,
        # ambiguous for an hour a year where it keeps daylight saving time
        return sa.text("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', "
                       "UTC_TIMESTAMP(6)) DIV 1000")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> int | None:
        args = getattr(exc.orig, "args", ())
        return args[0] if args and isinstance(args[0], int) else None

    def existing_rows(self, conn: sa.Connection, pkind: str, keys: Sequence[str], *,
                      current: bool = False) -> Iterable[Sequence[Any]]:
        # A locking read through the unique index locks its entry of each key, then the
        # row; an ack's DELETE, through the primary key, locks the row, then its entry of
        # the unique index to delete it: an offer updating messages that a worker acked at
        # the same time deadlocked with it, row by row (1213; an async torture run of four
        # producers of overlapping batches and two workers, MariaDB 10.11: 3,721 retries
        # and 7 offers failed in 30 s). So the rows' ids are read first without locks, then
        # the rows locked through the primary key in id order, the order an ack's DELETE
        # locks them in, and every producer of overlapping batches too (a locking read
        # locks rows in the order it reads them, at REPEATABLE READ every row it passes:
        # four producers of the same 200 keys, planned differently, had up to 19 of 80
        # offers fail with 1213 before the keys' read was held to one index). A row acked
        # in between is gone from the locking read: its key is offered as a new one, as a
        # key absent at the first read is. The read of the keys
        # is sent as the insert is (``insert_new``) where the driver takes it:
        # SQLAlchemy's expanding list of keys, made at every call, cost a third of the
        # read's client time.
        ids = self._ids_of(conn, pkind, keys, False)
        if not ids and not current:
            return []
        rows = ([] if not ids else
                list(conn.execute(self._existing_by_id, {"b_kind": pkind, "ids": ids})))
        if len(rows) == len(keys):
            return rows
        # While that read waited for the rows it locks, other producers may have inserted
        # keys it had found absent. Inserting one of those fails, and InnoDB keeps the
        # failed insert's shared lock on the key's index entry and the gap before it to the
        # end of the transaction; the offer's next round then waited for rows held by an
        # ack deleting that key or an offer inserting in that gap, each waiting for that
        # lock: a deadlock. So the keys not found are read again once the rows found are
        # held, and those now there are locked by id too (mostly newer, higher ids: the
        # order acks lock in). The load test's producers passing ``connection=`` met 0 to 8
        # deadlocks a driver in 10 s before, and 0 to 2 since (three MariaDB drivers,
        # three runs before, four since), and made 13% more offers on average. After an
        # insert met a key (``current``), that read is a locking one, of those keys alone.
        held = {row[0] for row in rows}
        more = self._ids_of(conn, pkind, [k for k in keys if k not in held], current)
        if more:
            rows.extend(conn.execute(self._existing_by_id, {"b_kind": pkind, "ids": more}))
        return rows

    def _ids_of(self, conn: sa.Connection, pkind: str, keys: Sequence[str],
                current: bool) -> list[int]:
        """The ids of the rows of ``keys``, read without locks (with shared ones where
        ``current``), in order."""
        if current:
            # After the offer's insert met a key: at REPEATABLE READ, the level of a caller's
            # transaction by default, a plain read sees the snapshot of the transaction's
            # first read, without the key, and the offer inserted it again, for ever. A
            # locking read reads what is committed now; the failed insert holds a shared
            # lock on the key's entry already. (Only the keys the plain read did not find:
            # on those it found, an ack deleting one would wait for the shared lock.)
            found = conn.execute(self.current_read(self._existing_ids),
                                 {"b_kind": pkind, "keys": keys})
        elif conn.dialect.driver in _NAMED_DRIVERS:
            values = {"b_kind": pkind}
            values.update((f"keys_{i + 1}", k) for i, k in enumerate(keys))
            found = conn.exec_driver_sql(self.named_read(conn.dialect, len(keys)), values)
        else:
            found = conn.execute(self._existing_ids, {"b_kind": pkind, "keys": keys})
        return sorted(found.scalars())

    def named_read(self, dialect: sa.Dialect, n: int) -> str:
        """The SQL of ``existing_rows``'s read of the ids of ``n`` keys (parameters b_kind
        and keys_1 to keys_n) through ``dialect`` as connected, compiled once."""
        key = (type(dialect), n)
        if key not in self._named_reads:
            stmt = self._existing_ids.params(b_kind="", keys=[""] * n)
            self._named_reads[key] = str(stmt.compile(
                dialect=named_placeholders(dialect),
                compile_kwargs={"render_postcompile": True}))
        return self._named_reads[key]

    def insert_new(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                   now_ms: int, actor: str | None, events: OfferEvents | None = None) -> None:
        """Insert ``rows`` as new messages, with named placeholders where the driver takes
        them.

        These drivers escape each value into the statement's text in Python, one call per
        value: 40% of an offer_many's client CPU through PyMySQL. Of a row's ten columns five
        hold values of its own (key, payload, due time, priority, group): the due time fills
        two, the kind, creation time and actor are the call's, and the lock and deliveries
        are constants. Named placeholders send each value once."""
        if conn.dialect.driver not in _NAMED_DRIVERS:
            super().insert_new(conn, pkind, rows, now_ms, actor)
            return
        values = {"b_kind": pkind, "created": now_ms, "actor": actor}
        for i, r in enumerate(rows):
            values[f"k_{i}"], values[f"p_{i}"], values[f"a_{i}"] = r.key, r.payload, r.at_ms
            values[f"r_{i}"], values[f"g_{i}"] = r.priority, r.group
        conn.exec_driver_sql(self.named_write(conn.dialect, len(rows), actor is not None),
                             values)

    def named_write(self, dialect: sa.Dialect, n: int, by: bool) -> str:
        """The SQL of ``insert_new`` for ``n`` rows (naming the actor where ``by``) through
        ``dialect`` as connected, compiled once."""
        key = ("insert", type(dialect), n, by)
        if key not in self._named_sql:
            one = {"pkind": sa.bindparam("b_kind"), "pkey": sa.bindparam(row_name("k")),
                   "payload": sa.bindparam(row_name("p")),
                   "scheduled_at": sa.bindparam(row_name("a")),
                   "scheduled_at_initially": sa.bindparam(row_name("a")),
                   "created_at": sa.bindparam("created"), "lock_uuid": sa.null(),
                   "deliveries": sa.literal_column("0"),
                   "priority": sa.bindparam(row_name("r")),
                   "group_key": sa.bindparam(row_name("g"))}
            if by:
                one["enqueued_by"] = sa.bindparam("actor")
            sql = (mysql.insert(self.table).values(one)
                   .compile(dialect=named_placeholders(dialect)).string)
            self._named_sql[key] = repeat_values(sql, n)  # the one row's VALUES repeated
        return self._named_sql[key]

    def update_changed(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                       ids: Sequence[int], now_ms: int, actor: str | None) -> None:
        # One UPDATE for up to _UPDATE_PART rows, by primary key, each column a CASE of the
        # rows' ids: an executemany of UPDATEs is a round trip per row with PyMySQL, and a
        # CASE is a walk of its branches for each row, so a part's cost grows with its
        # square. The update was an INSERT … ON DUPLICATE KEY UPDATE of the rows, which took
        # each key's entry of the unique index exclusively. Another producer whose insert of
        # that key had failed holds the entry shared to the end of its transaction, and
        # waits for the row this one holds: a deadlock, every time two producers updated a
        # key that a third had just inserted (MariaDB 10.11).
        named, by = conn.dialect.driver in _NAMED_DRIVERS, actor is not None
        for part in chunked(list(zip(rows, ids, strict=True)), _UPDATE_PART):
            values = {"b_kind": pkind, "created": now_ms, "actor": actor}
            for i, (r, row_id) in enumerate(part):
                values[f"i_{i}"], values[f"p_{i}"], values[f"a_{i}"] = row_id, r.payload, r.at_ms
                values[f"r_{i}"], values[f"g_{i}"] = r.priority, r.group
            if (len(part), by) not in self._updates:
                self._updates[len(part), by] = self._update_by_id(len(part), by)
            stmt = self._updates[len(part), by]
            if named:
                key = ("update", type(conn.dialect), len(part), by)
                if key not in self._named_sql:
                    self._named_sql[key] = stmt.compile(
                        dialect=named_placeholders(conn.dialect)).string
                conn.exec_driver_sql(self._named_sql[key], values)
            else:
                conn.execute(stmt, values)

    def _update_by_id(self, n: int, by: bool) -> sa.Update:
        """``update_changed``'s UPDATE of ``n`` rows by their ids (parameters b_kind, created,
        actor where ``by``, and i_0, p_0, a_0, r_0, g_0 to i_n-1 …: id, payload, due time,
        priority and group of each row)."""
        t = self.table
        ids = [sa.bindparam(f"i_{i}", type_=t.c.id.type) for i in range(n)]

        def each(name: str, column: sa.Column[Any]) -> sa.Case[Any]:
            return sa.case(*((ids[i], sa.bindparam(f"{name}_{i}", type_=column.type))
                             for i in range(n)), value=t.c.id)

        new = {"payload": each("p", t.c.payload), "scheduled_at": each("a", t.c.scheduled_at),
               "scheduled_at_initially": each("a", t.c.scheduled_at),
               "created_at": sa.bindparam("created", type_=t.c.created_at.type),
               "lock_uuid": sa.null(), "deliveries": sa.literal_column("0"),
               "priority": each("r", t.c.priority), "group_key": each("g", t.c.group_key)}
        if by:
            new["enqueued_by"] = sa.bindparam("actor", type_=t.c.enqueued_by.type)
        stmt = (sa.update(t).where(t.c.pkind == sa.bindparam("b_kind"), t.c.id.in_(ids))
                .values(new))
        return self.by_id(stmt, t)


class MariaDBQueueDao(MySQLQueueDao):
    name = "mariadb"
    delete_returning = True  # DELETE … RETURNING, which MySQL lacks


def _claim_key(row: Sequence[Any]) -> tuple[int, int, int]:
    """Claim order of a row of ``_claim_columns``: priority first, then due time, then id."""
    return -row[7], row[3], row[0]
