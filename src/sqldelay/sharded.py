# Generated from sharded_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""A queue spread over several databases, for this front end: the same API as one queue.

Routing, names and the poll bookkeeping are ``sharded_base``'s; this module only runs the
shards' operations. A call that must reach a shard which cannot be reached raises
``ShardUnavailableError`` naming it, while calls that concern other shards go on working.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa

from .checks import check_positive_int
from .concurrency import Call, run_op, side_by_side
from .cron import CronService
from .cron_base import CronMessage, InstalledSchedule, check_hash, check_prefix, tick_key
from .dialects import ErrorKind
from .errors import InvalidArgumentError, ShardUnavailableError
from .executor import patience
from .history import HistoryEvent
from .messages import Envelope, FlowControl, Message, OfferOutcome, QueuedMessage, QueueStats
from .queue import DelayedQueue
from .sharded_base import (
    ReshardReport,
    ShardedBase,
    copy_op,
    count_op,
    delete_ids_op,
    in_flight,
    keys_op,
    merged_stats,
    scan_op,
)

if TYPE_CHECKING:
    from .sharded_base import Row

T = TypeVar("T")
ShardEnvelope = Envelope[DelayedQueue]  # what the shards' queues claim


class ShardedQueue(ShardedBase[DelayedQueue]):
    """One queue over ``shards`` (``DelayedQueue`` objects, one per database): a key
    always lands on the same shard, consumers take from every shard. ``Worker`` takes it
    as it takes a queue. See ``sharded_base`` for names, routing and ``previous=``."""

    queue_class = DelayedQueue

    def _on(self, name: str, call: Call[T]) -> T:
        """Run ``call`` on shard ``name``; an unreachable shard's error becomes a
        ShardUnavailableError naming it at once, within ``executor.patience`` too: the other
        shards go on meanwhile."""
        try:
            with patience(0):
                return call()
        except Exception as exc:
            error = self.unavailable(name, exc)
            if error is None or error is exc:
                raise
            raise error from exc

    def cron(self, *, refresh: timedelta = timedelta(minutes=1)) -> ShardedCronService:
        """Recurring messages of this queue, each tick on the shard its key routes to:
        ``q.cron().install_cron("nightly", "0 2 * * *")``."""
        return ShardedCronService(self, refresh=refresh)

    def _everywhere(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call ``method`` on every shard (the old ones too) side by side; the results by
        shard name, or the first unreachable shard's error once all have answered."""
        shards = self.consumed_shards()
        results = side_by_side([partial(self._on, name, partial(getattr(q, method), *args,
                                                                **kwargs))
                                for name, q in shards.items()])
        for result in results:
            if isinstance(result, BaseException):  # a cancelled call's too
                raise result
        return dict(zip(shards, results, strict=True))

    # ---- producing -----------------------------------------------------------------------

    def offer(self, key: str, payload: Any, at: datetime | None = None, *,
              update: bool = True, priority: int = 0, group: str | None = None,
              by: str | None = None) -> OfferOutcome:
        """``DelayedQueue.offer`` on the shard of ``key`` (see ``offer_many``)."""
        if self.previous is not None:
            outcomes = self.offer_many(
                [Message(key, payload, at, update, priority, group)], by=by)
            return outcomes[0]
        name = self.route(key)
        try:
            outcome = self._on(name, partial(
                self.shards[name].offer, key, payload, at, update=update, priority=priority,
                group=group, by=by))
        except ShardUnavailableError as exc:
            exc.outcomes = [None]
            raise
        self.offered(name)
        return outcome

    def offer_many(self, messages: Iterable[Message], *,
                   by: str | None = None) -> list[OfferOutcome]:
        """Offer many messages: split by shard, every part checked before any is written, the
        shards written side by side; outcomes in input order.

        When a shard cannot be reached, the other shards' parts are still written and a
        ShardUnavailableError names it; its ``outcomes`` hold theirs (None for the lost
        part's), so a retry can resend just those. With ``previous=``, a key whose shard
        changed and whose old copy is still on its old shard is IGNORED when ``update`` is
        False; otherwise it is written on its new shard and the old copy deleted (UPDATED).
        """
        messages = list(messages)
        parts = self.split(messages)
        plans = {name: self.shards[name].plan_offer([messages[i] for i in positions], by)
                 for name, positions in parts.items()}  # every part checked: now write
        # a plan reads its shard's time: where the database clock has no offset yet, it is
        # measured and the part planned again (a shard that cannot be reached fails below)
        unread = [name for name in plans if self.shards[name].clock_unread]
        side_by_side([partial(self._on, name, self.shards[name].now) for name in unread])
        for name in unread:
            plans[name] = self.shards[name].plan_offer([messages[i] for i in parts[name]], by)
        outcomes: list[OfferOutcome | None] = [None] * len(messages)
        moved = {} if self.previous is None else self.moved(messages)
        kept_old = [i for i, old in moved.items() if not messages[i].update
                    and self._on(old, partial(self.shard(old).contains, messages[i].key))]
        if kept_old:  # the old copies stand; the rest of each part is planned again
            for i in kept_old:
                outcomes[i] = OfferOutcome.IGNORED
                parts[self.router.route(messages[i].key)].remove(i)
            plans = {name: self.shards[name].plan_offer([messages[i] for i in positions], by)
                     for name, positions in parts.items()}
        names = list(plans)
        results = side_by_side([partial(self._on, name, partial(
            self.shards[name].run_offer, plans[name])) for name in names])
        lost: list[ShardUnavailableError] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, ShardUnavailableError):
                lost.append(result)
                continue
            if isinstance(result, BaseException):  # a cancelled call's too
                raise result
            self.offered(name)
            for i, outcome in zip(parts[name], result, strict=True):
                outcomes[i] = outcome
        for i, old in moved.items():
            if outcomes[i] is not None and messages[i].update and i not in kept_old:
                dropped = self._on(old, partial(self.shard(old).drop, messages[i].key,
                                                by=by))
                if dropped and outcomes[i] is OfferOutcome.CREATED:
                    outcomes[i] = OfferOutcome.UPDATED
        if lost:
            first = lost[0]
            raise ShardUnavailableError(
                "; ".join(str(e) for e in lost) + f" ({sum(o is None for o in outcomes)} of "
                f"{len(outcomes)} messages not offered)", first.shard, outcomes)
        return cast(list[OfferOutcome], outcomes)  # every shard's part offered

    # ---- consuming -----------------------------------------------------------------------

    def poll(self, *, by: str | None = None) -> ShardEnvelope | None:
        """Claim the first due message of the next shard in turn that has one."""
        got = self.poll_many(1, by=by)
        return got[0] if got else None

    def poll_many(self, limit: int, *, by: str | None = None) -> list[ShardEnvelope]:
        """Claim up to ``limit`` due messages, from the shards in turn (round robin), each
        claim on one shard. A shard that had nothing due is skipped until its next due time
        (at most ``recheck``, or until this object offers to it); one that cannot be reached
        is skipped for a growing backoff. Raises ShardUnavailableError only when every shard
        is down; each envelope acks, releases and extends on its own shard."""
        check_positive_int(limit, "limit")
        got: list[ShardEnvelope] = []
        for name in self.turns():
            shard = self.shard(name)
            try:
                batch = self._on(name, partial(shard.poll_many, limit - len(got), by=by))
                self.polled(name, len(batch))
                if not batch:
                    due = self._on(name, shard.next_due)
                    self.nothing_due_for(name, None if due is None else
                                         (due - shard.clock.now()).total_seconds())
            except ShardUnavailableError:
                self.failed(name)
                continue
            got.extend(batch)
            if len(got) >= limit:
                break
        if not got:
            self.check_any_up()
        return got

    def ack(self, envelope: ShardEnvelope) -> bool:
        """Delete a claimed message on its shard; False when its lock is stale."""
        name = self.shard_of(envelope)
        return self._on(name, partial(envelope.queue.ack, envelope))

    def ack_many(self, envelopes: Sequence[ShardEnvelope]) -> int:
        """Delete claimed messages, one statement per shard and claim; how many were."""
        by_shard: dict[str, list[ShardEnvelope]] = {}
        for envelope in envelopes:
            by_shard.setdefault(self.shard_of(envelope), []).append(envelope)
        acked = 0
        for name, part in by_shard.items():
            acked += self._on(name, partial(part[0].queue.ack_many, part))
        return acked

    def release(self, envelope: ShardEnvelope, *, delay: timedelta | None = None,
                error: str | None = None) -> bool:
        name = self.shard_of(envelope)
        return self._on(name, partial(envelope.queue.release, envelope, delay=delay,
                                      error=error))

    def extend(self, envelope: ShardEnvelope, by: timedelta | None = None) -> bool:
        name = self.shard_of(envelope)
        return self._on(name, partial(envelope.queue.extend, envelope, by))

    # ---- flow control: set on every shard ------------------------------------------------

    def pause(self) -> None:
        """Pause every shard (see ``DelayedQueue.pause``)."""
        self._everywhere("pause")

    def resume(self) -> None:
        self._everywhere("resume")

    def set_rate_limit(self, limit: int | None,
                       per: timedelta = timedelta(seconds=1)) -> None:
        """At most ``limit`` claims per ``per`` on EACH shard (every shard keeps its own
        bucket: the whole queue may claim up to shards × limit)."""
        self._everywhere("set_rate_limit", limit, per)

    def set_concurrency_limit(self, limit: int | None) -> None:
        """At most ``limit`` messages in flight on EACH shard."""
        self._everywhere("set_concurrency_limit", limit)

    def flow_control(self) -> dict[str, FlowControl]:
        """Each shard's pause and limits, by shard name."""
        return self._everywhere("flow_control")

    # ---- inspecting and removing ---------------------------------------------------------

    def get(self, key: str) -> QueuedMessage | None:
        """Read the message of ``key`` on its shard (with ``previous=``, on its old shard
        when it has not been moved yet)."""
        name = self.route(key)
        found = self._on(name, partial(self.shards[name].get, key))
        old = self.old_route(key) if found is None else None
        if old is not None:
            found = self._on(old, partial(self.shard(old).get, key))
        return found

    def contains(self, key: str) -> bool:
        name = self.route(key)
        if self._on(name, partial(self.shards[name].contains, key)):
            return True
        old = self.old_route(key)
        return old is not None and self._on(old, partial(self.shard(old).contains, key))

    def drop(self, key: str, *, by: str | None = None) -> bool:
        """Delete the message of ``key`` whatever its state (its old copy too, with
        ``previous=``); True if there was one."""
        name = self.route(key)
        dropped = self._on(name, partial(self.shards[name].drop, key, by=by))
        old = self.old_route(key)
        if old is not None:
            dropped = self._on(old, partial(self.shard(old).drop, key, by=by)) or dropped
        return dropped

    def clear(self, *, by: str | None = None) -> int:
        """Delete every message on every shard; returns how many."""
        return sum((self._everywhere("clear", by=by)).values())

    def history(self, key: str) -> list[HistoryEvent]:
        """The events of ``key`` (on its old shard too, with ``previous=``), oldest first."""
        name = self.route(key)
        events = self._on(name, partial(self.shards[name].history, key))
        old = self.old_route(key)
        if old is not None:
            events = events + self._on(old, partial(self.shard(old).history, key))
        return sorted(events, key=lambda e: e.at)

    def prune_history(self, older_than: timedelta | None = None, *,
                      batch: int = 1000) -> int:
        return sum((self._everywhere("prune_history", older_than,
                                     batch=batch)).values())

    def next_due(self) -> datetime | None:
        """The earliest due time over every shard; None when all are empty."""
        dues = [d for d in (self._everywhere("next_due")).values() if d is not None]
        return min(dues) if dues else None

    def stats(self) -> QueueStats:
        """The sums over every shard (the oldest due age: the oldest of all)."""
        return merged_stats(list((self._everywhere("stats")).values()))

    def shard_stats(self) -> dict[str, QueueStats]:
        """Each shard's stats, by shard name."""
        return self._everywhere("stats")

    # ---- resharding ----------------------------------------------------------------------

    def to_reshard(self) -> int:
        """How many messages the shards of ``previous`` hold: what ``reshard`` reads."""
        if self.previous is None:
            raise InvalidArgumentError("to_reshard needs a sharded queue made with previous=")
        total = 0
        for queue in self.previous.values():
            with queue.engine.connect() as conn:
                total += run_op(conn, count_op(queue))
        return total

    def reshard(self, *, batch: int = 500,
                progress: Callable[[int], object] | None = None) -> ReshardReport:
        """Move every message of the ``previous`` shards whose shard changed to its shard now,
        ``batch`` at a time: each batch is locked on its old shard, copied to the new ones
        (a key already there is not overwritten: that copy is newer) and deleted from the old
        shard once the copies are committed. A message in flight is left where it is (see
        ``ReshardReport.left``). Safe to run again after a crash or with producers and
        consumers running; not two at once. ``progress(n)``: n more messages were read."""
        if self.previous is None:
            raise InvalidArgumentError("reshard needs a sharded queue made with previous= "
                                       "(the shard list before the change)")
        check_positive_int(batch, "batch")
        moved = already = 0
        for name, source in self.previous.items():
            after = 0
            while True:
                for attempt in range(10):
                    try:
                        read, last, copied, there = self._move_batch(name, source,
                                                                     after, batch)
                        break
                    except sa.exc.DBAPIError as exc:  # a deadlock with producers: again
                        if attempt == 9 or source.dao.classify(exc) is not ErrorKind.TRANSIENT:
                            raise
                if not read:
                    break
                after, moved, already = last, moved + copied, already + there
                if progress is not None:
                    progress(read)
        left = 0
        for name, source in self.previous.items():
            with source.engine.connect() as conn:
                keys = run_op(conn, keys_op(source))
            left += sum(self.router.route(k) != name for k in keys)
        return ReshardReport(moved, already, left)

    def _move_batch(self, name: str, source: DelayedQueue, after: int,
                    batch: int) -> tuple[int, int, int, int]:
        """One batch of ``reshard``: (rows read, last id read, copied, found already there)."""
        with source.engine.connect() as conn:
            run_op(conn, source.dao.begin_write)
            rows = run_op(conn, scan_op(source, after, batch))
            now = source.now_ms()
            going: dict[str, list[Row]] = {}
            for row in rows:
                dest = self.router.route(row.pkey)
                if dest != name and not in_flight(row, now):
                    going.setdefault(dest, []).append(row)
            copied = there = 0
            for dest, part in going.items():
                target = self.shards[dest]
                with target.engine.connect() as dest_conn:
                    run_op(dest_conn, target.dao.begin_write)
                    added = run_op(dest_conn, copy_op(target, part))
                    dest_conn.commit()
                copied, there = copied + added, there + len(part) - added
            ids = [row.id for part in going.values() for row in part]
            if ids:
                run_op(conn, delete_ids_op(source, ids))
            conn.commit()
        return len(rows), (rows[-1].id if rows else after), copied, there


