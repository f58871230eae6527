"""What the producers and the handlers of a high-availability test write down themselves, and
what the test concludes from it: which offers returned, which handlings happened when and
where, which acks returned; never sqldelay's own counters."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from sqldelay import DelayedQueue
from tools import servers

from ..conftest import IN_CI
from ..fronts import unwrap
from ..helpers import in_thread, wait_for

T = TypeVar("T")


@dataclass
class Records:
    lock: threading.Lock = field(default_factory=threading.Lock)
    offered: dict[str, float] = field(default_factory=dict)  # key -> when its offer returned
    committed_on: dict[str, object] = field(default_factory=dict)  # key -> the node, if known
    offer_errors: dict[str, list[BaseException]] = field(default_factory=lambda: defaultdict(list))
    offer_seconds: list[float] = field(default_factory=list)  # how long each offer call took
    # key -> [(when the handler began, who handled it)], in order
    handled: dict[str, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    acked: dict[str, float] = field(default_factory=dict)  # key -> when its ack returned
    # key -> the row id of each handling, where the handler gave it (``handled``'s order)
    rows: dict[str, list[int | None]] = field(default_factory=lambda: defaultdict(list))

    def offer_returned(self, keys, started: float, node: object = None) -> None:
        now = time.monotonic()
        with self.lock:
            for key in keys:
                self.offered[key] = now
                if node is not None:
                    self.committed_on[key] = node
            self.offer_seconds.append(now - started)

    def offer_failed(self, producer: str, error: BaseException, started: float) -> None:
        with self.lock:
            self.offer_errors[producer].append(error)
            self.offer_seconds.append(time.monotonic() - started)

    def handle(self, key: str, who: str, row: int | None = None) -> None:
        with self.lock:
            self.handled[key].append((time.monotonic(), who))
            self.rows[key].append(row)

    def ack_returned(self, keys) -> None:
        now = time.monotonic()
        with self.lock:
            for key in keys:
                self.acked.setdefault(key, now)

    # ---- conclusions -----------------------------------------------------------------------

    def lost(self) -> set[str]:
        """Offers that returned and were never handled."""
        with self.lock:
            return set(self.offered) - set(self.handled)

    def acked_then_redelivered(self) -> dict[str, list[tuple[float, str]]]:
        """Keys handled again after an ack of theirs had returned."""
        with self.lock:
            return {key: runs for key, runs in self.handled.items()
                    if key in self.acked and any(t > self.acked[key] for t, _ in runs)}

    def created_again(self) -> set[str]:
        """Keys handled again after an ack of theirs returned only as other rows than those
        handled before it: messages created anew, by an offer that was sent again after its
        first attempt had committed unseen and been handled and acked meanwhile. An ack
        undone would bring back the row it deleted."""
        with self.lock:
            again = set()
            for key, acked in self.acked.items():
                runs = list(zip(self.handled.get(key, []), self.rows.get(key, []), strict=True))
                before = {row for (t, _), row in runs if t <= acked}
                after = [row for (t, _), row in runs if t > acked]
                if after and all(row is not None and row not in before for row in after):
                    again.add(key)
            return again

    def story(self, key: str) -> dict[str, object]:
        """What the records say of ``key``, for a failure's message."""
        with self.lock:
            return {"offer returned": self.offered.get(key), "ack returned": self.acked.get(key),
                    "handled": self.handled.get(key), "rows": self.rows.get(key)}

    def handled_twice(self) -> dict[str, list[tuple[float, str]]]:
        with self.lock:
            return {key: runs for key, runs in self.handled.items() if len(runs) > 1}

    def first_handled_of(self, node: object, after: float, who: str | None = None) \
            -> float | None:
        """When the first handling (by ``who``, if given), after ``after``, of a message known
        to have been committed on ``node`` began."""
        with self.lock:
            times = [t for key, runs in self.handled.items()
                     if self.committed_on.get(key) == node
                     for t, by in runs if t > after and who in (None, by)]
        return min(times, default=None)

    def first_handled_by(self, who: str, after: float) -> float | None:
        with self.lock:
            times = [t for runs in self.handled.values() for t, by in runs
                     if by == who and t > after]
        return min(times, default=None)

    def offers_after(self, moment: float) -> int:
        with self.lock:
            return sum(1 for t in self.offered.values() if t > moment)


def record_acks(queue, records: Records) -> None:
    """Write down the keys of every ack call of ``queue`` (of either front end) that returned
    having deleted every message it was given."""
    inner = unwrap(queue)
    ack_many = inner.ack_many
    if isinstance(queue, DelayedQueue):
        def recorded(envelopes, **kwargs):
            done = ack_many(envelopes, **kwargs)
            if done == len(envelopes):
                records.ack_returned([e.key for e in envelopes])
            return done
    else:
        async def recorded(envelopes, **kwargs):
            done = await ack_many(envelopes, **kwargs)
            if done == len(envelopes):
                records.ack_returned([e.key for e in envelopes])
            return done
    inner.ack_many = recorded


def started_cluster(start: Callable[[], T]) -> Iterator[T]:
    """For a fixture: the cluster ``start`` makes, destroyed after the test. A component
    missing on this machine skips the test, or fails it when CI=true (.ci/run installs
    them)."""
    try:
        made = start()
    except servers.ServerMissing as exc:
        if IN_CI:
            pytest.fail(f"{exc}; CI=true requires the high-availability tests", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield made
    finally:
        made.destroy()  # type: ignore[attr-defined]


def run_until_handled(workers: list[Any], records: Records, count: int, engines: Iterable[Any],
                      timeout: float = 180) -> None:
    """Run ``workers`` until the handlers wrote down ``count`` keys, then stop them and
    dispose of ``engines``."""
    threads = [in_thread(w.run) for w in workers]
    try:
        wait_for(lambda: len(records.handled) == count, timeout, "every message handled")
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(60)
        for engine in engines:
            engine.dispose()
