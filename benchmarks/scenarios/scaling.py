"""How poll cost grows with the backlog, and how throughput grows with consumers.

backlog: the queue is topped up to each size in ``backlogs`` (due messages), then one consumer
claims and acks ``probe_polls`` single messages; the figure is the median time of one poll
(the median, as other work on a shared machine adds outliers to a mean). A flat
line from 1e3 to 1e6 is the claim reading the due index, not the table; the plan is recorded.
consumers: ``per_count_messages`` single poll+ack for each consumer count.
fresh_backlog: a new table filled with ``fresh_messages`` due messages by one queue object, then
``PROBE_CLAIMS`` claims of ``batch`` (each acked); the figure is the median time of one claim,
taking turns, on PostgreSQL, with the same on a queue whose DAO gathers no statistics (what a
claim cost there until autovacuum first analyzed a new table). The other databases' claims do
not rest on statistics a queue gathers: they run the first subject alone.
"""

from __future__ import annotations

import itertools
import statistics
import time
from functools import partial

from tools.plans import analyze, claim_index, claim_plan

from ..harness import OURS, Bench, alternate, drain, fill, rounds_for, run_threads, spread


def backlog(bench: Bench) -> None:
    queue = bench.queue("scaling_backlog")
    points, plans = [], {}
    filled = 0
    for size in bench.sizes.backlogs:
        missing = size - queue.stats().due
        fill(queue, missing, start=filled)
        filled += missing
        costs = []
        for _ in range(bench.sizes.probe_polls):
            began = time.perf_counter()
            env = queue.poll()
            costs.append(time.perf_counter() - began)
            queue.ack(env)
        analyze(bench.engine, queue.dao.table)
        plan = claim_plan(queue, 1)
        plans[size] = {"uses_index": plan and plan.walks(claim_index(queue)),
                       "plan": plan and plan.text}
        points.append([size, statistics.median(costs) * 1000])
    first, last = points[0][1], points[-1][1]
    params = {"probe_polls": bench.sizes.probe_polls, "axes": ("due backlog", "ms per poll"),
              "log_x": True, "plans": plans,
              "uses_index_at_every_size": all(p["uses_index"] for p in plans.values())}
    bench.add("scaling_backlog", OURS, "ms/poll at largest backlog", last, params=params,
              series=points)
    bench.add("scaling_backlog", OURS, "cost largest/smallest backlog", last / first,
              params={"smallest": points[0][0], "largest": points[-1][0],
                      "uses_index_at_every_size": params["uses_index_at_every_size"]})
    queue.clear()


def consumers(bench: Bench) -> None:
    queue = bench.queue("scaling_consumers")
    n = bench.sizes.per_count_messages
    points = []
    for count in bench.sizes.consumer_counts:
        fill(queue, n, prefix=f"c{count}-")
        elapsed = run_threads(count, drain(queue, 1))
        points.append([count, n / elapsed])
    bench.add("scaling_consumers", OURS, "messages/s, most consumers", points[-1][1],
              params={"messages_per_count": n, "batch": 1,
                      "axes": ("consumer threads", "messages/s (poll + ack)")},
              series=points)


PROBE_CLAIMS = 20


def fresh_backlog(bench: Bench) -> None:
    n = bench.sizes.fresh_messages
    tables = itertools.count()  # each round in a new table

    def claim_ms(gather: bool) -> float:
        queue = bench.queue("fresh_backlog", table=bench.table_for(f"_fresh{next(tables)}"))
        if not gather:  # this queue's DAO instance only
            queue.dao.gather_statistics = lambda conn: False
        fill(queue, n)
        costs = []
        for _ in range(PROBE_CLAIMS):
            began = time.perf_counter()
            got = queue.poll_many(bench.batch)
            costs.append(time.perf_counter() - began)
            queue.ack_many(got)
        queue.clear()
        return statistics.median(costs) * 1000

    after = bench.queue("fresh_backlog").dao.statistics_after
    subjects = {OURS: partial(claim_ms, True)}
    if after is not None:
        subjects[f"{OURS} without gathered statistics"] = partial(claim_ms, False)
    params = {"messages": n, "batch": bench.batch, "claims": PROBE_CLAIMS,
              "statistics_after": after}
    for subject, values in alternate(rounds_for(n), subjects).items():
        bench.add("fresh_backlog", subject, f"ms per claim of {bench.batch}",
                  spread(values)["median"], params={**params, **spread(values)})
