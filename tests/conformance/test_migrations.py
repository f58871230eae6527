"""The migrations (the package's Alembic scripts, as the ``alembic`` command and create_schema
run them) build what the code declares, on every backend; upgrades keep every message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import DeadLetters, DelayedQueue, InvalidArgumentError, create_schema, drop_schema
from sqldelay.migrate import current
from sqldelay.schema import SCHEMA_VERSION, schema_tables

from ..conftest import unique_name

ROOT = Path(__file__).resolve().parents[2]


def alembic(url: str, table: str, *args: str) -> None:
    env = {**os.environ, "SQLDELAY_URL": url}
    subprocess.run([sys.executable, "-m", "alembic", "-x", f"table={table}", *args],
                   cwd=ROOT, env=env, check=True, capture_output=True)


def shape(url: str, prefix: str) -> dict:
    """Every table named ``prefix…`` with its columns and indexes, the prefix taken out.

    A fresh connection each time: SQLite's schema PRAGMAs answer from the connection's cached
    schema, which does not see tables another process created since."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    inspector = sa.inspect(engine)
    tables = {}
    for name in inspector.get_table_names():
        if not name.startswith(prefix) or name.endswith("_alembic"):
            continue
        columns = [(c["name"], str(c["type"]), c["nullable"])
                   for c in inspector.get_columns(name)]
        indexes = sorted((ix["name"].replace(prefix, "", 1), tuple(ix["column_names"]),
                          bool(ix["unique"])) for ix in inspector.get_indexes(name))
        tables[name.replace(prefix, "", 1)] = (columns, indexes)
    engine.dispose()
    return tables


def _drop_version_table(engine, name: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}_alembic"))


@pytest.mark.parametrize("history", [True, False], ids=["with-history", "without-history"])
def test_the_migrations_build_what_the_code_declares(backend_url, engine, history):
    declared, migrated = unique_name("sqdc"), unique_name("sqdm")
    metadata = sa.MetaData()
    schema_tables(metadata, declared, history=history)
    metadata.create_all(engine)
    try:
        alembic(backend_url, migrated, "-x", f"history={str(history).lower()}", "upgrade", "head")
        expected = shape(backend_url, declared)
        assert {"", "_dead", "_groups", "_settings", "_results"} \
            | ({"_history"} if history else set()) \
            == set(expected)
        assert shape(backend_url, migrated) == expected
        alembic(backend_url, migrated, "downgrade", "base")
        assert shape(backend_url, migrated) == {}
    finally:
        metadata.drop_all(engine)
        _drop_version_table(engine, migrated)


def test_history_can_be_added_to_a_schema_made_without_it(engine):
    name = unique_name("sqdh")
    try:
        create_schema(engine, table_name=name)
        queue = DelayedQueue(engine, "orders", table_name=name)
        queue.offer("before", 1)
        assert "_history" not in shape(engine.url.render_as_string(hide_password=False), name)
        create_schema(engine, table_name=name, history=True)
        recorded = DelayedQueue(engine, "orders", table_name=name, history=True)
        assert recorded.get("before").payload == 1  # kept
        recorded.offer("after", 2)
        assert [e.kind.value for e in recorded.history("after")] == ["offered"]
        assert recorded.history("before") == []  # offered before history was kept
    finally:
        drop_schema(engine, table_name=name)


def test_migration_takes_the_tuning_preset_and_refuses_an_unknown_one(backend_url, engine):
    name = unique_name("sqdt")
    with pytest.raises(subprocess.CalledProcessError) as refused:
        alembic(backend_url, name, "-x", "tuning=bogus", "upgrade", "head")
    assert b"tuning must be None or one of high-churn" in refused.value.stderr
    assert shape(backend_url, name) == {}  # refused before anything was created
    try:
        alembic(backend_url, name, "-x", "tuning=high-churn", "upgrade", "head")
        assert "" in shape(backend_url, name)
        if engine.dialect.name == "postgresql":  # the one database the preset changes
            with engine.connect() as conn:
                options = conn.execute(sa.text(
                    "SELECT reloptions FROM pg_class WHERE relname = :n"), {"n": name}).scalar()
            assert "autovacuum_vacuum_cost_delay=2" in options
    finally:
        alembic(backend_url, name, "downgrade", "base")
        _drop_version_table(engine, name)


