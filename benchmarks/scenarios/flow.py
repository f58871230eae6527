"""What flow control costs, and that its claims stay index reads.

flow_drain: ``flow_messages`` due messages drained by ``consumers`` threads with
poll_many(batch) + ack_many, four ways, in alternating rounds (medians, with min and max):
plain; with priorities (ten levels); in 1,000 groups (so each claim takes the group-aware
path); and with a rate limit that is never reached (so each claim takes the limited path:
settings locked, bucket charged); each round in a table of its own. The C-client ceilings
of the plain drain and, on PostgreSQL, of the grouped drain (pgbench sending our grouped
claim's statements) run in the same scenario.
flow_fairness: one Worker over a flooded queue (``fairness_flood`` due) and a quiet one whose
``quiet_messages`` fall due 0.1 s apart (5 s by default): the quiet messages' lag from due
time to handler, p50/p99, and how many of them were handled while the flood was still
draining (tests assert fairness loosely; this reports it).
flow_serial: one serial group drained by a Worker, beside the same messages without a group.
flow_plans: the database's plans for the claim's reads at the smallest and largest backlog
(``backlogs``, 1e3 and 1e6 due): the claim of a queue with priorities (and on PostgreSQL the
claim of a rate-limited queue, which charges its bucket in the same statement), and the
group-aware claim's reads of the group heads and of the ungrouped messages.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

from sqldelay import Message, SystemClock, Worker, WorkerListener
from tools.plans import READS_PLANS, analyze, claim_index, claim_plan, due_statement, explain

from .. import references
from ..harness import (
    OURS,
    PAYLOAD,
    ROUNDS,
    Bench,
    alternate,
    fill,
    percentile,
    run_threads,
    spread,
)

RATE = "messages/s"
GROUPS = references.GROUPS  # the groups of flow_drain's grouped variant (and its ceiling)


def flow_drain(bench: Bench) -> None:
    n = bench.sizes.flow_messages
    variants = ("plain", "priorities", f"groups of {max(n // GROUPS, 1)}", "unreached rate limit")
    # each round in a table of its own: on a server whose autovacuum has not run (this
    # machine's has it off) the dead rows of earlier rounds slow the claims of later ones, and
    # the variants come in a fixed order, so the last of each round paid for all before it
    tables = (bench.table_for(f"_flow{i}") for i in itertools.count())

    def measure(variant: str) -> float:
        queue = bench.queue(f"flow_{variant.split()[0]}", table=next(tables))
        fill(queue, n, priorities=10 if variant == "priorities" else None,
             groups=GROUPS if variant.startswith("groups") else None)
        if variant == "unreached rate limit":
            queue.set_rate_limit(1_000_000_000)
        elapsed = run_threads(bench.consumers, _drain_all(queue, bench.batch))
        left = queue.stats().due
        queue.clear()
        return (n - left) / elapsed

    runs = alternate(ROUNDS, {v: (lambda v=v: measure(v)) for v in variants})
    plain = spread(runs["plain"])["median"]
    for variant, values in runs.items():
        stats = spread(values)
        subject = OURS if variant == "plain" else f"{OURS} {variant}"
        bench.add("flow_drain", subject, RATE, stats["median"],
                  params={"messages": n, "batch": bench.batch, "clients": bench.consumers,
                          "cost_vs_plain": 1 - stats["median"] / plain, **stats})
    # the ceilings of the plain and of the grouped drain (PostgreSQL), in rounds of their own
    references.compare(bench, "flow_drain", "drain", {}, batch=bench.batch,
                       clients=bench.consumers, messages=n, also=(references.GROUPED,))


def _drain_all(queue, batch: int):
    """A consumer body: claim ``batch`` at a time and ack until nothing is due or in flight.
    (A grouped queue's claim comes back empty while other consumers hold the due groups,
    which would end a loop that stops at the first empty claim with most messages left.)"""

    def work(_: int) -> None:
        while True:
            if got := queue.poll_many(batch):
                queue.ack_many(got)
                continue
            left = queue.stats()
            if left.due == 0 and left.in_flight == 0:
                return

    return work


def flow_fairness(bench: Bench) -> None:
    flooded, quiet = bench.queue("fair_flooded"), bench.queue("fair_quiet")
    flood, quiet_count = bench.sizes.fairness_flood, bench.sizes.quiet_messages
    fill(flooded, flood, prefix="a")
    start = SystemClock().now()
    quiet.offer_many([Message(f"b{i}", PAYLOAD, start + timedelta(seconds=i / 10))
                      for i in range(quiet_count)])
    lags: list[float] = []
    during_flood = [0]
    flood_handled = [0]
    lock = threading.Lock()
    done = threading.Event()

    def handler(envelope) -> None:
        with lock:
            if envelope.queue is quiet:
                lags.append((SystemClock().now() - envelope.scheduled_at).total_seconds() * 1000)
                during_flood[0] += flood_handled[0] < flood
                if len(lags) == quiet_count:
                    done.set()
            else:
                flood_handled[0] += 1

    worker = Worker({"flooded": flooded, "quiet": quiet}, handler,
                    concurrency=bench.consumers, batch_size=bench.batch, wake_ups=False,
                    idle_poll=timedelta(milliseconds=100), listeners=[WorkerListener()])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    done.wait(quiet_count / 10 + 30)
    worker.stop()
    thread.join()
    lags.sort()
    params = {"flood": flood, "quiet_messages": len(lags),
              "handled_while_flooded": during_flood[0],
              "concurrency": bench.consumers, "batch": bench.batch}
    for p in (50, 99):
        bench.add("flow_fairness", OURS, f"p{p} quiet-queue lag ms", percentile(lags, p),
                  params=params)
    flooded.clear()
    quiet.clear()


def flow_serial(bench: Bench) -> None:
    """One serial group through a Worker: each message is claimed only after the one before
    is acked, so this is the hand-off time from ack to the next claim (no group: the same
    messages without one, beside it)."""
    n = max(20, bench.sizes.messages // 50)

    def measure(grouped: bool) -> float:
        queue = bench.queue("flow_serial")
        due = datetime.now(UTC) - timedelta(seconds=1)
        queue.offer_many([Message(f"m{i}", PAYLOAD, due + timedelta(milliseconds=i),
                                  group="one" if grouped else None) for i in range(n)])
        worker = Worker(queue, lambda envelope: None, concurrency=bench.consumers,
                        batch_size=bench.batch, wake_ups=False, listeners=[])
        started = time.perf_counter()
        handled = worker.drain()
        return handled / (time.perf_counter() - started)

    runs = alternate(ROUNDS, {"one group": lambda: measure(True),
                              "no group": lambda: measure(False)})
    for variant, values in runs.items():
        stats = spread(values)
        bench.add("flow_serial", f"{OURS} {variant}", RATE, stats["median"],
                  params={"messages": n, "concurrency": bench.consumers, **stats})


def flow_plans(bench: Bench) -> None:
    if bench.dialect not in READS_PLANS:
        return
    plans = {}
    for variant in ("priorities", "groups"):
        queue = bench.queue(f"plans_{variant}")
        filled = 0
        for size in (bench.sizes.backlogs[0], bench.sizes.backlogs[-1]):
            fill(queue, size - filled, start=filled, chunk=10_000, priorities=10,
                 groups=GROUPS if variant == "groups" else None)
            filled = size
            analyze(bench.engine, queue.dao.table)
            plans[f"{variant} {size}"] = _plans(bench, queue, variant)
        queue.clear()
    largest = [p for key, sizes in plans.items() if key.endswith(f" {filled}")
               for p in sizes.values()]
    every = all(p["as_expected"] for p in largest)
    bench.add("flow_plans", OURS, "claim reads as expected at the largest backlog", float(every),
              params={"plans": plans, "as_expected_at_largest": every})


def _plans(bench: Bench, queue, variant: str) -> dict:
    """Each read's plan, and whether it is the one wanted: the priority claim walks the claim
    index in order; the group heads probe the group index once per group (planned under the
    settings the grouped claim's transaction runs with, ``walk_settings``); the ungrouped
    messages of a grouped queue come from an index (sorted, when the group index finds them:
    the planner's choice, bounded by the ungrouped due messages), never from the whole table;
    where the heads' statement reads them too (PostgreSQL), from the claim index in it."""
    dao, t = queue.dao, queue.dao.table
    now = queue.now_ms()
    if variant == "priorities":
        plan = claim_plan(queue, bench.batch)
        out = {"claim": {"plan": plan.text, "as_expected": plan.walks(claim_index(queue))}}
        if dao.bucket_in_claim:  # a rate limit alone: the claim that charges the bucket too
            bucket = explain(bench.engine, dao._claim_statement(("bucket",)),
                             {"b_kind": queue.pkind, "b_now": now, "limit": bench.batch,
                              "lock": "x", "until": now}, t)
            out["rate-limited claim"] = {
                "plan": bucket.text,
                "as_expected": claim_index(queue) in bucket.indexes and not bucket.full_scan}
        return out
    values = dao.due_params(queue.pkind, now, bench.batch)
    groups = [f"g{i}" for i in range(bench.batch)]
    stmt, params = dao.heads_plan(bench.engine.dialect, queue.pkind, groups, now, bench.batch)
    heads = explain(bench.engine, stmt, {**values, **params}, t, dao.walk_settings())
    out = {"group heads": {"plan": heads.text, "as_expected":
                           dao.group_index in heads.indexes and not heads.full_scan}}
    if dao.groups_in_claim:  # the heads' statement reads the ungrouped messages too
        out["ungrouped"] = {"plan": heads.text, "as_expected":
                            claim_index(queue) in heads.indexes and not heads.full_scan}
        return out
    ungrouped = explain(bench.engine, due_statement(queue, ("ungrouped",)), values, t)
    out["ungrouped"] = {"plan": ungrouped.text,
                        "as_expected": bool(ungrouped.indexes) and not ungrouped.full_scan}
    return out
