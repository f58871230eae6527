"""RetryPolicy: how long a failed message waits before its next attempt, and how many it gets.

The delay is a function of ``envelope.attempt`` (1 for the first delivery), which the database
counts, so the schedule survives worker restarts: a message that failed twice in another process
waits as long here as it would have there.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from .clock import duration_ms
from .errors import InvalidArgumentError


@dataclass(frozen=True)
class RetryPolicy:
    """``delay(attempt)`` after a failed attempt; dead letter once ``max_attempts`` have failed.

    Build one with ``fixed``, ``linear``, ``exponential`` or ``custom``. ``max_attempts=None``
    retries for ever.
    """

    schedule: Callable[[int], timedelta] = field(repr=False)
    max_attempts: int | None
    description: str

    def __post_init__(self) -> None:
        if self.max_attempts is not None and (
                not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool)
                or self.max_attempts < 1):
            raise InvalidArgumentError(
                f"max_attempts must be a positive integer or None, got {self.max_attempts!r}")

    def __str__(self) -> str:
        return self.description

    def gives_up_after(self, attempt: int) -> bool:
        """True when the attempt that just failed was the last one allowed."""
        return self.max_attempts is not None and attempt >= self.max_attempts

    def delay(self, attempt: int) -> timedelta:
        """How long to wait after failed attempt number ``attempt`` (1-based)."""
        if not isinstance(attempt, int) or attempt < 1:
            raise InvalidArgumentError(f"attempt must be a positive integer, got {attempt!r}")
        result = self.schedule(attempt)
        duration_ms(result, f"the retry delay after attempt {attempt}")  # a timedelta, >= 0
        return result

    @classmethod
    def fixed(cls, delay: timedelta, *, max_attempts: int | None = 10) -> RetryPolicy:
        """The same delay after every failure."""
        _check_delay(delay, "delay")
        return cls(lambda attempt: delay, max_attempts, f"fixed({delay})")

    @classmethod
    def linear(cls, initial: timedelta, increment: timedelta, *,
               max_delay: timedelta | None = None,
               max_attempts: int | None = 10) -> RetryPolicy:
        """``initial``, then ``initial + increment``, ``initial + 2 * increment``, … capped."""
        _check_delay(initial, "initial")
        _check_delay(increment, "increment")
        cap = _check_cap(max_delay)

        def schedule(attempt: int) -> timedelta:
            return min(initial + increment * (attempt - 1), cap)

        return cls(schedule, max_attempts, f"linear({initial}, +{increment}, max {cap})")

    @classmethod
    def exponential(cls, initial: timedelta, factor: float = 2.0, *,
                    max_delay: timedelta | None = None, max_attempts: int | None = 10,
                    jitter: float = 0.0, rng: random.Random | None = None) -> RetryPolicy:
        """``initial * factor ** (attempt - 1)``, capped at ``max_delay``.

        ``jitter`` in [0, 1] spreads each delay uniformly over ``[d * (1 - jitter), d]`` so
        messages that failed together (an outage) do not all come back at the same instant.
        """
        _check_delay(initial, "initial")
        if not isinstance(factor, int | float) or isinstance(factor, bool) or factor < 1:
            raise InvalidArgumentError(f"factor must be a number >= 1, got {factor!r}")
        if not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise InvalidArgumentError(f"jitter must be between 0 and 1, got {jitter!r}")
        cap = _check_cap(max_delay)
        draw = (rng or random.Random()).random

        def schedule(attempt: int) -> timedelta:
            try:
                seconds = initial.total_seconds() * float(factor) ** (attempt - 1)
            except OverflowError:  # a huge attempt number: the cap applies
                seconds = float("inf")
            base = cap if seconds >= cap.total_seconds() else initial * factor ** (attempt - 1)
            return base * (1 - jitter * draw()) if jitter else base

        return cls(schedule, max_attempts,
                   f"exponential({initial}, x{factor}, max {cap}, jitter {jitter})")

    @classmethod
    def custom(cls, schedule: Callable[[int], timedelta], *,
               max_attempts: int | None = 10) -> RetryPolicy:
        """Your own function of the attempt number that returns a timedelta."""
        if not callable(schedule):
            raise InvalidArgumentError(f"schedule must be callable, got {schedule!r}")
        name = getattr(schedule, "__name__", type(schedule).__name__)
        return cls(schedule, max_attempts, f"custom({name})")


_FOREVER = timedelta(days=3650)


def _check_delay(value: timedelta, name: str) -> None:
    duration_ms(value, name)


def _check_cap(max_delay: timedelta | None) -> timedelta:
    if max_delay is None:
        return _FOREVER
    _check_delay(max_delay, "max_delay")
    return max_delay
