"""Recurring messages of a queue, for this front end, with background installers.
``cron_base`` holds the schedules' keys, checks and statements, so every front end installs the
same ticks under the same keys: a schedule installed by two processes is one schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from .concurrency_async import Call, Event, Lock, spawn, wait_event
from .cron_base import (
    CronMessage,
    CronServiceBase,
    InstalledSchedule,
    check_hash,
    check_prefix,
)
from .messages import OfferOutcome
from .outages import patience
from .schedules import CronSchedule, PeriodicSchedule, Schedule, daily

if TYPE_CHECKING:  # the queue module imports this one
    from .queue_async import AsyncDelayedQueue

log = logging.getLogger("sqldelay.cron")


class AsyncCronHandle:
    """The background installer of one schedule in this process; ``close()`` stops it.

    It re-installs every ``refresh`` (and soon after each tick falls due) so that ``ahead``
    ticks stay stored, and logs and carries on when an install fails (database unreachable).
    Closing stops only this process's installing; the stored ticks stay (see ``uninstall``).
    """

    def __init__(self, prefix: str, config_hash: str, install_once: Call[float],
                 refresh: float, first_wait: float) -> None:
        self.prefix = prefix
        self.config_hash = config_hash
        self._install_once = install_once
        self._refresh = refresh
        self._first_wait = first_wait
        self._stop = Event()
        self._task = spawn(self._loop, f"sqldelay-cron-{prefix}")

    def __repr__(self) -> str:
        state = "running" if self.running else "closed"
        return f"{type(self).__name__}({self.prefix!r}, {self.config_hash!r}, {state})"

    @property
    def running(self) -> bool:
        return self._task.alive

    async def close(self, timeout: float | None = None) -> None:
        """Stop the installer and wait for it (an install under way finishes first)."""
        self._stop.set()
        if not self._task.is_current():
            await self._task.join(timeout)

    async def __aenter__(self) -> AsyncCronHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _loop(self) -> None:
        wait = self._first_wait
        while not await wait_event(self._stop, wait):
            try:
                # no patience: the next round, ``refresh`` on, rides out an outage, and close()
                # is heard meanwhile
                with patience(0):
                    wait = await self._install_once()
            except Exception:  # any failure: log it, keep the schedule alive, try again later
                log.warning("installing cron schedule %r failed; trying again in %.3g s",
                            self.prefix, self._refresh, exc_info=True)
                wait = self._refresh


class AsyncCronService(CronServiceBase):
    """Recurring messages of one queue. ``refresh``: how often each installer re-installs."""

    queue: AsyncDelayedQueue
    _handles: dict[str, AsyncCronHandle]

    def __init__(self, queue: AsyncDelayedQueue, *,
                 refresh: timedelta = timedelta(minutes=1)) -> None:
        super().__init__(queue, refresh=refresh)
        self._lock = Lock()

    # ---- schedules with a background installer -------------------------------------------

    async def install_cron(self, prefix: str, expression: str, *, payload: Any = None,
                           payload_fn: Callable[[datetime], Any] | None = None,
                           tz: str | ZoneInfo = "UTC", ahead: int = 4, version: str = "",
                           priority: int = 0) -> AsyncCronHandle:
        """Install a 5-field cron expression (or ``@hourly``, ``@daily``, …) in time zone ``tz``.

        Daylight-saving transitions follow the rule in ``sqldelay.schedules``: a skipped wall
        time fires once when the clocks jump, a repeated one once at its first occurrence.
        Ticks carry ``priority`` (higher: claimed before other due messages).
        """
        return await self._install(prefix, CronSchedule.parse(expression, tz), payload,
                                   payload_fn, ahead, version, priority)

    async def install_periodic(self, prefix: str, every: timedelta, *, payload: Any = None,
                               payload_fn: Callable[[datetime], Any] | None = None,
                               ahead: int = 4, version: str = "",
                               priority: int = 0) -> AsyncCronHandle:
        """Install ticks every ``every`` (at least a second), at the multiples of ``every``
        since the Unix epoch, so every process computes the same instants."""
        return await self._install(prefix, PeriodicSchedule.of(every), payload, payload_fn,
                                   ahead, version, priority)

    async def install_daily(self, prefix: str, at_hours: Sequence[int], *,
                            tz: str | ZoneInfo = "UTC", payload: Any = None,
                            payload_fn: Callable[[datetime], Any] | None = None,
                            ahead: int = 4, version: str = "",
                            priority: int = 0) -> AsyncCronHandle:
        """Install ticks every day at the whole hours ``at_hours`` of ``tz``'s wall clock."""
        return await self._install(prefix, daily(at_hours, tz), payload, payload_fn, ahead,
                                   version, priority)

    async def install_task(self, task: Any, when: str | timedelta | Schedule, *,
                           args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                           prefix: str | None = None, tz: str | ZoneInfo = "UTC",
                           ahead: int = 4, version: str = "",
                           priority: int | None = None) -> AsyncCronHandle:
        """Install ticks that each run ``task`` (``@tasks.task``) with these arguments,
        checked now as ``defer`` checks them (InvalidArgumentError, nothing installed).
        ``when``: a 5-field cron expression (or ``@daily``, …) in ``tz``, a timedelta
        (``install_periodic``'s ticks), or a Schedule (``sqldelay.schedules.daily``).
        ``prefix``: the schedule's name, default the task's name; ``priority``: default the
        task's. New arguments are a new configuration: they replace the ticks stored."""
        installation = self.prepare_task(task, when, args, kwargs, prefix, tz, ahead, version,
                                         priority)
        return await self._install(installation.prefix, installation.schedule,
                                   installation.payload, None, ahead, version,
                                   installation.priority)

    async def _install(self, prefix: str, schedule: Schedule, payload: Any,
                       payload_fn: Callable[[datetime], Any] | None, ahead: int,
                       version: str, priority: int) -> AsyncCronHandle:
        """Validate, install once in the caller (errors reach the caller), then start this
        process's background installer, replacing the one it had for ``prefix``."""
        installation = self.prepare(prefix, schedule, payload, payload_fn, ahead, version,
                                    priority)

        async def install_once() -> float:
            """Install the next ``ahead`` ticks; returns seconds until the next install."""
            now = await self.queue.now()
            await self.install_tick(installation.config_hash, prefix, installation.ticks(now))
            return self.next_wait(installation, now)

        async with self._lock:
            old = self._handles.pop(prefix, None)
            if old is not None:
                await old.close()
            first_wait = await install_once()
            handle = AsyncCronHandle(prefix, installation.config_hash, install_once,
                                     self._refresh_s, first_wait)
            self._handles[prefix] = handle
            return handle

    # ---- the low level: ticks computed by the caller ---------------------------------------

    async def install_tick(self, config_hash: str, prefix: str,
                           messages: Sequence[CronMessage]) -> list[OfferOutcome]:
        """Store ``messages`` as configuration ``config_hash`` of ``prefix``, in one transaction.

        First deletes the not-yet-due messages of every other configuration under ``prefix``
        (not those a consumer holds), then inserts each tick unless its key exists. Outcomes
        are in input order: CREATED, or IGNORED for a tick already stored.
        """
        op = self.install_tick_op(config_hash, prefix, messages)
        return await self.queue.executor.run(op, write=True, read_committed=True)

    async def uninstall_tick(self, config_hash: str, prefix: str) -> int:
        """Delete configuration ``config_hash``'s stored ticks but those a consumer holds."""
        check_prefix(prefix)
        check_hash(config_hash)
        return await self.queue.executor.run(self.delete_op(f"{prefix}/{config_hash}/"),
                                             write=True)

    async def uninstall(self, prefix: str) -> int:
        """Stop this process's installer of ``prefix`` and delete every stored tick under it
        (of any configuration) but those a consumer holds; returns how many were deleted.

        Installers of ``prefix`` in other processes would store ticks again: stop them first.
        """
        check_prefix(prefix)
        async with self._lock:
            handle = self._handles.pop(prefix, None)
            if handle is not None:
                await handle.close()
            return await self.queue.executor.run(self.delete_op(prefix + "/"), write=True)

    # ---- inspecting and stopping ----------------------------------------------------------

    async def list(self, prefix: str | None = None) -> list[InstalledSchedule]:
        """The configurations stored in the queue (by any process), by prefix, with their
        next due times. Without ``prefix`` it reads every key of the queue; messages whose
        keys are not tick keys are not shown."""
        return await self.queue.executor.run(self.list_op(prefix), write=False)

    async def close(self) -> None:
        """Stop every background installer this service started."""
        async with self._lock:
            handles = [*self._handles.values()]
            self._handles.clear()
        for handle in handles:
            await handle.close()
