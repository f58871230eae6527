"""The results table comes with migration 0009 and with create_schema: an upgrade from 0008
keeps every message, and the tasks deferred before it run and keep their results after it."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from sqldelay import (
    DeadLetters,
    DelayedQueue,
    Message,
    RetryPolicy,
    Tasks,
    Worker,
    create_schema,
    drop_schema,
)
from sqldelay.migrate import current
from sqldelay.schema import SCHEMA_VERSION

from ..conformance.test_migrations import alembic, shape
from ..conftest import unique_name


def test_an_upgrade_from_0008_adds_the_results_table_keeping_every_message(backend_url, engine):
    name = unique_name("sqdt9")
    alembic(backend_url, name, "upgrade", "0008")
    try:
        assert "_results" not in shape(backend_url, name)
        # messages of 0008: plain ones, one in flight, a task message, a dead letter
        queue = DelayedQueue(engine, "jobs", table_name=name)
        queue.offer_many([Message("plain", {"v": 1}), Message("later", {"v": 2}, priority=3),
                          Message("task-1", {"task": "double", "kwargs": {"n": 4}})])
        held = queue.poll()
        assert held.key == "later"  # the highest priority first
        queue.offer("doomed", {"v": 3})
        DeadLetters.of(queue).bury(queue.poll(), "gave up")  # plain, buried before the upgrade

        create_schema(engine, table_name=name)
        with engine.connect() as conn:
            assert current(conn, name) == SCHEMA_VERSION
        tables = shape(backend_url, name)
        assert {"", "_dead", "_groups", "_settings", "_results"} <= set(tables)
        assert [ix for ix, _, _ in tables["_results"][1]] == ["_results_kind_expiry_ix"]

        queue = DelayedQueue(engine, "jobs", table_name=name)
        assert queue.get("later").in_flight and queue.get("later").priority == 3
        assert queue.get("doomed").payload == {"v": 3}
        assert [dl.key for dl in DeadLetters.of(queue).list("jobs")] == ["plain"]
        tasks = Tasks(queue, results=True)

        @tasks.task(name="double")
        def double(n):
            return 2 * n

        Worker(queue, tasks, retry=RetryPolicy.fixed(timedelta(0), max_attempts=1)).drain()
        assert tasks.handle("task-1").status().return_value == 8
        # the message that is no task goes to the dead letters, beside the one of 0008
        assert sorted(dl.key for dl in DeadLetters.of(queue).list("jobs")) == ["doomed", "plain"]
        assert queue.get("later").in_flight  # still held by its claim of before the upgrade
    finally:
        drop_schema(engine, table_name=name)


def test_the_results_table_is_made_and_dropped_with_the_others(engine):
    name = unique_name("sqdt9c")
    create_schema(engine, table_name=name)
    try:
        assert sa.inspect(engine).has_table(f"{name}_results")
    finally:
        drop_schema(engine, table_name=name)
    assert not sa.inspect(engine).has_table(f"{name}_results")
