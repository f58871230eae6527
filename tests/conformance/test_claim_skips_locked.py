"""A claim passes over rows another transaction holds and returns the due rows behind them.

The defect this guards against is Oracle's: a poll that picks the first N rows and only then
skips the locked ones returns nothing while due messages wait. The test runs on every backend
with row locks; on Oracle and SQL Server only where their container can start (conftest.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqldelay import Message


def test_claim_returns_due_rows_behind_rows_locked_elsewhere(make_queue, engine, clock):
    queue = make_queue()
    if not queue.dao.skip_locked:
        pytest.skip(f"{engine.dialect.name} locks the whole database for a write: no row locks")
    keys = [f"k{i}" for i in range(5)]
    start = clock.now()
    queue.offer_many([Message(k, k, start - timedelta(seconds=10 - i)) for i, k in enumerate(keys)])
    with engine.connect() as other:
        # hold the two earliest rows the way a producer updating them would
        held = other.execute(queue.dao.select_existing(queue.pkind, keys[:2])).fetchall()
        assert sorted(r.pkey for r in held) == keys[:2]
        assert [e.key for e in queue.poll_many(2)] == ["k2", "k3"]
        other.rollback()
    assert [e.key for e in queue.poll_many(5)] == ["k0", "k1", "k4"]
