"""The physical limits of our operations in Python on PostgreSQL: the same statements, sent
one autocommit round trip each, as ours are, by two layers with no sqldelay code around them.

- **psycopg alone** (no SQLAlchemy): one driver connection per thread, each statement
  compiled once to psycopg's text.
- **SQLAlchemy alone**: what a library that shares its caller's engine cannot do without:
  for each statement a connection from the queue's engine, switched to autocommit by the
  dialect and back (``QueueDao.in_autocommit``, as sqldelay's engine layer does), and the
  dao's Core statement executed on it (the offer's SQL compiled once and sent with
  ``exec_driver_sql``, as ours is).

A consumer thread claims with the PostgreSQL QueueDao's own claim statement and acks what it
got with the dao's ack, until a claim comes back empty; a producer thread sends the dao's
offer of new keys (the plain insert, its column parameters made as ours are, with a payload
encoded once; then the wake-up, in a round trip of its own as ours is: SQLAlchemy alone takes
a connection from the engine for each of the two, where ours takes one for both).
Neither layer checks, encodes or decodes anything nor builds objects: what ours spends beyond
SQLAlchemy alone is the library's Python per operation, what SQLAlchemy alone spends beyond
psycopg alone is SQLAlchemy's, and what psycopg alone spends beyond pgbench is the driver's
and the interpreter's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from sqldelay.dialects import OfferRow
from sqldelay.serializers import encode_payload

from .harness import PAYLOAD, Bench

SUBJECT = "psycopg alone"
ENGINE_SUBJECT = "SQLAlchemy alone"

# a statement as a layer takes it: a dao's Core statement, or a function of the layer's
# dialect giving SQL compiled once for its driver and the SQL's constant parameters (the
# offer's, ``_offer_sql``)
Statement = sa.Executable | Callable[[sa.Dialect], tuple[str, dict]]
# a layer's ``send(stmt, values, rows)`` runs ``stmt`` with ``values`` and returns its rows
# (when ``rows``) or None
Sender = Callable[[Statement, dict, bool], list | None]
Layer = Callable[[Bench, object], AbstractContextManager[Sender]]

# the dao statements as psycopg's text, with their constant parameters, each compiled once and
# kept with its statement (so its id is not reused)
_TEXTS: dict[int, tuple[sa.Executable, str, dict]] = {}


@contextmanager
def _psycopg(bench: Bench, queue) -> Iterator[Sender]:
    import psycopg

    dialect = pg.psycopg.dialect()
    conninfo = sa.make_url(bench.url).set(drivername="postgresql").render_as_string(
        hide_password=False)

    def send(conn, stmt: Statement, values: dict, rows: bool) -> list | None:
        if callable(stmt):
            sql, constants = stmt(dialect)
        else:
            if id(stmt) not in _TEXTS:
                compiled = stmt.compile(dialect=dialect)
                _TEXTS[id(stmt)] = (stmt, str(compiled), dict(compiled.params))
            _, sql, constants = _TEXTS[id(stmt)]
        cursor = conn.execute(sql, {**constants, **values})
        return cursor.fetchall() if rows else None

    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield partial(send, conn)


@contextmanager
def _engine(bench: Bench, queue) -> Iterator[Sender]:
    dao, engine = queue.dao, queue.engine

    def send(stmt: Statement, values: dict, rows: bool) -> list | None:
        def op(conn: sa.Connection) -> list | None:
            if callable(stmt):
                sql, constants = stmt(conn.dialect)
                result = conn.exec_driver_sql(sql, {**constants, **values})
            else:
                result = conn.execute(stmt, values)
            return result.all() if rows else None

        with engine.connect() as conn:
            return dao.in_autocommit(op, conn)

    yield send


LAYERS: dict[str, Layer] = {SUBJECT: _psycopg, ENGINE_SUBJECT: _engine}


def offer(bench: Bench, queue, clients: int, batch: int, batches: int,
          layer: str) -> Callable[[int], None]:
    """A producer body like ``harness.produce`` (its share of ``batches`` offers of ``batch``
    new messages due now), through ``layer``."""
    payload = encode_payload(queue.serializer, PAYLOAD)

    dao = queue.dao

    def insert(dialect: sa.Dialect) -> tuple[str, dict]:
        sql, constants, _ = dao._driver_sql(dialect, ("insert", False, None),
                                            lambda: dao._insert_statement(False, None))
        return sql, constants

    wake = sa.select(sa.func.pg_notify(dao.channel, sa.bindparam("b_kind", type_=sa.Text)))

    def work(i: int) -> None:
        with LAYERS[layer](bench, queue) as send:
            for b in range(i, batches, clients):
                now = int(time.time() * 1000)
                rows = [OfferRow(f"r{b}-{j}", payload, now, True) for j in range(batch)]
                send(insert, {"b_kind": queue.pkind, "b_now": now,
                              **dao.offer_columns(rows)}, False)
                send(wake, {"b_kind": queue.pkind}, True)

    return work


def drain(bench: Bench, queue, batch: int, layer: str) -> Callable[[int], None]:
    """A consumer body like ``harness.drain``, through ``layer``."""
    dao = queue.dao
    claim = dao._claim_statement(("guard",), gives_way=True)  # as ours sends it, alone
    ack = dao._ack if batch == 1 else dao._ack_many

    def work(_: int) -> None:
        with LAYERS[layer](bench, queue) as send:
            while True:
                lock = str(uuid.uuid4())
                now = int(time.time() * 1000)
                rows = send(claim, {"b_kind": queue.pkind, "b_now": now, "limit": batch,
                                    "lock": lock, "until": now + 300_000}, True)
                if not rows:
                    return
                if batch == 1:
                    send(ack, {"id": rows[0][0], "lock": lock}, False)
                else:
                    send(ack, {"ids": [r[0] for r in rows], "lock": lock}, False)

    return work
