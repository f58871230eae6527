"""A worker in one process and in several: ``sqldelay worker --processes N``.

worker_processes: ``process_messages`` due no-op messages (``fill``, untimed) drained by
``sqldelay worker benchmarks.handlers:noop --concurrency consumers --batch-size batch`` with
``--processes 1`` and ``--processes 2``, and by the in-process threaded ``Worker`` (the same
settings, ``run()`` on a thread of this process), in alternating rounds, each in a fresh
table. Each round runs from
the command's start until this process sees the queue empty (``stats()`` every 20 ms), then
stops the worker (SIGTERM, as an operator would). Figures per subject, medians of the rounds:
messages/s from start to empty; start-up (from the start until the first claim shows in the
queue's counts) and messages/s after it; the workers' CPU per message from the first claim to
empty (every process of the command, from /proc; this process's own CPU for the threaded
one, which includes the 20 ms polling); and on PostgreSQL the CPU per message of the server
processes that served the worker's connections (found by their ``application_name``).
On a 2-core machine shared with the database the rate cannot double; CPU per message is what
carries over to a machine with more cores.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from sqldelay import DelayedQueue
from sqldelay.worker import Worker
from tools.servers import process_cpu, tree_cpu_seconds

from ..handlers import noop
from ..harness import OURS, Bench, alternate, fill, rounds_for, spread

ROOT = Path(__file__).resolve().parents[2]  # the directory holding benchmarks/
RATE = "messages/s"
POLL = 0.02  # seconds between this process's looks at the queue
TIMEOUT = 1800.0


class _Backends:
    """The CPU used by the PostgreSQL server processes whose connections carry ``tag`` as
    their application_name, read from /proc while they live (None elsewhere)."""

    def __init__(self, bench: Bench, tag: str) -> None:
        self.engine, self.tag = bench.engine, tag
        self.used: dict[int, float] = {}
        self.readable = bench.dialect == "postgresql" and sa.make_url(bench.url).host in (
            "127.0.0.1", "localhost")

    def sample(self) -> None:
        if not self.readable:
            return
        with self.engine.connect() as conn:
            pids = conn.execute(sa.text("SELECT pid FROM pg_stat_activity "
                                        "WHERE application_name = :tag"), {"tag": self.tag})
            for (pid,) in pids:
                got = process_cpu(pid)
                if got is not None:
                    self.used[pid] = max(self.used.get(pid, 0.0), got[1])

    def seconds(self) -> float | None:
        return sum(self.used.values()) if self.readable else None


def _tagged(bench: Bench, tag: str) -> str:
    url = sa.make_url(bench.url)
    if bench.dialect == "postgresql":
        url = url.update_query_dict({"application_name": tag})
    return url.render_as_string(hide_password=False)


class _Command:
    """``sqldelay worker`` with ``processes`` processes, in a process of its own."""

    def __init__(self, bench: Bench, queue: DelayedQueue, processes: int, tag: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sqldelay.cli", "worker", f"{noop.__module__}:noop",
             "--url", _tagged(bench, tag), "--table", queue.dao.table.name, "--queue", queue.name,
             "--concurrency", str(bench.consumers), "--batch-size", str(bench.batch),
             "--processes", str(processes)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        if self.proc.returncode != 0:
            raise RuntimeError(f"sqldelay worker ended with {self.proc.returncode}:\n{err}")


class _Threads:
    """The threaded ``Worker`` in this process, over an engine of its own."""

    def __init__(self, bench: Bench, queue: DelayedQueue, tag: str) -> None:
        self.engine = sa.create_engine(_tagged(bench, tag))
        own = DelayedQueue(self.engine, queue.name, table_name=queue.dao.table.name)
        self.worker = Worker(own, noop, concurrency=bench.consumers, batch_size=bench.batch)
        self.thread = threading.Thread(target=self.worker.run, kwargs={"signals": False})
        self.thread.start()

    def cpu(self) -> float:
        return time.process_time()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join()
        self.engine.dispose()


def _round(bench: Bench, n: int, start: Callable[[DelayedQueue, str], object],
           results: list[dict], table: str) -> float:
    """Fill, start the subject, wait until the queue is empty, stop it; messages/s. Each round
    in a table of its own: what earlier rounds left (PostgreSQL's dead rows, where autovacuum
    has not run) would weigh on later subjects, slowing the claims of whoever comes last."""
    queue = bench.queue("worker_processes", table=table)
    fill(queue, n)
    tag = f"sqldelay-bench-{os.getpid()}-{len(results)}"
    backends = _Backends(bench, tag)
    began = time.perf_counter()
    subject = start(queue, tag)
    first = None
    try:
        while True:
            stats = queue.stats()
            now = time.perf_counter()
            if first is None and (stats.due < n or stats.in_flight):
                first = (now, subject.cpu())
            backends.sample()
            if stats.due == stats.in_flight == stats.scheduled == 0:
                break
            if now - began > TIMEOUT:
                raise RuntimeError(f"the queue was not empty after {TIMEOUT:.0f}s")
            time.sleep(POLL)
        cpu = subject.cpu() - first[1]
        backends.sample()
    finally:
        subject.stop()
    server = backends.seconds()
    after_start_up = now - first[0]  # none where the first look already found the queue empty
    results.append({"start_to_empty_s": now - began, "start_up_s": first[0] - began,
                    "after_start_up": n / after_start_up if after_start_up > 0 else None,
                    "client_cpu_us_per_message": cpu / n * 1e6,
                    "server_cpu_us_per_message": None if server is None else server / n * 1e6})
    return n / (now - began)


def worker_processes(bench: Bench) -> None:
    n = bench.sizes.process_messages
    subjects: dict[str, tuple[str, Callable[[DelayedQueue, str], object]]] = {
        OURS: ("sqldelay worker --processes 1", lambda q, tag: _Command(bench, q, 1, tag)),
        f"{OURS} 2 processes": ("sqldelay worker --processes 2",
                                lambda q, tag: _Command(bench, q, 2, tag)),
        f"{OURS} Worker in process": ("Worker(...).run() on a thread of the benchmark",
                                      lambda q, tag: _Threads(bench, q, tag)),
    }
    details: dict[str, list[dict]] = {subject: [] for subject in subjects}
    tables = (bench.table_for(f"_wp{i}") for i in itertools.count())
    runs = alternate(rounds_for(n),
                     {subject: (lambda s=subject: _round(bench, n, subjects[s][1], details[s],
                                                        next(tables)))
                      for subject in subjects})
    for subject, rates in runs.items():
        rounds = details[subject]
        measured = {key: [r[key] for r in rounds if r[key] is not None] for key in rounds[0]}
        medians = {key: spread(values)["median"] for key, values in measured.items() if values}
        bench.add("worker_processes", subject, RATE, spread(rates)["median"],
                  params={"how": subjects[subject][0], "messages": n,
                          "concurrency": bench.consumers, "batch": bench.batch,
                          **spread(rates), **medians, "rounds": rounds})
