"""Both front ends under one suite: a test written against the blocking API runs unchanged
against the asyncio one.

For an async target, the queue a test gets is a ``Proxy`` of an ``AsyncDelayedQueue``: each
method call runs on a ``Portal``, an event loop of its own in a background thread, and the
test's thread waits for the result, so ``queue.offer(...)`` reads the same in both. What the
async objects return (envelopes, cron services, handles, connections) comes back proxied too,
and proxies given as arguments are unwrapped. ``Front`` builds what a test would otherwise
import (workers, dead letters, cron services, connections) for the target's front end.

On the async side a plain (non-async) test handler runs in the worker's handler threads and
gets its envelope proxied, so ``envelope.extend()`` inside it works as in the blocking API;
``async def`` handlers are given as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from typing import Any

import sqlalchemy as sa

from sqldelay import (
    AsyncCronHandle,
    AsyncCronService,
    AsyncDeadLetters,
    AsyncDelayedQueue,
    AsyncInspector,
    AsyncWorker,
    CronService,
    DeadLetters,
    DelayedQueue,
    Envelope,
    Inspector,
    Worker,
)
from sqldelay.concurrency_async import is_async_callable
from sqldelay.executor import Executor
from sqldelay.executor_async import AsyncExecutor


class Portal:
    """An event loop in a thread of its own, which other threads hand coroutines to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="portal",
                                        daemon=True)
        self._thread.start()

    def call(self, fn, *args, **kwargs) -> Any:
        """Run ``fn(*args, **kwargs)`` on the loop (awaiting it if it returns an awaitable)
        and return its result or raise its error, in the calling thread."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a portal call from the loop's own thread would wait forever")

        async def run():
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


_PROXIED = (AsyncDelayedQueue, Envelope, AsyncCronService, AsyncCronHandle, AsyncWorker,
            AsyncDeadLetters, AsyncInspector, sa.ext.asyncio.AsyncConnection)


class Proxy:
    """An async object used from blocking code: calls go through the portal."""

    __slots__ = ("_portal", "_target")

    def __init__(self, portal: Portal, target: Any) -> None:
        object.__setattr__(self, "_portal", portal)
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value) and not isinstance(value, type) and inspect.ismethod(value):
            portal = self._portal

            @functools.wraps(value)
            def call(*args, **kwargs):
                return wrap(portal, portal.call(value, *unwrap(args), **unwrap(kwargs)))

            return call
        return wrap(self._portal, value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __enter__(self):
        return wrap(self._portal, self._portal.call(self._target.__aenter__))

    def __exit__(self, *exc):
        return self._portal.call(self._target.__aexit__, *exc)

    def __repr__(self) -> str:
        return f"Proxy({self._target!r})"

    def __eq__(self, other: object) -> bool:
        return self._target == unwrap(other)

    def __hash__(self) -> int:
        return hash(self._target)


def wrap(portal: Portal, value: Any) -> Any:
    if isinstance(value, _PROXIED):
        return Proxy(portal, value)
    if isinstance(value, list):
        return [wrap(portal, v) for v in value]
    return value


def unwrap(value: Any) -> Any:
    if isinstance(value, Proxy):
        return value._target
    if isinstance(value, list | tuple):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


class Front:
    """The blocking front end: what a test builds, as the test would build it."""

    is_async = False

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def queue(self, name: str, *, engine=None, **kwargs) -> DelayedQueue:
        return DelayedQueue(engine or self.engine, name, **kwargs)

    def create_engine(self, **kwargs) -> sa.Engine:
        """Another engine of this front end on the same database."""
        return sa.create_engine(self.engine.url, **kwargs)

    @staticmethod
    def events_of(engine) -> sa.Engine:
        """What ``sa.event.listens_for`` takes for ``engine``'s connection events."""
        return engine

    def dispose(self, engine) -> None:
        engine.dispose()

    def worker(self, queue, handler, **kwargs) -> Worker:
        return Worker(queue, handler, **kwargs)

    def dead_letters(self, queue) -> DeadLetters:
        return DeadLetters.of(queue)

    def cron(self, queue, **kwargs) -> CronService:
        return CronService(queue, **kwargs)

    def inspector(self, **kwargs) -> Inspector:
        return Inspector(self.engine, **kwargs)

    def connect(self):
        """A connection to pass as ``connection=`` (a context manager)."""
        return self.engine.connect()

    def executor(self, dao) -> Executor:
        return Executor(self.engine, dao)

    def run(self, fn, *args, **kwargs):
        """Call ``fn`` as this front end does (the async one awaits it on its loop)."""
        return fn(*args, **kwargs)

    def close(self) -> None:
        pass


class AsyncFront(Front):
    """The asyncio front end, driven through a portal."""

    is_async = True

    def __init__(self, async_url: str, **engine_kwargs) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.portal = Portal()
        self.engine = self.portal.call(create_async_engine, async_url, **engine_kwargs)

    def queue(self, name: str, *, engine=None, **kwargs) -> Proxy:
        return Proxy(self.portal, self.portal.call(AsyncDelayedQueue, engine or self.engine,
                                                   name, **kwargs))

    def create_engine(self, **kwargs):
        from sqlalchemy.ext.asyncio import create_async_engine

        return self.portal.call(create_async_engine, self.engine.url, **kwargs)

    @staticmethod
    def events_of(engine) -> sa.Engine:
        return engine.sync_engine

    def dispose(self, engine) -> None:
        self.portal.call(engine.dispose)

    def worker(self, queue, handler, **kwargs) -> Proxy:
        if callable(handler) and not is_async_callable(handler):
            handler = self._blocking_handler(handler)
        return Proxy(self.portal, self.portal.call(AsyncWorker, unwrap(queue), handler,
                                                   **kwargs))

    def _blocking_handler(self, handler):
        portal = self.portal

        @functools.wraps(handler)
        def call(envelope, *rest):
            if threading.current_thread() is portal._thread:
                # transactional mode runs a plain handler on the loop, with the sync facade of
                # the connection: the envelope cannot go through the portal from there
                return handler(envelope, *rest)
            return handler(Proxy(portal, envelope), *rest)

        return call

    def dead_letters(self, queue) -> Proxy:
        return Proxy(self.portal, AsyncDeadLetters.of(unwrap(queue)))

    def cron(self, queue, **kwargs) -> Proxy:
        return Proxy(self.portal, self.portal.call(AsyncCronService, unwrap(queue), **kwargs))

    def inspector(self, **kwargs) -> Proxy:
        return Proxy(self.portal, AsyncInspector(self.engine, **kwargs))

    @contextlib.contextmanager
    def connect(self):
        conn = self.portal.call(self.engine.connect().start)
        try:
            yield Proxy(self.portal, conn)
        finally:
            self.portal.call(conn.close)

    def executor(self, dao) -> AsyncExecutor:
        return AsyncExecutor(self.engine, dao)

    def run(self, fn, *args, **kwargs):
        return self.portal.call(fn, *args, **kwargs)

    def close(self) -> None:
        self.portal.call(self.engine.dispose)
        self.portal.close()
