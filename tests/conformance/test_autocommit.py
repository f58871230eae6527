"""Operations of one statement run in autocommit where the database gains by it (PostgreSQL):
the engine layer switches the pooled connection itself, and must hand it back to the caller's
pool as it found it, whatever happens."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message

from ..conftest import unique_name


@pytest.fixture
def one_connection(backend_url, table_name):
    """An engine whose pool holds one connection, so each checkout gets the one the queue
    used; and a queue on it."""
    engine = sa.create_engine(backend_url, pool_size=1, max_overflow=0)
    if engine.dialect.name != "postgresql":
        engine.dispose()
        pytest.skip(f"{engine.dialect.name} runs no operation in autocommit")
    yield engine, DelayedQueue(engine, unique_name("q"), table_name=table_name)
    engine.dispose()


def _rolled_back(engine, table_name: str) -> bool:
    """Whether a change made through the pool and rolled back is gone (not committed alone)."""
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE TEMP TABLE probe_{table_name} (n int)"))
        conn.rollback()
        return conn.execute(sa.text("SELECT to_regclass(:name) IS NULL"),
                            {"name": f"pg_temp.probe_{table_name}"}).scalar()


def test_the_connection_goes_back_to_the_pool_in_its_usual_mode(one_connection, table_name):
    engine, queue = one_connection
    queue.offer_many([Message(f"k{i}", i) for i in range(3)])
    got = queue.poll_many(2)  # one statement each, in autocommit
    assert len(got) == 2 and queue.ack_many(got) == 2
    assert _rolled_back(engine, table_name)


def test_a_connection_that_cannot_be_switched_back_is_dropped(one_connection, table_name,
                                                              monkeypatch, caplog):
    engine, queue = one_connection
    queue.offer_many([Message(f"k{i}", i) for i in range(3)])
    with engine.connect() as conn:
        used = conn.connection.dbapi_connection

    def refuse(dbapi_connection):
        raise RuntimeError("cannot switch back")

    monkeypatch.setattr(engine.dialect, "reset_isolation_level", refuse)
    with caplog.at_level(logging.WARNING, logger="sqldelay"):
        got = queue.poll_many(2)  # what the statement did stands: the messages are claimed
    monkeypatch.undo()
    assert [e.key for e in got] == ["k0", "k1"]
    assert "could not take a connection out of autocommit" in caplog.text
    with engine.connect() as conn:
        assert conn.connection.dbapi_connection is not used  # a new one in its place
    assert _rolled_back(engine, table_name)
    assert queue.ack_many(got) == 2
