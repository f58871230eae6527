"""The asyncio front end, beside the blocking one and the peers, through each async driver of
the database (PostgreSQL: asyncpg and psycopg's async mode; MariaDB/MySQL: asyncmy; SQLite:
aiosqlite).

async_overhead: microseconds per call of ``await conn.execute(SELECT 1)`` against the same
statement run through ``AsyncConnection.run_sync`` (how the async front end runs every shared
operation), alternating rounds, median: the cost of the design, measured.
async_peers: the peers scenario's work through the asyncio API: ``producers`` tasks offer
``peer_jobs`` no-op jobs in batches of ``batch``, then ``consumers`` tasks drain them with
``poll_many(batch)`` + ``ack_many``; the drivers take turns for three rounds (medians), each
round's new engine warmed first (connections opened, statements prepared). The blocking front
end's and pgqueuer's figures of the same run (scenario "peers") stand beside them.
async_worker_drain: ``AsyncWorker(noop, concurrency=consumers * 25, batch_size=batch).drain()``
over ``peer_jobs`` due messages, beside the blocking Worker and pgqueuer of the same run.
async_worker_wakeup: an idle AsyncWorker (idle poll 30 s with NOTIFY, 0.25 s without) and an
offer of a message due now: offer → handler start, p50/p95.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sqldelay import AsyncDelayedQueue, AsyncWorker, Message, WorkerListener
from sqldelay.engines import async_url

from ..harness import (
    OURS,
    PAYLOAD,
    ROUNDS,
    Bench,
    alternate,
    percentile,
    rounds_for,
    spread,
)
from .peers import ENQUEUE, PROCESS, RATE

ASYNC_DRIVERS = {"postgresql": ["asyncpg", "psycopg_async"], "mysql": ["asyncmy"],
                 "mariadb": ["asyncmy"], "sqlite": ["aiosqlite"]}


def _urls(bench: Bench) -> dict[str, str]:
    """Async driver -> the run's database URL through it."""
    url = sa.make_url(bench.url)
    backend = url.get_backend_name()
    drivers = ASYNC_DRIVERS.get(bench.dialect, [])
    if not drivers:
        return {"default": async_url(url).render_as_string(hide_password=False)}
    return {d: url.set(drivername=f"{backend}+{d}").render_as_string(hide_password=False)
            for d in drivers}


def _engine(url: str, bench: Bench):
    pool = bench.consumers + bench.producers + 4
    kwargs = {} if url.startswith("sqlite") else {"pool_size": pool, "max_overflow": pool}
    return create_async_engine(url, **kwargs)


def subject(driver: str) -> str:
    return f"{OURS} async ({driver})"


def async_overhead(bench: Bench) -> None:
    for driver, url in _urls(bench).items():
        direct, through = asyncio.run(_overhead(url, bench))
        for name, values in (("await conn.execute", direct), ("conn.run_sync", through)):
            stats = spread(values)
            bench.add("async_overhead", f"{name} ({driver})", "µs per call", stats["median"],
                      params={"calls": bench.sizes.overhead_calls, **stats})


async def _overhead(url: str, bench: Bench) -> tuple[list[float], list[float]]:
    engine = _engine(url, bench)
    stmt = sa.text("SELECT 1")
    calls = bench.sizes.overhead_calls
    try:
        async with engine.connect() as conn:
            await conn.execute(stmt)

            async def direct() -> float:
                began = time.perf_counter()
                for _ in range(calls):
                    await conn.execute(stmt)
                return (time.perf_counter() - began) / calls * 1e6

            async def through() -> float:
                began = time.perf_counter()
                for _ in range(calls):
                    await conn.run_sync(lambda c: c.execute(stmt))
                return (time.perf_counter() - began) / calls * 1e6

            values: dict[str, list[float]] = {"direct": [], "through": []}
            for _ in range(rounds_for(calls)):
                values["direct"].append(await direct())
                values["through"].append(await through())
            return values["direct"], values["through"]
    finally:
        await engine.dispose()


def async_peers(bench: Bench) -> None:
    n = bench.sizes.peer_jobs // bench.batch * bench.batch
    params = {"jobs": n, "batch": bench.batch, "producers": bench.producers,
              "consumers": bench.consumers}
    runs = alternate(ROUNDS, {driver: lambda url=url: asyncio.run(_peers(url, bench, n))
                              for driver, url in _urls(bench).items()})
    for driver, values in runs.items():
        enqueue = spread([n / enqueue_s for enqueue_s, _, _ in values])
        bench.add(ENQUEUE, subject(driver), RATE, enqueue["median"], params={**params, **enqueue})
        process = spread([done / process_s for _, process_s, done in values])
        bench.add(PROCESS, subject(driver), RATE, process["median"],
                  params={**params, **process,
                          "processed": min(done for _, _, done in values)})


