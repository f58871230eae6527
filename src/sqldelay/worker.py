# Generated from worker_async.py by tools/async_to_sync.py: edit that file, then run
# `python tools/async_to_sync.py`. Do not edit this one.
"""The worker loops of this front end, over the primitives of ``concurrency``.

What a worker does (modes, retries, dead letters, shutdown, sleeping and wake-ups) is told in
``worker_base``, which holds the settings and decisions both front ends share.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, Final, TypeAlias, TypeVar, Unpack

from tenacity import (
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from . import wakeups
from .concurrency import (
    Call,
    Condition,
    Connection,
    Event,
    HandlerRunner,
    Lock,
    Relay,
    Retrying,
    Spawned,
    install_signal_handlers,
    notify_all_soon,
    run_blocking,
    run_op,
    run_to_end,
    side_by_side,
    spawn,
    threadsafe,
    wait_event,
    wake_handlers,
)
from .dead_letters import DeadLetters
from .errors import UnsupportedDialectError
from .messages import Envelope
from .notifier import listen
from .outages import patience
from .queue import DelayedQueue
from .sharded import ShardedQueue
from .supervisor import supervise
from .wakeups import Sleeper
from .worker_base import (
    MAX_BACKOFF,
    MIN_IDLE,
    ProcessingMode,
    Rotation,
    WorkerBase,
    WorkerSettings,
    error_text,
    trouble,
)

log = logging.getLogger("sqldelay.worker")

T = TypeVar("T")


class Worker(WorkerBase[DelayedQueue]):
    """Runs ``handler(envelope)`` (transactional mode: ``handler(envelope, connection)``) on
    every message of ``queue``; returning acks the message, raising retries it. The settings
    are ``WorkerBase``'s; the runner's ``HandlerRunner`` says how a handler is called."""

    queue_class = DelayedQueue
    sharded_class = ShardedQueue

    def __init__(self, queues: DelayedQueue | ShardedQueue
                 | Mapping[str, DelayedQueue] | Sequence[DelayedQueue],
                 handler: Callable[..., Any],
                 **settings: Unpack[WorkerSettings]) -> None:
        super().__init__(queues, handler, **settings)
        HandlerRunner.check(handler)
        self.dead_letters = {name: DeadLetters.of(q) for name, q in self.queues.items()}
        self._name_of = {id(q): name for name, q in self.queues.items()}
        self._rotation = Rotation(list(self.queues), self.limits, self.batch_size)
        self._handlers = HandlerRunner(self.concurrency)
        self._stop = Event()
        self._processes_stop = threading.Event()  # the forked processes' (any thread sets it)
        self._abandon = Event()  # the grace period is over: give up on the database
        self._wake = Event()
        self._starved = False  # the last claim came back empty
        # the handlers sat idle through the last claim, which came back full: the claims set
        # the pace, so the next claims are several at once (``_claim_next``)
        self._ahead = False
        self._batches_at_once = 1  # batches then claimed at once (``_reset``)
        self._waited = False  # a batch of the current claim found every handler idle
        # one lock, two conditions: handlers wait for work; the fetcher, drain and shutdown
        # wait for the handlers (an idle one, or none running). Apart, a refill wakes no more
        # handlers than it brings messages, and a handler going idle wakes no other handler
        self._lock = Lock()
        self._work = Condition(self._lock)
        self._state = Condition(self._lock)
        # how a batch reaches the handlers (``wake_handlers``): on the event loop one task,
        # which passes the rest on as handlers suspend (``Relay``); threads, one a message
        self._relay = Relay(self._work, lambda: bool(self._buffer) and self._idle_handlers > 0)
        self._buffer: deque[Envelope[DelayedQueue]] = deque()  # claimed, not started
        self._running: set[Envelope[DelayedQueue]] = set()
        self._to_ack: list[Envelope[DelayedQueue]] = []  # handled, their acks not yet sent
        self._acking: set[Envelope[DelayedQueue]] = set()  # their acks on their way
        self._acks_waiting = Event()  # set when _to_ack gains an envelope
        self._idle_handlers = 0
        self._closing = False
        self._handled = 0
        self._acked = 0
        self._fatal: BaseException | None = None
        self._active = Lock()

    # ---- control ---------------------------------------------------------------------------

    def run(self, *, signals: bool = True) -> None:
        """Process messages until ``stop()``, or SIGTERM or SIGINT when ``signals`` (leave the
        signals to the host when the worker runs inside a server that handles them). With
        ``processes`` > 1, in that many forked processes (``supervisor.py``)."""
        if self.processes == 1:
            self._run(until_idle=False, signals=signals)
            return
        self._processes_stop.clear()
        restore = (install_signal_handlers(self._processes_stop.set) if signals
                   else (lambda: None))
        try:
            engines = {id(q.engine): q.engine for q in self.queues.values()}.values()
            run_blocking(partial(supervise, self.processes,
                                 partial(run_to_end, self._run_child),
                                 self._processes_stop, engines))
        finally:
            restore()

    def _run_child(self) -> None:
        self._run(until_idle=False, signals=True)

    def drain(self) -> int:
        """Process messages until none is due, then return how many were handled (in this
        process: ``processes`` is for ``run``)."""
        return self._run(until_idle=True, signals=False)

    def stop(self) -> None:
        """Ask ``run()`` to finish; see ``WorkerBase`` for what finishing does."""
        self._processes_stop.set()
        self._stop.set()
        self._wake.set()
        self._acks_waiting.set()
        notify_all_soon(self._work)
        notify_all_soon(self._state)

    def wake(self) -> None:
        """Look for due messages now instead of at the end of the current idle sleep."""
        self._rotation.wake()
        self._wake.set()

    # ---- the run loop ------------------------------------------------------------------------

    def _run(self, *, until_idle: bool, signals: bool) -> int:
        if self._active.locked():
            raise RuntimeError("this worker is already running")
        with self._active:
            self._reset(until_idle)
            restore = install_signal_handlers(self.stop) if signals else (lambda: None)
            helpers = self._start_helpers(until_idle)
            # offers of this process wake the worker from an idle sleep (wakeups.py)
            unregister = (wakeups.register(self.queues.values(), self._sleeper)
                          if self.wake_ups else (lambda: None))
            try:
                if self.mode is ProcessingMode.TRANSACTIONAL:
                    self._run_transactional(until_idle)
                else:
                    self._run_at_least_once(until_idle)
            finally:
                self._stop.set()
                self._wake.set()
                self._acks_waiting.set()
                unregister()
                for helper in helpers:
                    helper.join(timeout=1.0)
                restore()
                self._handlers.close()
            if self._fatal is not None:
                raise self._fatal
            return self._handled

    def _reset(self, until_idle: bool = False) -> None:
        self._rotation = Rotation(list(self.queues), self.limits, self.batch_size)
        self._batches_at_once = (self.batches_at_once(until_idle) if len(self.queues) == 1
                                 else 1)
        self._stop.clear()
        self._abandon.clear()
        self._wake.clear()
        self._sleeper = Sleeper(threadsafe(self.wake))
        self._buffer.clear()
        self._running.clear()
        self._to_ack.clear()
        self._acking.clear()
        self._acks_waiting.clear()
        self._idle_handlers = 0
        self._closing = False
        self._handled = 0
        self._acked = 0  # acks sent
        self._ahead = False
        self._fatal = None

    def _start_helpers(self, until_idle: bool) -> list[Spawned]:
        helpers = []
        if self.mode is ProcessingMode.AT_LEAST_ONCE:
            helpers.append(spawn(self._ack_loop, "sqldelay-acks"))
        if self.heartbeat is not None:
            helpers.append(spawn(self._heartbeat_loop, "sqldelay-heartbeat"))
        if self.wake_ups and not until_idle:
            for i, group in enumerate(self.listening_groups()):
                helpers.append(spawn(partial(self._listen_loop, group), f"sqldelay-listen-{i}"))
        if self.pruned_queues() and not until_idle:
            helpers.append(spawn(self._prune_loop, "sqldelay-prune"))
        return helpers

    # ---- at-least-once -----------------------------------------------------------------------

    def _run_at_least_once(self, until_idle: bool) -> None:
        handlers = [spawn(self._handler_loop, f"sqldelay-handler-{i}")
                    for i in range(self.concurrency)]
        try:
            self._fetch_loop(until_idle)
        except BaseException as exc:
            self._fatal = exc
            self._events.emit("crashed", exc, False)
        finally:
            self._stop.set()
            self._acks_waiting.set()  # the ack loop ends: the shutdown sends what is left
            self._shut_down(handlers)

    def _fetch_loop(self, until_idle: bool) -> None:
        idle = False
        while not self._stop.is_set():
            with self._lock:
                # refill when the buffer is empty and a handler has nothing to do
                while not self._stop.is_set() and (self._buffer or not self._idle_handlers):
                    self._state.wait()
            if self._stop.is_set():
                return
            self._wake.clear()  # before the poll: a wake-up after it is not lost
            # after an empty claim, the acks go first: they may free a group or a cap slot
            if self._starved and not self._patiently(self._flush_acks):
                return
            handled, acked = self._handled, self._acked
            # the acks go out on their own (``_ack_loop``): a claim waits for none of them,
            # and needs none first (they delete messages it cannot take, still locked) but
            # after an empty claim, above
            batch = self._claim_and_hand_off()
            if batch is None:  # stopped meanwhile
                return
            if batch:
                idle = False
            self._starved = not batch
            if batch:
                continue
            if until_idle:
                if self._wait_until_quiet():
                    return
                # due, yet not claimable: when a handler finished or acks went out since the
                # claim (a group or a slot under a cap may be free now) every queue again at
                # once; else (locked by another consumer, a rate limit) after a nap
                if (self._handled, self._acked) == (handled, acked):
                    wait_event(self._wake, MIN_IDLE)
                self._rotation.wake()
                continue
            if (self._handled, self._acked) != (handled, acked):
                self._rotation.wake()  # as above: what held the due messages back may be gone
                continue
            if not idle:
                idle = True
                self._events.emit("idle")
            self._sleep_until_due()

    def _claim_and_hand_off(self) -> list[Envelope[DelayedQueue]] | None:
        """``_claim_next``: what it claimed, already in the handlers' buffer."""
        self._waited = False
        batch, full = self._claim_next()
        self._ahead = full and self._waited
        return batch

    def _claim_into_buffer(self, queue: DelayedQueue,
                           count: int) -> list[Envelope[DelayedQueue]]:
        """Claim up to ``count`` messages of ``queue`` and put them in the handlers' buffer
        as soon as they arrive: from there the heartbeat renews their locks. Two claims side
        by side each hand theirs over on its own; the first batch waiting for the second
        one, out of the heartbeat's sight, lost its locks when the second was slow.

        The claim carries no acks (``poll_many(ack=)``), though on PostgreSQL one statement
        could ack the finished batch and claim the next: the ack loop's own statements ran
        beside the claims, and a drain of 30,000 no-op jobs went from 37,900 to 42,800 jobs/s,
        the server's time a job from 21 to 17 µs (benchmarks/METHOD.md, "Acks in the claim's
        statement")."""
        batch = queue.poll_many(count, by=self.name)
        if batch:
            self._events.emit("picked", batch)
            with self._lock:
                # the handlers waited for this claim: all of them idle when it came back
                self._waited = self._waited or self._idle_handlers == self.concurrency
                self._buffer.extend(batch)
                wake_handlers(self._work, len(batch))
        return batch

    def _wait_until_quiet(self) -> bool:
        """drain(): wait for running handlers; True when nothing is due after them (a failure
        may have released its message due now)."""
        with self._lock:
            while self._running and not self._stop.is_set():
                self._state.wait()
        self._patiently(self._flush_acks)
        return not self._due_now()

    def _claim_next(self) -> tuple[list[Envelope[DelayedQueue]] | None, bool]:
        """Claim from the queues in turn until one has something (None: stopped meanwhile),
        and whether it took all it asked for; what was claimed is in the handlers' buffer.

        A worker of one queue that the handlers waited for at its last claim, which came back
        full (``_ahead``), claims several batches at once (``batches_at_once``: up to four)
        in two claims side by side, each on a connection of its own (``_claim_sizes``), where
        the database gains by it (``claims_side_by_side``) and the queue has no cap in this
        worker: a claim's round trip, not the handlers, then sets the pace, and claims side by
        side keep the database busy where one waits on the other (benchmarks/METHOD.md, "Two
        claims at once"). The handlers then have up to that many times ``batch_size``
        messages claimed before they start on them."""
        with self._lock:
            turns = self._rotation.turns(time.monotonic())
        for name, count in turns:
            queue = self.queues[name]
            at_once = (self._batches_at_once if self._ahead and len(self.queues) == 1
                       and name not in self.limits and queue.dao.claims_side_by_side else 1)
            claims = [partial(self._patiently_on, name,
                              partial(self._claim_into_buffer, queue, size))
                      for size in _claim_sizes(count, at_once)]
            batch = (_claimed_side_by_side(claims) if len(claims) > 1 else claims[0]())
            if batch is None:
                return None, False
            if batch is _DOWN:
                continue
            with self._lock:
                self._rotation.claimed(name, len(batch), time.monotonic())
            if batch:
                return batch, len(batch) == count * at_once
        return [], False

    def _due_now(self) -> bool:
        """Whether a message is due on a queue (of those that can be reached)."""
        for name, queue in self.queues.items():
            due = self._patiently_on(name, queue.next_due)
            if due is not None and due is not _DOWN and due <= queue.clock.now():
                return True
        return False

    def _handler_loop(self) -> None:
        # the last message handled
        done: tuple[Envelope[DelayedQueue], bool, bool] | None = None
        while True:
            # one turn of the lock a message: the end of the last one and the start of the next
            with self._lock:
                if done is not None:
                    self._handler_done(*done)
                while not self._buffer and not self._closing:
                    self._idle_handlers += 1
                    self._state.notify_all()
                    self._work.wait()
                    self._idle_handlers -= 1
                if not self._buffer:
                    return
                envelope = self._buffer.popleft()
                self._running.add(envelope)
                self._relay.took()
            # a lock that expired while the message waited in the buffer is renewed first
            held = (envelope.locked_until > envelope.queue.clock.now()
                    or self._renewed(envelope))
            ok = held and self._process(envelope)
            done = envelope, held, ok

    def _handler_done(self, envelope: Envelope[DelayedQueue], held: bool, ok: bool) -> None:
        """Under the lock: ``envelope`` handled (``held``: here, not by another consumer;
        ``ok``: its handler returned), its ack to send unless its handler settled it."""
        self._running.discard(envelope)
        if self.limits:  # the rotation counts what is in flight of the queues with a cap
            self._rotation.done(self._name_of[id(envelope.queue)])
        self._handled += held  # one that another consumer took is not handled here
        if ok and envelope.settled:  # its handler acked or released it itself
            self._acked += 1
        elif ok:
            self._to_ack.append(envelope)
            if not self._acks_waiting.is_set():  # setting it again costs a notify
                self._acks_waiting.set()
        if not self._buffer:
            # only an empty buffer concerns the waiters (the fetcher refills it, drain and
            # shutdown wait for the running set): waking them per message is costly
            self._state.notify_all()
        if self._starved:
            # the last claim found due messages it could not take: this one's end may free
            # its group or a slot under a cap
            self._wake.set()

    def _renewed(self, envelope: Envelope[DelayedQueue]) -> bool:
        """Whether the worker still holds ``envelope``, about to be handled, whose lock expired
        while it waited in the buffer (no heartbeat, or one that could not reach the
        database): renewed, unless another consumer took the message meanwhile, which then
        handles it, not this worker."""
        try:
            if _at_once(envelope.extend):
                return True
        except Exception as exc:  # unreachable: handled, as the lock may yet hold
            log.warning("could not renew the expired lock of %s before handling it: %s",
                        envelope.key, exc)
            return True
        log.warning("the lock of %s expired before its handler started and the message "
                    "was claimed again or changed meanwhile: not handled here", envelope.key)
        return False

    def _process(self, envelope: Envelope[DelayedQueue]) -> bool:
        if self._hears_started:
            self._events.emit("started", envelope)
        began = time.perf_counter()
        try:
            with envelope.queue.tracer.process(envelope):
                self._handlers.call(self.handler, envelope)
        except Exception as exc:
            try:
                if self.isolated:  # a shard that is down does not hold a handler up
                    _at_once(partial(self._fail, envelope, exc, None))
                else:
                    self._patiently(partial(self._fail, envelope, exc, None),
                                    until=self._abandon)
            except Exception:
                log.exception("could not record the failure of %s; it comes back when its "
                              "lock expires", envelope.key)
            return False
        if self._hears_succeeded:
            self._events.emit("succeeded", envelope,
                              timedelta(seconds=time.perf_counter() - began))
        return True

    def _ack_loop(self) -> None:
        """Send the acks of the handlers that returned, never waiting for a claim: the first
        within ``ack_window`` of its handler's return, with the others that returned in that
        window. The worker holds their locks until they are sent (the heartbeat renews them);
        what is left at the end goes with the shutdown."""
        window = self.ack_window.total_seconds()
        try:
            while True:
                wait_event(self._acks_waiting, None)
                if self._stop.is_set() or (window and wait_event(self._stop, window)):
                    return
                self._acks_waiting.clear()  # before the flush: a later ack sets it again
                self._patiently(self._flush_acks)
        except Exception as exc:
            self._fatal = exc
            self._events.emit("crashed", exc, False)
            self.stop()

    def _flush_acks(self) -> bool:
        with self._lock:
            batch, self._to_ack = self._to_ack, []
            self._acking.update(batch)
        try:
            return self._send_acks(batch)
        finally:
            with self._lock:
                self._acking.difference_update(batch)

    def _send_acks(self, batch: list[Envelope[DelayedQueue]]) -> bool:
        # of queues that are down (isolated), for their return
        later: list[Envelope[DelayedQueue]] = []
        try:
            for envelopes in _by_queue(batch):
                name = self._name_of[id(envelopes[0].queue)]
                if self.isolated and self._rotation.is_down(name, time.monotonic()):
                    later.extend(envelopes)
                elif self._patiently_on(name, partial(envelopes[0].queue.ack_many,
                                                      envelopes), patient=False) is _DOWN:
                    later.extend(envelopes)
        except BaseException:
            with self._lock:
                self._to_ack[:0] = batch  # acks are idempotent: send them again later
            raise
        if later:
            with self._lock:
                self._to_ack[:0] = later
        self._acked += len(batch) - len(later)
        return True

    def _shut_down(self, handlers: list[Spawned]) -> None:
        with self._lock:
            unstarted = [*self._buffer]
            self._buffer.clear()
            self._closing = True
            self._work.notify_all()
        deadline = time.monotonic() + self.grace_period.total_seconds()
        for envelope in unstarted:  # back to the queue at once, not when their locks expire
            self._until(deadline, partial(envelope.queue.release, envelope))
        for handler in handlers:
            handler.join(max(0.0, deadline - time.monotonic()))
        self._abandon.set()
        self._until(deadline + 5.0, self._flush_acks)
        still = [h for h in handlers if h.alive]
        if still:
            log.warning("%d handler(s) still running after the grace period of %s; their "
                        "messages come back when their locks expire", len(still),
                        self.grace_period)
        if unstarted:
            log.info("released %d unstarted message(s)", len(unstarted))

    # ---- transactional -------------------------------------------------------------------------

    def _run_transactional(self, until_idle: bool) -> None:
        loops = [spawn(partial(self._transactional_loop, until_idle), f"sqldelay-tx-{i}")
                 for i in range(self.concurrency)]
        try:
            if until_idle:
                for loop in loops:
                    loop.join()
            else:
                self._stop.wait()
        finally:
            self._stop.set()
            deadline = time.monotonic() + self.grace_period.total_seconds()
            for loop in loops:
                loop.join(max(0.0, deadline - time.monotonic()))
            if any(loop.alive for loop in loops):
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
        with self._lock:
            turns = self._rotation.turns(time.monotonic())
        for name, count in turns:
            handled = self._patiently_on(name, partial(self._transaction_on, name, count),
                                         patient=False)
            if handled and handled is not _DOWN:
                return handled
        return 0

    def _transaction_on(self, name: str, count: int) -> int:
        queue = self.queues[name]
        with queue.engine.connect() as conn:
            run_op(conn, queue.dao.begin_write)
            batch = queue.poll_many(count, by=self.name, connection=conn)
            with self._lock:
                self._rotation.claimed(name, len(batch), time.monotonic())
            if not batch:
                conn.rollback()
                return 0
            self._events.emit("picked", batch)
            done: list[tuple[Envelope[DelayedQueue], float]] = []
            for i, envelope in enumerate(batch):
                if self._stop.is_set():
                    for rest in batch[i:]:
                        queue.release(rest, connection=conn)
                    break
                self._events.emit("started", envelope)
                began = time.perf_counter()
                try:
                    with envelope.queue.tracer.process(envelope):
                        with conn.begin_nested():
                            self._handlers.call_with_connection(self.handler, envelope,
                                                                conn)
                except Exception as exc:
                    try:
                        self._fail(envelope, exc, conn)
                    except Exception as problem:
                        if self.is_outage(problem):
                            raise  # the transaction is gone: the whole round runs again
                        log.exception("could not record the failure of %s; it comes back "
                                      "when its lock expires", envelope.key)
                else:
                    done.append((envelope, time.perf_counter() - began))
            queue.ack_many([e for e, _ in done], connection=conn)
            conn.commit()
        with self._lock:
            self._rotation.done(name, len(batch))
            self._handled += len(done)
        for envelope, seconds in done:
            self._events.emit("succeeded", envelope, timedelta(seconds=seconds))
        return len(batch)

    # ---- failures ------------------------------------------------------------------------------

    def _fail(self, envelope: Envelope[DelayedQueue], error: Exception,
              conn: Connection | None) -> None:
        """Retry later, or bury after the last allowed attempt (in ``conn``'s transaction when
        given)."""
        delay = self.retry_delay(envelope.attempt, envelope, error)
        if delay is None:
            letters = self.dead_letters[self._name_of[id(envelope.queue)]]
            if letters.bury(envelope, error_text(error), connection=conn):
                self._events.emit("dead_lettered", envelope, error)
            return
        envelope.queue.release(envelope, delay=delay, error=error_text(error),
                               connection=conn)
        self._events.emit("failed", envelope, error, delay)

    # ---- sleeping, heartbeats, wake-ups -----------------------------------------------------

    def _sleep_until_due(self) -> None:
        idle = self.idle_poll.total_seconds()
        timeout = idle
        for name, queue in self.queues.items():
            if self.isolated and self._rotation.is_down(name, time.monotonic()):
                continue
            due = self._patiently_on(name, queue.next_due)
            if due is None or due is _DOWN:
                continue
            until_due = (due - queue.clock.now()).total_seconds()
            if until_due <= 0:
                control = self._patiently_on(name, queue.flow_control)
                if control is None or control is _DOWN or control.paused:
                    continue  # a resume wakes listening workers; others look after idle_poll
            elif len(self.queues) > 1:  # when the sleep ends for another queue, skip this one
                with self._lock:
                    self._rotation.quiet(name, time.monotonic() + min(until_due, idle))
            timeout = min(timeout, max(until_due, MIN_IDLE))
        with self._lock:
            up = self._rotation.next_up(time.monotonic())
        if up is not None:
            timeout = min(timeout, max(up, MIN_IDLE))
        # an offer in this process of a message due before then wakes the worker
        self._sleeper.until_ms = min(q.now_ms() for q in self.queues.values()) + timeout * 1000
        woken = wait_event(self._wake, timeout)
        self._sleeper.until_ms = math.inf
        if woken:
            self._rotation.wake()

    def _heartbeat_loop(self) -> None:
        """Renew every message the worker holds, until its ack is sent, every ``heartbeat``
        from the start of the last beat (a slow beat does not push the next one back): one
        statement per queue and claim batch."""
        assert self.heartbeat is not None  # the loop runs only with a heartbeat
        interval = self.heartbeat.total_seconds()
        beat = time.monotonic()
        while not wait_event(self._stop, max(0.0, beat + interval - time.monotonic())):
            beat = time.monotonic()
            with self._lock:
                held = [*self._running, *self._buffer, *self._to_ack, *self._acking]
            for envelopes in _by_queue(held):
                try:
                    renewed = _at_once(partial(envelopes[0].queue.extend_many,
                                               envelopes))
                except Exception as exc:  # the next beat tries again; the locks may yet hold
                    log.warning("heartbeat could not renew %d lock(s) of queue %s: %s",
                                len(envelopes), envelopes[0].queue.name, exc)
                    continue
                if len(renewed) < len(envelopes):
                    kept = set(renewed)
                    for envelope in envelopes:
                        if envelope not in kept:
                            self._lost(envelope)

    def _lost(self, envelope: Envelope[DelayedQueue]) -> None:
        """The lock of ``envelope`` is gone (acked meanwhile, or taken by another consumer
        after it expired): if its handler has not started, it never will here."""
        with self._lock:
            if envelope in self._buffer:
                self._buffer.remove(envelope)
                self._rotation.done(self._name_of[id(envelope.queue)])
                log.warning("the lock of %s was lost before its handler started: not handled "
                            "here", envelope.key)
                if not self._buffer:
                    self._state.notify_all()

    def _prune_loop(self) -> None:
        """Prune the history of the queues kept for a retention, now and every
        ``prune_every``, in bounded batches."""
        assert self.prune_every is not None  # the loop runs only then (``pruned_queues``)
        while True:
            for queue in self.pruned_queues():
                try:
                    self._patiently(queue.prune_history)
                except Exception:  # the next round tries again
                    log.exception("could not prune the history of queue %s", queue.name)
            if wait_event(self._stop, self.prune_every.total_seconds()):
                return

    def _listen_loop(self, queues: list[DelayedQueue]) -> None:
        first = queues[0]
        pkinds = {q.pkind for q in queues}
        try:
            self._patiently(partial(listen, first.engine, first.dao, pkinds, self.wake,
                                    self._stop))
        except UnsupportedDialectError as exc:
            log.warning("no wake-ups, polling only: %s", exc)
        except Exception:
            log.exception("wake-ups stopped, polling only")

    # ---- riding out a lost database ------------------------------------------------------------

    def _patiently(self, fn: Call[T], *, until: Event | None = None) -> T | None:
        """Run ``fn``, retrying with backoff while the database is unreachable, until ``until``
        (default: stop) is set; None when it was set first. Other errors propagate."""
        event = self._stop if until is None else until
        if event.is_set():
            return None

        def pause(seconds: float) -> None:  # woken by the event
            wait_event(event, seconds)

        # stop once the event is set (tenacity's stop_when_event_set takes a threading.Event)
        retrying = Retrying(
            retry=retry_if_exception(self.is_outage),
            wait=wait_random_exponential(multiplier=0.05, max=MAX_BACKOFF),
            stop=lambda state: event.is_set(), sleep=pause, reraise=True,
            before_sleep=self._outage)
        def attempt() -> T:  # a plain def, so the retrying returns what fn returns
            return _at_once(fn)

        try:
            return retrying(attempt)
        except Exception as exc:
            if self.is_outage(exc) and event.is_set():
                return None
            raise

    def _patiently_on(self, name: str, fn: Call[T], *,
                      patient: bool = True) -> T | _Down | None:
        """``_patiently(fn)`` for the queue named ``name``, or, when the worker's queues are
        isolated (on several engines), one attempt: when it finds the queue's database
        unreachable, the queue sits out a backoff and _DOWN is returned, so the others are
        served meanwhile. ``patient=False``: one attempt in any case, outages raised (on one
        engine) for the caller's own retry."""
        if not self.isolated:
            return self._patiently(fn) if patient else _at_once(fn)
        if patient and self._stop.is_set():
            return None
        try:
            result = _at_once(fn)
        except Exception as exc:
            if not self.is_outage(exc):
                raise
            with self._lock:
                backoff = self._rotation.failed(name, time.monotonic())
            log.warning("queue %s unavailable, trying again in %.2fs: %s: %s", name, backoff,
                        type(exc).__name__, (str(exc).splitlines() or [""])[0])
            self._events.emit("crashed", exc, True)
            return _DOWN
        with self._lock:
            self._rotation.reachable(name)
        return result

    def _outage(self, state: RetryCallState) -> None:
        assert state.outcome is not None  # called before a retry: after an attempt that raised
        error = state.outcome.exception()
        assert error is not None
        log.warning("%s, retrying in %.2fs: %s: %s", trouble(error, self.queues.values()),
                    state.upcoming_sleep, type(error).__name__, str(error).splitlines()[0])
        self._events.emit("crashed", error, True)

    def _until(self, deadline: float, fn: Call[T]) -> None:
        """Shutdown work: retry through an outage until ``deadline``, then give up (logged)."""
        retrying = Retrying(
            retry=retry_if_exception(self.is_outage),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(max(0.0, deadline - time.monotonic())), reraise=True)
        def attempt() -> T:
            return _at_once(fn)

        try:
            retrying(attempt)
        except Exception as exc:
            log.warning("giving up at shutdown: %s: %s", type(exc).__name__, exc)


