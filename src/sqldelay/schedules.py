"""Tick generation: when a recurring schedule fires, as UTC instants, with no I/O.

Cron expressions are parsed and stepped by croniter (maintained in the Pallets community
ecosystem) over *naive local wall-clock times*; this module alone maps each wall time to an
instant in the schedule's time zone, so the daylight-saving rule is ours and written down:

- A wall time that a spring-forward transition skips (02:30 in Europe/Berlin on the last Sunday
  of March) fires once, at the instant the clocks jump (03:00 CEST that day).
- A wall time that a fall-back transition repeats (02:30 in Europe/Berlin on the last Sunday of
  October) fires once, at its first occurrence (02:30 CEST); nothing fires during the repeated
  hour's second pass.
- Wall times that map to the same instant (02:00, 02:30 and 03:00 on a spring-forward day for a
  half-hourly job) fire once.

Periodic schedules need no time zone: their ticks are the multiples of the period counted from
the Unix epoch, so every process computes the same instants. Daily schedules are cron
schedules (``0 H1,H2 * * *``) and follow the same rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from .clock import duration_ms, from_ms, require_aware, to_ms
from .errors import InvalidArgumentError

CRON_ALIASES = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight",
                          "@hourly"})
MIN_PERIOD_MS = 1000


class Schedule:
    """A recurring schedule: ``ticks`` says when it fires, ``definition`` what it is."""

    def ticks(self, after: datetime, count: int) -> list[datetime]:
        """The first ``count`` firing instants strictly after ``after``, as aware UTC datetimes."""
        raise NotImplementedError

    def definition(self) -> str:
        """A canonical text of the schedule: equal schedules give equal texts in any process."""
        raise NotImplementedError


@dataclass(frozen=True)
class CronSchedule(Schedule):
    """A standard 5-field cron expression (or an ``@hourly``-style alias) in an IANA time zone."""

    expression: str
    tz: ZoneInfo

    @classmethod
    def parse(cls, expression: str, tz: str | ZoneInfo = "UTC") -> CronSchedule:
        if not isinstance(expression, str):
            raise InvalidArgumentError(
                f"cron expression must be a str, got {type(expression).__name__}")
        normal = " ".join(expression.split())
        if normal.startswith("@"):
            if normal not in CRON_ALIASES:
                raise InvalidArgumentError(
                    f"invalid cron expression {expression!r}: known aliases are "
                    f"{', '.join(sorted(CRON_ALIASES))}")
        elif len(normal.split(" ")) != 5:
            raise InvalidArgumentError(
                f"invalid cron expression {expression!r}: expected 5 fields (minute hour "
                "day-of-month month day-of-week)")
        try:
            croniter(normal, datetime(2000, 1, 1)).get_next(datetime)
        except CroniterError as exc:
            raise InvalidArgumentError(f"invalid cron expression {expression!r}: {exc}") from None
        return cls(normal, zone(tz))

    def ticks(self, after: datetime, count: int) -> list[datetime]:
        require_aware(after, "after")
        wall = after.astimezone(self.tz).replace(tzinfo=None)
        steps = croniter(self.expression, wall)
        found: list[datetime] = []
        while len(found) < count:
            at = wall_to_utc(steps.get_next(datetime), self.tz)
            # wall times repeated or skipped by a transition map to instants already passed or
            # already found; the mapping never goes backwards, so comparing with the last is enough
            if at > after and (not found or at > found[-1]):
                found.append(at)
        return found

    def definition(self) -> str:
        return json.dumps({"cron": self.expression, "tz": self.tz.key}, sort_keys=True)


@dataclass(frozen=True)
class PeriodicSchedule(Schedule):
    """Every ``every``, at the multiples of ``every`` since the Unix epoch (UTC)."""

    every_ms: int

    @classmethod
    def of(cls, every: timedelta) -> PeriodicSchedule:
        ms = duration_ms(every, "every")
        if ms < MIN_PERIOD_MS:
            raise InvalidArgumentError(f"every must be at least one second, got {every}")
        return cls(ms)

    def ticks(self, after: datetime, count: int) -> list[datetime]:
        first = to_ms(after, "after") // self.every_ms + 1
        return [from_ms((first + i) * self.every_ms) for i in range(count)]

    def definition(self) -> str:
        return json.dumps({"every_ms": self.every_ms})


def daily(at_hours: Iterable[int], tz: str | ZoneInfo = "UTC") -> CronSchedule:
    """Every day at the given whole hours (0-23) of ``tz``'s wall clock."""
    if isinstance(at_hours, int | str) or not hasattr(at_hours, "__iter__"):
        raise InvalidArgumentError(f"at_hours must be a list of hours, got {at_hours!r}")
    hours = list(at_hours)
    bad = [h for h in hours if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h <= 23]
    if not hours or bad:
        raise InvalidArgumentError(
            f"at_hours must be a non-empty list of whole hours 0 to 23, got {hours!r}")
    return CronSchedule.parse(f"0 {','.join(str(h) for h in sorted(set(hours)))} * * *", tz)


def zone(tz: str | ZoneInfo) -> ZoneInfo:
    """An IANA time zone by name (or as given), with a clear error for an unknown name."""
    if isinstance(tz, ZoneInfo):
        return tz
    if not isinstance(tz, str):
        raise InvalidArgumentError(
            f"tz must be an IANA zone name such as 'Europe/Berlin', got {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgumentError(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def wall_to_utc(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant a naive wall time of ``tz`` stands for, by the rule in the module docstring."""
    before = wall.replace(tzinfo=tz, fold=0).utcoffset()
    after = wall.replace(tzinfo=tz, fold=1).utcoffset()
    assert before is not None and after is not None  # an aware time has an offset
    if before >= after:  # an ordinary time, or a repeated one whose first pass fold=0 names
        return (wall - before).replace(tzinfo=UTC)
    # skipped: the clocks jump somewhere in (wall - after, wall - before]; find the first
    # whole second whose wall time is not earlier than ``wall`` (transitions fall on seconds)
    base = wall.replace(tzinfo=UTC)
    lo = math.floor((base - after).timestamp())
    hi = math.ceil((base - before).timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)
