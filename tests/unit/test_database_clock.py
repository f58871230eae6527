"""The database clock's arithmetic, against a server whose answer the test chooses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DatabaseClock, FakeClock, InvalidArgumentError
from sqldelay.clock import to_ms


class ServerAhead:
    """A connection to a server whose clock reads ``ahead`` past ``base``'s, and whose
    answer takes ``trip`` of ``base``'s time to come back."""

    def __init__(self, base: FakeClock, ahead: timedelta, trip: timedelta) -> None:
        self.base, self.ahead, self.trip = base, ahead, trip
        self.statements = []

    def execute(self, statement):
        self.statements.append(statement)
        self.base.advance(self.trip / 2)
        self.server = to_ms(self.base.now() + self.ahead)  # read halfway through the trip
        self.base.advance(self.trip / 2)
        return self

    def scalar_one(self):
        return self.server


def test_the_offset_is_the_servers_reading_less_the_local_midpoint():
    base = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    clock = DatabaseClock(sa.create_engine("sqlite://"), base=base)
    conn = ServerAhead(base, timedelta(minutes=2), timedelta(milliseconds=40))
    assert clock.due and clock.now() == base.now()  # not measured: the local clock
    now = clock.now_on(conn)
    assert len(conn.statements) == 1
    assert clock.offset == timedelta(minutes=2)
    assert clock.error == timedelta(milliseconds=20)
    assert now == base.now() + timedelta(minutes=2)
    clock.now_on(conn)  # measured within the refresh period: no second round trip
    assert len(conn.statements) == 1 and not clock.due


def test_one_clock_per_engine_whichever_front():
    engine = sa.create_engine("sqlite://")
    assert DatabaseClock.of(engine) is DatabaseClock.of(engine)
    assert DatabaseClock.of(engine) is not DatabaseClock.of(sa.create_engine("sqlite://"))


def test_refresh_must_be_positive():
    with pytest.raises(InvalidArgumentError, match="refresh"):
        DatabaseClock(sa.create_engine("sqlite://"), refresh=timedelta(0))
