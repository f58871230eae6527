"""The contract of a dialect: every hook a database's QueueDao class may set or override, one
line each. ``QueueDao`` (``base.py``, with the flow control of ``flow.py``) gives each a
portable default; a new database (CockroachDB, DB2) starts from this list, sets the limits,
codes and flags that differ, and overrides a method only where its database forces it, saying
why in a comment. tests/unit/test_dialect_contract.py checks that every registered class has
each hook with these parameters, and that none overrides anything not listed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa

from ..messages import OfferOutcome
from ..schema import MigrationOps
from .base import Advice, ClaimedRow, ClaimEvents, OfferEvents, OfferRow, PayloadBudget
from .common import AnySelect, ById


class Dialect(Protocol):
    """What sqldelay asks of one database (``dialects.REGISTRY`` maps the SQLAlchemy dialect
    name to the class)."""

    # ---- identity, limits and capabilities -----------------------------------------------

    name: ClassVar[str]  # SQLAlchemy's dialect name
    offer_chunk: ClassVar[int]  # rows per offer statement
    in_list_max: ClassVar[int]  # ids per IN-list
    max_parameters: ClassVar[int]  # bound parameters per statement
    like_specials: ClassVar[str]  # the characters LIKE treats specially, to escape
    skip_locked: ClassVar[bool]  # claims read with FOR UPDATE SKIP LOCKED
    delete_returning: ClassVar[bool]  # DELETE … RETURNING (or OUTPUT) works
    precompiled_insert: ClassVar[bool]  # offers send a multi-row INSERT compiled once
    inserts_first: ClassVar[bool]  # an offer tries a plain insert of all its rows first
    offer_writes_history: ClassVar[bool]  # the offer statement writes its history events
    claim_is_one_statement: ClassVar[bool]  # the plain claim is atomic alone
    autocommit_one_statement: ClassVar[bool]  # one-statement operations run in autocommit
    claims_side_by_side: ClassVar[bool]  # a worker gains by making two claims at once
    partial_indexes: ClassVar[bool]  # the schema's partial indexes are made here
    bucket_in_claim: ClassVar[bool]  # the claim statement charges a rate limit's bucket
    groups_in_claim: ClassVar[bool]  # a queue of groups alone is claimed by claim_groups
    ack_frees_in_one: ClassVar[bool]  # ack_freeing is one statement
    # an ack or a release leaves drop_groups to a transaction after its own
    drops_groups_apart: ClassVar[bool]
    acks_in_claim: ClassVar[bool]  # claim_acking acks and claims in one statement
    claim_writes_history: ClassVar[bool]  # claim_acking writes the claim's history events
    ack_writes_history: ClassVar[bool]  # ack_recorded is one statement

    # read only, where a dialect narrows the type (a class sets a value)
    @property
    def max_payload_bytes(self) -> int | None:
        """The payload column's limit in bytes (None: memory's)."""

    @property
    def statistics_after(self) -> int | None:
        """Offers before the table needs planner statistics (None: never)."""

    # ---- errors --------------------------------------------------------------------------

    duplicate_key_codes: ClassVar[frozenset[object]]  # error codes of a duplicate key
    transient_codes: ClassVar[frozenset[object]]  # deadlocks, lock timeouts: run again
    unavailable_codes: ClassVar[frozenset[object]]  # the server is down or restarting: wait
    missing_table_codes: ClassVar[frozenset[object]]  # a table or index does not exist
    deadlock_codes: ClassVar[frozenset[object]]  # the transient codes that are deadlocks

    @classmethod
    def error_code(cls, exc: sa.exc.DBAPIError) -> object:
        """The database's code for a driver error, or None."""

    # ---- the schema and the server ---------------------------------------------------------

    @classmethod
    def server_time(cls) -> sa.Executable:
        """A statement whose one value is the server's time now, in epoch milliseconds."""

    @classmethod
    def after_create_schema(cls, conn: sa.Connection) -> None:
        """Database-wide settings create_schema applies outside its transaction."""

    @classmethod
    def tuning_ddl(cls, table: sa.Table, preset: str) -> list[str]:
        """The statements that apply a storage preset to the queue table."""

    @classmethod
    def widen_error_text_op(cls, op: MigrationOps, table_name: str, online: bool) -> None:
        """Migration 0003's step: dead letters' error text as long as ERROR_LENGTH."""

    @classmethod
    def settings_advice(cls, conn: sa.Connection, table_name: str) -> list[Advice]:
        """The server's settings that matter to the queue, judged (``sqldelay verify``)."""

    @classmethod
    def multi_primary(cls, conn: sa.Connection) -> bool:
        """A node of a multi-primary cluster (Galera): locks are local to a node."""

    @classmethod
    def check_keys(cls, keys: Sequence[str]) -> None:
        """Refuse keys the database cannot store or tell apart, before any I/O."""

    def gather_statistics(self, conn: sa.Connection) -> bool:
        """Gather planner statistics of a table that has none; whether it did."""

    # ---- transactions ----------------------------------------------------------------------

    def begin_write(self, conn: sa.Connection) -> None:
        """Called first in every transaction sqldelay opens to write."""

    def join_write(self, conn: sa.Connection) -> None:
        """Called first when a writing operation joins the caller's transaction."""

    def begin_read_committed(self, conn: sa.Connection) -> None:
        """Called before begin_write where locking reads may pass what they take."""

    # ---- offers ----------------------------------------------------------------------------

    def offer(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow], now_ms: int,
              actor: str | None = None,
              events: OfferEvents | None = None) -> list[OfferOutcome]:
        """Insert or update a chunk of rows; their outcomes, in order (and their history
        events, given ``events``)."""

    def offer_is_one_statement(self, rows: Sequence[OfferRow]) -> bool:
        """Whether ``offer`` of this chunk sends one statement (atomic alone)."""

    def payload_budget(self, conn: sa.Connection) -> PayloadBudget:
        """The payload limits of this database."""

    def select_existing(self) -> AnySelect:
        """The offer's locking read of the rows of the keys it offers."""

    def existing_rows(self, conn: sa.Connection, pkind: str, keys: Sequence[str], *,
                      current: bool = False) -> Iterable[Sequence[Any]]:
        """Run that read: the rows of ``keys`` that exist, locked (as committed now where
        ``current``, after an insert met a key)."""

    def insert_new(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                   now_ms: int, actor: str | None, events: OfferEvents | None = None) -> None:
        """Insert rows all or nothing (and their history events, given ``events``)."""

    def update_changed(self, conn: sa.Connection, pkind: str, rows: Sequence[OfferRow],
                       ids: Sequence[int], now_ms: int, actor: str | None) -> None:
        """Replace existing locked rows, by their ``ids``, with what the offer brings."""

    def insert_rows(self, conn: sa.Connection, table: sa.Table,
                    params: Sequence[dict[str, Any]]) -> None:
        """Insert rows into any of the queue's tables in one statement."""

    def insert_absent(self, conn: sa.Connection, table: sa.Table, pkind: str,
                      rows: list[dict[str, Any]]) -> None:
        """Insert the rows a table lacks, a concurrent insert of the same ones allowed."""

    # ---- claims ----------------------------------------------------------------------------

    def claim_plain(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int, lock: str,
                    until_ms: int, where: Sequence[str],
                    actor: str | None = None) -> list[ClaimedRow]:
        """Claim up to ``limit`` due rows meeting the claim conditions ``where``."""

    def claim_acking(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, where: Sequence[str], actor: str | None,
                     acks: Sequence[tuple[str, Sequence[int]]],
                     events: ClaimEvents | None = None) -> list[ClaimedRow]:
        """Ack ``acks`` ((lock, ids) pairs), then ``claim_plain``; given ``events``, write
        the claim's history events in its statement (``events.written``) where it can."""

    def ack_recorded(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                     events: sa.Table, kind: str, now_ms: int) -> int:
        """Ack ``ids`` and write their acked events in one statement; how many went."""

    def build_select_due(self, where: tuple[str, ...]) -> AnySelect:
        """The locking read of the first due rows, in claim order."""

    def pick_due(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                 where: Sequence[str]) -> Sequence[Sequence[Any]]:
        """Lock and read up to ``limit`` due rows."""

    def due_params(self, pkind: str, now_ms: int, limit: int) -> dict[str, Any]:
        """The parameters of ``select_due``'s statement."""

    def due_in_claim_order(self, base: AnySelect, limit: sa.ColumnElement[int], *,
                           gate: Sequence[sa.ColumnElement[bool]] = (),
                           skip_locked: bool = False,
                           source: sa.FromClause | None = None,
                           ungrouped: bool = False,
                           of_groups: Sequence[sa.ColumnElement[bool]] = ()) -> AnySelect:
        """A read cut to the first due messages in claim order."""

    def lock_rows(self, stmt: AnySelect, table: sa.FromClause, *, skip: bool) -> AnySelect:
        """``stmt`` locking the rows it reads (passing over locked ones when ``skip``)."""

    @staticmethod
    def lock_order(key: str) -> str | bytes:
        """The sort key putting keys in the order the database locks them."""

    def current_read(self, stmt: AnySelect) -> AnySelect:
        """``stmt`` reading what is committed now, not the transaction's snapshot."""

    def probe(self, stmt: AnySelect, index: str | None = None) -> AnySelect:
        """A correlated subquery kept one index probe per outer row."""

    def held_by(self, lock: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]:
        """The message is claimed under ``lock``."""

    def ids_listed(self) -> sa.ColumnElement[bool]:
        """The messages whose ids the parameter ``ids`` lists."""

    def by_id(self, stmt: ById, table: sa.Table, count: int | None = None) -> ById:
        """A read or update of rows named by id, as the planner should take it."""

    # ---- groups ----------------------------------------------------------------------------

    def claim_grouped(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                      lock: str, until_ms: int, actor: str | None,
                      own_transaction: bool) -> list[ClaimedRow]:
        """Claim due messages of a queue with groups, at most one per group."""

    def claim_groups(self, conn: sa.Connection, pkind: str, now_ms: int, limit: int,
                     lock: str, until_ms: int, actor: str | None,
                     own_transaction: bool) -> list[ClaimedRow]:
        """That claim for a queue of groups alone, where ``groups_in_claim``."""

    def win_groups(self, conn: sa.Connection, pkind: str, groups: dict[str, bool],
                   now_ms: int, limit: int) -> list[str]:
        """Lock the rows of free groups among ``groups``, making missing ones; those won."""

    def read_heads(self, conn: sa.Connection, pkind: str, groups: Sequence[str],
                   now_ms: int) -> Sequence[Sequence[Any]]:
        """The first due message of each group won, locked."""

    def claim_heads(self, conn: sa.Connection, pkind: str, won: Sequence[str], loose: int,
                    now_ms: int, limit: int, lock: str, until_ms: int,
                    actor: str | None) -> list[ClaimedRow]:
        """Claim the heads of the groups won and up to ``loose`` ungrouped messages."""

    def heads_plan(self, dialect: sa.Dialect, pkind: str, groups: Sequence[str], now_ms: int,
                   limit: int) -> tuple[sa.Executable, dict[str, Any]]:
        """The statement reading the first due message of each group, and its parameters."""

    def walk_settings(self) -> sa.Executable | None:
        """The planner settings the grouped claim runs under, as a statement; or None."""

    def ack_freeing(self, conn: sa.Connection, pkind: str, lock: str, ids: Sequence[int],
                    groups: Sequence[str], *, drop: bool = True) -> int:
        """Ack messages and free the groups they held; how many were deleted."""

    def free_groups(self, conn: sa.Connection, pkind: str, lock: str,
                    groups: Sequence[str], *, drop: bool = True) -> None:
        """Free the groups ``lock`` holds, dropping those left empty (``drop``)."""

    def drop_groups(self, conn: sa.Connection, pkind: str, groups: Sequence[str]) -> None:
        """Drop the free groups among ``groups`` that have no message left."""

    def extend_group(self, conn: sa.Connection, pkind: str, lock: str, group: str,
                     until_ms: int) -> None:
        """Keep a group claimed as long as its message's extended lock."""

    # ---- deletes ---------------------------------------------------------------------------

    def delete_by_id(self, table: sa.Table, count: int,
                     *where: sa.ColumnElement[bool]) -> sa.Delete:
        """A DELETE of rows meeting ``where``, which names ``count`` of them by id."""

    def delete_which(self, conn: sa.Connection, *where: sa.ColumnElement[bool],
                     count: int | None = None) -> list[str]:
        """Delete the messages meeting ``where``; their keys."""

    def ack(self, conn: sa.Connection, row_id: int, lock: str) -> bool:
        """Delete message ``row_id`` if ``lock`` still holds it; whether it went."""

    def ack_many(self, conn: sa.Connection, lock: str, ids: Sequence[int]) -> int:
        """Delete the messages ``ids`` that ``lock`` still holds; how many went."""

    def acks_of(self, count: int) -> sa.Delete:
        """The ack of ``count`` messages (parameters lock and ids): one DELETE."""

    def lock_acked(self, conn: sa.Connection, ids: Sequence[int]) -> None:
        """Lock an ack's rows, in the order its deletions must take them, before them."""

    def delete_kind_batch(self, conn: sa.Connection, pkind: str) -> list[str]:
        """Delete a batch of a queue's messages, locked first; their keys."""

    def prefix_match(self, column: sa.ColumnElement[str], prefix: str) -> sa.ColumnElement[bool]:
        """``column`` starts with ``prefix`` taken literally."""

    # ---- wake-ups (where ``notifications``; ``notifier`` listens) ------------------------

    notifications: ClassVar[bool]  # offers due now wake listening workers

    @property
    def channel(self) -> str:
        """The name under which offers notify and workers listen."""

    def listen_statement(self, channel: str | None = None) -> str:
        """The statement that makes a connection hear ``channel`` (default: the offers')."""

    def wake_listeners(self, conn: sa.Connection, pkind: str) -> None:
        """Notify the workers of ``pkind`` when the transaction commits."""

    @property
    def settled_channel(self) -> str:
        """The channel on which a task's result or dead letter is announced."""

    def notify_settled(self, conn: sa.Connection, pkind: str, key: str) -> None:
        """Announce, when the transaction commits, that ``key`` of ``pkind`` has settled."""
