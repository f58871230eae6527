"""Flow control in the claim: pause, a rate limit, a cap on messages in flight, and groups whose
messages are handled one at a time; and the statements that keep their state.

A queue's controls live in one row of ``<table>_settings``, so every process obeys them at its
next claim without talking to the others. A queue without that row (or with nothing set in it)
is claimed exactly as before: the plain claim carries a guard that finds no active settings row,
one index probe. Only when the guard says the queue is controlled does the claim read the row
and take the controlled path, in one transaction (but for a rate limit alone on PostgreSQL):

- paused: nothing is claimed (offers still land; in-flight messages finish);
- a concurrency cap: the settings row is locked (claims of the queue take turns), the
  messages in flight counted, and at most what the cap allows is claimed (with a rate limit
  too, at most what the bucket holds, refilled for the time passed); the bucket is charged in
  the same transaction;
- a rate limit and no cap: claims take turns only while the bucket is charged. For a rate
  limit alone, where the dialect can (``bucket_in_claim``: PostgreSQL), the claim is one
  statement that picks the due messages, claims at most what the bucket held when it began
  and charges the bucket last, failing whole where a concurrent claim spent the tokens
  meanwhile (``Raced``; run again, it locks the settings row before it claims). Elsewhere
  (and with groups) the claim takes at most what the bucket held when read (or, on credit,
  what it held at the queue's last claim, without reading it), then charges the bucket with
  one conditional UPDATE that refills and spends it in SQL, just before the commit. Where a
  concurrent claim spent the tokens first, the UPDATE changes nothing and the claim runs
  again, settings locked first (``Raced``); in a caller's transaction, which cannot run
  again, it locks them first always;
- groups (the queue has had grouped messages): a message of group G is claimed only while no
  other message of G is in flight, and only the first of G in claim order. Each group has a
  row in ``<table>_groups``, created by the first claim that meets the group; claims lock the
  free groups' rows with SKIP LOCKED, so two consumers can never both take a message of one
  group, and mark the group claimed until the message's lock expires. Acks, releases and dead
  letters free it; an expired lock frees it by itself. (PostgreSQL keeps no group rows: see
  its ``claim_grouped``.)

The statements are portable SQLAlchemy Core; a dialect changes only hooks (``contract.Dialect``
lists them all): those at the end of FlowControl (how rows are locked, read currently, probed
and inserted when absent) and, where its planner or its statements allow another form, how the
free groups are won (``win_groups``), their heads read (``read_heads``) or claimed with the
ungrouped messages (``claim_heads``), and grouped messages acked (``ack_freeing``), or the whole
grouped claim and the groups' state (``claim_grouped``, ``free_groups``, ``extend_group``); a
dialect that sets ``bucket_in_claim`` builds the "bucket" claim into its own claim statement,
and one that sets ``groups_in_claim`` claims a queue with groups alone by its own
``claim_groups``. The statements the claim runs each time are built once, with named parameters:
built per call, their construction and cache keys cost more client time than some of the
statements took the database.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa

from ..errors import NeedsTransaction, Raced
from ..schema import groups_table, settings_table
from .common import AUTOCOMMIT, AnySelect, ErrorKind, chunked

if TYPE_CHECKING:
    from .base import ClaimedRow

# a bound on the refill's arithmetic in SQL, safely below BIGINT's 2**63
_CHARGE_BOUND = 2**62


@dataclass(frozen=True, slots=True)
class Control:
    """A queue's row of ``<table>_settings``."""

    paused: bool
    has_groups: bool
    rate_limit: int | None
    rate_period_ms: int | None
    tokens_milli: int | None
    refilled_at: int | None
    max_in_flight: int | None

    @property
    def limits(self) -> bool:
        return self.rate_limit is not None or self.max_in_flight is not None

    @property
    def active(self) -> bool:
        return self.paused or self.has_groups or self.limits

    @property
    def groups_only(self) -> bool:
        """Groups and no other control."""
        return self.has_groups and not self.paused and not self.limits

    @property
    def rate_only(self) -> bool:
        """A rate limit and no other control."""
        return (self.rate_limit is not None and self.max_in_flight is None and not self.paused
                and not self.has_groups)

    @property
    def bucket_fits_sql(self) -> bool:
        """The bucket's refill can be done in SQL: its product of elapsed milliseconds (less
        than a period) and milli-tokens a period stays within BIGINT. A bucket beyond it is
        refilled by the locked path's Python integers."""
        if self.rate_limit is None:
            return False
        assert self.rate_period_ms is not None  # set with the rate limit
        return self.rate_limit * 1000 * self.rate_period_ms < _CHARGE_BOUND

    def tokens_at(self, now_ms: int) -> int:
        """The bucket's milli-tokens at ``now_ms``: refilled for the time passed, capped at the
        burst (one period's worth). Only for a queue with a rate limit."""
        assert self.rate_limit is not None and self.rate_period_ms is not None
        full = self.rate_limit * 1000
        if self.tokens_milli is None or self.refilled_at is None:
            return full
        gained = max(0, now_ms - self.refilled_at) * full // self.rate_period_ms
        return min(full, self.tokens_milli + gained)


