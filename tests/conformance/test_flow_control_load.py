"""Flow control under load, once per database: serial groups through threads and killed
processes, a rate limit and a concurrency cap obeyed by several worker processes together, and
a quiet queue served promptly beside a flooded one.

Worker processes run ``sqldelay worker`` with the handlers below
(``tests.conformance.test_flow_control_load:…``); each writes its events to a file of its own.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from sqldelay import DelayedQueue, Message, SystemClock, Worker

from ..conftest import unique_name
from .test_worker_processes import _write, lines, worker_process

HANDLERS = "tests.conformance.test_flow_control_load"


def stamped(envelope) -> None:
    """Handler: one line per message, with the time it was claimed (its lock's expiry less
    the acquire timeout: the claim's own clock reading)."""
    claimed = envelope.locked_until - envelope.queue.acquire_timeout
    _write(f"{claimed.timestamp():.6f} {envelope.key}")


def slow_interval(envelope) -> None:
    """Handler: its start and end times, 0.2 s apart."""
    began = time.time()
    time.sleep(0.2)
    _write(f"{began:.6f} {time.time():.6f} {envelope.key}")


@pytest.fixture
def blocking_queue(engine, table_name):
    def make(**kwargs):
        return DelayedQueue(engine, unique_name("load"), table_name=table_name,
                            clock=SystemClock(), **kwargs)

    return make


def _skip_a_second_name_for_one_server(engine):
    if engine.dialect.name == "mysql" and engine.dialect.is_mariadb:
        pytest.skip("a MariaDB server: the mariadb target runs this against it already")


# ---- serial groups ---------------------------------------------------------------------------

GROUP_CONSUMER = """
import sys, time, sqlalchemy as sa
from datetime import timedelta
from sqldelay import DelayedQueue
queue = DelayedQueue(sa.create_engine(sys.argv[1]), sys.argv[2], table_name=sys.argv[3],
                     acquire_timeout=timedelta(seconds=2))
out = open(sys.argv[4], "a", buffering=1)
print("ready", flush=True)
while True:
    batch = queue.poll_many(10)
    for env in batch:
        out.write(f"start {time.time():.6f} {env.group} {env.payload}\\n")
        time.sleep(0.002)
        out.write(f"end {time.time():.6f} {env.group} {env.payload}\\n")
    if batch:
        queue.ack_many(batch)
    else:
        time.sleep(0.01)
"""


@pytest.mark.slow
def test_serial_groups_under_threads_and_killed_processes(engine, backend_url, table_name,
                                                          blocking_queue, tmp_path):
    """200 groups x 50 messages, 8 consumer threads and 2 consumer processes that are killed
    at random: within a group, handling intervals never overlap and go in due order; every
    message is handled; a group whose holder died resumes when its lock expires."""
    _skip_a_second_name_for_one_server(engine)
    groups, per_group = 200, 50
    queue = blocking_queue(acquire_timeout=timedelta(seconds=2))
    now = queue.clock.now()
    queue.offer_many([Message(f"g{g}-{i:02}", i, now - timedelta(seconds=per_group - i),
                              group=f"g{g}") for i in range(per_group) for g in range(groups)])
    events: list[tuple[str, float, str, int, int]] = []  # kind, time, group, index, consumer
    lock = threading.Lock()
    stop = threading.Event()

    failed: list[BaseException] = []  # what ended a consumer thread: none may end early

    def consume() -> None:
        try:
            while not stop.is_set():
                batch = queue.poll_many(10)
                for env in batch:
                    with lock:
                        events.append(("start", time.time(), env.group, env.payload, -1))
                    time.sleep(0.002)
                    with lock:
                        events.append(("end", time.time(), env.group, env.payload, -1))
                if batch:
                    queue.ack_many(batch)
                else:
                    stop.wait(0.01)
        except BaseException as exc:
            with lock:
                failed.append(exc)

    files = [tmp_path / f"consumer{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", GROUP_CONSUMER, backend_url, queue.name,
                               table_name, str(f)], stdout=subprocess.PIPE, text=True)
             for f in files]
    threads = [threading.Thread(target=consume) for _ in range(8)]
    killed_at = {}
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        for t in threads:
            t.start()
        rng = random.Random(7)
        for i, p in enumerate(procs):  # at random moments, while they hold messages
            stop.wait(rng.uniform(0.3, 1.5))
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            killed_at[i] = time.time()
        deadline = time.monotonic() + 300
        while _left(queue):
            assert time.monotonic() < deadline, "the groups were not drained in time"
            time.sleep(0.1)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for t in threads:
            if t.is_alive():
                t.join(30)
    assert failed == []
    for i, f in enumerate(files):
        for line in (f.read_text().splitlines() if f.exists() else []):
            kind, at, group, index = line.split()
            events.append((kind, float(at), group, int(index), i))
    intervals: dict[str, list[tuple[float, float, int]]] = {}
    starts: dict[tuple[str, int], tuple[float, int]] = {}
    for kind, at, group, index, consumer in sorted(events, key=lambda e: e[1]):
        if kind == "start":
            starts[(group, index)] = (at, consumer)
        else:
            intervals.setdefault(group, []).append((starts.pop((group, index))[0], at, index))
    # a handling that a kill cut off ended, at the latest, when its process was killed
    for (group, index), (began, consumer) in starts.items():
        intervals.setdefault(group, []).append((began, killed_at[consumer], index))
    assert len(intervals) == groups
    done = {(g, i) for g, spans in intervals.items() for *_, i in spans}
    assert len(done) == groups * per_group  # none lost
    for group, spans in intervals.items():
        spans.sort()
        for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"two messages of {group} handled at once"
        indexes = [i for *_, i in spans]
        assert indexes == sorted(indexes), f"{group} handled out of due order: {indexes}"


