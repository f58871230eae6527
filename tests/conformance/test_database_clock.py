"""One clock for everybody: the database server's. Clients whose own clocks are two minutes
ahead or behind agree with the others on when a message is due and when a lock expires.

A skewed client is a queue whose ``DatabaseClock`` corrects a local clock set two minutes off;
the others use the default clock, which corrects the machine's own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqldelay import DatabaseClock, Message

S = timedelta(seconds=1)
SKEW = timedelta(minutes=2)


class SkewedClock:
    """The machine's clock, ``skew`` off."""

    def __init__(self, skew: timedelta) -> None:
        self.skew = skew

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skew


def skewed(engine, skew: timedelta) -> DatabaseClock:
    # the clock reads the server's time through the dialect of ``engine``: the blocking
    # engine of the database serves the asyncio front's queues too
    return DatabaseClock(engine, base=SkewedClock(skew))


def test_a_client_whose_clock_is_ahead_gets_no_message_before_it_is_due(make_queue, engine):
    producer = make_queue(clock=None, acquire_timeout=60 * S)
    ahead = make_queue(producer.name, clock=skewed(engine, SKEW), acquire_timeout=60 * S)
    now = producer.now()
    producer.offer_many([Message("later", 1, now + 90 * S), Message("due", 2, now - S)])
    got = ahead.poll()
    assert got is not None and got.key == "due"
    assert ahead.poll() is None  # "later" is due in 90 s, whatever this client's clock says
    assert ahead.ack(got)


def test_a_client_whose_clock_is_ahead_cannot_take_a_live_lock(make_queue, engine):
    holder = make_queue(clock=None, acquire_timeout=60 * S)
    ahead = make_queue(holder.name, clock=skewed(engine, SKEW), acquire_timeout=60 * S)
    holder.offer("m", 1)
    held = holder.poll()
    assert held is not None
    assert ahead.poll() is None
    assert holder.ack(held)  # the holder's handler ran alone, and its ack counts


def test_a_client_whose_clock_is_behind_takes_locks_the_others_respect(make_queue, engine):
    behind = make_queue(clock=skewed(engine, -SKEW), acquire_timeout=60 * S)
    other = make_queue(behind.name, clock=None, acquire_timeout=60 * S)
    behind.offer("m", 1)  # due now: the server's now, not two minutes ago
    held = behind.poll()
    assert held is not None
    assert abs(held.locked_until - (other.now() + 60 * S)) < 5 * S
    assert other.poll() is None
    assert behind.ack(held)


def test_the_clock_corrects_a_skewed_local_clock_by_the_servers_time(engine):
    clock = skewed(engine, SKEW)
    assert clock.due and clock.offset == timedelta(0)
    with engine.connect() as conn:
        clock.now_on(conn)
    assert not clock.due
    # the servers run on this machine, whose clock is the truth the skew was added to
    assert abs(clock.offset + SKEW) <= clock.error + 2 * S
    assert abs(clock.now() - datetime.now(UTC)) <= clock.error + 2 * S


def test_cron_ticks_follow_the_database_clock(make_queue, engine, front):
    q = make_queue(clock=skewed(engine, -SKEW))
    other = make_queue(q.name, clock=None)
    cron = front.cron(q)
    try:
        cron.install_periodic("beat", timedelta(minutes=1))
        # the ticks are after the server's now: none of them is due yet (two minutes behind,
        # the installer's own clock would have stored ticks already past)
        assert other.poll() is None
        assert q.stats().due == 0
    finally:
        cron.close()
