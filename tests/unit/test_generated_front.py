"""The blocking front end is generated from the asyncio one (tools/async_to_sync.py): the
modules in the repository must be what the tool makes of the async sources today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import async_to_sync  # noqa: E402


def test_generated_modules_are_up_to_date():
    done = subprocess.run([sys.executable, "tools/async_to_sync.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_conversion_drops_async_and_renames_in_code_and_text():
    source = '''"""Uses AsyncEngine."""
from .concurrency_async import AsyncConnection, Event, wait_event


async def first(conn: AsyncConnection,
                other: int) -> None:  # an AsyncConnection
    async with conn.begin():
        await wait_event(Event(), await conn.scalar(
            "SELECT 'await'"))
    return await (await conn.execute("x")).first()  # sync: return conn.execute("y").first()
'''
    assert async_to_sync.convert(source, "demo_async.py").split("\n", 2)[2] == '''"""Uses Engine."""
from .concurrency import Connection, Event, wait_event


def first(conn: Connection,
          other: int) -> None:  # an Connection
    with conn.begin():
        wait_event(Event(), conn.scalar(
            "SELECT 'await'"))
    return conn.execute("y").first()
'''


def test_comments_and_docstrings_say_what_the_blocking_twin_does():
    source = '''async def outer(fn):
    """Runs ``await fn()`` in ``async with lock``."""
    async def attempt():  # an async def, so the retrying awaits what fn returns
        return await fn()
    return attempt
'''
    assert async_to_sync.convert(source, "demo_async.py").split("\n", 2)[2] == '''def outer(fn):
    """Runs ``fn()`` in ``with lock``."""
    def attempt():  # a plain def, so the retrying returns what fn returns
        return fn()
    return attempt
'''


def test_a_comment_still_about_awaiting_is_refused():
    source = '''def handle(fn):
    return fn()  # awaited on the loop
'''
    with pytest.raises(SystemExit, match="'awaited' left in a comment"):
        async_to_sync.convert(source, "demo_async.py")
