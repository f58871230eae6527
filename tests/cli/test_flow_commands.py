"""``sqldelay pause``, ``resume`` and ``limit`` on every reachable backend: what they change is
what the queue's own ``flow_control()`` reads and what its claims obey, and the queues table
shows it; an unknown queue is a one-line error that changes nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sqldelay import DelayedQueue

from ..conftest import unique_name
from .test_commands import _one_target_per_server, fails, here, ok, sqldelay  # noqa: F401


@pytest.fixture
def db(backend_url, table_name) -> list[str]:
    return ["--url", backend_url, "--table", table_name]


def listed(db: list[str], name: str) -> dict:
    [mine] = [q for q in json.loads(ok("queues", "--json", *db, run=here)) if q["queue"] == name]
    return mine


def test_pause_and_resume_stop_and_start_claims(db, engine, table_name):
    name = unique_name("pause")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("a", 1)

    assert ok("pause", name, *db).startswith(f"paused queue '{name}'")  # the entry point
    assert queue.flow_control().paused and queue.poll() is None
    assert "paused already" in ok("pause", name, *db, run=here)
    assert listed(db, name)["paused"] is True
    row = [line for line in ok("queues", *db, run=here).splitlines() if name in line]
    assert len(row) == 1 and "paused" in row[0]
    queue.offer("b", 2)  # offers still land

    assert ok("resume", name, *db, run=here).startswith(f"resumed queue '{name}'")
    assert "was not paused" in ok("resume", name, *db, run=here)
    assert not queue.flow_control().paused and listed(db, name)["paused"] is False
    assert {queue.poll().key, queue.poll().key} == {"a", "b"}


def test_limit_sets_shows_and_lifts_the_rate_and_concurrency_limits(db, engine, table_name):
    name = unique_name("limit")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("a", 1)
    assert ok("limit", name, *db, run=here).strip() == \
        f"queue '{name}': not paused, no rate limit, no concurrency limit"

    out = ok("limit", name, "--rate", "10/s", "--concurrency", "5", *db, run=here)
    assert "rate limit 10/s, concurrency limit 5" in out
    control = queue.flow_control()
    assert (control.rate_limit, control.rate_period, control.concurrency_limit) == \
        (10, timedelta(seconds=1), 5)
    row = [line for line in ok("stats", name, *db, run=here).splitlines() if name in line]
    assert "10/s, 5 in flight" in row[0]

    shown = json.loads(ok("limit", name, "--rate", "100/5m", "--json", *db, run=here))
    assert shown == {"paused": False, "rate_limit": 100, "rate_period": 300.0,
                     "concurrency_limit": 5}
    assert (listed(db, name)["rate_limit"], listed(db, name)["rate_period"]) == (100, 300.0)

    assert "no rate limit, concurrency limit 5" in ok("limit", name, "--rate", "none", *db,
                                                      run=here)
    assert queue.flow_control().rate_limit is None
    ok("limit", name, "--concurrency", "1", *db, run=here)
    held = queue.poll()
    queue.offer("b", 2)
    assert queue.poll() is None  # the cap the command set holds the second message back
    assert "no rate limit, no concurrency limit" in ok("limit", name, "--none", *db, run=here)
    assert queue.poll().key == "b" and held.ack()


def test_a_queue_paused_or_limited_with_nothing_in_it_is_listed(db, engine, table_name):
    name = unique_name("idle")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("a", 1)
    queue.drop("a")
    assert name not in {q["queue"] for q in json.loads(ok("queues", "--json", *db, run=here))}
    queue.set_concurrency_limit(2)
    mine = listed(db, name)
    assert (mine["due"], mine["concurrency_limit"], mine["paused"]) == (0, 2, False)
    ok("pause", name, *db, run=here)  # known by its settings row
    assert listed(db, name)["paused"] is True
    assert json.loads(ok("stats", name, "--json", *db, run=here))[0]["paused"] is True


def test_bad_values_and_unknown_queues_are_one_line_and_change_nothing(db, engine, table_name):
    name = unique_name("bad")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("a", 1)
    for value in ("0", "x/s", "10/fortnight", "10/-5s", "99999999999"):
        assert "--rate" in fails("limit", name, "--rate", value, *db, run=here), value
    for value in ("0", "-1", "1.5"):
        assert "--concurrency" in fails("limit", name, "--concurrency", value, *db,
                                        run=here), value
    assert "--none" in fails("limit", name, "--none", "--rate", "3", *db, run=here)
    unknown = unique_name("nosuch")
    for command in (["pause"], ["resume"], ["limit", "--rate", "1/s"], ["limit"]):
        line = fails(command[0], unknown, *command[1:], *db, run=here)
        assert f"no queue named '{unknown}'" in line, line
    # a queue of another payload type: named, with the option that reaches it
    assert "--serializer json" in fails("pause", name, "--serializer", "str", *db, run=here)
    assert queue.flow_control() == DelayedQueue(engine, unique_name("fresh"),
                                                table_name=table_name).flow_control()
