"""Time: the injectable clock and the conversions between aware datetimes and epoch ms.

The queue stores every time as BIGINT milliseconds since the epoch (portable across all
databases); the public API speaks timezone-aware UTC datetimes and timedeltas.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol

from .errors import InvalidArgumentError


class Clock(Protocol):
    """Anything with a ``now()`` returning an aware datetime can drive a queue."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to; for tests and simulations. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2030, 1, 1, tzinfo=UTC)
        require_aware(start, "start")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> None:
        require_aware(when, "when")
        with self._lock:
            self._now = when


def require_aware(when: datetime, name: str) -> None:
    if not isinstance(when, datetime):
        raise InvalidArgumentError(f"{name} must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.tzinfo.utcoffset(when) is None:
        raise InvalidArgumentError(
            f"{name} is a naive datetime ({when.isoformat()}); pass a timezone-aware one, "
            "e.g. datetime.now(UTC)"
        )


def to_ms(when: datetime, name: str = "at") -> int:
    require_aware(when, name)
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    # one millisecond times ms, exact: 0.28 µs, against 0.60 µs for timedelta(milliseconds=ms),
    # and this runs twice for every message claimed
    return _EPOCH + _MILLISECOND * ms


def duration_ms(delta: timedelta, name: str) -> int:
    if not isinstance(delta, timedelta):
        raise InvalidArgumentError(f"{name} must be a timedelta, got {type(delta).__name__}")
    ms = round(delta.total_seconds() * 1000)
    if ms < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {delta}")
    return ms


_MILLISECOND = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
