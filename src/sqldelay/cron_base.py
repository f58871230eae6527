"""Recurring messages stored ahead of time as ordinary delayed messages: what the blocking and
the asyncio CronService share (``cron_async.py``, and ``cron.py`` generated from it).

A schedule is kept ``ahead`` ticks in advance in the queue itself, so any consumer picks the
ticks up and a crash of the installing process loses nothing already installed. Each tick is
a message keyed ``{prefix}/{config hash}/{UTC time}``:

- the key is unique per tick and inserted only if absent, so any number of processes may
  install the same schedule at once and each tick is stored (and delivered) once;
- the config hash (SHA-256 of the schedule's definition, the encoded payload and an optional
  version) changes when the configuration does, so installing a new configuration deletes the
  not-yet-due messages of every other configuration under the prefix and keeps its own;
- a message a consumer holds (claimed, lock not expired) is never deleted from under it.

Ticks are only ever installed strictly after the installer's clock reads now, so a tick that
was delivered and acked is not installed again. That clock is the database server's (the
queue's ``DatabaseClock``), so installers whose own clocks disagree still agree on now: only
an error of the measured offset larger than the time between a tick and its ack could
install a tick twice.
Processes installing *different* configurations of one prefix (a rolling deploy) replace each
other's future ticks at every install, the last one winning until the old ones stop.
A blocking and an asyncio process installing the same schedule install the same ticks.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from .clock import duration_ms, from_ms, require_aware, to_ms
from .errors import InvalidArgumentError
from .history import process_actor
from .messages import Message, OfferOutcome
from .schedules import CronSchedule, PeriodicSchedule, Schedule
from .serializers import encode_payload

if TYPE_CHECKING:  # the queue module imports this one
    from .queue_base import QueueBase

MAX_PREFIX = 100
MAX_HASH = 64
MAX_AHEAD = 1000
MIN_WAIT = 1.0  # seconds between installs at the least, however close the next tick is


def cron_actor() -> str:
    """Who installs and removes ticks, in the history: this process's cron service."""
    return f"cron@{process_actor()}"


_KEY = re.compile(r"^([^/]+)/([^/]+)/(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$")

T = TypeVar("T")
Op = Callable[[sa.Connection], T]  # an operation returning a T, run by either front end


@dataclass(frozen=True, slots=True)
class CronMessage:
    """One tick for ``CronService.install_tick``: ``payload`` due at ``at`` (aware datetime),
    claimed before due messages of lower ``priority``."""

    at: datetime
    payload: Any
    priority: int = 0


@dataclass(frozen=True, slots=True)
class InstalledSchedule:
    """A configuration found in the queue by ``CronService.list``."""

    prefix: str
    config_hash: str
    next_at: datetime | None  # the earliest tick not held by a consumer; None if all are held
    pending: int  # ticks stored and not held by a consumer
    in_flight: int  # ticks a consumer holds now


@dataclass(frozen=True, slots=True)
class Installation:
    """A checked schedule, ready to install now and again: ``ticks(now)`` are the next
    ``ahead`` ticks with their payloads, ``config_hash`` names the configuration."""

    prefix: str
    config_hash: str
    schedule: Schedule
    ahead: int
    payload: Any
    payload_fn: Callable[[datetime], Any] | None
    priority: int = 0

    def ticks(self, now: datetime) -> list[CronMessage]:
        return [CronMessage(at, self.payload if self.payload_fn is None else self.payload_fn(at),
                            self.priority)
                for at in self.schedule.ticks(now, self.ahead)]


@dataclass(slots=True)
class _Tally:
    """What ``list_op`` counts of one configuration's stored ticks."""

    next_ms: int | None = None  # the earliest tick not held by a consumer
    pending: int = 0
    in_flight: int = 0