def _left(queue) -> int:
    stats = queue.stats()
    return stats.due + stats.scheduled + stats.in_flight


# ---- limits obeyed by every process together ---------------------------------------------

@pytest.mark.slow
def test_a_rate_limit_holds_across_four_worker_processes(engine, backend_url, table_name,
                                                         blocking_queue, tmp_path):
    """4 worker processes on one queue limited to 50/s: in the 10 s from the first claim they
    claim between 450 and 550 messages (a bucket of 50, refilled at 50 a second)."""
    _skip_a_second_name_for_one_server(engine)
    queue = blocking_queue()
    queue.offer_many([Message(f"m{i}", i) for i in range(1500)])
    queue.set_rate_limit(50)
    out = tmp_path / "out"
    procs = [worker_process(backend_url, table_name, queue.name, "stamped", out,
                            "--concurrency", "2", "--batch-size", "20", "--idle-poll", "0.05",
                            handlers=HANDLERS) for _ in range(4)]
    try:
        deadline = time.monotonic() + 60
        while not lines(out):
            assert time.monotonic() < deadline, "no worker handled anything"
            time.sleep(0.05)
        first = min(float(x.split()[0]) for x in lines(out))
        while time.time() < first + 11:
            time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    times = sorted(float(x.split()[0]) for x in lines(out))
    in_window = [t for t in times if first <= t < first + 10]
    assert 450 <= len(in_window) <= 550, f"{len(in_window)} claimed in 10 s"
    assert len({x.split()[1] for x in lines(out)}) == len(lines(out))  # each once


@pytest.mark.slow
def test_a_concurrency_cap_holds_across_four_worker_processes(engine, backend_url, table_name,
                                                              blocking_queue, tmp_path):
    """A cap of 3 in flight, 4 processes of 2 handlers each: never more than 3 at once."""
    _skip_a_second_name_for_one_server(engine)
    queue = blocking_queue()
    queue.offer_many([Message(f"m{i}", i) for i in range(40)])
    queue.set_concurrency_limit(3)
    out = tmp_path / "out"
    procs = [worker_process(backend_url, table_name, queue.name, "slow_interval", out, "--drain",
                            "--concurrency", "2", "--batch-size", "2", handlers=HANDLERS)
             for _ in range(4)]
    try:
        assert [p.wait(180) for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    spans = [tuple(map(float, x.split()[:2])) for x in lines(out)]
    assert len(spans) == 40 and queue.stats().due == 0
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running, most = 0, 0
    for _, step in edges:  # an end and a start at one instant: the end first
        running += step
        most = max(most, running)
    assert most <= 3
    assert most == 3  # the cap, not something smaller, was the limit


# ---- fairness ------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_quiet_queue_is_served_promptly_beside_a_flooded_one(engine, blocking_queue):
    """One worker over queue A (100,000 due) and queue B (a message falling due every 0.1 s):
    B's messages are handled within a second of falling due (benchmarks/ reports the figure)."""
    _skip_a_second_name_for_one_server(engine)
    flooded, quiet = blocking_queue(), blocking_queue()
    due = flooded.clock.now() - timedelta(seconds=1)
    for lo in range(0, 100_000, 10_000):
        flooded.offer_many([Message(f"a{i}", i, due) for i in range(lo, lo + 10_000)])
    lags: list[tuple[float, int]] = []  # a quiet message's lag, and the flood still left
    flood_handled = [0]
    lock = threading.Lock()

    def handler(envelope):
        with lock:
            if envelope.queue is quiet:
                lag = (SystemClock().now() - envelope.scheduled_at).total_seconds()
                lags.append((lag, 100_000 - flood_handled[0]))
            else:
                flood_handled[0] += 1

    # a message of the quiet queue falls due every 0.1 s for 5 s, from a second on; offered
    # now, so that no producer competes with the worker for the database meanwhile (SQLite
    # has one writer at a time: a producer's wait would count as the worker's lag)
    start = SystemClock().now() + timedelta(seconds=1)
    quiet.offer_many([Message(f"b{i}", i, start + timedelta(seconds=i / 10)) for i in range(50)])
    worker = Worker({"flooded": flooded, "quiet": quiet}, handler, concurrency=4,
                    batch_size=100, wake_ups=False, idle_poll=timedelta(milliseconds=100),
                    listeners=[])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(lags) < 50:
            assert time.monotonic() < deadline, f"{50 - len(lags)} quiet messages waiting"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(60)
    # what counts is a quiet message handled while the flood was still there
    flooded_lags = [lag for lag, left in lags if left > 0]
    assert len(flooded_lags) >= 20, "the flood was gone before the test could measure"
    p99 = statistics.quantiles(flooded_lags, n=100)[98]
    assert p99 < 1.0, f"quiet queue p99 lag {p99:.3f} s"
