"""Patience (``sqldelay.outages``): which setting is in force, and what it does to a call
whose database went away: a ``patience`` block over the queue's own ``patience=`` over the
process's default, and a worker's ``patience(0)`` over all."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DEFAULT_PATIENCE, DelayedQueue, patience, set_default_patience
from sqldelay.errors import InvalidArgumentError


@pytest.fixture
def default():
    yield
    set_default_patience(DEFAULT_PATIENCE)


def attempts_through_an_outage(queue: DelayedQueue) -> int:
    """How many times the queue's executor tries a call that finds the database gone (it
    was reached before)."""
    assert queue.executor.run(lambda conn: 1, write=False) == 1  # reached
    calls = 0

    def gone(conn):
        nonlocal calls
        calls += 1
        raise ConnectionRefusedError("the database went away (test)")

    with pytest.raises(ConnectionRefusedError):
        queue.executor.run(gone, write=False)
    return calls


def test_a_queue_waits_out_an_outage_for_its_patience_and_a_block_overrides_it(default):
    engine = sa.create_engine("sqlite://")
    own = DelayedQueue(engine, "own", patience=timedelta(seconds=0.2))
    assert attempts_through_an_outage(own) > 1
    with patience(0):  # as a worker's own calls run
        assert attempts_through_an_outage(own) == 1
    set_default_patience(0)  # the process's default does not override a queue's own
    assert attempts_through_an_outage(own) > 1


def test_the_default_applies_to_a_queue_without_its_own(default):
    engine = sa.create_engine("sqlite://")
    plain = DelayedQueue(engine, "plain")
    set_default_patience(0)
    assert attempts_through_an_outage(plain) == 1
    set_default_patience(timedelta(seconds=0.2))
    assert attempts_through_an_outage(plain) > 1
    with patience(0.0):
        assert attempts_through_an_outage(plain) == 1
    set_default_patience(0)
    with patience(0.2):
        assert attempts_through_an_outage(plain) > 1


def test_a_database_never_reached_fails_at_once_whatever_the_patience():
    queue = DelayedQueue(sa.create_engine("sqlite://"), "q", patience=30)
    calls = 0

    def gone(conn):
        nonlocal calls
        calls += 1
        raise ConnectionRefusedError("no database here (test)")

    with pytest.raises(ConnectionRefusedError):
        queue.executor.run(gone, write=False)
    assert calls == 1


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), timedelta(seconds=-1), "5",
                                 True])
def test_a_patience_that_is_no_duration_is_refused(bad):
    engine = sa.create_engine("sqlite://")
    with pytest.raises(InvalidArgumentError, match="patience"):
        DelayedQueue(engine, "q", patience=bad)
    with pytest.raises(InvalidArgumentError, match="patience"):
        set_default_patience(bad)
    with pytest.raises(InvalidArgumentError, match="patience"), patience(bad):
        pass
