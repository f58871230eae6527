"""Offered and acked messages per minute of each queue, sampled by the service for the
dashboard's charts.

The counts come from the event history (``create_schema(history=True)`` and queues made with
``history=``): every ``every`` seconds the sampler counts the OFFERED and ACKED events written
since its last sample, reading along the history's primary key, and adds them to the minute
of the sample. Without a history table there is nothing to count, and the snapshot says so.
The counts are for watching, not accounting: an event whose transaction commits after a later
event was sampled is not counted, and the service only counts while it runs.

The first sample only finds where to start, mid-minute: that minute is counted in part, and the
first minute counted whole (``since``) is the next. The dashboard draws whole minutes only, so
neither that first minute nor the current one, still being counted, shows as a fall.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ..executor_async import AsyncExecutor
from ..history import EventKind, Recorder
from ..schema import history_table

log = logging.getLogger("sqldelay.web")
KINDS = (EventKind.OFFERED, EventKind.ACKED)
MINUTES = 60  # minutes kept per queue


class Sampler:
    def __init__(self, executor: AsyncExecutor, table_name: str, every: timedelta) -> None:
        if not isinstance(every, timedelta) or every.total_seconds() <= 0:
            raise ValueError(f"sample_every must be a positive timedelta, got {every!r}")
        self.executor = executor
        self.recorder = Recorder(history_table(sa.MetaData(), table_name), executor.dao)
        self.every = every.total_seconds()
        self.problem: str | None = "not sampled yet"
        # the wall clock (epoch seconds) each sample goes to its minute by; a test moves it
        self.clock: Callable[[], float] = time.time
        self._last_id: int | None = None
        self._since: int | None = None  # the first minute (epoch ms) counted whole
        self._minute: int | None = None  # the minute of the last sample
        # pkind -> minute (epoch ms) -> [offered, acked]
        self._minutes: dict[str, dict[int, list[int]]] = defaultdict(dict)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Sample in the background on the running loop, from now on (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="sqldelay-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.every)

    async def sample(self) -> None:
        """Count the events since the last sample (the first only finds where to start)."""
        try:
            last, counts = await self.executor.run(
                self.recorder.counts_op(self._last_id, KINDS), write=False)
        except Exception as exc:  # no history table, or the database away: shown, retried
            self.problem = (f"no throughput: the event history cannot be read "
                            f"({type(exc).__name__}); it needs create_schema(history=True) "
                            "and queues made with history=")
            log.debug("throughput sample failed", exc_info=True)
            return
        self.problem = None
        now_ms = int(self.clock() * 1000)
        minute = now_ms // 60_000 * 60_000
        if self._last_id is None:  # counting starts now: with the next minute, a whole one
            self._since = minute if now_ms == minute else minute + 60_000
        self._last_id = last
        self._minute = minute
        for (pkind, kind), n in counts.items():
            slot = self._minutes[pkind].setdefault(minute, [0, 0])
            slot[KINDS.index(kind)] += n
        oldest = minute - (MINUTES - 1) * 60_000
        for pkind, per_minute in list(self._minutes.items()):
            for old in [m for m in per_minute if m < oldest]:
                del per_minute[old]
            if not per_minute:  # a queue quiet for the last hour is forgotten
                del self._minutes[pkind]

    def snapshot(self) -> dict[str, Any]:
        """What the dashboard draws: the first minute counted whole (None: not sampled yet),
        the minute of the last sample (the current one, counted so far), and per queue
        (``name|type``) [minute, offered, acked] for each minute with events, oldest first
        (minutes are epoch milliseconds, by the service's clock)."""
        return {"every_seconds": self.every, "problem": self.problem, "since": self._since,
                "minute": self._minute,
                "queues": {pkind: [[m, *counts] for m, counts in sorted(per_minute.items())]
                           for pkind, per_minute in self._minutes.items()}}
