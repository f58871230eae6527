"""The physical limit of our operations in Python on PostgreSQL: the same statements, sent by
psycopg alone (no SQLAlchemy, no sqldelay), one autocommit round trip each, as ours are.

A consumer thread claims with the PostgreSQL QueueDao's own claim statement (compiled once to
psycopg's text) and acks what it got with the dao's ack, until a claim comes back empty; a
producer thread sends the dao's offer statement (its column parameters made as ours are)
with a payload encoded once. Neither checks, encodes or decodes anything nor builds objects:
what ours spends beyond them is the library's Python per operation, and what they spend
beyond pgbench is the driver's and the interpreter's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from sqldelay.dialects import OfferRow
from sqldelay.serializers import encode_payload

from .harness import PAYLOAD, Bench

SUBJECT = "psycopg alone"


def _text(stmt) -> tuple[str, dict]:
    compiled = stmt.compile(dialect=pg.psycopg.dialect())
    return str(compiled), dict(compiled.params)


def _conninfo(bench: Bench) -> str:
    return sa.make_url(bench.url).set(drivername="postgresql").render_as_string(
        hide_password=False)


def offer(bench: Bench, queue, clients: int, batch: int, batches: int) -> Callable[[int], None]:
    """A producer body like ``harness.produce`` (its share of ``batches`` offers of ``batch``
    new messages due now), in raw psycopg."""
    import psycopg

    sql, constants, _ = queue.dao._offer_sql(pg.psycopg.dialect(), True)
    payload = encode_payload(queue.serializer, PAYLOAD)

    def work(i: int) -> None:
        with psycopg.connect(_conninfo(bench), autocommit=True) as conn:
            for b in range(i, batches, clients):
                now = int(time.time() * 1000)
                rows = [OfferRow(f"r{b}-{j}", payload, now, True) for j in range(batch)]
                conn.execute(sql, {**constants, "b_kind": queue.pkind, "b_now": now,
                                   **queue.dao.offer_columns(rows)})

    return work


def drain(bench: Bench, queue, batch: int) -> Callable[[int], None]:
    """A consumer body like ``harness.drain``, in raw psycopg."""
    import psycopg

    dao = queue.dao
    claim, claim_params = _text(dao._claim_statement(("guard",)))
    ack, _ = _text(dao._ack if batch == 1 else dao._ack_many)
    def work(_: int) -> None:
        with psycopg.connect(_conninfo(bench), autocommit=True) as conn:
            while True:
                lock = str(uuid.uuid4())
                now = int(time.time() * 1000)
                rows = conn.execute(claim, {**claim_params, "b_kind": queue.pkind, "b_now": now,
                                            "limit": batch, "lock": lock,
                                            "until": now + 300_000}).fetchall()
                if not rows:
                    return
                if batch == 1:
                    conn.execute(ack, {"id": rows[0][0], "lock": lock})
                else:
                    conn.execute(ack, {"ids": [r[0] for r in rows], "lock": lock})

    return work
