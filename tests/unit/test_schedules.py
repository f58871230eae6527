"""The pure parts of the cron service: tick generation for cron, periodic and daily schedules
(including daylight-saving days), config hashes, tick keys, and the prefix delete per dialect.

America/New_York (2030): clocks jump 02:00 -> 03:00 EDT on 10 March and fall back
02:00 EDT -> 01:00 EST on 3 November.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from sqldelay import FakeClock, InvalidArgumentError
from sqldelay.cron_base import hash_config, tick_key
from sqldelay.dialects import REGISTRY
from sqldelay.schedules import CronSchedule, PeriodicSchedule, daily
from sqldelay.schema import queue_table

from .dao_recorder import parses

# dialect name -> (a URL whose dialect compiles the statement, sqlglot grammar)
GRAMMARS = {
    "postgresql": ("postgresql+psycopg://", "postgres"),
    "mysql": ("mysql+pymysql://", "mysql"),
    "mariadb": ("mariadb+pymysql://", "mysql"),
    "sqlite": ("sqlite://", "sqlite"),
    "mssql": ("mssql+pyodbc://", "tsql"),
    "oracle": ("oracle+oracledb://", "oracle"),
}


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fired_while_clock_runs(schedule, start: datetime, end: datetime,
                           step: timedelta) -> list[datetime]:
    """What an installer asking "what is next?" as a fake clock advances would deliver."""
    clock = FakeClock(start)
    fired: list[datetime] = []
    while clock.now() < end:
        nxt = schedule.ticks(clock.now(), 1)[0]
        if nxt < end and (not fired or nxt != fired[-1]):
            fired.append(nxt)
        clock.advance(step)
    return fired


def test_cron_ticks_in_utc_are_strictly_after_the_given_instant():
    s = CronSchedule.parse("0 2 * * *")
    assert s.ticks(utc(2030, 1, 1), 3) == [utc(2030, 1, 1, 2), utc(2030, 1, 2, 2),
                                            utc(2030, 1, 3, 2)]
    assert s.ticks(utc(2030, 1, 1, 2), 1) == [utc(2030, 1, 2, 2)]


def test_cron_aliases():
    assert CronSchedule.parse("@hourly").ticks(utc(2030, 1, 1, 0, 5), 2) == [
        utc(2030, 1, 1, 1), utc(2030, 1, 1, 2)]
    assert CronSchedule.parse("@daily", "Europe/Bucharest").ticks(utc(2030, 1, 1), 1) == [
        utc(2030, 1, 1, 22)]


def test_cron_ticks_follow_the_zone_offset():
    s = CronSchedule.parse("0 2 * * *", "Europe/Bucharest")
    # 02:00 EET (UTC+2) in winter, 02:00 EEST (UTC+3) in summer
    assert s.ticks(utc(2029, 12, 31, 12), 1) == [utc(2030, 1, 1, 0)]
    assert s.ticks(utc(2030, 7, 1), 1) == [utc(2030, 7, 1, 23)]


def test_a_skipped_wall_time_fires_once_when_the_clocks_jump():
    s = CronSchedule.parse("30 2 * * *", "America/New_York")
    assert s.ticks(utc(2030, 3, 9), 3) == [
        utc(2030, 3, 9, 7, 30),  # 02:30 EST
        utc(2030, 3, 10, 7, 0),  # no 02:30 that day: 03:00 EDT, the moment of the jump
        utc(2030, 3, 11, 6, 30),  # 02:30 EDT
    ]


def test_a_repeated_wall_time_fires_once_at_its_first_occurrence():
    s = CronSchedule.parse("30 1 * * *", "America/New_York")
    assert s.ticks(utc(2030, 11, 2), 3) == [
        utc(2030, 11, 2, 5, 30),  # 01:30 EDT
        utc(2030, 11, 3, 5, 30),  # 01:30 EDT; not again at 01:30 EST an hour later
        utc(2030, 11, 4, 6, 30),  # 01:30 EST
    ]


def test_a_fake_clock_sees_each_dst_tick_once_whenever_it_asks():
    for expr, day in [("30 2 * * *", utc(2030, 3, 10)), ("30 1 * * *", utc(2030, 11, 3))]:
        s = CronSchedule.parse(expr, "America/New_York")
        fired = fired_while_clock_runs(s, day, day + timedelta(days=1), timedelta(minutes=7))
        assert fired == s.ticks(day, 1)


def test_half_hourly_across_spring_forward_collapses_the_skipped_times():
    s = CronSchedule.parse("*/30 * * * *", "America/New_York")
    # 01:30 EST, then 02:00 and 02:30 (skipped) and 03:00 EDT are one instant, then 03:30 EDT
    assert s.ticks(utc(2030, 3, 10, 6, 15), 3) == [
        utc(2030, 3, 10, 6, 30), utc(2030, 3, 10, 7, 0), utc(2030, 3, 10, 7, 30)]


def test_half_hourly_across_fall_back_skips_the_repeated_hour():
    s = CronSchedule.parse("*/30 * * * *", "America/New_York")
    start, end = utc(2030, 11, 3, 4, 45), utc(2030, 11, 3, 7, 45)
    expected = [
        utc(2030, 11, 3, 5, 0), utc(2030, 11, 3, 5, 30),  # 01:00, 01:30 EDT
        utc(2030, 11, 3, 7, 0), utc(2030, 11, 3, 7, 30),  # 02:00, 02:30 EST
    ]
    assert s.ticks(start, 4) == expected
    # an installer running during the repeated hour (01:15 EST) installs nothing in it
    assert s.ticks(utc(2030, 11, 3, 6, 15), 1) == [utc(2030, 11, 3, 7, 0)]
    assert fired_while_clock_runs(s, start, end, timedelta(minutes=4)) == expected


def test_periodic_ticks_are_aligned_to_period_boundaries():
    s = PeriodicSchedule.of(timedelta(minutes=15))
    assert s.ticks(utc(2030, 1, 1, 0, 7, 13), 3) == [
        utc(2030, 1, 1, 0, 15), utc(2030, 1, 1, 0, 30), utc(2030, 1, 1, 0, 45)]
    assert s.ticks(utc(2030, 1, 1, 0, 15), 1) == [utc(2030, 1, 1, 0, 30)]
    # a period that does not divide an hour is aligned to the epoch: every process agrees
    seven = PeriodicSchedule.of(timedelta(minutes=7))
    first = seven.ticks(utc(2030, 1, 1, 0, 0, 1), 1)[0]
    assert int(first.timestamp()) % 420 == 0
    assert seven.ticks(first - timedelta(seconds=1), 2) == [first, first + timedelta(minutes=7)]


def test_periodic_ticks_ignore_dst():
    s = PeriodicSchedule.of(timedelta(hours=1))
    assert s.ticks(utc(2030, 11, 3, 4, 30), 4) == [utc(2030, 11, 3, h) for h in (5, 6, 7, 8)]


def test_daily_ticks_at_given_hours_in_the_zone():
    s = daily([20, 8], "Europe/Bucharest")
    assert s.ticks(utc(2030, 1, 1), 3) == [
        utc(2030, 1, 1, 6), utc(2030, 1, 1, 18), utc(2030, 1, 2, 6)]
    assert daily([8], "UTC").ticks(utc(2030, 1, 1, 9), 1) == [utc(2030, 1, 2, 8)]


def test_daily_on_the_spring_forward_day_fires_at_the_jump():
    s = daily([2, 12], "America/New_York")
    assert s.ticks(utc(2030, 3, 10), 2) == [utc(2030, 3, 10, 7), utc(2030, 3, 10, 16)]


@pytest.mark.parametrize("expr", [
    "61 * * * *", "* * *", "0 0 * * * 5", "@reboot", "0 0 30 2 *", "H * * * *", "", "nonsense",
])
def test_invalid_cron_expressions_are_rejected(expr):
    with pytest.raises(InvalidArgumentError, match="cron expression"):
        CronSchedule.parse(expr)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "../etc/passwd", 3])
def test_unknown_time_zones_are_rejected(tz):
    with pytest.raises(InvalidArgumentError, match="zone|tz"):
        CronSchedule.parse("0 2 * * *", tz)


@pytest.mark.parametrize("hours", [[], [24], [-1], [True], ["8"], 8])
def test_invalid_daily_hours_are_rejected(hours):
    with pytest.raises(InvalidArgumentError, match="at_hours"):
        daily(hours)


@pytest.mark.parametrize("every", [timedelta(milliseconds=999), timedelta(0), 60])
def test_periods_under_a_second_are_rejected(every):
    with pytest.raises(InvalidArgumentError, match="every"):
        PeriodicSchedule.of(every)


def test_config_hash_is_stable_and_tells_configurations_apart():
    nightly = CronSchedule.parse("0  2 * * *", "Europe/Bucharest")
    # a fixed value: the same in every process and Python run (no hash randomization)
    assert hash_config(nightly, b'{"kind":"report"}') == "ae476098ae1d86cc"
    assert hash_config(CronSchedule.parse("0 2 * * *", "Europe/Bucharest"),
                       b'{"kind":"report"}') == "ae476098ae1d86cc"
    others = {
        hash_config(nightly, b'{"kind":"other"}'),
        hash_config(nightly, None),
        hash_config(nightly, b'{"kind":"report"}', "v2"),
        hash_config(CronSchedule.parse("0 2 * * *", "UTC"), b'{"kind":"report"}'),
        hash_config(PeriodicSchedule.of(timedelta(hours=24)), b'{"kind":"report"}'),
    }
    assert len(others) == 5 and "ae476098ae1d86cc" not in others


def test_tick_keys_name_the_utc_instant_and_sort_in_time_order():
    at = datetime(2030, 3, 10, 3, 0, 0, 250000, tzinfo=CronSchedule.parse("@daily",
                                                                          "America/New_York").tz)
    assert tick_key("sync", "abc", at) == "sync/abc/2030-03-10T07:00:00.250Z"
    keys = [tick_key("p", "h", utc(2030, 1, 1) + timedelta(seconds=s)) for s in (59, 61, 3600)]
    assert keys == sorted(keys)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_prefix_delete_escapes_wildcards_and_compiles_on_every_dialect(name):
    url, grammar = GRAMMARS[name]
    dialect = sa.make_url(url).get_dialect()(paramstyle="named")
    dao = REGISTRY[name](queue_table(sa.MetaData()))
    stmt = sa.delete(dao.table).where(*dao.key_prefix_deletable(
        "q|json", "5%_[x]!/", 1000, keep_prefix="5%_[x]!/h/", only_future=True))
    compiled = stmt.compile(dialect=dialect)
    sql = " ".join(str(compiled).split())
    bracket = "![" if name == "mssql" else "["  # a character class only on SQL Server
    patterns = [v for v in compiled.params.values() if isinstance(v, str) and v.endswith("%")]
    assert patterns == [f"5!%!_{bracket}x]!!/%", f"5!%!_{bracket}x]!!/h/%"]
    assert sql.count("ESCAPE '!'") == 2
    assert "lock_uuid IS NOT NULL" in sql  # in-flight messages are excluded
    assert parses(sql, grammar), sql
