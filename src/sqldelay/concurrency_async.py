"""The asyncio runner: what the async front end (``*_async.py``) needs from its runtime.

sqldelay's front ends are written once, for asyncio, and the blocking ones are generated from
them (``tools/async_to_sync.py``: it drops ``async``/``await`` and renames ``AsyncX`` to
``X`` and ``*_async`` modules to their plain names). The two runtimes differ only here: this
module and ``concurrency.py`` give the same names, for asyncio tasks and for threads.

Database operations themselves are plain functions of a SQLAlchemy ``Connection``, shared
by both fronts: ``run_op`` runs one on an ``AsyncConnection`` through ``run_sync``, which
SQLAlchemy's asyncio layer runs in a greenlet on the event loop, so each statement inside is
awaited on the async driver without a thread or a second copy of the operation. What that
costs beside a plain ``await conn.execute`` is the benchmark scenario ``async_overhead``
(``benchmarks/scenarios/asyncio_front.py``; ``python -m benchmarks --url URL --scenario
async_overhead``): three runs with asyncpg on a shared two-core machine put them within its
noise of each other (medians of 131 to 203 µs a ``SELECT 1`` awaited directly, 149 to 247 µs
through ``run_sync``, either one the faster in some run).
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tenacity import AsyncRetrying

from .errors import InvalidArgumentError

T = TypeVar("T")

# a call this runtime makes, returning a T: a coroutine function here, a plain function in
# ``concurrency``
Call = Callable[[], Awaitable[T]]

Event = asyncio.Event
Condition = asyncio.Condition
Lock = asyncio.Lock

__all__ = ["AsyncConnection", "AsyncEngine", "AsyncRetrying", "Call", "Condition", "Event",
           "HandlerRunner", "Lock", "Relay", "Spawned", "check_connection", "engine_problem",
           "install_signal_handlers", "notify_all_soon", "run_blocking", "run_op",
           "run_to_end", "side_by_side", "sleep", "spawn", "threadsafe", "wait_event",
           "wake_handlers"]


def engine_problem(engine: Any, front: str) -> str | None:
    """Why ``engine`` cannot carry the front-end class named ``front`` (None: it can)."""
    if isinstance(engine, AsyncEngine):
        return None
    return (f"{front} needs an AsyncEngine (sqlalchemy.ext.asyncio.create_async_engine), got "
            f"{type(engine).__name__}; with a blocking Engine use {front.removeprefix('Async')}")


def check_connection(conn: Any) -> None:
    """Refuse a ``connection=`` of the other front end, before anything runs."""
    if not isinstance(conn, AsyncConnection):
        raise InvalidArgumentError(
            f"connection= takes an AsyncConnection (async with engine.connect() as conn), "
            f"got {type(conn).__name__}")


async def run_op(conn: AsyncConnection, op: Callable[[sa.Connection], T]) -> T:
    """Run a database operation (a function of a sync Connection) on ``conn``."""
    return await conn.run_sync(op)


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; whether it is set."""
    if timeout is None:
        await event.wait()
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pass
    return event.is_set()


_notifying: set[asyncio.Task[None]] = set()  # references to running notify tasks (see asyncio docs)


async def run_blocking(fn: Callable[[], T]) -> T:
    """Call ``fn``, which blocks, in a thread, leaving the loop free."""
    return await asyncio.to_thread(fn)