class ShardedCronService(CronService):
    """Recurring messages of a sharded queue. Each tick is stored on the shard its key routes
    to, as an offer would put it, so ``get`` and ``contains`` find it and resharding moves it
    like any message. Installing a changed configuration and uninstalling delete on every
    shard (the old ones of ``previous=`` too), one transaction per shard: a shard that cannot
    be reached fails the call with ShardUnavailableError, and the next install (the
    background installer's, at the latest) completes it."""

    def __init__(self, queue: ShardedQueue, *,
                 refresh: timedelta = timedelta(minutes=1)) -> None:
        # the clock and checks of one shard: every shard holds the same queue
        super().__init__(next(iter(queue.shards.values())), refresh=refresh)
        self.sharded = queue
        self._shards = {name: CronService(shard, refresh=refresh)
                        for name, shard in queue.consumed_shards().items()}

    def _each(self, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        results = side_by_side([partial(self.sharded._on, name, call)
                                for name, call in calls.items()])
        for result in results:
            if isinstance(result, BaseException):  # a cancelled call's too
                raise result
        return dict(zip(calls, results, strict=True))

    def install_tick(self, config_hash: str, prefix: str,
                     messages: Sequence[CronMessage]) -> list[OfferOutcome]:
        """Store ``messages`` as configuration ``config_hash`` of ``prefix``, each on its
        key's shard, after deleting the other configurations' not-yet-due ticks on every
        shard. Outcomes are in input order."""
        self.install_tick_op(config_hash, prefix, messages)  # checks all before any shard
        parts: dict[str, list[int]] = {name: [] for name in self._shards}
        for i, m in enumerate(messages):
            parts[self.sharded.route(tick_key(prefix, config_hash, m.at))].append(i)
        results = self._each({
            name: partial(self._shards[name].install_tick, config_hash, prefix,
                          [messages[i] for i in positions])
            for name, positions in parts.items()})
        outcomes: list[OfferOutcome | None] = [None] * len(messages)
        for name, positions in parts.items():
            for i, outcome in zip(positions, results[name], strict=True):
                outcomes[i] = outcome
        return cast(list[OfferOutcome], outcomes)  # every slot filled by its shard

    def uninstall_tick(self, config_hash: str, prefix: str) -> int:
        """Delete configuration ``config_hash``'s stored ticks on every shard but those a
        consumer holds; how many went."""
        check_prefix(prefix)
        check_hash(config_hash)
        return sum((self._each({
            name: partial(service.uninstall_tick, config_hash, prefix)
            for name, service in self._shards.items()})).values())

    def uninstall(self, prefix: str) -> int:
        """Stop this process's installer of ``prefix`` and delete every stored tick under it
        on every shard but those a consumer holds; how many went."""
        check_prefix(prefix)
        with self._lock:
            handle = self._handles.pop(prefix, None)
            if handle is not None:
                handle.close()
            return sum((self._each({
                name: partial(service.uninstall, prefix)
                for name, service in self._shards.items()})).values())

    def list(self, prefix: str | None = None) -> list[InstalledSchedule]:
        """The configurations stored on any shard, merged: the earliest next tick, and the
        pending and in-flight ticks of every shard."""
        found: dict[tuple[str, str], list[InstalledSchedule]] = {}
        for listed in (self._each({
                name: partial(service.list, prefix)
                for name, service in self._shards.items()})).values():
            for schedule in listed:
                found.setdefault((schedule.prefix, schedule.config_hash), []).append(schedule)
        merged = []
        for (name, config_hash), parts in sorted(found.items()):
            times = [p.next_at for p in parts if p.next_at is not None]
            merged.append(InstalledSchedule(name, config_hash, min(times) if times else None,
                                            sum(p.pending for p in parts),
                                            sum(p.in_flight for p in parts)))
        return merged
