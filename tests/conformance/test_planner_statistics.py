"""A new PostgreSQL queue table gets its planner statistics from the queue that fills it.

Without statistics PostgreSQL plans a queue's reads for a handful of messages, which for some
of them means reading every due message and sorting them (the plain claim did so at every
claim while one claim index held every message: a cost that grew with the backlog until
autovacuum first analyzed the table, never where autovacuum is off). A queue object that has
created ``statistics_after`` messages makes sure the table has statistics, once. The other
databases' claims do not rest on statistics a queue could gather (``statistics_after`` is
None there).

Where statistics would lead the planner astray whatever the queue does, the claim's
statements are written so that they cannot: the grouped claim's walk, planned under the
server's own settings, reads the claim index in order with or without statistics, and hashes
the busy groups it reads once, however many the statistics count.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import Message, OfferOutcome, create_schema, drop_schema
from sqldelay.dialects.flow import walk_length
from sqldelay.dialects.postgresql import _WALK_SETTINGS as WALK_SETTINGS
from tools.plans import sorted_reads

from ..conftest import unique_name


@pytest.fixture
def new_table(engine):
    """A queue table of its own, just made: no statistics yet."""
    if engine.dialect.name != "postgresql":
        pytest.skip(f"{engine.dialect.name}'s claim plan does not rest on gathered statistics")
    name = unique_name("sqd_stats")
    create_schema(engine, table_name=name)
    yield name
    drop_schema(engine, table_name=name)


def _due(prefix: str, count: int, clock) -> list[Message]:
    at = clock.now() - timedelta(seconds=1)
    return [Message(f"{prefix}{i}", i, at) for i in range(count)]


def _rows_known(engine, table: str) -> float:
    """The table's row count as the planner's statistics give it (-1, or 0 before PostgreSQL 14:
    never gathered)."""
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT reltuples FROM pg_class WHERE relname = :t"),
                            {"t": table}).scalar()


def _claim_plan(engine, queue) -> str:
    """PostgreSQL's plan for the queue's claim of 100 (the plain claim, guard included)."""
    dao, now = queue.dao, queue.now_ms()
    compiled = dao._claim_statement(("guard",), False).compile(dialect=engine.dialect)
    params = {**compiled.params, **dao.claim_values(queue.pkind, now, 100, "x", now, None)}
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + compiled.string, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_queue_gathers_statistics_once_it_has_filled_a_new_table(new_table, engine,
                                                                      front, clock):
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock)
    threshold = queue.dao.statistics_after
    queue.offer_many(_due("a", threshold - 10_000, clock))
    assert _rows_known(engine, new_table) <= 0  # not yet
    queue.offer_many(_due("b", 10_000, clock))
    assert _rows_known(engine, new_table) == threshold
    # the claim walks its index in claim order and stops at what it takes (its reads merged
    # are sorted, no more than it takes)
    plan = _claim_plan(engine, queue)
    assert f"Index Scan using {queue.dao.claim_index} on {new_table} " in plan
    assert queue.dao.claim_index not in sorted_reads(plan, new_table)
    assert "Seq Scan" not in plan
    assert len(queue.poll_many(100)) == 100


def test_an_offer_stands_when_the_statistics_cannot_be_gathered(new_table, engine, front,
                                                               clock, monkeypatch, caplog):
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock)
    monkeypatch.setattr(queue.dao, "statistics_after", 50)
    tries = []

    def refused(conn):
        tries.append(conn)
        raise sa.exc.ProgrammingError("ANALYZE", None, RuntimeError("permission denied"))

    monkeypatch.setattr(queue.dao, "gather_statistics", refused)
    with caplog.at_level(logging.WARNING, logger="sqldelay"):
        outcomes = queue.offer_many(_due("a", 60, clock))
    assert outcomes == [OfferOutcome.CREATED] * 60
    assert queue.stats().due == 60
    assert len(tries) == 1
    assert any("could not gather the planner statistics" in r.getMessage()
               for r in caplog.records)
    queue.offer_many(_due("b", 40, clock))  # not yet as many again: no new attempt
    assert len(tries) == 1
    queue.offer_many(_due("c", 10, clock))
    assert len(tries) == 2


@pytest.mark.parametrize("statistics", ["none", "of a tenth", "of a fiftieth, in flight"])
def test_the_grouped_walk_reads_the_claim_index_in_order_before_any_planner_setting(
        new_table, engine, front, clock, monkeypatch, statistics):
    # the walk sets the claim's planner settings for the statements after it, so it is
    # planned under the server's own: on a table without statistics, or with statistics
    # taken when it held a tenth of what it holds, it must still read the claim index in
    # claim order and stop at what it walks, not read every due message and sort them; and
    # with statistics taken when nine tenths of a fiftieth of it were in flight, its read of
    # the busy groups must not read the table whole to find the few in flight now
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock)
    monkeypatch.setattr(queue.dao, "statistics_after", 10**9)
    at = clock.now() - timedelta(seconds=1)
    messages = [Message(f"m{i}", i, at, group=f"g{i % 1_000}") for i in range(20_000)]
    if statistics != "none":
        first = 400 if "flight" in statistics else 2_000
        queue.offer_many(messages[:first])
        if "flight" in statistics:
            assert len(queue.poll_many(360)) == 360
        with engine.connect() as conn:
            conn.execute(sa.text(f"ANALYZE {new_table}"))
            conn.commit()
        messages = messages[first:]
    queue.offer_many(messages)
    held = queue.poll_many(100)
    dao = queue.dao
    compiled = dao._win_groups[False, True].compile(dialect=engine.dialect)
    params = {**compiled.params, "b_kind": queue.pkind, "b_now": queue.now_ms(),
              "limit": 100, "walk": walk_length(100), "space": "plan"}
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + compiled.string, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()
    # the claim order's two indexes of waiting messages, of no group and of a group
    for index in (dao.claim_index, f"{new_table}_kind_ready_grouped_ix"):
        assert f"Index Scan using {index} on {new_table} " in plan
        assert index not in sorted_reads(plan, new_table)
    assert "Seq Scan" not in plan and "JIT" not in plan
    # (the messages whose lock expired may come from a bitmap of the in-flight index: its
    # entries are the messages in flight, not the table)
    bitmaps = set(re.findall(rf"Bitmap Index Scan on ({new_table}_\w+)", plan))
    assert bitmaps <= {f"{new_table}_kind_flight_ix"}
    got = queue.poll_many(100)
    assert len(got) == 100 and not {e.group for e in got} & {e.group for e in held}


def test_the_heads_claim_reads_each_head_by_its_id_whatever_the_statistics_say(
        new_table, engine, front, clock, monkeypatch):
    # statistics taken while the table held messages of no group alone: the planner took the
    # heads' group condition, on the row it locks, for a probe of the group index that finds
    # next to nothing, and read every message of each group to find its head's row (336 ms a
    # claim of 100 groups of 100 under pgbench, 8.7 ms read by id)
    plain = front.queue(unique_name("p"), table_name=new_table, clock=clock)
    plain.offer_many(_due("p", 5_000, clock))
    with engine.connect() as conn:
        conn.execute(sa.text(f"ANALYZE {new_table}"))
        conn.commit()
    plain.clear()
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock)
    monkeypatch.setattr(queue.dao, "statistics_after", 10**9)
    at = clock.now() - timedelta(seconds=1)
    queue.offer_many([Message(f"m{i}", i, at, group=f"g{i % 100}") for i in range(5_000)])
    dao = queue.dao
    compiled = dao._heads_claim(False).compile(dialect=engine.dialect)
    params = {**compiled.params,
              **dao.claim_values(queue.pkind, queue.now_ms(), 100, "plan", queue.now_ms(), None),
              "loose": 100, "group_names": json.dumps([f"g{i}" for i in range(100)])}
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        for name, value in WALK_SETTINGS.items():  # as the walk leaves them for this claim
            cursor.execute(f"SET LOCAL {name} = {value}")
        cursor.execute("EXPLAIN " + compiled.string, {k: params[k] for k in compiled.params})
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()
    assert f"Index Scan using {new_table}_pkey on {new_table} h " in plan, plan
    assert len(queue.poll_many(100)) == 100


def test_the_grouped_walk_hashes_the_busy_groups_whatever_the_statistics_count(
        new_table, engine, front, clock):
    # statistics gathered with 1,000 groups of long names in flight: in the server's work_mem
    # (here 64 kB) the planner would not hash so many names, and would read them all again
    # for each message the walk passes; it hashes their 64-bit hashes
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock,
                        acquire_timeout=timedelta(minutes=5))
    at = clock.now() - timedelta(seconds=1)
    queue.offer_many([Message(f"m{i}", i, at, group=f"{i:04}".ljust(200, "g"))
                      for i in range(1_100)])
    busy = {e.key for _ in range(2) for e in queue.poll_many(500)}
    assert len(busy) == 1_000
    with engine.connect() as conn:
        conn.execute(sa.text(f"ANALYZE {new_table}"))
        conn.commit()
    dao = queue.dao
    compiled = dao._win_groups[False, True].compile(dialect=engine.dialect)
    # planned for a claim of 1,000, whose walk reads up to 4,016 names (a claim's statement is
    # planned with its values until the driver prepares it)
    params = {**compiled.params, "b_kind": queue.pkind, "b_now": queue.now_ms(),
              "limit": 1_000, "walk": walk_length(1_000), "space": "plan"}
    with engine.connect() as conn:
        conn.execute(sa.text("SET work_mem = '64kB'"))
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + compiled.string, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()
    assert "NOT (hashed SubPlan" in plan
    # (the read of the busy groups may read the table whole: nine tenths of it are in flight)
    assert f"Index Scan using {dao.claim_index} on {new_table} " in plan
    got = {e.key for e in queue.poll_many(10)}
    assert len(got) == 10 and not got & busy


@pytest.mark.parametrize("statistics", ["none", "gathered"])
def test_an_ack_of_many_claim_batches_reaches_its_rows_through_the_primary_key(
        new_table, engine, front, clock, monkeypatch, statistics):
    # an ack of several claim batches (a worker's acks that piled up behind a slow statement,
    # a consumer's ack_many of what it took in many polls) locks all its rows, then deletes
    # each batch's: both find them by a list of ids. With the list's array cast in the
    # condition, a plan that read the table whole parsed the array again for every row, and
    # the planner chose that read for a few hundred ids: an ack_many of 3,000 messages of 30
    # claims took 2.1 s at 20,000 messages
    queue = front.queue(unique_name("q"), table_name=new_table, clock=clock)
    monkeypatch.setattr(queue.dao, "statistics_after", 10**9)
    queue.offer_many(_due("m", 20_000, clock))
    if statistics == "gathered":
        with engine.connect() as conn:
            conn.execute(sa.text(f"ANALYZE {new_table}"))
            conn.commit()
    held = [e for _ in range(30) for e in queue.poll_many(100)]
    dao, ids = queue.dao, [e.row_id for e in held]
    listed = "{" + ",".join(map(str, ids)) + "}"  # the ids as ``_IdList`` sends them
    for stmt, params in ((dao._acked_in_key_order, {"ids": listed}),
                         (dao.acks_of(len(ids)), {"ids": listed, "lock": held[0].lock})):
        compiled = stmt.compile(dialect=engine.dialect)
        with engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()
            cursor.execute("EXPLAIN " + compiled.string, {**compiled.params, **params})
            plan = "\n".join(row[0] for row in cursor.fetchall())
            conn.rollback()
        assert re.search(rf"Index Scan (using|on) {new_table}_pkey", plan), plan
        assert "Seq Scan" not in plan, plan
    assert queue.ack_many(held) == 3_000
    assert queue.stats().in_flight == 0