# claim order: among due messages, higher priority first, then due time, then arrival
def claim_order(t: sa.FromClause) -> tuple[sa.ColumnElement[Any], ...]:
    return t.c.priority.desc(), t.c.scheduled_at, t.c.id


# a group's own order: priority, then the due time the producer asked for (a redelivery or a
# release keeps its place in the group), then arrival
def group_order(t: sa.FromClause) -> tuple[sa.ColumnElement[Any], ...]:
    return t.c.priority.desc(), t.c.scheduled_at_initially, t.c.id


# how many due messages a grouped claim of ``limit`` walks in claim order to find its groups:
# room for the groups that concurrent claims (four consumers) hold or are taking
def walk_length(limit: int) -> int:
    return limit * 4 + 16


# how many ungrouped messages a grouped claim of ``limit`` that won ``won`` groups reads, its
# walk having seen ``seen`` messages of ``walked`` wanted, ``met`` whether one was ungrouped:
# those the walk saw may come first in claim order, so all it may take; if it saw none, any
# there are come after every message it saw, wanted only where the groups won leave room, and
# only if the walk was cut short (so a queue of groups alone is not walked again to find none)
def loose_wanted(limit: int, won: int, seen: int, walked: int, met: bool) -> int:
    if met:
        return limit
    return limit - won if seen == walked else 0


def _control(row: Sequence[Any]) -> Control:
    """A Control from a settings row read as ``_control_columns``, by position (a Row's
    attributes cost more)."""
    paused, has_groups, *limits = row
    return Control(bool(paused), bool(has_groups), *limits)


