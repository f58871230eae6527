"""PostgreSQL: every offer chunk and every claim is one statement.

- offer: ``INSERT … SELECT FROM unnest(arrays) ON CONFLICT``; three array parameters whatever
  the row count, so a chunk is one small statement; ``RETURNING (xmax = 0)`` tells inserted
  from updated rows, and rows the conflict clause skipped are the ignored ones. ON CONFLICT
  is atomic per row, so a concurrent producer cannot make an outcome wrong. An offer of one
  chunk first tries the same INSERT without a conflict clause (``insert_new``), which a key
  that exists fails whole; with history, the offer's statement writes its events too.
- claim: a MATERIALIZED CTE picks due ids ``FOR UPDATE SKIP LOCKED`` (materialized so the
  LIMIT runs once), the UPDATE marks them and returns the rows.
- wake-ups: an offer that writes a message due now calls ``pg_notify``: in the caller's
  transaction (or one of several statements) from the offer statement itself, delivered at
  commit; an offer that commits alone, after its commit in a transaction of its own, which
  spares concurrent producers a lock PostgreSQL holds through each notifying commit's flush
  (``_woken``). Repeats fold into one; future messages send none. A worker LISTENs on a
  connection of its own, and a burst of notifications becomes one wake-up of one poll (the
  debounce).
- round trips: psycopg sends BEGIN as a round trip of its own, so an operation that is one
  statement runs in autocommit: one round trip instead of three (BEGIN, statement, COMMIT).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from ..errors import InvalidArgumentError, Raced
from ..messages import OfferOutcome
from .base import (
    Advice,
    ClaimedRow,
    ClaimEvents,
    OfferEvents,
    OfferRow,
    QueueDao,
    in_claim_order,
)
from .common import AUTOCOMMIT, RETRIED, AnySelect, chunked
from .flow import group_order, loose_wanted, walk_length

log = logging.getLogger("sqldelay")

# the SQL of a statement for the driver, its constant parameters and, for a positional
# driver, the parameter names in order (``_driver_sql``)
_DriverSql: TypeAlias = tuple[str, dict[str, Any], tuple[str, ...] | None]

# the "high-churn" preset (schema.TUNING_PRESETS), from db-queue's advice as measured by the
# churn benchmark: no fillfactor, since a claim changes indexed columns (scheduled_at,
# lock_uuid) and so can never be a HOT update; free space per page only made the table larger
PG_CHURN = {
    "autovacuum_vacuum_scale_factor": 0.0001,
    "autovacuum_vacuum_threshold": 500,
    "autovacuum_analyze_scale_factor": 0.001,
    "autovacuum_vacuum_cost_limit": 500,
    "autovacuum_vacuum_cost_delay": 2,  # PostgreSQL 12+'s default; db-queue's 5 predates it
}


# the offer's columns, each one parameter: the payloads an array in binary, the others text
# (``offer_columns``)
_ARRAYS = ("payloads",)
# the size from which verify reports a queue table without planner statistics (40,000 small
# messages take 4.4 MB; below it a claim's read of every due message costs a few ms at most)
_UNANALYZED_BYTES = 4 << 20
# the planner settings of a grouped claim's statements after its walk, which sets them
# (``_heads_settings``). The heads' claim, once its driver prepares it, runs one plan made
# for any values: the server's choice between that and a plan made for each call's values
# went, with the group index of messages of a group alone, to one made for each call, its
# planning a fifth of the heads' claim (a drain of 100,000 messages in 1,000 groups by four
# consumers: 69 to 76 us of server time a message, 62 to 65 with the one plan)
_WALK_SETTINGS = {"enable_bitmapscan": "off", "enable_seqscan": "off", "enable_sort": "off",
                  "jit": "off", "plan_cache_mode": "force_generic_plan"}
# how many busy groups the grouped claim's walk reads at most, hashed, to pass over their
# messages (``_free_in_walk``). Written into the statement, where a bound limit alone would
# leave the planner's estimate of the read to the table's statistics: a read it expects not
# to fit in work_mem is not hashed but run again for every message walked. The walk hashes
# 64-bit hashes of the names, not the names: 4,096 of them fit in the 64 kB of work_mem
# (twice that for a hash, PostgreSQL 15's hash_mem_multiplier), whatever the names' length
_BUSY_READ = 4096
# division by zero: what the "bucket_credit" claim's charge raises where the bucket no longer
# holds what it claimed (``_claim_statement``)
_OVERDRAWN = "22012"


# a zero written into the statements (a bound one is a parameter on every call)
_ZERO: sa.ColumnClause[int] = sa.literal_column("0")

# A claim's lock wait, set by the claim itself before it locks a message, to the end of its
# transaction (in autocommit, the statement): half the deadlock timeout, in milliseconds
# (``_claim_statement``: ``gives_way``; the grouped claim's walk, ``_win_groups``). Written
# tight: each byte is one more in every claim, and psycopg caches the statements of up to
# 4,096 (tests/unit/test_sql_postgresql.py).
_BOUNDED_WAIT: sa.ColumnElement[str] = sa.literal_column(
    "(SELECT set_config('lock_timeout',(extract(epoch FROM current_setting("
    "'deadlock_timeout')::interval)*500)::int::text,true))", sa.Text)


def _constant(text: str) -> sa.ColumnElement[str]:
    """``text``, one of this module's own constants (no quotes in it), written into a
    statement as a literal."""
    return sa.literal_column(f"'{text}'", sa.Text)


def _texts(name: str) -> sa.ColumnElement[Sequence[str | None]]:
    """The strings (or NULLs) of the JSON array in parameter ``name``, as text[] (an offer's
    keys, groups, details)."""
    listed = sa.func.json_array_elements_text(
        sa.cast(sa.bindparam(name, type_=sa.Text), pg.JSON)
    ).table_valued("v", with_ordinality="n").render_derived(name=f"{name}_v")
    return sa.func.array(sa.select(listed.c.v).order_by(listed.c.n).scalar_subquery())


def _shape(events: OfferEvents | None) -> tuple[str, str, str, str | None] | None:
    """What of an offer's ``events`` shapes its statement (a key of the statements kept)."""
    if events is None:
        return None
    return events.table.name, events.created, events.updated, events.ignored


def _grouped_in_flight(f: sa.FromClause, kind: sa.ColumnElement[str],
                       group: sa.ColumnElement[bool]) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions on ``f`` (an alias of a queue table) of queue ``kind``'s messages in
    flight at b_now whose group meets ``group``: what the group flight index holds (schema:
    ``_kind_group_flight_ix``)."""
    return (f.c.pkind == kind, group, f.c.lock_uuid.is_not(None),
            f.c.scheduled_at > sa.bindparam("b_now", type_=sa.BigInteger))


class _IdList(sa.types.TypeDecorator[Sequence[int]]):
    """A list of message ids sent as one array literal ('{1,2,3}'), cast to BIGINT[] in the
    statement: the drivers encode a list parameter element by element in Python, 13% of an
    ack_many of 100's client time."""

    impl = sa.Text
    cache_ok = True

    # the parameter is always bound to a list, never NULL: narrower than the Optional value
    # SQLAlchemy's signature declares
    def process_bind_param(  # type: ignore[override]
            self, value: Sequence[int], dialect: sa.Dialect) -> str:
        return "{" + ",".join(map(str, map(int, value))) + "}"


class _TextList(sa.types.TypeDecorator[Sequence[str]]):
    """A list of lock ids as one array literal, each quoted, as ``_IdList`` does for ids."""

    impl = sa.Text
    cache_ok = True

    # as ``_IdList``'s: always a list, never NULL
    def process_bind_param(  # type: ignore[override]
            self, value: Sequence[str], dialect: sa.Dialect) -> str:
        return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                               for v in value) + "}"


