"""A queue sharded over 1, 2 and 4 PostgreSQL servers, and what its routing layer costs.

shards_scaling: ``shard_counts`` private PostgreSQL servers are started on this machine (initdb
in a temporary directory, fsync off, as the restart tests do); for each count a ShardedQueue
over that many of them takes ``messages`` offers (``producers`` threads, offer_many of
``batch`` keys) and is drained (``consumers`` threads, poll_many + ack_many). Figures: offer and
drain messages/s per shard count (median of rounds, alternating counts), and CPU per message in
this client and in the servers (µs, from /proc): on a machine with few cores the servers share
them, so the throughput scales less than the shard count; CPU per message is what carries to
bigger machines.
shards_routing: the same single server as a plain DelayedQueue and as a ShardedQueue of that
one shard, in alternating rounds: single offers, offer_many, and the drain; the ratio of the
rates, and of this client's CPU per message (steadier than the rate on a busy machine), is the
routing layer's cost (the goal: within 5%).

This scenario starts its own servers and ignores ``--url``; it runs only when named
(``--scenario shards_scaling`` / ``shards_routing``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, ShardedQueue, create_schema
from tools.servers import PrivatePostgres, ServerMissing

from ..harness import (
    OURS,
    PAYLOAD,
    ROUNDS,
    Bench,
    alternate,
    drain,
    rounds_for,
    run_threads,
    spread,
)

RATE = "messages/s"


class _Servers:
    """``count`` private PostgreSQL servers, each with a queue table, and their queues."""

    def __init__(self, count: int, bench: Bench) -> None:
        self.servers: list[PrivatePostgres] = []
        self.engines: list[sa.Engine] = []
        pool = max(bench.producers, bench.consumers) * 2 + 4
        try:
            for _ in range(count):
                server = PrivatePostgres()
                self.servers.append(server)
                engine = sa.create_engine(server.url, pool_size=pool, max_overflow=pool)
                create_schema(engine)
                self.engines.append(engine)
        except BaseException:
            self.close()
            raise

    def queues(self, count: int, name: str) -> list[DelayedQueue]:
        return [DelayedQueue(e, name) for e in self.engines[:count]]

    def cpu(self, count: int) -> float:
        return sum(s.cpu_seconds() for s in self.servers[:count])

    def close(self) -> None:
        for engine in self.engines:
            engine.dispose()
        for server in self.servers:
            server.destroy()


def _offer_body(queue, n: int, producers: int, batch: int, tag: str) -> Callable[[int], None]:
    def work(i: int) -> None:
        rng = random.Random(i)
        end = n if i == producers - 1 else (i + 1) * (n // producers)
        for lo in range(i * (n // producers), end, batch):
            queue.offer_many([Message(f"{tag}{j}:{rng.random()}", PAYLOAD)
                              for j in range(lo, min(lo + batch, end))])

    return work


def _servers_or_note(bench: Bench, scenario: str, count: int) -> _Servers | None:
    try:
        return _Servers(count, bench)
    except ServerMissing as exc:
        bench.add(scenario, OURS, RATE, None, note=str(exc))
        return None


def shards_scaling(bench: Bench) -> None:
    counts = bench.sizes.shard_counts
    servers = _servers_or_note(bench, "shards_scaling", max(counts))
    if servers is None:
        return
    n = bench.sizes.messages
    cpu: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        def measure(count: int, phase: str) -> float:
            queue = ShardedQueue(servers.queues(count, f"s{count}"))
            if phase == "drain":
                _offer_body(queue, n, 1, 1000, "d")(0)
            client, server = time.process_time(), servers.cpu(count)
            work = (_offer_body(queue, n, bench.producers, bench.batch, "o") if phase == "offer"
                    else drain(queue, bench.batch))
            elapsed = run_threads(bench.producers if phase == "offer" else bench.consumers,
                                  work)
            cpu.setdefault((count, phase), []).append(
                ((time.process_time() - client) / n * 1e6,
                 (servers.cpu(count) - server) / n * 1e6))
            if phase == "offer":
                queue.clear()
            return n / elapsed

        rounds = rounds_for(n)
        runs = alternate(rounds, {(c, p): (lambda c=c, p=p: measure(c, p))
                                  for c in counts for p in ("offer", "drain")})
        for phase in ("offer", "drain"):
            base = spread(runs[(counts[0], phase)])["median"]
            series = []
            for count in counts:
                stats = spread(runs[(count, phase)])
                client = sorted(c for c, _ in cpu[(count, phase)])[len(cpu[(count, phase)]) // 2]
                server = sorted(s for _, s in cpu[(count, phase)])[len(cpu[(count, phase)]) // 2]
                series.append([count, stats["median"]])
                bench.add("shards_scaling", f"{OURS} {phase}, {count} shard(s)", RATE,
                          stats["median"],
                          params={"shards": count, "messages": n, "batch": bench.batch,
                                  "threads": bench.producers if phase == "offer"
                                  else bench.consumers,
                                  "speedup_vs_one": stats["median"] / base,
                                  "client_cpu_us_per_message": client,
                                  "server_cpu_us_per_message": server, **stats})
            bench.add("shards_scaling", f"{OURS} {phase}", RATE, series[-1][1],
                      params={"axes": ("shards", RATE)}, series=series)
    finally:
        servers.close()


def shards_routing(bench: Bench) -> None:
    servers = _servers_or_note(bench, "shards_routing", 1)
    if servers is None:
        return
    n = bench.sizes.messages
    singles = bench.sizes.single_messages
    try:
        plain = servers.queues(1, "plain")[0]
        sharded = ShardedQueue(servers.queues(1, "sharded"))

        def offers(queue) -> float:
            began = time.perf_counter()
            for i in range(singles):
                queue.offer(f"k{i}", PAYLOAD)
            elapsed = time.perf_counter() - began
            queue.clear()
            return singles / elapsed

        def offer_many(queue) -> float:
            elapsed = run_threads(1, _offer_body(queue, n, 1, bench.batch, "m"))
            queue.clear()
            return n / elapsed

        def drained(queue) -> float:
            _offer_body(queue, n, 1, 1000, "d")(0)
            return n / run_threads(1, drain(queue, bench.batch))

        rounds = rounds_for(n, ROUNDS * 2 - 1)
        for what, measure, count in (("offer", offers, singles),
                                     ("offer_many", offer_many, n),
                                     ("poll_many_ack_many", drained, n)):
            cpu: dict[str, list[float]] = {"plain": [], "sharded": []}

            def timed(subject: str, queue, measure=measure, count=count, cpu=cpu) -> float:
                began = time.process_time()  # this process's CPU, every thread's
                rate = measure(queue)
                cpu[subject].append((time.process_time() - began) / count * 1e6)
                return rate

            runs = alternate(rounds, {"plain": lambda t=timed: t("plain", plain),
                                      "sharded": lambda t=timed: t("sharded", sharded)})
            base, routed = spread(runs["plain"]), spread(runs["sharded"])
            base_cpu, routed_cpu = spread(cpu["plain"])["median"], spread(cpu["sharded"])["median"]
            bench.add("shards_routing", f"{OURS} {what}", RATE, base["median"],
                      params={"how": "DelayedQueue", "client_cpu_us_per_message": base_cpu,
                              **base})
            bench.add("shards_routing", f"{OURS} sharded {what}", RATE, routed["median"],
                      params={"how": "ShardedQueue of one shard",
                              "cost_vs_plain": 1 - routed["median"] / base["median"],
                              "client_cpu_us_per_message": routed_cpu,
                              "client_cpu_vs_plain": routed_cpu / base_cpu - 1, **routed})
    finally:
        servers.close()