class _Down(enum.Enum):
    DOWN = enum.auto()


_DOWN: Final = _Down.DOWN  # what _patiently_on answers for a queue whose database is down
# what a claim of _claim_next answers: its batch, _DOWN, or None (the worker stopped)
_Claimed: TypeAlias = list[Envelope[DelayedQueue]] | _Down | None


def _at_once(fn: Call[T]) -> T:
    """``fn()`` of the worker's own, which raises at once when the database is unreachable
    (``patience(0)``): the worker waits out an outage between its calls, where it hears
    ``stop`` and its heartbeat goes on, not inside one. A handler keeps its queue's patience
    but in transactional mode, where it runs inside the worker's round."""
    with patience(0):
        return fn()


def _claim_sizes(count: int, batches: int) -> list[int]:
    """The claims that take ``batches`` batches of ``count`` at once: two where there are two
    or more (one per connection), sharing them as evenly as they can. A claim's own work on
    the server (its statement, its commit, its walk past the rows the claim beside it has
    locked) costs more than its rows': four batches taken by two claims instead of four, the
    drain of 10,000 no-op jobs went from 2.01-2.46 to 2.19-2.57 times pgqueuer's
    (benchmarks/METHOD.md, "Two claims at once")."""
    total, claims = count * batches, min(2, batches)
    return [total // claims + (i < total % claims) for i in range(claims)]


def _claimed_side_by_side(claims: Sequence[Call[_Claimed]]) -> _Claimed:
    """Claims side by side: their batches as one; None where none claimed because the worker
    stopped, _DOWN where all found the database down."""
    outcomes = side_by_side(claims)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
    batches = [outcome for outcome in outcomes if isinstance(outcome, list)]
    if batches:
        return [envelope for batch in batches for envelope in batch]
    return None if any(outcome is None for outcome in outcomes) else _DOWN


def _by_queue(envelopes: list[Envelope[DelayedQueue]]
              ) -> list[list[Envelope[DelayedQueue]]]:
    """Envelopes grouped by the queue that claimed them, each group in order."""
    groups: dict[int, list[Envelope[DelayedQueue]]] = {}
    for envelope in envelopes:
        groups.setdefault(id(envelope.queue), []).append(envelope)
    return list(groups.values())