class CronServiceBase:
    """Recurring messages of one queue. ``refresh``: how often each installer re-installs."""

    def __init__(self, queue: QueueBase, *, refresh: timedelta = timedelta(minutes=1)) -> None:
        from .queue_base import QueueBase

        if not isinstance(queue, QueueBase):
            raise InvalidArgumentError(f"{type(self).__name__} needs a queue, got {queue!r}")
        refresh_ms = duration_ms(refresh, "refresh")
        if refresh_ms < 1:
            raise InvalidArgumentError("refresh must be positive")
        self.queue = queue
        self.refresh = refresh
        self._refresh_s = refresh_ms / 1000
        self._handles: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.queue!r})"

    def prepare(self, prefix: str, schedule: Schedule, payload: Any,
                payload_fn: Callable[[datetime], Any] | None, ahead: int,
                version: str, priority: int = 0) -> Installation:
        """Check an installation's arguments and compute its configuration hash.

        With ``payload_fn`` the hash cannot see what the function returns: change ``version``
        when it changes, so the ticks already stored are replaced.
        """
        from .queue_base import check_priority

        check_prefix(prefix)
        check_priority(priority)
        if not isinstance(ahead, int) or isinstance(ahead, bool) or not 1 <= ahead <= MAX_AHEAD:
            raise InvalidArgumentError(f"ahead must be an integer 1 to {MAX_AHEAD}, got {ahead!r}")
        if not isinstance(version, str):
            raise InvalidArgumentError(f"version must be a str, got {type(version).__name__}")
        if payload_fn is not None:
            if payload is not None:
                raise InvalidArgumentError("give payload or payload_fn, not both")
            if not callable(payload_fn):
                raise InvalidArgumentError(f"payload_fn must be callable, got {payload_fn!r}")
            encoded = None
        else:
            encoded = encode_payload(self.queue.serializer, payload)
        return Installation(prefix, hash_config(schedule, encoded, version, priority), schedule,
                            ahead, payload, payload_fn, priority)

    def prepare_task(self, task: Any, when: Any, args: Sequence[Any],
                     kwargs: Mapping[str, Any] | None, prefix: str | None,
                     tz: str | ZoneInfo, ahead: int, version: str,
                     priority: int | None) -> Installation:
        """``prepare`` for ticks that call ``task`` (of ``sqldelay.tasks``, either front end)
        with these arguments, checked as ``defer`` checks them. ``when``: a cron expression
        (in ``tz``), a timedelta (periodic ticks), or a Schedule. ``prefix``: default the
        task's name. ``priority``: default the task's."""
        from .errors import PayloadError
        from .tasks_base import TaskBase

        if not isinstance(task, TaskBase):
            raise InvalidArgumentError(f"install_task takes a task (@tasks.task), got {task!r}")
        if (task.queue.name, task.queue.dao.table.name) != (self.queue.name,
                                                            self.queue.dao.table.name):
            raise InvalidArgumentError(
                f"task {task.name} goes to queue {task.queue.name!r}: install it with that "
                f"queue's cron()")
        schedule = schedule_of(when, tz)
        payload = task.payload(args, {} if kwargs is None else kwargs)
        try:
            return self.prepare(task.name if prefix is None else prefix, schedule, payload,
                                None, ahead, version,
                                task.priority if priority is None else priority)
        except PayloadError as exc:
            task.explain_payload_error(exc, [(payload.get("args", []),
                                              payload.get("kwargs", {}))])
            raise

    def next_wait(self, installation: Installation, now: datetime) -> float:
        """Seconds from ``now`` until an installer should install again."""
        first = installation.schedule.ticks(now, 1)[0]
        return min(self._refresh_s, max((first - now).total_seconds(), MIN_WAIT))

    def install_tick_op(self, config_hash: str, prefix: str,
                        messages: Sequence[CronMessage]) -> Op[list[OfferOutcome]]:
        """Store ``messages`` as configuration ``config_hash`` of ``prefix``, in one transaction.

        First deletes the not-yet-due messages of every other configuration under ``prefix``
        (not those a consumer holds), then inserts each tick unless its key exists. Outcomes
        are in input order: CREATED, or IGNORED for a tick already stored.
        """
        check_prefix(prefix)
        check_hash(config_hash)
        offers = []
        for i, m in enumerate(messages):
            if not isinstance(m, CronMessage):
                raise InvalidArgumentError(
                    f"install_tick takes CronMessage objects; item {i} is {type(m).__name__}")
            require_aware(m.at, f"messages[{i}].at")
            offers.append(Message(tick_key(prefix, config_hash, m.at), m.payload, m.at,
                                  update=False, priority=m.priority))
        q = self.queue
        plan = q.plan_offer(offers, by=cron_actor() if q.recorder is not None else None)
        stale = q.delete_op(q.dao.key_prefix_deletable(
            q.pkind, prefix + "/", q.now_ms(), keep_prefix=f"{prefix}/{config_hash}/",
            only_future=True), cron_actor(), "its schedule changed")

        def op(conn: sa.Connection) -> list[OfferOutcome]:
            stale(conn)
            return [] if plan is None else plan.op(conn)

        return op

    def delete_op(self, key_prefix: str) -> Op[int]:
        """Delete the ticks under ``key_prefix`` but those a consumer holds; how many."""
        q = self.queue
        return q.delete_op(q.dao.key_prefix_deletable(q.pkind, key_prefix, q.now_ms()),
                           cron_actor(), "its schedule was uninstalled")

    def list_op(self, prefix: str | None) -> Op[list[InstalledSchedule]]:
        """The configurations stored in the queue (by any process), by prefix, with their
        next due times. Without ``prefix`` it reads every key of the queue; messages whose
        keys are not tick keys are not shown."""
        if prefix is not None:
            check_prefix(prefix)
        q = self.queue
        now = q.now_ms()
        stmt = q.dao.select_key_prefix(q.pkind, "" if prefix is None else prefix + "/")

        def op(conn: sa.Connection) -> list[InstalledSchedule]:
            found: dict[tuple[str, str], _Tally] = {}
            for row in conn.execute(stmt):
                match = _KEY.match(row.pkey)
                if match is None or (prefix is not None and match.group(1) != prefix):
                    continue
                held = row.lock_uuid is not None and row.scheduled_at > now
                entry = found.setdefault((match.group(1), match.group(2)), _Tally())
                if held:
                    entry.in_flight += 1
                else:
                    entry.pending += 1
                    at: int = row.scheduled_at_initially
                    entry.next_ms = at if entry.next_ms is None else min(entry.next_ms, at)
            return [InstalledSchedule(p, h, None if e.next_ms is None else from_ms(e.next_ms),
                                      e.pending, e.in_flight)
                    for (p, h), e in sorted(found.items(), key=lambda item: item[0])]

        return op


