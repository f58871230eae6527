"""What an operator's reads cost (``sqldelay queues``, ``peek``, the metrics' depth gauges).

inspect_queues: every queue's counts, read by ``Inspector.queues`` (one grouped read of the
table and one of the dead letters) beside the reference an operator would otherwise run, a
``stats()`` per queue, over the same 20 queues; ms per reading, median of alternating rounds.

peek_depth: a page of 50 due messages 90% of the way into a backlog, read by
``Inspector.peek`` (keyset: a range read of the due index from the previous page's position)
beside the same page read with OFFSET, which walks every row before it; ms per page, median
of alternating rounds. The first page is recorded too: the keyset page deep in the backlog
should cost what the first does.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from sqldelay import Inspector
from tools.plans import analyze

from ..harness import OURS, Bench, alternate, fill, spread

ROUNDS = 7
QUEUES = 20
PAGE = 50
MS = "ms per reading"


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1000


def inspect_queues(bench: Bench) -> None:
    per_queue = max(1, bench.sizes.messages // QUEUES)
    queues = [bench.queue(f"inspect_{i}") for i in range(QUEUES)]
    for queue in queues:
        fill(queue, per_queue)
    inspector = Inspector(bench.engine, table_name=bench.table_for())
    runs = alternate(ROUNDS, {
        "grouped": lambda: _timed(inspector.queues),
        "per queue": lambda: _timed(lambda: [q.stats() for q in queues]),
    })
    params = {"queues": QUEUES, "messages": per_queue * QUEUES}
    bench.add("inspect_queues", OURS, MS, spread(runs["grouped"])["median"],
              params={**params, **spread(runs["grouped"])})
    bench.add("inspect_queues", "a stats() per queue", MS, spread(runs["per queue"])["median"],
              params={**params, **spread(runs["per queue"])})
    for queue in queues:
        queue.clear()


def peek_depth(bench: Bench) -> None:
    n = bench.sizes.backlogs[-2]
    queue = bench.queue("peek_depth")
    fill(queue, n)
    inspector = Inspector(bench.engine, table_name=bench.table_for())
    t = queue.dao.table
    analyze(bench.engine, t)  # the planner sees the backlog, as it would after autovacuum
    depth = int(n * 0.9)
    due = sa.and_(t.c.pkind == queue.pkind, t.c.scheduled_at <= queue.now_ms())
    ordered = sa.select(t).where(due).order_by(t.c.scheduled_at, t.c.id)
    with bench.engine.connect() as conn:  # the position a reader paging this far would hold
        at, row_id = conn.execute(sa.select(t.c.scheduled_at, t.c.id).where(due)
                                  .order_by(t.c.scheduled_at, t.c.id)
                                  .offset(depth - 1).limit(1)).one()
    after = f"{at}:{row_id}"

    def by_offset() -> None:
        with bench.engine.connect() as conn:
            rows = conn.execute(ordered.offset(depth).limit(PAGE)).all()
        assert len(rows) == min(PAGE, n - depth)

    runs = alternate(ROUNDS, {
        "keyset": lambda: _timed(lambda: inspector.peek(queue.name, limit=PAGE, after=after)),
        "offset": lambda: _timed(by_offset),
        "first page": lambda: _timed(lambda: inspector.peek(queue.name, limit=PAGE)),
    })
    params = {"backlog": n, "depth": depth, "page": PAGE,
              "first_page_ms": spread(runs["first page"])["median"]}
    bench.add("peek_depth", OURS, "ms per page", spread(runs["keyset"])["median"],
              params={**params, **spread(runs["keyset"])})
    bench.add("peek_depth", "OFFSET", "ms per page", spread(runs["offset"])["median"],
              params={**params, **spread(runs["offset"])})
    queue.clear()
