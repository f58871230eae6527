"""The limit of our MariaDB/MySQL offer in Python: the same statements, sent by PyMySQL alone
(no SQLAlchemy, no sqldelay), one transaction per batch, as ours are.

A producer thread inserts the batch's new keys with the dao's own insert of new keys (its
named placeholders, as ours sends them) and commits, with a payload encoded once: the plain
insert an offer of one chunk tries first (``QueueDao.inserts_first``), which takes every
key of these offers. It checks, encodes and builds nothing: what ours spends beyond it is the
library's and SQLAlchemy's Python per offer, and what it spends beyond mysqlslap's
client-side ceiling (the same insert from C) is the driver's and the interpreter's, escaping
each value into the text.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

from sqldelay.serializers import encode_payload

from .harness import PAYLOAD, Bench

SUBJECT = "PyMySQL alone"


def offer(bench: Bench, queue, clients: int, batch: int,
          batches: int) -> Callable[[int], None]:
    """A producer body like ``harness.produce`` (its share of ``batches`` offers of ``batch``
    new messages due now), in raw PyMySQL."""
    import pymysql

    dao, url = queue.dao, sa.make_url(bench.url)
    insert = dao.named_write(bench.engine.dialect, batch, False)
    payload = encode_payload(queue.serializer, PAYLOAD)

    def work(i: int) -> None:
        conn = pymysql.connect(host=url.host or "127.0.0.1", port=url.port or 3306,
                               user=url.username or "root", password=url.password or "",
                               database=url.database, charset="utf8mb4")
        try:
            cursor = conn.cursor()
            for b in range(i, batches, clients):
                keys = [f"r{b}-{j}" for j in range(batch)]
                now = int(time.time() * 1000)
                values = {"b_kind": queue.pkind, "created": now, "actor": None}
                for j, k in enumerate(keys):
                    values.update({f"k_{j}": k, f"p_{j}": payload, f"a_{j}": now,
                                   f"r_{j}": 0, f"g_{j}": None})
                cursor.execute(insert, values)
                conn.commit()
        finally:
            conn.close()

    return work
