"""What several test modules need: waiting for a condition with a deadline, a thread of the
test's own, a hook around a queue's claims, a free port, a server that answers, and which
indexes a PostgreSQL plan sorts the rows of."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from .fronts import unwrap

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 20.0, what: str = "condition", *,
             meanwhile: Callable[[], None] | None = None, interval: float = 0.01) -> T:
    """Poll ``condition`` until it returns something true, and return that; fail the test
    (an AssertionError naming ``what``) after ``timeout`` seconds. ``meanwhile`` runs before
    every poll and may fail the test sooner (a thread the wait depends on has died)."""
    deadline = time.monotonic() + timeout
    while True:
        if meanwhile is not None:
            meanwhile()
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def in_thread(target: Callable[[], object]) -> threading.Thread:
    """``target`` running on a daemon thread, started."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def around_claims(q, enter, leave=lambda n: None):
    """Have every claim of ``q`` (of either front end) call ``enter(n)`` before it and
    ``leave(n)`` after it, n counting the claims from 1; ``enter`` may block (off the event
    loop on the asyncio front end)."""
    queue = unwrap(q)
    claim, numbers = queue.poll_many, itertools.count(1)
    if inspect.iscoroutinefunction(claim):
        async def poll_many(*args, **kwargs):
            n = next(numbers)
            await asyncio.to_thread(enter, n)
            try:
                return await claim(*args, **kwargs)
            finally:
                leave(n)
    else:
        def poll_many(*args, **kwargs):
            n = next(numbers)
            enter(n)
            try:
                return claim(*args, **kwargs)
            finally:
                leave(n)
    queue.poll_many = poll_many


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_connectable(url: str, timeout: float = 30.0) -> None:
    """Return once the database at ``url`` answers a query; raise its last error after
    ``timeout`` seconds."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        engine.dispose()


def sorted_reads(text: str, table: str) -> frozenset[str]:
    """The indexes of ``table`` whose rows a Sort of PostgreSQL's plan ``text`` takes with no
    Limit between them: a sort of what a read returns, however many (a sort of rows that a
    Limit bounds, as a claim's two reads merged, sorts no more than the claim takes)."""
    nodes = []  # (depth, node text): a node starts its line, or follows "->"
    for line in text.splitlines():
        body = line.lstrip()
        if body.startswith("->") or not nodes:
            nodes.append((len(line) - len(body), body.removeprefix("->").strip()))
    found = set()
    for i, (depth, node) in enumerate(nodes):
        if not node.startswith(("Sort", "Incremental Sort")):
            continue
        bounded_below = None  # the depth of a Limit met under the sort
        for below, child in nodes[i + 1:]:
            if below <= depth:
                break
            if bounded_below is not None and below > bounded_below:
                continue
            bounded_below = below if child.startswith("Limit") else None
            scan = re.match(rf"Index (?:Only )?Scan (?:Backward )?using (\S+) on {table}\b(?!_)"
                            rf"|Bitmap Index Scan on ({table}_\S+)", child)
            if scan:
                found.add(scan.group(1) or scan.group(2))
    return frozenset(found)
