"""MySQL/MariaDB: the offer's update of changed rows, as sent through a dialect initialized
the way SQLAlchemy does on connecting to each server.

The update goes through the primary key, by the ids the offer's locking read found: an
INSERT … ON DUPLICATE KEY UPDATE of the rows, as it was, took each key's entry of the unique
index, which another offer's failed insert may hold (``MySQLQueueDao.update_changed``).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.mysql import mysqlconnector

from sqldelay.dialects import OfferRow
from sqldelay.dialects.mysql import _UPDATE_PART, MariaDBQueueDao, MySQLQueueDao
from sqldelay.schema import queue_table

from .dao_recorder import RecordingConnection, existing_answers, existing_row, render


def connected(version: tuple[int, ...], *, mariadb: bool) -> sa.Dialect:
    """A MySQL dialect as SQLAlchemy initializes it on connecting to such a server."""
    dialect = mysql.dialect(paramstyle="named")
    dialect.server_version_info = version
    dialect.is_mariadb = mariadb
    dialect._dispatch_for_vendor(dialect._initialize_mysql, dialect._initialize_mariadb, None)
    return dialect


SERVERS = ((MySQLQueueDao, connected((8, 0, 36), mariadb=False)),
           (MySQLQueueDao, connected((8, 0, 19), mariadb=False)),
           (MariaDBQueueDao, connected((10, 11, 9), mariadb=True)))


def offered(dao_cls, dialect, n: int) -> list[tuple[str, dict]]:
    """The statements (and their values) an offer of ``n`` changed keys sends, the rows of
    key k{i} having id 100 + i."""
    dao = dao_cls(queue_table(sa.MetaData(), "dq"))
    keys = [f"k{i}" for i in range(n)]
    conn = RecordingConnection(dialect, existing_answers(dao, [existing_row(
        pkey=k, payload=b"[0]", scheduled_at_initially=2000, row_id=100 + i)
        for i, k in enumerate(keys)]))
    rows = [OfferRow(k, b"[1]", 3000 + i, True, priority=i) for i, k in enumerate(keys)]
    dao.offer(conn, "q|json", rows, 1, "tester")
    return [(str(s), p) for s, p in conn.executed]


def test_an_update_of_several_rows_is_one_update_by_primary_key_whose_values_are_sent_once():
    for dao_cls, dialect in SERVERS:
        sent = offered(dao_cls, dialect, 3)
        assert not any("DUPLICATE" in sql for sql, _ in sent)
        [(sql, values)] = [(sql, p) for sql, p in sent if sql.startswith("UPDATE")]
        assert "FORCE INDEX (PRIMARY)" in sql and "pkey" not in sql
        assert sql.count("%(p_") == 3 and sql.count("%(actor)s") == 1
        assert [values[f"i_{i}"] for i in range(3)] == [100, 101, 102]
        assert [values[f"a_{i}"] for i in range(3)] == [3000, 3001, 3002]
        assert [values[f"r_{i}"] for i in range(3)] == [0, 1, 2]
        assert (values["b_kind"], values["actor"], values["created"]) == ("q|json", "tester", 1)


def test_a_larger_update_goes_in_parts():
    for dao_cls, dialect in SERVERS:
        updates = [p for sql, p in offered(dao_cls, dialect, _UPDATE_PART + 1)
                   if sql.startswith("UPDATE")]
        assert [sorted(v for k, v in p.items() if k.startswith("i_")) for p in updates] == [
            list(range(100, 100 + _UPDATE_PART)), [100 + _UPDATE_PART]]


def test_a_driver_without_named_placeholders_gets_the_same_update_through_core():
    dialect = mysqlconnector.dialect()
    dialect.server_version_info, dialect.is_mariadb = (10, 11, 9), True
    dao = MariaDBQueueDao(queue_table(sa.MetaData(), "dq"))
    conn = RecordingConnection(dialect, existing_answers(dao, [existing_row(
        pkey="k", payload=b"[0]", scheduled_at_initially=2000, row_id=100)]))
    dao.offer(conn, "q|json", [OfferRow("k", b"[1]", 3000, True)], 1)
    [(stmt, values)] = [(s, p) for s, p in conn.executed if isinstance(s, sa.Update)]
    assert (values["i_0"], values["p_0"], values["a_0"]) == (100, b"[1]", 3000)
    assert "SET payload=CASE dq.id WHEN" in render(stmt, values, dialect)
