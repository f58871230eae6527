"""Handlers that the benchmarks' worker processes import by name
(``sqldelay worker benchmarks.handlers:noop``): a module of its own, so that a worker's
start-up imports nothing of the suite."""

from __future__ import annotations


def noop(envelope) -> None:
    """Does nothing: what is measured is the queue's own work per message."""
