"""The blocking runner: threads where ``concurrency_async`` has asyncio tasks.

The blocking front end is generated from the async one and imports this module where the async
one imports ``concurrency_async``; both give the same names (see that module's docstring).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any, TypeVar

import sqlalchemy as sa
from tenacity import Retrying

from .concurrency_async import is_async_callable
from .errors import InvalidArgumentError

T = TypeVar("T")

# a call this runtime makes, returning a T: a plain function here, a coroutine function in
# ``concurrency_async``
Call = Callable[[], T]
log = logging.getLogger("sqldelay")

Connection = sa.Connection
Engine = sa.Engine
Event = threading.Event
Condition = threading.Condition
Lock = threading.Lock

__all__ = ["Call", "Condition", "Connection", "Engine", "Event", "HandlerRunner", "Lock",
           "Relay", "Retrying", "Spawned", "check_connection", "engine_problem",
           "install_signal_handlers", "notify_all_soon", "run_blocking", "run_op", "run_to_end",
           "side_by_side", "sleep", "spawn", "threadsafe", "wait_event", "wake_handlers"]


def engine_problem(engine: Any, front: str) -> str | None:
    """Why ``engine`` cannot carry the front-end class named ``front`` (None: it can)."""
    if isinstance(engine, sa.Engine):
        return None
    return (f"{front} needs an Engine (sqlalchemy.create_engine), got {type(engine).__name__}; "
            f"with an AsyncEngine use Async{front}")


def check_connection(conn: Any) -> None:
    """Refuse a ``connection=`` of the other front end, before anything runs."""
    if not isinstance(conn, sa.Connection):
        raise InvalidArgumentError(
            f"connection= takes a Connection (with engine.connect() as conn), "
            f"got {type(conn).__name__}")


def run_op(conn: sa.Connection, op: Callable[[sa.Connection], T]) -> T:
    """Run a database operation (a function of a Connection) on ``conn``."""
    return op(conn)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; whether it is set."""
    return event.wait(timeout)


def run_blocking(fn: Callable[[], T]) -> T:
    """Call ``fn``, which blocks (threads may)."""
    return fn()


def run_to_end(fn: Callable[[], T]) -> T:
    """Run ``fn()`` where nothing else runs yet (a forked process)."""
    return fn()


def threadsafe(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn``, callable from any thread (threads' events and conditions already are)."""
    return fn


def notify_all_soon(cond: threading.Condition) -> None:
    """Wake every waiter of ``cond``."""
    with cond:
        cond.notify_all()


def wake_handlers(cond: threading.Condition, count: int) -> None:
    """Under ``cond``'s lock, ``count`` new messages in the buffer of the handler threads
    waiting on it: wake as many (threads run side by side; ``Relay`` has nothing to add)."""
    cond.notify(count)


class Relay:
    """Among threads, ``wake_handlers`` woke a handler for each message already: ``took()``
    passes nothing on (the event loop's ``Relay`` does)."""

    def __init__(self, cond: threading.Condition, more: Callable[[], bool]) -> None:
        pass

    def took(self) -> None:
        pass


class Spawned:
    """A thread running beside the caller: ``join(timeout)``, ``alive``."""

    def __init__(self, thread: threading.Thread) -> None:
        self._thread = thread

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def is_current(self) -> bool:
        """Whether the caller runs in this thread (which must not wait for itself)."""
        return threading.current_thread() is self._thread

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


def spawn(target: Callable[[], None], name: str) -> Spawned:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return Spawned(thread)


class HandlerRunner:
    """Calls a user's handler in the calling thread (each handler loop is a thread)."""

    def __init__(self, threads: int) -> None:
        self._threads = threads

    @staticmethod
    def check(handler: Callable[..., Any]) -> None:
        """Refuse a handler that a call here would not run: an ``async def`` (or an object
        whose ``__call__`` is one) returns a coroutine nobody awaits, and its message would
        be acked unhandled."""
        if is_async_callable(handler):
            raise InvalidArgumentError(
                f"handler {handler!r} is asynchronous: the blocking Worker would ack its "
                "messages without running it; use AsyncWorker")

    def call(self, handler: Callable[..., Any], *args: Any) -> Any:
        return handler(*args)

    def call_with_connection(self, handler: Callable[..., Any], envelope: Any,
                             conn: sa.Connection) -> Any:
        return handler(envelope, conn)

    def close(self) -> None:
        pass


_side_pool: ThreadPoolExecutor | None = None
_side_pool_lock = threading.Lock()


def _forget_side_pool() -> None:
    # a forked child (Worker(processes=N)) inherits the pool without its threads: work
    # submitted there would wait for ever, so the child starts a pool of its own
    global _side_pool, _side_pool_lock
    _side_pool, _side_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_side_pool)


def side_by_side(calls: Sequence[Call[T]]) -> list[T | Exception]:
    """Run ``calls`` at the same time (a sharded queue writes its shards so): the first in
    this thread, the others in a shared pool of threads; each one's result, or the exception
    it raised, in the order of ``calls``."""
    global _side_pool
    if len(calls) > 1:
        with _side_pool_lock:
            if _side_pool is None:
                _side_pool = ThreadPoolExecutor(32, thread_name_prefix="sqldelay-side")
        others = [_side_pool.submit(call) for call in calls[1:]]
    else:
        others = []
    results: list[T | Exception] = []
    try:
        results.append(calls[0]())
    except Exception as exc:
        results.append(exc)
    for future in others:
        try:
            results.append(future.result())
        except Exception as exc:
            results.append(exc)
    return results


def install_signal_handlers(stop: Callable[[], None]) -> Callable[[], None]:
    """Call ``stop`` on SIGTERM and SIGINT (main thread only: Python delivers signals there);
    returns what restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        # stop() takes locks the interrupted code may hold: call it from a fresh thread
        threading.Thread(target=stop, daemon=True).start()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore
