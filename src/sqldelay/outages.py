"""Patience: how long an operation made without ``connection=`` waits out a database it has
reached before and cannot reach now (a failover, a restart) before it raises.

One setting for both front ends (this module is not generated, so a ``patience`` block
covers ``DelayedQueue`` and ``AsyncDelayedQueue`` alike), looked up in this order: the
innermost ``with patience(...)`` block of the current thread or asyncio task, then the
queue's own ``patience=``, then the process-wide default (``set_default_patience``;
``DEFAULT_PATIENCE`` until set). The default rides out the failovers measured in
docs/high-availability.md (1.7 to 3.5 s with a tuned Patroni) and a quick restart. No new
attempt starts after the patience is spent, so a call raises at most one attempt later (an
attempt lasts as long as the driver's connect timeout allows). A worker's and a cron
installer's own calls run with ``patience(0)``: they wait out outages between calls, where
they stay responsive to ``stop``/``close`` (and the worker keeps its heartbeat going).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import timedelta

from .errors import InvalidArgumentError

DEFAULT_PATIENCE = 10.0  # seconds

_default = DEFAULT_PATIENCE
# the innermost ``patience`` block of this thread or task; None outside any
_block: ContextVar[float | None] = ContextVar("sqldelay_patience", default=None)


def seconds_of(value: float | timedelta, what: str = "patience") -> float:
    """``value`` in seconds, refused unless finite and not negative."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"{what} must be a finite duration of 0 or more, "
                                   f"got {value!r}")
    return float(seconds)


@contextlib.contextmanager
def patience(seconds: float | timedelta) -> Iterator[None]:
    """Within the block, the operations of this thread or task made without
    ``connection=`` (offers, claims, acks, ...) wait out an outage for up to ``seconds``
    before they raise, whatever their queue or the default say; 0: they raise at once."""
    token = _block.set(seconds_of(seconds))
    try:
        yield
    finally:
        _block.reset(token)


def set_default_patience(seconds: float | timedelta) -> None:
    """The patience of every queue created without ``patience=``, outside ``patience``
    blocks, in this process (0: raise at once, as sqldelay did before it waited)."""
    global _default
    _default = seconds_of(seconds)


def current_patience(own: float | None) -> float:
    """The patience in force here for a queue whose own setting is ``own`` (None: none)."""
    block = _block.get()
    if block is not None:
        return block
    return _default if own is None else own
