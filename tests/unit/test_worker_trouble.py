"""What the worker's log calls an error it rides out: a deadlock is not an outage."""

from __future__ import annotations

from types import SimpleNamespace

import pymysql
import sqlalchemy as sa

from sqldelay.dialects.mysql import MySQLQueueDao
from sqldelay.schema import queue_table
from sqldelay.worker_base import is_outage, trouble

QUEUES = [SimpleNamespace(dao=MySQLQueueDao(queue_table(sa.MetaData(), "dq")))]


def wrapped(code: int, text: str) -> sa.exc.OperationalError:
    return sa.exc.OperationalError("DELETE ...", {}, pymysql.err.OperationalError(code, text))


def test_a_deadlock_is_named_as_one_and_still_ridden_out():
    deadlock = wrapped(1213, "Deadlock found when trying to get lock")
    assert is_outage(deadlock, QUEUES)
    assert trouble(deadlock, QUEUES).startswith("transient database error (a deadlock")


def test_a_lost_server_is_an_outage():
    gone = wrapped(2013, "Lost connection to server during query")
    assert is_outage(gone, QUEUES)
    assert trouble(gone, QUEUES) == "database unavailable"