@pytest.mark.parametrize("recorded", [True, False], ids=["migrated", "made-by-create_schema"])
def test_an_upgrade_from_the_0002_schema_keeps_every_message_and_its_state(backend_url, engine,
                                                                          recorded):
    """Messages due, scheduled and in flight, and a dead letter, written under the 0002
    schema (by ``alembic upgrade 0002``, or by an older create_schema that recorded no
    version), are all there after create_schema brings the tables to this version."""
    name = unique_name("sqdu")
    alembic(backend_url, name, "upgrade", "0002")
    if not recorded:
        _drop_version_table(engine, name)
    try:
        kind, now = "orders|json", 1_000_000
        with engine.begin() as conn:
            for key, at, lock in (("due", now - 5, None), ("later", now + 60_000, None),
                                  ("held", now + 30_000, "L-1")):
                conn.execute(sa.text(
                    f"INSERT INTO {name} (pkind, pkey, payload, scheduled_at, "
                    "scheduled_at_initially, lock_uuid, created_at, deliveries) "
                    "VALUES (:k, :key, :p, :at, :at, :lock, :c, :d)"),
                    {"k": kind, "key": key, "p": b'{"v":1}', "at": at, "lock": lock,
                     "c": now - 100, "d": 1 if lock else 0})
            conn.execute(sa.text(
                f"INSERT INTO {name}_dead (pkind, pkey, payload, scheduled_at_initially, "
                "created_at, attempts, last_error, failed_at) "
                "VALUES (:k, 'gave-up', :p, :c, :c, 3, 'boom', :c)"), {"k": kind, "p": b'"x"',
                                                                       "c": now})
        create_schema(engine, table_name=name)
        with engine.connect() as conn:
            assert current(conn, name) == SCHEMA_VERSION
        from sqldelay import FakeClock
        from sqldelay.clock import from_ms

        queue = DelayedQueue(engine, "orders", table_name=name, clock=FakeClock(from_ms(now)))
        stats = queue.stats()
        assert (stats.due, stats.scheduled, stats.in_flight) == (1, 1, 1)
        held = queue.get("held")
        assert held.in_flight and held.deliveries == 1 and held.priority == 0
        [env] = queue.poll_many(10)  # only the due one: the held one keeps its lock
        assert (env.key, env.payload, env.priority, env.group, env.trace_context) == \
            ("due", {"v": 1}, 0, None, None)
        [dead] = DeadLetters(engine, table_name=name).list()
        assert (dead.key, dead.attempts, dead.last_error, dead.priority) == \
            ("gave-up", 3, "boom", 0)
    finally:
        drop_schema(engine, table_name=name)


def test_create_schema_refuses_an_applications_table_of_its_name_and_writes_nothing(engine):
    # from code as from the command line: a table of the schema's names that is not
    # sqldelay's is refused before the version table, or any other, is made
    name = unique_name("sqdapp")
    app = sa.MetaData()
    sa.Table(name, app, sa.Column("id", sa.Integer, primary_key=True))
    app.create_all(engine)
    try:
        with pytest.raises(InvalidArgumentError, match="is not a sqldelay queue table"):
            create_schema(engine, table_name=name, history=True)
        with engine.connect() as conn:
            made = set(sa.inspect(conn).get_table_names()) & {
                f"{name}{suffix}" for suffix in ("_alembic", "_dead", "_groups", "_settings",
                                                 "_history", "_results")}
        assert made == set()
    finally:
        app.drop_all(engine)