class PostgresQueueDao(QueueDao):
    name = "postgresql"
    offer_chunk = 5000
    max_payload_bytes = (1 << 30) - 1  # a bytea value stops at 1 GB
    autocommit_one_statement = True
    claim_is_one_statement = True
    bucket_in_claim = True
    statistics_after = 50_000
    claims_side_by_side = True
    acks_in_claim = True
    claim_writes_history = True
    ack_writes_history = True
    partial_indexes = True
    delete_returning = True
    # an offer of one chunk tries a plain INSERT of its rows first (``insert_new``), where
    # most offers are of new keys: it costs the server less than the INSERT … ON CONFLICT of
    # ``offer``, and one that meets an existing key fails whole (an error in the server's
    # log) and the offer runs its usual way, the next hundred of the queue object going there
    # at once (``QueueBase.first_failed``)
    inserts_first = True
    offer_writes_history = True
    duplicate_key_codes = frozenset({"23505"})
    # serialization failure, deadlock, lock not available
    transient_codes = frozenset({"40001", "40P01", "55P03"})
    deadlock_codes = frozenset({"40P01"})
    # connection exceptions (class 08); admin shutdown, crash shutdown, cannot connect now
    # (starting up or shutting down): asyncpg reports some of these as plain DBAPI errors
    unavailable_codes = frozenset({"08000", "08001", "08003", "08004", "08006", "08007",
                                   "08P01", "57P01", "57P02", "57P03"})
    missing_table_codes = frozenset({"42P01"})

    def __init__(self, table: sa.Table) -> None:
        super().__init__(table)
        # of the unlocked messages of no group, and of the messages of a group: see schema
        self.claim_index = f"{table.name}_kind_loose_ix"
        self.group_index = f"{table.name}_kind_groups_ix"
        self._offer_cache: dict[tuple[object, ...], _DriverSql] = {}
        self._unnest_inserts: dict[tuple[str, tuple[str, ...], bool], sa.Insert] = {}
        self._claims: dict[tuple[tuple[str, ...], bool, bool, bool], sa.Update] = {}
        self._recorded_claims: dict[tuple[tuple[str, ...], bool, bool, bool, str, str, str],
                                     AnySelect] = {}
        self._recorded_acks: dict[tuple[str, str], AnySelect] = {}
        self._heads_claims: dict[bool, sa.Update] = {}

    def held_by(self, lock: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]:
        # IS NOT DISTINCT FROM, where = would do: from "lock_uuid = x" the planner infers
        # "lock_uuid IS NOT NULL", the condition of the in-flight index, and read that index
        # whole for an ack (a tiny index, as its statistics said) with the ids as a filter,
        # their array parsed again for each entry: 0.49 ms an ack of 100, against 0.19 ms
        # through the primary key. This form it does not read so, and means the same here
        # (the lock is never NULL).
        return self.table.c.lock_uuid.is_not_distinct_from(lock)

    def ids_listed(self) -> sa.ColumnElement[bool]:
        # one array parameter instead of an IN-list: the statement text is the same for any
        # batch, so psycopg parses it once and the server can prepare it; and its plan probes
        # the primary key (a list of 100 ids on a table without statistics was planned as a
        # scan of the whole queue: 5 ms to mark a grouped claim's 100 messages claimed). The
        # array is read once, by a subquery: cast in the condition itself, a plan that read
        # the table in full parsed it again for every row, and the planner chose that read
        # for lists of a few hundred ids (an ack_many of 3,000 messages of 30 claims took
        # 2.1 s at 20,000 messages, one of 400 took 0.27 s)
        return self.table.c.id == sa.any_(self._id_array(sa.bindparam("ids", type_=_IdList())))

    @staticmethod
    def _id_array(ids: sa.BindParameter[Sequence[int]]) -> sa.ColumnElement[Sequence[int]]:
        """The ids of an array parameter (``_IdList``), read once by a subquery."""
        kind = pg.ARRAY(sa.BigInteger)
        return sa.cast(sa.select(sa.cast(ids, kind)).scalar_subquery(), kind)

    def due_in_claim_order(self, base: AnySelect, limit: sa.ColumnElement[int], *,
                           gate: Sequence[sa.ColumnElement[bool]] = (),
                           skip_locked: bool = False,
                           source: sa.FromClause | None = None,
                           ungrouped: bool = False,
                           of_groups: Sequence[sa.ColumnElement[bool]] = ()) -> AnySelect:
        # Reads each through its partial index (``schema``: ``_kind_loose_ix``,
        # ``_kind_ready_grouped_ix``, ``_kind_flight_ix``): the unlocked due messages of no
        # group in claim order, those of a group (none where ``ungrouped``: only messages of
        # no group are wanted), and the locked ones whose lock has expired (few, if
        # any: sorted); ``of_groups`` in the last two only. Each takes ``limit`` at most and
        # locks what it returns; the first ``limit`` of all, in claim order, are the due
        # messages. (One read of a claim index holding every message walked, below each
        # priority's due messages, an entry for every message claimed since the last vacuum,
        # at its lock's expiry: claims of a lower priority passed them all.) The gate is
        # tested once, before any read: in each, it was planned twice.
        t = self.table if source is None else source
        # the claim order's columns, added to those of ``base`` that it lacks
        selected = {c.name for c in base.selected_columns}
        order = {name: t.c[name] if name in selected else t.c[name].label(f"o_{name}")
                 for name in ("priority", "scheduled_at", "id")}
        added = [c for c in order.values() if isinstance(c, sa.Label)]
        waiting = t.c.lock_uuid.is_(None)
        reads: list[tuple[sa.ColumnElement[bool], ...]] = [(waiting, t.c.group_key.is_(None))]
        if not ungrouped:
            reads.append((waiting, t.c.group_key.is_not(None), *of_groups))
        reads.append((t.c.lock_uuid.is_not(None), *of_groups))
        parts = []
        for i, read in enumerate(reads):
            part = super().due_in_claim_order(base.add_columns(*added).where(*read), limit,
                                              skip_locked=skip_locked, source=t)
            # a read that locks is not allowed beside UNION, but a subquery's is; the parts
            # named shortly: psycopg caches statements of up to 4,096 bytes
            parts.append(sa.select(part.subquery(f"p{i}")) if skip_locked else part)
        both = sa.union_all(*parts).subquery("b")
        priority, due, row_id = (both.c[c.name] for c in order.values())
        return (sa.select(*list(both.c)[:len(base.selected_columns)]).where(*gate)
                .order_by(priority.desc(), due, row_id).limit(limit))

    def _claim_statement(self, where: tuple[str, ...], by: bool = False,
                         acking: bool = False, gives_way: bool = False) -> sa.Update:
        """One statement: a MATERIALIZED CTE picks due ids FOR UPDATE SKIP LOCKED (materialized
        so the LIMIT runs once), the UPDATE marks them (and names their holder when ``by``)
        and returns the rows, with the lock and holder each had before; one per set of claim
        conditions. The condition "bucket" (a queue with a rate limit alone) locks the
        settings row, claims no more of the picked messages than its bucket holds and charges
        the bucket in the same statement, so claims of the queue take turns only while it
        runs; where the queue has more than a rate limit (or none), it claims nothing.
        "bucket_credit" claims what the bucket held when the statement began and charges it
        last, the settings row locked only from then to the commit; where a concurrent claim
        spent the tokens meanwhile, the charge fails the whole statement (``_OVERDRAWN``:
        ``claim_plain`` raises Raced, and the claim runs again with "bucket").

        ``acking``: the statement also deletes the messages acked (``claim_acking``), in a
        CTE the pick waits for, and marks none of them claimed: in one statement the delete
        and the claim see the same snapshot, and a message whose lock expired could be both
        deleted and claimed.

        ``gives_way`` (a transaction of sqldelay's own, which the engine layer runs again):
        once the acks are deleted, the claim waits for a row lock at most half the deadlock
        timeout, to the end of its transaction (``_BOUNDED_WAIT``).
        SKIP LOCKED does not skip everything. Where the row it meets was being updated by a
        transaction that commits just then, PostgreSQL locks the row's newer versions too,
        and waits for the transaction updating the newest. An offer updating that message
        again while waiting for a row the claim has locked is then in a deadlock with the
        claim, and PostgreSQL rolls back the one whose deadlock check runs first: the one
        that began to wait first, the offer, which in its caller's transaction nothing runs
        again (steered, test_a_claim_gives_way_to_an_offer_updating_what_it_meets: the
        offer rolled back, 40P01). Waiting less than that, the claim gives up first, is
        run again, and the offer goes on. The table's lock is taken before the statement
        runs, and is not bounded. What a claim of several statements sends after it
        (flow control beyond a rate limit: the charge of the bucket) is bounded too: it is
        the claim's, run again with it."""
        if (where, by, acking, gives_way) not in self._claims:
            t, s = self.table, self.settings
            kind: sa.BindParameter[str] = sa.bindparam("b_kind")
            now = sa.bindparam("b_now", type_=sa.BigInteger)
            limit = sa.bindparam("limit", type_=sa.Integer)
            credit = "bucket_credit" in where
            bucketed = credit or "bucket" in where
            # with a bucket, nothing is picked where it held no token when the statement began
            # (read without a lock: the pick comes before the lock, below)
            funded = ([sa.exists().where(s.c.pkind == kind, self.bucket_held(now) >= 1000)]
                      if bucketed else [])
            each = [w for w in where if w == "ungrouped"]  # a condition on each message
            gate = [w for w in where if w not in ("bucket", "bucket_credit", "ungrouped")]
            acked = self._acked_pairs() if acking else None
            # the acked messages are not marked claimed, though one whose lock expired may be
            # picked: the condition in the pick made the planner read the queue whole, and
            # sort it. The array is read once (``_id_array``; cast in the condition itself,
            # it is cast again for every row: 2.3 ms a claim with 400 acks)
            spared = [] if acked is None else [t.c.id != sa.all_(self._ack_ids())]
            # the acks first: the pick's gate counts what they deleted, so the DELETE runs to
            # its end (its rows locked in key order, ``_taken``) before anything is picked.
            # Left to the end of the statement, as PostgreSQL runs a CTE nothing reads, the
            # ack waited for a row an offer held while holding the rows just claimed, which
            # the offer could be waiting for: a deadlock no lock order prevents (four
            # producers of shuffled batches and two workers: 10 to 20 in 10 s)
            acks_first = [] if acked is None else [
                sa.select(sa.func.count()).select_from(acked).scalar_subquery() >= _ZERO]
            # set once the acks are deleted, before the pick locks anything (a gate: tested
            # once, before either read)
            bounded = [_BOUNDED_WAIT.is_not(None)] if gives_way else []
            picked = (
                self.due_in_claim_order(
                    sa.select(t.c.id, t.c.scheduled_at, t.c.lock_uuid, t.c.claimed_by,
                              t.c.priority).where(*self.due_conditions(each)),
                    limit, gate=[*acks_first, *bounded, *self.due_conditions(gate), *funded],
                    # the messages of no group alone: this claim runs where the queue has no
                    # groups (its settings say so, and every writer of a grouped message sets
                    # them first), or for its ungrouped messages
                    skip_locked=True, ungrouped=True)
                .cte("picked")
                .prefix_with("MATERIALIZED")
            )
            if bucketed:
                # with "bucket", the settings row is locked once the messages are picked (its
                # condition counts them), so the claims of the queue pick side by side and take
                # turns only to mark what they picked and charge for it: an unreached rate limit
                # cost 10% of a drain by four consumers, against 19% with the row locked first.
                # With "bucket_credit" it is read, not locked, and the claims take turns only
                # to charge (13% against 22%, once the plain claim had got faster: the longer
                # turns bounded the queue's claims whatever the plain claim cost)
                read = (sa.select(s.c.pkind, self.bucket_held(now).label("held"))
                        .where(s.c.pkind == kind, s.c.rate_limit.is_not(None),
                               ~self.other_controls))
                if not credit:
                    picks = sa.select(sa.func.count()).select_from(picked).scalar_subquery()
                    read = read.where(picks >= 0).with_for_update()
                bucket = read.cte("bucket")
                # the bucket caps what was picked, not the pick: a LIMIT the planner cannot
                # read it takes for a tenth of the queue, and then plans the UPDATE below as a
                # hash join over every message (800 ms a claim at 1e6)
                held: sa.ColumnElement[int] = (sa.select(bucket.c.held // 1000)
                                               .scalar_subquery())
                picked = (
                    sa.select(*picked.c)
                    .order_by(picked.c.priority.desc(), picked.c.scheduled_at, picked.c.id)
                    .limit(sa.func.least(limit, sa.func.coalesce(held, 0)))
                    .cte("allowed")
                    .prefix_with("MATERIALIZED")
                )
            claim = self._mark_picked(picked, by, t.c.id == picked.c.id, *spared)
            if bucketed:
                taken = sa.select(sa.func.count()).select_from(picked).scalar_subquery()
                if credit:
                    # the bucket as it is now (the row locked, the latest version read); a
                    # charge it cannot pay divides by zero, which undoes the statement
                    held, spend = self.bucket_held(now), taken * 1000
                    charge = (sa.update(s).where(s.c.pkind == kind, s.c.rate_limit.is_not(None),
                                                 taken > 0)
                              .values(tokens_milli=sa.case((held >= spend, held - spend),
                                                           else_=spend // sa.literal(0)),
                                      refilled_at=self.bucket_refilled_at(now)))
                else:
                    charge = (sa.update(s).where(s.c.pkind == bucket.c.pkind, taken > 0)
                              .values(tokens_milli=bucket.c.held - taken * 1000,
                                      refilled_at=self.bucket_refilled_at(now)))
                claim = claim.add_cte(charge.cte("charged"))
            if acked is not None:
                claim = claim.add_cte(acked)
            self._claims[where, by, acking, gives_way] = claim
        return self._claims[where, by, acking, gives_way]

    def _ack_ids(self) -> sa.ColumnElement[Sequence[int]]:
        return self._id_array(sa.bindparam("ack_ids", type_=_IdList()))

    def _acked_pairs(self) -> sa.CTE:
        """The DELETE of the messages named by the parameters ack_ids and ack_locks (arrays,
        element by element: each id with the lock it was claimed under), as a CTE. The ids
        are listed as an ack's are, for the planner to reach them through the primary key
        (a join with the unnested pairs was a hash join over a scan of the table), and each
        row's lock is looked up among those of its id's places; each array is read once, by
        a subquery (cast in a condition itself, it is cast again for every row).

        An id can come twice, with two locks: a consumer acking a message and, with it,
        the one that replaced it (an offer of its key updates the row, which is then
        claimed again). Looked up by the id's first place only, the stale lock was read and
        the live one's ack deleted nothing: the message stayed in flight, handled, until
        its lock expired (a handful of a run of four producers of overlapping batches)."""
        t = self.table
        ids = self._ack_ids()
        kind = pg.ARRAY(t.c.lock_uuid.type)
        locks = sa.type_coerce(sa.Grouping(sa.cast(
            sa.select(sa.cast(sa.bindparam("ack_locks", type_=_TextList()), kind))
            .scalar_subquery(), kind)), kind)  # in parentheses: an element of it is read
        place = sa.func.unnest(sa.func.array_positions(ids, t.c.id)).column_valued("p")
        held = sa.func.array(sa.select(locks[place]).scalar_subquery())
        taken = self._taken(t.c.id == sa.any_(ids),
                            sa.func.array_position(held, t.c.lock_uuid).is_not(None))
        return sa.delete(t).where(t.c.id == taken.c.id).returning(t.c.id).cte("acked")

    # ---- acks, in the offers' lock order ------------------------------------------------
    #
    # An offer's upsert takes the existing rows of its keys in the chunk's order, sorted by
    # key (``lock_order``). A DELETE takes its rows in the order its plan reaches them: by id
    # through the primary key, in the heap's order through a bitmap or a scan of a small
    # table. An ack holding one row that an offer wanted, while waiting for another the
    # offer held, deadlocked: four producers of shuffled batches of 50 of 200 keys and two
    # workers, 8 to 20 deadlocks retried in 10 s and 2 to 7 reaching the producers that
    # pass ``connection=``, each costing a second (deadlock_timeout). So an ack of several
    # rows locks them first, in key order, and deletes what it locked: the one lock order
    # of offers and acks (claims skip locked rows).

    def _taken(self, *where: sa.ColumnElement[bool]) -> sa.CTE:
        """The ids of the rows meeting ``where``, locked in key order (the code points'
        order of ``lock_order``, which COLLATE "C" gives in a UTF-8 database): a locking
        read sorts its rows before it locks them. Materialized, so the DELETE that reads
        it deletes only rows already locked in that order."""
        t = self.table
        return (sa.select(t.c.id).where(*where)
                .order_by(sa.collate(t.c.pkey, "C")).with_for_update()
                .cte("taken").prefix_with("MATERIALIZED"))

    def acks_of(self, count: int) -> sa.Delete:
        return self._ack_many if count == 1 else self._acks_in_key_order

    @functools.cached_property
    def _acks_in_key_order(self) -> sa.Delete:
        t = self.table
        taken = self._taken(self.held_by(sa.bindparam("lock")), self.ids_listed())
        return sa.delete(t).where(t.c.id == taken.c.id)

    def lock_acked(self, conn: sa.Connection, ids: Sequence[int]) -> None:
        # an ack of several claim batches, a DELETE each: all their rows in key order first
        conn.execute(self._acked_in_key_order, {"ids": ids})

    @functools.cached_property
    def _acked_in_key_order(self) -> AnySelect:
        t = self.table
        return (sa.select(t.c.id).where(self.ids_listed())
                .order_by(sa.collate(t.c.pkey, "C")).with_for_update())

    def claim_acking(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, where: Sequence[str], actor: str | None,
                     acks: Sequence[tuple[str, Sequence[int]]],
                     events: ClaimEvents | None = None) -> list[ClaimedRow]:
        # one round trip and, in autocommit, one commit for the ack of the last batch, the
        # claim of the next and the claim's history events (data-modifying CTEs)
        values = self.claim_values(pkind, now_ms, limit, lock, until_ms, actor)
        if acks:
            values["ack_ids"] = [i for _, ids in acks for i in ids]
            values["ack_locks"] = [held for held, ids in acks for _ in ids]
        shape = (tuple(where), actor is not None, bool(acks), bool(conn.info.get(RETRIED)))
        stmt: sa.Executable = self._claim_statement(*shape)
        if events is not None:
            stmt = self._recorded_claim(*shape, events)
            values["claimed_detail"] = events.claimed_detail
            values["expired_detail"] = events.expired_detail
        rows = self._raced(where, lambda: in_claim_order(
            ClaimedRow(*r) for r in conn.execute(stmt, values).all()))
        if events is not None:
            events.written = True
        return rows

    def ack_recorded(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                     events: sa.Table, kind: str, now_ms: int) -> int:
        # the DELETE a CTE whose rows an INSERT of their events reads: one statement, which
        # runs in autocommit, where the delete's RETURNING and the events' INSERT took a
        # transaction (BEGIN, two statements, COMMIT)
        if (events.name, kind) not in self._recorded_acks:
            t = self.table
            taken = self._taken(self.held_by(sa.bindparam("lock")), self.ids_listed())
            gone = (sa.delete(t).where(t.c.id == taken.c.id)
                    .returning(t.c.pkey, t.c.claimed_by, t.c.deliveries).cte("gone"))
            written = sa.insert(events).from_select(
                ["pkind", "pkey", "at", "kind", "actor", "attempt"],
                sa.select(sa.bindparam("b_kind", type_=sa.Text), gone.c.pkey,
                          sa.bindparam("b_now", type_=sa.BigInteger), _constant(kind),
                          gone.c.claimed_by, gone.c.deliveries))
            self._recorded_acks[events.name, kind] = (
                sa.select(sa.func.count()).select_from(gone).add_cte(written.cte("recorded")))
        stmt = self._recorded_acks[events.name, kind]
        return sum(int(conn.execute(stmt, {"lock": lock, "ids": chunk, "b_kind": pkind,
                                           "b_now": now_ms}).scalar() or 0)
                   for chunk in chunked(ids, self.in_list_max))

    def _recorded_claim(self, where: tuple[str, ...], by: bool, acking: bool, gives_way: bool,
                        events: ClaimEvents) -> AnySelect:
        """``_claim_statement`` that writes its history events: the UPDATE a CTE whose rows
        the statement returns, and an INSERT into ``events.table`` of an event of kind
        ``events.claimed`` per message claimed (detail: parameter claimed_detail), after one of
        kind ``events.lock_expired`` (detail: expired_detail) where its last holder's lock
        had run out, as ``QueueBase._claim_events`` makes them."""
        key = (where, by, acking, gives_way, events.table.name, events.claimed,
               events.lock_expired)
        if key not in self._recorded_claims:
            claimed = self._claim_statement(where, by, acking, gives_way).cte("claimed")
            kind = sa.bindparam("b_kind", type_=sa.Text)
            now = sa.bindparam("b_now", type_=sa.BigInteger)
            names = ("pkind", "pkey", "at", "kind", "actor", "attempt", "detail", "o_id",
                     "o_step")

            def event(*values: Any) -> list[sa.Label[Any]]:
                return [(sa.literal_column(str(v)) if isinstance(v, int) else v).label(name)
                        for v, name in zip(values, names, strict=True)]

            expired = (sa.select(*event(
                kind, claimed.c.pkey, now, _constant(events.lock_expired),
                claimed.c.previous_holder, claimed.c.deliveries - 1,
                sa.bindparam("expired_detail", type_=sa.Text), claimed.c.id, 0))
                .where(claimed.c.previous_lock.is_not(None)))
            taken = sa.select(*event(
                kind, claimed.c.pkey, now, _constant(events.claimed),
                sa.bindparam("actor", type_=sa.Text) if by else sa.null(),
                claimed.c.deliveries, sa.bindparam("claimed_detail", type_=sa.Text),
                claimed.c.id, 1))
            both = sa.union_all(expired, taken).subquery("e")
            # in the recorder's order: per message, its lost lock before its claim
            source = (sa.select(*list(both.c)[:7])
                      .order_by(both.c.o_id, both.c.o_step))
            written = sa.insert(events.table).from_select(
                ["pkind", "pkey", "at", "kind", "actor", "attempt", "detail"], source)
            self._recorded_claims[key] = (sa.select(*claimed.c)
                                          .add_cte(written.cte("recorded")))
        return self._recorded_claims[key]

    def _mark_picked(self, picked: sa.CTE, by: bool, *where: sa.ColumnElement[bool],
                     target: sa.FromClause | None = None) -> sa.Update:
        """The UPDATE of the queue table (or of ``target``, an alias of it) that marks the
        messages ``picked`` (a CTE of their id, due time, lock, holder) claimed by ``lock``
        until ``until`` (and held by ``actor`` when ``by``), and returns them as
        ClaimedRow's fields, with the lock and holder each had before."""
        t = self.table if target is None else target
        mark = {"lock_uuid": sa.bindparam("lock"), "scheduled_at": sa.bindparam("until"),
                "deliveries": t.c.deliveries + 1}
        if by:
            mark["claimed_by"] = sa.bindparam("actor")
        # an alias of a Table is an Alias, which sa.update takes; SQLAlchemy types
        # Table.alias() as returning any NamedFromClause, which it does not take
        return (sa.update(t).where(*where).values(**mark)  # type: ignore[arg-type]
                .returning(t.c.id, t.c.pkey, t.c.payload, picked.c.scheduled_at.label("due"),
                           t.c.scheduled_at_initially, t.c.created_at, t.c.deliveries,
                           t.c.priority, t.c.group_key, t.c.enqueued_by,
                           picked.c.lock_uuid.label("previous_lock"),
                           picked.c.claimed_by.label("previous_holder"), t.c.trace_context))

    def gather_statistics(self, conn: sa.Connection) -> bool:
        # Without statistics (a new table, until autovacuum first analyzes it: a minute or
        # more, never where autovacuum is off) the planner takes the due messages of a queue
        # for a handful and reads all of them, then sorts them, at every claim: 35.8 ms a
        # claim of 100 at 200,000 due, against 4.1 ms for the walk of the claim index it
        # chooses once it knows the table (benchmarks/README.md, fresh_backlog). Statistics
        # of an empty table (reltuples 0) say as little.
        # Statistics gathered once hold as the table grows: the planner scales the row counts
        # they give by the table's current size.
        name = pg.dialect().identifier_preparer.format_table(self.table)
        known = conn.execute(sa.text("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:t)"),
                             {"t": name}).scalar()
        if known is None or known > 0:
            return False
        conn.exec_driver_sql(f"ANALYZE {name}")
        return True

    @classmethod
    def tuning_ddl(cls, table: sa.Table, preset: str) -> list[str]:
        # Every claim writes a new row version and every ack leaves a dead one: vacuuming
        # after a fixed few hundred dead rows instead of a fraction of the table keeps claims
        # from wading through dead index entries (benchmarks/README.md, churn).
        name = pg.dialect().identifier_preparer.format_table(table)
        return [f"ALTER TABLE {name} SET ("
                + ", ".join(f"{k} = {v}" for k, v in PG_CHURN.items()) + ")"]

    @classmethod
    def settings_advice(cls, conn: sa.Connection, table_name: str) -> list[Advice]:
        # every ack leaves a dead row version: without autovacuum the table and its indexes
        # only grow, and claims slow down as they wade through dead entries
        out = []
        server = conn.exec_driver_sql("SHOW autovacuum").scalar()
        assert server is not None  # SHOW answers one row
        if server != "on":
            out.append(Advice("autovacuum", server, "autovacuum is off for the whole server: "
                              "the queue table bloats with dead rows; turn it on", True))
        options = conn.execute(sa.text(
            "SELECT reloptions FROM pg_class WHERE oid = to_regclass(:name)"),
            {"name": table_name}).scalar() or []
        if "autovacuum_enabled=false" in options:
            out.append(Advice(f"{table_name}.autovacuum_enabled", "false",
                              "autovacuum is off for the queue table: the table bloats with "
                              f"dead rows; ALTER TABLE {table_name} RESET (autovacuum_enabled)",
                              True))
        elif not any(o.startswith("autovacuum_vacuum_scale_factor") for o in options):
            out.append(Advice(f"{table_name}.autovacuum_vacuum_scale_factor", "default",
                              "the queue table vacuums at the default 20% of its rows; a busy "
                              "queue keeps up better with the high-churn preset: "
                              "sqldelay migrate --tuning high-churn"))
        # a table of some size without statistics: each claim reads and sorts every due
        # message (``gather_statistics``, which a table filled in callers' transactions or
        # by many processes offering a little each never reaches)
        known, size = conn.execute(sa.text(
            "SELECT reltuples, pg_relation_size(oid) FROM pg_class "
            "WHERE oid = to_regclass(:name)"), {"name": table_name}).first() or (1, 0)
        if known <= 0 and size >= _UNANALYZED_BYTES:
            out.append(Advice(f"{table_name} statistics", "none",
                              f"the queue table holds {size >> 20} MB and has no planner "
                              "statistics: every claim reads and sorts all due messages "
                              f"until it is analyzed; run ANALYZE {table_name}", True))
        return out

    # ---- wake-ups: LISTEN/NOTIFY on one channel per queue table, the payload is the pkind ----
    notifications = True

    @property
    def channel(self) -> str:
        return f"sqldelay_{self.table.name}"

    def wake_listeners(self, conn: sa.Connection, pkind: str) -> None:
        conn.execute(sa.select(sa.func.pg_notify(self.channel, pkind)))

    def listen_statement(self, channel: str | None = None) -> str:
        return f'LISTEN "{self.channel if channel is None else channel}"'

    @property
    def settled_channel(self) -> str:
        # within the 63 bytes PostgreSQL keeps of a channel's name, as the wake-ups' is: a
        # table name has 40 bytes at most (``schema.check_table_name``)
        return f"sqldelay_done_{self.table.name}"

    def notify_settled(self, conn: sa.Connection, pkind: str, key: str) -> None:
        conn.execute(sa.select(sa.func.pg_notify(self.settled_channel,
                                                 self.settled_note(pkind, key))))

    @classmethod
    def server_time(cls) -> sa.Executable:
        # clock_timestamp(), not now(): now() is the time the transaction began
        return sa.text("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> str | None:
        return getattr(exc.orig, "sqlstate", None)

    def probe(self, stmt: AnySelect, index: str | None = None) -> AnySelect:
        # The planner turns an EXISTS into an anti-join, and on a table without statistics
        # (a new queue, a small busy groups table) it scanned every group of the queue for
        # each message read: 50 ms for a claim's 416 rows. OFFSET 0 keeps the subquery a
        # subplan, probed through its index once per row, whatever the statistics say.
        return stmt.offset(_ZERO)

    # On a table without statistics (a new queue), or one that has grown, the planner took
    # the due messages for a handful and read them all, through a bitmap or the due index,
    # then sorted them, where the walk of the claim index reads a few hundred: 50-120 ms a
    # grouped claim at 20,000 due, against 2-7 ms for the walk. So bitmap reads, sequential
    # reads and sorts are off for the claim's statements after the walk, and JIT too: a plan
    # that cannot do without a sort still has one, but its cost passes JIT's thresholds, and
    # compiling took 1.5 s a claim. The price: the read of ungrouped messages walks the claim
    # index too, past grouped messages where few are ungrouped. The walk itself is planned
    # under the server's settings, and reads its two indexes in order with or without
    # statistics (test_planner_statistics checks it). In the claim's own transaction the
    # walk sets them until it ends (a statement of their own cost a grouped drain a tenth of
    # its rate); in a caller's, they are set around the heads' claim alone, then set back
    # (``_heads_settings``).

    def walk_settings(self) -> AnySelect:
        return self._planner_settings(_WALK_SETTINGS)

    def _heads_settings(self, conn: sa.Connection, stmt: sa.Executable,
                        params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        """The rows of ``stmt``, run in a caller's transaction under the grouped claim's
        planner settings, which are then set back to what they were."""
        was = conn.execute(self._planner_settings(_WALK_SETTINGS, current=True)).first()
        assert was is not None  # the settings' one row
        rows = conn.execute(stmt, params).all()
        conn.execute(self._planner_settings(dict(zip(_WALK_SETTINGS, was[:len(_WALK_SETTINGS)],
                                                     strict=True))))
        return rows

    @staticmethod
    def _setting(values: dict[str, str], *, constant: bool = False) -> list[sa.ColumnElement[Any]]:
        """The calls that set the planner settings ``values`` until the transaction ends
        (written into the statement where ``constant``: fewer parameters to send)."""
        if constant:
            return [sa.func.set_config(_constant(name), _constant(value), sa.true())
                    for name, value in values.items()]
        return [sa.func.set_config(name, value, True) for name, value in values.items()]

    @classmethod
    def _planner_settings(cls, values: dict[str, str], *, current: bool = False) -> AnySelect:
        """A SELECT that sets the planner settings ``values`` until the transaction ends
        (returning, when ``current``, what each was before)."""
        before = [sa.func.current_setting(name) for name in values] if current else []
        return sa.select(*before, *cls._setting(values))

    # ---- groups: advisory locks and in-flight messages, no group rows -----------------------
    #
    # A group is busy while one of its messages is in flight (locked, the lock not expired).
    # The claims read that from the messages themselves, in the partial index of each group's
    # in-flight messages (schema: ``_kind_group_flight_ix``: the walk reads the busy groups
    # there once, the heads' claim probes each group it locked), so nothing about a group is
    # written anywhere: an ack, a release, a dead letter, an extension or an expired
    # lock changes the group's state by changing its message, and an ack of grouped messages
    # is the plain ack. (The groups table, which every claim and ack wrote a row of for each
    # group, cost a grouped drain about a quarter of its time.) Claims take turns on a group
    # through a transaction-level advisory lock on its name, tried, never waited for. A claim
    # is two statements: the first walks the first due messages in claim order, passing over
    # busy groups, and locks the free groups it meets, in claim order, until it holds
    # ``limit`` of them; the second, whose snapshot is taken once those locks are held,
    # claims the first due message of each locked group still free, and the ungrouped
    # messages. A claim that took a message of the group before this one got the lock has
    # committed by then, so the second statement sees that message in flight; one that has
    # not committed still holds the lock. That needs READ COMMITTED, where each statement
    # sees what was committed before it began: a claim in a transaction at a stricter level,
    # whose statements all see its first snapshot, is refused.
    groups_in_claim = True

    def claim_groups(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, actor: str | None,
                     own_transaction: bool) -> list[ClaimedRow]:
        self.require_transaction(conn)
        return self._claim_won(conn, pkind, now_ms, limit, lock, until_ms, actor,
                               own_transaction, gated=True)

    def claim_grouped(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                      lock: str, until_ms: int, actor: str | None,
                      own_transaction: bool) -> list[ClaimedRow]:
        # the claim of a queue with groups and other controls, which ``claim_controlled``
        # has checked already (and, for a cap or a locked bucket, holds the settings row)
        return self._claim_won(conn, pkind, now_ms, limit, lock, until_ms, actor,
                               own_transaction, gated=False)

    def _claim_won(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int, lock: str,
                   until_ms: int, actor: str | None, own_transaction: bool, *,
                   gated: bool, again: bool = True) -> list[ClaimedRow]:
        """The two statements of a grouped claim (``gated``: the first finds nothing where
        the queue's settings now hold more than groups: a pause, a limit), the second under
        the claim's planner settings. Where the second finds groups the first locked busy,
        and so takes fewer than ``limit``, both run once more (``again``) for the rest."""
        walk = walk_length(limit)
        names, won, seen, loose_seen, isolation = self._walk(conn, gated, own_transaction, {
            "b_kind": pkind, "b_now": now_ms, "limit": limit, "walk": walk,
            "space": f"{self.table.name}\x1f{pkind}\x1f"})
        if isolation != "read committed":
            raise InvalidArgumentError(
                f"a grouped claim on PostgreSQL needs READ COMMITTED, and this transaction "
                f"runs at {isolation.upper()}: each of its statements must see what other "
                "claims committed before it began")
        loose = loose_wanted(limit, won, seen, walk, loose_seen)
        if not won and not loose:
            return []
        values = {**self.claim_values(pkind, now_ms, limit, lock, until_ms, actor),
                  "loose": loose, "group_names": names or "[]"}
        stmt = self._heads_claim(actor is not None)
        rows = [ClaimedRow(*r) for r in (
            conn.execute(stmt, values).all() if own_transaction
            else self._heads_settings(conn, stmt, values))]
        # A claim that committed while the walk ran took messages of groups the walk saw
        # free, and released their locks: the walk locked those groups, and the heads' claim,
        # whose snapshot is later, found them busy. Two consumers that walk the same first
        # groups at once meet so, and the later one took none of its groups: with four
        # consumers, one claim in twenty-three came back short while groups were free, most
        # of them empty. A walk run again sees what that claim took, and passes over it.
        busy_won = won - sum(r.group is not None for r in rows)
        if again and busy_won and len(rows) < limit:
            rows += self._claim_won(conn, pkind, now_ms, limit - len(rows), lock, until_ms,
                                    actor, own_transaction, gated=gated, again=False)
        return in_claim_order(rows)

    def _walk(self, conn: sa.Connection, gated: bool, own_transaction: bool,
              params: dict[str, Any]) -> tuple[Any, ...]:
        """The grouped claim's first statement's row (``_win_groups``) without the settings
        it set: the names of the groups locked (``group_names``' text, None for none), how
        many, the messages walked, whether one was ungrouped, the isolation level."""
        row = conn.execute(self._win_groups[gated, own_transaction], params).first()
        assert row is not None  # the statement's one row
        return row[:5]

    def _busy(self, kind: sa.ColumnElement[str],
              group: sa.ColumnElement[str]) -> sa.Exists:
        """Whether ``group`` of queue ``kind`` has a message in flight at b_now: one probe of
        the group flight index (none for a message without a group, whose NULL matches
        nothing)."""
        f = self.table.alias("f")
        return self.probe(sa.select(sa.literal_column("1")).where(
            *_grouped_in_flight(f, kind, f.c.group_key == group))).exists()

    def _free_in_walk(self, kind: sa.ColumnElement[str], group: sa.ColumnElement[str],
                      walked: sa.ColumnElement[int]) -> sa.ColumnElement[bool]:
        """Whether ``group`` (NULL for an ungrouped message) has nothing in flight, as a walk
        of ``walked`` messages asks it of every message it reads: in the names of the busy
        groups, read once per claim and hashed, no more of them than the walk reads messages
        (so that the read costs no more than the probes it spares) nor than ``_BUSY_READ``;
        where there were more, through ``_busy``'s probe too. (The walk's answer only spares
        the claim groups it cannot take: the heads' claim asks ``_busy`` again once it holds
        the groups' locks.)"""
        # The probe of each message walked took a third of the walk's time on the server
        # (four consumers, 300 busy groups: 3.9-4.3 ms a claim of 100, against 2.8-3.0)
        f = self.table.alias("f")
        most: sa.ColumnClause[int] = sa.literal_column(str(_BUSY_READ))

        def hashed(name: sa.ColumnElement[str]) -> sa.ColumnElement[int]:
            # a collision passes a free group over in this claim, no worse
            return sa.func.hashtextextended(name, _ZERO)

        # in the group flight index's order: the walk is planned under the server's settings,
        # and with statistics taken while most of a small table was in flight, the planner
        # read a grown table whole to find the few in flight now; the order it cannot get
        # from a sequential read without sorting it all keeps the read on the index
        names = (sa.select(hashed(f.c.group_key).label("g"))
                 .where(*_grouped_in_flight(f, kind, f.c.group_key.is_not(None)))
                 .order_by(f.c.group_key).limit(most).subquery("names"))
        busy = sa.select(names.c.g).limit(walked).cte("busy").prefix_with("MATERIALIZED")
        all_read = (sa.select(sa.func.count()).select_from(busy).scalar_subquery()
                    < sa.func.least(walked, most))
        return sa.or_(group.is_(None), sa.and_(hashed(group).not_in(sa.select(busy.c.g)),
                                               sa.or_(all_read, ~self._busy(kind, group))))

    @functools.cached_property
    def _win_groups(self) -> dict[tuple[bool, bool], AnySelect]:
        """The grouped claim's first statement, by whether it is gated and whether it runs
        in the claim's own transaction (where it sets the planner settings too, and the
        claim's lock wait, returned last): one row of the names of the groups it locked
        (JSON text, passed on as it is to the heads' claim's ``group_names``), how many, how
        many messages it walked, whether one of them was ungrouped, and the transaction's
        isolation level.
        Parameters: b_kind, b_now, limit, walk (how many messages to walk) and space (the
        advisory locks' prefix of names: the queue table and the queue)."""
        t, s = self.table.alias("q"), self.settings.alias("s")
        kind: sa.BindParameter[str] = sa.bindparam("b_kind")
        limit, walked = (sa.bindparam(name, type_=sa.Integer) for name in ("limit", "walk"))
        groups_only = sa.exists().where(
            s.c.pkind == kind, s.c.has_groups != _ZERO, s.c.paused == _ZERO,
            s.c.rate_limit.is_(None), s.c.max_in_flight.is_(None))
        out = {}
        for gated in (False, True):
            w = self.due_in_claim_order(
                sa.select(t.c.group_key, t.c.priority, t.c.scheduled_at, t.c.id), walked,
                gate=[groups_only] if gated else [], source=t,
                of_groups=[self._free_in_walk(kind, t.c.group_key, walked)]).subquery("walked")
            walk = (sa.select(w.c.group_key, sa.func.row_number().over(
                        order_by=(w.c.priority.desc(), w.c.scheduled_at, w.c.id)).label("pos"))
                    .cte("walk").prefix_with("MATERIALIZED"))
            # each group once, at its first place in the walk; OFFSET 0 keeps the order a
            # subquery's, below the lock's condition, which is then tried row by row as the
            # LIMIT takes them (a volatile condition is not moved into a subquery): the
            # claim locks no group it does not take, and leaves the rest to others
            first = (sa.select(walk.c.group_key.label("k"))
                     .where(walk.c.group_key.is_not(None)).group_by(walk.c.group_key)
                     .order_by(sa.func.min(walk.c.pos)).offset(_ZERO).subquery("first"))
            name = sa.bindparam("space", type_=sa.Text) + first.c.k
            # materialized, so that the groups are locked once for the two reads below
            won = (sa.select(first.c.k).where(sa.func.pg_try_advisory_xact_lock(
                       sa.func.hashtextextended(name, _ZERO))).limit(limit)
                   .cte("won").prefix_with("MATERIALIZED"))
            row = sa.select(
                sa.select(sa.cast(sa.func.json_agg(won.c.k), sa.Text)).scalar_subquery(),
                sa.select(sa.func.count()).select_from(won).scalar_subquery(),
                sa.select(sa.func.count()).select_from(walk).scalar_subquery(),
                sa.select(walk.c.pos).where(walk.c.group_key.is_(None)).exists(),
                sa.func.current_setting(_constant("transaction_isolation")))
            out[gated, False] = row
            # the heads' claim that follows passes over heads others hold, but its SKIP
            # LOCKED can wait as a claim alone's can, and for as long (``_claim_statement``:
            # gives_way)
            out[gated, True] = row.add_columns(*self._setting(_WALK_SETTINGS, constant=True),
                                               _BOUNDED_WAIT)
        return out

    # A list of group names in one condition (group_key IN (…)) was planned, on a table
    # without statistics, as a read of every group, each compared with every name. The names
    # unnested, each probes its group through the index, whatever the statistics say. They
    # travel as one JSON text: the driver encodes a list of names as an array element by
    # element in Python, which took a tenth of a grouped claim's client time.
    @staticmethod
    def _names() -> sa.TableValuedAlias:
        """The group names of the parameter ``group_names`` (``_listed``) as the rows of
        ``n(k)``, in their order."""
        listed = sa.cast(sa.bindparam("group_names", type_=sa.Text), pg.JSON)
        return sa.func.json_array_elements_text(listed).table_valued("k").render_derived(
            name="n")

    @staticmethod
    def _listed(names: Sequence[str]) -> str:
        """The value of the parameter ``group_names`` listing ``names``."""
        return json.dumps(list(names))

    def heads_plan(self, dialect: sa.Dialect, pkind: str, groups: Sequence[str], now_ms: int,
                   limit: int) -> tuple[sa.Executable, dict[str, Any]]:
        # the heads are read by the statement that claims them, the grouped claim's second
        return self._heads_claim(False), {
            **self.claim_values(pkind, now_ms, limit, "plan", now_ms, None),
            "loose": 0, "group_names": self._listed(groups)}

    def _heads_claim(self, by: bool) -> sa.Update:
        """The grouped claim's second statement: the first due message of each group named by
        ``group_names`` (locked by the first) where the group has none in flight, and up to
        ``loose`` ungrouped messages, locked; the first ``limit`` of them in claim order
        marked claimed and returned as ``_mark_picked`` returns them."""
        if by not in self._heads_claims:
            # read through aliases, with its constants written in, as the walk: psycopg
            # converts a statement's text again on every call past 4,096 bytes, and the
            # table's name, before every column, was most of it (test_sql_postgresql)
            t, n = self.table.alias("q"), self._names()
            kind: sa.BindParameter[str] = sa.bindparam("b_kind")
            now = sa.bindparam("b_now", type_=sa.BigInteger)
            columns = (t.c.id, t.c.scheduled_at, t.c.lock_uuid, t.c.claimed_by, t.c.priority)
            # each head found without a lock, then locked, passing over those another
            # transaction holds: a claim that waited for a head held others that an offer of
            # them in the same transaction then waited for, and gave way (the offer and ack
            # load test with groups, 10 s: 21 to 27 times, and 135 to 199 offers made; none,
            # and 1,533 to 2,262 offers, since). Its group waits for the next claim: locked
            # in the read of the head, a head passed over would send the read on to the
            # group's next message, out of the group's order. The lock's conditions are
            # checked again on the row as locked: a head an offer has moved to another group
            # or put off is left, and its group waits too. The group is compared as IS NOT
            # DISTINCT FROM (the same here: a name is never NULL), which no index answers: as
            # "=", on a table whose statistics were taken while it held no grouped message,
            # the planner read each group's messages whole through the group index to find
            # its head's row, instead of the head by its id (336 against 8.7 ms a claim of 100
            # heads, pgbench, 1,000 groups of 100)
            head = (sa.select(t.c.id)
                    .where(t.c.pkind == kind, t.c.group_key == n.c.k, t.c.scheduled_at <= now)
                    .order_by(*group_order(t)).limit(sa.literal_column("1")).lateral("head"))
            h = self.table.alias("h")
            heads = (sa.select(*(h.c[c.name] for c in columns)).select_from(n)
                     .join(head, sa.true()).join(h, h.c.id == head.c.id)
                     .where(~self._busy(kind, n.c.k),
                            h.c.group_key.is_not_distinct_from(n.c.k),
                            h.c.scheduled_at <= now)
                     .with_for_update(of=h, skip_locked=True).cte("heads"))
            # the ungrouped messages in claim order: the waiting ones from an index of their
            # own, which in a queue of groups alone is empty, and the expired locks
            loose = (self.due_in_claim_order(
                         sa.select(*columns).where(t.c.group_key.is_(None)),
                         sa.bindparam("loose", type_=sa.Integer), skip_locked=True, source=t,
                         ungrouped=True)
                     .cte("loose").prefix_with("MATERIALIZED"))
            both = sa.union_all(sa.select(*heads.c), sa.select(*loose.c)).subquery("both")
            picked = (sa.select(*both.c)
                      .order_by(both.c.priority.desc(), both.c.scheduled_at, both.c.id)
                      .limit(sa.bindparam("limit", type_=sa.Integer))
                      .cte("picked").prefix_with("MATERIALIZED"))
            # joined by id alone: under the claim's planner settings (``walk``: no sequential
            # reads) each picked row probes the primary key. An array of the ids as a second
            # condition made the generic plan, which a prepared claim runs after its fifth
            # call, probe the whole array again for each picked row
            m = self.table.alias("m")
            self._heads_claims[by] = self._mark_picked(picked, by, m.c.id == picked.c.id,
                                                       target=m)
        return self._heads_claims[by]

    # a group's state is its messages': acking, releasing, dead-lettering or extending a
    # grouped message is all there is to it
    def ack_freeing(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                    groups: Sequence[str], *, drop: bool = True) -> int:
        return self.ack_many(conn, lock, ids)

    ack_frees_in_one = True

    def free_groups(self, conn: sa.Connection, pkind: str, lock: str,
                    groups: Sequence[str], *, drop: bool = True) -> None:
        pass

    def drop_groups(self, conn: sa.Connection, pkind: str, groups: Sequence[str]) -> None:
        pass

    def extend_group(self, conn: sa.Connection, pkind: str, lock: str, group: str,
                     until_ms: int) -> None:
        pass

    def insert_rows(self, conn: sa.Connection, table: sa.Table,
                    params: Sequence[dict[str, Any]]) -> None:
        # one array per column, unnested: a short statement whatever the row count, which
        # psycopg parses once (a multi-row VALUES of hundreds of placeholders is parsed anew
        # on every call, and cost more than the server's work for the history's events)
        self._insert_unnested(conn, table, params, skip_existing=False)

    def _insert_unnested(self, conn: sa.Connection, table: sa.Table,
                         params: Sequence[dict[str, Any]],
                         *, skip_existing: bool) -> None:
        names = tuple(c.name for c in table.columns if c.name in params[0])
        conn.execute(self._unnest_insert(table, names, skip_existing),
                     {name: [row[name] for row in params] for name in names})

    def _unnest_insert(self, table: sa.Table, names: tuple[str, ...],
                       skip_existing: bool) -> sa.Insert:
        key = (table.name, names, skip_existing)
        if key not in self._unnest_inserts:
            rows = sa.func.unnest(*(sa.bindparam(n, type_=pg.ARRAY(table.c[n].type))
                                    for n in names)).table_valued(*names).render_derived(
                name="u")
            stmt = pg.insert(table).from_select(list(names),
                                                sa.select(*(rows.c[n] for n in names)))
            self._unnest_inserts[key] = stmt.on_conflict_do_nothing() if skip_existing else stmt
        return self._unnest_inserts[key]

    def _offer_statement(self, update: bool | None, by: bool, wake: bool = True,
                         events: OfferEvents | None = None) -> AnySelect:
        """The offer of a chunk: one INSERT … SELECT FROM unnest(arrays) with ON CONFLICT DO
        NOTHING (``update`` False) or DO UPDATE where something changed (True), or where
        something changed of a key the JSON array in parameter ``updating`` lists (None: a
        chunk of both flags), naming the producer (``enqueued_by``) when ``by``; it returns
        the written keys and whether each was inserted and, when ``wake``, wakes the
        listeners when a written row is due. Given ``events``, it writes the history events
        of what it did (``_logged``)."""
        t = self.table
        kind = sa.bindparam("b_kind", type_=sa.Text)
        now = sa.bindparam("b_now", type_=sa.BigInteger)
        insert = self._offer_insert(by)
        if update is not False:
            ex = insert.excluded
            changes = {"payload": ex.payload, "scheduled_at": ex.scheduled_at,
                       "scheduled_at_initially": ex.scheduled_at_initially,
                       "created_at": ex.created_at, "lock_uuid": None, "deliveries": 0,
                       "priority": ex.priority, "group_key": ex.group_key}
            if by:
                changes["enqueued_by"] = ex.enqueued_by
            changed = sa.or_(t.c.payload != ex.payload,
                             t.c.scheduled_at_initially != ex.scheduled_at_initially,
                             t.c.priority != ex.priority,
                             t.c.group_key.is_distinct_from(ex.group_key))
            if update is None:
                # DO UPDATE locks the existing row of every key, updated or not: the keys
                # only to be created are locked where they come, in the chunk's order
                changed = sa.and_(ex.pkey == sa.any_(_texts("updating")), changed)
            stmt = insert.on_conflict_do_update(
                index_elements=["pkind", "pkey"], set_=changes, where=changed)
        else:
            stmt = insert.on_conflict_do_nothing(index_elements=["pkind", "pkey"])
        # the written rows (skipped ones return nothing), inserted or updated; a row due now
        # wakes the listeners at commit, in this same round trip (repeats fold into one)
        written = stmt.returning(
            t.c.pkey, (sa.literal_column("xmax") == 0).label("inserted"),
            t.c.scheduled_at).cte("written")
        answer = [written.c.pkey, written.c.inserted]
        if wake:
            answer.append(sa.case((written.c.scheduled_at <= now,
                                   sa.func.pg_notify(self.channel, kind))).label("woke"))
        select = sa.select(*answer)
        if events is not None:
            select = select.add_cte(self._logged(written, by, events).cte("logged"))
        return select

    def _offer_insert(self, by: bool) -> pg.Insert:
        """The INSERT of the offer's rows, from the unnested arrays of its parameters (keys,
        payloads, ats, priorities, groups: see ``offer_columns``), with no conflict clause."""
        kind = sa.bindparam("b_kind", type_=sa.Text)
        now = sa.bindparam("b_now", type_=sa.BigInteger)

        def numbers(name: str, kind: type[sa.types.TypeEngine[int]]
                    ) -> sa.ColumnElement[Sequence[int]]:
            """The array literal in parameter ``name`` ('{1,2,3}') as ``kind``[]."""
            return sa.cast(sa.bindparam(name, type_=sa.Text), pg.ARRAY(kind))

        rows = sa.func.unnest(
            _texts("keys"),
            sa.bindparam("payloads", type_=pg.ARRAY(sa.LargeBinary)),
            numbers("ats", sa.BigInteger),
            numbers("priorities", sa.Integer),
            _texts("groups"),
        ).table_valued("k", "p", "a", "r", "g").render_derived(name="u")
        columns = ["pkind", "pkey", "payload", "scheduled_at", "scheduled_at_initially",
                   "created_at", "deliveries", "priority", "group_key"]
        values = [kind, rows.c.k, rows.c.p, rows.c.a, rows.c.a, now, sa.literal(0), rows.c.r,
                  rows.c.g]
        if by:
            columns.append("enqueued_by")
            values.append(sa.bindparam("b_by", type_=sa.Text))
        return pg.insert(self.table).from_select(columns, sa.select(*values))

    def _logged(self, written: sa.CTE, by: bool, events: OfferEvents) -> sa.Insert:
        """The INSERT of an offer's history events into ``events.table``, from what the
        offer's statement wrote (``written``: its RETURNING of pkey and inserted): an event
        per written message and, where ``events.ignored`` is given, per message it left as
        it was, each with its detail from the JSON array in parameter ``details``."""
        h = events.table
        given = sa.func.unnest(_texts("keys"), _texts("details")).table_valued(
            "k", "d").render_derived(name="e")
        whens: list[tuple[sa.ColumnElement[bool], sa.ColumnElement[str]]] = [
            (written.c.inserted, _constant(events.created))]
        if events.ignored is not None:
            whens.insert(0, (written.c.pkey.is_(None), _constant(events.ignored)))
        what = sa.case(*whens, else_=_constant(events.updated))
        source = (sa.select(sa.bindparam("b_kind", type_=sa.Text), given.c.k,
                            sa.bindparam("b_now", type_=sa.BigInteger), what,
                            sa.bindparam("b_by", type_=sa.Text) if by else sa.null(),
                            given.c.d)
                  .select_from(given.join(written, written.c.pkey == given.c.k,
                                          isouter=events.ignored is not None)))
        return sa.insert(h).from_select(["pkind", "pkey", "at", "kind", "actor", "detail"],
                                        source)

    def _insert_statement(self, by: bool, events: OfferEvents | None) -> sa.Insert:
        """The plain insert of every row of an offer (``insert_new``): the offer's INSERT
        without a conflict clause, which a key that exists fails whole; given ``events``,
        with their history events (every row was created)."""
        insert = self._offer_insert(by)
        if events is None:
            return insert
        t = self.table
        written = insert.returning(
            t.c.pkey, sa.true().label("inserted")).cte("written")
        return self._logged(written, by, replace(events, ignored=None)).add_cte(written)

    def offer_is_one_statement(self, rows: Sequence[OfferRow]) -> bool:
        return True

    def offer(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
              now_ms: int, actor: str | None = None,
              events: OfferEvents | None = None) -> list[OfferOutcome]:
        # One statement whatever the rows' update flags. Sent as one statement per flag (the
        # update=False keys first), two producers of the same new keys with opposite flags
        # each inserted, by its first statement, keys the other's second then waited for,
        # and in the callers' transactions deadlocked (18 to 38 of 80 offers of 50 keys). One
        # statement takes its locks in the chunk's order, the lock order.
        flags = {r.update for r in rows}
        update = flags.pop() if len(flags) == 1 else None
        alone = bool(conn.info.get(AUTOCOMMIT))  # committed by itself: woken after (_woken)
        params = self._offer_params(pkind, rows, now_ms, actor, events)
        if update is None:
            params["updating"] = json.dumps([r.key for r in rows if r.update])
        sql, constants, order = self._driver_sql(
            conn.dialect, ("offer", update, actor is not None, not alone, _shape(events)),
            lambda: self._offer_statement(update, actor is not None, not alone, events))
        values = {**constants, **params}
        bound = values if order is None else tuple(values[name] for name in order)
        outcome = {r[0]: OfferOutcome.CREATED if r[1] else OfferOutcome.UPDATED
                   for r in conn.exec_driver_sql(sql, bound).all()}
        outcomes = [outcome.get(r.key, OfferOutcome.IGNORED) for r in rows]
        if alone:
            self._woken(conn, pkind, [r for r, o in zip(rows, outcomes, strict=True)
                                      if o is not OfferOutcome.IGNORED], now_ms)
        return outcomes

    def insert_new(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                   now_ms: int, actor: str | None, events: OfferEvents | None = None) -> None:
        # no conflict clause and nothing returned: an insert of 100 new keys costs the server
        # less than an INSERT … ON CONFLICT of them (a speculative insertion for each row,
        # confirmed by a record of its own), and the client reads no rows back
        params = self._offer_params(pkind, rows, now_ms, actor, events)
        sql, constants, order = self._driver_sql(
            conn.dialect, ("insert", actor is not None, _shape(events)),
            lambda: self._insert_statement(actor is not None, events))
        values = {**constants, **params}
        conn.exec_driver_sql(sql, values if order is None
                             else tuple(values[name] for name in order))
        if conn.info.get(AUTOCOMMIT):
            self._woken(conn, pkind, rows, now_ms)
        elif any(r.at_ms <= now_ms for r in rows):
            self.wake_listeners(conn, pkind)  # at commit

    def _offer_params(self, pkind: str, rows: Sequence[OfferRow], now_ms: int,
                      actor: str | None, events: OfferEvents | None) -> dict[str, Any]:
        params = {"b_kind": pkind, "b_now": now_ms, **self.offer_columns(rows)}
        if actor is not None:
            params["b_by"] = actor
        if events is not None:
            params["details"] = json.dumps(list(events.details))
        return params

    def _woken(self, conn: sa.Connection, pkind: str, written: Sequence[OfferRow],
               now_ms: int) -> None:
        """After an offer that committed by itself (autocommit) wrote ``written``: wake the
        listeners when one of them is due, in a transaction of its own.

        A notification sent by the offer's own statement takes, at commit, a lock of the
        whole database that PostgreSQL holds until the commit is flushed: the commits of
        concurrent producers then wait for each other's flush, one at a time. Four producers
        of 100 due messages an offer, psycopg alone, alternating rounds: 29,600 messages/s
        notifying in the statement, 41,100 notifying after it (both 4 producers, medians of
        5; 49,000 without any notification). A transaction that only notifies writes no WAL
        and holds that lock for no flush. The wake-up now comes after the commit instead of
        with it; one that fails (the connection lost just after the commit) is logged, and
        the offer stands: its listeners find the messages at their next poll."""
        if not any(r.at_ms <= now_ms for r in written):
            return
        # as driver SQL, compiled once: through SQLAlchemy's execute of its Core statement
        # the wake-up added 2.3 us of client CPU a message to an offer of 100 (beside one of
        # messages due later, which wakes nobody), as driver SQL 1.3 us
        sql, constants, order = self._driver_sql(
            conn.dialect, ("wake",), lambda: sa.select(
                sa.func.pg_notify(self.channel, sa.bindparam("b_kind", type_=sa.Text))))
        values = {**constants, "b_kind": pkind}
        try:
            conn.exec_driver_sql(sql, values if order is None
                                 else tuple(values[name] for name in order))
        except sa.exc.DBAPIError as exc:
            log.warning("could not wake the workers of %s after an offer (it stands; they "
                        "find it at their next poll): %s", pkind, exc)

    @staticmethod
    def offer_columns(rows: Sequence[OfferRow]) -> dict[str, Any]:
        """The offer statement's column parameters for ``rows``. Only the payloads go as an
        array, in binary: psycopg dumps an array element by element in Python, 0.7-0.8 us an
        element here, where a JSON text of the keys (and one of the groups) and an array
        literal of the due times (and one of the priorities), made in C, cost a tenth of
        that (the four arrays were 3 us a message of an offer of 100)."""
        return {"keys": json.dumps([r.key for r in rows]),
                "payloads": [r.payload for r in rows],
                "ats": "{" + ",".join([str(r.at_ms) for r in rows]) + "}",
                "priorities": "{" + ",".join([str(r.priority) for r in rows]) + "}",
                "groups": json.dumps([r.group for r in rows])}

    def _offer_sql(self, dialect: sa.Dialect, update: bool | None,
                   by: bool = False) -> _DriverSql:
        """The SQL of the offer statement that notifies itself (``_driver_sql``)."""
        return self._driver_sql(dialect, ("offer", update, by, True, None),
                                lambda: self._offer_statement(update, by))

    def _driver_sql(self, dialect: sa.Dialect, key: tuple[object, ...],
                    build: Callable[[], AnySelect | sa.Insert]) -> _DriverSql:
        """The SQL for the driver of an offer's statement (``build``; ``key`` tells them
        apart), with its constant parameters and, for a positional driver (asyncpg's $1,
        $2), the parameter names in their order.

        psycopg sends the arrays in binary format when their placeholders say so
        (``%(name)b``); in text format it escapes every element with a regular expression,
        which made the arrays a fifth of an offer_many's time. SQLAlchemy's compiler writes
        every placeholder as text, so the compiled SQL is adjusted once and kept."""
        key = (dialect.paramstyle, *key)
        if key not in self._offer_cache:
            compiled = build().compile(dialect=dialect)
            sql = compiled.string
            if dialect.paramstyle == "pyformat":
                for name in _ARRAYS:
                    sql = sql.replace(f"%({name})s", f"%({name})b")
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            self._offer_cache[key] = (sql, dict(compiled.params), order)
        return self._offer_cache[key]

    def insert_absent(self, conn: sa.Connection, table: sa.Table, pkind: str,
                      rows: list[dict[str, Any]]) -> None:
        # a failed statement aborts a PostgreSQL transaction, so the portable read-insert-retry
        # cannot run here: ON CONFLICT DO NOTHING inserts what is missing in one statement
        # (unnested arrays: one short statement, where a VALUES list was compiled anew for
        # every claim's groups, 100 ms for a hundred)
        self._insert_unnested(conn, table, [{"pkind": pkind, **r} for r in rows],
                              skip_existing=True)

    def claim_plain(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                    lock: str, until_ms: int, where: Sequence[str],
                    actor: str | None = None) -> list[ClaimedRow]:
        return self.claim_acking(conn, pkind, now_ms, limit, lock, until_ms, where, actor, ())

    def _raced(self, where: Sequence[str], claim: Callable[[], list[ClaimedRow]]
               ) -> list[ClaimedRow]:
        """``claim()``; Raced where a claim on credit found its tokens spent meanwhile."""
        try:
            return claim()
        except sa.exc.DBAPIError as exc:
            if "bucket_credit" in where and self.error_code(exc) == _OVERDRAWN:
                raise Raced() from exc  # its tokens spent by another claim meanwhile
            raise