def schedule_of(when: Any, tz: str | ZoneInfo = "UTC") -> Schedule:
    """The schedule ``when`` names: a cron expression (in ``tz``), a timedelta (periodic
    ticks), or a Schedule as it is."""
    if isinstance(when, Schedule):
        return when
    if isinstance(when, str):
        return CronSchedule.parse(when, tz)
    if isinstance(when, timedelta):
        return PeriodicSchedule.of(when)
    raise InvalidArgumentError(
        f"a schedule is a cron expression, a timedelta or a Schedule, got {when!r}")


def hash_config(schedule: Schedule, payload: bytes | None, version: str = "",
                priority: int = 0) -> str:
    """16 hex digits of SHA-256 over the schedule, the encoded payload (None when a function
    makes each tick's payload), ``version`` and a priority other than 0 (so the hashes of
    schedules from before priorities existed stay what they were): equal in every process
    and Python run."""
    definition: dict[str, object] = {
        "schedule": schedule.definition(),
        "payload": None if payload is None else payload.hex(), "version": version}
    if priority:
        definition["priority"] = priority
    text = json.dumps(definition, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tick_key(prefix: str, config_hash: str, at: datetime) -> str:
    """``{prefix}/{config hash}/{UTC time to the millisecond}``; sorts in time order."""
    ms = to_ms(at)
    return f"{prefix}/{config_hash}/{from_ms(ms):%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def check_prefix(prefix: Any) -> None:
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f"prefix must be a str, got {type(prefix).__name__}")
    if not prefix or len(prefix) > MAX_PREFIX:
        raise InvalidArgumentError(f"prefix must be 1 to {MAX_PREFIX} characters, got {prefix!r}")
    if "/" in prefix:
        raise InvalidArgumentError(
            f"prefix must not contain '/' (it separates the parts of tick keys), got {prefix!r}")


def check_hash(config_hash: Any) -> None:
    if (not isinstance(config_hash, str) or not config_hash or len(config_hash) > MAX_HASH
            or "/" in config_hash):
        raise InvalidArgumentError(
            f"config_hash must be 1 to {MAX_HASH} characters without '/', got {config_hash!r}")
