"""CronService: recurring messages stored ahead of time as ordinary delayed messages.

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
was delivered and acked is not installed again; processes whose clocks disagree by more than
the time between a tick and its ack could install it twice: keep clocks in sync (NTP).
Processes installing *different* configurations of one prefix (a rolling deploy) replace each
other's future ticks at every install, the last one winning until the old ones stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from .clock import duration_ms, from_ms, require_aware, to_ms
from .errors import InvalidArgumentError
from .messages import Message, OfferOutcome
from .schedules import CronSchedule, PeriodicSchedule, Schedule, daily
from .serializers import encode_payload

if TYPE_CHECKING:
    from .queue import DelayedQueue

log = logging.getLogger("sqldelay.cron")

MAX_PREFIX = 100
MAX_HASH = 64
MAX_AHEAD = 1000
_MIN_WAIT = 1.0  # seconds between installs at the least, however close the next tick is
_KEY = re.compile(r"^([^/]+)/([^/]+)/(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$")


@dataclass(frozen=True, slots=True)
class CronMessage:
    """One tick for ``CronService.install_tick``: ``payload`` due at ``at`` (aware datetime)."""

    at: datetime
    payload: Any


@dataclass(frozen=True, slots=True)
class InstalledSchedule:
    """A configuration found in the queue by ``CronService.list``."""

    prefix: str
    config_hash: str
    next_at: datetime | None  # the earliest tick not held by a consumer; None if all are held
    pending: int  # ticks stored and not held by a consumer
    in_flight: int  # ticks a consumer holds now


class CronHandle:
    """The background installer of one schedule in this process; ``close()`` stops it.

    It re-installs every ``refresh`` (and soon after each tick falls due) so that ``ahead``
    ticks stay stored, and logs and carries on when an install fails (database unreachable).
    Closing stops only this process's installing; the stored ticks stay (see ``uninstall``).
    """

    def __init__(self, prefix: str, config_hash: str, install_once: Callable[[], float],
                 refresh: float, first_wait: float) -> None:
        self.prefix = prefix
        self.config_hash = config_hash
        self._install_once = install_once
        self._refresh = refresh
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(first_wait,), daemon=True,
                                        name=f"sqldelay-cron-{prefix}")
        self._thread.start()

    def __repr__(self) -> str:
        state = "running" if self.running else "closed"
        return f"CronHandle({self.prefix!r}, {self.config_hash!r}, {state})"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout: float | None = None) -> None:
        """Stop the installer and wait for it (an install under way finishes first)."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> CronHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _loop(self, wait: float) -> None:
        while not self._stop.wait(wait):
            try:
                wait = self._install_once()
            except Exception:  # any failure: log it, keep the schedule alive, try again later
                log.warning("installing cron schedule %r failed; trying again in %.3g s",
                            self.prefix, self._refresh, exc_info=True)
                wait = self._refresh


