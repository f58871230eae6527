"""Handlers the worker processes of these tests import (``tests.cli.handlers:handle``)."""

from __future__ import annotations


def handle(envelope) -> None:
    """Succeeds, unless the payload asks it to fail."""
    if isinstance(envelope.payload, dict) and envelope.payload.get("fail"):
        raise ValueError("asked to fail")
