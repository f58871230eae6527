"""Tests of the task layer (sqldelay.tasks) and what it brings to the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


def run_on_async_engine(async_url: str, scenario: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``scenario(engine)`` on a new event loop with an async engine of ``async_url``,
    disposed of afterwards."""
    from sqlalchemy.ext.asyncio import create_async_engine

    async def run() -> None:
        engine = create_async_engine(async_url)
        try:
            await scenario(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())
