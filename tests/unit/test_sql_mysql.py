"""MySQL/MariaDB statements that depend on the server the dialect is connected to.

MySQL 8.0.20 deprecated ``VALUES(col)`` in ``ON DUPLICATE KEY UPDATE`` (warning 1287 on every
update) for a row alias, ``INSERT … AS new … UPDATE col = new.col``; MariaDB has no row
alias. SQLAlchemy picks the form from the server version when the dialect initializes on its
first connection, so what matters here is that the offer's update of changed rows is compiled
with the connection's own dialect and not with a fresh one: these tests initialize dialects
the way SQLAlchemy does for each server version and run the real offer against them.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from sqldelay.dialects import OfferRow
from sqldelay.dialects.mysql import MariaDBQueueDao, MySQLQueueDao
from sqldelay.schema import queue_table

from .dao_recorder import RecordingConnection, existing_answers, existing_row, render


def connected(version: tuple[int, ...], *, mariadb: bool) -> sa.Dialect:
    """A MySQL dialect as SQLAlchemy initializes it on connecting to such a server."""
    dialect = mysql.dialect(paramstyle="named")
    dialect.server_version_info = version
    dialect.is_mariadb = mariadb
    dialect._dispatch_for_vendor(dialect._initialize_mysql, dialect._initialize_mariadb, None)
    return dialect


def offered_update(dao_cls, dialect) -> str:
    dao = dao_cls(queue_table(sa.MetaData(), "dq"))
    existing = [existing_row(pkey="changed", payload=b"[0]", scheduled_at_initially=2000)]
    conn = RecordingConnection(dialect, existing_answers(dao, existing))
    dao.offer(conn, "q|json", [OfferRow("changed", b"[1]", 2000, True)], 1)
    [update] = [render(s, p, dialect) for s, p in conn.executed if "DUPLICATE" in str(s)]
    return update


def test_mysql_8_0_20_and_later_update_through_the_row_alias():
    sql = offered_update(MySQLQueueDao, connected((8, 0, 36), mariadb=False))
    assert " AS new ON DUPLICATE KEY UPDATE payload = new.payload" in sql
    assert "VALUES(" not in sql.split("ON DUPLICATE KEY UPDATE")[1]


def test_older_mysql_and_mariadb_keep_values():
    for dao_cls, dialect in ((MySQLQueueDao, connected((8, 0, 19), mariadb=False)),
                             (MariaDBQueueDao, connected((10, 11, 9), mariadb=True))):
        sql = offered_update(dao_cls, dialect)
        assert "ON DUPLICATE KEY UPDATE payload = VALUES(payload)" in sql


def test_an_update_of_several_rows_is_one_statement_whose_values_are_sent_once():
    # the rows' VALUES groups, then the row alias where the server takes one, then one update
    for dao_cls, dialect, alias in ((MySQLQueueDao, connected((8, 0, 36), mariadb=False), True),
                                    (MariaDBQueueDao, connected((10, 11, 9), mariadb=True), False)):
        dao = dao_cls(queue_table(sa.MetaData(), "dq"))
        keys = ["a", "b", "c"]
        conn = RecordingConnection(dialect, existing_answers(dao, [existing_row(
            pkey=k, payload=b"[0]", scheduled_at_initially=2000) for k in keys]))
        rows = [OfferRow(k, b"[1]", 3000 + i, True, priority=i) for i, k in enumerate(keys)]
        dao.offer(conn, "q|json", rows, 1, "tester")
        [(sql, values)] = [(str(s), p) for s, p in conn.executed if "DUPLICATE" in str(s)]
        assert sql.count("ON DUPLICATE KEY UPDATE") == 1 and sql.count("%(k_") == 3
        assert (") AS new ON DUPLICATE" in sql) is alias
        assert sql.count("%(b_kind)s") == 3 and sql.count("%(actor)s") == 3
        # every value is given once, by name
        assert {values[f"k_{i}"] for i in range(3)} == set(keys)
        assert [values[f"a_{i}"] for i in range(3)] == [3000, 3001, 3002]
        assert (values["b_kind"], values["actor"], values["created"]) == ("q|json", "tester", 1)