class FlowControl:
    """The mixin of QueueDao that claims controlled queues and keeps their state."""

    table: sa.Table
    in_list_max: ClassVar[int]
    skip_locked: ClassVar[bool]
    group_index: str
    _claim_columns: tuple[sa.Column[Any], ...]
    # the dialect's claim takes the condition "bucket" (``due_conditions``): one statement
    # claiming a queue with a rate limit alone and charging its bucket, the settings row
    # locked only while it runs; elsewhere that claim takes a transaction (``optimistic``)
    bucket_in_claim: ClassVar[bool] = False
    # the dialect claims a queue whose only control is its groups without reading its
    # settings first (``claim_groups``); elsewhere the settings are read, then the claim runs
    # (``claim_grouped``)
    groups_in_claim: ClassVar[bool] = False

    if TYPE_CHECKING:
        # QueueDao's (base.py), which the claims here call: declared for the type checker,
        # which checks QueueDao's definitions against them
        def claim_plain(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                        lock: str, until_ms: int, where: Sequence[str],
                        actor: str | None = None) -> list[ClaimedRow]: ...
        def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     where: Sequence[str]) -> Sequence[Sequence[Any]]: ...
        def mark_claimed(self, conn: sa.Connection, ids: Sequence[int], lock: str,
                         until_ms: int, actor: str | None) -> None: ...
        @staticmethod
        def claimed_row(r: Sequence[Any]) -> ClaimedRow: ...
        def ack_many(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int: ...
        def held_by(self, lock: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]: ...
        @classmethod
        def classify(cls, exc: sa.exc.DBAPIError) -> ErrorKind: ...

    def _init_flow(self) -> None:
        t = self.table
        self.groups = g = groups_table(t.metadata, t.name)
        self.settings = s = settings_table(t.metadata, t.name)
        kind = sa.bindparam("b_kind", type_=s.c.pkind.type)
        # no parameters but b_kind: the guard goes into claims that bind only b_kind and b_now
        # (SQL Server's text() claim, Oracle's driver cursor)
        zero: sa.ColumnClause[int] = sa.literal_column("0")
        paused, grouped = s.c.paused != zero, s.c.has_groups != zero
        self._active_settings = sa.exists().where(
            s.c.pkind == kind, sa.or_(paused, grouped, s.c.rate_limit.is_not(None),
                                      s.c.max_in_flight.is_not(None)))
        # a settings row with a control besides a rate limit: a pause, groups or a cap
        self.other_controls = sa.or_(paused, grouped, s.c.max_in_flight.is_not(None))
        self._other_controls = sa.exists().where(s.c.pkind == kind, self.other_controls)

        def group_row(*where: sa.ColumnElement[bool]) -> sa.Exists:
            """The message's group has a row (meeting ``where``)."""
            return self.probe(sa.select(sa.literal_column("1")).where(
                g.c.pkind == t.c.pkind, g.c.group_key == t.c.group_key, *where)).exists()

        self._busy_group = group_row(g.c.claimed_until > sa.bindparam("b_now"))
        self._group_known = group_row()
        self._group_has_messages = self.probe(sa.select(sa.literal_column("1")).where(
            t.c.pkind == g.c.pkind, t.c.group_key == g.c.group_key), self.group_index).exists()

    # ---- the guard and the conditions a claim may add ------------------------------------

    def due_conditions(self, where: Sequence[str]) -> list[sa.ColumnElement[bool]]:
        """SQL for the named claim conditions: "guard" (the queue has no active settings row:
        the plain claim's), "rate_only" (no control but a rate limit: no pause, cap or
        groups), "ungrouped" (messages without a group). ("bucket", where
        ``bucket_in_claim``, is the dialect's claim statement's own.)"""
        out = []
        for name in where:
            if name == "guard":
                out.append(~self._active_settings)
            elif name == "rate_only":
                out.append(~self._other_controls)
            elif name == "ungrouped":
                out.append(self.table.c.group_key.is_(None))
            else:
                raise ValueError(f"no claim condition {name!r}")
        return out

    def require_transaction(self, conn: sa.Connection) -> None:
        """Raise NeedsTransaction where ``conn`` runs each statement on its own."""
        if (conn.info.get(AUTOCOMMIT)
                or conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"):
            raise NeedsTransaction()

    # ---- reading and writing settings ----------------------------------------------------

    def read_control(self, conn: sa.Connection, pkind: str, *,
                     lock: bool = False) -> Control | None:
        row = conn.execute(self._read_control[lock], {"b_kind": pkind}).first()
        return None if row is None else _control(row)

    def read_controls(self, conn: sa.Connection,
                      pkinds: Sequence[str] | None = None) -> dict[str, Control]:
        """The settings of the queues ``pkinds`` that have a settings row (None: of every
        queue of the table), by queue: one read, or one per ``in_list_max`` queues."""
        s = self.settings
        stmt = sa.select(*self._control_columns, s.c.pkind)
        if pkinds is None:
            rows = conn.execute(stmt).all()
        else:
            rows = [row for chunk in chunked(list(pkinds), self.in_list_max)
                    for row in conn.execute(stmt.where(s.c.pkind.in_(chunk))).all()]
        return {row[-1]: _control(row[:-1]) for row in rows}

    @property
    def _control_columns(self) -> tuple[sa.ColumnElement[Any], ...]:
        """A settings row's columns as ``_control`` takes them, in order."""
        s = self.settings
        return (s.c.paused, s.c.has_groups, s.c.rate_limit, s.c.rate_period_ms,
                s.c.tokens_milli, s.c.refilled_at, s.c.max_in_flight)

    @functools.cached_property
    def _read_control(self) -> dict[bool, AnySelect]:
        """The settings row's read, by whether it locks the row."""
        s = self.settings
        stmt = sa.select(*self._control_columns).where(s.c.pkind == sa.bindparam("b_kind"))
        return {False: stmt, True: self.lock_rows(stmt, s, skip=False)}

    def write_settings(self, conn: sa.Connection, pkind: str, *,
                       unless_same: Sequence[str] = (), **values: Any) -> None:
        """Set columns of ``pkind``'s settings row, creating it first if absent; with
        ``unless_same`` (columns among ``values``, set to values other than NULL), only where
        one of them would change: setting them to what they hold changes nothing else either.
        The condition is the UPDATE's own, so writers that race each see the other's write."""
        s = self.settings
        self.insert_absent(conn, s, pkind, [{}])
        stmt = sa.update(s).where(s.c.pkind == pkind)
        if unless_same:
            stmt = stmt.where(sa.or_(*(cond for c in unless_same
                                       for cond in (s.c[c].is_(None), s.c[c] != values[c]))))
        conn.execute(stmt.values(**values))

    # ---- the controlled claim -------------------------------------------------------------

    def claim_controlled(self, conn: sa.Connection, pkind: str, control: Control, now_ms: int,
                         limit: int, lock: str, until_ms: int, actor: str | None = None, *,
                         optimistic: bool = False) -> list[ClaimedRow]:
        """The claim of a controlled queue. ``optimistic`` lets a queue with a rate limit and
        no cap charge its bucket at the end, where a conflict raises Raced (only for a claim
        in a transaction of its own, which can run again)."""
        if control.paused:
            return []
        if optimistic and control.max_in_flight is None and control.bucket_fits_sql:
            limit = min(limit, control.tokens_at(now_ms) // 1000)
            if limit <= 0:
                return []
            rows = self._claim_unlimited(conn, pkind, control, now_ms, limit, lock, until_ms,
                                         actor, optimistic)
            if rows and not self._charge(conn, pkind, len(rows), now_ms):
                raise Raced()
            return rows
        tokens: int | None = None  # a queue with groups alone has no bucket to charge
        if control.limits:
            # the settings row, locked, serializes this queue's claims: counts and tokens
            # cannot be spent twice by two consumers
            locked = self.read_control(conn, pkind, lock=True)
            if locked is None or locked.paused:
                return []
            control = locked
            if control.rate_limit is not None:
                tokens = control.tokens_at(now_ms)
                limit = min(limit, tokens // 1000)
            if control.max_in_flight is not None:
                limit = min(limit, control.max_in_flight - self._in_flight(conn, pkind, now_ms))
            if limit <= 0:
                return []
        rows = self._claim_unlimited(conn, pkind, control, now_ms, limit, lock, until_ms, actor,
                                     optimistic)
        if tokens is not None:  # the bucket read under the settings row's lock
            s = self.settings
            conn.execute(sa.update(s).where(s.c.pkind == pkind).values(
                tokens_milli=tokens - 1000 * len(rows),
                refilled_at=max(now_ms, control.refilled_at or now_ms)))
        return rows

    def _claim_unlimited(self, conn: sa.Connection, pkind: str, control: Control, now_ms: int,
                         limit: int, lock: str, until_ms: int, actor: str | None,
                         own_transaction: bool) -> list[ClaimedRow]:
        """Up to ``limit`` due messages, by the group-aware claim where the queue has groups
        (``own_transaction``: the claim's transaction is its own, ended with it)."""
        if control.has_groups:
            return self.claim_grouped(conn, pkind, now_ms, limit, lock, until_ms, actor,
                                       own_transaction)
        return self.claim_plain(conn, pkind, now_ms, limit, lock, until_ms, (), actor)

    def claim_groups(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, actor: str | None,
                     own_transaction: bool) -> list[ClaimedRow]:
        """The claim of a queue whose only control is its groups, where ``groups_in_claim``:
        as ``claim_grouped`` does it, claiming nothing where the queue has gained a pause or a
        limit since (its last claim found groups alone; the settings are not read first)."""
        raise NotImplementedError(f"{type(self).__name__} sets no groups_in_claim")

    def _charge(self, conn: sa.Connection, pkind: str, count: int, now_ms: int) -> bool:
        """Spend ``count`` tokens of the bucket as it stands now; False (nothing changed)
        where it holds fewer."""
        return conn.execute(self._charge_bucket, {"b_kind": pkind, "b_now": now_ms,
                                                  "spend": 1000 * count}).rowcount == 1

    @functools.cached_property
    def _charge_bucket(self) -> sa.Update:
        s = self.settings
        now = sa.bindparam("b_now", type_=sa.BigInteger)
        held, spend = self.bucket_held(now), sa.bindparam("spend", type_=sa.BigInteger)
        # MySQL assigns left to right, each seeing the ones before: the tokens go first, from
        # the refill time they were refilled to
        return (sa.update(s).where(s.c.pkind == sa.bindparam("b_kind"),
                                   s.c.rate_limit.is_not(None), held >= spend)
                .ordered_values((s.c.tokens_milli, held - spend),
                                (s.c.refilled_at, self.bucket_refilled_at(now))))

    def bucket_held(self, now: sa.ColumnElement[int]) -> sa.ColumnElement[int]:
        """The settings row's milli-tokens at ``now``, refilled in SQL as ``Control.tokens_at``
        does in Python."""
        s = self.settings
        full = sa.cast(s.c.rate_limit, sa.BigInteger) * 1000
        elapsed = now - s.c.refilled_at
        gained = s.c.tokens_milli + elapsed * full // s.c.rate_period_ms
        return sa.case(
            (s.c.tokens_milli.is_(None) | s.c.refilled_at.is_(None)
             | (elapsed >= s.c.rate_period_ms), full),
            (elapsed <= 0, s.c.tokens_milli),
            (gained > full, full),
            else_=gained)

    def bucket_refilled_at(self, now: sa.ColumnElement[int]) -> sa.ColumnElement[int]:
        """The refill time a charge at ``now`` leaves: ``now``, unless the clock is behind the
        last refill's, which then stays (nothing was refilled)."""
        s = self.settings
        return sa.case((s.c.refilled_at.is_(None) | (now > s.c.refilled_at), now),
                       else_=s.c.refilled_at)

    def on_credit(self, last: Control, now_ms: int, limit: int) -> bool:
        """Whether a claim of ``limit`` may be made on credit (``claim_on_credit``): the
        queue's last claim found a rate limit alone whose bucket, as it was then, refilled
        to now, holds ``limit`` tokens. The database's own one-statement form goes first."""
        return (not self.bucket_in_claim and last.rate_only and last.bucket_fits_sql
                and last.tokens_at(now_ms) >= 1000 * limit)

    def claim_on_credit(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                        lock: str, until_ms: int, actor: str | None) -> list[ClaimedRow]:
        """Claim without reading the settings first: the "rate_only" condition claims
        nothing where a pause, a cap or groups have come since, and the bucket is charged at
        the end (Raced where it now holds fewer tokens, or no rate limit is left)."""
        self.require_transaction(conn)  # the claim must roll back with a failed charge
        rows = self.claim_plain(conn, pkind, now_ms, limit, lock, until_ms, ("rate_only",),
                                actor)
        if rows and not self._charge(conn, pkind, len(rows), now_ms):
            raise Raced()
        return rows

    def _in_flight(self, conn: sa.Connection, pkind: str, now_ms: int) -> int:
        t = self.table
        count = conn.execute(self.current_read(sa.select(sa.func.count()).where(
            t.c.pkind == pkind, t.c.lock_uuid.is_not(None),
            t.c.scheduled_at > now_ms))).scalar()
        assert count is not None  # a count has its one row
        return int(count)

    def claim_grouped(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                      lock: str, until_ms: int, actor: str | None,
                      own_transaction: bool) -> list[ClaimedRow]:
        """Up to ``limit`` due messages of a queue with groups, at most one per group, each
        its group's first due one (``own_transaction``: the claim's transaction is its own; a
        dialect's claim may set what holds to its end)."""
        # 1. the first due messages in claim order that are ungrouped or of a free group (the
        # busy probe finds no group for a message without one), read without locks: each
        # group once, with whether it has a row yet
        walk = walk_length(limit)
        rows = conn.execute(self._walk_statement, {"b_kind": pkind, "b_now": now_ms,
                                         "walk": walk}).all()
        groups: dict[str, bool] = {}
        ungrouped = 0
        for group, known in rows:  # unpacked: a Row's attributes cost more, over 416 rows
            if group is None:
                ungrouped += 1
            elif group not in groups:
                groups[group] = bool(known)
        seen = len(rows)
        # 2. the groups' rows, made if absent, locked if free: another claim holding one is
        # skipped, so no two claims ever work on one group at once
        won = self.win_groups(conn, pkind, groups, now_ms, limit) if groups else []
        # 3. the first due message of each group won, now that no other claim can touch the
        # group, and the ungrouped messages
        loose = loose_wanted(limit, len(won), seen, walk, ungrouped > 0)
        if not won and not loose:
            return []
        return self.claim_heads(conn, pkind, won, loose, now_ms, limit, lock, until_ms, actor)

    @functools.cached_property
    def _walk_statement(self) -> AnySelect:
        """The grouped claim's first read (parameters b_kind, b_now and walk, how many)."""
        t = self.table
        # whether the group has a row, as 1 or 0: SQL Server and Oracle before 23ai take no
        # condition (EXISTS) as a value in a select list
        known = sa.case((self._group_known, sa.literal_column("1")),
                        else_=sa.literal_column("0"))
        return self.due_in_claim_order(sa.select(t.c.group_key, known.label("known"))
                                       .where(~self._busy_group),
                                       sa.bindparam("walk", type_=sa.Integer))

    def due_in_claim_order(self, base: AnySelect, limit: sa.ColumnElement[int], *,
                           gate: Sequence[sa.ColumnElement[bool]] = (),
                           skip_locked: bool = False,
                           source: sa.FromClause | None = None,
                           ungrouped: bool = False,
                           of_groups: Sequence[sa.ColumnElement[bool]] = ()) -> AnySelect:
        """``base`` (a read of the queue table, or of ``source``, an alias of it: its
        columns, and conditions on each message) cut to the first ``limit`` due messages (of
        b_kind, at b_now) in claim order, locking each it returns where ``skip_locked``,
        passing over rows others have locked; nothing where a condition of ``gate`` (on the
        queue, not on its messages) fails; ``ungrouped``: only messages of no group are
        wanted; ``of_groups``: conditions on each message that only a message of a group can
        fail. A dialect whose claims read unlocked messages and expired locks through
        indexes of their own (``partial_indexes``) reads each there, and leaves
        ``of_groups`` out of its read of the messages of no group."""
        t = self.table if source is None else source
        stmt = (base.where(*of_groups, t.c.pkind == sa.bindparam("b_kind"),
                           t.c.scheduled_at <= sa.bindparam("b_now", type_=sa.BigInteger),
                           *gate)
                .order_by(*claim_order(t)).limit(limit))
        return self.lock_rows(stmt, t, skip=True) if skip_locked else stmt

    def win_groups(self, conn: sa.Connection, pkind: str, groups: dict[str, bool],
                   now_ms: int, limit: int) -> list[str]:
        """Lock the rows of up to ``limit`` free groups of ``groups`` (names in claim order,
        each with whether its row exists), making the missing rows first; the names locked.
        In claim order, as many as are still wanted at a time: a claim that locked every
        candidate would leave concurrent claims nothing but groups it does not take."""
        names, won = list(groups), list[str]()
        while names and len(won) < limit:
            part = sorted(names[:limit - len(won)])
            del names[:limit - len(won)]
            if absent := [n for n in part if not groups[n]]:
                self.insert_absent(conn, self.groups, pkind, [{"group_key": n} for n in absent])
            won += self.lock_free_groups(conn, pkind, part, now_ms)
        return won

    def claim_heads(self, conn: sa.Connection, pkind: str, won: Sequence[str], loose: int,
                    now_ms: int, limit: int, lock: str, until_ms: int,
                    actor: str | None) -> list[ClaimedRow]:
        """Claim the first due message of each group of ``won`` (locked by this claim) and
        up to ``loose`` ungrouped messages, the first ``limit`` of them in claim order, and
        mark the groups claimed."""
        grouped = self.read_heads(conn, pkind, won, now_ms) if won else []
        plain = self.pick_due(conn, pkind, now_ms, loose, ("ungrouped",)) if loose else []
        chosen = sorted([*grouped, *plain], key=lambda r: (-r[7], r[3], r[0]))[:limit]
        self.mark_claimed(conn, [r[0] for r in chosen], lock, until_ms, actor)
        taken = sorted(r[8] for r in chosen if r[8] is not None)
        for part in chunked(taken, self.in_list_max):
            conn.execute(self._group_statements["mark"],
                         {"b_kind": pkind, "names": part, "until": until_ms, "lock": lock})
        return [self.claimed_row(r) for r in chosen]

    @functools.cached_property
    def _group_statements(self) -> dict[str, sa.Executable]:
        """The statements on the rows of the groups listed by the parameter ``names`` (and
        b_kind): "lock" the free ones (at b_now), "mark" them claimed (until, lock), "free"
        those ``lock`` holds, "drop" those freed that have no message left."""
        g = self.groups
        mine = (g.c.pkind == sa.bindparam("b_kind"),
                g.c.group_key.in_(sa.bindparam("names", expanding=True)))
        now = sa.bindparam("b_now", type_=sa.BigInteger)
        lock: sa.BindParameter[str] = sa.bindparam("lock")
        free = g.c.claimed_until.is_(None) | (g.c.claimed_until <= now)
        return {
            "lock": self.lock_rows(sa.select(g.c.group_key).where(*mine, free)
                                   .order_by(g.c.group_key), g, skip=True),
            "mark": sa.update(g).where(*mine).values(claimed_until=sa.bindparam("until"),
                                                     lock_uuid=lock),
            "free": sa.update(g).where(*mine, g.c.lock_uuid == lock)
                    .values(claimed_until=None, lock_uuid=None),
            # a group is empty when one probe of the group index finds no message: asked per
            # freed group (``probe``), never as an anti-join or a list of the queue's rows,
            # which planners without statistics read as every message of the queue (100 ms
            # a call as an anti-join, 15 ms as NOT IN over the listed groups' messages)
            "drop": sa.delete(g).where(*mine, g.c.claimed_until.is_(None),
                                       ~self._group_has_messages),
        }

    def lock_free_groups(self, conn: sa.Connection, pkind: str, names: Sequence[str],
                         now_ms: int) -> Sequence[str]:
        """Lock the rows of the groups ``names`` (sorted) that are free, passing over those
        another claim has locked; the names of the groups locked."""
        return conn.execute(self._group_statements["lock"],
                            {"b_kind": pkind, "names": list(names), "b_now": now_ms}
                            ).scalars().all()

    def heads_plan(self, dialect: sa.Dialect, pkind: str, groups: Sequence[str], now_ms: int,
                   limit: int) -> tuple[sa.Executable, dict[str, Any]]:
        """The statement a grouped claim through ``dialect`` reads the heads of ``groups``
        with, and its parameters (``read_heads``; shown by ``benchmarks``' flow_plans)."""
        return self._group_heads, {"b_kind": pkind, "names": list(groups), "b_now": now_ms}

    def read_heads(self, conn: sa.Connection, pkind: str, groups: Sequence[str],
                   now_ms: int) -> Sequence[Sequence[Any]]:
        """The first due message of each of ``groups`` (locked by this claim), locked; a
        group whose first message another transaction holds is left out."""
        stmt, values = self.heads_plan(conn.dialect, pkind, groups, now_ms, len(groups))
        return conn.execute(stmt, values).fetchall()

    @functools.cached_property
    def _group_heads(self) -> AnySelect:
        """The first due message (at b_now) of each group the parameter ``names`` lists, in
        the group's order, locked, as ``_claim_columns``: one walk of the group index per
        group, however many messages wait behind the head. A head another transaction holds
        (an offer updating it, a late ack) is passed over, and its group waits for the next
        claim: a claim that waited for it would hold the heads it had locked already, which
        that transaction, offering one of them next, would wait for in turn. Only the lock
        passes over: the read that finds each head does not, so the next message of such a
        group is never taken in its stead (it is what the database's plain reads do: on SQL
        Server without READ_COMMITTED_SNAPSHOT, its default, a read at READ COMMITTED takes
        shared locks, which wait for a row another transaction changed until it ends, by the
        documentation of SET TRANSACTION ISOLATION LEVEL; Oracle's reads never wait)."""
        t, g = self.table, self.groups
        heads = sa.select(self.group_head()).where(
            g.c.pkind == sa.bindparam("b_kind"),
            g.c.group_key.in_(sa.bindparam("names", expanding=True)))
        return self.lock_rows(sa.select(*self._claim_columns).where(t.c.id.in_(heads)), t,
                              skip=True)

    def group_head(self, index: str | None = None) -> sa.ScalarSelect[int]:
        """The id of the first due message (at b_now) of the outer query's group row, in the
        group's order: one walk of the group index, through the queue's ``index`` where
        named (``probe``)."""
        t, g = self.table, self.groups
        return self.probe(
            sa.select(t.c.id)
            .where(t.c.pkind == g.c.pkind, t.c.group_key == g.c.group_key,
                   t.c.scheduled_at <= sa.bindparam("b_now", type_=sa.BigInteger))
            .order_by(*group_order(t)).limit(1), index).correlate(g).scalar_subquery()

    # ---- groups after the claim: freed, extended, dropped when empty ----------------------

    # ``ack_freeing`` is one statement, atomic alone (so it may run in autocommit)
    ack_frees_in_one: ClassVar[bool] = False
    # the rows of the groups that an ack or a release left empty are dropped in a
    # transaction of their own, once the one that freed them has committed (``drop_groups``)
    drops_groups_apart: ClassVar[bool] = False

    def ack_freeing(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                    groups: Sequence[str], *, drop: bool = True) -> int:
        """Ack the messages ``ids`` claimed by ``lock`` and free the groups ``lock`` holds
        among ``groups`` (``free_groups``): how many messages were deleted."""
        acked = self.ack_many(conn, lock, ids)
        if groups:
            self.free_groups(conn, pkind, lock, groups, drop=drop)
        return acked

    def free_groups(self, conn: sa.Connection, pkind: str, lock: str,
                    groups: Sequence[str], *, drop: bool = True) -> None:
        """Free the groups ``lock`` holds (an ack, a release, a dead letter), and (``drop``)
        drop the rows of those that have no message left."""
        for part in chunked(sorted(set(groups)), self.in_list_max):
            values = {"b_kind": pkind, "names": part, "lock": lock}
            conn.execute(self._group_statements["free"], values)
            if drop:
                conn.execute(self._group_statements["drop"], values)

    def drop_groups(self, conn: sa.Connection, pkind: str, groups: Sequence[str]) -> None:
        """Drop the rows of the free groups among ``groups`` that have no message left."""
        for part in chunked(sorted(set(groups)), self.in_list_max):
            conn.execute(self._group_statements["drop"], {"b_kind": pkind, "names": part})

    def extend_locked(self, pkind: str, row_id: int, lock: str, until_ms: int, now_ms: int,
                      grouped: bool) -> sa.Update:
        """Extend the lock of claimed message ``row_id`` (``grouped``: it has a group) to
        ``until_ms``, if the lock still holds. A lock that has expired (by ``now_ms``) may
        have lost what it held to another claim with no trace on the message's row: its
        group's turn (the group is free once the lock expires) or its place under the
        concurrency cap (the message no longer counts as in flight). So an expired lock is
        extended only for an ungrouped message of a queue without a cap; otherwise the
        extension fails as a stale ack does. One statement, which judges the expiry and the
        cap where it writes."""
        t, s = self.table, self.settings
        held = t.c.scheduled_at > now_ms
        if not grouped:
            held = sa.or_(held, ~sa.exists().where(s.c.pkind == pkind,
                                                   s.c.max_in_flight.is_not(None)))
        return (sa.update(t).where(t.c.id == row_id, self.held_by(lock), held)
                .values(scheduled_at=until_ms))

    def extend_group(self, conn: sa.Connection, pkind: str, lock: str, group: str,
                     until_ms: int) -> None:
        g = self.groups
        conn.execute(sa.update(g).where(g.c.pkind == pkind, g.c.group_key == group,
                                        g.c.lock_uuid == lock).values(claimed_until=until_ms))

    # ---- per-database hooks -----------------------------------------------------------------

    def walk_settings(self) -> sa.Executable | None:
        """The planner settings under which the dialect's grouped claim runs its statements
        after the walk (which sets them), as a statement of their own, to show those
        statements' plans; or None."""
        return None

    def probe(self, stmt: AnySelect, index: str | None = None) -> AnySelect:
        """``stmt``, a correlated subquery meant as one index probe per outer row (through
        ``index`` of the queue table, where named), kept so by the database's planner
        (PostgreSQL turns it into a join, which it may plan badly; MariaDB may probe an index
        on fewer of the compared columns)."""
        return stmt

    def current_read(self, stmt: AnySelect) -> AnySelect:
        """``stmt`` reading what is committed now, not an earlier snapshot of the
        transaction (the in-flight count after waiting for the settings lock). Plain reads do
        at READ COMMITTED, the level of sqldelay's own claims (SQLite has one writer); a
        claim in a caller's transaction runs at the caller's."""
        return stmt

    def lock_rows(self, stmt: AnySelect, table: sa.FromClause, *, skip: bool) -> AnySelect:
        """``stmt`` locking the rows it reads from ``table`` (passing over locked ones when
        ``skip``)."""
        return stmt.with_for_update(skip_locked=skip) if self.skip_locked else stmt

    def insert_absent(self, conn: sa.Connection, table: sa.Table, pkind: str,
                      rows: list[dict[str, Any]]) -> None:
        """Insert the rows of ``pkind`` that ``table`` lacks (``rows`` hold the primary key
        beyond pkind, or are ``[{}]`` where pkind is the key). Portable: read which exist,
        insert the others; a concurrent insert of one of them makes the insert fail alone
        (these databases undo the failed statement only), and the round runs again."""
        while missing := self.absent_rows(conn, table, pkind, rows):
            try:
                conn.execute(sa.insert(table), missing)
                return
            except sa.exc.IntegrityError as exc:
                if self.classify(exc) is not ErrorKind.DUPLICATE_KEY:
                    raise

    def absent_rows(self, conn: sa.Connection, table: sa.Table, pkind: str,
                    rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of ``insert_absent`` that a plain read does not find, ready to insert."""
        keys: list[sa.Column[Any] | None] = [c for c in table.primary_key.columns
                                        if c.name != "pkind"]
        (extra,) = keys or [None]
        if extra is None:
            row = conn.execute(sa.select(table.c.pkind).where(table.c.pkind == pkind)).first()
            return [] if row else [{"pkind": pkind}]
        wanted = {r[extra.name]: r for r in rows}
        found: set[object] = set()
        for part in chunked(sorted(wanted), self.in_list_max):
            found.update(conn.execute(
                sa.select(extra).where(table.c.pkind == pkind, extra.in_(part))).scalars())
        return [{"pkind": pkind, **r} for k, r in wanted.items() if k not in found]