def test_a_table_name_of_forty_bytes_in_letters_beyond_ascii_makes_a_working_schema(engine):
    # PostgreSQL keeps 63 bytes of a name: a table name of 30 two-byte letters (60 bytes)
    # made index names that met each other, cut short, and a wake-up channel pg_notify
    # refused. A table name has 40 bytes at most, the longest here.
    base = unique_name("q")
    name = "é" * ((40 - len(base)) // 2) + base
    assert 38 <= len(name.encode()) <= 40
    try:
        create_schema(engine, table_name=name, history=True)
        queue = DelayedQueue(engine, "mail", table_name=name)
        with engine.connect() as conn:  # PostgreSQL: the offer's statement wakes workers
            queue.offer("k", 1, connection=conn)
            conn.commit()
        envelope = queue.poll()
        assert (envelope.key, envelope.payload) == ("k", 1)
        assert envelope.ack() and not queue.contains("k")
    finally:
        drop_schema(engine, table_name=name)


def test_create_schema_is_idempotent_and_records_the_version(engine):
    name = unique_name("sqdi")
    try:
        create_schema(engine, table_name=name)
        create_schema(engine, table_name=name)
        with engine.connect() as conn:
            assert current(conn, name) == SCHEMA_VERSION
    finally:
        drop_schema(engine, table_name=name)
    assert shape(str(engine.url.render_as_string(hide_password=False)), name) == {}


def _write_messages(conn, name: str, now: int,
                    rows: list[tuple[str, int, str | None, int, str | None, int | None]]
                    ) -> None:
    """Messages of queue "orders" written by hand, as an older schema version holds them:
    each row is (key, due time or lock expiry, lock, priority, group, the due time first
    asked for: None for the due time)."""
    for key, at, lock, priority, group, initially in rows:
        conn.execute(sa.text(
            f"INSERT INTO {name} (pkind, pkey, payload, scheduled_at, scheduled_at_initially, "
            "lock_uuid, created_at, deliveries, priority, group_key) "
            "VALUES ('orders|json', :key, :p, :at, :first, :lock, :c, :d, :r, :g)"),
            {"key": key, "p": b'{"v":1}', "at": at, "first": at if initially is None
             else initially, "lock": lock, "c": now - 100, "d": 1 if lock else 0,
             "r": priority, "g": group})


def _hold_group_x(conn, name: str, now: int) -> None:
    """Queue "orders" has groups, and its group "x" a row held by lock L-1 (the groups
    table, which PostgreSQL no longer reads since 0008)."""
    conn.execute(sa.text(f"INSERT INTO {name}_groups (pkind, group_key, claimed_until, "
                         "lock_uuid) VALUES ('orders|json', 'x', :until, 'L-1')"),
                 {"until": now + 30_000})
    conn.execute(sa.text(f"INSERT INTO {name}_settings (pkind, paused, has_groups) "
                         "VALUES ('orders|json', 0, 1)"))


def test_an_upgrade_from_the_0006_schema_claims_in_order_through_the_new_indexes(backend_url,
                                                                                  engine):
    """0007 splits the claim index by lock where partial indexes are kept (PostgreSQL):
    messages written under 0006, unlocked, locked with the lock expired and locked still, are
    claimed after the upgrade in priority order as before, the expired one among them."""
    name = unique_name("sqdu")
    alembic(backend_url, name, "upgrade", "0006")
    try:
        now = 1_000_000
        with engine.begin() as conn:
            _write_messages(conn, name, now, [("low", now - 50, None, 1, None, None),
                                              ("high", now - 5, None, 5, None, None),
                                              ("expired", now - 10, "L-1", 3, None, None),
                                              ("held", now + 30_000, "L-2", 9, None, None),
                                              ("later", now + 60_000, None, 7, None, None)])
        create_schema(engine, table_name=name)
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        split = {"_kind_loose_ix", "_kind_flight_ix"}  # the first split again by 0012
        whole = {"_kind_prio_ix", "_kind_lock_ix"}
        partial = engine.dialect.name == "postgresql"
        assert (split if partial else whole) <= indexes
        assert not indexes & (whole if partial else split)
        from sqldelay import FakeClock
        from sqldelay.clock import from_ms

        queue = DelayedQueue(engine, "orders", table_name=name, clock=FakeClock(from_ms(now)))
        stats = queue.stats()
        assert (stats.due, stats.scheduled, stats.in_flight) == (3, 1, 1)
        claimed = queue.poll_many(10)
        assert [(e.key, e.attempt) for e in claimed] == [("high", 1), ("expired", 2),
                                                         ("low", 1)]
        assert queue.stats().in_flight == 4
        assert all(queue.ack(e) for e in claimed)
        assert queue.poll_many(10) == []  # "held" keeps its lock, "later" is not due
    finally:
        drop_schema(engine, table_name=name)


def test_an_upgrade_from_the_0007_schema_keeps_a_group_held_by_its_message_in_flight(
        backend_url, engine):
    """0008 indexes each group's in-flight messages where partial indexes are kept
    (PostgreSQL), whose claims then read a group's state from its messages, not from the
    groups table: a group held under 0007 stays held after the upgrade until its message's lock
    expires, on every backend."""
    name = unique_name("sqdg")
    alembic(backend_url, name, "upgrade", "0007")
    try:
        now = 1_000_000
        with engine.begin() as conn:
            _write_messages(conn, name, now, [("x0", now + 30_000, "L-1", 0, "x", now - 20),
                                              ("x1", now - 10, None, 0, "x", None),
                                              ("y0", now - 5, None, 0, "y", None)])
            _hold_group_x(conn, name, now)
        create_schema(engine, table_name=name)
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        assert ("_kind_group_flight_ix" in indexes) == (engine.dialect.name == "postgresql")
        from sqldelay import FakeClock
        from sqldelay.clock import from_ms

        clock = FakeClock(from_ms(now))
        queue = DelayedQueue(engine, "orders", table_name=name, clock=clock)
        assert [e.key for e in queue.poll_many(10)] == ["y0"]  # x held by x0 in flight
        assert queue.poll_many(10) == []
        clock.advance(timedelta(seconds=31))  # x0's lock expires
        again = queue.poll_many(10)
        assert [(e.key, e.attempt) for e in again] == [("x0", 2)]  # first in its group again
        assert queue.ack_many(again) == 1
        assert [e.key for e in queue.poll_many(10)] == ["x1"]
    finally:
        drop_schema(engine, table_name=name)


def test_an_upgrade_from_the_0009_schema_indexes_the_dead_letters_by_key_and_keeps_them(
        backend_url, engine):
    """0010 indexes the dead letters by key; the dead letters written before are all there,
    found by key, and a downgrade takes the index away again."""
    name = unique_name("sqdk")
    alembic(backend_url, name, "upgrade", "0009")
    try:
        kind, now = "orders|json", 1_000_000
        with engine.begin() as conn:
            for key, failed in (("a", now), ("b", now + 1), ("a", now + 2)):
                conn.execute(sa.text(
                    f"INSERT INTO {name}_dead (pkind, pkey, payload, scheduled_at_initially, "
                    "created_at, attempts, last_error, failed_at, priority) "
                    "VALUES (:k, :key, :p, :c, :c, 3, 'boom', :f, 0)"),
                    {"k": kind, "key": key, "p": b'"x"', "c": now, "f": failed})
        assert "_dead_key_ix" not in {ix for ix, _, _ in shape(backend_url, name)["_dead"][1]}
        alembic(backend_url, name, "upgrade", "head")
        indexes = shape(backend_url, name)["_dead"][1]
        assert ("_dead_key_ix", ("pkind", "pkey", "failed_at", "id"), False) in indexes
        dead = DeadLetters(engine, table_name=name)
        assert [(d.key, d.failed_at) for d in dead.list(key="a")] == \
            [("a", d.failed_at) for d in dead.list() if d.key == "a"]
        assert len(dead.list(key="a")) == 2 and dead.count() == 3
        alembic(backend_url, name, "downgrade", "0009")
        assert "_dead_key_ix" not in {ix for ix, _, _ in shape(backend_url, name)["_dead"][1]}
        assert dead.count() == 3
    finally:
        drop_schema(engine, table_name=name)


def test_an_upgrade_from_the_0010_schema_keeps_groups_and_the_ungrouped_messages_in_flight(
        backend_url, engine):
    """0011 leaves the claimed ungrouped messages out of the group index where partial
    indexes are kept (PostgreSQL): messages written under 0010, grouped and not, waiting and
    claimed, are claimed after the upgrade as before, an ungrouped one whose holder vanished
    among them; a downgrade brings the whole index back."""
    name = unique_name("sqdx")
    alembic(backend_url, name, "upgrade", "0010")
    try:
        now = 1_000_000
        with engine.begin() as conn:
            _write_messages(conn, name, now, [
                ("x0", now + 30_000, "L-1", 0, "x", None),  # x in flight
                ("x1", now - 10, None, 0, "x", None), ("y0", now - 8, None, 0, "y", None),
                ("gone", now - 6, "L-2", 0, None, None),  # its lock expired
                ("held", now + 30_000, "L-3", 0, None, None),
                ("loose", now - 4, None, 0, None, None)])
            _hold_group_x(conn, name, now)
        create_schema(engine, table_name=name)
        partial = engine.dialect.name == "postgresql"
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        # the group index of 0011 made narrower again by 0012
        assert ({"_kind_groups_ix"} if partial else {"_kind_group_ix"}) <= indexes
        assert ("_kind_group_ix" in indexes) != partial
        from sqldelay import FakeClock
        from sqldelay.clock import from_ms

        queue = DelayedQueue(engine, "orders", table_name=name, clock=FakeClock(from_ms(now)))
        claimed = queue.poll_many(10)
        assert [(e.key, e.attempt) for e in claimed] == [("y0", 1), ("gone", 2), ("loose", 1)]
        assert queue.poll_many(10) == []  # x held by x0, "held" keeps its lock
        assert queue.ack_many(claimed) == 3
        alembic(backend_url, name, "downgrade", "0010")
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        assert "_kind_group_ix" in indexes and "_kind_groups_ix" not in indexes
        assert queue.stats().in_flight == 2  # x0 and "held", kept
    finally:
        drop_schema(engine, table_name=name)


def test_an_upgrade_from_the_0011_schema_keeps_every_message_claimable_in_its_order(
        backend_url, engine):
    """0012 splits the claims' index of waiting messages by group, and keeps only messages
    of a group in the group index, where partial indexes are kept (PostgreSQL): messages
    written under 0011, grouped and not, waiting and claimed, of several priorities, are
    claimed after the upgrade in the order they were before it; a downgrade brings the old
    indexes back and keeps the messages."""
    name = unique_name("sqdy")
    alembic(backend_url, name, "upgrade", "0011")
    try:
        now = 1_000_000
        with engine.begin() as conn:
            _write_messages(conn, name, now, [
                ("x0", now + 30_000, "L-1", 0, "x", None),  # x in flight
                ("x1", now - 10, None, 0, "x", None), ("y0", now - 8, None, 0, "y", None),
                ("y1", now - 7, None, 0, "y", None),
                ("gone", now - 6, "L-2", 0, None, None),  # its lock expired
                ("held", now + 30_000, "L-3", 0, None, None),
                ("urgent", now - 1, None, 5, None, None), ("z0", now - 2, None, 5, "z", None),
                ("loose", now - 4, None, 0, None, None)])
            _hold_group_x(conn, name, now)
        create_schema(engine, table_name=name)
        partial = engine.dialect.name == "postgresql"
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        split = {"_kind_loose_ix", "_kind_ready_grouped_ix", "_kind_groups_ix"}
        before = {"_kind_ready_ix", "_kind_grouped_ix"}
        assert (split <= indexes and not before & indexes) if partial else not split & indexes
        from sqldelay import FakeClock
        from sqldelay.clock import from_ms

        queue = DelayedQueue(engine, "orders", table_name=name, clock=FakeClock(from_ms(now)))
        claimed = queue.poll_many(10)
        assert [(e.key, e.attempt) for e in claimed] == [
            ("z0", 1), ("urgent", 1), ("y0", 1), ("gone", 2), ("loose", 1)]
        assert queue.poll_many(10) == []  # x held by x0, y by y0, "held" keeps its lock
        assert queue.ack_many(claimed) == 5
        assert [e.key for e in queue.poll_many(10)] == ["y1"]
        alembic(backend_url, name, "downgrade", "0011")
        indexes = {ix for ix, _, _ in shape(backend_url, name)[""][1]}
        assert not split & indexes and (before <= indexes or not partial)
        assert queue.stats().in_flight == 3  # x0, "held" and y1, kept
    finally:
        drop_schema(engine, table_name=name)


def _drop(engine, what: str, name: str) -> str:
    """Drop the queue table, the claims' index or the history table of queue table ``name``
    by hand, as an operator might; the name of what went."""
    if what == "claim index":
        dropped = DelayedQueue(engine, "orders", table_name=name).dao.claim_index
        on = f" ON {name}" if engine.dialect.name in ("mysql", "mariadb") else ""
        statement = f"DROP INDEX {dropped}{on}"
    else:
        dropped = name if what == "queue table" else f"{name}_history"
        statement = f"DROP TABLE {dropped}"
    with engine.begin() as conn:
        conn.execute(sa.text(statement))
    return dropped


def _schema_problems(engine, name: str) -> list[tuple[str, str]]:
    """What ``sqldelay verify`` finds wrong with the tables (server settings left out)."""
    from sqldelay.cli.verify import PROBLEM, findings

    with engine.connect() as conn:
        return [(what, text) for level, what, text in findings(conn, name)
                if level == PROBLEM and " = " not in what]


@pytest.mark.parametrize("dropped", ["queue table", "claim index", "history table"])
def test_create_schema_makes_again_a_dropped_table_or_index_keeping_every_other_row(
        engine, dropped):
    """A table or index of the current schema dropped by hand is found by verify and made
    again by create_schema (what ``sqldelay migrate`` runs), though the recorded version says
    the schema is there; the rows of every table still there are kept."""
    from sqldelay import Message

    name = unique_name("sqdr")
    try:
        create_schema(engine, table_name=name, history=True)
        queue = DelayedQueue(engine, "orders", table_name=name, history=True)
        dead = DeadLetters(engine, table_name=name)
        queue.offer_many([Message("buried", 1), Message("waiting", 2)])
        assert dead.bury(queue.poll(), "boom")
        gone = _drop(engine, dropped, name)
        assert [what for what, _ in _schema_problems(engine, name)] == (
            [] if dropped == "history table" else [gone])  # verify cannot know it was wanted
        assert all("run sqldelay migrate" in text for _, text in _schema_problems(engine, name))

        create_schema(engine, table_name=name, history=True)

        assert _schema_problems(engine, name) == []
        with engine.connect() as conn:
            assert current(conn, name) == SCHEMA_VERSION
        [letter] = dead.list()
        assert (letter.key, letter.last_error, letter.payload) == ("buried", "boom", b"1")
        if dropped == "queue table":
            assert queue.stats().due == 0  # its rows went with it
        else:
            assert queue.get("waiting").payload == 2
        if dropped == "history table":
            assert queue.history("buried") == []  # its rows went with it
        else:
            assert [e.kind.value for e in queue.history("buried")][:2] == ["offered", "claimed"]
        queue.offer("after", 3)  # the queue works in full again: offers, claims, history
        due = {e.key: e for e in queue.poll_many(10)}
        assert set(due) == ({"after"} if dropped == "queue table" else {"after", "waiting"})
        assert queue.ack_many(list(due.values())) == len(due)
        assert [e.kind.value for e in queue.history("after")] == ["offered", "claimed", "acked"]
    finally:
        drop_schema(engine, table_name=name)


def test_create_schema_makes_again_the_tables_of_the_version_it_finds_then_upgrades(
        backend_url, engine):
    """A table dropped from a schema at an older version is made as that version had it, and
    the migrations then bring everything to this version, the dead letters' rows kept."""
    name = unique_name("sqdo")
    alembic(backend_url, name, "upgrade", "0004")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                f"INSERT INTO {name}_dead (pkind, pkey, payload, scheduled_at_initially, "
                "created_at, attempts, last_error, failed_at) "
                "VALUES ('orders|json', 'gave-up', :p, 1, 1, 3, 'boom', 1)"), {"p": b'"x"'})
            conn.execute(sa.text(f"DROP TABLE {name}"))
        create_schema(engine, table_name=name)
        assert _schema_problems(engine, name) == []
        [letter] = DeadLetters(engine, table_name=name).list()
        assert (letter.key, letter.attempts, letter.last_error) == ("gave-up", 3, "boom")
        queue = DelayedQueue(engine, "orders", table_name=name)
        queue.offer("new", 1)
        [env] = queue.poll_many(10)
        assert (env.key, env.payload) == ("new", 1)
    finally:
        drop_schema(engine, table_name=name)
