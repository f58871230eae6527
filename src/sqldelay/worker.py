"""Worker: hand a function to a queue and have it run reliably, in threads, until stopped.

At-least-once mode (the default): ``run()``'s thread claims batches (each claim committed on
its own) into a buffer that ``concurrency`` handler threads drain; a handler that returns gets
its message acked (acks are sent in batches), one that raises gets it released for a retry or
moved to the dead letters. A crash between handler and ack means a redelivery, never a loss.

Transactional mode: each of ``concurrency`` threads claims a batch in a transaction, runs the
handler on each message in a savepoint of that transaction (the handler gets the connection),
and acks the successes in it too: the claim, the handler's writes and the delete commit or roll
back together, so work that stays in the same database happens exactly once.

When nothing is due a worker sleeps until the earliest due time the queue knows of (at most
``idle_poll``), or until a wake-up: ``wake()``, or on PostgreSQL a NOTIFY from an offer of a
message that is due now. ``stop()``, SIGTERM or SIGINT end ``run()``: unstarted messages are
released at once, running handlers get ``grace_period`` to finish.
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_when_event_set,
    wait_random_exponential,
)

from .checks import check_positive_int
from .clock import duration_ms
from .dead_letters import DeadLetters
from .dialects import ErrorKind
from .errors import InvalidArgumentError, UnsupportedDialectError
from .listeners import Listeners, LoggingListener, WorkerListener
from .messages import Envelope
from .queue import DelayedQueue
from .retry import RetryPolicy

T = TypeVar("T")
log = logging.getLogger("sqldelay.worker")

# the floor of an idle sleep when the earliest due message is already due but was not claimable
# (another worker's transaction holds it): a short nap, not a busy loop
_MIN_IDLE = 0.05
_MAX_BACKOFF = 5.0


class ProcessingMode(enum.Enum):
    AT_LEAST_ONCE = "at_least_once"
    TRANSACTIONAL = "transactional"


def default_retry() -> RetryPolicy:
    return RetryPolicy.exponential(timedelta(seconds=1), 2, max_delay=timedelta(hours=1),
                                   max_attempts=10)


class Worker:
    """Runs ``handler(envelope)`` (transactional mode: ``handler(envelope, connection)``) on
    every message of ``queue``; returning acks the message, raising retries it."""

    def __init__(self, queue: DelayedQueue, handler: Callable[..., Any], *,
                 concurrency: int = 1, batch_size: int | None = None,
                 retry: RetryPolicy | None = None,
                 mode: ProcessingMode = ProcessingMode.AT_LEAST_ONCE,
                 idle_poll: timedelta = timedelta(seconds=1),
                 grace_period: timedelta = timedelta(seconds=30),
                 heartbeat: timedelta | None = None,
                 listeners: Sequence[WorkerListener] | None = None,
                 wake_ups: bool = True) -> None:
        if not isinstance(queue, DelayedQueue):
            raise InvalidArgumentError(f"queue must be a DelayedQueue, got {queue!r}")
        if not callable(handler):
            raise InvalidArgumentError(f"handler must be callable, got {handler!r}")
        check_positive_int(concurrency, "concurrency")
        batch_size = concurrency if batch_size is None else batch_size
        check_positive_int(batch_size, "batch_size")
        retry = default_retry() if retry is None else retry
        if not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
        if not isinstance(mode, ProcessingMode):
            raise InvalidArgumentError(f"mode must be a ProcessingMode, got {mode!r}")
        if duration_ms(idle_poll, "idle_poll") < 1:
            raise InvalidArgumentError("idle_poll must be positive")
        duration_ms(grace_period, "grace_period")
        if heartbeat is not None:
            if duration_ms(heartbeat, "heartbeat") < 1:
                raise InvalidArgumentError("heartbeat must be positive")
            if heartbeat >= queue.acquire_timeout:
                raise InvalidArgumentError(
                    f"heartbeat ({heartbeat}) must be shorter than the queue's acquire_timeout "
                    f"({queue.acquire_timeout}), or locks expire between beats")
            if mode is ProcessingMode.TRANSACTIONAL:
                raise InvalidArgumentError(
                    "heartbeat is for at-least-once mode: in transactional mode the open "
                    "transaction holds the messages until it ends")
        listeners = [LoggingListener()] if listeners is None else list(listeners)
        for listener in listeners:
            if not isinstance(listener, WorkerListener):
                raise InvalidArgumentError(
                    f"listeners must be WorkerListener instances, got {listener!r}")

        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.retry = retry
        self.mode = mode
        self.idle_poll = idle_poll
        self.grace_period = grace_period
        self.heartbeat = heartbeat
        self.wake_ups = wake_ups
        self.dead_letters = DeadLetters.of(queue)
        self._events = Listeners(listeners)

        self._stop = threading.Event()
        self._abandon = threading.Event()  # the grace period is over: give up on the database
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._buffer: deque[Envelope] = deque()  # claimed, not started
        self._running: set[Envelope] = set()
        self._to_ack: list[Envelope] = []
        self._idle_handlers = 0
        self._closing = False
        self._handled = 0
        self._fatal: BaseException | None = None
        self._active = threading.Lock()

    def __repr__(self) -> str:
        return (f"Worker({self.queue!r}, mode={self.mode.value}, "
                f"concurrency={self.concurrency}, batch_size={self.batch_size})")

    # ---- control ---------------------------------------------------------------------------

    def run(self) -> None:
        """Process messages until ``stop()`` (from another thread), SIGTERM or SIGINT."""
        self._run(until_idle=False)

    def drain(self) -> int:
        """Process messages until none is due, then return how many were handled."""
        return self._run(until_idle=True)

    def stop(self) -> None:
        """Ask ``run()`` to finish: safe from any thread (not from a signal handler itself:
        ``run()`` installs its own)."""
        self._stop.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()

    def wake(self) -> None:
        """Look for due messages now instead of at the end of the current idle sleep."""
        self._wake.set()

    # ---- the run loop ------------------------------------------------------------------------

    def _run(self, *, until_idle: bool) -> int:
        if not self._active.acquire(blocking=False):
            raise RuntimeError("this worker is already running")
        try:
            self._reset()
            restore = {} if until_idle else self._install_signal_handlers()
            helpers = self._start_helpers(until_idle)
            try:
                if self.mode is ProcessingMode.TRANSACTIONAL:
                    self._run_transactional(until_idle)
                else:
                    self._run_at_least_once(until_idle)
            finally:
                self._stop.set()
                self._wake.set()
                for thread in helpers:
                    thread.join(timeout=1.0)
                for signum, previous in restore.items():
                    signal.signal(signum, previous)
            if self._fatal is not None:
                raise self._fatal
            return self._handled
        finally:
            self._active.release()

    def _reset(self) -> None:
        self._stop.clear()
        self._abandon.clear()
        self._wake.clear()
        self._buffer.clear()
        self._running.clear()
        self._to_ack.clear()
        self._idle_handlers = 0
        self._closing = False
        self._handled = 0
        self._fatal = None

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum, frame) -> None:
            log.info("signal %d: stopping", signum)
            # stop() takes locks the interrupted code may hold: call it from a fresh thread
            threading.Thread(target=self.stop, daemon=True).start()

        return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def _start_helpers(self, until_idle: bool) -> list[threading.Thread]:
        helpers = []
        if self.heartbeat is not None:
            helpers.append(_start(self._heartbeat_loop, "sqldelay-heartbeat"))
        if self.wake_ups and not until_idle and self.queue.dao.notifications:
            helpers.append(_start(self._listen_loop, "sqldelay-listen"))
        return helpers

    # ---- at-least-once -----------------------------------------------------------------------

    def _run_at_least_once(self, until_idle: bool) -> None:
        handlers = [_start(self._handler_loop, f"sqldelay-handler-{i}")
                    for i in range(self.concurrency)]
        try:
            self._fetch_loop(until_idle)
        except BaseException as exc:
            self._fatal = exc
            self._events.emit("crashed", exc, False)
        finally:
            self._stop.set()
            self._shut_down(handlers)

    def _fetch_loop(self, until_idle: bool) -> None:
        idle = False
        while not self._stop.is_set():
            with self._cond:
                # refill when the buffer is empty and a handler has nothing to do
                while not self._stop.is_set() and (self._buffer or not self._idle_handlers):
                    self._cond.wait()
            if self._stop.is_set():
                return
            self._wake.clear()  # before the poll: a wake-up after it is not lost
            batch = self._patiently(lambda: self.queue.poll_many(self.batch_size))
            if batch is None:
                return
            if batch:
                idle = False
                self._events.emit("picked", batch)
                with self._cond:
                    self._buffer.extend(batch)
                    self._cond.notify_all()
            # the acks of the batch before go out while the handlers work on this one
            if not self._patiently(self._flush_acks):
                return
            if batch:
                continue
            if until_idle:
                if self._wait_until_quiet():
                    return
                continue
            if not idle:
                idle = True
                self._events.emit("idle")
            self._sleep_until_due()

    def _wait_until_quiet(self) -> bool:
        """drain(): wait for running handlers; True when nothing is due after them (a failure
        may have released its message due now)."""
        with self._cond:
            while self._running and not self._stop.is_set():
                self._cond.wait()
        self._patiently(self._flush_acks)
        return not self._due_now()

    def _due_now(self) -> bool:
        due = self._patiently(self.queue.next_due)
        return due is not None and due <= self.queue.clock.now()

    def _handler_loop(self) -> None:
        while True:
            with self._cond:
                while not self._buffer and not self._closing:
                    self._idle_handlers += 1
                    self._cond.notify_all()
                    self._cond.wait()
                    self._idle_handlers -= 1
                if not self._buffer:
                    return
                envelope = self._buffer.popleft()
                self._running.add(envelope)
            ok = self._process(envelope)
            with self._cond:
                self._running.discard(envelope)
                self._handled += 1
                if ok:
                    self._to_ack.append(envelope)
                if not self._buffer:
                    # only an empty buffer concerns the waiters (the fetcher refills it, drain
                    # and shutdown wait for the running set): waking them per message is costly
                    self._cond.notify_all()

    def _process(self, envelope: Envelope) -> bool:
        self._events.emit("started", envelope)
        began = time.perf_counter()
        try:
            self.handler(envelope)
        except Exception as exc:
            try:
                self._patiently(partial(self._fail, envelope, exc, None), until=self._abandon)
            except Exception:
                log.exception("could not record the failure of %s; it comes back when its "
                              "lock expires", envelope.key)
            return False
        self._events.emit("succeeded", envelope,
                          timedelta(seconds=time.perf_counter() - began))
        return True

    def _flush_acks(self) -> bool:
        with self._cond:
            batch, self._to_ack = self._to_ack, []
        try:
            if batch:
                self.queue.ack_many(batch)
        except BaseException:
            with self._cond:
                self._to_ack[:0] = batch  # acks are idempotent: send them again later
            raise
        return True

    def _shut_down(self, handlers: list[threading.Thread]) -> None:
        with self._cond:
            unstarted = list(self._buffer)
            self._buffer.clear()
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + self.grace_period.total_seconds()
        for envelope in unstarted:  # back to the queue at once, not when their locks expire
            self._until(deadline, lambda e=envelope: self.queue.release(e))
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._abandon.set()
        self._until(deadline + 5.0, self._flush_acks)
        still = [t for t in handlers if t.is_alive()]
        if still:
            log.warning("%d handler(s) still running after the grace period of %s; their "
                        "messages come back when their locks expire", len(still),
                        self.grace_period)
        if unstarted:
            log.info("released %d unstarted message(s)", len(unstarted))

    # ---- transactional -------------------------------------------------------------------------

    def _run_transactional(self, until_idle: bool) -> None:
        loops = [_start(lambda: self._transactional_loop(until_idle), f"sqldelay-tx-{i}")
                 for i in range(self.concurrency)]
        try:
            if until_idle:
                for thread in loops:
                    thread.join()
            else:
                self._stop.wait()
        finally:
            self._stop.set()
            deadline = time.monotonic() + self.grace_period.total_seconds()
            for thread in loops:
                thread.join(max(0.0, deadline - time.monotonic()))
            if any(t.is_alive() for t in loops):
                log.warning("transactional handlers still running after the grace period of "
                            "%s; their transactions roll back when the process exits",
                            self.grace_period)

    def _transactional_loop(self, until_idle: bool) -> None:
        idle = False
        try:
            while not self._stop.is_set():
                self._wake.clear()
                handled = self._patiently(self._transaction_round)
                if handled is None:
                    return
                if handled:
                    idle = False
                    continue
                if until_idle:
                    return
                if not idle:
                    idle = True
                    self._events.emit("idle")
                self._sleep_until_due()
        except BaseException as exc:
            self._fatal = exc
            self._events.emit("crashed", exc, False)
            self.stop()

    def _transaction_round(self) -> int:
        queue = self.queue
        with queue.engine.connect() as conn:
            queue.dao.begin_write(conn)
            batch = queue.poll_many(self.batch_size, connection=conn)
            if not batch:
                conn.rollback()
                return 0
            self._events.emit("picked", batch)
            done: list[tuple[Envelope, float]] = []
            for i, envelope in enumerate(batch):
                if self._stop.is_set():
                    for rest in batch[i:]:
                        queue.release(rest, connection=conn)
                    break
                self._events.emit("started", envelope)
                began = time.perf_counter()
                try:
                    with conn.begin_nested():
                        self.handler(envelope, conn)
                except Exception as exc:
                    try:
                        self._fail(envelope, exc, conn)
                    except Exception as problem:
                        if self._is_outage(problem):
                            raise  # the transaction is gone: the whole round runs again
                        log.exception("could not record the failure of %s; it comes back "
                                      "when its lock expires", envelope.key)
                else:
                    done.append((envelope, time.perf_counter() - began))
            queue.ack_many([e for e, _ in done], connection=conn)
            conn.commit()
        with self._cond:
            self._handled += len(done)
        for envelope, seconds in done:
            self._events.emit("succeeded", envelope, timedelta(seconds=seconds))
        return len(batch)

    # ---- failures ------------------------------------------------------------------------------

    def _fail(self, envelope: Envelope, error: Exception, conn: sa.Connection | None) -> None:
        """Retry later, or bury after the last allowed attempt (in ``conn``'s transaction when
        given)."""
        if self.retry.gives_up_after(envelope.attempt):
            if self.dead_letters.bury(envelope, _error_text(error), connection=conn):
                self._events.emit("dead_lettered", envelope, error)
            return
        delay = self.retry.delay(envelope.attempt)
        self.queue.release(envelope, delay=delay, connection=conn)
        self._events.emit("failed", envelope, error, delay)

    # ---- sleeping, heartbeats, wake-ups -----------------------------------------------------

    def _sleep_until_due(self) -> None:
        timeout = self.idle_poll.total_seconds()
        due = self._patiently(self.queue.next_due)
        if due is not None:
            until_due = (due - self.queue.clock.now()).total_seconds()
            timeout = min(timeout, max(until_due, _MIN_IDLE))
        self._wake.wait(timeout)

    def _heartbeat_loop(self) -> None:
        interval = self.heartbeat.total_seconds()
        while not self._stop.wait(interval):
            with self._cond:
                held = [*self._running, *self._buffer]
            for envelope in held:
                try:
                    envelope.extend()
                except Exception as exc:  # the next beat tries again; the lock may yet hold
                    log.warning("heartbeat could not extend %s: %s", envelope.key, exc)

    def _listen_loop(self) -> None:
        dao = self.queue.dao
        try:
            self._patiently(lambda: dao.listen(self.queue.engine, self.queue.pkind,
                                               self._wake.set, self._stop))
        except UnsupportedDialectError as exc:
            log.warning("no wake-ups, polling only: %s", exc)
        except Exception:
            log.exception("wake-ups stopped, polling only")

    # ---- riding out a lost database ------------------------------------------------------------

    def _patiently(self, fn: Callable[[], T], *, until: threading.Event | None = None) -> T | None:
        """Run ``fn``, retrying with backoff while the database is unreachable, until ``until``
        (default: stop) is set; None when it was set first. Other errors propagate."""
        event = self._stop if until is None else until
        if event.is_set():
            return None
        retrying = Retrying(
            retry=retry_if_exception(self._is_outage),
            wait=wait_random_exponential(multiplier=0.05, max=_MAX_BACKOFF),
            stop=stop_when_event_set(event), sleep=event.wait, reraise=True,
            before_sleep=self._outage)
        try:
            return retrying(fn)
        except Exception as exc:
            if self._is_outage(exc) and event.is_set():
                return None
            raise

    def _outage(self, state) -> None:
        error = state.outcome.exception()
        log.warning("database unavailable, retrying in %.2fs: %s: %s",
                    state.upcoming_sleep, type(error).__name__, str(error).splitlines()[0])
        self._events.emit("crashed", error, True)

    def _until(self, deadline: float, fn: Callable[[], Any]) -> None:
        """Shutdown work: retry through an outage until ``deadline``, then give up (logged)."""
        retrying = Retrying(
            retry=retry_if_exception(self._is_outage),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(max(0.0, deadline - time.monotonic())), reraise=True)
        try:
            retrying(fn)
        except Exception as exc:
            log.warning("giving up at shutdown: %s: %s", type(exc).__name__, exc)

    def _is_outage(self, exc: BaseException) -> bool:
        if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
            return True
        return isinstance(exc, sa.exc.DBAPIError) and (
            exc.connection_invalidated
            or self.queue.dao.classify(exc) is ErrorKind.TRANSIENT)


def _start(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _error_text(error: BaseException) -> str:
    """The error first (it survives truncation), then where it came from."""
    head = "".join(traceback.format_exception_only(error)).strip()
    return head + "\n" + "".join(traceback.format_tb(error.__traceback__))
