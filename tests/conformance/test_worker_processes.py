"""`sqldelay worker` in real processes: SIGTERM drains and releases; several processes share a
large queue and handle each message exactly once.

The handlers below run inside those processes (``tests.conformance.test_worker_processes:…``);
each writes one line per event to a file of its own, named after its process id.
"""

from __future__ import annotations

import asyncio
import collections
import glob
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, Message, SystemClock, Worker, create_schema

from ..helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "tests.conformance.test_worker_processes"
_out_lock = threading.Lock()
_out = None


def _write(line: str) -> None:
    global _out
    with _out_lock:
        if _out is None:
            _out = open(f"{os.environ['SQLDELAY_TEST_OUT']}.{os.getpid()}", "a", buffering=1)
        _out.write(line + "\n")


def record(envelope) -> None:
    _write(envelope.key)


# A process that starts first can drain a queue of 20,000 alone before the others have
# connected (a CI run on a loaded machine: all 20,000 by one of three). ``shared`` handlers
# record, then wait until a second process has recorded too (at most a minute, then go on),
# so that the test sees the processes share the queue rather than race to start.
PEER_WAIT = 60.0
_peer_seen = False


def _peer_recorded() -> bool:
    global _peer_seen
    _peer_seen = _peer_seen or len(glob.glob(f"{os.environ['SQLDELAY_TEST_OUT']}.*")) >= 2
    return _peer_seen


def shared(envelope) -> None:
    record(envelope)
    deadline = time.monotonic() + PEER_WAIT
    while not _peer_recorded() and time.monotonic() < deadline:
        time.sleep(0.01)


def slow(envelope) -> None:
    _write(f"start {envelope.key}")
    time.sleep(0.5)  # a handler at work when SIGTERM arrives
    _write(f"done {envelope.key}")


def timed(envelope) -> None:
    _write(f"start {envelope.key} {time.monotonic()}")
    time.sleep(0.05)  # the handler's work
    _write(f"done {envelope.key} {time.monotonic()}")


# the same as async def: `sqldelay worker` runs them on the asyncio worker
async def record_async(envelope) -> None:
    record(envelope)


async def shared_async(envelope) -> None:
    record(envelope)
    deadline = time.monotonic() + PEER_WAIT
    while not _peer_recorded() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def slow_async(envelope) -> None:
    _write(f"start {envelope.key}")
    await asyncio.sleep(0.5)
    _write(f"done {envelope.key}")


async def timed_async(envelope) -> None:
    _write(f"start {envelope.key} {time.monotonic()}")
    await asyncio.sleep(0.05)
    _write(f"done {envelope.key} {time.monotonic()}")


def handler_for(target, name: str) -> str:
    return f"{name}_async" if target.is_async else name


def url_for(target, backend_url: str) -> str:
    return target.async_url(backend_url) if target.is_async else backend_url


def lines(out: Path) -> list[str]:
    return [line for path in out.parent.glob(f"{out.name}.*")
            for line in path.read_text().splitlines()]


def worker_process(url: str, table: str, queue: str, handler: str, out: Path,
                   *extra: str, handlers: str = HANDLERS) -> subprocess.Popen:
    """``sqldelay worker handlers:handler`` in a process of its own, writing to ``out.<pid>``."""
    script = Path(sys.executable).with_name("sqldelay")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "sqldelay.cli"]
    return subprocess.Popen(
        [*command, "worker", f"{handlers}:{handler}", "--url", url, "--table", table,
         "--queue", queue, *extra],
        cwd=ROOT, env={**os.environ, "SQLDELAY_TEST_OUT": str(out)})


