"""Time: the injectable clock and the conversions between aware datetimes and epoch ms.

The queue stores every time as BIGINT milliseconds since the epoch (portable across all
databases); the public API speaks timezone-aware UTC datetimes and timedeltas.

Which clock counts is the database server's (``DatabaseClock``, every queue's default): due
times and lock expiries are compared by processes whose own clocks may drift apart by seconds
or minutes (virtual machines, containers), and only a clock they all read agrees with itself.
Reading the server's time in every statement would change every statement of every dialect;
instead each engine keeps the offset between the local clock and the server's, measured on a
connection the queue uses anyway, and renewed every ``refresh``.
"""

from __future__ import annotations

import threading
import time
import weakref
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import sqlalchemy as sa

from .dialects import dao_class_for
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


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


class DatabaseClock:
    """The database server's time, read without a round trip: the local clock ``base``
    corrected by the offset last measured against the server.

    ``now_on(conn)`` measures first when the offset is older than ``refresh`` (or was never
    measured): one extra statement on ``conn`` per engine and ``refresh``. The measurement
    brackets the server's reading with two local ones, and takes the server's time to be
    read halfway, so the offset is off by at most half the round trip (``error``).
    Thread-safe: every queue of an engine shares one (``of``).
    """

    def __init__(self, engine: sa.Engine | AsyncEngine, *, base: Clock | None = None,
                 refresh: timedelta = timedelta(seconds=30)) -> None:
        """``engine``: a blocking or an asyncio engine, whose dialect says how its server
        tells the time; ``base``: the local clock corrected (for tests: a skewed one)."""
        if duration_ms(refresh, "refresh") < 1:
            raise InvalidArgumentError("refresh must be positive")
        self.base = SystemClock() if base is None else base
        self.refresh = refresh.total_seconds()
        self._statement = dao_class_for(engine.dialect).server_time()
        # (offset, half the round trip in ms, when measured: time.monotonic())
        self._reading: tuple[timedelta, float, float] | None = None

    @classmethod
    def of(cls, engine: sa.Engine | AsyncEngine) -> DatabaseClock:
        """The clock of ``engine`` (a blocking or an asyncio one) that its queues share."""
        key = engine if isinstance(engine, sa.Engine) else engine.sync_engine
        with _CLOCKS_LOCK:
            clock = _CLOCKS.get(key)
            if clock is None:
                clock = _CLOCKS[key] = cls(engine)
            return clock

    @property
    def measured(self) -> bool:
        return self._reading is not None

    @property
    def due(self) -> bool:
        """Whether the offset is to be measured (again) before the time is read."""
        reading = self._reading
        return reading is None or time.monotonic() - reading[2] >= self.refresh

    @property
    def error(self) -> timedelta | None:
        """How far the offset may be from the truth (half the measurement's round trip)."""
        return None if self._reading is None else timedelta(milliseconds=self._reading[1])

    @property
    def offset(self) -> timedelta:
        """The server's time less the local clock's (zero until measured)."""
        return timedelta(0) if self._reading is None else self._reading[0]

    def now(self) -> datetime:
        reading = self._reading
        now = self.base.now()
        return now if reading is None else now + reading[0]

    def now_on(self, conn: sa.Connection) -> datetime:
        """``now()``, measuring the offset on ``conn`` first when it is due."""
        if self.due:
            self.measure(conn)
        return self.now()

    def measure(self, conn: sa.Connection) -> None:
        """Measure the offset to the server's clock on ``conn``."""
        before = to_ms(self.base.now(), "clock.now()")
        server = int(conn.execute(self._statement).scalar_one())
        after = to_ms(self.base.now(), "clock.now()")
        half = max(0, after - before) / 2
        self._reading = (timedelta(milliseconds=server - (before + half)), half,
                         time.monotonic())


_CLOCKS: weakref.WeakKeyDictionary[sa.Engine, DatabaseClock] = weakref.WeakKeyDictionary()
_CLOCKS_LOCK = threading.Lock()


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
