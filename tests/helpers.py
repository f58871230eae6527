"""What several test modules need: waiting for a condition with a deadline, a thread of the
test's own, a hook around a queue's claims."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from collections.abc import Callable
from typing import TypeVar

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