def test_sigterm_finishes_running_handlers_and_releases_the_rest(make_queue, backend_url,
                                                                  table_name, tmp_path, target):
    q = make_queue(clock=SystemClock())
    keys = [f"k{i}" for i in range(10)]
    q.offer_many([Message(k, i) for i, k in enumerate(keys)])
    out = tmp_path / "out"
    proc = worker_process(url_for(target, backend_url), table_name, q.name,
                          handler_for(target, "slow"), out,
                          "--concurrency", "2", "--batch-size", "10", "--grace", "30")
    try:
        wait_for(lambda: sum(x.startswith("start") for x in lines(out)) >= 2,
                 what="two handlers to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    started = {x.split()[1] for x in lines(out) if x.startswith("start")}
    done = {x.split()[1] for x in lines(out) if x.startswith("done")}
    assert started == done and 2 <= len(done) < len(keys)
    for key in keys:
        message = q.get(key)
        if key in done:
            assert message is None, f"{key} was handled but not acked"
        else:  # released at once: due now, not locked for the 5-minute acquire timeout
            assert message is not None and not message.in_flight, key
    assert q.stats().due == len(keys) - len(done)


def test_worker_processes_handle_each_of_20000_messages_exactly_once(make_queue, engine,
                                                                     backend_url, table_name,
                                                                     tmp_path, target):
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer at a time; shared-queue processes run on servers")
    if engine.dialect.name == "mysql" and engine.dialect.is_mariadb:
        pytest.skip("a MariaDB server: the mariadb backend runs this against it already")
    q = make_queue(clock=SystemClock())
    keys = [f"m{i}" for i in range(20_000)]
    q.offer_many([Message(k, i) for i, k in enumerate(keys)])
    out = tmp_path / "out"
    procs = [worker_process(url_for(target, backend_url), table_name, q.name,
                            handler_for(target, "shared"), out, "--drain",
                            "--concurrency", "2", "--batch-size", "200")
             for _ in range(3)]
    try:
        assert [p.wait(120) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    counts = collections.Counter(lines(out))
    assert set(counts) == set(keys), f"{len(set(keys) - set(counts))} messages never handled"
    assert [k for k, n in counts.items() if n > 1] == []
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.in_flight) == (0, 0, 0)
    assert len(list(out.parent.glob(f"{out.name}.*"))) >= 2, "only one process did any work"


# what a killed worker may leave unacked of the handlers that returned before the kill: those
# that returned within its ack window (20 ms) and the ack's round trip, with room for a slow one
ACK_ALLOWANCE = 0.5


@pytest.mark.slow
def test_after_sigkill_only_the_messages_in_flight_and_just_handled_come_back(
        make_queue, backend_url, table_name, tmp_path, target, front):
    q = make_queue(clock=SystemClock())
    keys = [f"k{i:02}" for i in range(40)]
    q.offer_many([Message(k, i) for i, k in enumerate(keys)])
    out = tmp_path / "out"
    # one batch holds every message: before acks left on their own, none of the batch's
    # successes was acked until the batch was done
    proc = worker_process(url_for(target, backend_url), table_name, q.name,
                          handler_for(target, "timed"), out, "--batch-size", "40")
    try:
        wait_for(lambda: sum(x.startswith("done") for x in lines(out)) >= 25,
                 what="25 handlers to return")
        killed_at = time.monotonic()
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = lines(out)
    done = {x.split()[1]: float(x.split()[2]) for x in first if x.startswith("done")}
    started = {x.split()[1] for x in first if x.startswith("start")}
    assert q.release_stuck(timedelta(0)) > 0  # the killed worker's locks, back at once
    again: list[str] = []
    front.worker(q, lambda envelope: again.append(envelope.key), batch_size=40,
                 listeners=[]).drain()
    assert sorted(set(again) | set(done)) == keys and len(again) == len(set(again))
    returned_again = {k for k in again if k in done}
    just_returned = {k for k, at in done.items() if at >= killed_at - ACK_ALLOWANCE}
    assert returned_again <= just_returned, (
        f"{len(returned_again - just_returned)} handled long before the kill came back")
    assert set(again) - set(done) == set(keys) - set(done)  # the rest, started or not
    assert started - set(done) <= set(again)


def _children(parent: int) -> set[int]:
    """The processes whose parent is ``parent`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[1]) == parent:
            found.add(int(stat.parent.name))
    return found


def test_a_worker_of_two_processes_shares_the_queue_and_ends_with_its_parent(
        make_queue, backend_url, table_name, tmp_path, target):
    q = make_queue(clock=SystemClock())
    first = [f"a{i}" for i in range(200)]
    q.offer_many([Message(k, i) for i, k in enumerate(first)])
    out = tmp_path / "out"
    parent = worker_process(url_for(target, backend_url), table_name, q.name,
                            handler_for(target, "record"), out,
                            "--processes", "2", "--batch-size", "10")
    try:
        wait_for(lambda: len(_children(parent.pid)) == 2, what="two worker processes")
        wait_for(lambda: q.stats().due + q.stats().in_flight == 0, what="the first messages")
        children = _children(parent.pid)
        killed = min(children)
        os.kill(killed, signal.SIGKILL)  # one dies: the parent starts another in its place
        wait_for(lambda: len(_children(parent.pid) - {killed}) == 2, what="a new process")
        children |= _children(parent.pid)
        second = [f"b{i}" for i in range(100)]
        q.offer_many([Message(k, i) for i, k in enumerate(second)])
        wait_for(lambda: q.stats().due + q.stats().in_flight == 0, what="the second messages")
        parent.send_signal(signal.SIGTERM)  # every process stops, and then the parent
        assert parent.wait(60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    counts = collections.Counter(lines(out))
    assert counts == dict.fromkeys(first + second, 1)
    workers = {int(path.suffix[1:]) for path in out.parent.glob(f"{out.name}.*")}
    assert parent.pid not in workers and workers <= children  # the parent only watches


def _drain_in_child(url: str, table: str) -> None:
    # a forked child: its own engine, the queue drained by a worker that acks as it goes
    engine = sa.create_engine(url)
    q = DelayedQueue(engine, "forked", table_name=table)
    handled = Worker(q, lambda env: None, batch_size=10).drain()
    os._exit(0 if handled == 50 and q.stats().due == 0 else 1)


def test_a_worker_forked_after_one_ran_in_the_parent_still_acks(tmp_path):
    # Worker(processes=N) forks; the parent may have run workers (or sharded calls) before,
    # whose helper threads the child does not inherit
    url = f"sqlite:///{tmp_path / 'fork.db'}"
    engine = sa.create_engine(url)
    create_schema(engine, table_name="forked_t")
    q = DelayedQueue(engine, "forked", table_name="forked_t")
    q.offer_many([Message(f"p{i}", i) for i in range(50)])
    assert Worker(q, lambda env: None, batch_size=10).drain() == 50
    q.offer_many([Message(f"c{i}", i) for i in range(50)])
    engine.dispose()
    child = multiprocessing.get_context("fork").Process(target=_drain_in_child,
                                                       args=(url, "forked_t"))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0
    assert q.stats().due == 0
