"""Django tasks of the backend's tests (tasks must be module-level functions)."""

from __future__ import annotations

import asyncio

from sqldelay.django.framework import task

RAN: list = []


@task
def add(a: int, b: int = 0) -> int:
    RAN.append(("add", a, b))
    return a + b


@task(priority=10)
def urgent(n: int) -> int:
    RAN.append(("urgent", n))
    return n


@task(queue_name="emails")
def send(to: str) -> dict:
    RAN.append(("send", to))
    return {"sent": to}


@task(takes_context=True)
def with_context(context, n: int) -> dict:
    return {"id": context.task_result.id, "attempt": context.attempt, "n": n}


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
async def awaits(n: int) -> int:
    await asyncio.sleep(0)
    return n * 3


@task
def labelled() -> None:
    """Deferred by no test: a worker meets its name first in a message (the metrics' label)."""