def run_to_end(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine function ``fn`` on a new event loop, where none runs yet (a
    forked process)."""
    return asyncio.run(fn())


def threadsafe(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn``, callable from any thread: it runs on the running loop (a loop that has
    closed meanwhile has nothing left to call it for)."""
    loop = asyncio.get_running_loop()

    def call() -> None:
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed
            pass

    return call


def notify_all_soon(cond: asyncio.Condition) -> None:
    """Wake every waiter of ``cond`` from plain (non-async) code running on the loop: the
    condition's lock is taken in a task of its own."""

    async def notify() -> None:
        async with cond:
            cond.notify_all()

    _in_a_task(notify())


def _in_a_task(notify: Coroutine[Any, Any, None]) -> None:
    """Run ``notify`` in a task of its own, referenced until it ends (see asyncio's docs)."""
    task = asyncio.get_running_loop().create_task(notify)
    _notifying.add(task)
    task.add_done_callback(_notifying.discard)


def wake_handlers(cond: asyncio.Condition, count: int) -> None:
    """Under ``cond``'s lock, ``count`` new messages in the buffer of the handlers waiting on
    it: wake one. A handler that does not suspend takes the next message itself, in the same
    turn of the loop; one that suspends lets the next waiter in (``Relay``). Woken one a
    message, the others found the buffer empty when the first had run through the batch by
    itself: an ``AsyncWorker(concurrency=100)`` draining 30,000 no-op jobs over asyncpg, in
    rounds taking turns in one process, 38,648 and 36,377 jobs/s relayed against 37,283 and
    35,064 (medians of eight rounds, two runs), 0.8–0.9 µs less of the loop's time a job."""
    cond.notify(1)


class Relay:
    """Wakes one more handler waiting on ``cond`` once the loop is free, after a handler took a
    message from the buffer: ``took()``, under the lock. The loop is free when the handlers
    that run suspend (or go back to waiting), so a batch reaches as many handlers at once as
    suspend, one more each time one does. ``more()``: whether messages wait in the buffer and
    a handler waits for them (asked again under the lock before the wake-up)."""

    def __init__(self, cond: asyncio.Condition, more: Callable[[], bool]) -> None:
        self._cond = cond
        self._more = more
        self._pending = False  # a wake-up is on its way

    def took(self) -> None:
        if not self._pending and self._more():
            self._pending = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._pending = False
        if self._more():
            _in_a_task(self._notify())

    async def _notify(self) -> None:
        async with self._cond:
            if self._more():
                self._cond.notify(1)


class Spawned:
    """A task running beside the caller: ``await join(timeout)``, ``alive``."""

    def __init__(self, task: asyncio.Task[None]) -> None:
        self._task = task

    @property
    def alive(self) -> bool:
        return not self._task.done()

    def is_current(self) -> bool:
        """Whether the caller runs in this task (which must not wait for itself)."""
        return asyncio.current_task() is self._task

    async def join(self, timeout: float | None = None) -> None:
        """Wait for the task to end (at most ``timeout`` seconds); its errors stay its own."""
        await asyncio.wait({self._task}, timeout=timeout)


def spawn(target: Callable[[], Coroutine[Any, Any, None]], name: str) -> Spawned:
    return Spawned(asyncio.get_running_loop().create_task(target(), name=name))


class HandlerRunner:
    """Calls a user's handler: ``async def`` ones are awaited on the loop, plain functions
    run in a pool of ``threads`` threads so they never block it."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._is_async: dict[Callable[..., Any], bool] = {}

    @staticmethod
    def check(handler: Callable[..., Any]) -> None:
        """Every callable runs here (the blocking runner refuses asynchronous ones)."""

    async def call(self, handler: Callable[..., Any], *args: Any) -> Any:
        is_async = self._is_async.get(handler)
        if is_async is None:
            is_async = self._is_async[handler] = is_async_callable(handler)
        if is_async:
            return await handler(*args)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="sqldelay-handler")
        return await asyncio.get_running_loop().run_in_executor(self._pool, handler, *args)

    async def call_with_connection(self, handler: Callable[..., Any], envelope: Any,
                                   conn: AsyncConnection) -> Any:
        """Transactional mode: an ``async def`` handler gets the AsyncConnection; a plain one
        gets its sync facade, run on the loop through ``run_sync`` (slow ones block it)."""
        if is_async_callable(handler):
            return await handler(envelope, conn)
        return await conn.run_sync(lambda sync_conn: handler(envelope, sync_conn))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def is_async_callable(handler: Any) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one (a task registry,
    ``AsyncTasks``): awaited on the loop rather than run in a thread."""
    return inspect.iscoroutinefunction(handler) or (
        callable(handler) and inspect.iscoroutinefunction(type(handler).__call__))


async def side_by_side(calls: Sequence[Call[T]]) -> list[T | BaseException]:
    """Run ``calls`` at the same time (a sharded queue writes its shards so); each one's
    result, or the exception it raised, in the order of ``calls``."""
    if len(calls) == 1:
        try:
            return [await calls[0]()]
        except Exception as exc:
            return [exc]
    return await asyncio.gather(*(call() for call in calls), return_exceptions=True)


def install_signal_handlers(stop: Callable[[], None]) -> Callable[[], None]:
    """Call ``stop`` on SIGTERM and SIGINT; returns what restores the previous handling."""
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread's loop, or no signals here: stop() stops it
        installed.append(signum)

    def restore() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return restore