async def _peers(url: str, bench: Bench, n: int) -> tuple[float, float, int]:
    engine = _engine(url, bench)
    try:
        queue = AsyncDelayedQueue(engine, "async_peers", table_name=bench.table_for())
        batches = n // bench.batch
        now = datetime.now(UTC)
        # the engine is new in each round (a round has an event loop of its own): its
        # producers' connections are opened and their statements prepared before the clock
        # starts, as the blocking front end's are in the run's engine
        await asyncio.gather(*(queue.offer_many([Message(f"warm{i}", PAYLOAD, now)])
                               for i in range(bench.producers)))
        await queue.clear()

        async def produce(i: int) -> None:
            for b in range(i, batches, bench.producers):
                await queue.offer_many([Message(f"j{b}-{j}", PAYLOAD, now)
                                        for j in range(bench.batch)])

        began = time.perf_counter()
        await asyncio.gather(*(produce(i) for i in range(bench.producers)))
        enqueue_s = time.perf_counter() - began
        done = [0]

        async def consume() -> None:
            while got := await queue.poll_many(bench.batch):
                await queue.ack_many(got)
                done[0] += len(got)

        began = time.perf_counter()
        await asyncio.gather(*(consume() for _ in range(bench.consumers)))
        return enqueue_s, time.perf_counter() - began, done[0]
    finally:
        await engine.dispose()


def async_worker_drain(bench: Bench) -> None:
    n = bench.sizes.peer_jobs
    concurrency = bench.consumers * 25
    for driver, url in _urls(bench).items():
        rates = alternate(ROUNDS, {driver: lambda url=url: asyncio.run(
            _worker_drain(url, bench, n, concurrency))})[driver]
        stats = spread(rates)
        bench.add("async_worker_drain", subject(driver), RATE, stats["median"],
                  params={"jobs": n, "concurrency": concurrency, "batch": bench.batch, **stats})
    for fig in [f for f in bench.figures
                if (f.scenario == PROCESS and f.subject != OURS and "async" not in f.subject)
                or (f.scenario == "worker_drain" and f.subject == OURS)]:
        bench.figures.append(replace(fig, scenario="async_worker_drain",
                                     subject=("blocking Worker" if fig.subject == OURS
                                              else fig.subject),
                                     note=f"the same figure as in {fig.scenario}"))


async def _worker_drain(url: str, bench: Bench, n: int, concurrency: int) -> float:
    engine = _engine(url, bench)
    try:
        queue = AsyncDelayedQueue(engine, "async_worker_drain", table_name=bench.table_for())
        await queue.clear()
        due = datetime.now(UTC) - timedelta(seconds=1)
        for lo in range(0, n, 5000):
            await queue.offer_many([Message(f"m{i}", PAYLOAD, due)
                                    for i in range(lo, min(lo + 5000, n))])

        async def noop(envelope) -> None:
            return None

        worker = AsyncWorker(queue, noop, concurrency=concurrency, batch_size=bench.batch,
                             listeners=[WorkerListener()])
        began = time.perf_counter()
        handled = await worker.drain()
        return handled / (time.perf_counter() - began)
    finally:
        await engine.dispose()


def async_worker_wakeup(bench: Bench) -> None:
    for driver, url in _urls(bench).items():
        latencies, notify = asyncio.run(_wakeup(url, bench))
        params = {"probes": len(latencies), "notify": notify}
        for p in (50, 95):
            bench.add("async_worker_wakeup", subject(driver), f"p{p} offer-to-start ms",
                      percentile(latencies, p), params=params)


async def _wakeup(url: str, bench: Bench) -> tuple[list[float], bool]:
    engine = _engine(url, bench)
    try:
        queue = AsyncDelayedQueue(engine, "async_worker_wakeup", table_name=bench.table_for())
        await queue.clear()
        notify = queue.dao.notifications
        started: dict[str, float] = {}
        arrived = asyncio.Event()

        async def handler(envelope) -> None:
            started[envelope.key] = time.perf_counter()
            arrived.set()

        idle = timedelta(seconds=30 if notify else 0.25)
        worker = AsyncWorker(queue, handler, concurrency=1, batch_size=1, idle_poll=idle,
                             listeners=[WorkerListener()])
        running = asyncio.ensure_future(worker.run(signals=False))
        latencies = []
        try:
            await queue.offer("warm", PAYLOAD)  # listening once it has handled this
            await asyncio.wait_for(arrived.wait(), 60)
            for i in range(min(20, bench.sizes.probe_polls)):
                arrived.clear()
                await asyncio.sleep(0.05)  # idle again: this is what is measured
                offered = time.perf_counter()
                await queue.offer(f"w{i}", PAYLOAD)
                await asyncio.wait_for(arrived.wait(), 60)
                latencies.append((started[f"w{i}"] - offered) * 1000)
        finally:
            worker.stop()
            await running
        latencies.sort()
        return latencies, notify
    finally:
        await engine.dispose()