class CronService:
    """Recurring messages of one queue. ``refresh``: how often each installer re-installs."""

    def __init__(self, queue: DelayedQueue, *, refresh: timedelta = timedelta(minutes=1)) -> None:
        from .queue import DelayedQueue

        if not isinstance(queue, DelayedQueue):
            raise InvalidArgumentError(f"CronService needs a DelayedQueue, got {queue!r}")
        refresh_ms = duration_ms(refresh, "refresh")
        if refresh_ms < 1:
            raise InvalidArgumentError("refresh must be positive")
        self.queue = queue
        self.refresh = refresh
        self._refresh_s = refresh_ms / 1000
        self._handles: dict[str, CronHandle] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CronService({self.queue!r})"

    # ---- schedules with a background installer -------------------------------------------

    def install_cron(self, prefix: str, expression: str, *, payload: Any = None,
                     payload_fn: Callable[[datetime], Any] | None = None,
                     tz: str | ZoneInfo = "UTC", ahead: int = 4, version: str = "") -> CronHandle:
        """Install a 5-field cron expression (or ``@hourly``, ``@daily``, …) in time zone ``tz``.

        Daylight-saving transitions follow the rule in ``sqldelay.schedules``: a skipped wall
        time fires once when the clocks jump, a repeated one once at its first occurrence.
        """
        return self._install(prefix, CronSchedule.parse(expression, tz), payload, payload_fn,
                             ahead, version)

    def install_periodic(self, prefix: str, every: timedelta, *, payload: Any = None,
                         payload_fn: Callable[[datetime], Any] | None = None, ahead: int = 4,
                         version: str = "") -> CronHandle:
        """Install ticks every ``every`` (at least a second), at the multiples of ``every``
        since the Unix epoch, so every process computes the same instants."""
        return self._install(prefix, PeriodicSchedule.of(every), payload, payload_fn, ahead,
                             version)

    def install_daily(self, prefix: str, at_hours: Sequence[int], *, tz: str | ZoneInfo = "UTC",
                      payload: Any = None, payload_fn: Callable[[datetime], Any] | None = None,
                      ahead: int = 4, version: str = "") -> CronHandle:
        """Install ticks every day at the whole hours ``at_hours`` of ``tz``'s wall clock."""
        return self._install(prefix, daily(at_hours, tz), payload, payload_fn, ahead, version)

    def _install(self, prefix: str, schedule: Schedule, payload: Any,
                 payload_fn: Callable[[datetime], Any] | None, ahead: int,
                 version: str) -> CronHandle:
        """Validate, install once in the caller's thread (errors reach the caller), then start
        this process's background installer, replacing the one it had for ``prefix``.

        With ``payload_fn`` the hash cannot see what the function returns: change ``version``
        when it changes, so the ticks already stored are replaced.
        """
        check_prefix(prefix)
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
        digest = hash_config(schedule, encoded, version)

        def install_once() -> float:
            """Install the next ``ahead`` ticks; returns seconds until the next install."""
            now = self.queue.clock.now()
            ticks = schedule.ticks(now, ahead)
            self.install_tick(digest, prefix, [
                CronMessage(at, payload if payload_fn is None else payload_fn(at))
                for at in ticks])
            until_first = (ticks[0] - now).total_seconds()
            return min(self._refresh_s, max(until_first, _MIN_WAIT))

        with self._lock:
            old = self._handles.pop(prefix, None)
            if old is not None:
                old.close()
            first_wait = install_once()
            handle = CronHandle(prefix, digest, install_once, self._refresh_s, first_wait)
            self._handles[prefix] = handle
            return handle

    # ---- the low level: ticks computed by the caller ---------------------------------------

    def install_tick(self, config_hash: str, prefix: str,
                     messages: Sequence[CronMessage]) -> list[OfferOutcome]:
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
                                  update=False))
        q = self.queue

        def op(conn) -> list[OfferOutcome]:
            conn.execute(q.dao.delete_key_prefix(
                q.pkind, prefix + "/", q.now_ms(), keep_prefix=f"{prefix}/{config_hash}/",
                only_future=True))
            return q.offer_many(offers, connection=conn)

        return q.executor.run(op, write=True)

    def uninstall_tick(self, config_hash: str, prefix: str) -> int:
        """Delete configuration ``config_hash``'s stored ticks but those a consumer holds."""
        check_prefix(prefix)
        check_hash(config_hash)
        return self._delete(f"{prefix}/{config_hash}/")

    def uninstall(self, prefix: str) -> int:
        """Stop this process's installer of ``prefix`` and delete every stored tick under it
        (of any configuration) but those a consumer holds; returns how many were deleted.

        Installers of ``prefix`` in other processes would store ticks again: stop them first.
        """
        check_prefix(prefix)
        with self._lock:
            handle = self._handles.pop(prefix, None)
            if handle is not None:
                handle.close()
            return self._delete(prefix + "/")

    def _delete(self, key_prefix: str) -> int:
        q = self.queue
        return q.executor.run(
            lambda conn: conn.execute(
                q.dao.delete_key_prefix(q.pkind, key_prefix, q.now_ms())).rowcount,
            write=True)

    # ---- inspecting and stopping ----------------------------------------------------------

    def list(self, prefix: str | None = None) -> list[InstalledSchedule]:
        """The configurations stored in the queue (by any process), by prefix, with their
        next due times. Without ``prefix`` it reads every key of the queue; messages whose
        keys are not tick keys are not shown."""
        if prefix is not None:
            check_prefix(prefix)
        q = self.queue
        now = q.now_ms()
        rows = q.executor.run(
            lambda conn: conn.execute(
                q.dao.select_key_prefix(q.pkind, "" if prefix is None else prefix + "/")).all(),
            write=False)
        found: dict[tuple[str, str], list] = {}
        for row in rows:
            match = _KEY.match(row.pkey)
            if match is None or (prefix is not None and match.group(1) != prefix):
                continue
            held = row.lock_uuid is not None and row.scheduled_at > now
            entry = found.setdefault((match.group(1), match.group(2)), [None, 0, 0])
            if held:
                entry[2] += 1
            else:
                entry[1] += 1
                at = row.scheduled_at_initially
                entry[0] = at if entry[0] is None else min(entry[0], at)
        return [InstalledSchedule(p, h, None if at is None else from_ms(at), pending, held)
                for (p, h), (at, pending, held) in sorted(found.items())]

    def close(self) -> None:
        """Stop every background installer this service started."""
        with self._lock:
            handles = list(self._handles.values())
            self._handles.clear()
        for handle in handles:
            handle.close()


def hash_config(schedule: Schedule, payload: bytes | None, version: str = "") -> str:
    """16 hex digits of SHA-256 over the schedule, the encoded payload (None when a function
    makes each tick's payload) and ``version``: equal in every process and Python run."""
    text = json.dumps({"schedule": schedule.definition(),
                       "payload": None if payload is None else payload.hex(),
                       "version": version}, sort_keys=True)
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
