"""Peers on the same PostgreSQL server: pgqueuer and procrastinate move the same N no-op jobs.

Both enqueue in batches of ``batch`` from ``producers`` concurrent connections (their batch
APIs: pgqueuer's list ``enqueue``, procrastinate's ``batch_defer_async``) and then drain with
``consumers`` workers: pgqueuer's QueueManager over asyncpg with ``batch_size=batch``,
procrastinate's worker with ``wait=False`` (stop when empty), ``concurrency=batch``, no
LISTEN/NOTIFY polling delay and successful jobs deleted. Ours does the same with offer_many
and poll_many + ack_many from as many threads. The peers install their schemas in their own
database (``bench_peers`` on the same server, dropped and made anew each run). The subjects
take turns (ours, pgqueuer, procrastinate, ours, …) and each figure is the median of the rounds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sqldelay import Message

from ..harness import OURS, PAYLOAD, Bench, alternate, drain, rounds_for, run_threads, spread

ENQUEUE, PROCESS = "peers_enqueue", "peers_process"
RATE = "jobs/s"
PEERS_DB = "bench_peers"


def peers(bench: Bench) -> None:
    n = bench.sizes.peer_jobs // bench.batch * bench.batch
    params = {"jobs": n, "batch": bench.batch, "producers": bench.producers,
              "consumers": bench.consumers}
    subjects = {OURS: lambda: _ours(bench, n)}
    if bench.dialect == "postgresql":
        conninfo = peers_database(bench)
        for name, needs, run in (("pgqueuer", ("pgqueuer", "asyncpg"), pgqueuer_round),
                                 ("procrastinate", ("procrastinate",), _procrastinate)):
            if any(importlib.util.find_spec(module) is None for module in needs):
                for scenario in (ENQUEUE, PROCESS):
                    bench.add(scenario, name, RATE, None, params=params,
                              note="not installed: pip install -e '.[bench-peers]'")
                continue
            subjects[name] = lambda run=run: asyncio.run(run(bench, conninfo, n))
    runs = alternate(rounds_for(n), subjects)
    for subject, values in runs.items():
        enqueue = spread([n / enqueue_s for enqueue_s, _, _ in values])
        bench.add(ENQUEUE, subject, RATE, enqueue["median"], params={**params, **enqueue})
        process = spread([done / process_s for _, process_s, done in values])
        bench.add(PROCESS, subject, RATE, process["median"], params={**params, **process})


def _ours(bench: Bench, n: int) -> tuple[float, float, int]:
    """Our enqueue (offer_many) and drain (poll_many + ack_many threads): the seconds of each
    and the jobs drained."""
    queue = bench.queue("peers")
    batches = n // bench.batch
    now = datetime.now(UTC)

    def produce(i: int) -> None:
        for b in range(i, batches, bench.producers):
            queue.offer_many([Message(f"j{b}-{j}", PAYLOAD, now) for j in range(bench.batch)])

    enqueue_s = run_threads(bench.producers, produce)
    process_s = run_threads(bench.consumers, drain(queue, bench.batch))
    done = n - queue.stats().due
    queue.clear()
    return enqueue_s, process_s, done


def peers_database(bench: Bench) -> str:
    """A fresh database for the peers' schemas on our server; its libpq connection string."""
    url = sa.make_url(bench.peers_url) if bench.peers_url else \
        bench.engine.url.set(database=PEERS_DB)
    if not bench.peers_url:
        with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {PEERS_DB}")
            conn.exec_driver_sql(f"CREATE DATABASE {PEERS_DB}")
    parts = {"host": url.host or "127.0.0.1", "port": url.port or 5432,
             "user": url.username or "postgres", "dbname": url.database,
             "password": url.password}
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


async def pgqueuer_round(bench: Bench, conninfo: str, n: int) -> tuple[float, float, int]:
    # asyncpg, as pgqueuer's own benchmark tool uses; workers run in continuous mode and are
    # shut down when the last job has been handled (drain mode adds an idle wait at the end)
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    dsn = _dsn(conninfo)
    setup = await asyncpg.connect(dsn)
    await Queries(AsyncpgDriver(setup)).install()
    payload = b'{"job":"noop"}'
    batches = n // bench.batch

    async def produce(i: int) -> None:
        conn = await asyncpg.connect(dsn)
        queries = Queries(AsyncpgDriver(conn))
        for _ in range(i, batches, bench.producers):
            await queries.enqueue(["noop"] * bench.batch, [payload] * bench.batch,
                                  [0] * bench.batch)
        await conn.close()

    began = time.perf_counter()
    await asyncio.gather(*(produce(i) for i in range(bench.producers)))
    enqueue_s = time.perf_counter() - began

    done = [0]
    finished = asyncio.Event()
    managers = []

    async def consume() -> None:
        conn = await asyncpg.connect(dsn)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))
        managers.append(qm)

        @qm.entrypoint("noop")
        async def noop(job) -> None:
            done[0] += 1
            if done[0] >= n:
                finished.set()

        await qm.run(batch_size=bench.batch)
        await conn.close()

    async def stop_when_done() -> None:
        await finished.wait()
        for qm in managers:
            qm.shutdown.set()

    began = time.perf_counter()
    await asyncio.gather(stop_when_done(), *(consume() for _ in range(bench.consumers)))
    process_s = time.perf_counter() - began
    await Queries(AsyncpgDriver(setup)).uninstall()
    await setup.close()
    return enqueue_s, process_s, done[0]


def _dsn(conninfo: str) -> str:
    parts = dict(p.split("=", 1) for p in conninfo.split())
    auth = parts["user"] + (f":{parts['password']}" if "password" in parts else "")
    return f"postgresql://{auth}@{parts['host']}:{parts['port']}/{parts['dbname']}"


async def _procrastinate(bench: Bench, conninfo: str, n: int) -> tuple[float, float, int]:
    async with procrastinate_noop(conninfo, bench.producers + bench.consumers + 2) as (
            app, noop, done):
        batches = n // bench.batch

        async def produce(i: int) -> None:
            for _ in range(i, batches, bench.producers):
                await noop.batch_defer_async(*([{}] * bench.batch))

        began = time.perf_counter()
        await asyncio.gather(*(produce(i) for i in range(bench.producers)))
        enqueue_s = time.perf_counter() - began
        began = time.perf_counter()
        await procrastinate_workers(app, bench)
        process_s = time.perf_counter() - began
    return enqueue_s, process_s, done[0]


@asynccontextmanager
async def procrastinate_noop(conninfo: str, pool: int) -> AsyncIterator[tuple[Any, Any, list]]:
    """procrastinate's app on the peers' database (its schema installed the first time), its
    no-op task, and the count of the task's runs."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=1, max_size=pool))
    done = [0]

    @app.task(name="noop")
    async def noop() -> None:
        done[0] += 1

    async with app.open_async():
        installed = await app.connector.execute_query_one_async(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS installed")
        if not installed["installed"]:  # the first round installs it, the others reuse it
            await app.schema_manager.apply_schema_async()
        yield app, noop, done


async def procrastinate_workers(app: Any, bench: Bench) -> None:
    """``consumers`` procrastinate workers until no job is left: ``concurrency=batch``, no
    LISTEN/NOTIFY, successful jobs deleted."""
    await asyncio.gather(*(app.run_worker_async(
        concurrency=bench.batch, wait=False, listen_notify=False, delete_jobs="successful",
        install_signal_handlers=False) for _ in range(bench.consumers)))
